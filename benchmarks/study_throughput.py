"""Study throughput on this machine, side by side in one run (real MNIST / LeNet-5, the study's own trial configs).

1. **Workers**: the same trials run as 1 worker × all CPUs against N workers × 1 pinned CPU each (runner
   `num_workers`, `cpus_per_trial`). Prints trials per hour and the ratio.
2. **A Table 3 cell search**: the grid runner as it was before issue 10 (the old paper preset: a 3-point LR grid
   ×0.5/×1/×2, every trial to the full budget, one worker, in-model chunks, no shared compilation) against the search
   runner (6 quasi-random points of log-LR × warmup,
   ASHA pruning, dead-run stopping, the faster worker setting). The number compared is *full-budget-equivalent
   runs per hour*: configurations the runner has a verdict on (finished, pruned or stopped dead) per hour — the
   grid runner needs one full run per configuration. Also printed: the best final test accuracy each found.
3. **One trial's cost** at large batches: the same two trials (LAMB, warmup 1 and 2 epochs) as in-model chunking
   without a compilation cache (the runner before session 4), accumulation over micro-batches of 256
   (``microbatch_size``), accumulation plus the study's shared persistent compilation cache, where the second
   trial loads the model init and eval step the first compiled, and all that with the LR schedule as a table
   (``optimizer.lr_table``), where the second trial loads the train step too. One pinned worker. Prints seconds
   per trial and the ratios.

  python benchmarks/study_throughput.py                        # parts 1 and 2, 30-epoch budget (≈ 25 min quiet)
  python benchmarks/study_throughput.py --part=trial --epochs=6 --trial_batches=16384,55000
  python benchmarks/study_throughput.py --part=workers --epochs=3 --batch=8192
  python benchmarks/study_throughput.py --part=cell --cell=b8k-adam-original

Run it alone on a quiet machine; record the load beside the numbers (docs/BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from lamb_lars.configs.studies import mnist_table3  # noqa: E402
from lamb_lars.study.running import runner, store  # noqa: E402
from lamb_lars.study.running import workdir as wd  # noqa: E402
from lamb_lars.study.running.executor import LocalExecutor  # noqa: E402


def _study(name: str, sweeps: tuple, epochs: float, pruner: str = "asha"):
  c = mnist_table3.get_config()
  c.name = name
  c.base.num_epochs = epochs
  c.sweeps = sweeps
  c.search.pruner = pruner
  c.search.min_epochs = max(1, int(round(epochs / 15)))
  c.search.max_extensions = c.search.min_full_budget = 0  # the search alone: no follow-ups (phases.py)
  c.replicates.num_seeds = 0
  c.analysis.techniques = ()
  return c


def _run(study, executor, root: str) -> tuple[float, list[dict]]:
  work = os.path.join(root, study.name)
  shutil.rmtree(work, ignore_errors=True)
  t0 = time.perf_counter()
  runner.run_study(study, work, executor=executor, log=lambda s: print("   ", s, flush=True))
  seconds = time.perf_counter() - t0
  con = store.open_store(wd.store_path(work))
  try:
    recs = store.runs(con, study=study.name)
    for r in recs:
      ev = store.evals(con, r["run_id"])
      r["final_acc"] = ev[-1].get("eval_accuracy") if ev else None
      r["epochs"] = ev[-1].get("epoch") if ev else 0.0
  finally:
    con.close()
  return seconds, recs


def part_workers(args, root: str) -> None:
  ncpu = len(os.sched_getaffinity(0))
  sweeps = (
    dict(
      name="w",
      fixed={
        "batch_size": args.batch,
        "optimizer.name": "momentum",
        "optimizer.learning_rate": 0.05 * args.batch / 256,
      },
      grid={"seed": tuple(range(args.trials))},
    ),
  )
  print(
    f"\n== 1. workers: {args.trials} identical trials (seed differs), batch {args.batch}, {args.epochs:g} epochs, "
    f"{ncpu} CPUs"
  )
  rows = []
  for label, ex in (
    (f"1 worker × {ncpu} threads", LocalExecutor(slots=1)),
    (f"{ncpu} workers × 1 pinned CPU", LocalExecutor(slots=ncpu, cpus_per_trial=1)),
  ):
    seconds, recs = _run(_study(f"workers{len(rows)}", sweeps, args.epochs, "none"), ex, root)
    rows.append((label, seconds, len(recs)))
  for label, seconds, n in rows:
    print(f"  {label:<28} {seconds:7.1f} s  {3600 * n / seconds:6.1f} trials/h")
  print(f"  ratio (pinned workers / one worker): {rows[0][1] / rows[1][1]:.2f}×")


def part_cell(args, root: str) -> None:
  cells = {s["name"]: s for s in mnist_table3.sweeps()}
  cell = dict(cells[args.cell])
  lo, hi = cell["search"]["optimizer.learning_rate"][1:]
  center = (lo * hi) ** 0.5
  grid = dict(
    name=cell["name"] + "-grid",
    role="table3",
    variant=cell.get("variant", "original"),
    fixed=dict(cell["fixed"]),
    grid={"optimizer.learning_rate": (center / 2, center, center * 2)},
  )
  ncpu = len(os.sched_getaffinity(0))
  best_ex = LocalExecutor(slots=ncpu, cpus_per_trial=1) if args.pinned else LocalExecutor(slots=1)
  print(f"\n== 2. Table 3 cell {args.cell}, {args.epochs:g}-epoch budget")
  results = []
  old = _study("grid", (grid,), args.epochs, "none")  # the runner before issue 10: no accumulation, no shared
  old.base.microbatch_size = 0  # compiled programs
  old.base.optimizer.lr_table = False
  old.runner.compilation_cache = False
  for label, study, ex in (
    ("grid runner (3 LRs, full budget, 1 worker)", old, LocalExecutor(slots=1)),
    (
      f"search runner ({cell['num_trials']} points, ASHA, {'pinned workers' if args.pinned else '1 worker'})",
      _study("search", (cell,), args.epochs),
      best_ex,
    ),
  ):
    seconds, recs = _run(study, ex, root)
    epochs = sum(float(r["epochs"] or 0) for r in recs)
    best = max((r["final_acc"] for r in recs if r["status"] == "done" and r["final_acc"] is not None), default=None)
    results.append((label, seconds, len(recs), epochs, best, [r["status"] for r in recs]))
  for label, seconds, n, epochs, best, statuses in results:
    print(
      f"  {label:<52} {seconds:7.1f} s  {n} configurations ({', '.join(statuses)}), {epochs:.0f} epochs "
      f"trained, best final test acc {'—' if best is None else f'{100 * best:.2f}%'}, "
      f"{3600 * n / seconds:.1f} full-budget-equivalent runs/h"
    )
  (_, s0, n0, *_), (_, s1, n1, *_) = results
  print(f"  ratio (search / grid, full-budget-equivalent runs per hour): {(n1 / s1) / (n0 / s0):.2f}×")


def part_trial(args, root: str) -> None:
  print(f"\n== 3. one trial's cost: LAMB, {args.epochs:g} epochs, 2 trials per setting, 1 pinned worker")
  for batch in (int(b) for b in args.trial_batches.split(",")):
    rows = []
    for label, micro, cache, table in (
      ("in-model chunks, no cache", 0, False, False),
      ("micro-batches of 256, no cache", 256, False, False),
      ("micro-batches of 256, shared cache", 256, True, False),
      ("micro-batches, shared cache, LR table", 256, True, True),
    ):
      sweeps = (
        dict(
          name="t",
          fixed={
            "batch_size": batch,
            "optimizer.name": "lamb",
            "optimizer.learning_rate": 0.01,
            "optimizer.lr_scaling": "none",
          },
          grid={"optimizer.schedule.warmup_epochs": (1.0, 2.0)},
        ),
      )
      study = _study(f"trial-b{batch}-{len(rows)}", sweeps, args.epochs, "none")
      study.base.microbatch_size = micro
      study.runner.compilation_cache = cache
      study.base.optimizer.lr_table = table
      study.runner.env = {}
      seconds, recs = _run(study, LocalExecutor(slots=1, cpus_per_trial=1), root)
      walls = [float(r["wall_time"] or 0) for r in sorted(recs, key=lambda r: r["run_id"])]
      rows.append((label, walls))
      print(
        f"  batch {batch:>6}  {label:<38} per trial {' / '.join(f'{w:5.1f} s' for w in walls)}  "
        f"(whole study {seconds:.1f} s)",
        flush=True,
      )
    base = sum(rows[0][1])
    for label, walls in rows[1:]:
      print(
        f"  batch {batch:>6}  {label:<38} {base / sum(walls):.2f}× faster than in-model chunks, no cache; "
        f"second trial {rows[0][1][-1] / walls[-1]:.2f}×"
      )


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--part", choices=("all", "workers", "cell", "trial"), default="all")
  p.add_argument("--epochs", type=float, default=30.0)
  p.add_argument("--batch", type=int, default=8192, help="workers part: the trials' batch")
  p.add_argument("--trials", type=int, default=4, help="workers part: trials per setting")
  p.add_argument(
    "--cell", default="b8k-adam-original", help="cell part: a sub-sweep of lamb_lars/configs/studies/mnist_table3"
  )
  p.add_argument(
    "--pinned",
    action=argparse.BooleanOptionalAction,
    default=True,
    help="cell part: run the search with N workers × 1 pinned CPU (default) or 1 worker",
  )
  p.add_argument("--trial_batches", default="16384,55000", help="trial part: the batches")
  p.add_argument("--workdir", default="", help="where the benchmark studies go (default: a temporary directory)")
  args = p.parse_args()
  root = args.workdir or tempfile.mkdtemp(prefix="study_throughput_")
  print(f"load average before: {os.getloadavg()[0]:.2f} (1 min); workdir {root}")
  if args.part in ("all", "workers"):
    part_workers(args, root)
  if args.part in ("all", "cell"):
    part_cell(args, root)
  if args.part == "trial":
    part_trial(args, root)
  print(f"\nload average after: {os.getloadavg()[0]:.2f} (1 min)")


if __name__ == "__main__":
  main()
