"""Batch-size warmup against fixed batches, with replicates (analysis layer, pure over records; its report section:
lamb_lars/study/report/report_batch_warmup.py).

Batch-size warmup grows the batch during training as the critical batch grows: Merrill et al. 2025 ("Critical
Batch Size Revisited", arXiv:2505.23971, §5) double it whenever their measured CBS(t) allows and reach a slightly
better loss with 43% fewer gradient steps; Smith et al. 2017 ("Don't Decay the Learning Rate, Increase the Batch
Size") is the older form. A study compares *arms* (trials of role ``warmup``, the arm in ``technique``): the
fixed base batch (an arm named ``fixed_<B0>``, the smallest fixed batch), the warmup schedule, and other fixed
batches (e.g. the final CBS), each run with the same seeds, so arm and base see the same example stream
(``data_order='examples'``) and are compared seed by seed.

The measures (our definitions, following the issue that asked for them: "reaches the fixed-B0 run's final accuracy,
within its interval, in ≥ 30% fewer optimizer steps"):

* **final test accuracy** per arm: mean and 95% Student-t interval over seeds (replicates.summarise);
* **non-inferiority** of an arm's final accuracy: the paired per-seed differences d_s = A_arm,s − A_base,s (same
  seed, same example stream) and the verdict of their 95% interval against −``verdict.ACC_TOLERANCE`` (−0.2 pp,
  the project's single-run tolerance): ``pass`` when the whole interval is above it (the arm is no worse than the
  base by more than 0.2 pp), ``fail`` when wholly below, else ``borderline``;
* **the step ratio**: the arm's optimizer steps over the base's (the whole budget, the same examples; a schedule
  fixes it, so it has no seed noise); the goal is ≤ 0.7;
* **steps and examples to a*** per seed, a* the low end of the base arm's 95% interval of final accuracy: the
  first evaluation with test accuracy ≥ a* (its resolution is the evaluation cadence); a seed that never reaches
  it is censored ("> its steps"). This is the steps-to-target view (Shallue et al. 2018) of the same runs.
* **against the best fixed batch** (issue 60's aim, stated against "the best fixed batch (tuned)"): the best fixed
  batch is the ``fixed_*`` arm, non-inferior to the base (the base itself eligible), with the fewest median steps
  to a* over its seeds (``best_fixed``); every other arm is compared with it seed by seed: met on a seed when it
  reaches a* in ≤ ``MAX_RATIO`` × the best's steps and ≤ ``MAX_EXAMPLES_RATIO`` × its examples; over seeds the
  one-sided sign test (verdict.sign_test) together with the arm's non-inferiority (``aim``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional, Sequence

from lamb_lars.study.analysis import selection, verdict as verdict_lib
from lamb_lars.study.analysis.replicates import summarise
from lamb_lars.study.records import Trial

ROLE = "warmup"
ACC = "eval_accuracy"
MAX_RATIO = 0.7  # the goal: ≥ 30% fewer optimizer steps


def arms(trials: Sequence[Trial]) -> dict[str, list[Trial]]:
  """{arm: its finished trials by seed} over the trials of role ``warmup``. A searched arm (its trials have a search
  space, e.g. a fixed batch with a searched LR warmup) is its chosen configuration (on the validation
  split, selection.chosen_of_cell) with that configuration's replicate seeds."""
  out: dict[str, list[Trial]] = {}
  for t in sorted(trials, key=lambda t: (t.technique, t.seed or 0)):
    if t.role == ROLE and t.status in ("done", "diverged"):
      out.setdefault(t.technique, []).append(t)
  for name, group in list(out.items()):
    if any(t.space for t in group if t.phase != "replicate"):
      pick = selection.chosen_of_cell(group)
      keep = [] if pick is None else [t for t in group if t.run_id == pick.run_id or t.replicate_of == pick.run_id]
      if keep:
        out[name] = keep
      else:
        del out[name]
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


def paired_differences(arm: Sequence[Trial], base: Sequence[Trial]) -> list[float]:
  """A_arm,s − A_base,s of final test accuracy for each seed both arms ran (nan where a run did not finish)."""
  by_seed = {t.seed: final(t) for t in base}
  return [final(t) - by_seed[t.seed] for t in arm if t.seed in by_seed]


def non_inferiority(
  arm: Sequence[Trial], base: Sequence[Trial], margin: float = verdict_lib.ACC_TOLERANCE
) -> Optional[verdict_lib.Verdict]:
  """The verdict of the paired differences against −``margin`` (the study config's pre-registered
  ``analysis.noninferiority_margin``; module docstring); None without a pair."""
  d = [x if math.isfinite(x) else -math.inf for x in paired_differences(arm, base)]
  if not d:
    return None
  return verdict_lib.threshold_verdict(d, -margin, mode="max", tolerance=verdict_lib.ACC_TOLERANCE)


