"""Replicates: a cell's chosen configuration re-run with fresh seeds, summarised with its uncertainty.

A seed (``config.seed``) sets the initialisation, the order of the training data and the per-step randomness
(dropout, augmentation). The chosen configuration of a cell (selection.py, on the validation split) is re-run with
k fresh seeds (phases.py); the cell's test accuracy is then the mean over those k replicates, with

  sd = √(Σ (x_i − x̄)² / (k − 1)),   95% interval  x̄ ± t_{0.975, k−1} · sd / √k

(Student's t interval for the mean of k independent runs). The chosen trial itself is not among the k: it was
selected, so its test accuracy is biased upward. A cell with fixed settings (its one trial drawn from no search
space, e.g. a recipe pinned by the authors' log) selected nothing: its first run is one more seed (``seeds_of``).

Comparison with a published value p and a tolerance τ (e.g. ±0.3 percentage points, the resolution at which
You et al. 2020 Table 3 print their numbers): with the interval [lo, hi] and the band [p − τ, p + τ],

  agrees        [lo, hi] ⊆ [p − τ, p + τ]   (the data rule out a difference larger than τ)
  differs       [lo, hi] ∩ [p − τ, p + τ] = ∅  (the data rule out agreement within τ)
  inconclusive  otherwise, or fewer than 2 replicates (no interval).

Against a threshold θ (a pass/fail rule such as Def. 2.1's 99.5%·A of You et al. 2020): ``pass`` when lo ≥ θ,
``fail`` when hi < θ, ``borderline`` otherwise (for a quantity that must stay below θ, mode 'min', the mirror).

Steps to target per seed (Shallue et al. 2018): the first evaluation that meets the goal, or, for a seed that
misses it within its budget (or diverges), a *censored* value: S > budget steps (only a lower bound is known).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional, Sequence

import numpy as np

from lamb_lars.study.records import Trial
from lamb_lars.study.analysis.steps_to_target import first_hit

# t_{0.975, ν}: the two-sided 95% quantile of Student's t with ν degrees of freedom (standard tables).
_T975 = {
  1: 12.7062047,
  2: 4.30265273,
  3: 3.18244631,
  4: 2.77644511,
  5: 2.57058184,
  6: 2.44691185,
  7: 2.36462425,
  8: 2.30600414,
  9: 2.26215716,
  10: 2.22813885,
  11: 2.20098516,
  12: 2.17881283,
  13: 2.16036866,
  14: 2.14478669,
  15: 2.13144955,
  16: 2.11990530,
  17: 2.10981558,
  18: 2.10092204,
  19: 2.09302405,
  20: 2.08596345,
  21: 2.07961384,
  22: 2.07387307,
  23: 2.06865761,
  24: 2.06389856,
  25: 2.05953855,
  26: 2.05552944,
  27: 2.05183052,
  28: 2.04840714,
  29: 2.04522964,
  30: 2.04227246,
  40: 2.02107539,
  60: 2.00029782,
  120: 1.97993041,
}
_Z975 = 1.95996398


def t975(dof: int) -> float:
  """t_{0.975, ν}; between tabulated ν, linear in 1/ν (exact to ~1e-4 beyond 30), → z_{0.975} as ν → ∞."""
  if dof < 1:
    raise ValueError(f"a t interval needs at least 1 degree of freedom, got {dof}.")
  if dof in _T975:
    return _T975[dof]
  keys = sorted(_T975)
  below = max(k for k in keys if k < dof)
  above = min((k for k in keys if k > dof), default=None)
  hi_x, hi_y = (1.0 / above, _T975[above]) if above else (0.0, _Z975)
  lo_x, lo_y = 1.0 / below, _T975[below]
  x = 1.0 / dof
  return lo_y + (hi_y - lo_y) * (x - lo_x) / (hi_x - lo_x)


@dataclasses.dataclass(frozen=True)
class Summary:
  """Mean, sample sd and 95% t interval of k replicate values (sd and interval None when k < 2)."""

  values: tuple[float, ...]
  mean: Optional[float]
  sd: Optional[float]
  lo: Optional[float]
  hi: Optional[float]

  @property
  def n(self) -> int:
    return len(self.values)

  def text(self, scale: float = 100.0, digits: int = 2) -> str:
    """'98.91 ± 0.05 [98.79, 99.03] (n=3)' (mean ± sd [95% interval]) or a single-run caveat."""
    if self.mean is None:
      return "—"
    if self.sd is None:
      return f"{scale * self.mean:.{digits}f} (single run, no interval)"
    return (
      f"{scale * self.mean:.{digits}f} ± {scale * self.sd:.{digits}f} "
      f"[{scale * self.lo:.{digits}f}, {scale * self.hi:.{digits}f}] (n={self.n})"
    )


def summarise(values: Sequence[float]) -> Summary:
  """The summary of finite ``values`` (module docstring); non-finite values are an error, not dropped."""
  x = np.asarray([float(v) for v in values], np.float64)
  if not np.all(np.isfinite(x)):
    raise ValueError(f"replicate values must be finite, got {list(values)}.")
  if x.size == 0:
    return Summary((), None, None, None, None)
  mean = float(x.mean())
  if x.size < 2:
    return Summary(tuple(x.tolist()), mean, None, None, None)
  sd = float(x.std(ddof=1))
  half = t975(x.size - 1) * sd / math.sqrt(x.size)
  return Summary(tuple(x.tolist()), mean, sd, mean - half, mean + half)


def agreement(s: Summary, paper: float, tolerance: float) -> str:
  """'agrees' | 'differs' | 'inconclusive' of the interval against ``paper`` ± ``tolerance``."""
  if s.lo is None:
    return "inconclusive"
  lo, hi = paper - tolerance, paper + tolerance
  if s.lo >= lo and s.hi <= hi:
    return "agrees"
  if s.hi < lo or s.lo > hi:
    return "differs"
  return "inconclusive"


def replicates_of(trials: Sequence[Trial], chosen: str) -> list[Trial]:
  """The replicate trials of the chosen trial ``chosen`` (``replicate_of``), by seed."""
  return sorted((t for t in trials if t.replicate_of == chosen), key=lambda t: (t.seed or 0, t.run_id))


def fixed_settings(cell_trials: Sequence[Trial]) -> Optional[Trial]:
  """The cell's one trial when the cell selected nothing (a single non-replicate trial with no search space), else
  None: its test accuracy is then a draw of the configuration like any replicate's, not the best of several."""
  own = [t for t in cell_trials if t.phase != "replicate"]
  return own[0] if len(own) == 1 and not own[0].space else None


