"""The report's scaling sections: steps to target per batch size (Shallue et al. 2018), the inverse-law fit
S(B) = S_min·(1 + B_crit/B), the step-time fit t(B) = γ + δB with the time-optimal batch B*, the Golmant et al.
2018 breakdown point, and the gradient noise scale B_simple (McCandlish et al. 2018) against the fitted B_crit,
with its trajectory over training (noise_trajectory.py).
Report layer: reads records only. Definitions: docs/studies.md.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional, Sequence

import numpy as np

from lamb_lars.study.analysis import critical_batch, noise_trajectory
from lamb_lars.study.analysis.steps_to_target import INFEASIBLE, first_hit, reached_arrays, steps_to_target
from lamb_lars.study.records import Target, Trial
from lamb_lars.study.report import plots
from lamb_lars.study.report.markdown import fmt, table
from lamb_lars.study.report.report_curves import best_per_batch, series


def step_times(trials: Sequence[Trial]) -> dict[int, float]:
  by_batch: dict[int, list[float]] = {}
  for t in trials:
    s = critical_batch.seconds_per_step(t.curve) if t.status != "failed" else None
    if s is not None and s > 0:
      by_batch.setdefault(t.batch_size, []).append(s)
  return {b: float(np.median(v)) for b, v in sorted(by_batch.items())}


def b_crit_caveat(fit: critical_batch.InverseLawFit, batches: Sequence[int]) -> Optional[str]:
  """A warning when the fitted B_crit lies beyond every batch that reached the goal, else None.

  Below B_crit, S(B) falls almost in proportion to 1/B (perfect scaling). A fit over such batches alone sees no
  bend, and its B_crit is set by noise: the data bound it from below only (Shallue et al. 2018 §4; McCandlish et al.
  2018 eq. 2.11). Example: MNIST steps to 99.0%, docs/studies/rerun_2026-11-24 at a4e5c88, run 4."""
  largest = max(batches)
  if not fit.b_crit > largest:
    return None
  return (
    f"Caution: B_crit = {fmt(fit.b_crit)} lies beyond the largest batch that reached the goal ({largest}). "
    f"Up to there S(B) shows no bend, so the data only say B_crit ≳ {largest}."
  )


@dataclasses.dataclass(frozen=True)
class StepsFit:
  """The steps section's S(B) fit: ``fit`` (None: no fit, or one that does not measure B_crit) and ``why`` it
  does not measure B_crit (critical_batch.why_not_measured; '' when it does or there is none)."""

  fit: Optional[critical_batch.InverseLawFit] = None
  why: str = ""


def steps_section(
  trials, target: Optional[Target], out_dir: Optional[str], *, fit_rule: str = "any", left_out=(), technique=""
) -> tuple[list[str], StepsFit]:
  """Steps to target per batch, the S(B) fit and what derives from it. ``fit_rule``: 'measured' (issue 62) prints a
  fit that does not measure B_crit (critical_batch.why_not_measured) as "not measured (why)", in the figure too,
  derives nothing from it and lists every trial left out of the fit (``left_out``: the trials of other techniques
  than ``technique``, the study's analysis.target_technique); 'any' keeps the reports published before."""
  lines = ["## Steps to target", ""]
  if target is None:
    return lines + [
      "No target given (`target=Target(metric, goal, mode)`): steps-to-target, the S(B) fit, "
      "B* and the breakdown point are skipped.",
      "",
    ], StepsFit()
  res = steps_to_target(trials, target.metric, target.goal, target.mode)
  goal = goal_text(target)
  lines += [
    f"Goal: the first evaluation with {goal_sentence(target)}; "
    "diverged and failed trials are infeasible (Shallue et al. 2018).",
    "",
  ]
  if not res:
    return [], StepsFit()
  lines += table(
    ["batch", "steps", "epochs", "wall-clock s", "best run", "trials", "feasible", "reached"],
    [
      [
        b,
        r.steps,
        r.epochs,
        r.wall_time,
        r.best_run_id and f"`{r.best_run_id}`",
        r.num_trials,
        r.num_feasible,
        r.num_reached,
      ]
      for b, r in res.items()
    ],
  )
  lines += [
    "Best run = the feasible trial that reached the goal in the fewest steps; steps, epochs and wall-clock "
    "seconds are that trial's (at its first evaluation past the goal).",
    "",
  ]
  bs, steps = reached_arrays(res)
  if fit_rule == "measured":
    fit_lines, result = _measured_fit_lines(bs, steps)
    fit_lines += left_out_lines(trials, res, target, left_out, technique)
  else:
    fit_lines, fit = _inverse_law_lines(bs, steps)
    result = StepsFit(fit)
  lines += fit_lines
  if bs:
    name = plots.steps_vs_batch(
      out_dir, "steps_to_target.png", bs, steps, result.fit, target=goal, not_measured=result.why
    )
    lines += [f"![steps to target]({name})", ""]
  lines += _step_time_lines(trials, result.fit, result.why)
  lines += _breakdown_lines(trials, target)
  return lines, result


def _measured_fit_lines(bs: Sequence[int], steps: Sequence[float]) -> tuple[list[str], StepsFit]:
  """The S(B) fit under the rule of issue 62: its numbers only when it measures B_crit (≥ 3 batch sizes, B_crit
  inside them); otherwise "not measured (why)" and no number of it."""
  law = "S(B) = S_min·(1 + B_crit/B)"
  if len(set(bs)) < 2:
    why = critical_batch.why_not_measured(math.nan, bs) or ""
    return [f"Fit {law}: not measured ({why}).", ""], StepsFit(None, why)
  fit = critical_batch.fit_inverse_law(bs, steps)
  why = critical_batch.why_not_measured(fit.b_crit, bs)
  if why:
    return [
      f"Fit {law} over {len(set(bs))} batch size(s): B_crit not measured ({why}); S_min, E_min and the "
      "time-optimal batch are not derived from it.",
      "",
    ], StepsFit(None, why)
  return [
    f"Fit {law} (least squares in log S): S_min = {fmt(fit.s_min)}, B_crit = {fmt(fit.b_crit)}, E_min = "
    f"S_min·B_crit = {fmt(fit.e_min)} examples, rms log residual {fit.rms_log_residual:.3f} over "
    f"{fit.num_points} batch sizes.",
    "",
  ], StepsFit(fit)


def left_out_lines(trials: Sequence[Trial], res, target: Target, others: Sequence[Trial], technique: str) -> list[str]:
  """Every trial the S(B) fit leaves out, grouped by why: each batch's fit point is its best run (the fewest steps
  to the goal); the rest reached it later, missed it, were infeasible, or are of another technique than the
  study's analysis.target_technique."""
  best = {r.best_run_id for r in res.values() if r.best_run_id}
  why: dict[str, list[str]] = {}

  def add(reason: str, t: Trial, extra: str = "") -> None:
    why.setdefault(reason, []).append(f"`{t.run_id}` ({t.batch_size}{extra})")

  for t in sorted(trials, key=lambda t: (t.batch_size, t.run_id)):
    hit = first_hit(t.curve, target.metric, target.goal, target.mode)
    if t.run_id in best:
      continue
    if t.status in INFEASIBLE:
      add(f"{t.status} (infeasible)", t)
    elif hit is None:
      add("did not reach the goal", t)
    else:
      add("reached the goal later than the best run at its batch", t, f", step {hit['step']}")
  for t in sorted(others, key=lambda t: (t.batch_size, t.run_id)):
    hit = first_hit(t.curve, target.metric, target.goal, target.mode) if t.status not in INFEASIBLE else None
    kind = f"role `{t.role}`" + (f", technique `{t.technique}`" if t.technique else "")
    reason = f"not of analysis.target_technique = `{technique}` ({kind})" + (", reached the goal" if hit else "")
    add(reason, t, f", step {hit['step']}" if hit else "")
  if not why:
    return []
  n = sum(len(v) for v in why.values())
  return (
    [f"Left out of the fit ({n} trial{'s' if n != 1 else ''}; the fit takes each batch's best run):", ""]
    + [f"- {reason}: {', '.join(runs)}" for reason, runs in why.items()]
    + [""]
  )


def _inverse_law_lines(
  bs: Sequence[int], steps: Sequence[float]
) -> tuple[list[str], Optional[critical_batch.InverseLawFit]]:
  """The S(B) fit over the batches that reached the goal (at least two), with its caveat; and the fit (None: none)."""
  if len(set(bs)) < 2:
    return ["Fewer than two batch sizes reached the goal: no S(B) fit.", ""], None
  fit = critical_batch.fit_inverse_law(bs, steps)
  lines = [
    f"Fit S(B) = S_min·(1 + B_crit/B) (least squares in log S): S_min = {fmt(fit.s_min)}, "
    f"B_crit = {fmt(fit.b_crit)}, E_min = S_min·B_crit = {fmt(fit.e_min)} examples, "
    f"rms log residual {fit.rms_log_residual:.3f} over {fit.num_points} batch sizes"
    + (
      " (two points for two parameters: the curve passes through both, so it does not test the law)."
      if fit.num_points == 2
      else "."
    ),
    "",
  ]
  caveat = b_crit_caveat(fit, bs)
  if caveat:
    lines += [caveat, ""]
  return lines, fit


def _step_time_lines(trials: Sequence[Trial], fit: Optional[critical_batch.InverseLawFit], why: str = "") -> list[str]:
  """The step-time fit t(B) = γ + δB and, with an S(B) fit that measures B_crit, the time-optimal batch B*."""
  times = step_times(trials)
  if len(times) < 2:
    return ["Step times at fewer than two batch sizes: no t(B) fit, no B*.", ""]
  stf = critical_batch.fit_step_time(list(times), list(times.values()))
  lines = [
    f"Step time t(B) = γ + δ·B: γ = {stf.gamma:.4g} s, δ = {stf.delta:.4g} s/example "
    "(median Δwall/Δstep per batch, first eval interval skipped; "
    "least squares in relative error, γ, δ ≥ 0)."
  ]
  if why:
    return lines + ["Time-optimal batch B*: not computed, since B_crit is not measured.", ""]
  if fit is not None and stf.delta == 0:
    lines += ["δ = 0: a step costs the same at every batch, so a larger batch is always faster (B* = ∞)."]
  elif fit is not None and stf.gamma > 0:
    lines += [f"Time-optimal batch B* = √(B_crit·γ/δ) = {fmt(critical_batch.optimal_batch(fit, stf))}."]
  elif fit is not None:
    lines += [
      "γ = 0: a step has no fixed cost to amortise, so the time to the goal T(B) = S(B)·δ·B = "
      "δ·S_min·(B + B_crit) grows with B and the smallest batch is the fastest here (B* = 0): on this "
      "machine a larger batch buys no parallelism."
    ]
  return lines + [""]


def _breakdown_lines(trials: Sequence[Trial], target: Target) -> list[str]:
  """The Golmant et al. 2018 breakdown point in wall-clock time to the goal."""
  by_time = steps_to_target(trials, target.metric, target.goal, target.mode, by="wall_time")
  point = critical_batch.breakdown_point(list(by_time), [r.wall_time for r in by_time.values()])
  return [
    "Breakdown point (Golmant et al. 2018; smallest batch beyond which no larger batch reaches the goal "
    f"more than 5% faster in wall-clock): {fmt(point) if point else 'not observed in the measured range'}.",
    "",
  ]


def goal_text(target: Target) -> str:
  """``99.0% test accuracy`` (accuracies in %), else ``eval_loss 0.05``."""
  words = {"eval_accuracy": "test accuracy", "validation_accuracy": "validation accuracy"}
  if target.metric in words:
    return f"{100 * target.goal:.1f}% {words[target.metric]}"
  return f"{target.metric} {target.goal:g}"


def goal_sentence(target: Target) -> str:
  """``test accuracy ≥ 99.0%`` (the goal as a condition)."""
  cmp = "≥" if target.mode == "max" else "≤"
  words = {"eval_accuracy": "test accuracy", "validation_accuracy": "validation accuracy"}
  if target.metric in words:
    return f"{words[target.metric]} {cmp} {100 * target.goal:.1f}% (`{target.metric}`)"
  return f"`{target.metric}` {cmp} {target.goal:g}"


def late_median(t: Trial, key: str) -> Optional[float]:
  """The median of the finite values of ``key`` logged in the second half of the run's *budget* (its
  budget_steps, else its last eval step), non-positive ones included; the non-finite ones are counted in the
  report (noise_trajectory.count_nonfinite). A run stopped before half its budget has none: its early values
  are not late ones (the same phasing as noise_trajectory.trajectory)."""
  steps, v = series(t, key)
  if not steps:
    return None
  half = (t.budget_steps() or max(steps)) / 2.0
  v = [x for s, x in zip(steps, v) if s > half and x is not None and math.isfinite(x)]
  return float(np.median(v)) if v else None


def noise_section(
  trials, out_dir: Optional[str], fit: Optional[critical_batch.InverseLawFit], limit: int, why: str = ""
) -> list[str]:
  """B_simple against the fitted B_crit; ``why``: why the fit does not measure B_crit (then no number of it)."""
  lines = ["## Predicted vs fitted critical batch", ""]
  have = [t for t in trials if t.status != "failed" and late_median(t, "noise_scale") is not None]
  if not have:
    return []
  per_batch: dict[int, list[Trial]] = {}
  for t in have:
    per_batch.setdefault(t.batch_size, []).append(t)
  predicted = float(np.median([late_median(t, "noise_scale") for t in have]))
  fitted = fit.b_crit if fit is not None else None
  bad, total = noise_trajectory.count_nonfinite(have)
  lines += table(
    ["batch", "B_simple (median over runs of each run's second-half median)", "runs", "non-finite evals / evals"],
    [
      [
        b,
        float(np.median([late_median(t, "noise_scale") for t in ts])),
        len(ts),
        "{} / {}".format(*noise_trajectory.count_nonfinite(ts)),
      ]
      for b, ts in sorted(per_batch.items())
    ],
  )
  lines += [
    f"Predicted B_crit ≈ B_simple = {fmt(predicted)} (second-half median; {bad} of {total} evaluations "
    "were non-finite and are not in it); fitted B_crit = "
    f"{fmt(fitted) if fitted is not None else f'not measured ({why})' if why else 'no fit'}"
    + (f"; ratio predicted/fitted = {predicted / fitted:.3g}." if fitted and math.isfinite(fitted) else "."),
    "",
  ]
  lines += trajectory_lines(per_batch)
  best = best_per_batch(have, limit)
  name = plots.series_plot(
    out_dir,
    "noise_scale.png",
    {f"batch {b:,}": series(t, "noise_scale") for b, t in best.items()},
    "training step",
    "gradient noise scale B_simple (examples, log scale)",
    hline=fitted,
    hlabel="fitted critical batch B_crit",
    logx=False,
    title="Gradient noise scale during training (best trial per batch size)",
  )
  return lines + [f"![noise scale]({name})", ""]


def trajectory_lines(per_batch: dict[int, list[Trial]], num_phases: int = 10) -> list[str]:
  """B_simple per tenth of training (noise_trajectory.py): it is no constant, so no single number stands for it."""
  traj = {b: noise_trajectory.trajectory(ts, num_phases=num_phases) for b, ts in sorted(per_batch.items())}
  cell = lambda p: (
    ("—" if p.median is None else f"{fmt(p.median)} [{fmt(p.q25)}, {fmt(p.q75)}], n {p.num_finite}")
    + (f", {p.num_nonfinite} non-finite" if p.num_nonfinite else "")
    + (f", {p.num_nonpositive} ≤ 0" if p.num_nonpositive else "")
  )
  rows = [
    [f"{10 * k}–{10 * (k + 1)}%" if num_phases == 10 else f"{k + 1}/{num_phases}"] + [cell(traj[b][k]) for b in traj]
    for k in range(num_phases)
  ]
  return [
    "B_simple over training: per phase of each run's budget in steps, the median [quartiles] of the finite "
    "evaluations, their number n, and the non-finite ones (counted, never used).",
    "",
  ] + table(["phase of training"] + [f"B = {b}" for b in traj], rows)
