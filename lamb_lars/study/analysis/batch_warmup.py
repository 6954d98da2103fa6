"""Batch-size warmup against fixed batches, with replicates (analysis layer, pure over records).

Batch-size warmup grows the batch during training as the critical batch grows: Merrill et al. 2025 ("Critical
Batch Size Revisited", arXiv:2505.23971, §5) double it whenever their measured CBS(t) allows and reach a slightly
better loss with 43% fewer gradient steps; Smith et al. 2017 ("Don't Decay the Learning Rate, Increase the Batch
Size") is the older form. A study compares *arms* (trials of role ``warmup``, the arm in ``technique``): the
fixed base batch (an arm named ``fixed_<B0>``, the smallest fixed batch), the warmup schedule, and other fixed
batches (e.g. the final CBS), each run with the same seeds, so arm and base see the same example stream
(``data_order='examples'``) and are compared seed by seed.

The measures (our definitions, following the issue that asked for them):

* **final test accuracy** per arm: mean and 95% Student-t interval over seeds (replicates.summarise);
* **the target** a*: the base arm's final test accuracy, at the low end of its 95% interval ("reaches the
  fixed-B0 run's final accuracy within its interval"); with one seed, its value less ``verdict.ACC_TOLERANCE``;
* **steps and examples to a*** per seed: the first evaluation with test accuracy ≥ a* (so the resolution is the
  evaluation cadence); a seed that never reaches it is censored (shown as "> its steps");
* **the step ratio** per seed, S_arm / S_base (a censored arm seed counts as ∞), and the verdict of its interval
  against 0.7 (≥ 30% fewer steps): ``pass`` when the whole interval is ≤ 0.7 (verdict.threshold_verdict,
  ``mode='min'``; single-seed tolerance 0.05, our choice).
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

from lamb_lars.study.analysis import plots, verdict as verdict_lib
from lamb_lars.study.analysis.markdown import pct, table
from lamb_lars.study.analysis.replicates import summarise
from lamb_lars.study.records import Trial

ROLE = "warmup"
ACC = "eval_accuracy"
MAX_RATIO = 0.7          # the goal: ≥ 30% fewer optimizer steps
RATIO_TOLERANCE = 0.05   # a single seed's ratio within 0.05 of 0.7 is borderline


def arms(trials: Sequence[Trial]) -> dict[str, list[Trial]]:
  """{arm: its finished trials by seed} over the trials of role ``warmup``."""
  out: dict[str, list[Trial]] = {}
  for t in sorted(trials, key=lambda t: (t.technique, t.seed or 0)):
    if t.role == ROLE and t.status in ("done", "diverged"):
      out.setdefault(t.technique, []).append(t)
  return out


def base_arm(by_arm: dict[str, list[Trial]]) -> Optional[str]:
  """The fixed base batch: the ``fixed_*`` arm with the smallest batch."""
  fixed = [a for a in by_arm if a.startswith("fixed")]
  return min(fixed, key=lambda a: by_arm[a][0].batch_size) if fixed else None


def final(t: Trial) -> float:
  v = t.last(ACC)
  return v if v is not None and t.status == "done" else math.nan


def target(base: Sequence[Trial]) -> float:
  """a*: the low end of the base arm's 95% interval of final test accuracy (module docstring)."""
  s = summarise([final(t) for t in base])
  return s.lo if s.lo is not None else s.mean - verdict_lib.ACC_TOLERANCE


def first_reaching(t: Trial, goal: float) -> Optional[tuple[int, int]]:
  """(step, examples) of the first evaluation with test accuracy ≥ ``goal``, or None (censored)."""
  for r in t.curve:
    if r.get(ACC) is not None and float(r[ACC]) >= goal:
      return int(r["step"]), int(r["examples"])
  return None


def step_ratios(arm: Sequence[Trial], base: Sequence[Trial], goal: float) -> list[float]:
  """S_arm,s / S_base,s for each seed s both arms ran and the base reached ``goal``; ∞ when the arm did not."""
  base_steps = {t.seed: first_reaching(t, goal) for t in base}
  out = []
  for t in arm:
    b, a = base_steps.get(t.seed), first_reaching(t, goal)
    if b is not None:
      out.append(math.inf if a is None else a[0] / b[0])
  return out


def _reach_text(t: Trial, goal: float) -> str:
  hit = first_reaching(t, goal)
  return f"{hit[0]} ({hit[1] / 1000:.0f}K ex)" if hit else f"> {t.curve[-1]['step'] if t.curve else 0}"


def rows(by_arm: dict[str, list[Trial]], base: str, goal: float) -> list[list[str]]:
  """One table row per arm: seeds, final accuracy with interval, steps to a* per seed, step ratio and verdict."""
  out = []
  for name, ts in by_arm.items():
    s = summarise([f for f in map(final, ts) if math.isfinite(f)])
    acc = "—" if s.mean is None else pct(s.mean) + (f" [{pct(s.lo)}, {pct(s.hi)}]" if s.lo is not None else "")
    ratios = step_ratios(ts, by_arm[base], goal)
    v = verdict_lib.threshold_verdict(ratios, MAX_RATIO, mode="min", tolerance=RATIO_TOLERANCE) if ratios else None
    out.append([name, len(ts), acc, "; ".join(_reach_text(t, goal) for t in ts),
                "—" if name == base or v is None else v.text(3)])
  return out


def section(trials: Sequence[Trial], out_dir: str) -> list[str]:
  """The report section (module docstring) with a figure of test accuracy against optimizer steps; [] when the
  study has no ``warmup`` trials or no base arm."""
  by_arm = arms(trials)
  base = base_arm(by_arm)
  if base is None:
    return []
  goal = target(by_arm[base])
  if not math.isfinite(goal):
    return [f"The base arm `{base}` has no finished run, so there is no target.", ""]
  lines = ["## Batch-size warmup against fixed batches", "",
           f"Arms of role `warmup`, each with the seeds listed; the base arm is `{base}`. Target a* = "
           f"{pct(goal)} test accuracy: the low end of `{base}`'s 95% interval of final accuracy. Steps (examples) "
           f"to a* per seed are the first evaluation at or above it; the ratio S_arm/S_base is per seed (same seed, "
           f"same example stream), with its 95% interval against {MAX_RATIO} (≥ 30% fewer steps: `pass` when the "
           f"whole interval is ≤ {MAX_RATIO}). Definitions: lamb_lars/study/analysis/batch_warmup.py.", ""]
  lines += table(["arm", "seeds", "final test accuracy (mean [95% CI])", "steps to a* per seed",
                  "S_arm/S_base vs 0.7"], rows(by_arm, base, goal))
  curves = {f"{name} seed {t.seed}": t.curve for name, ts in by_arm.items() for t in ts[:1]}
  png = plots.training_curves(out_dir, "batch_warmup.png", curves, title="Batch-size warmup against fixed batches "
                              "(first seed of each arm)", target=goal)
  return lines + ["", f"![batch-size warmup]({png})", ""]
