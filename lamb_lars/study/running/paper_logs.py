"""Our runs of the authors' MNIST configurations against the authors' own training logs (You et al. 2020).

The paper's MNIST code (GitHub ``fastalgo/mnist_tpu``) left about 1,900 log files, each named for its configuration
(batch, LR, warmup epochs, poly power, weight decay) and ending in the final test accuracy of one run. ``AUTHORS``
transcribes the logs of the configurations in ``configs/paper/`` (file name → accuracy), read on 2026-11-25.

  python -m lamb_lars.study.running.paper_logs run --workdir=studies/mnist_paper_logs --seeds=0,1   # resumable
  python -m lamb_lars.study.running.paper_logs report --workdir=studies/mnist_paper_logs --out=docs/studies/mnist_paper_logs

``run`` trains each configuration × seed in its own process (``WORKDIR/<config>/seed<k>``), one after another;
re-running it skips finished runs and resumes a killed one from its checkpoint. ``report`` writes ``runs.csv``
(one row per run of ours), ``authors.csv`` (one row per log of theirs) and ``README.md``: per configuration their
accuracies, ours per seed, our mean ± sd with its 95% t interval, the difference of the means, and a verdict
(:func:`lamb_lars.study.analysis.replicates.agreement`) against their mean ± the tolerance: 0.3 percentage points at batches
up to 8K (the resolution of the paper's tables) and 1.0 point at the full batch, where their own repeats spread by
about that much.
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import importlib
import json
import os
import platform
import subprocess
import sys
import time
from typing import Optional, Sequence



@dataclasses.dataclass(frozen=True)
class Logged:
  """The authors' logs of one configuration: ``runs`` maps a log file (in fastalgo/mnist_tpu) to its accuracy."""
  config: str
  runs: dict
  tolerance: float   # percentage points: |ours − theirs| within this "agrees"

  @property
  def mean(self) -> float:
    return sum(self.runs.values()) / len(self.runs)


_MOM1K = "momentum_poly/{}/batch-1024-lr-0.08-warmup-0-poly-0.5-2019-03-05-{}.log"
_LAMB1K = "lamb/log2/batch-1024-lr-0.004-warmup-1-poly-0.5-weight-decay-0.01-2019-04-{}.log"
AUTHORS = {a.config: a for a in (
    Logged("momentum_b1024", {_MOM1K.format("best", "03-25-33"): 0.9923, _MOM1K.format("best", "03-26-23"): 0.9935,
                              _MOM1K.format("best", "03-27-23"): 0.9934, _MOM1K.format("best", "03-28-33"): 0.9932,
                              _MOM1K.format("best", "03-53-49"): 0.9922, _MOM1K.format("log", "03-14-29"): 0.9929},
           0.3),
    Logged("lars_b8192", {"momentum_lars/best/batch-8192-lr-6.0-warmup-16-poly-0.5-2019-03-05-20-21-28.log": 0.9935},
           0.3),
    Logged("lamb_b1024", {_LAMB1K.format("15-23-57-07"): 0.9941, _LAMB1K.format("15-23-59-45"): 0.9935,
                          _LAMB1K.format("16-00-00-56"): 0.9947, _LAMB1K.format("16-00-02-21"): 0.9938,
                          _LAMB1K.format("16-00-03-36"): 0.9941}, 0.3),
    Logged("momentum_b60000", {"momentum_poly/log/batch-60000-lr-0.11-warmup-12-poly-0.5-2019-03-05-10-38-07.log":
                               0.9244}, 1.0),
    Logged("lars_b60000", {"momentum_lars/log/batch-60000-lr-22.0-warmup-9-poly-0.5-2019-03-07-01-23-07.log":
                           0.9727}, 1.0),
    Logged("lamb_b60000", {"lamb/log1/batch-60000-lr-0.11-warmup-7-poly-0.5-2019-04-04-11-08-14.log": 0.9887}, 1.0),
)}


# One slice of a response surface the authors swept (momentum_lars/run.sh): LARS at the full batch, warmup 9 epochs,
# 35 steps, one run per LR (momentum_lars/log/batch-60000-lr-<LR>-warmup-9-poly-0.5-2019-03-07-*.log; LR 28's log
# has no result). Neighbouring LRs differ by up to 22 points, so single runs here are mostly seed noise.
LARS_FULL_BATCH_SLICE = {
    1.0: 0.8514, 2.0: 0.8301, 3.0: 0.8306, 4.0: 0.9344, 5.0: 0.9080, 6.0: 0.9103, 7.0: 0.9159, 8.0: 0.8976,
    9.0: 0.8727, 10.0: 0.8370, 11.0: 0.8685, 12.0: 0.8589, 13.0: 0.8906, 14.0: 0.9521, 15.0: 0.9686, 16.0: 0.7481,
    17.0: 0.9259, 18.0: 0.9528, 19.0: 0.9488, 20.0: 0.9648, 21.0: 0.9165, 22.0: 0.9727, 23.0: 0.9022, 24.0: 0.9713,
    25.0: 0.9077, 26.0: 0.9231, 27.0: 0.8917}
