"""The gradient noise scale B_simple as a trajectory over training (McCandlish et al. 2018), analysis layer.

B_simple = tr Σ / |G|² (McCandlish et al. 2018 §2.2, eq. 2.8) is not a constant of a workload: as training
proceeds |G|² falls and B_simple grows, often by orders of magnitude (their §3.3 and Fig. 5; in our MNIST ladder
the baseline's logged value rises from about 40 to about 90,000 over 30 epochs). One number hides that, so the
report gives B_simple per *phase* of training: phase k of n holds the evals with step in (k·S/n, (k+1)·S/n],
S = the run's *budget* in steps (its ``budget_epochs`` times its steps per epoch, read from its evals), so that a
run pruned or stopped at the target early fills only the early phases; a run without a budget is phased by its
last step that logged the noise scale (the first phase also holds step 0). Per phase, over the runs of one batch
size:

* the median and the quartiles (numpy's linear-interpolation percentiles) of the finite values;
* the count of finite values, of non-finite ones (NaN / ±inf: the estimator's |G|² can vanish or the EMA can
  overflow) and of non-positive finite ones (the unbiased |G|² estimate can be negative early in training).

Non-finite values are counted and reported, never dropped silently; non-positive finite values stay in the median.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Mapping, Optional, Sequence

import numpy as np

from lamb_lars.study.records import Trial

KEY = "noise_scale"


@dataclasses.dataclass(frozen=True)
class Phase:
  """One phase of training: its step range as fractions of S, the finite values' median and quartiles, counts."""

  index: int
  num_phases: int
  median: Optional[float]
  q25: Optional[float]
  q75: Optional[float]
  num_finite: int
  num_nonfinite: int
  num_nonpositive: int


def phase_of(step: float, last_step: float, num_phases: int) -> int:
  """k such that step ∈ (k·S/n, (k+1)·S/n] (step 0 → phase 0)."""
  if last_step <= 0:
    return 0
  return min(num_phases - 1, max(0, math.ceil(num_phases * float(step) / float(last_step)) - 1))


def _values(curve: Sequence[Mapping], key: str) -> list[tuple[float, float]]:
  """(step, value) of every eval that logged ``key``, non-finite ones included (as float NaN / inf)."""
  return [(float(r["step"]), float(r[key])) for r in curve if r.get(key) is not None and r.get("step") is not None]


def trajectory(trials: Sequence[Trial], *, num_phases: int = 10, key: str = KEY) -> list[Phase]:
  """B_simple per phase of training, pooled over ``trials`` (each phased by its own last eval step)."""
  if num_phases < 1:
    raise ValueError(f"num_phases must be at least 1; got {num_phases}.")
  pools: list[list[float]] = [[] for _ in range(num_phases)]
  for t in trials:
    pts = _values(t.curve, key)
    if not pts:
      continue
    last = t.budget_steps() or max(s for s, _ in pts)
    for s, v in pts:
      pools[phase_of(s, last, num_phases)].append(v)
  out = []
  for k, vals in enumerate(pools):
    x = np.asarray(vals, dtype=np.float64)
    fin = x[np.isfinite(x)]
    med, q25, q75 = (
      (float(np.median(fin)), float(np.percentile(fin, 25)), float(np.percentile(fin, 75)))
      if fin.size
      else (None, None, None)
    )
    out.append(Phase(k, num_phases, med, q25, q75, int(fin.size), int(x.size - fin.size), int((fin <= 0).sum())))
  return out


def count_nonfinite(trials: Sequence[Trial], key: str = KEY) -> tuple[int, int]:
  """(non-finite values, all values) of ``key`` over the trials' curves."""
  vals = [v for t in trials for _, v in _values(t.curve, key)]
  return sum(not math.isfinite(v) for v in vals), len(vals)
