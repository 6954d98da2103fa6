"""The raw results of a study as two CSV files anyone can re-analyse without this code (``export_csvs``), and
those files back as Trials (``load_csvs``), from which the report is recomputed (publish.py, provenance.py).

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
import io
import json
import math
import os
from typing import Any

from lamb_lars.common import io_utils
from lamb_lars.study.records import Trial
from lamb_lars.study.running import store

RUN_COLUMNS = (
  "run_id",
  "study",
  "cell",
  "role",
  "technique",
  "batch_size",
  "optimizer",
  "variant",
  "learning_rate",
  "warmup_epochs",
  "lr_scaling",
  "num_epochs",
  "budget_epochs",
  "status",
  "stopped",
  "final_test_accuracy",
  "final_test_loss",
  "final_validation_accuracy",
  "final_validation_loss",
  "best_test_accuracy",
  "steps",
  "wall_time",
  "started",
  "finished",
  "error",
  "overrides",
  "seed",
  "phase",
  "replicate_of",
  "promoted",
  "search_space",
)
EVAL_COLUMNS = (
  "run_id",
  "step",
  "epoch",
  "examples",
  "wall_time",
  "test_accuracy",
  "test_loss",
  "validation_accuracy",
  "validation_loss",
)
_RENAME = {"eval_accuracy": "test_accuracy", "eval_loss": "test_loss"}  # trainer key → CSV column
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
    run_rows.append(_run_row(d, t))
    for r in t.curve:
      row = {"run_id": t.run_id, **{_RENAME.get(k, k): v for k, v in r.items()}}
      extra += [k for k in row if k not in EVAL_COLUMNS and k not in extra]
      eval_rows.append(row)
  runs_path, evals_path = os.path.join(out_dir, "runs.csv"), os.path.join(out_dir, "evals.csv")
  for path, columns, rows in (
    (runs_path, RUN_COLUMNS, run_rows),
    (evals_path, EVAL_COLUMNS + tuple(sorted(extra)), eval_rows),
  ):
    f = io.StringIO(newline="")
    w = csv.DictWriter(f, fieldnames=columns)
    w.writeheader()
    for row in rows:
      w.writerow({k: _cell(row.get(k)) for k in columns})
    io_utils.write_text_atomic(path, f.getvalue())
  return runs_path, evals_path


def _run_row(d: dict, t: Trial) -> dict:
  """The runs.csv row of the store's run ``d`` (store.runs), read as the trial ``t``."""
  final = t.curve[-1] if t.curve else {}
  overrides = {k: v for k, v in d["params"].items() if k not in _PARAM_KEYS}
  return {
    "run_id": t.run_id,
    "study": d["study"],
    "cell": t.cell,
    "role": t.role,
    "technique": t.technique,
    "batch_size": t.batch_size,
    "optimizer": t.optimizer,
    "variant": t.variant,
    **{k: d["params"].get(k) for k in _PARAM_KEYS},
    "num_epochs": t.final_epoch,
    "budget_epochs": t.budget_epochs,
    "status": t.status,
    "stopped": t.stopped,
    "final_test_accuracy": final.get("eval_accuracy"),
    "final_test_loss": final.get("eval_loss"),
    "final_validation_accuracy": final.get("validation_accuracy"),
    "final_validation_loss": final.get("validation_loss"),
    "best_test_accuracy": t.best("eval_accuracy"),
    "steps": d["steps"],
    "wall_time": t.wall_time,
    "started": d["started"],
    "finished": d["finished"],
    "error": (t.error or "").strip().splitlines()[-1] if t.error else "",
    "overrides": json.dumps(overrides, sort_keys=True),
    "seed": t.seed,
    "phase": t.phase,
    "replicate_of": t.replicate_of,
    "promoted": int(t.promoted),
    "search_space": json.dumps(t.space, sort_keys=True),
  }


def _num(text: str) -> Any:
  if text == "":
    return None
  try:
    v = float(text)
  except ValueError:
    return text
  return int(v) if v.is_integer() and "." not in text and "e" not in text.lower() and "inf" not in text else v


def read_csv(path: str) -> list[dict]:
  """The rows of a CSV file (local or remote) as dicts of strings."""
  text = io_utils.read_text(path)
  if text is None:
    raise FileNotFoundError(f"{path} does not exist")
  return list(csv.DictReader(io.StringIO(text, newline="")))


def load_csvs(out_dir: str) -> list[Trial]:
  """The trials as ``records.Trial`` from ``runs.csv`` + ``evals.csv`` alone."""
  curves: dict[str, list[dict]] = {}
  for row in read_csv(os.path.join(out_dir, "evals.csv")):
    rid = row.pop("run_id")
    curves.setdefault(rid, []).append({_BACK.get(k, k): _num(v) for k, v in row.items() if v != ""})
  out = []
  for r in read_csv(os.path.join(out_dir, "runs.csv")):
    v = {k: _num(x) for k, x in r.items()}
    params = {**json.loads(r["overrides"] or "{}"), **{k: v[k] for k in _PARAM_KEYS if v[k] is not None}}
    out.append(
      Trial(
        run_id=r["run_id"],
        batch_size=int(v["batch_size"]),
        optimizer=r["optimizer"],
        variant=r["variant"] or "original",
        role=r["role"] or "search",
        technique=r["technique"],
        cell=r["cell"],
        params=params,
        status=r["status"],
        stopped=r["stopped"] or None,
        budget_epochs=v["budget_epochs"],
        error=r["error"] or None,
        wall_time=v["wall_time"],
        curve=sorted(curves.get(r["run_id"], []), key=lambda row: row["step"]),
        seed=v.get("seed"),
        phase=r.get("phase") or "search",
        replicate_of=r.get("replicate_of") or "",
        promoted=bool(v.get("promoted")),
        space=json.loads(r.get("search_space") or "{}"),
      )
    )
  return out
