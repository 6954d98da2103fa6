"""``verify``: checks a published study folder against its manifest (manifest.py); ``rereport``: recomputes one.

``verify(DIR)`` recomputes: the hashes, the trial counts from runs.csv, and the README itself — it regenerates
the report from the two CSV files and the manifest's ``report_spec`` with the current code and compares it with the
committed README section by section. A folder published by earlier code carries ``"superseded": true`` and may name
sections the current code no longer reproduces (``not_recomputed``: section → why); those sections are covered
by the README's hash only. Each mismatch is one sentence.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import sys
import tempfile
import time
from typing import Mapping, Optional, Sequence

from lamb_lars.common import code_state, io_utils
from lamb_lars.common.code_state import iso, sha256
from lamb_lars.study.publishing import csv_tables, workload_provenance
from lamb_lars.study.publishing.csv_tables import read_csv
from lamb_lars.study.publishing.manifest import MANIFEST, HASHED, spec_from_json, trial_counts, write_manifest
from lamb_lars.study.report import report


# A folder that is not a study's (its manifest has a ``kind``) is checked by the module its manifest names
# (``verifier``, whose ``verify(out_dir, manifest)`` returns the mismatches); a manifest written before manifests named
# one (issue 39) is checked by the module of its kind here. Nothing here imports a project (lamb_lars/proj/).
LEGACY_VERIFIERS = {"paper_logs": "lamb_lars.proj.you2020.paper_logs"}


def _verifier(m: Mapping) -> Optional[str]:
  """The import path of the module that verifies a folder of another kind than a study's (None: a study's)."""
  if not m.get("kind"):
    return None
  path = m.get("verifier") or LEGACY_VERIFIERS.get(m["kind"])
  if not path:
    raise ValueError(f"the manifest's kind {m['kind']!r} names no verifier this code knows.")
  return path


def sections(markdown: str) -> dict[str, str]:
  """``{heading: text}`` of a report split at its ``## `` headings (the title block under '#')."""
  parts = re.split(r"\n(?=## )", markdown)
  return {p.split("\n", 1)[0]: p.rstrip("\n") for p in parts}


def verify(out_dir: str, claims: Optional[list] = None) -> list[str]:
  """The mismatches between a published folder and its manifest, one sentence each ([] = verified).

  A folder whose manifest has ``claims_checked: true`` also fails on a number its discussion.md or index row quotes
  that the recomputed README and the manifest do not hold (claims.py). For another folder, pass a list as
  ``claims``: those numbers are appended to it (warnings), and verify's answer is unchanged.
  Raises ValueError (one sentence) when the folder has no readable manifest."""
  path = os.path.join(out_dir, MANIFEST)
  text = io_utils.read_text(path) if io_utils.is_remote(path) or os.path.isfile(path) else None
  if text is None:
    raise ValueError(f"{out_dir} has no {MANIFEST}; publish it with `python -m lamb_lars.study report`.")
  try:
    m = json.loads(text)
  except json.JSONDecodeError as e:
    raise ValueError(f"{path} is not valid JSON ({e.msg}, line {e.lineno}).") from None
  if _verifier(m):  # e.g. our runs against the authors' logs: their own files and recomputation
    problems = importlib.import_module(_verifier(m)).verify(out_dir, m)
    if not problems and (m.get("claims_checked") or claims is not None):  # its README is the recomputed one
      found = claim_problems(out_dir, m, io_utils.read_text(os.path.join(out_dir, "README.md")))
      problems += found if m.get("claims_checked") else []
      if claims is not None and not m.get("claims_checked"):
        claims.extend(found)
    return problems
  problems = []
  for name in HASHED:
    p = os.path.join(out_dir, name)
    if not (io_utils.exists(p) if io_utils.is_remote(p) else os.path.isfile(p)):
      problems.append(f"{name} is missing.")
    elif sha256(p) != m.get("files", {}).get(name):
      listed = str(m.get("files", {}).get(name))[:12]
      problems.append(f"{name} has sha256 {sha256(p)[:12]}…, the manifest says {listed}….")
  if problems:  # the CSVs are not the manifest's: recomputing from them would check the wrong files
    return problems
  studies = sorted({r["study"] for r in read_csv(os.path.join(out_dir, "runs.csv"))})
  if studies and studies != [m.get("study")]:
    problems.append(f"runs.csv holds the studies {studies}, the manifest names {m.get('study')!r}.")
  problems += workload_provenance.problems(m.get("workload") or {})
  problems += workload_provenance.data_problems(m.get("data") or {})  # none in a manifest from before issue 62
  counts = trial_counts(out_dir)
  if counts != m.get("trials"):
    problems.append(
      f"runs.csv has {counts['total']} trials {counts['by_status']}, the manifest says {m.get('trials')}."
    )
  old = sections(io_utils.read_text(os.path.join(out_dir, "README.md")))
  new = _recomputed(out_dir, m)
  problems += _compare(old, new, m.get("not_recomputed") or {})
  if m.get("claims_checked") or claims is not None:
    found = claim_problems(out_dir, m, "\n".join(new.values()))
    problems += found if m.get("claims_checked") else []
    if claims is not None and not m.get("claims_checked"):
      claims.extend(found)
  return problems


