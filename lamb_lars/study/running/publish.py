"""Publishing a study: the raw results as CSV files anyone can re-analyse without this code, and the report
recomputed from those files alone (so every number in it can be recomputed from them).

``runs.csv``: one row per trial — ``run_id, study, cell, role, technique, batch_size, optimizer, variant,
learning_rate, warmup_epochs, lr_scaling, num_epochs`` (the epochs the trial ran to), ``budget_epochs, status,
stopped, final_test_accuracy, final_test_loss, final_validation_accuracy, final_validation_loss,
best_test_accuracy, steps, wall_time, started, finished, error, overrides`` (JSON of the swept keys), ``seed``
(initialisation, data order, dropout), ``phase`` (search | extend<k> | replicate), ``replicate_of`` (the chosen
trial a replicate repeats), ``promoted`` (a pruned trial resumed to its full budget), ``search_space`` (JSON).
``evals.csv``: one row per evaluation — ``run_id, step, epoch, examples, wall_time, test_accuracy, test_loss,
validation_accuracy, validation_loss``, then every other logged metric (train loss, LR, noise scale, …).
The columns are documented in docs/studies.md.
"""
from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import os
import platform
import time
from typing import Any, Optional

import ml_collections

from lamb_lars.common import io_utils
from lamb_lars.study.running import preregistration, provenance, sections, store
from lamb_lars.study.analysis import report
from lamb_lars.study.running import workdir as wd
from lamb_lars.study.records import Target, Trial

RUN_COLUMNS = ("run_id", "study", "cell", "role", "technique", "batch_size", "optimizer", "variant",
               "learning_rate", "warmup_epochs", "lr_scaling", "num_epochs", "budget_epochs", "status", "stopped",
               "final_test_accuracy", "final_test_loss", "final_validation_accuracy", "final_validation_loss",
               "best_test_accuracy", "steps", "wall_time", "started", "finished", "error", "overrides",
               "seed", "phase", "replicate_of", "promoted", "search_space")
EVAL_COLUMNS = ("run_id", "step", "epoch", "examples", "wall_time", "test_accuracy", "test_loss",
                "validation_accuracy", "validation_loss")
_RENAME = {"eval_accuracy": "test_accuracy", "eval_loss": "test_loss"}   # trainer key → CSV column
_BACK = {v: k for k, v in _RENAME.items()}
_PARAM_KEYS = ("learning_rate", "warmup_epochs", "lr_scaling")


def _cell(x: Any) -> Any:
  if x is None:
    return ""
  if isinstance(x, float) and not math.isfinite(x):
    return str(x)
  return x


def export_csvs(con, study_name: str, out_dir: str) -> tuple[str, str]:
  """Writes ``runs.csv`` and ``evals.csv`` of the study into ``out_dir``; returns their paths."""
  io_utils.makedirs(out_dir)
  run_rows, eval_rows, extra = [], [], []
  for d in store.runs(con, study=study_name):
    t = store.to_trial(d, store.evals(con, d["run_id"]))
    final = t.curve[-1] if t.curve else {}
    overrides = {k: v for k, v in d["params"].items() if k not in _PARAM_KEYS}
    run_rows.append({
        "run_id": t.run_id, "study": d["study"], "cell": t.cell, "role": t.role, "technique": t.technique,
        "batch_size": t.batch_size, "optimizer": t.optimizer, "variant": t.variant,
        **{k: d["params"].get(k) for k in _PARAM_KEYS}, "num_epochs": t.final_epoch,
        "budget_epochs": t.budget_epochs, "status": t.status, "stopped": t.stopped,
        "final_test_accuracy": final.get("eval_accuracy"), "final_test_loss": final.get("eval_loss"),
        "final_validation_accuracy": final.get("validation_accuracy"),
        "final_validation_loss": final.get("validation_loss"), "best_test_accuracy": t.best("eval_accuracy"),
        "steps": d["steps"], "wall_time": t.wall_time, "started": d["started"], "finished": d["finished"],
        "error": (t.error or "").strip().splitlines()[-1] if t.error else "",
        "overrides": json.dumps(overrides, sort_keys=True), "seed": t.seed, "phase": t.phase,
        "replicate_of": t.replicate_of, "promoted": int(t.promoted),
        "search_space": json.dumps(t.space, sort_keys=True)})
    for r in t.curve:
      row = {"run_id": t.run_id, **{_RENAME.get(k, k): v for k, v in r.items()}}
      extra += [k for k in row if k not in EVAL_COLUMNS and k not in extra]
      eval_rows.append(row)
  runs_path, evals_path = os.path.join(out_dir, "runs.csv"), os.path.join(out_dir, "evals.csv")
  for path, columns, rows in ((runs_path, RUN_COLUMNS, run_rows),
                              (evals_path, EVAL_COLUMNS + tuple(sorted(extra)), eval_rows)):
    f = io.StringIO(newline="")
    w = csv.DictWriter(f, fieldnames=columns)
    w.writeheader()
    for row in rows:
      w.writerow({k: _cell(row.get(k)) for k in columns})
    io_utils.write_text_atomic(path, f.getvalue())
  return runs_path, evals_path


