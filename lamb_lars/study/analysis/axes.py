"""The cross-setting answer of the critical-batch-axes study (issue 42;
lamb_lars/configs/studies/critical_batch_axes.py): B_crit with its bootstrap interval per setting, CBS(t) brackets at
the pre-registered ε with an ε-sensitivity table, B_simple at the branch points, and one figure: B_crit against dataset
size and against model size.

Input: a root folder holding one published folder per study part (``study report --out=<root>/<part>``):
``<root>/<setting>`` (steps to target: runs.csv, evals.csv) and ``<root>/branch-<setting>`` (branching). A part
that is missing or has no replicated cells yet is reported as not run; nothing is guessed.

* Steps to target per seed: in each tuned cell, the chosen configuration (the run its replicates name) and its
  replicates, each one point: the first evaluation whose test accuracy meets the target (``first_step``), or, if
  none does, a censored point S > the steps it ran (its step limit, or where it diverged).
* B_crit: S(B) = S_min·(1 + B_crit/B) fitted with the misses as lower bounds (scaling_fit.fit_points), the interval
  a percentile bootstrap over the seeds of each batch (scaling_fit.bootstrap).
* CBS(t): branching.trajectory on each branch's final validation loss, at the config's ε (relative) and at each
  ε of ``EPSILON_SENSITIVITY``.
* B_simple: the baseline run's ``noise_scale`` at the first evaluation at or after each branch point.

Command: ``python -m lamb_lars.study.analysis.axes <root> [--out=<dir>]`` writes ``axes.md`` and
``critical_batch_axes.png`` (default: into <root>).
"""
from __future__ import annotations

import csv
import dataclasses
import json
import math
import os
import sys
from typing import Mapping, Optional, Sequence

from lamb_lars.configs.studies import critical_batch_axes as cba
from lamb_lars.study.analysis import branching as branching_lib
from lamb_lars.study.analysis import scaling_fit

Points = dict  # {batch: [(steps, censored), ...]}


def _read(path: str) -> list[dict]:
  with open(path, newline="") as f:
    return list(csv.DictReader(f))


def _float(x: str) -> float:
  try:
    return float(x)
  except (TypeError, ValueError):
    return math.nan


def first_step(curve: Sequence[Mapping[str, str]], goal: float, metric: str = "test_accuracy") -> Optional[int]:
  """The step of the first evaluation (in step order) whose ``metric`` ≥ ``goal``; None when none does."""
  for row in sorted(curve, key=lambda r: _float(r["step"])):
    if _float(row.get(metric, "")) >= goal:
      return int(_float(row["step"]))
  return None


def seed_points(folder: str, goal: float, sweep: str = "tuned") -> Points:
  """{batch: [(steps, censored)]} over the chosen configuration and its replicates in each ``sweep`` cell."""
  runs = _read(os.path.join(folder, "runs.csv"))
  curves: dict[str, list[dict]] = {}
  for row in _read(os.path.join(folder, "evals.csv")):
    curves.setdefault(row["run_id"], []).append(row)
  chosen = {r["replicate_of"] for r in runs if r.get("phase") == "replicate" and r["cell"].startswith(sweep + "-b")}
  points: Points = {}
  for r in runs:
    if r["run_id"] not in chosen and r.get("replicate_of") not in chosen:
      continue
    if not r["cell"].startswith(sweep + "-b"):
      continue
    hit = first_step(curves.get(r["run_id"], []), goal)
    pt = (float(hit), False) if hit is not None else (max(1.0, _float(r["steps"])), True)
    points.setdefault(int(r["batch_size"]), []).append(pt)
  return points


@dataclasses.dataclass(frozen=True)
class SettingResult:
  """One setting's B_crit: the fit on every seed and the bootstrap interval (None: not run or not fittable)."""
  name: str
  target: float
  points: Points
  fit: Optional[scaling_fit.CensoredFit]
  interval: Optional[scaling_fit.Interval]
  note: str = ""


def b_crit(name: str, points: Points, target: float, num_bootstrap: int = 1000, seed: int = 0) -> SettingResult:
  """The fit and the bootstrap interval of one setting, or a note why there is none."""
  if not points:
    return SettingResult(name, target, points, None, None, "not run")
  try:
    fit = scaling_fit.fit_points(points)
  except ValueError as e:
    return SettingResult(name, target, points, None, None, f"no fit: {e}")
  return SettingResult(name, target, points, fit, scaling_fit.bootstrap(points, num=num_bootstrap, seed=seed))


def branch_losses(folder: str) -> list[branching_lib.BranchLoss]:
  """The branches of a published branching folder: point (examples of the reference), batch, seed, final loss."""
  out = []
  for r in _read(os.path.join(folder, "runs.csv")):
    if r["role"] != "branch":
      continue
    ov = json.loads(r["overrides"] or "{}")
    loss = _float(r["final_validation_loss"])
    if r["status"] == "diverged" or not math.isfinite(loss):
      loss = math.inf
    out.append(branching_lib.BranchLoss(float(ov["init_from_examples"]), int(r["batch_size"]), int(r["seed"]), loss))
  return out


