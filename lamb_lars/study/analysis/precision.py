"""The one precision rule for every resampled interval a report quotes (issue 59, the third referee's point 4).

A percentile bootstrap over a handful of seeds per batch is coarse: k seeds resampled k at a time with replacement
give only C(2k − 1, k) distinct multisets (35 for k = 4), and a joint resample over several batches is one multiset
per batch. Quoting such an interval to 4 significant figures overstates it (a re-implementation moved the ends by
5–20%). The rule, applied by every report that prints B_crit, κ or a slope of log B_crit:

* **Exact enumeration** when the distinct joint resamples number at most ``NUM_RESAMPLES``: every multiset of every
  group, weighted by its multinomial probability k!/(∏ cᵢ!)/kᵏ (the bootstrap distribution itself, no Monte Carlo
  error). Otherwise ``NUM_RESAMPLES`` = 2,000 seeded Monte Carlo resamples (Efron & Tibshirani 1993, §13: ~1,000+
  for percentile intervals; the referee asked for ≥ 2,000). The joint S(B) bootstrap over 10 batches of 4 seeds has
  35¹⁰ ≈ 2.8·10¹⁵ distinct resamples, so it is always sampled.
* The percentile interval is the nearest-rank quantile of the (weighted) resampled values: the smallest value whose
  cumulative weight reaches q. With equal weights this is the order statistic ⌈q·n⌉.
* **Quoted to 2 significant figures** (``significant``), intervals with their resample count (``count_text``).

Layer: analysis (numpy only); scaling_fit, axes_verdicts and every report's text use it.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Iterator, Optional, Sequence

import numpy as np

NUM_RESAMPLES = 2000  # Monte Carlo resamples, and the most distinct joint resamples enumerated exactly
DIGITS = 2  # significant figures of every quoted B_crit, κ, slope and interval end


def significant(x: Optional[float], digits: int = DIGITS, sign: bool = False) -> str:
  """``x`` to ``digits`` significant figures, without an exponent (529 → "530", 0.0123 → "0.012", 12,345 →
  "12,000"); ``sign``: a leading "+" on positive values; "∞" / "-∞", and "—" for None or nan."""
  if x is None or (isinstance(x, float) and math.isnan(x)):
    return "—"
  if math.isinf(x):
    return ("+∞" if sign else "∞") if x > 0 else "-∞"
  if x == 0:
    return "0"
  rounded = float(f"{x:.{digits - 1}e}")
  decimals = max(0, digits - 1 - math.floor(math.log10(abs(rounded))))
  text = f"{rounded:,.{decimals}f}"
  return ("+" + text) if sign and rounded > 0 else text


def interval_text(lo: Optional[float], hi: Optional[float], digits: int = DIGITS, sign: bool = False) -> str:
  """ "[lo, hi]", each end to ``digits`` significant figures."""
  return f"[{significant(lo, digits, sign)}, {significant(hi, digits, sign)}]"


def distinct_resamples(sizes: Sequence[int]) -> int:
  """The distinct joint bootstrap resamples of groups of ``sizes`` points, each group resampled to its own size with
  replacement, order ignored: ∏ C(2k − 1, k)."""
  return math.prod(math.comb(2 * k - 1, k) for k in sizes if k > 0)


def exact(sizes: Sequence[int], num: int = NUM_RESAMPLES) -> bool:
  """Whether the rule enumerates (at most ``num`` distinct joint resamples) rather than samples."""
  return distinct_resamples(sizes) <= num


def count_text(num: int, is_exact: bool, seed: Optional[int] = 0) -> str:
  """How an interval was resampled, for the report's text: "all 35 distinct resamples, enumerated" or "2000
  resamples, seed 0"."""
  if is_exact:
    return f"all {num} distinct resamples, enumerated"
  return f"{num} resamples" + (f", seed {seed}" if seed is not None else "")


def rule_text(num: int = NUM_RESAMPLES, seed: Optional[int] = 0) -> str:
  """The sentence every report prints beside its intervals: how they were resampled and how they are rounded."""
  seeded = f", seed {seed}" if seed is not None else ""
  return (
    f"Intervals: 95% percentile bootstrap, {num} resamples{seeded}, or every distinct resample with its probability "
    f'where there are at most {num} (marked "enumerated"); B_crit, κ, slopes and interval ends to {DIGITS} '
    "significant figures (lamb_lars/study/analysis/precision.py)."
  )


def interval_cell(lo: Optional[float], hi: Optional[float], is_exact: bool = False, sign: bool = False) -> str:
  """A table cell: "[lo, hi]" to 2 significant figures, with " enumerated" when every resample was enumerated."""
  return interval_text(lo, hi, sign=sign) + (" enumerated" if is_exact else "")


@dataclasses.dataclass(frozen=True)
class Resample:
  """One joint resample: per group, the indices drawn (a multiset, sorted when enumerated), and its weight."""

  indices: tuple[tuple[int, ...], ...]
  weight: float


def _multisets(k: int) -> list[tuple[tuple[int, ...], float]]:
  """Every multiset of k draws from k points with its probability k!/(∏ cᵢ!)/kᵏ."""
  out = []
  for combo in itertools.combinations_with_replacement(range(k), k):
    counts = [combo.count(i) for i in set(combo)]
    out.append((combo, math.factorial(k) / math.prod(math.factorial(c) for c in counts) / k**k))
  return out


def resamples(
  sizes: Sequence[int], num: int = NUM_RESAMPLES, rng: Optional[np.random.Generator] = None, seed: int = 0
) -> Iterator[Resample]:
  """The joint resamples of groups of ``sizes`` points under the rule: every distinct one with its probability when
  there are at most ``num``, else ``num`` draws of weight 1/num from ``rng`` (default: seeded by ``seed``), each
  group drawn in order with ``rng.integers(0, k, k)``."""
  if exact(sizes, num):
    per_group = [_multisets(k) if k > 0 else [((), 1.0)] for k in sizes]
    for combo in itertools.product(*per_group):
      yield Resample(tuple(c[0] for c in combo), math.prod(c[1] for c in combo))
    return
  rng = rng if rng is not None else np.random.default_rng(seed)
  for _ in range(num):
    yield Resample(tuple(tuple(int(i) for i in rng.integers(0, k, k)) if k > 0 else () for k in sizes), 1.0 / num)


def quantile(values: Sequence[float], weights: Sequence[float], q: float) -> float:
  """The nearest-rank q-quantile of weighted ``values`` (±∞ allowed): the smallest value whose cumulative share of
  the total weight reaches q (a relative tolerance of 1e-9 absorbs float sums; 1 − 0.95 ≠ 0.05)."""
  v = np.asarray(values, np.float64)
  w = np.asarray(weights, np.float64)
  if v.size == 0:
    return math.nan
  order = np.argsort(v, kind="stable")
  cum = np.cumsum(w[order]) / w.sum()
  k = int(np.searchsorted(cum, q - 1e-9, side="left"))
  return float(v[order][min(k, v.size - 1)])
