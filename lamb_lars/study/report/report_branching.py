"""The report's "Critical batch over training" section, for a branching study (records only; the measurement and
its choices: lamb_lars/study/analysis/branching.py; the runs: lamb_lars/study/running/branches.py).

From the trials: the reference is the study's baseline trial (batch B0); a branch is a trial of role ``branch``
whose params hold ``init_from_examples`` (the examples the reference had seen at the checkpoint it starts from: the
branch point is that over N, in epochs). A branch's loss is its ``loss`` (the study's ``branching.loss``) at its
last evaluation, after Δ examples; a diverged branch counts as an infinite loss (it loses); a branch that did not
finish (failed, pending) is left out and counted. B_simple(t) is the reference's logged ``noise_scale`` (an EMA,
McCandlish et al. 2018) at its last evaluation at or before the branch point.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

from lamb_lars.study.analysis import branching
from lamb_lars.study.records import Trial
from lamb_lars.study.report import plots
from lamb_lars.study.report.markdown import fmt, table

POINT_KEY = "init_from_examples"  # = lamb_lars.study.running.branches.POINT_KEY (the running layer writes it)
NOISE_KEY = "noise_scale"


def branch_losses(trials: Sequence[Trial], num_train: int, loss_key: str) -> tuple[list[branching.BranchLoss], int]:
  """(the finished branches as BranchLoss, the number of branches left out because they did not finish)."""
  out, missing = [], 0
  for t in trials:
    if t.role != "branch":
      continue
    loss = t.last(loss_key) if t.status == "done" else math.inf if t.status == "diverged" else None
    if loss is None or t.seed is None or t.params.get(POINT_KEY) is None:
      missing += 1
      continue
    out.append(branching.BranchLoss(float(t.params[POINT_KEY]) / num_train, t.batch_size, int(t.seed), loss))
  return out, missing


def b_simple_at(reference: Optional[Trial], examples: float) -> Optional[float]:
  """The reference's logged B_simple at its last evaluation at or before ``examples`` (None: not logged)."""
  if reference is None:
    return None
  rows = [
    r
    for r in reference.curve
    if r.get(NOISE_KEY) is not None and r.get("examples") is not None and float(r["examples"]) <= examples + 0.5
  ]
  return float(rows[-1][NOISE_KEY]) if rows else None


def schedule_string(schedule: Sequence[tuple[float, int]], num_train: int) -> str:
  """``branching.warmup_schedule``'s stages after the first as the trainer's ``batch_schedule`` in examples."""
  return ",".join(f"{round(e * num_train)}:{b}" for e, b in schedule[1:])


def _recipe(trials: Sequence[Trial], num_train: int) -> str:
  """ "Δ = … examples (… epochs) at the constant LR …" from the first branch's recorded overrides."""
  p = next(t.params for t in trials if t.role == "branch")
  delta = float(p.get("num_epochs", math.nan)) * num_train
  rule = {"linear": "B/B0", "sqrt": "√(B/B0)", "none": "1"}.get(str(p.get("init_from_lr_rule")), "?")
  return (
    f"Δ = {delta:,.0f} examples ({delta / num_train:.3g} epochs) at the constant LR "
    f"{float(p.get('init_from_lr_multiplier', math.nan)):g}·{rule}·η_ref(t), η_ref(t) the reference's LR at "
    "the point,"
  )


def _noise(value: Optional[float]) -> str:
  return "—" if value is None else f"{value:.4g}" if math.isfinite(value) else "non-finite"


def _cell(c: branching.CriticalBatch, batch: int) -> str:
  v = c.verdicts.get(batch)
  if v is None:
    return "—"
  if not math.isfinite(v.value):
    return f"{v.verdict} (diverged)"
  return f"{v.verdict} {v.value:+.4g} [{v.low:+.4g}, {v.high:+.4g}]"  # a blown-up branch's difference is huge


def _tables(
  traj: Sequence[branching.CriticalBatch], batches: Sequence[int], reference: Optional[Trial], num_train: int
) -> list[str]:
  rows = [
    [
      f"{c.point:.4g}",
      f"[{fmt(c.low)}, {fmt(c.high)}]",
      "yes" if c.censored else "no",
      _noise(b_simple_at(reference, c.point * num_train)),
    ]
    for c in traj
  ]
  lines = table(["point (epochs)", "CBS bracket [low, high]", "censored", "B_simple at the point"], rows)
  lines += [
    "Per batch: the verdict and the mean paired loss difference L(B) − L(B0) over the branch seeds with "
    "its 95% interval:",
    "",
  ]
  return lines + table(
    ["point (epochs)"] + [str(b) for b in batches], [[f"{c.point:.4g}"] + [_cell(c, b) for b in batches] for c in traj]
  )


DEFAULT_RELATIVE_EPSILONS = (0.05, 0.1, 0.2, 0.5)  # the other ε a relative study is shown at (issue 41)
DEFAULT_ABSOLUTE_FACTORS = (0.1, 0.2, 0.5, 2.0)  # an absolute ε: these multiples of it


def other_epsilons(epsilon: float, relative: bool, given: Sequence[float] = ()) -> list[float]:
  """The ε values of the sensitivity table: ``given`` (the config's ``epsilon_sensitivity``), else the defaults
  above; the pre-registered ``epsilon`` is always among them."""
  defaults = list(DEFAULT_RELATIVE_EPSILONS) if relative else [epsilon * f for f in DEFAULT_ABSOLUTE_FACTORS]
  vals = list(given) or defaults
  return sorted(set(vals) | {epsilon})


