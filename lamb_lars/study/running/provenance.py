"""Provenance of a published study folder: ``manifest.json``, and ``verify`` that checks a folder against it.

A published folder holds ``runs.csv``, ``evals.csv`` and a README.md computed from those two files alone
(publish.py). ``manifest.json`` records how they were made:

* ``code``: the commit of the code that ran and reported the study, and whether the tree had uncommitted changes;
* ``commands``: the exact study commands (from the workdir's ``commands.txt``), the report command;
* ``config_sha256``: sha256 of the study config as saved in the workdir (``study_config.json``, sorted keys);
* ``machine``: platform, CPU count and model, Python; ``started`` / ``finished``: the first trial start and the
  last trial end (UTC, ISO 8601);
* ``trials``: the number of trials and the count per status; ``files``: sha256 of runs.csv, evals.csv, README.md;
* ``report_spec``: everything besides the CSVs that the README is computed from (title, settings lines, target …);
* ``workload`` (only when the study's model or dataset is an import path ``pkg.module:Name``, docs/workloads.md):
  per import path, the file that defines it and its sha256, beside our commit, so ``verify`` can tell when a
  researcher's workload changed.

``verify(DIR)`` recomputes: the hashes, the trial counts from runs.csv, and the README itself — it regenerates
the report from the two CSV files and the manifest's ``report_spec`` with the current code and compares it with the
committed README section by section. A folder published by earlier code carries ``"superseded": true`` and may name
sections the current code no longer reproduces (``not_recomputed``: section → why); those sections are covered
by the README's hash only. Each mismatch is one sentence.
"""
from __future__ import annotations

import collections
import csv
import dataclasses
import hashlib
import io
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from typing import Any, Mapping, Optional, Sequence

import lamb_lars
from lamb_lars.common import io_utils
from lamb_lars.study.analysis import report
from lamb_lars.study.running import workload_provenance
from lamb_lars.study.records import Target

MANIFEST = "manifest.json"
HASHED = ("runs.csv", "evals.csv", "README.md")
_REPO = os.path.dirname(os.path.dirname(os.path.realpath(lamb_lars.__file__)))  # the checkout lamb_lars runs from


def sha256(path: str) -> str:
  """sha256 of the file at ``path`` (a local path or an object-store URL, through io_utils)."""
  if io_utils.is_remote(path):
    data = io_utils.read_bytes(path)
    if data is None:
      raise FileNotFoundError(f"{path} does not exist")
    return hashlib.sha256(data).hexdigest()
  h = hashlib.sha256()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      h.update(block)
  return h.hexdigest()


def _csv_rows(path: str) -> list[dict]:
  text = io_utils.read_text(path)
  if text is None:
    raise FileNotFoundError(f"{path} does not exist")
  return list(csv.DictReader(io.StringIO(text, newline="")))


def code_state(repo: str = _REPO) -> dict:
  """``{"commit": HEAD or None, "dirty": bool or None}`` of the git checkout holding this code."""
  def git(*args):
    return subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True, timeout=30, check=True).stdout
  try:
    return {"commit": git("rev-parse", "HEAD").strip(), "dirty": bool(git("status", "--porcelain").strip())}
  except (OSError, subprocess.SubprocessError):
    return {"commit": None, "dirty": None}


def machine() -> dict:
  cpu = platform.processor() or "unknown CPU"
  try:
    with open("/proc/cpuinfo", encoding="utf-8") as f:
      cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
  except OSError:
    pass
  return {"platform": platform.platform(), "cpu_count": os.cpu_count(), "cpu_model": cpu,
          "python": platform.python_version()}


def iso(t: Optional[float]) -> Optional[str]:
  return None if t is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(float(t)))


def trial_counts(out_dir: str) -> dict:
  """``{"total": n, "by_status": {status: n}}`` from runs.csv."""
  statuses = [r["status"] for r in _csv_rows(os.path.join(out_dir, "runs.csv"))]
  return {"total": len(statuses), "by_status": dict(sorted(collections.Counter(statuses).items()))}


def trial_window(out_dir: str) -> tuple[Optional[float], Optional[float]]:
  """(first start, last finish) over runs.csv, in seconds since the epoch."""
  rows = _csv_rows(os.path.join(out_dir, "runs.csv"))
  starts = [float(r["started"]) for r in rows if r.get("started")]
  ends = [float(r["finished"]) for r in rows if r.get("finished")]
  return (min(starts) if starts else None), (max(ends) if ends else None)


def spec_to_json(spec: report.ReportSpec) -> dict:
  return dataclasses.asdict(spec)