SLICE_CONFIG = "lars_b60000"


def run_dir(workdir: str, config: str, seed: int, learning_rate: Optional[float] = None) -> str:
  """WORKDIR/<config>/seed<k>, or WORKDIR/<config>/lr<η>/seed<k> for a run at another LR (the slice)."""
  parts = [workdir, config] + ([f"lr{learning_rate:g}"] if learning_rate is not None else []) + [f"seed{seed}"]
  return os.path.join(*parts)


def load_config(name: str, seed: int, learning_rate: Optional[float] = None):
  config = importlib.import_module(f"lamb_lars.configs.paper.{name}").get_config()
  config.seed = seed
  config.progress = False
  if learning_rate is not None:
    config.optimizer.learning_rate = learning_rate
  return config


def run(workdir: str, configs: Sequence[str], seeds: Sequence[int],
        learning_rates: Sequence[Optional[float]] = (None,)) -> int:
  """Trains every configuration × LR × seed not finished yet, one process each; returns how many failed."""
  failed = 0
  for name in configs:
    for lr in learning_rates:
      for seed in seeds:
        out = run_dir(workdir, name, seed, lr)
        if os.path.exists(os.path.join(out, "result.json")):
          continue
        os.makedirs(out, exist_ok=True)
        print(f"{time.strftime('%H:%M:%S')} {name} lr {lr or 'as logged'} seed {seed} → {out}", flush=True)
        cmd = [sys.executable, "-m", "lamb_lars.study.running.paper_logs", "one", name, str(seed), out]
        rc = subprocess.call(cmd + ([f"--learning_rate={lr}"] if lr is not None else []))
        failed += rc != 0
  return failed


def _one(name: str, seed: int, out: str, learning_rate: Optional[float]) -> None:
  from lamb_lars.train import trainer
  trainer.train_and_evaluate(load_config(name, seed, learning_rate), out)


@dataclasses.dataclass(frozen=True)
class Ours:
  config: str
  seed: int
  status: str
  step: int
  accuracy: Optional[float]
  train_time: Optional[float]


def collect(workdir: str) -> list[Ours]:
  rows = []
  for name in AUTHORS:
    base = os.path.join(workdir, name)
    for entry in sorted(os.listdir(base)) if os.path.isdir(base) else ():
      path = os.path.join(base, entry, "result.json")
      if not (entry.startswith("seed") and os.path.exists(path)):
        continue
      with open(path) as f:
        r = json.load(f)
      final = r.get("final") or {}
      rows.append(Ours(name, int(entry[4:]), r["status"], int(r["step"]), final.get("eval_accuracy"),
                       r.get("train_time")))
  return rows


def collect_slice(workdir: str) -> dict:
  """{LR: [final test accuracy of each finished seed]} of our runs of the slice."""
  base, out = os.path.join(workdir, SLICE_CONFIG), {}
  for entry in sorted(os.listdir(base)) if os.path.isdir(base) else ():
    if not entry.startswith("lr"):
      continue
    for seed_dir in sorted(os.listdir(os.path.join(base, entry))):
      path = os.path.join(base, entry, seed_dir, "result.json")
      if os.path.exists(path):
        with open(path) as f:
          r = json.load(f)
        acc = (r.get("final") or {}).get("eval_accuracy") if r["status"] == "done" else None
        out.setdefault(float(entry[2:]), []).append(acc)
  return out


def comparison(ours: Sequence[Ours]) -> list[dict]:
  """One row per configuration: theirs, ours per seed, our summary, difference and verdict."""
  from lamb_lars.study.analysis import replicates
  rows = []
  for name, logged in AUTHORS.items():
    mine = [o for o in ours if o.config == name]
    accs = [o.accuracy for o in mine if o.status == "done" and o.accuracy is not None]
    s = replicates.summarise(accs)
    verdict = (replicates.agreement(s, logged.mean, logged.tolerance / 100.0) if len(accs) == len(mine) and mine
               else "inconclusive")
    rows.append(dict(config=name, theirs=sorted(logged.runs.values()), their_mean=logged.mean, ours=mine,
                     summary=s, diff=None if s.mean is None else s.mean - logged.mean,
                     tolerance=logged.tolerance, verdict=verdict if mine else "not run"))
  return rows


def _pct(x: Optional[float]) -> str:
  return "—" if x is None else f"{100 * x:.2f}"