def sensitivity(
  found: Sequence[branching.BranchLoss], b0: int, epsilon: float, relative: bool, given: Sequence[float] = ()
) -> list[str]:
  """CBS(t) brackets at every ε of ``other_epsilons`` (the pre-registered one marked), one row per point."""
  eps = other_epsilons(epsilon, relative, given)
  trajs = {e: branching.trajectory(found, b0, e, relative=relative) for e in eps}
  name = lambda e: (f"{100 * e:g}%" if relative else f"{e:g}") + (" (the study's)" if e == epsilon else "")
  points = [c.point for c in trajs[epsilon]]
  rows = [
    [f"{p:.4g}"]
    + [
      f"[{fmt(trajs[e][i].low)}, {fmt(trajs[e][i].high)}]" + (" censored" if trajs[e][i].censored else "") for e in eps
    ]
    for i, p in enumerate(points)
  ]
  undetermined = {e: sum(c.low is None for c in trajs[e]) for e in eps}
  return [
    "Sensitivity to ε: the CBS bracket [low, high] at each point under other values of ε "
    + ("(a fraction of the mean B0 branch loss)" if relative else "(absolute)")
    + "; '—' = no batch above B0 passes (the lower end is undetermined). A statement about CBS(t) holds only if "
    "it holds in every column. Points with an undetermined lower end: "
    + ", ".join(f"ε = {name(e)}: {n} of {len(points)}" for e, n in undetermined.items())
    + ".",
    "",
  ] + table(["point (epochs)"] + [f"ε = {name(e)}" for e in eps], rows)


def section(
  trials: Sequence[Trial],
  out_dir: Optional[str],
  *,
  num_train: int,
  epsilon: float,
  relative: bool,
  loss_key: str,
  other_epsilons: Sequence[float] = (),
) -> list[str]:
  """The section's markdown lines ([] when the study has no branches)."""
  found, missing = branch_losses(trials, num_train, loss_key)
  if not found:
    return []
  reference = next((t for t in trials if t.role == "baseline"), None)
  b0 = reference.batch_size if reference is not None else min(b.batch_size for b in found)
  traj = branching.trajectory(found, b0, epsilon, relative=relative)
  batches = sorted({b.batch_size for b in found if b.batch_size != b0})
  lines = ["## Critical batch over training", "", _intro(trials, b0, num_train, epsilon, relative, loss_key), ""]
  lines += _tables(traj, batches, reference, num_train)
  lines += sensitivity(found, b0, epsilon, relative, other_epsilons)
  if missing:
    lines += [f"- left out: {missing} branch(es) that did not finish (failed or not run).", ""]
  schedule = branching.warmup_schedule(traj, b0)
  lines += [
    f"Batch-size warmup implied (double the batch while the conservative CBS, low, is at least twice it): "
    f'`batch_schedule="{schedule_string(schedule, num_train)}"` with `batch_schedule_unit="examples"` '
    f"(in epochs: {', '.join(f'{b} from {e:.4g}' for e, b in schedule)}).",
    "",
  ]
  noise = [b_simple_at(reference, c.point * num_train) for c in traj]
  by_noise = branching.doubling_schedule([(c.point, b) for c, b in zip(traj, noise)], b0)
  lines += [
    f"The same doubling rule on B_simple(t) instead of CBS(t) (the noise scale as the proxy): "
    f'`batch_schedule="{schedule_string(by_noise, num_train)}"` (in epochs: '
    f"{', '.join(f'{b} from {e:.4g}' for e, b in by_noise)}).",
    "",
  ]
  name = plots.cbs_trajectory(out_dir, "critical_batch_over_training.png", traj, b0, noise)
  return lines + [f"![CBS(t) and B_simple(t)]({name})", ""]


def _intro(trials: Sequence[Trial], b0: int, num_train: int, epsilon: float, relative: bool, loss_key: str) -> str:
  """The section's first paragraph: Merrill et al.'s measurement and this study's reference, ε and brackets."""
  eps = f"{100 * epsilon:g}% of the mean B0 branch loss" if relative else f"{epsilon:g}"
  return (
    "Merrill et al. 2025 (arXiv:2505.23971) measure the critical batch locally instead of as one number per "
    "workload: from checkpoints of one reference run, short branches train on at larger batches, the LR "
    "scaled by a rule, and each is compared with the reference batch after the same number of examples. "
    f"Here the reference trains at B0 = {b0}; from its checkpoint at each point every branch seed trains "
    f"{_recipe(trials, num_train)} at every batch, B0 included (the reference's own continuation, the pair "
    f"of each comparison). A batch does not lose when the paired difference of `{loss_key}` after Δ, "
    f"L(B) − L(B0), is within ε = {eps} (95% interval over the seeds: `pass` when wholly ≤ ε, `fail` when "
    f"wholly > ε, else `borderline`; a batch with a branch that blew up, loss non-finite or ≥ "
    f"{branching.BLOWUP:g}, is `fail`). CBS(t) is a bracket: low = the largest "
    "batch with every tested batch up to it passing, high = the largest with none up to it failing; "
    "*censored* = every tested batch passes (CBS ≥ the largest tested: the ladder was too short). "
    "B_simple(t) beside it is the gradient noise scale of McCandlish et al. 2018 logged by the reference "
    "(the critical batch they predict from gradient statistics); Merrill et al. find it a poor proxy."
  )
