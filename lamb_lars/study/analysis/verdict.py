"""A threshold test that knows its uncertainty: ``pass``, ``fail`` or ``borderline`` (analysis layer).

You et al. 2020 Defs 2.1–2.2 compare a measured accuracy (and loss) with a threshold: test accuracy ≥ 0.995·A,
validation loss ≤ 1.2·ξ. One seed's value carries seed noise, so a value a few hundredths of a point from the
threshold decides nothing. The verdict compares an *interval* with the threshold:

* k ≥ 2 per-seed values: the 95% Student-t interval of their mean, mean ± t_{0.975, k−1}·sd/√k (sd with k − 1).
* one value: value ± ``tolerance``, a documented single-run tolerance (``ACC_TOLERANCE``, ``LOSS_TOLERANCE``).

``pass`` when the whole interval is on the good side of the threshold (≥ for ``mode='max'``, ≤ for ``'min'``),
``fail`` when the whole interval is on the bad side, ``borderline`` when it straddles the threshold, i.e. when the
margin to the threshold is smaller than the interval's half-width; the regimes report shows it as "inconclusive
(add seeds)" (``shown``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

import numpy as np
from scipy import stats

PASS, FAIL, BORDERLINE = "pass", "fail", "borderline"

# Single-run tolerances. Accuracy: identical configurations run under two code versions that differ only by
# float32 rounding of the LR schedule ended a median 0.02–0.04 pp and at most 0.22 pp (Table 3) to 0.75 pp (the
# ladder) apart (MNIST / LeNet-5, 30 epochs: the published folders against run 1 of docs/studies/rerun_2026-11-24,
# in git at a4e5c88);
# the authors' own MNIST logs show ≈ 0.05 pp sd across seeds at batch 1024. We take 0.2 pp: a single run within
# 0.2 pp of a threshold is borderline. Loss: 5% of the value, our choice (no replicate data yet). Both give way to
# the seed interval as soon as a cell has two or more seeds.
ACC_TOLERANCE = 0.002
LOSS_TOLERANCE = 0.05  # relative: value·(1 ± 0.05)


@dataclasses.dataclass(frozen=True)
class Verdict:
  """``verdict`` of the interval [low, high] around ``value`` (the mean) against ``threshold``."""

  verdict: str
  value: float
  low: float
  high: float
  threshold: float
  num_values: int
  num_finite: int = -1  # values that are finite (−1: all of them)

  def text(self, digits: int = 4) -> str:
    how = f"{self.num_values} seeds" if self.num_values > 1 else "1 run"
    if not math.isfinite(self.value):
      finite = [b for b in (self.low, self.high) if math.isfinite(b)]
      if self.num_finite > 0 and finite:  # some seeds diverged: the best of the others bounds the cell
        return (
          f"{self.verdict}: {self.num_values - self.num_finite} of {self.num_values} seeds diverged or had no "
          f"eval, the best other {finite[0]:.{digits}g} vs {self.threshold:.{digits}g}"
        )
      return f"{self.verdict}: no finite value (diverged or no eval) vs {self.threshold:.{digits}g}, {how}"
    return (
      f"{self.verdict}: {self.value:.{digits}g} ∈ [{self.low:.{digits}g}, {self.high:.{digits}g}] vs "
      f"{self.threshold:.{digits}g}, {how}"
    )


def mean_interval(values: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
  """(mean, low, high): the Student-t interval of the mean of k ≥ 2 values."""
  x = np.asarray(values, dtype=np.float64)
  if x.size < 2:
    raise ValueError(f"a mean interval needs at least 2 values; got {x.size}.")
  mean = float(x.mean())
  half = float(stats.t.ppf(0.5 + level / 2, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size))
  return mean, mean - half, mean + half


def threshold_verdict(
  values: Sequence[float], threshold: float, *, mode: str = "max", tolerance: float, relative: bool = False
) -> Verdict:
  """pass / fail / borderline of per-seed ``values`` against ``threshold`` (see the module docstring).

  ``tolerance`` is the single-run half-width (absolute, or a fraction of the value when ``relative``); it is used
  only when there is one value. A non-finite value (a diverged seed) makes the interval reach to the bad side
  without bound: the verdict is then ``borderline`` when another seed is on the good side, else ``fail``."""
  if mode not in ("max", "min"):
    raise ValueError(f"mode must be 'max' or 'min'; got {mode!r}.")
  vals = [float(v) for v in values]
  if not vals:
    raise ValueError("a verdict needs at least one value.")
  bad = -math.inf if mode == "max" else math.inf
  finite = [v for v in vals if math.isfinite(v)]
  if len(finite) < len(vals):  # a diverged seed: the good side is unreachable for the cell, the best seed bounds it
    best = (max(finite) if mode == "max" else min(finite)) if finite else bad
    value, low, high = (bad, bad, best) if mode == "max" else (bad, best, bad)
  elif len(vals) == 1:
    half = abs(vals[0]) * tolerance if relative else tolerance
    value, low, high = vals[0], vals[0] - half, vals[0] + half
  else:
    value, low, high = mean_interval(vals)
  passes, fails = (low >= threshold, high < threshold) if mode == "max" else (high <= threshold, low > threshold)
  verdict = PASS if passes else FAIL if fails else BORDERLINE
  return Verdict(verdict, value, low, high, float(threshold), len(vals), len(finite))


def combine(*verdicts: str) -> str:
  """Both conditions of Def. 2.1 at once: fail if either fails, pass if both pass, else borderline."""
  if FAIL in verdicts:
    return FAIL
  return PASS if all(v == PASS for v in verdicts) else BORDERLINE


INCONCLUSIVE = "inconclusive (add seeds)"


def shown(verdict: str) -> str:
  """A verdict as the regimes report prints it: ``borderline`` (the margin to the threshold is smaller than the
  interval's half-width) is shown as "inconclusive (add seeds)" (issue 41)."""
  return INCONCLUSIVE if verdict == BORDERLINE else verdict


def shown_text(v: Verdict, digits: int = 4) -> str:
  """``Verdict.text`` with the verdict ``shown``."""
  t = v.text(digits)
  return shown(v.verdict) + t[len(v.verdict) :] if t.startswith(v.verdict) else t


SIGN_ALPHA = 0.05  # the per-run rule's level (docs/science.md, "Divergence and per-run verdicts")


@dataclasses.dataclass(frozen=True)
class SignTest:
  """The per-run reading of a Def. 2.1/2.2 verdict: ``k`` of ``n`` seeds meet the bar (a diverged or failed seed
  does not), and the one-sided exact binomial (sign) test against p = ½ at level ``SIGN_ALPHA``."""

  verdict: str  # pass | fail | inconclusive
  k: int
  n: int
  p: float  # the one-sided p-value of the verdict's side (the smaller one when inconclusive)

  def text(self) -> str:
    return f"{self.k} of {self.n}, p = {self.p:.2g}: {self.verdict}"


def sign_test(k: int, n: int, alpha: float = SIGN_ALPHA) -> SignTest:
  """``pass`` when P(X ≥ k) < alpha, ``fail`` when P(X ≤ k) < alpha, X ~ Binomial(n, ½); else inconclusive
  (docs/science.md: n = 4 decides nothing, 0 of 7 gives p = 0.0078)."""
  if not 0 <= k <= n or n < 1:
    raise ValueError(f"k = {k} of n = {n} seeds: need 0 ≤ k ≤ n and n ≥ 1.")
  upper = sum(math.comb(n, i) for i in range(k, n + 1)) / 2**n
  lower = sum(math.comb(n, i) for i in range(0, k + 1)) / 2**n
  if upper < alpha:
    return SignTest(PASS, k, n, upper)
  if lower < alpha:
    return SignTest(FAIL, k, n, lower)
  return SignTest("inconclusive", k, n, min(upper, lower))