def write_report(workdir: str, out: str, command: str) -> None:
  ours = collect(workdir)
  os.makedirs(out, exist_ok=True)
  with open(os.path.join(out, "runs.csv"), "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["config", "seed", "status", "step", "eval_accuracy", "train_time_s"])
    for o in ours:
      w.writerow([o.config, o.seed, o.status, o.step, "" if o.accuracy is None else f"{o.accuracy:.6f}",
                  "" if o.train_time is None else f"{o.train_time:.1f}"])
  with open(os.path.join(out, "authors.csv"), "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["config", "log_file", "eval_accuracy"])
    for name, logged in AUTHORS.items():
      for file, acc in logged.runs.items():
        w.writerow([name, file, f"{acc:.4f}"])
    for lr, acc in LARS_FULL_BATCH_SLICE.items():
      w.writerow([f"{SLICE_CONFIG}@lr{lr:g}",
                  f"momentum_lars/log/batch-60000-lr-{lr}-warmup-9-poly-0.5-2019-03-07-*.log", f"{acc:.4f}"])
  lines = ["# The authors' MNIST configurations, run by us, against their training logs", "",
           "Generated by `python -m lamb_lars.study.running.paper_logs report` from `runs.csv` (our runs) and `authors.csv`",
           "(their logs in GitHub fastalgo/mnist_tpu). Accuracies are final test accuracies in %, on the 10,000 test",
           "images after the configuration's full number of steps. Our summary is mean ± sd [95% t interval] over",
           "seeds; the verdict compares that interval with their mean ± the tolerance (module docstring of",
           "lamb_lars/study/running/paper_logs.py). A configuration with fewer than two finished seeds is inconclusive.", "",
           f"Command: `{command}`", "",
           "| configuration | theirs (each log) | their mean | ours (each seed) | ours: mean ± sd [95% CI] | "
           "ours − theirs | tolerance | verdict |", "|---|---|---|---|---|---|---|---|"]
  for r in comparison(ours):
    mine = ", ".join(f"{_pct(o.accuracy)} (seed {o.seed}{'' if o.status == 'done' else ', ' + o.status})"
                     for o in r["ours"]) or "not run yet"
    diff = "—" if r["diff"] is None else f"{100 * r['diff']:+.2f}"
    summary = r["summary"].text() if r["ours"] else "—"
    lines.append(f"| [{r['config']}](../../../configs/paper/{r['config']}.py) | "
                 f"{', '.join(_pct(a) for a in r['theirs'])} | {_pct(r['their_mean'])} | {mine} | {summary} | "
                 f"{diff} | ±{r['tolerance']:.1f} | {r['verdict']} |")
  ours_slice = collect_slice(workdir)
  lines += ["", f"## A slice of their response surface: {SLICE_CONFIG} (LARS, full batch, warmup 9) against the LR", "",
            "Theirs: one run per LR. Ours: each seed's final test accuracy (a diverged run shows as —).", "",
            "| LR | theirs | ours |", "|---|---|---|"]
  for lr in sorted(set(LARS_FULL_BATCH_SLICE) | set(ours_slice)):
    mine = ", ".join(_pct(a) for a in ours_slice.get(lr, [])) or "not run"
    lines.append(f"| {lr:g} | {_pct(LARS_FULL_BATCH_SLICE.get(lr))} | {mine} |")
  lines += ["", f"Machine of the last report: {platform.platform()}, {os.cpu_count()} CPUs.", ""]
  with open(os.path.join(out, "README.md"), "w") as f:
    f.write("\n".join(lines))


def main(argv: Optional[Sequence[str]] = None) -> int:
  ap = argparse.ArgumentParser(prog="python -m lamb_lars.study.running.paper_logs", description=__doc__.split("\n\n")[0])
  sub = ap.add_subparsers(dest="cmd", required=True)
  r = sub.add_parser("run")
  r.add_argument("--workdir", required=True)
  r.add_argument("--seeds", default="0,1")
  r.add_argument("--configs", default=",".join(AUTHORS))
  r.add_argument("--slice_lrs", default="", help=f"also run {SLICE_CONFIG} at these LRs (the response-surface slice)")
  p = sub.add_parser("report")
  p.add_argument("--workdir", required=True)
  p.add_argument("--out", required=True)
  o = sub.add_parser("one")
  o.add_argument("name")
  o.add_argument("seed", type=int)
  o.add_argument("out")
  o.add_argument("--learning_rate", type=float, default=None)
  a = ap.parse_args(argv)
  if a.cmd == "one":
    _one(a.name, a.seed, a.out, a.learning_rate)
    return 0
  if a.cmd == "run":
    unknown = set(a.configs.split(",")) - set(AUTHORS)
    if unknown:
      print(f"error: unknown configuration(s) {sorted(unknown)}; known: {', '.join(AUTHORS)}.", file=sys.stderr)
      return 2
    seeds = [int(s) for s in a.seeds.split(",")]
    failed = run(a.workdir, a.configs.split(","), seeds)
    if a.slice_lrs:
      failed += run(a.workdir, [SLICE_CONFIG], seeds, [float(x) for x in a.slice_lrs.split(",")])
    print(f"finished: {failed} run(s) failed")
    return 1 if failed else 0
  write_report(a.workdir, a.out, " ".join(["python -m lamb_lars.study.running.paper_logs"] + list(argv or sys.argv[1:])))
  return 0


if __name__ == "__main__":
  sys.exit(main())
