"""Where a study stands, in one line: counts per status and a rough ETA, from the results store alone.

  python -m lamb_lars.study status --workdir=/tmp/studies/table3

prints, e.g.::

  study table3: 41/120 finished (done 30, pruned 9, diverged 2), failed 1, running 2, pending 76; ETA ~1h12m
    running b8k-lars-lr0.012-3f2a  epoch 12.0/30  4m05s
    running b8k-lars-lr0.031-9c1e  epoch 3.0/30  41s

The runner prints the same line every ``status_every_s`` while it runs. The ETA is the mean wall time of the
trials that ended (done, diverged or pruned) × (pending + half of running) ÷ workers: a rough guide that assumes
the remaining trials end like the finished ones. ``running`` is what the store says: a runner killed with
``kill -9`` leaves its trials ``running`` until the study is resumed.
"""

from __future__ import annotations

import time
from typing import Optional

from lamb_lars.train.progress import duration
from lamb_lars.study.running import store
from lamb_lars.study.records import FINISHED


def eta_seconds(runs: list[dict], workers: int) -> Optional[float]:
  """Mean wall time of the ended trials × (pending + running/2) ÷ workers; None before any trial ended."""
  times = [r["wall_time"] for r in runs if r["status"] in FINISHED and r.get("wall_time") is not None]
  left = sum(r["status"] == "pending" for r in runs) + 0.5 * sum(r["status"] == "running" for r in runs)
  if not left:
    return 0.0
  if not times:
    return None
  return sum(times) / len(times) * left / max(1, int(workers))


def status_line(con, study: Optional[str], workers: int) -> str:
  """``study NAME: k/N finished (done a, pruned b, diverged c), failed d, running e, pending f; ETA ~T``."""
  runs = store.runs(con, study=study)
  count = {
    s: sum(r["status"] == s for r in runs) for s in ("done", "pruned", "diverged", "failed", "running", "pending")
  }
  ended = ", ".join(f"{s} {count[s]}" for s in FINISHED if count[s])
  eta = eta_seconds(runs, workers)
  return (
    f"study {study or '?'}: {sum(count[s] for s in FINISHED)}/{len(runs)} finished"
    + (f" ({ended})" if ended else "")
    + f", failed {count['failed']}, running {count['running']}, pending {count['pending']}; "
    + ("done" if eta == 0.0 else f"ETA ~{duration(eta)}")
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