def _bracket(c: branching_lib.CriticalBatch) -> str:
  lo = "<" + str(min(c.verdicts)) if c.low is None and c.verdicts else str(c.low)
  if c.censored:
    return f"≥ {c.low:,}"
  return f"[{lo}, {c.high if c.high is not None else '—'}]"


def b_simple_at(folder: str, examples: Sequence[float]) -> dict[float, Optional[float]]:
  """The baseline's noise scale at the first evaluation at or after each number of examples."""
  runs = _read(os.path.join(folder, "runs.csv"))
  base = [r["run_id"] for r in runs if r["role"] == "baseline" and r.get("phase", "search") != "replicate"]
  rows = sorted((r for r in _read(os.path.join(folder, "evals.csv")) if base and r["run_id"] == base[0]),
                key=lambda r: _float(r["examples"]))
  out: dict[float, Optional[float]] = {}
  for x in examples:
    vals = [_float(r.get("noise_scale", "")) for r in rows if _float(r["examples"]) >= x]
    out[x] = vals[0] if vals and math.isfinite(vals[0]) else None
  return out


def _fmt(x: Optional[float]) -> str:
  if x is None or (isinstance(x, float) and math.isnan(x)):
    return "—"
  return "∞" if math.isinf(x) else f"{x:,.0f}"


def steps_table(results: Sequence[SettingResult]) -> str:
  lines = ["| setting | axes | params | N | target | B_crit | 95% bootstrap | ∞ share | S_min | seeds/batch | "
           "censored |", "|---|---|---:|---:|---:|---:|---|---:|---:|---|---:|"]
  for r in results:
    s = cba.SETTINGS[r.name]
    seeds = ", ".join(f"{b}: {len(v)}" for b, v in sorted(r.points.items())) or "—"
    cens = sum(c for v in r.points.values() for _, c in v)
    if r.fit is None:
      lines.append(f"| {r.name} | {'+'.join(s['axes'])} | {cba.num_params(s['model'], s['width']):,} | {s['n']:,} | "
                   f"{r.target:.1%} | {r.note} | | | | {seeds} | {cens} |")
      continue
    iv = r.interval
    ci = f"[{_fmt(iv.lo)}, {_fmt(iv.hi)}]" if iv else "—"
    lines.append(f"| {r.name} | {'+'.join(s['axes'])} | {cba.num_params(s['model'], s['width']):,} | {s['n']:,} | "
                 f"{r.target:.1%} | {_fmt(r.fit.b_crit)} | {ci} | {iv.infinite if iv else math.nan:.0%} | "
                 f"{_fmt(r.fit.s_min)} | {seeds} | {cens} |")
  return "\n".join(lines)


def axis_spread(results: Sequence[SettingResult], axis: str) -> str:
  """How far B_crit moves along an axis: max/min of the point estimates and whether any two intervals are disjoint."""
  rs = [r for r in results if axis in cba.SETTINGS[r.name]["axes"] and r.fit and r.interval
        and 0 < r.fit.b_crit < math.inf]
  if len(rs) < 2:
    return f"{axis} axis: fewer than two settings with a finite B_crit; no comparison."
  est = [r.fit.b_crit for r in rs]
  disjoint = [(a.name, b.name) for i, a in enumerate(rs) for b in rs[i + 1:]
              if a.interval.hi < b.interval.lo or b.interval.hi < a.interval.lo]
  verdict = (f"intervals disjoint for {', '.join(f'{a} vs {b}' for a, b in disjoint)}" if disjoint
             else "every pair of intervals overlaps (no change shown)")
  return f"{axis} axis: B_crit spans {max(est) / min(est):.2f}× over {len(rs)} settings; {verdict}."


