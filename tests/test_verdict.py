"""pass / fail / borderline against a threshold (verdict.py), with a numpy float64 reference for the interval."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lamb_lars.study.analysis.verdict import combine, mean_interval, threshold_verdict

# Student-t quantiles t_{0.975, df} from tables (df = 1, 2, 4).
T975 = {1: 12.706205, 2: 4.302653, 4: 2.776445}


@pytest.mark.parametrize("values", [[0.1, 0.3], [0.98, 0.99, 0.985], [1.0, 2.0, 4.0, 8.0, 16.0]])
def test_mean_interval_matches_the_formula(values):
  x = np.asarray(values, dtype=np.float64)
  half = T975[x.size - 1] * x.std(ddof=1) / math.sqrt(x.size)
  mean, low, high = mean_interval(values)
  assert mean == pytest.approx(x.mean(), rel=1e-12)
  assert (low, high) == pytest.approx((x.mean() - half, x.mean() + half), rel=1e-6)


def test_threshold_verdict_modes_and_tolerances():
  assert threshold_verdict([0.5], 0.4, tolerance=0.05).verdict == "pass"
  assert threshold_verdict([0.5], 0.52, tolerance=0.05).verdict == "borderline"
  assert threshold_verdict([0.5], 0.6, tolerance=0.05).verdict == "fail"
  # 'min' with a relative tolerance: 0.030 ± 5% = [0.0285, 0.0315]
  assert threshold_verdict([0.030], 0.032, mode="min", tolerance=0.05, relative=True).verdict == "pass"
  assert threshold_verdict([0.030], 0.031, mode="min", tolerance=0.05, relative=True).verdict == "borderline"
  assert threshold_verdict([0.030], 0.028, mode="min", tolerance=0.05, relative=True).verdict == "fail"
  # seeds: the tolerance is not used, the interval is
  assert threshold_verdict([0.50, 0.51, 0.49], 0.45, tolerance=1.0).verdict == "pass"
  assert threshold_verdict([float("nan")], 0.1, tolerance=0.0).verdict == "fail"
  assert threshold_verdict([float("nan"), 0.9], 0.1, tolerance=0.0).verdict == "borderline"
  with pytest.raises(ValueError, match="at least one value"):
    threshold_verdict([], 0.5, tolerance=0.1)


def test_combine():
  assert combine("pass", "pass") == "pass"
  assert combine("pass", "borderline") == "borderline"
  assert combine("borderline", "fail") == "fail"


def test_text_names_the_diverged_seeds_and_the_best_other():
  """One of 4 seeds diverged: the text says so and gives the best finite seed, not 'no finite value' (which is
  what the published ladder's B_L row said of a batch where 3 seeds finished)."""
  acc = threshold_verdict([-math.inf, 0.9749, 0.9865, 0.9862], 0.98704, tolerance=0.002)
  assert acc.verdict == "fail" and acc.num_finite == 3
  assert acc.text() == "fail: 1 of 4 seeds diverged or had no eval, the best other 0.9865 vs 0.987"
  loss = threshold_verdict([math.inf, 0.05, 0.04], 0.036, mode="min", tolerance=0.05, relative=True)
  assert loss.text() == "fail: 1 of 3 seeds diverged or had no eval, the best other 0.04 vs 0.036"
  none = threshold_verdict([-math.inf, -math.inf], 0.98, tolerance=0.002)
  assert none.text() == "fail: no finite value (diverged or no eval) vs 0.98, 2 seeds"
