"""The report's "Batch-size warmup against fixed batches" section: one table row per arm and a figure of test
accuracy against optimizer steps. The measures and their definitions: lamb_lars/study/analysis/batch_warmup.py.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

from lamb_lars.study.analysis import batch_warmup as bw, verdict as verdict_lib
from lamb_lars.study.analysis.replicates import summarise
from lamb_lars.study.records import Trial
from lamb_lars.study.report import plots
from lamb_lars.study.report.markdown import pct, table


def _reach_text(t: Trial, goal: float) -> str:
  hit = bw.first_reaching(t, goal)
  return f"{hit[0]} ({hit[1] / 1000:.0f}K ex)" if hit else f"> {t.curve[-1]['step'] if t.curve else 0}"


def _pp(v: verdict_lib.Verdict) -> str:
  if not math.isfinite(v.value):
    return f"{v.verdict}: a seed did not finish"
  return f"{v.verdict}: {100 * v.value:+.2f} pp [{100 * v.low:+.2f}, {100 * v.high:+.2f}] (n={v.num_values})"


def rows(
  by_arm: dict[str, list[Trial]], base: str, goal: float, margin: float = verdict_lib.ACC_TOLERANCE
) -> list[list]:
  """One table row per arm: seeds, final accuracy with interval, non-inferiority, total steps and their ratio to
  the base's, and steps to a* per seed."""
  out, base_steps = [], bw.total_steps(by_arm[base])
  for name, ts in by_arm.items():
    s = summarise([f for f in map(bw.final, ts) if math.isfinite(f)])
    acc = "—" if s.mean is None else pct(s.mean) + (f" [{pct(s.lo)}, {pct(s.hi)}]" if s.lo is not None else "")
    diverged = sum(not math.isfinite(bw.final(t)) for t in ts)
    acc += f" ({diverged} not finished)" if diverged else ""
    acc += "; per seed " + ", ".join(pct(bw.final(t)) for t in ts)
    v = None if name == base else bw.non_inferiority(ts, by_arm[base], margin)
    steps = bw.total_steps(ts)
    ratio = "—" if name == base or not steps or not base_steps else f"{steps / base_steps:.3f}"
    out.append(
      [name, len(ts), acc, "—" if v is None else _pp(v), steps, ratio, "; ".join(_reach_text(t, goal) for t in ts)]
    )
  return out


MARGIN_SENSITIVITY = (0.001, 0.002, 0.003, 0.005)  # non-inferiority margins printed beside the pre-registered one


def margin_rows(by_arm: dict[str, list[Trial]], base: str, margin: float) -> list[list]:
  """Per arm, the non-inferiority verdict at each margin of ``MARGIN_SENSITIVITY`` and the pre-registered one (the
  same paired differences, a different bar)."""
  margins = sorted(set(MARGIN_SENSITIVITY) | {margin})
  out = []
  for name, ts in by_arm.items():
    if name == base:
      continue
    vs = [bw.non_inferiority(ts, by_arm[base], m) for m in margins]
    out.append([name] + ["—" if v is None else v.verdict for v in vs])
  return out