def _num(text: str) -> Any:
  if text == "":
    return None
  try:
    v = float(text)
  except ValueError:
    return text
  return int(v) if v.is_integer() and "." not in text and "e" not in text.lower() and "inf" not in text else v


def _read_csv(path: str) -> list[dict]:
  text = io_utils.read_text(path)
  if text is None:
    raise FileNotFoundError(f"{path} does not exist")
  return list(csv.DictReader(io.StringIO(text, newline="")))


def load_csvs(out_dir: str) -> list[Trial]:
  """The trials as ``records.Trial`` from ``runs.csv`` + ``evals.csv`` alone."""
  curves: dict[str, list[dict]] = {}
  for row in _read_csv(os.path.join(out_dir, "evals.csv")):
    rid = row.pop("run_id")
    curves.setdefault(rid, []).append({_BACK.get(k, k): _num(v) for k, v in row.items() if v != ""})
  out = []
  for r in _read_csv(os.path.join(out_dir, "runs.csv")):
    v = {k: _num(x) for k, x in r.items()}
    params = {**json.loads(r["overrides"] or "{}"), **{k: v[k] for k in _PARAM_KEYS if v[k] is not None}}
    out.append(Trial(run_id=r["run_id"], batch_size=int(v["batch_size"]), optimizer=r["optimizer"],
                     variant=r["variant"] or "original", role=r["role"] or "search", technique=r["technique"],
                     cell=r["cell"], params=params, status=r["status"], stopped=r["stopped"] or None,
                     budget_epochs=v["budget_epochs"], error=r["error"] or None, wall_time=v["wall_time"],
                     curve=sorted(curves.get(r["run_id"], []), key=lambda row: row["step"]),
                     seed=v.get("seed"), phase=r.get("phase") or "search", replicate_of=r.get("replicate_of") or "",
                     promoted=bool(v.get("promoted")), space=json.loads(r.get("search_space") or "{}")))
  return out


def _study_window(con, study_name: str) -> tuple[Optional[float], Optional[float], float]:
  """(first start, last finish, busy seconds = length of the union of the trials' [start, finish])."""
  spans = sorted((d["started"], d["finished"]) for d in store.runs(con, study=study_name)
                 if d["started"] and d["finished"])
  if not spans:
    return None, None, 0.0
  busy, cur_s, cur_e = 0.0, spans[0][0], spans[0][1]
  for s, e in spans[1:]:
    if s > cur_e:
      busy, cur_s, cur_e = busy + cur_e - cur_s, s, e
    else:
      cur_e = max(cur_e, e)
  return spans[0][0], max(e for _, e in spans), busy + cur_e - cur_s


def _plain_dict(section) -> dict:
  return section.to_dict() if hasattr(section, "to_dict") else dict(section or {})


def _key_values(d: dict) -> str:
  """``metric=validation_accuracy, mode=max`` (sorted; text, not a Python repr)."""
  return ", ".join(f"{k}={json.dumps(v) if isinstance(v, (dict, list)) else v}" for k, v in sorted(d.items())) or "—"


def _cpu_model() -> str:
  try:
    with open("/proc/cpuinfo", encoding="utf-8") as f:
      for line in f:
        if line.startswith("model name"):
          return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return platform.processor() or "unknown CPU"