def seeds_of(cell_trials: Sequence[Trial], chosen: str) -> list[Trial]:
  """The runs of the chosen configuration whose test accuracy carries no selection bias, by seed: its replicates,
  and the chosen trial itself when its cell has fixed settings (``fixed_settings``)."""
  reps = replicates_of(cell_trials, chosen)
  first = fixed_settings(cell_trials)
  if first is None or first.run_id != chosen:
    return reps
  return sorted([first, *reps], key=lambda t: (t.seed or 0, t.run_id))


def accuracy_summary(reps: Sequence[Trial], key: str = "eval_accuracy") -> Summary:
  """Final test accuracy over the replicates that finished (a diverged replicate counts at its last value, a
  failed or unfinished one is not a result)."""
  vals = [t.last(key) for t in reps if t.status in ("done", "diverged") and t.last(key) is not None]
  return summarise([v if math.isfinite(v) else 0.0 for v in vals])


@dataclasses.dataclass(frozen=True)
class SeedSteps:
  """Steps to the goal of one seed; ``censored``: missed within its budget, ``steps`` is then the budget."""

  run_id: str
  batch_size: int
  seed: Optional[int]
  steps: float
  censored: bool


def steps_per_seed(
  trials: Sequence[Trial], metric: str, goal: float, mode: str = "max", within: float = 1.0
) -> list[SeedSteps]:
  """Each finished trial's steps to ``goal``: its first hit within ``within`` × its budget, else censored at that
  many steps, or at its last step when it stopped earlier without the goal (e.g. at a lower target: S is only known
  to exceed the steps it ran); a diverged trial never reaches the goal and is censored at the limit. Failed and
  unfinished trials are skipped."""
  out = []
  for t in trials:
    if t.status not in ("done", "diverged"):
      continue
    budget = t.budget_steps()
    if budget is None:
      continue
    limit = within * budget
    hit = first_hit(t.curve, metric, goal, mode) if t.status == "done" else None
    if hit is not None and float(hit["step"]) <= limit:
      out.append(SeedSteps(t.run_id, t.batch_size, t.seed, float(hit["step"]), False))
    elif t.status == "done" and t.curve:  # it trained this far without the goal (less if it stopped early)
      out.append(SeedSteps(t.run_id, t.batch_size, t.seed, min(limit, float(t.curve[-1]["step"])), True))
    else:
      out.append(SeedSteps(t.run_id, t.batch_size, t.seed, limit, True))
  return out


def headline_target(
  baseline_seeds: Sequence[Trial], targets: Sequence[float], metric: str, mode: str = "max"
) -> Optional[float]:
  """The highest of ``targets`` that every baseline seed reaches within half its budget (None if none does).

  A target near the workload's accuracy ceiling is reached by some seeds and missed by others, and steps to it
  measure luck more than speed (the MNIST ladder's 99.0%: its baseline never got there). Half the budget leaves
  room for the larger batches, which need at least as many epochs."""
  if not baseline_seeds:
    return None
  order = sorted(targets, reverse=(mode == "max"))
  for goal in order:
    got = steps_per_seed(baseline_seeds, metric, goal, mode, within=0.5)
    if len(got) == len(baseline_seeds) and not any(s.censored for s in got):
      return float(goal)
  return None