def cbs_tables(root: str, epsilons: Sequence[float] = cba.EPSILON_SENSITIVITY) -> str:
  """CBS brackets per setting and point at the pre-registered ε, then the ε-sensitivity table, and B_simple."""
  pre, sens, simple = [], [], []
  for name in cba.SETTINGS:
    folder = os.path.join(root, f"branch-{name}")
    if not os.path.exists(os.path.join(folder, "runs.csv")):
      pre.append(f"| {name} | not run |")
      continue
    bl = branch_losses(folder)
    if not bl:
      pre.append(f"| {name} | no branches |")
      continue
    traj = {e: branching_lib.trajectory(bl, cba.B0, e, relative=True) for e in sorted(set(epsilons) | {cba.EPSILON})}
    pts = [c.point for c in traj[cba.EPSILON]]
    pre.append(f"| {name} | " + " | ".join(f"{p / cba.FULL:.3g}: {_bracket(c)}" for p, c in
                                            zip(pts, traj[cba.EPSILON])) + " |")
    for e in sorted(traj):
      sens.append(f"| {name} | {e:g}{' (pre-registered)' if e == cba.EPSILON else ''} | "
                  + " | ".join(_bracket(c) for c in traj[e]) + " |")
    steps_folder = os.path.join(root, name)
    if os.path.exists(os.path.join(steps_folder, "evals.csv")):
      bs = b_simple_at(steps_folder, pts)
      simple.append(f"| {name} | " + " | ".join(f"{p / cba.FULL:.3g}: {_fmt(bs[p])}" for p in pts) + " |")
  head = "| setting | CBS bracket per point (epochs of 55K: [low, high]) |\n|---|---|"
  out = [f"### CBS(t) at the pre-registered ε = {cba.EPSILON:g} (relative)", "", head, *pre, "",
         "### ε sensitivity (brackets at each point, in order)", "", "| setting | ε | brackets |", "|---|---|---|",
         *sens]
  if simple:
    out += ["", "### B_simple (baseline run) at the branch points", "", "| setting | B_simple |", "|---|---|",
            *simple]
  return "\n".join(out)


def figure(results: Sequence[SettingResult], path: str) -> str:
  """B_crit with its interval against dataset size (left) and parameters (right), log axes, shared y; an interval
  open upwards (bootstrap resamples with B_crit = ∞) is drawn to 10× the estimate with an arrow head."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, axes = plt.subplots(1, 2, figsize=(9, 3.6), sharey=True)
  for ax, axis, xlabel in ((axes[0], "data", "training examples N (LeNet-5)"),
                           (axes[1], "model", "parameters (55K examples)")):
    xs, ys, lo, hi, labels, kept = [], [], [], [], [], []
    for r in results:
      s = cba.SETTINGS[r.name]
      if axis not in s["axes"] or r.fit is None or not 0 < r.fit.b_crit < math.inf:
        continue
      x = s["n"] if axis == "data" else cba.num_params(s["model"], s["width"])
      iv = r.interval
      top = iv.hi if iv and math.isfinite(iv.hi) else r.fit.b_crit * 10
      bottom = iv.lo if iv and iv.lo > 0 else r.fit.b_crit / 10
      xs.append(x)
      ys.append(r.fit.b_crit)
      lo.append(r.fit.b_crit - bottom)
      hi.append(top - r.fit.b_crit)
      labels.append(r.name)
      kept.append(r)
    if xs:
      ax.errorbar(xs, ys, yerr=[lo, hi], fmt="o", capsize=4)
      open_top = [(x, y + h) for x, y, h, r in zip(xs, ys, hi, kept) if not (r.interval and
                                                                           math.isfinite(r.interval.hi))]
      if open_top:   # an interval without a finite upper end: drawn to 10× the estimate, marked by an arrow head
        ax.plot(*zip(*open_top), "^", color="C0")
      for x, y, lab in zip(xs, ys, labels):
        ax.annotate(lab, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.grid(True, which="both", alpha=0.3)
  axes[0].set_ylabel("B_crit (95% bootstrap over seeds)")
  fig.suptitle("Critical batch along the data axis and the model axis (MNIST)")
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)
  return path


def report(root: str, out: Optional[str] = None, num_bootstrap: int = 1000) -> str:
  """Writes ``axes.md`` and ``critical_batch_axes.png`` into ``out`` (default ``root``); returns the markdown."""
  out = out or root
  os.makedirs(out, exist_ok=True)
  results = []
  for name, s in cba.SETTINGS.items():
    folder = os.path.join(root, name)
    pts = seed_points(folder, s["target"]) if os.path.exists(os.path.join(folder, "runs.csv")) else {}
    results.append(b_crit(name, pts, s["target"], num_bootstrap=num_bootstrap))
  figure(results, os.path.join(out, "critical_batch_axes.png"))
  text = "\n".join([
      "## Critical batch: data axis against model axis", "",
      f"Targets and ε pre-registered in lamb_lars/configs/studies/critical_batch_axes.py; step limit "
      f"{cba.LIMIT_EXAMPLES:,} examples (a miss is a censored point).", "",
      steps_table(results), "", "- " + axis_spread(results, "data"), "- " + axis_spread(results, "model"), "",
      cbs_tables(root), "", "![B_crit against data and model size](critical_batch_axes.png)", ""])
  with open(os.path.join(out, "axes.md"), "w") as f:
    f.write(text)
  return text


def main(argv: Sequence[str]) -> int:
  args = [a for a in argv if not a.startswith("--out=")]
  outs = [a[len("--out="):] for a in argv if a.startswith("--out=")]
  if len(args) != 1 or not os.path.isdir(args[0]):
    print("error: give one existing folder holding the published parts (<root>/<setting>, <root>/branch-<setting>), "
          "e.g. python -m lamb_lars.study.analysis.axes docs/studies/critical_batch_axes.", file=sys.stderr)
    return 2
  print(report(args[0], outs[0] if outs else None))
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