def spec_from_json(d: Mapping[str, Any]) -> report.ReportSpec:
  """The ReportSpec of a manifest (JSON lists back to tuples; fields the current ReportSpec lacks are an error)."""
  known = {f.name for f in dataclasses.fields(report.ReportSpec)}
  unknown = sorted(set(d) - known)
  if unknown:
    raise ValueError(f"the manifest's report_spec has fields {unknown} that this code's report does not know.")
  d = {k: tuple(v) if isinstance(v, list) else v for k, v in d.items()}
  d.setdefault("select_on", "test")  # a manifest written before the field existed: its report chose on test
  d["target"] = Target(**d["target"]) if d.get("target") else None
  return report.ReportSpec(**d)


def config_sha256(config_json: str) -> str:
  """sha256 of a study config's JSON with sorted keys (so the hash does not depend on key order)."""
  return hashlib.sha256(json.dumps(json.loads(config_json), sort_keys=True).encode()).hexdigest()


def build_manifest(out_dir: str, spec: report.ReportSpec, *, study: str, commands: Sequence[str],
                   config_json: Optional[str], code: Optional[Mapping] = None,
                   started: Optional[float] = None, finished: Optional[float] = None, **extra: Any) -> dict:
  """The manifest of a published folder whose runs.csv, evals.csv and README.md are already written."""
  if started is None and finished is None:
    started, finished = trial_window(out_dir)
  return {"study": study, "code": dict(code) if code is not None else code_state(), "commands": list(commands),
          "config_sha256": config_sha256(config_json) if config_json else None, "machine": machine(),
          "started": iso(started), "finished": iso(finished), "trials": trial_counts(out_dir),
          "files": {name: sha256(os.path.join(out_dir, name)) for name in HASHED},
          "report_spec": spec_to_json(spec), "superseded": False,
          **({"workload": workload} if (workload := workload_provenance.sources(config_json)) else {}), **extra}


def write_manifest(out_dir: str, manifest: Mapping) -> str:
  path = os.path.join(out_dir, MANIFEST)
  io_utils.write_text_atomic(path, json.dumps(manifest, indent=1, ensure_ascii=False, sort_keys=True) + "\n")
  return path


def sections(markdown: str) -> dict[str, str]:
  """``{heading: text}`` of a report split at its ``## `` headings (the title block under '#')."""
  parts = re.split(r"\n(?=## )", markdown)
  return {p.split("\n", 1)[0]: p.rstrip("\n") for p in parts}


def verify(out_dir: str) -> list[str]:
  """The mismatches between a published folder and its manifest, one sentence each ([] = verified).

  Raises ValueError (one sentence) when the folder has no readable manifest."""
  path = os.path.join(out_dir, MANIFEST)
  text = io_utils.read_text(path) if io_utils.is_remote(path) or os.path.isfile(path) else None
  if text is None:
    raise ValueError(f"{out_dir} has no {MANIFEST}; publish it with `python -m lamb_lars.study report`.")
  try:
    m = json.loads(text)
  except json.JSONDecodeError as e:
    raise ValueError(f"{path} is not valid JSON ({e.msg}, line {e.lineno}).") from None
  if m.get("kind") == "paper_logs":  # our runs against the authors' logs: their own files and recomputation
    from lamb_lars.study.running import paper_logs
    return paper_logs.verify(out_dir, m)
  problems = []
  for name in HASHED:
    p = os.path.join(out_dir, name)
    if not (io_utils.exists(p) if io_utils.is_remote(p) else os.path.isfile(p)):
      problems.append(f"{name} is missing.")
    elif sha256(p) != m.get("files", {}).get(name):
      problems.append(f"{name} has sha256 {sha256(p)[:12]}…, the manifest says {str(m.get('files', {}).get(name))[:12]}….")
  if problems:  # the CSVs are not the manifest's: recomputing from them would check the wrong files
    return problems
  studies = sorted({r["study"] for r in _csv_rows(os.path.join(out_dir, "runs.csv"))})
  if studies and studies != [m.get("study")]:
    problems.append(f"runs.csv holds the studies {studies}, the manifest names {m.get('study')!r}.")
  problems += workload_provenance.problems(m.get("workload") or {})
  counts = trial_counts(out_dir)
  if counts != m.get("trials"):
    problems.append(f"runs.csv has {counts['total']} trials {counts['by_status']}, the manifest says "
                    f"{m.get('trials')}.")
  old = sections(io_utils.read_text(os.path.join(out_dir, "README.md")))
  return problems + _compare(old, _recomputed(out_dir, m), m.get("not_recomputed") or {})


