"""Whether a cell's search was adequate: its best point inside the searched LR range, enough full-budget trials.

Shallue et al. 2018 (§3, App. C) move or widen a search space whose best point lies at its edge: a best point at
the edge says the optimum may lie outside the range, and the cell's result then measures the range, not the
optimizer. Here, on a log scale, the position of a learning rate η in the range [lo, hi] is

  u(η) = log(η/lo) / log(hi/lo)  ∈ [0, 1],

and the best point is at the *low edge* when u < f or no trial of the cell had a smaller LR, and at the *high
edge* when u > 1 − f or no trial had a larger one (f = ``edge_fraction``, 0.1 by default: the outer 10% on each
side). So the best point is *interior* only when it lies in the inner 80% of the range and trials on both sides of
it did worse: with six quasi-random points, the largest LR sampled can sit at u ≈ 0.9 and be the best, and then
nothing says the optimum is not beyond it. The runner then searches the range shifted by its own width on that
side, [lo²/hi, lo] or [hi, hi²/lo] (phases.py), a bounded number of times; the range of a cell is the union of
the ranges searched.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, Optional, Sequence

from lamb_lars.study.records import Trial
from lamb_lars.study.analysis.selection import finished_full

LR_KEY = "optimizer.learning_rate"


def position(lr: float, lo: float, hi: float) -> float:
  """u(η) = log(η/lo)/log(hi/lo)."""
  return math.log(lr / lo) / math.log(hi / lo)


def edge(lr: float, lo: float, hi: float, fraction: float, tried: Sequence[float] = ()) -> str:
  """'low' | 'high' | '' (interior) for the best LR ``lr`` in [lo, hi], given the LRs ``tried`` in the cell."""
  u = position(lr, lo, hi)
  low = u < fraction or (bool(tried) and lr <= min(tried))
  high = u > 1.0 - fraction or (bool(tried) and lr >= max(tried))
  if low and high:  # the only trial: the nearer end
    return "low" if u < 0.5 else "high"
  return "low" if low else "high" if high else ""


def tried_lrs(trials: Sequence[Trial]) -> list[float]:
  """The LRs of the cell's trials that gave a result (failed trials tested nothing)."""
  return [
    float(t.params["learning_rate"])
    for t in trials
    if t.status != "failed" and t.params.get("learning_rate") is not None
  ]


def neighbours(lr: float, tried: Sequence[float]) -> tuple[Optional[float], Optional[float]]:
  """(ratio to the nearest tried LR below ``lr``, ratio to the nearest above), each ≥ 1, None where nothing was
  tried on that side (an LR equal to ``lr`` within 1e-9 is ``lr``'s own trial)."""
  below = [lr / x for x in tried if x < lr * (1.0 - 1e-9)]
  above = [x / lr for x in tried if x > lr * (1.0 + 1e-9)]
  return (min(below) if below else None, min(above) if above else None)


def shifted(lo: float, hi: float, side: str, width: float) -> tuple[float, float]:
  """The range next to [lo, hi] on ``side``, ``width`` (a ratio hi/lo) wide."""
  return (lo / width, lo) if side == "low" else (hi, hi * width)


def lr_range(space: Mapping[str, Any]) -> Optional[tuple[float, float]]:
  """(lo, hi) of a log-scale LR search in ``space``, else None (nothing to extend)."""
  r = space.get(LR_KEY) if space else None
  if r is None or len(r) != 3 or r[0] != "log":
    return None
  return float(r[1]), float(r[2])


def union_range(trials: Sequence[Trial]) -> Optional[tuple[float, float]]:
  ranges = [r for t in trials if (r := lr_range(t.space)) is not None]
  return (min(r[0] for r in ranges), max(r[1] for r in ranges)) if ranges else None


@dataclasses.dataclass(frozen=True)
class Adequacy:
  """One cell: trials (search and extensions), full-budget ones, the ranges searched, where the chosen point lies."""

  cell: str
  num_trials: int
  num_full_budget: int
  ranges: tuple[tuple[float, float], ...]
  chosen: Optional[str]
  chosen_lr: Optional[float]
  where: str  # 'interior' | 'low edge' | 'high edge' | 'no LR search' | 'nothing chosen'

  @property
  def interior(self) -> bool:
    return self.where == "interior"


def adequacy(cell: str, trials: Sequence[Trial], chosen: Optional[Trial], fraction: float = 0.1) -> Adequacy:
  """The adequacy record of one cell from its search-phase trials (replicates excluded)."""
  searched = [t for t in trials if t.phase != "replicate"]
  ranges = tuple(sorted({r for t in searched if (r := lr_range(t.space)) is not None}))
  full = sum(finished_full(t) for t in searched)
  lr = None if chosen is None else chosen.params.get("learning_rate")
  span = union_range(searched)
  if chosen is None:
    where = "nothing chosen"
  elif span is None or lr is None:
    where = "no LR search"
  else:
    side = edge(float(lr), span[0], span[1], fraction, tried_lrs(searched))
    where = f"{side} edge" if side else "interior"
  return Adequacy(
    cell,
    len(searched),
    full,
    ranges,
    None if chosen is None else chosen.run_id,
    None if lr is None else float(lr),
    where,
  )
