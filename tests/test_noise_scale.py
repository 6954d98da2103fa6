"""Gradient noise scale (McCandlish et al. 2018) on a synthetic problem with known Σ and G; SNR (You et al. §6.1)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lamb_lars import noise_scale as ns

P, DEVICES, B_SMALL = 16, 8, 8
B_BIG = DEVICES * B_SMALL


def _problem(seed=0):
  """G with |G|² = 1 and Σ = L Lᵀ scaled so that tr Σ = 32: B_simple = 32."""
  rng = np.random.default_rng(seed)
  g = rng.standard_normal(P)
  g /= np.linalg.norm(g)
  chol = rng.standard_normal((P, P)) * np.linspace(0.2, 2.0, P)
  chol *= np.sqrt(32.0 / np.sum(chol * chol))  # tr(L Lᵀ) = ‖L‖_F²
  return rng, g, chol


def _step(rng, g, chol):
  """Per-example gradients g_i = G + L z_i; per-device means over B_small, global mean over B_big."""
  per_example = g + rng.standard_normal((DEVICES, B_SMALL, P)) @ chol.T
  return ns.stacked_sq_norms(per_example.mean(axis=1))


def test_two_batch_estimates_exact_expectations():
  # E|G_B|² = |G|² + trΣ/B is inverted exactly.
  g2, tr = 1.5, 40.0
  est = ns.two_batch_estimates(g2 + tr / 4, g2 + tr / 32, 4, 32)
  assert est == pytest.approx((g2, tr))


def test_ema_noise_scale_recovers_trace_over_g2():
  rng, g, chol = _problem()
  steps, decay = 3000, 0.998
  state = ns.NoiseScaleState(0.0, 0.0, 0)
  nums, dens, naive = [], [], []
  for _ in range(steps):
    small, big = _step(rng, g, chol)
    state = ns.update(state, small, big, B_SMALL, B_BIG, decay)
    d, n = ns.two_batch_estimates(small, big, B_SMALL, B_BIG)
    nums.append(n)
    dens.append(d)
    naive.append(big)
  true = 32.0
  nums, dens = np.array(nums), np.array(dens)
  # Per-step estimates are unbiased: sample means agree with tr Σ = 32 and |G|² = 1 within 4 standard errors.
  assert abs(nums.mean() - 32.0) < 4 * nums.std() / np.sqrt(steps)
  assert abs(dens.mean() - 1.0) < 4 * dens.std() / np.sqrt(steps)
  # The EMA ratio: delta-method standard error with the EMA's weights w_t = (1-β)β^(T-t).
  w = (1 - decay) * decay ** np.arange(steps)[::-1]
  resid = nums - true * dens
  se = np.sqrt(np.sum(w ** 2)) / np.sum(w) * resid.std() / dens.mean()
  assert se < 0.15 * true  # the test can tell a right estimator from a wrong one
  assert abs(float(ns.b_simple(state)) - true) < 4 * se
  g2, tr = ns.debiased(state, decay)
  assert abs(tr / g2 - float(ns.b_simple(state))) < 1e-9
  # The naive ratio with the global-batch |G_big|² as the signal is far off (it contains trΣ/B_big = 0.5).
  assert abs(nums.mean() / np.mean(naive) - true) > 8 * se


def test_jax_update_matches_numpy_under_jit():
  rng, g, chol = _problem(1)
  obs = [_step(rng, g, chol) for _ in range(20)]
  np_state, jx_state = ns.NoiseScaleState(0.0, 0.0, 0), ns.init()
  upd = jax.jit(ns.update, static_argnums=(3, 4, 5))
  for small, big in obs:
    np_state = ns.update(np_state, small, big, B_SMALL, B_BIG, 0.9)
    jx_state = upd(jx_state, jnp.float32(small), jnp.float32(big), B_SMALL, B_BIG, 0.9)
  assert int(jx_state.count) == 20 and isinstance(jx_state.g2, jax.Array)
  np.testing.assert_allclose(float(ns.b_simple(jx_state)), ns.b_simple(np_state), rtol=1e-4)
  assert np.isnan(ns.b_simple(ns.init()))  # no signal yet
  assert np.isnan(ns.b_simple(ns.NoiseScaleState(-1.0, 3.0, 1)))


def test_pytree_norms_and_stacked_norms():
  tree = {"a": np.ones((2, 3), np.float16), "b": np.full((4,), 2.0, np.float32)}
  assert ns.sq_norm(tree) == pytest.approx(6 + 16) and ns.vdot(tree, tree) == pytest.approx(22)
  assert ns.sq_norm(jax.tree_util.tree_map(jnp.asarray, tree)).dtype == jnp.float32
  per_device = {"w": np.array([[1.0, 0.0], [0.0, 1.0]]), "b": np.array([[1.0], [1.0]])}
  small, big = ns.stacked_sq_norms(per_device)
  assert (small, big) == pytest.approx((2.0, 0.5 ** 2 * 2 + 1.0))


def test_signal_to_noise_hand_computed():
  # g_d = 3·e1 ± 4·e2: mean = 3·e1, ‖g∥‖ = 3, ‖g⊥‖ = 4 on every device -> SNR = 0.75.
  g = np.array([[3.0, 4.0, 0.0], [3.0, -4.0, 0.0]])
  assert ns.signal_to_noise(g) == pytest.approx(0.75)
  assert float(ns.signal_to_noise(jnp.asarray(g))) == pytest.approx(0.75)
  # Same through the per-device pytree API used inside pmap: mean over devices of par / perp.
  mean = g.mean(axis=0)
  comps = np.array([ns.snr_components({"x": gd[:2], "y": gd[2:]}, {"x": mean[:2], "y": mean[2:]}) for gd in g])
  np.testing.assert_allclose(comps, [[3.0, 4.0], [3.0, 4.0]])
  # Identical gradients: no noise, infinite SNR; zero mean: no signal.
  with np.errstate(divide="ignore"):
    assert np.isinf(ns.signal_to_noise(np.ones((4, 3))))
  assert ns.signal_to_noise(np.array([[1.0, 0.0], [-1.0, 0.0]])) == 0.0


def test_signal_to_noise_pytree_with_device_axis_under_jit():
  rng = np.random.default_rng(2)
  tree = {"k": rng.standard_normal((4, 3, 2)), "b": rng.standard_normal((4, 5))}
  flat = np.concatenate([tree["k"].reshape(4, -1), tree["b"]], axis=1)
  got = jax.jit(ns.signal_to_noise)(jax.tree_util.tree_map(jnp.asarray, tree))
  np.testing.assert_allclose(float(got), ns.signal_to_noise(flat), rtol=1e-5)