def claim_problems(out_dir: str, m: dict, recomputed: str) -> list[str]:
  """The numbers the folder's discussion.md and index row quote that its data do not produce (claims.py); a
  number quoted from another folder (a paragraph linking ``../<folder>/``) is looked up in that folder's README."""
  from lamb_lars.study.publishing import claims as claims_lib

  parent = os.path.dirname(os.path.normpath(out_dir))

  def readme_of(key: str) -> Optional[str]:
    """The README of the published folder a link names: ``../x`` a sibling, ``x`` a part of this folder (None:
    no published folder there, e.g. an image folder)."""
    folder = os.path.join(parent, key[3:]) if key.startswith("../") else os.path.join(out_dir, key)
    if not os.path.isfile(os.path.join(folder, MANIFEST)) or not os.path.isfile(os.path.join(folder, "README.md")):
      return None
    return io_utils.read_text(os.path.join(folder, "README.md"))

  return claims_lib.check_folder(out_dir, recomputed, m, readme_of)


def _recomputed(out_dir: str, m: dict) -> dict[str, str]:
  """The README's sections as the report computes them now from the folder's CSVs and the manifest's spec."""
  with tempfile.TemporaryDirectory() as tmp:
    for name in ("runs.csv", "evals.csv"):
      if io_utils.is_remote(out_dir):  # a local copy to recompute from
        io_utils.write_bytes_atomic(os.path.join(tmp, name), io_utils.read_bytes(os.path.join(out_dir, name)))
      else:
        os.symlink(os.path.abspath(os.path.join(out_dir, name)), os.path.join(tmp, name))
    # the text is compared; the figures are not re-rendered
    regenerated = report.write_report(csv_tables.load_csvs(tmp), tmp, spec_from_json(m["report_spec"]), figures=False)
    with open(regenerated, encoding="utf-8") as f:
      return sections(f.read())


FIT_RULES = ("any", "measured")  # report.ReportSpec.fit_rule's values


def rereport(out_dir: str, command: str, code: Optional[Mapping] = None, fit_rule: Optional[str] = None) -> str:
  """Recomputes a published folder's README and figures from its own CSVs at the current commit (the analysis
  changed; the runs did not), for a folder whose study workdir is gone. The CSVs must be the manifest's; the
  checkout must be clean, so that the commit recorded says exactly what computed the README. The manifest keeps
  the runs' commands and gains ``rereports`` (when, the commit, the command); its ``code`` becomes this commit.
  ``code``: the checkout's state read before any folder was written (several re-reported in one command).
  ``fit_rule``: a folder published before issue 62 (``report_spec.fit_rule`` 'any') can adopt the 'measured'
  rule, so that a fit over fewer than three batch sizes, or with B_crit at an edge, reads "not measured (why)";
  the change is recorded in the manifest's spec and in the re-report's entry (``fit_rule``: before → after).
  A folder without ``claims_checked`` whose discussion and index row pass the claim check against the new README
  gains it (and the entry says so): from then on ``verify`` fails on an unmatched number there.
  Returns the README path; raises ValueError (one sentence) when it cannot."""
  m = json.loads(io_utils.read_text(os.path.join(out_dir, MANIFEST)))
  if _verifier(m):
    return _adopt_claims(out_dir, m, command, code)
  for name in ("runs.csv", "evals.csv"):
    if sha256(os.path.join(out_dir, name)) != m.get("files", {}).get(name):
      raise ValueError(
        f"{out_dir}/{name} is not the file its manifest records; a re-report recomputes from the published CSVs only."
      )
  code = dict(code) if code is not None else code_state.code_state()
  if code.get("dirty") or not code.get("commit"):
    raise ValueError(
      "the checkout has uncommitted changes (or is no git checkout); commit first, so that the "
      "re-report's commit says what computed it."
    )
  if fit_rule is not None and fit_rule not in FIT_RULES:
    raise ValueError(f"--fit_rule must be one of {', '.join(FIT_RULES)}; got {fit_rule!r}.")
  entry = {"at": iso(time.time()), "commit": code["commit"], "command": command}
  if fit_rule is not None:
    before = spec_from_json(m["report_spec"]).fit_rule
    if before != fit_rule:
      m["report_spec"]["fit_rule"] = fit_rule
      entry["fit_rule"] = f"{before} → {fit_rule}"
  readme = report.write_report(csv_tables.load_csvs(out_dir), out_dir, spec_from_json(m["report_spec"]))
  m["files"]["README.md"] = sha256(readme)
  m["code"] = code
  m.pop("not_recomputed", None)  # every section is now the current computation
  if not m.get("claims_checked") and not claim_problems(out_dir, m, io_utils.read_text(readme)):
    m["claims_checked"] = entry["claims_checked"] = True  # an older folder whose quotes all pass opts in for good
  m.setdefault("rereports", []).append(entry)
  write_manifest(out_dir, m)
  return readme


