"""The censored S(B) = S_min·(1 + B_crit/B) fit (lamb_lars/study/analysis/scaling_fit.py; McCandlish et al. 2018 eq.
2.11)
against known parameters and a brute-force float64 numpy minimisation of the loss written from its definition;
censored points as lower bounds; the bootstrap over seeds and the leave-one-batch-out sensitivity."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lamb_lars.study.analysis import scaling_fit as F


def predict(f, batch):
  """Ŝ(B) = S_min + E_min/B."""
  return f.s_min + f.e_min / np.asarray(batch, np.float64)


B = np.array([256, 512, 1024, 2048, 4096, 8192], np.float64)


def _reference(b, s, censored, n=1201):
  """Brute force: the loss Σ_reached (log S − log Ŝ)² + Σ_censored min(0, log Ŝ − log L)² on a grid of
  (log S_min, log B_crit), then a second grid around the best cell. Returns (S_min, B_crit, loss)."""
  b, ly, cens = np.asarray(b, float), np.log(np.asarray(s, float)), np.asarray(censored, bool)

  def grid(lc, lb):
    pred = lc[:, None, None] + np.log1p(np.exp(lb)[None, :, None] / b[None, None, :])
    r = ly[None, None, :] - pred
    loss = np.where(cens[None, None, :], np.minimum(0.0, -r) ** 2, r**2).sum(-1)
    i, j = np.unravel_index(np.argmin(loss), loss.shape)
    return lc[i], lb[j], loss[i, j]

  lc0, lb0, _ = grid(np.linspace(0.0, 12.0, n), np.linspace(math.log(1.0), math.log(1e7), n))
  lc, lb, loss = grid(np.linspace(lc0 - 0.02, lc0 + 0.02, 801), np.linspace(lb0 - 0.03, lb0 + 0.03, 801))
  return math.exp(lc), math.exp(lb), loss


def test_recovers_known_parameters_from_exact_data():
  f = F.fit(B, 1000.0 * (1 + 2000.0 / B))
  assert f.s_min == pytest.approx(1000.0, rel=1e-6) and f.b_crit == pytest.approx(2000.0, rel=1e-6)
  assert f.e_min == pytest.approx(2e6, rel=1e-6) and f.loss < 1e-15
  perfect = F.fit(B, 5e5 / B)  # S ∝ 1/B across the data: no bend, B_crit = ∞
  assert perfect.b_crit == math.inf and perfect.s_min == 0.0 and perfect.e_min == pytest.approx(5e5, rel=1e-6)
  flat = F.fit(B, np.full(6, 700.0))  # no speed-up at all
  assert flat.b_crit == 0.0 and flat.s_min == pytest.approx(700.0, rel=1e-9)


def test_noisy_fit_matches_brute_force_reference():
  rng = np.random.default_rng(7)
  s = 1000.0 * (1 + 2000.0 / B) * np.exp(rng.normal(0.0, 0.15, B.size))
  f = F.fit(B, s)
  s_min, b_crit, loss = _reference(B, s, np.zeros(B.size, bool))
  assert f.loss <= loss + 1e-9
  assert f.s_min == pytest.approx(s_min, rel=2e-3) and f.b_crit == pytest.approx(b_crit, rel=4e-3)


def test_a_censored_point_below_the_prediction_costs_nothing():
  s = 1000.0 * (1 + 2000.0 / B)
  bs, ys, cs = list(B) + [16384.0], list(s) + [900.0], [False] * 6 + [True]  # Ŝ(16K) = 1122 > 900
  f, g = F.fit(bs, ys, cs), F.fit(B, s)
  assert (f.s_min, f.b_crit) == pytest.approx((g.s_min, g.b_crit), rel=1e-9) and f.num_censored == 1


def test_a_censored_point_above_the_prediction_pulls_the_fit_up():
  # reached points that scale perfectly (B_crit = ∞ on their own) and two larger batches that missed a budget of
  # 300 steps: the fit without them predicts 122 and 61 steps there, which the misses rule out.
  reached = B[:4]
  ys = list(5e5 / reached) + [300.0, 300.0]
  cs = [False] * 4 + [True, True]
  alone = F.fit(reached, 5e5 / reached)
  f = F.fit(B, ys, cs)
  assert alone.b_crit == math.inf and math.isfinite(f.b_crit)
  assert predict(f, 8192.0) > predict(alone, 8192.0)
  s_min, b_crit, loss = _reference(B, ys, cs)
  assert f.loss <= loss + 1e-9
  assert f.s_min == pytest.approx(s_min, rel=5e-3) and f.b_crit == pytest.approx(b_crit, rel=1e-2)


def test_needs_reached_points_at_two_batches():
  with pytest.raises(ValueError, match="two or more batch sizes"):
    F.fit([256, 512, 1024], [100, 60, 40], [False, True, True])


def _points(noise, seeds=3, rng_seed=0):
  rng = np.random.default_rng(rng_seed)
  return {
    int(b): [(1000.0 * (1 + 2000.0 / b) * math.exp(rng.normal(0.0, noise)), False) for _ in range(seeds)] for b in B
  }


def test_bootstrap_interval_over_seeds():
  exact = F.bootstrap(_points(0.0), num=10)
  assert exact.lo == pytest.approx(2000.0, rel=1e-6) and exact.hi == pytest.approx(2000.0, rel=1e-6)
  pts = _points(0.1)
  a, b = F.bootstrap(pts, num=40, seed=1), F.bootstrap(pts, num=40, seed=1)
  assert a == b  # reproducible
  assert a.lo < F.fit_points(pts).b_crit < a.hi and a.failed == 0 and a.infinite == 0.0
  # the percentile interval is the nearest-rank 2.5% / 97.5% order statistic of the refits (numpy reference)
  rng = np.random.default_rng(1)
  refits = []
  for _ in range(40):
    bs, ys = [], []
    for bb in sorted(pts):
      for i in rng.integers(0, 3, 3):
        bs.append(bb)
        ys.append(pts[bb][i][0])
    refits.append(F.fit(bs, ys).b_crit)
  v = np.sort(refits)
  assert (a.lo, a.hi) == (v[math.ceil(0.025 * 40) - 1], v[math.ceil(0.975 * 40) - 1])


def test_leave_one_batch_out_exposes_a_point_the_fit_rests_on():
  pts = _points(0.0)
  assert all(v == pytest.approx(2000.0, rel=1e-6) for v in F.leave_one_batch_out(pts).values())
  pts[8192] = [(5000.0, False)] * 3  # one wild batch
  lobo = F.leave_one_batch_out(pts)
  assert lobo[8192] == pytest.approx(2000.0, rel=1e-6)
  assert all(abs(v - 2000.0) > 100.0 for b, v in lobo.items() if b != 8192)
  assert F.leave_one_batch_out({256: [(100.0, False)], 512: [(60.0, False)]}) == {256: None, 512: None}


def test_closed_form_c_equals_a_numerical_minimisation_of_the_loss():
  """_best_c's closed form (censored breakpoints) against scipy's bounded scalar minimiser of the loss in c,
  written from its definition, on random rows with 0 to all-but-two censored points."""
  from scipy import optimize

  rng = np.random.default_rng(3)
  for trial in range(40):
    n = int(rng.integers(3, 12))
    cens = np.zeros(n, bool)
    cens[rng.choice(n, int(rng.integers(0, n - 1)), replace=False)] = True
    g, ly = rng.normal(0.0, 1.0, (3, n)), rng.normal(5.0, 1.0, n)
    c, loss = F._best_c(g, ly, cens)
    for row in range(3):
      r = ly - g[row]
      f = lambda x: float(np.sum(np.where(cens, np.minimum(0.0, x - r), x - r) ** 2))
      ref = optimize.minimize_scalar(f, bounds=(r.min() - 1, r.max() + 1), method="bounded", options=dict(xatol=1e-12))
      assert c[row] == pytest.approx(ref.x, abs=1e-7), (trial, row)
      assert loss[row] == pytest.approx(f(c[row]), rel=1e-12) and loss[row] <= ref.fun + 1e-12


def test_bootstrap_over_trials_and_seeds_spans_the_fits_of_either_choice():
  """No seed noise (identical seeds), two candidates at 1024: each resample's fit is one of two brute-force
  reference fits (the chosen candidate drawn, or only the other one), so the interval runs from one to the other."""
  s = 1000.0 * (1 + 2000.0 / B)
  cells = {int(b): [F.Candidate(-math.inf, ((y, False),) * 3)] for b, y in zip(B, s)}
  cells[1024].append(F.Candidate(0.0, ((3 * s[2], False),)))
  ci = F.bootstrap_trials_and_seeds(cells, num=400)
  alt = s.copy()
  alt[2] *= 3
  _, b_alt, _ = _reference(B, alt, np.zeros(B.size, bool))
  lo, hi = sorted([2000.0, b_alt])
  assert ci.lo == pytest.approx(lo, rel=5e-3) and ci.hi == pytest.approx(hi, rel=5e-3) and ci.failed == 0
  one = F.bootstrap_trials_and_seeds({b: c[:1] for b, c in cells.items()}, num=50)  # no tuning noise left
  assert one.lo == pytest.approx(2000.0, rel=1e-6) and one.hi == pytest.approx(2000.0, rel=1e-6)


def test_without_censored_points_the_fit_is_the_reference_fit_of_the_reached_ones():
  rng = np.random.default_rng(3)
  s = 800.0 * (1 + 1500.0 / B) * np.exp(rng.normal(0.0, 0.1, B.size))
  pts = {int(b): [(y, False), (5.0 * y, True)] for b, y in zip(B, s)}
  only = F.reached_only(pts)
  assert only == {int(b): [(y, False)] for b, y in zip(B, s)}
  f = F.fit_points(only)
  s_min, b_crit, _ = _reference(B, s, np.zeros(B.size, bool))
  assert f.s_min == pytest.approx(s_min, rel=2e-3) and f.b_crit == pytest.approx(b_crit, rel=4e-3)
  assert F.reached_only({256: [(10.0, True)], 512: [(5.0, False)]}) == {512: [(5.0, False)]}


def test_cells_sharing_a_batch_are_pooled_as_in_the_fit():
  """Two cells at each batch (keys (batch, cell)), each with one candidate: every resample refits all their points,
  so with noise-free seeds the interval is the point fit; a cell's alternative pulls only its own points."""
  s = 1000.0 * (1 + 2000.0 / B)
  cells = {(int(b), c): [F.Candidate(-math.inf, ((y, False),) * 2)] for b, y in zip(B, s) for c in ("x", "y")}
  ci = F.bootstrap_trials_and_seeds(cells, num=30)
  assert ci.lo == pytest.approx(2000.0, rel=1e-6) and ci.hi == pytest.approx(2000.0, rel=1e-6)
  cells[(1024, "y")].append(F.Candidate(0.0, ((3 * s[2], False),)))
  ci = F.bootstrap_trials_and_seeds(cells, num=400)
  bs = np.repeat(B, 4)
  ys = np.repeat(s, 4)
  ys[np.where(bs == 1024)[0][2:]] *= 3  # cell y's two points at 1024 from the alternative
  _, b_alt, _ = _reference(bs, ys, np.zeros(bs.size, bool))
  assert sorted([ci.lo, ci.hi]) == pytest.approx(sorted([2000.0, b_alt]), rel=5e-3)


