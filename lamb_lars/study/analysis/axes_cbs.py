"""CBS(t) and B_simple of the critical-batch-axes study (issue 42; the report is axes.py), from the branching parts
``<root>/branch-<setting>``: branching.trajectory on each branch's final validation loss at the config's ε
(relative) and at each ε of ``EPSILON_SENSITIVITY``, the settings of an axis compared at matched points of training,
and the baseline run's ``noise_scale`` (B_simple) at the first evaluation at or after each branch point.
"""

from __future__ import annotations

import json
import math
import os
from typing import Optional, Sequence

from lamb_lars.configs.studies import critical_batch_axes as cba
from lamb_lars.study.analysis import branching as branching_lib
from lamb_lars.study.analysis.axes_fits import _float, _fmt, _read


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
  rows = sorted(
    (r for r in _read(os.path.join(folder, "evals.csv")) if base and r["run_id"] == base[0]),
    key=lambda r: _float(r["examples"]),
  )
  out: dict[float, Optional[float]] = {}
  for x in examples:
    vals = [_float(r.get("noise_scale", "")) for r in rows if _float(r["examples"]) >= x]
    out[x] = vals[0] if vals and math.isfinite(vals[0]) else None
  return out


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
    pre.append(
      f"| {name} | " + " | ".join(f"{p / cba.FULL:.3g}: {_bracket(c)}" for p, c in zip(pts, traj[cba.EPSILON])) + " |"
    )
    for e in sorted(traj):
      sens.append(
        f"| {name} | {e:g}{' (pre-registered)' if e == cba.EPSILON else ''} | "
        + " | ".join(_bracket(c) for c in traj[e])
        + " |"
      )
    steps_folder = os.path.join(root, name)
    if os.path.exists(os.path.join(steps_folder, "evals.csv")):
      bs = b_simple_at(steps_folder, pts)
      simple.append(f"| {name} | " + " | ".join(f"{p / cba.FULL:.3g}: {_fmt(bs[p])}" for p in pts) + " |")
  head = "| setting | CBS bracket per point (epochs of 55K: [low, high]) |\n|---|---|"
  out = [
    f"### CBS(t) at the pre-registered ε = {cba.EPSILON:g} (relative)",
    "",
    head,
    *pre,
    "",
    "### ε sensitivity (brackets at each point, in order)",
    "",
    "| setting | ε | brackets |",
    "|---|---|---|",
    *sens,
  ]
  if simple:
    out += ["", "### B_simple (baseline run) at the branch points", "", "| setting | B_simple |", "|---|---|", *simple]
  return "\n".join(out)


def _separated(a: branching_lib.CriticalBatch, b: branching_lib.CriticalBatch) -> bool:
  """Whether CBS at ``a`` lies below CBS at ``b``: some batch ≤ b's low (every batch of b up to it passes) is above
  a's high (a fails at the next tested batch after its high)."""
  return not a.censored and a.high is not None and b.low is not None and a.high < b.low


def cbs_axis_comparison(root: str, epsilon: float = cba.EPSILON) -> str:
  """CBS at matched points of training (the same examples seen), per axis: the settings whose brackets are
  separated (one's CBS below another's) at each branch point, at the pre-registered ε — the CBS counterpart of the
  B_crit spread along each axis."""
  traj: dict[str, list[branching_lib.CriticalBatch]] = {}
  for name in cba.SETTINGS:
    folder = os.path.join(root, f"branch-{name}")
    if os.path.exists(os.path.join(folder, "runs.csv")):
      bl = branch_losses(folder)
      if bl:
        traj[name] = branching_lib.trajectory(bl, cba.B0, epsilon, relative=True)
  lines = [
    f"### CBS(t) along each axis at matched points (ε = {epsilon:g}, pre-registered)",
    "",
    "| point (epochs of 55K) | axis | brackets | separated (lower < higher) |",
    "|---|---|---|---|",
  ]
  any_row = False
  for i, p in enumerate(cba.POINTS_EXAMPLES):
    for axis in ("data", "model"):
      names = [k for k in cba.SETTINGS if axis in cba.SETTINGS[k]["axes"] and k in traj and len(traj[k]) > i]
      if len(names) < 2:
        continue
      any_row = True
      cs = {k: traj[k][i] for k in names}
      pairs = [f"{a} < {b}" for a in names for b in names if a != b and _separated(cs[a], cs[b])]
      lines.append(
        f"| {p / cba.FULL:.3g} | {axis} | "
        + "; ".join(f"{k}: {_bracket(c)}" for k, c in cs.items())
        + f" | {', '.join(pairs) if pairs else 'none: no change shown'} |"
      )
  if not any_row:
    return "\n".join(lines[:2] + ["Fewer than two settings of an axis have branching results yet."])
  return "\n".join(lines)
