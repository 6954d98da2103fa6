"""Gradient noise scale (McCandlish et al. 2018) on a synthetic problem with known Σ and G; SNR (You et al. §6.1)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lamb_lars.train import noise_scale as ns

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
  se = np.sqrt(np.sum(w**2)) / np.sum(w) * resid.std() / dens.mean()
  assert se < 0.15 * true  # the test can tell a right estimator from a wrong one
  assert abs(float(ns.b_simple(state)) - true) < 4 * se
  g2, tr = ns.debiased(state, decay)
  assert abs(tr / g2 - float(ns.b_simple(state))) < 1e-9
  # The naive ratio with the global-batch |G_big|² as the signal is far off (it contains trΣ/B_big = 0.5).
  assert abs(nums.mean() / np.mean(naive) - true) > 8 * se


def test_two_batch_estimates_match_the_formula_in_float64():
  """|G|² ≈ (B_big|G_big|² − B_small|G_small|²)/(B_big − B_small), trΣ ≈ (|G_small|² − |G_big|²)/(1/B_small −
  1/B_big)."""
  rng = np.random.default_rng(3)
  small = rng.uniform(1.0, 5.0, 50)
  big = small * rng.uniform(0.2, 1.0, 50)
  for b_s, b_b in ((8, 64), (1, 2), (512, 131_072)):
    want_g2 = (b_b * big - b_s * small) / (b_b - b_s)
    want_tr = (small - big) / (1.0 / b_s - 1.0 / b_b)
    got_g2, got_tr = ns.two_batch_estimates(small, big, b_s, b_b)
    np.testing.assert_allclose(got_g2, want_g2, rtol=1e-12)
    np.testing.assert_allclose(got_tr, want_tr, rtol=1e-12)
    got_g2, got_tr = jax.jit(ns.two_batch_estimates, static_argnums=(2, 3))(
      jnp.float32(small), jnp.float32(big), b_s, b_b
    )
    np.testing.assert_allclose(got_g2, want_g2, rtol=1e-5, atol=1e-5 * np.abs(want_g2).max())
    np.testing.assert_allclose(got_tr, want_tr, rtol=1e-5)


def test_jit_estimator_on_per_device_gradients_recovers_known_noise_scale():
  """The whole on-device path (stacked_sq_norms → update → b_simple, float32 under jit) on per-example gradients
  g_i = G + L z_i with known |G|² = 1 and tr Σ = 32: the EMAs equal a float64 EMA of the two-batch formula, and
  B_simple comes out as tr Σ/|G|² = 32 within 4 standard errors."""
  rng, g, chol = _problem(1)
  steps, decay = 3000, 0.998
  per_device = (g + rng.standard_normal((steps, DEVICES, B_SMALL, P)) @ chol.T).mean(axis=2)  # [T, D, P]

  @jax.jit
  def run(xs):
    def body(state, x):
      small, big = ns.stacked_sq_norms(x)
      return ns.update(state, small, big, B_SMALL, B_BIG, decay), None

    return jax.lax.scan(body, ns.init(), xs)[0]

  state = run(jnp.asarray(per_device, jnp.float32))
  # float64 reference written from the definitions, not from the module.
  small = np.mean(np.sum(per_device**2, axis=2), axis=1)  # mean_d ‖g_d‖²
  big = np.sum(per_device.mean(axis=1) ** 2, axis=1)  # ‖mean_d g_d‖²
  g2_t = (B_BIG * big - B_SMALL * small) / (B_BIG - B_SMALL)
  tr_t = (small - big) / (1.0 / B_SMALL - 1.0 / B_BIG)
  w = (1 - decay) * decay ** np.arange(steps)[::-1]  # EMA weights, starting from 0
  np.testing.assert_allclose(float(state.g2), np.sum(w * g2_t), rtol=1e-3)
  np.testing.assert_allclose(float(state.trace), np.sum(w * tr_t), rtol=1e-3)
  assert int(state.count) == steps
  true = float(np.sum(chol * chol)) / float(g @ g)  # tr(L Lᵀ)/|G|² = 32
  assert true == pytest.approx(32.0)
  se = np.sqrt(np.sum(w**2)) / np.sum(w) * np.std(tr_t - true * g2_t) / np.mean(g2_t)
  assert se < 0.15 * true
  assert abs(float(ns.b_simple(state)) - true) < 4 * se
  assert np.isnan(ns.b_simple(ns.init()))  # no signal yet
  assert np.isnan(ns.b_simple(ns.NoiseScaleState(-1.0, 3.0, 1)))


def test_pytree_norms_and_stacked_norms():
  tree = {"a": np.ones((2, 3), np.float16), "b": np.full((4,), 2.0, np.float32)}
  assert ns.sq_norm(tree) == pytest.approx(6 + 16) and ns.vdot(tree, tree) == pytest.approx(22)
  assert ns.sq_norm(jax.tree_util.tree_map(jnp.asarray, tree)).dtype == jnp.float32
  per_device = {"w": np.array([[1.0, 0.0], [0.0, 1.0]]), "b": np.array([[1.0], [1.0]])}
  small, big = ns.stacked_sq_norms(per_device)
  assert (small, big) == pytest.approx((2.0, 0.5**2 * 2 + 1.0))


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
