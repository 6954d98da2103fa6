"""The searched cells' pruners (search.py), rebuilt from the store's decision log when a runner starts: the log is
the system of record, so a runner killed at any moment resumes every cell's search exactly where it stood."""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Sequence

from lamb_lars.study.records import FINISHED
from lamb_lars.study.running import search as search_lib
from lamb_lars.study.running import store
from lamb_lars.study.running.sweep import TrialSpec


def cell_min_epochs(specs: Sequence[TrialSpec], cfg: Mapping[str, Any]) -> dict[str, int]:
  """The first rung of each searched cell: ``min_epochs``, or with ``rung_after_warmup`` the end of the longest
  warmup among the cell's trials if later — no trial is judged while its LR is still ramping up (a rung at epoch 2
  pruned most long-warmup trials at batch 8K; docs/studies/mnist_table3/discussion.md at a4e5c88). A sub-sweep's
  ``pruner`` field overrides both for its cells (a study's later round can use a rule its first round did not)."""
  out: dict[str, int] = {}
  for t in specs:
    if not t.searched:
      continue
    rule = {**cfg, **t.pruner}
    first = int(rule["min_epochs"])
    if rule["rung_after_warmup"]:
      first = max(first, int(math.ceil(max(0.0, float(t.params()["warmup_epochs"])) - 1e-9)))
    out[t.cell] = max(out.get(t.cell, 1), first)
  return out


def store_file(con) -> str:
  row = con.execute("PRAGMA database_list").fetchone()
  return row[2] if row else "the store"


def _replay(con, searches: dict[str, search_lib.CellSearch], lenient: bool) -> dict[str, int]:
  """Replays the decision log into ``searches``; returns the run ids it pruned, each with the epoch of its first
  prune decision. Unless ``lenient``, a replayed decision that differs from the recorded one is a one-sentence
  ValueError."""
  pruned: dict[str, int] = {}
  for d in store.decisions(con):
    s = searches.get(d["cell"])
    if s is None:
      continue
    value = float("nan") if d["value"] is None else d["value"]
    if s.report(d["run_id"], d["step"], value) != bool(d["prune"]) and not lenient:
      raise ValueError(
        f"replaying the search log of cell {d['cell']} gave a different decision for "
        f"{d['run_id']} at epoch {d['step']} than the one recorded, so the log in "
        f"{store_file(con)} is inconsistent; use a new --workdir for this study."
      )
    if d["prune"]:
      pruned.setdefault(d["run_id"], int(d["step"]))
  return pruned


def rebuild_searches(
  con,
  specs: Sequence[TrialSpec],
  cfg: Mapping[str, Any],
  log: Callable[[str], None] = print,
  storage=None,
  study_name: str = "",
) -> dict[str, search_lib.CellSearch]:
  """One pruner per searched cell, its state replayed from the decision log (checked against it); with
  ``storage`` (search.optuna_storage) each cell's Optuna study is rebuilt there as ``<study_name>/<cell>``, and
  the trials that have ended are told so.

  A log that two runners once wrote at once (before workdir locks) is repaired: later duplicates of a report are
  deleted (``store.remove_duplicate_decisions``), and since the two runners decided from different states, the
  recorded decisions are then replayed as they were acted on instead of being checked."""
  if cfg["pruner"] == "none":
    return {}
  direction = "maximize" if cfg["mode"] == "max" else "minimize"
  attrs = {t.run_id: {k: store.plain(v) for k, v in t.hparams().items()} for t in specs if t.searched}
  points = {
    t.run_id: ({k: store.plain(t.overrides[k]) for k in t.space if k in t.overrides}, t.space)
    for t in specs
    if t.searched
  }
  searches = {
    cell: search_lib.CellSearch(
      min_epochs=first,
      reduction_factor=cfg["reduction_factor"],
      direction=direction,
      trial_attrs=attrs,
      trial_params=points,
    )
    for cell, first in cell_min_epochs(specs, cfg).items()
  }
  repaired = store.remove_duplicate_decisions(con)
  if repaired:
    log(
      f"repaired the search log: removed {repaired} duplicated decision(s) that two runners sharing this workdir "
      f"wrote; the remaining decisions are replayed as recorded."
    )
  by_id = {t.run_id: t for t in specs}
  for rid, epoch in _replay(con, searches, store.decisions_repaired(con)).items():  # the runner died between
    rec = store.runs(con, run_id=rid)  # logging a prune and recording it (one at its budget's end was not acted on)
    if rid in by_id and by_id[rid].at_budget_end(epoch):
      continue
    if rec and rec[0]["status"] not in FINISHED and not rec[0].get("promoted"):
      store.set_status(con, rid, "pruned", stopped="pruned", error="pruned by the search (from the log)")
  for rec in store.runs(con):
    if rec["cell"] in searches:
      searches[rec["cell"]].finish(rec["run_id"], rec["status"])
  if storage is not None:
    for cell, s in searches.items():
      s.persist(storage, f"{study_name}/{cell}")
  return searches
