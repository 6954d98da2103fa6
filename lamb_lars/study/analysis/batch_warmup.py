"""Batch-size warmup against fixed batches, with replicates (analysis layer, pure over records).

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
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

from lamb_lars.study.analysis import plots, selection, verdict as verdict_lib
from lamb_lars.study.analysis.markdown import pct, table
from lamb_lars.study.analysis.replicates import summarise
from lamb_lars.study.records import Trial

ROLE = "warmup"
ACC = "eval_accuracy"
MAX_RATIO = 0.7          # the goal: ≥ 30% fewer optimizer steps


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


def non_inferiority(arm: Sequence[Trial], base: Sequence[Trial],
                    margin: float = verdict_lib.ACC_TOLERANCE) -> Optional[verdict_lib.Verdict]:
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


def _reach_text(t: Trial, goal: float) -> str:
  hit = first_reaching(t, goal)
  return f"{hit[0]} ({hit[1] / 1000:.0f}K ex)" if hit else f"> {t.curve[-1]['step'] if t.curve else 0}"


def _pp(v: verdict_lib.Verdict) -> str:
  if not math.isfinite(v.value):
    return f"{v.verdict}: a seed did not finish"
  return f"{v.verdict}: {100 * v.value:+.2f} pp [{100 * v.low:+.2f}, {100 * v.high:+.2f}] (n={v.num_values})"


def rows(by_arm: dict[str, list[Trial]], base: str, goal: float,
         margin: float = verdict_lib.ACC_TOLERANCE) -> list[list]:
  """One table row per arm: seeds, final accuracy with interval, non-inferiority, total steps and their ratio to
  the base's, and steps to a* per seed."""
  out, base_steps = [], total_steps(by_arm[base])
  for name, ts in by_arm.items():
    s = summarise([f for f in map(final, ts) if math.isfinite(f)])
    acc = "—" if s.mean is None else pct(s.mean) + (f" [{pct(s.lo)}, {pct(s.hi)}]" if s.lo is not None else "")
    diverged = sum(not math.isfinite(final(t)) for t in ts)
    acc += f" ({diverged} not finished)" if diverged else ""
    acc += "; per seed " + ", ".join(pct(final(t)) for t in ts)
    v = None if name == base else non_inferiority(ts, by_arm[base], margin)
    steps = total_steps(ts)
    ratio = "—" if name == base or not steps or not base_steps else f"{steps / base_steps:.3f}"
    out.append([name, len(ts), acc, "—" if v is None else _pp(v), steps, ratio,
                "; ".join(_reach_text(t, goal) for t in ts)])
  return out


def section(trials: Sequence[Trial], out_dir: Optional[str], margin: float = verdict_lib.ACC_TOLERANCE) -> list[str]:
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
           f"Arms of role `warmup`; the base arm is `{base}`. Non-inferiority: the 95% interval of the paired "
           f"per-seed differences of final test accuracy (arm − base, same seed, same example stream) against "
           f"−{100 * margin:g} pp (`pass`: no worse by more than that). Steps: the whole "
           f"budget's optimizer steps and their ratio to the base's (goal ≤ {MAX_RATIO}: ≥ 30% fewer). Steps "
           f"(examples) to a* = {pct(goal)}% test accuracy, the low end of `{base}`'s 95% interval of final "
           f"accuracy: the first evaluation at or above it, per seed. Definitions: "
           f"lamb_lars/study/analysis/batch_warmup.py.", ""]
  lines += table(["arm", "seeds", "final test accuracy, % (mean [95% CI])", "arm − base (non-inferiority)",
                  "steps", "steps ÷ base", "steps to a* per seed"], rows(by_arm, base, goal, margin))
  curves = {f"{name} seed {t.seed}": t.curve for name, ts in by_arm.items() for t in ts[:1]}
  png = plots.training_curves(out_dir, "batch_warmup.png", curves, title="Batch-size warmup against fixed batches "
                              "(first seed of each arm)", target=goal)
  return lines + ["", f"![batch-size warmup]({png})", ""]