def section(
  trials: Sequence[Trial],
  out_dir: Optional[str],
  margin: float = verdict_lib.ACC_TOLERANCE,
  best_fixed: bool = False,
) -> list[str]:
  """The report section (module docstring) with a figure of test accuracy against optimizer steps; [] when the
  study has no ``warmup`` trials or no base arm. ``best_fixed``: with the comparison against the best fixed batch
  (``best_fixed_lines``; the study config's ``analysis.best_fixed``)."""
  by_arm = bw.arms(trials)
  base = bw.base_arm(by_arm)
  if base is None:
    return []
  goal = bw.target(by_arm[base])
  if not math.isfinite(goal):
    return [f"The base arm `{base}` has no finished run, so there is no target.", ""]
  lines = [
    "## Batch-size warmup against fixed batches",
    "",
    f"Arms of role `warmup`; the base arm is `{base}`. Non-inferiority: the 95% interval of the paired "
    f"per-seed differences of final test accuracy (arm − base, same seed, same example stream) against "
    f"−{100 * margin:g} pp (`pass`: no worse by more than that). Steps: the whole "
    f"budget's optimizer steps and their ratio to the base's (goal ≤ {bw.MAX_RATIO}: ≥ 30% fewer). Steps "
    f"(examples) to a* = {pct(goal)}% test accuracy, the low end of `{base}`'s 95% interval of final "
    f"accuracy: the first evaluation at or above it, per seed. Definitions: "
    f"lamb_lars/study/analysis/batch_warmup.py.",
    "",
  ]
  lines += table(
    [
      "arm",
      "seeds",
      "final test accuracy, % (mean [95% CI])",
      "arm − base (non-inferiority)",
      "steps",
      "steps ÷ base",
      "steps to a* per seed",
    ],
    rows(by_arm, base, goal, margin),
  )
  margins = sorted(set(MARGIN_SENSITIVITY) | {margin})
  lines += [
    "",
    "Sensitivity to the margin: the same paired differences against other margins (the pre-registered one marked).",
    "",
  ] + table(
    ["arm"] + [f"−{100 * m:g} pp" + (" (pre-registered)" if m == margin else "") for m in margins],
    margin_rows(by_arm, base, margin),
  )
  lines += best_fixed_lines(by_arm, base, goal, margin) if best_fixed else []
  curves = {f"{name} seed {t.seed}": t.curve for name, ts in by_arm.items() for t in ts[:1]}
  png = plots.training_curves(
    out_dir,
    "batch_warmup.png",
    curves,
    title="Batch-size warmup against fixed batches (first seed of each arm)",
    target=goal,
  )
  return lines + ["", f"![batch-size warmup]({png})", ""]


def _ratio(x: Optional[float]) -> str:
  return "misses a*" if x is None else f"{x:.2f}"


def best_fixed_lines(
  by_arm: dict[str, list[Trial]], base: str, goal: float, margin: float = verdict_lib.ACC_TOLERANCE
) -> list[str]:
  """The "against the best fixed batch" subsection (batch_warmup.best_fixed, batch_warmup.aim), when the study has
  a fixed arm besides the base (a tuned one) and an arm that is not fixed; [] otherwise."""
  fixed = [a for a in by_arm if a.startswith("fixed")]
  others = [a for a in by_arm if not a.startswith("fixed")]
  if len(fixed) < 2 or not others:
    return []
  best = bw.best_fixed(by_arm, base, goal, margin)
  medians = "; ".join(f"{a}: {bw.median_steps(by_arm[a], goal):g}" for a in fixed)
  lines = [
    "",
    "### Against the best fixed batch",
    "",
    f"The best fixed batch: among the fixed arms non-inferior to `{base}` (itself eligible), the fewest median steps "
    f"to a* over seeds (a seed that misses a* counts as ∞): median steps to a* {medians}. "
    + (f"Best: **`{best}`**." if best else "No fixed arm reaches a* in half its seeds: no best fixed batch."),
    "",
  ]
  if best is None:
    return lines
  lines += [
    f"The aim per seed: a* in ≤ {bw.MAX_RATIO}× the best fixed arm's steps and ≤ {bw.MAX_EXAMPLES_RATIO}× its "
    "examples; over seeds: the one-sided sign test (p < 0.05) and non-inferiority to the base "
    f"(−{100 * margin:g} pp). `met` needs both; `not met` when either fails.",
    "",
  ]
  rows = []
  for name in others:
    a = bw.aim(by_arm[name], by_arm[best], by_arm[base], goal, name, best, margin)
    if a is None:
      continue
    rows.append(
      [
        name,
        best,
        "; ".join(f"{s}: {_ratio(r)}" for s, r, _, _ in a.ratios),
        "; ".join(f"{s}: {_ratio(e)}" for s, _, e, _ in a.ratios),
        f"{a.test.k} of {a.test.n} (p = {a.test.p:.3g})",
        a.noninferior,
        f"**{a.verdict}**",
      ]
    )
  return lines + table(
    [
      "arm",
      "best fixed",
      "steps ratio per seed",
      "examples ratio per seed",
      "seeds meeting the aim",
      "non-inferior",
      "aim",
    ],
    rows,
  )