def total_steps(ts: Sequence[Trial]) -> Optional[int]:
  """The arm's optimizer steps over its whole budget (the largest last step of its runs)."""
  steps = [int(t.curve[-1]["step"]) for t in ts if t.curve]
  return max(steps) if steps else None


# ---- against the best fixed batch (issue 60's aim; pre-registered in mnist_batch_warmup.py, ``:best_fixed``) ----
MAX_EXAMPLES_RATIO = 1.1  # the aim: at most 10% more examples than the best fixed batch


def reach_steps(t: Trial, goal: float) -> float:
  """Steps to ``goal`` (first_reaching), ∞ for a seed that never reaches it."""
  hit = first_reaching(t, goal)
  return float(hit[0]) if hit else math.inf


def median_steps(ts: Sequence[Trial], goal: float) -> float:
  """The median over seeds of the steps to ``goal`` (a seed that never reaches it counts as ∞; the lower median of
  an even count, so that half the seeds reach it in at most that many steps)."""
  v = sorted(reach_steps(t, goal) for t in ts)
  return v[(len(v) - 1) // 2] if v else math.inf


def best_fixed(
  by_arm: dict[str, list[Trial]], base: str, goal: float, margin: float = verdict_lib.ACC_TOLERANCE
) -> Optional[str]:
  """The best fixed batch: among the ``fixed_*`` arms whose final accuracy is non-inferior to the base's
  (``pass``; the base itself is eligible), the one with the fewest median steps to a* over its seeds
  (``median_steps``); a tie goes to the smaller batch. None when no fixed arm reaches a* in half its seeds."""
  ok = []
  for name, ts in by_arm.items():
    if not name.startswith("fixed") or not ts:
      continue
    v = None if name == base else non_inferiority(ts, by_arm[base], margin)
    if name == base or (v is not None and v.verdict == verdict_lib.PASS):
      ok.append((median_steps(ts, goal), ts[0].batch_size, name))
  ok = [o for o in ok if math.isfinite(o[0])]
  return min(ok)[2] if ok else None


@dataclasses.dataclass(frozen=True)
class Aim:
  """An arm against the best fixed batch, seed by seed: the steps and examples ratios to a* (None where the arm
  misses a*; ``inf``-free: a seed where only the best fixed arm misses counts as meeting the aim, ratio 0), how many
  seeds meet the aim, the one-sided sign test over them, the arm's non-inferiority to the base, and the verdict."""

  arm: str
  best: str
  ratios: tuple[tuple[int, Optional[float], Optional[float], bool], ...]  # (seed, steps ratio, examples ratio, met)
  test: verdict_lib.SignTest
  noninferior: str
  verdict: str


def aim(
  arm: Sequence[Trial],
  best: Sequence[Trial],
  base: Sequence[Trial],
  goal: float,
  name: str,
  best_name: str,
  margin: float = verdict_lib.ACC_TOLERANCE,
) -> Optional[Aim]:
  """Issue 60's aim for ``arm`` against the best fixed batch ``best``: per seed both ran, met when the arm reaches
  a* in ≤ ``MAX_RATIO`` × the best's steps and ≤ ``MAX_EXAMPLES_RATIO`` × its examples (a best-arm seed that misses
  a* counts as ∞). ``met`` when the sign test over seeds passes (verdict.sign_test: 7 of 8 seeds) and the arm is
  non-inferior to the base; ``not met`` when the sign test fails or non-inferiority fails; else inconclusive. None
  without a seed in common."""
  by_seed = {t.seed: t for t in best}
  rows = []
  for t in arm:
    if t.seed not in by_seed:
      continue
    a, b = first_reaching(t, goal), first_reaching(by_seed[t.seed], goal)
    if a is None:
      rows.append((int(t.seed or 0), None, None, False))
    elif b is None:
      rows.append((int(t.seed or 0), 0.0, 0.0, True))
    else:
      rs, re_ = a[0] / b[0], a[1] / b[1]
      rows.append((int(t.seed or 0), rs, re_, rs <= MAX_RATIO and re_ <= MAX_EXAMPLES_RATIO))
  if not rows:
    return None
  test = verdict_lib.sign_test(sum(r[3] for r in rows), len(rows))
  ni = non_inferiority(arm, base, margin)
  ni_text = "—" if ni is None else ni.verdict
  if test.verdict == verdict_lib.PASS and ni_text == verdict_lib.PASS:
    out = "met"
  elif test.verdict == verdict_lib.FAIL or ni_text == verdict_lib.FAIL:
    out = "not met"
  else:
    out = "inconclusive"
  return Aim(name, best_name, tuple(rows), test, ni_text, out)