def _recomputed(out_dir: str, m: dict) -> dict[str, str]:
  """The README's sections as the report computes them now from the folder's CSVs and the manifest's spec."""
  from lamb_lars.study.analysis import plots
  from lamb_lars.study.running import publish  # running layer: loads the CSVs
  save = plots._save
  plots._save = lambda fig, out_dir, name: name   # the text is compared; the figures are not re-rendered
  try:
    with tempfile.TemporaryDirectory() as tmp:
      for name in ("runs.csv", "evals.csv"):
        if io_utils.is_remote(out_dir):  # a local copy to recompute from
          io_utils.write_bytes_atomic(os.path.join(tmp, name), io_utils.read_bytes(os.path.join(out_dir, name)))
        else:
          os.symlink(os.path.abspath(os.path.join(out_dir, name)), os.path.join(tmp, name))
      regenerated = report.write_report(publish.load_csvs(tmp), tmp, spec_from_json(m["report_spec"]))
      with open(regenerated, encoding="utf-8") as f:
        return sections(f.read())
  finally:
    plots._save = save


def rereport(out_dir: str, command: str, code: Optional[Mapping] = None) -> str:
  """Recomputes a published folder's README and figures from its own CSVs at the current commit (the analysis
  changed; the runs did not), for a folder whose study workdir is gone. The CSVs must be the manifest's; the
  checkout must be clean, so that the commit recorded says exactly what computed the README. The manifest keeps
  the runs' commands and gains ``rereports`` (when, the commit, the command); its ``code`` becomes this commit.
  ``code``: the checkout's state read before any folder was written (several re-reported in one command).
  Returns the README path; raises ValueError (one sentence) when it cannot."""
  from lamb_lars.study.running import publish  # running layer: loads the CSVs
  m = json.loads(io_utils.read_text(os.path.join(out_dir, MANIFEST)))
  if m.get("kind") == "paper_logs":
    raise ValueError(f"{out_dir} is a paper_logs folder: re-report it with `python -m "
                     "lamb_lars.study.running.paper_logs report`.")
  for name in ("runs.csv", "evals.csv"):
    if sha256(os.path.join(out_dir, name)) != m.get("files", {}).get(name):
      raise ValueError(f"{out_dir}/{name} is not the file its manifest records; a re-report recomputes from the "
                       "published CSVs only.")
  code = dict(code) if code is not None else code_state()
  if code.get("dirty") or not code.get("commit"):
    raise ValueError("the checkout has uncommitted changes (or is no git checkout); commit first, so that the "
                     "re-report's commit says what computed it.")
  readme = report.write_report(publish.load_csvs(out_dir), out_dir, spec_from_json(m["report_spec"]))
  m["files"]["README.md"] = sha256(readme)
  m["code"] = code
  m.pop("not_recomputed", None)  # every section is now the current computation
  m.setdefault("rereports", []).append({"at": iso(time.time()), "commit": code["commit"], "command": command})
  write_manifest(out_dir, m)
  return readme


def _compare(old: dict[str, str], new: dict[str, str], skipped: Mapping) -> list[str]:
  """One sentence per README section that differs from its recomputed version (``skipped``: not recomputed)."""
  problems = []
  for head in list(old) + [h for h in new if h not in old]:
    if head in skipped:
      continue
    if head not in new:
      problems.append(f"README section '{head}' is not produced by the report from the CSVs.")
    elif head not in old:
      problems.append(f"README lacks the section '{head}' that the report computes from the CSVs.")
    elif new[head] != old[head]:
      line = next((a for a, b in zip(old[head].splitlines() + [""] * 999, new[head].splitlines()) if a != b), "")
      problems.append(f"README section '{head}' differs from the one recomputed from the CSVs (first differing "
                      f"line: {line[:120]!r}).")
  return problems


def main(argv: Sequence[str]) -> int:
  """``python -m lamb_lars.study verify DIR [DIR …]``: 0 when every folder verifies, 1 on a mismatch, 2 on bad
  input."""
  if not argv:
    print("usage: python -m lamb_lars.study verify DIR [DIR ...]", file=sys.stderr)
    return 2
  status = 0
  for d in argv:
    try:
      problems = verify(d)
    except ValueError as e:
      print(f"error: {e}", file=sys.stderr)
      return 2
    for p in problems:
      print(f"{d}: {p}")
    print(f"{d}: {'verified' if not problems else f'{len(problems)} mismatch(es)'}")
    status = status or (1 if problems else 0)
  return status


def rereport_main(argv: Sequence[str]) -> int:
  """``python -m lamb_lars.study rereport DIR [DIR …]``: each folder re-reported (``rereport``) and verified."""
  if not argv:
    print("usage: python -m lamb_lars.study rereport DIR [DIR ...]", file=sys.stderr)
    return 2
  code = code_state()  # before writing: the first folder's new README would make the checkout look edited
  for d in argv:
    try:
      rereport(d, f"python -m lamb_lars.study rereport {' '.join(argv)}", code)
    except ValueError as e:
      print(f"error: {e}", file=sys.stderr)
      return 2
  return main(argv)