def test_censored_above_names_the_batches_the_fit_says_should_have_reached_the_target():
  """A fit with s_min = 100, b_crit = 400 predicts S(800) = 150, S(1600) = 125 and S(3200) = 112.5 (written out by
  hand). At 800 every seed missed at 200 > 150: flagged. At 1600 one seed reached it: not flagged. At 3200 every
  seed missed, but at 100 < 112.5, a budget the fit does not say suffices: not flagged."""
  from lamb_lars.study.analysis import scaling_fit as sf

  f = sf.CensoredFit(s_min=100.0, b_crit=400.0, e_min=40000.0, loss=0.0, num_points=0, num_censored=0)
  assert sf.predicted_steps(f, 800) == pytest.approx(150.0)
  points = {
    200: [(300.0, False), (310.0, False)],
    800: [(200.0, True), (200.0, True)],
    1600: [(120.0, False), (130.0, True)],
    3200: [(100.0, True), (100.0, True)],
  }
  assert sf.censored_above(f, points) == [800]
  inf = sf.CensoredFit(s_min=0.0, b_crit=float("inf"), e_min=40000.0, loss=0.0, num_points=0, num_censored=0)
  assert sf.predicted_steps(inf, 800) == pytest.approx(50.0)  # e_min / B: perfect scaling
  assert sf.censored_above(inf, points) == [800, 3200]
