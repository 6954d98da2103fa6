"""The precision rule (issue 59): rounding, distinct-resample counts, exact enumeration and the weighted quantile,
each against a brute-force reference over every ordered draw (numpy float64), not against the module's own logic."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from lamb_lars.study.analysis import precision, scaling_fit


@pytest.mark.parametrize(
  "x, sign, want",
  [
    (528.9, False, "530"),
    (400.7, False, "400"),
    (0.0123, False, "0.012"),
    (12345.0, False, "12,000"),
    (1117.0, False, "1,100"),
    (0.2, True, "+0.20"),
    (-0.234, True, "-0.23"),
    (99.96, False, "100"),
    (math.inf, False, "∞"),
    (-math.inf, True, "-∞"),
    (None, False, "—"),
    (math.nan, False, "—"),
    (0.0, False, "0"),
  ],
)
def test_two_significant_figures(x, sign, want):
  assert precision.significant(x, sign=sign) == want


def _nearest_rank(values: np.ndarray, q: float) -> float:
  """The textbook nearest-rank quantile of equally weighted values: the ⌈q·n⌉-th smallest."""
  v = np.sort(values)
  return float(v[max(0, math.ceil(q * v.size - 1e-9) - 1)])


@pytest.mark.parametrize("sizes", [[1], [2], [3], [4], [2, 3], [3, 3], [1, 4]])
def test_distinct_resamples_counts_the_sorted_draws(sizes):
  brute = math.prod(len({tuple(sorted(d)) for d in itertools.product(range(k), repeat=k)}) for k in sizes)
  assert precision.distinct_resamples(sizes) == brute


@pytest.mark.parametrize("sizes", [[3], [4], [2, 3], [3, 3]])
def test_enumeration_is_the_bootstrap_distribution(sizes):
  """Every ordered draw (k^k per group, equally likely) collapses onto the enumerated multisets with their weights:
  the mean of each resample has the same distribution, so every quantile agrees."""
  rng = np.random.default_rng(7)
  data = [rng.normal(size=k) for k in sizes]
  enum = list(precision.resamples(sizes))
  assert len(enum) == precision.distinct_resamples(sizes)
  assert sum(r.weight for r in enum) == pytest.approx(1.0, abs=1e-12)
  stat = lambda idx: sum(float(np.mean(d[list(i)])) for d, i in zip(data, idx))  # noqa: E731
  ordered = [stat(idx) for idx in itertools.product(*[list(itertools.product(range(k), repeat=k)) for k in sizes])]
  vals = [stat(r.indices) for r in enum]
  w = [r.weight for r in enum]
  for q in (0.025, 0.1, 0.5, 0.9, 0.975):
    assert precision.quantile(vals, w, q) == pytest.approx(_nearest_rank(np.array(ordered), q), abs=1e-12)
  assert np.average(vals, weights=w) == pytest.approx(np.mean(ordered), abs=1e-12)


def test_equal_weights_give_the_nearest_rank_order_statistic():
  v = np.random.default_rng(3).normal(size=2000)
  for q in (0.025, 0.05, 0.5, 0.95, 0.975):
    assert precision.quantile(v, np.ones_like(v), q) == _nearest_rank(v, q)
  assert precision.quantile([1.0, math.inf, 2.0], [1, 1, 1], 0.975) == math.inf


def test_sampling_above_the_limit_is_seeded_and_counts_its_draws():
  sizes = [4] * 3  # 35³ = 42,875 > 2,000: sampled
  assert not precision.exact(sizes)
  a = list(precision.resamples(sizes, seed=5))
  b = list(precision.resamples(sizes, seed=5))
  assert len(a) == precision.NUM_RESAMPLES and a == b
  rng = np.random.default_rng(5)  # the draws are rng.integers(0, k, k) per group, in order
  first = tuple(tuple(int(i) for i in rng.integers(0, k, k)) for k in sizes)
  assert a[0].indices == first and a[0].weight == pytest.approx(1 / precision.NUM_RESAMPLES)


def test_b_crit_bootstrap_enumerates_small_designs():
  """Two batches of three seeds (10 × 10 distinct resamples): the interval is the exact bootstrap's, checked against
  every one of the 27 × 27 ordered draws refitted. The 10 multisets at 2048 that hold only the censored seed leave
  no reached point there (no fit): they are counted and the interval is conditional on the rest."""
  pts = {256: [(900.0, False), (1100.0, False), (1000.0, False)], 2048: [(300.0, False), (260.0, False), (350.0, True)]}
  iv = scaling_fit.bootstrap(pts)
  assert iv is not None and iv.exact and (iv.num, iv.failed) == (90, 10)
  vals = []
  for i in itertools.product(range(3), repeat=3):
    for j in itertools.product(range(3), repeat=3):
      bs = [256] * 3 + [2048] * 3
      ys = [pts[256][a][0] for a in i] + [pts[2048][b][0] for b in j]
      cs = [pts[256][a][1] for a in i] + [pts[2048][b][1] for b in j]
      try:
        vals.append(scaling_fit.fit(bs, ys, cs).b_crit)
      except ValueError:
        pass
  v = np.array(vals)
  assert iv.lo == pytest.approx(_nearest_rank(v, 0.025), rel=1e-12)
  assert iv.hi == pytest.approx(_nearest_rank(v, 0.975), rel=1e-12)
  assert iv.infinite == pytest.approx(float(np.mean(np.isinf(v))), abs=1e-12)
  assert iv.text().endswith(" enumerated") and iv.text().startswith("[")


def test_rule_text_names_the_count_and_the_rounding():
  text = precision.rule_text(2000)
  assert "2000 resamples, seed 0" in text and "2 significant figures" in text and "at most 2000" in text
  assert precision.count_text(35, True) == "all 35 distinct resamples, enumerated"
