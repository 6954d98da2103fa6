"""Inverse-law fit, B*, and the breakdown point against hand-computed and synthetic cases."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from lamb_lars.study.analysis import critical_batch as cb


def examples_model(fit, batch):
  """E(B) = B·S(B) = E_min·(1 + B/B_crit) (McCandlish et al. 2018 eq. 2.11)."""
  b = np.asarray(batch, np.float64)
  return b * cb.steps_model(fit, b)


def time_model(fit, step_time, batch):
  """T(B) = S(B)·(γ + δ·B), wall-clock seconds to the target."""
  b = np.asarray(batch, np.float64)
  return cb.steps_model(fit, b) * (step_time.gamma + step_time.delta * b)


BATCHES = np.array([32, 64, 128, 256, 512, 1024, 2048, 4096, 8192], float)


@pytest.mark.parametrize("weighting", ["log", "relative", "none"])
def test_exact_data_recovers_parameters(weighting):
  steps = 1000.0 * (1 + 512.0 / BATCHES)
  fit = cb.fit_inverse_law(BATCHES, steps, weighting=weighting)
  assert fit.s_min == pytest.approx(1000.0, rel=1e-9)
  assert fit.b_crit == pytest.approx(512.0, rel=1e-9)
  assert fit.e_min == pytest.approx(512000.0, rel=1e-9)
  assert fit.rms_log_residual < 1e-9 and fit.num_points == len(BATCHES)
  np.testing.assert_allclose(cb.steps_model(fit, BATCHES), steps, rtol=1e-9)
  np.testing.assert_allclose(examples_model(fit, BATCHES), 512000.0 * (1 + BATCHES / 512.0), rtol=1e-9)


def test_two_points_hand_computed():
  # S(100) = 30, S(200) = 20  =>  a + b/100 = 30, a + b/200 = 20  =>  b = 2000, a = 10, B_crit = 200.
  fit = cb.fit_inverse_law([100, 200], [30, 20], weighting="none")
  assert (fit.s_min, fit.b_crit, fit.e_min) == pytest.approx((10.0, 200.0, 2000.0))


def test_noisy_data_log_fit_within_noise():
  rng = np.random.default_rng(0)
  s_min, b_crit, sigma = 800.0, 2000.0, 0.05
  errs = []
  for _ in range(200):
    b = np.repeat(BATCHES, 3)
    steps = s_min * (1 + b_crit / b) * np.exp(sigma * rng.standard_normal(b.shape))
    fit = cb.fit_inverse_law(b, steps)
    errs.append((math.log(fit.s_min / s_min), math.log(fit.b_crit / b_crit)))
    assert fit.rms_log_residual < 3 * sigma
  errs = np.array(errs)
  # unbiased to within the Monte-Carlo error, and a few percent spread with 5% multiplicative noise
  assert abs(errs[:, 0].mean()) < 4 * errs[:, 0].std() / math.sqrt(len(errs)) + 2e-3
  assert abs(errs[:, 1].mean()) < 4 * errs[:, 1].std() / math.sqrt(len(errs)) + 2e-3
  assert errs[:, 0].std() < 0.05 and errs[:, 1].std() < 0.1


def test_log_fit_minimises_log_residual():
  rng = np.random.default_rng(1)
  steps = 500.0 * (1 + 300.0 / BATCHES) * np.exp(0.1 * rng.standard_normal(BATCHES.shape))
  fits = {w: cb.fit_inverse_law(BATCHES, steps, weighting=w) for w in ("log", "relative", "none")}
  assert fits["log"].rms_log_residual <= fits["relative"].rms_log_residual + 1e-12
  assert fits["log"].rms_log_residual <= fits["none"].rms_log_residual + 1e-12


def _log_loss_reference(batches, steps):
  """The minimum of Σ (log S_i − log(a + b/B_i))² over a, b ≥ 0, written independently: scipy's least squares on
  (log a, log b) from a grid of starts, and the two boundaries a = 0 (b = geometric mean of S·B) and b = 0."""
  from scipy import optimize

  x, ly = 1.0 / np.asarray(batches, float), np.log(np.asarray(steps, float))
  loss = lambda a, b: float(np.sum((ly - np.log(a + b * x)) ** 2))
  best = (loss(0.0, math.exp(np.mean(ly + np.log(np.asarray(batches, float))))), math.inf)
  best = min(best, (loss(math.exp(np.mean(ly)), 0.0), 0.0))
  for la in np.linspace(0, 12, 7):
    for lb in np.linspace(4, 20, 9):
      r = optimize.least_squares(
        lambda p: ly - np.log(np.exp(p[0]) + np.exp(p[1]) * x), [la, lb], xtol=1e-14, ftol=1e-14, gtol=1e-14
      )
      best = min(best, (loss(math.exp(r.x[0]), math.exp(r.x[1])), math.exp(r.x[1] - r.x[0])))
  return best


def test_log_fit_is_the_global_minimum_even_when_the_relative_start_has_no_intercept():
  """Noisy steps where the 'relative' WLS solution has a < 0: the old Gauss–Newton start gave up there and returned
  B_crit = ∞ (log loss 2.03), while the log loss has an interior minimum near B_crit ≈ 5,300 (loss 1.68)."""
  batches = np.array([256, 512, 1024, 2048, 4096, 8192.0])
  steps = np.array([3729.0, 3204.4, 1029.2, 723.7, 152.1, 585.3])
  assert cb._wls(1.0 / batches, steps, 1.0 / steps**2)[0] < 0
  ref_loss, ref_bcrit = _log_loss_reference(batches, steps)
  f = cb.fit_inverse_law(batches, steps)
  assert math.isfinite(f.b_crit) and f.b_crit == pytest.approx(ref_bcrit, rel=1e-3)
  assert len(batches) * f.rms_log_residual**2 == pytest.approx(ref_loss, rel=1e-6)
  rng = np.random.default_rng(3)
  for _ in range(20):  # and on random noisy ladders, never above the reference's loss
    s = 400.0 * (1 + 2000.0 / batches) * np.exp(rng.normal(0.0, 0.35, batches.size))
    ref_loss, _ = _log_loss_reference(batches, s)
    assert len(batches) * cb.fit_inverse_law(batches, s).rms_log_residual ** 2 <= ref_loss * (1 + 1e-6) + 1e-12


def test_boundaries_perfect_scaling_and_no_speedup():
  perfect = cb.fit_inverse_law(BATCHES, 1e6 / BATCHES)
  assert perfect.s_min == 0.0 and math.isinf(perfect.b_crit) and perfect.e_min == pytest.approx(1e6)
  np.testing.assert_allclose(cb.steps_model(perfect, BATCHES), 1e6 / BATCHES)
  growing = cb.fit_inverse_law([64, 128, 256], [100, 110, 121], weighting="relative")
  assert growing.b_crit == 0.0 and 100 < growing.s_min < 121
  with pytest.raises(ValueError):
    cb.fit_inverse_law([64, 64], [10, 12])
  with pytest.raises(ValueError):
    cb.fit_inverse_law([64, 128], [10, 0])


def test_step_time_fit_time_model_and_optimal_batch():
  st = cb.fit_step_time(BATCHES, 0.05 + 1e-5 * BATCHES)
  assert (st.gamma, st.delta) == pytest.approx((0.05, 1e-5))
  fit = cb.InverseLawFit(s_min=1000.0, b_crit=2000.0, e_min=2e6, rms_log_residual=0.0, num_points=0, weighting="log")
  b_star = cb.optimal_batch(fit, st)
  assert b_star == pytest.approx(math.sqrt(2000 * 0.05 / 1e-5))  # = 3162.3
  grid = np.geomspace(16, 1e6, 20001)
  assert grid[np.argmin(time_model(fit, st, grid))] == pytest.approx(b_star, rel=1e-3)
  assert time_model(fit, st, 1000.0) == pytest.approx(1000 * 3 * (0.05 + 0.01))
  assert math.isinf(cb.optimal_batch(fit, cb.StepTimeFit(0.05, 0.0)))
  assert cb.optimal_batch(fit, cb.StepTimeFit(0.0, 1e-5)) == 0.0
  assert math.isinf(cb.optimal_batch(dataclasses.replace(fit, b_crit=math.inf), st))


def test_step_time_fit_is_relative_and_never_gives_a_negative_overhead():
  """Relative least squares, written out in float64: Σ((t − γ − δB)/t)² over γ, δ ≥ 0."""
  bs = np.array([256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 55000], np.float64)
  t = 7e-5 * bs
  t[-1] = 9.8  # the MNIST ladder's shape: linear, with a slow full batch
  ols = np.polyfit(bs, t, 1)  # unweighted: the outlier drives the intercept negative
  assert ols[1] < -0.1
  st = cb.fit_step_time(bs, t)
  assert st.gamma == 0.0
  delta_ref = np.sum(bs / t) / np.sum((bs / t) ** 2)  # argmin_δ Σ(1 − δB/t)²
  assert st.delta == pytest.approx(delta_ref, rel=1e-12)
  assert st.delta == pytest.approx(7e-5, rel=0.05)  # the 8 regular batches decide it, not the outlier
  ts = np.array([0.5, 0.45, 0.4])
  flat = cb.fit_step_time([100, 200, 400], ts)  # faster at larger batches: δ clipped to 0
  assert flat.delta == 0.0 and flat.gamma == pytest.approx(np.sum(1 / ts) / np.sum(1 / ts**2), rel=1e-12)
  with pytest.raises(ValueError):
    cb.fit_step_time([100, 200], [0.1, 0.0])


def test_seconds_per_step_skips_compile_interval():
  curve = [
    {"step": 100, "wall_time": 30.0},
    {"step": 200, "wall_time": 31.0},
    {"step": 300, "wall_time": 32.0},
    {"step": 400, "wall_time": 33.2},
  ]
  assert cb.seconds_per_step(curve) == pytest.approx(0.011)
  assert cb.seconds_per_step(curve[:2]) == pytest.approx(0.01)
  assert cb.seconds_per_step(curve[:1]) is None


def test_breakdown_point_hand_cases():
  b = [256, 512, 1024, 2048, 4096]
  assert cb.breakdown_point(b, [100, 60, 40, 39, 41]) == 1024  # 39 is within 5% of 40
  assert cb.breakdown_point(b, [100, 60, 40, 39, 41], rel_tol=0.0) == 2048
  assert cb.breakdown_point(b, [100, 60, 40, 30, 20]) is None  # still falling at the edge
  assert cb.breakdown_point(b, [100, 60, 40, 50, 30]) is None  # falls again after a bump
  assert cb.breakdown_point(b, [100, 60, 40, 50, 45]) == 1024
  assert cb.breakdown_point(b, [100, 60, None, math.inf, None]) == 512  # larger batches never reach
  assert cb.breakdown_point(b, [None] * 5) is None
  assert cb.breakdown_point([4096, 256, 1024], [41, 100, 40]) == 1024  # order of input does not matter
  assert cb.breakdown_point([256], [10]) is None


def test_report_warns_when_b_crit_lies_beyond_the_data():
  """Steps that halve with every doubling show no bend: the fitted B_crit is only a lower bound, and the report
  says so. With a clear bend inside the batches (S = 100·(1 + 1000/B), B up to 8192) it says nothing."""
  from lamb_lars.study.report.report_scaling import b_crit_caveat

  perfect_b = [256, 512, 1024, 1536]
  perfect = cb.fit_inverse_law(perfect_b, [2400 * 256 / b * (1 + 0.01 * (i % 2)) for i, b in enumerate(perfect_b)])
  assert perfect.b_crit > 1536
  assert "≳ 1536" in b_crit_caveat(perfect, perfect_b)
  bend_b = np.array([256, 1024, 4096, 8192])
  bend = cb.fit_inverse_law(bend_b, 100.0 * (1 + 1000.0 / bend_b))
  assert abs(bend.b_crit - 1000.0) < 1.0
  assert b_crit_caveat(bend, list(bend_b)) is None
