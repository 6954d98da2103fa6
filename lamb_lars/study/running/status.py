"""Where a study stands, in one line: counts per status and a rough ETA, from the results store alone.

  python -m lamb_lars.study status --workdir=/tmp/studies/table3

prints, e.g.::

  study table3: 41/120 finished (done 30, pruned 9, diverged 2), failed 1, running 2, pending 76; ETA ~1h12m–3h05m
    running b8k-lars-lr0.012-3f2a  epoch 12.0/30  4m05s
    running b8k-lars-lr0.031-9c1e  epoch 3.0/30  41s

The runner prints the same line every ``status_every_s`` while it runs. The ETA (:func:`eta_range`) counts epochs,
not trials, because a study's trials differ in length (a pruned trial stops at a rung; a replicate may run to a
step limit several times the search's rungs): seconds per epoch, measured over the trials that ended (done,
diverged or pruned: wall time ÷ epochs trained), × the epochs left, ÷ workers. The epochs left are each running
trial's budget minus its last evaluated epoch, plus, per pending trial, the mean epochs the ended trials trained
(the low end: the pending trials end as the ended ones did) or its whole budget (the high end: none stops early).
It covers the trials planned so far: phases that add trials later (range extensions, replicates) add to it.
``running`` is what the store says: a runner killed with ``kill -9`` leaves its trials ``running`` until the study
is resumed.
"""

from __future__ import annotations

import time
from typing import Mapping, Optional

from lamb_lars.train.progress import duration
from lamb_lars.study.running import store
from lamb_lars.study.records import FINISHED


def eta_range(runs: list[dict], epochs: Mapping[str, float], workers: int) -> Optional[tuple[float, float]]:
  """(low, high) seconds left for the trials in ``runs`` (store rows: status, wall_time, budget_epochs), given the
  epochs each has trained (``epochs``: run id → last evaluated epoch; missing = 0), on ``workers`` at once; (0, 0)
  when no trial is left; None before a trial that trained some epochs has ended. See the module docstring."""
  ended = [r for r in runs if r["status"] in FINISHED and r.get("wall_time") and epochs.get(r["run_id"], 0.0) > 0]
  running = [r for r in runs if r["status"] == "running"]
  pending = [r for r in runs if r["status"] == "pending"]
  if not running and not pending:
    return 0.0, 0.0
  if not ended:
    return None
  trained = [epochs[r["run_id"]] for r in ended]
  rate = sum(r["wall_time"] for r in ended) / sum(trained)  # seconds per epoch
  mean = sum(trained) / len(trained)
  left = sum(max(0.0, (r.get("budget_epochs") or mean) - epochs.get(r["run_id"], 0.0)) for r in running)
  budgets = [r.get("budget_epochs") or mean for r in pending]
  low = left + sum(min(b, mean) for b in budgets)
  high = left + sum(budgets)
  workers = max(1, int(workers))
  return rate * low / workers, rate * high / workers


def _eta_text(eta: Optional[tuple[float, float]]) -> str:
  if eta is None:
    return "ETA ~?"
  if eta == (0.0, 0.0):
    return "done"
  low, high = (duration(x) for x in eta)
  return f"ETA ~{low}" if low == high else f"ETA ~{low}–{high}"


def status_line(con, study: Optional[str], workers: int) -> str:
  """``study NAME: k/N finished (done a, pruned b, diverged c), failed d, running e, pending f; ETA ~T``."""
  runs = store.runs(con, study=study)
  count = {
    s: sum(r["status"] == s for r in runs) for s in ("done", "pruned", "diverged", "failed", "running", "pending")
  }
  ended = ", ".join(f"{s} {count[s]}" for s in FINISHED if count[s])
  eta = eta_range(runs, store.last_epochs(con), workers)  # one query: the runner prints this every minute
  return (
    f"study {study or '?'}: {sum(count[s] for s in FINISHED)}/{len(runs)} finished"
    + (f" ({ended})" if ended else "")
    + f", failed {count['failed']}, running {count['running']}, pending {count['pending']}; "
    + _eta_text(eta)
  )


def running_lines(con, study: Optional[str], now: Optional[float] = None) -> list[str]:
  """One line per running trial: its last evaluated epoch of its budget and how long it has run."""
  now = time.time() if now is None else now
  out = []
  for r in store.runs(con, study=study, status="running"):
    ev = store.evals(con, r["run_id"])
    epoch = ev[-1]["epoch"] if ev and ev[-1].get("epoch") is not None else 0.0
    budget = f"/{r['budget_epochs']:g}" if r.get("budget_epochs") else ""
    since = duration(now - r["started"]) if r.get("started") else "?"
    out.append(f"  running {r['run_id']}  epoch {epoch:.1f}{budget}  {since}")
  return out


def progress_line(con, run_id: str, status: str, index: int, total: int, seconds: float) -> str:
  """``[k/N] status run_id  test 98.12%  epoch 12.0  41.2 s`` (or the reason it stopped): the runner's line for a
  trial that ended."""
  rec = store.runs(con, run_id=run_id)[0]
  final = rec.get("final") or {}
  ev = store.evals(con, run_id)
  last = ev[-1] if ev else {}
  parts = [f"[{index}/{total}] {status:<8} {run_id}"]
  acc = final.get("eval_accuracy", last.get("eval_accuracy"))
  if acc is not None:
    parts.append(f"test {100 * acc:.2f}%")
  if last.get("epoch") is not None:
    parts.append(f"epoch {last['epoch']:.1f}")
  parts.append(f"{seconds:.1f} s")
  if status != "done" and rec.get("error"):
    parts.append("| " + rec["error"].strip().splitlines()[-1][:160])
  return "  ".join(parts)


def failures(con, study_name: str) -> list[tuple[str, str]]:
  """(run_id, the failure's first line) of every failed trial; for a traceback, its last line (``Type: message``)."""
  out = []
  for r in store.runs(con, study=study_name, status="failed"):
    lines = [ln.strip() for ln in (r.get("error") or "").strip().splitlines() if ln.strip()]
    line = (lines[-1] if lines and lines[0].startswith("Traceback") else lines[0]) if lines else "(no error text)"
    out.append((r["run_id"], line[:200]))
  return out


def report(workdir: str) -> str:
  """The status line and the running trials of the study in ``workdir``."""
  from lamb_lars.study.running import sections
  from lamb_lars.study.running import workdir as wd

  study = wd.load_study_config(workdir)
  workers = int(sections.section(study, "runner")["num_workers"])
  con = wd.open_store(workdir)  # for an object-store workdir, its local copy (downloaded where missing)
  try:
    return "\n".join([status_line(con, study.name, workers)] + running_lines(con, study.name))
  finally:
    con.close()