def _adopt_claims(out_dir: str, m: dict, command: str, code: Optional[Mapping]) -> str:
  """A folder of another kind (its own verifier and report) is not recomputed here; when it verifies and every
  number its discussion and index row quote passes the claim check, it gains ``claims_checked`` and a ``rereports``
  entry saying so (README untouched). Raises ValueError (one sentence) when it cannot."""
  code = dict(code) if code is not None else code_state.code_state()
  if code.get("dirty") or not code.get("commit"):
    raise ValueError("the checkout has uncommitted changes (or is no git checkout); commit first.")
  readme = os.path.join(out_dir, "README.md")
  bad = importlib.import_module(_verifier(m) or "").verify(out_dir, m)
  bad = bad or claim_problems(out_dir, m, io_utils.read_text(readme))
  if bad:
    raise ValueError(
      f"{out_dir} is a {m['kind']} folder (re-report it with `python -m {_verifier(m)}`); it cannot opt into the "
      f"claim check while it has {len(bad)} problem(s), the first: {bad[0]}"
    )
  if not m.get("claims_checked"):
    m["claims_checked"] = True
    entry = {"at": iso(time.time()), "commit": code["commit"], "command": command, "claims_checked": True}
    m.setdefault("rereports", []).append(entry)
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
      problems.append(
        f"README section '{head}' differs from the one recomputed from the CSVs (first differing line: {line[:120]!r})."
      )
  return problems


def main(argv: Sequence[str]) -> int:
  """``python -m lamb_lars.study verify [--claims] DIR [DIR …]``: 0 when every folder verifies, 1 on a mismatch, 2
  on bad input. ``--claims`` also prints, as warnings, the numbers quoted in the discussion and index row of a
  folder that does not opt in to the strict claim check (``claims_checked``)."""
  argv = list(argv)
  warn = "--claims" in argv
  argv = [a for a in argv if a != "--claims"]
  if not argv or any(a.startswith("-") for a in argv):
    print("usage: python -m lamb_lars.study verify [--claims] DIR [DIR ...]", file=sys.stderr)
    return 2
  status = 0
  for d in argv:
    found: Optional[list] = [] if warn else None
    try:
      problems = verify(d, found)
    except ValueError as e:
      print(f"error: {e}", file=sys.stderr)
      return 2
    for p in problems:
      print(f"{d}: {p}")
    for w in found or ():
      print(f"{d}: warning: {w}")
    print(
      f"{d}: {'verified' if not problems else f'{len(problems)} mismatch(es)'}"
      + (f" ({len(found)} quoted number(s) not in the data: warnings)" if found else "")
    )
    status = status or (1 if problems else 0)
  return status


def rereport_main(argv: Sequence[str]) -> int:
  """``python -m lamb_lars.study rereport [--fit_rule=measured] DIR [DIR …]``: each folder re-reported
  (``rereport``) and verified."""
  rules = [a.split("=", 1)[1] for a in argv if a.startswith("--fit_rule=")]
  dirs = [a for a in argv if not a.startswith("--fit_rule=")]
  if not dirs or any(a.startswith("-") for a in dirs) or len(rules) > 1:
    print("usage: python -m lamb_lars.study rereport [--fit_rule=any|measured] DIR [DIR ...]", file=sys.stderr)
    return 2
  code = code_state.code_state()  # before writing: the first folder's new README would make the checkout look edited
  for d in dirs:
    try:
      rereport(d, f"python -m lamb_lars.study rereport {' '.join(argv)}", code, rules[0] if rules else None)
    except ValueError as e:
      print(f"error: {e}", file=sys.stderr)
      return 2
  return main(dirs)