def report_spec(study: ml_collections.ConfigDict, workdir: str, con) -> report.ReportSpec:
  """The report's settings from the study config's ``analysis`` section and the workdir's history."""
  a = sections.section(study, "analysis")
  base = study.base
  first, last, busy = _study_window(con, study.name)
  stamp = lambda t: time.strftime("%Y-%m-%d %H:%M", time.localtime(t)) if t else "—"
  settings = [f"- study `{study.name}`: model `{base.model}` on `{base.dataset}` "
              f"({int(a['num_train'])} training examples, validation split {base.get('validation_split', 0)}),"
              f" budget ρ = {a['baseline_epochs']:g} epochs, eval every "
              f"{base.eval_every_epochs:g} epoch(s)",
              f"- search: {_key_values(_plain_dict(study.get('search')))}; runner: "
              f"{_key_values({k: v for k, v in _plain_dict(study.get('runner')).items() if k != 'env'})}",
              f"- machine: {os.cpu_count()} CPUs ({_cpu_model()}), {platform.system()} {platform.release()}",
              ] + ([f"- first trial started {stamp(first)}, last finished {stamp(last)}; wall time with at least "
                    f"one trial running: {busy / 60:.1f} min"] if first else [])
  cmds = wd.commands(workdir)
  if cmds:
    settings += ["- commands (latest last):", ""] + [f"      {c}" for c in cmds[-4:]] + [""]
  return report.ReportSpec(
      title=str(a["title"] or f"Study {study.name}"), notes=str(a["notes"]), workload=str(a["paper"]),
      target=Target(a["target_metric"], float(a["target_goal"]), a["target_mode"]),
      baseline_epochs=float(a["baseline_epochs"]) or float(base.num_epochs), num_train=int(a["num_train"]),
      num_classes=int(base.num_classes), techniques=tuple(a["techniques"]),
      target_technique=str(a["target_technique"]), table3_batch=int(a["table3_batch"]),
      settings=tuple(settings), targets=tuple(float(g) for g in a["targets"]),
      edge_fraction=float(sections.section(study, "search")["edge_fraction"]),
      noninferiority_margin=float(a["noninferiority_margin"]), **_branching_spec(study))


def _branching_spec(study: ml_collections.ConfigDict) -> dict[str, Any]:
  """The ReportSpec fields of a branching study's CBS(t) section (none for another study)."""
  if not any(dict(s).get("role") == "branch" for s in study.get("sweeps") or ()):
    return {}
  b = sections.section(study, "branching")
  return {"branch_epsilon": float(b["epsilon"]), "branch_relative": bool(b["relative"]),
          "branch_loss": str(b["loss"]), "branch_epsilons": tuple(float(e) for e in b["epsilon_sensitivity"])}


def publish(workdir: str, out_dir: Optional[str] = None, command: Optional[str] = None) -> str:
  """Writes runs.csv, evals.csv, README.md and PNGs of the study in ``workdir`` to ``out_dir`` (default
  ``<workdir>/report``); the report is computed from the CSV files. Then ``manifest.json`` (provenance.py): the
  code commit, the study's commands and ``command`` (this report's), the config hash, the machine, the trial
  window and counts, the files' sha256 and the report's settings, so ``verify`` can recompute the README.
  Returns the README path."""
  study = wd.load_study_config(workdir)
  code = provenance.code_state()  # before writing: the report's own files would make the checkout look edited
  out_dir = out_dir or os.path.join(workdir, "report")
  if not io_utils.is_remote(out_dir) and os.path.exists(out_dir) and not os.path.isdir(out_dir):
    raise ValueError(f"--out={out_dir} is a file; give a directory for the report.")
  if not (os.path.exists(wd.store_path(workdir)) or io_utils.exists(os.path.join(workdir, wd.STORE_FILE))):
    raise ValueError(f"{workdir} has no results store ({wd.STORE_FILE}); re-run `python -m lamb_lars.study run` with "
                     f"the same --config and --workdir to rebuild it (finished trials are read back from their run "
                     f"dirs).")
  con = wd.open_store(workdir)
  try:
    export_csvs(con, study.name, out_dir)
    spec = report_spec(study, workdir, con)
  finally:
    con.close()
  if io_utils.exists(os.path.join(out_dir, "discussion.md")):  # hand-written next to the generated report
    spec = dataclasses.replace(spec, notes=(spec.notes + "\n\n" if spec.notes else "") + (
        "The disagreements with the paper, and what would settle them, are discussed in "
        "[discussion.md](discussion.md)."))
  readme = report.write_report(load_csvs(out_dir), out_dir, spec)
  config_json = io_utils.read_text(os.path.join(workdir, wd.STUDY_CONFIG_FILE))
  provenance.write_manifest(out_dir, provenance.build_manifest(
      out_dir, spec, study=study.name, commands=wd.commands(workdir) + ([command] if command else []),
      config_json=config_json, code=code, claims_checked=True,
      preregistration=preregistration.load(workdir)))  # verify: every number discussion.md quotes
  return readme
