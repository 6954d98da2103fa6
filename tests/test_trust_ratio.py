"""scale_by_trust_ratio: statistics, zero norms, the two denominators, masks, stacked leaves, low precision."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import reference_optimizers as ref
from lamb_lars.optim import optimizers as O
from lamb_lars.optim import trust_ratio as tr

LR = 0.1


def _problem(dtype=jnp.float32):
  params, grads = ref.make_problem(steps=2)
  to = lambda d: ref.nest({k: jnp.asarray(v, dtype) for k, v in d.items()})
  return params, grads, to(params), [to(g) for g in grads]


def test_stats_match_reference():
  """Statistics after two LARS steps: ‖w‖, ‖u‖, raw and bounded ratio, clipped, relative step (one per layer for
  the stacked leaf)."""
  bounds, stacked = (0.01, 1.0), "^stack/"
  params, grads, p, gs = _problem()
  tx = O.lars(
    LR,
    weight_decay=0.01,
    trust_coefficient=0.01,
    ratio_bounds=bounds,
    track_stats=True,
    stacked_mask=lambda t: jax.tree.map_with_path(lambda kp, _: kp[0].key == "stack", t),
  )
  r = ref.Reference(
    "lars",
    LR,
    momentum=0.9,
    weight_decay=0.01,
    trust_coefficient=0.01,
    denominator="paper",
    ratio_bounds=bounds,
    stacked=stacked,
  )
  r_raw = ref.Reference(
    "lars", LR, momentum=0.9, weight_decay=0.01, trust_coefficient=0.01, denominator="paper", stacked=stacked
  )
  state, update = tx.init(p), jax.jit(tx.update)
  rp = {k: np.asarray(v, np.float32).astype(np.float64) for k, v in params.items()}
  for g, gj in zip(grads, gs):
    prev = rp
    u, state = update(gj, state, p)
    p = optax.apply_updates(p, u)
    g = {k: np.asarray(v, np.float32).astype(np.float64) for k, v in g.items()}
    rp = r.step(prev, g)
    r_raw.step(prev, g)
  stats = jax.device_get(jax.jit(tr.trust_ratio_stats)(state))
  for path, w in prev.items():
    beta = 0.0 if path.endswith(("bias", "scale")) else 0.01
    adapted = not path.endswith(("bias", "scale"))
    uu = g[path] + beta * w
    layers = [w[i] for i in range(3)] if path == "stack/kernel" else [w]
    units = [uu[i] for i in range(3)] if path == "stack/kernel" else [uu]
    for j, (wl, ul) in enumerate(zip(layers, units)):
      key = f"{path}/{j}" if path == "stack/kernel" else path
      ratio = np.ravel(r.ratios[path])[j] if adapted else 1.0
      raw = np.ravel(r_raw.ratios[path])[j] if adapted else 1.0
      pn, un = np.linalg.norm(wl), np.linalg.norm(ul)
      np.testing.assert_allclose(stats[f"param_norm/{key}"], pn, rtol=2e-5)
      np.testing.assert_allclose(stats[f"direction_norm/{key}"], un, rtol=2e-5)
      np.testing.assert_allclose(stats[f"raw_ratio/{key}"], raw, rtol=2e-5)
      np.testing.assert_allclose(stats[f"ratio/{key}"], ratio, rtol=2e-5)
      assert stats[f"clipped/{key}"] == float(not np.isclose(raw, ratio, rtol=1e-6)), key
      np.testing.assert_allclose(stats[f"relative_step/{key}"], LR * ratio * un / pn if pn > 0 else 0.0, rtol=2e-5)
  assert any(stats[k] == 1.0 for k in stats if k.startswith("clipped/"))
  assert any(stats[k] == 0.0 for k in stats if k.startswith("clipped/") and "kernel" in k)


def test_stats_are_found_in_wrapped_states_and_without_splitting():
  _, _, p, gs = _problem()
  inner = O.lamb(
    LR, track_stats=True, stacked_mask=lambda t: jax.tree.map_with_path(lambda kp, _: kp[0].key == "stack", t)
  )
  tx = optax.MultiSteps(optax.chain(optax.clip_by_global_norm(1.0), inner), every_k_schedule=1)
  state = tx.init(p)
  _, state = jax.jit(tx.update)(gs[0], state, p)
  flat = tr.trust_ratio_stats(state)
  assert "ratio/conv1/kernel" in flat and "ratio/stack/kernel/2" in flat
  whole = tr.trust_ratio_stats(state, split_layers=False, prefix="tr/")
  assert whole["tr/ratio/stack/kernel"].shape == (3,)
  assert tr.trust_ratio_stats(optax.sgd(0.1).init(p)) == {}
  two = optax.chain(tr.scale_by_trust_ratio(track_stats=True), tr.scale_by_trust_ratio(track_stats=True))
  s2 = two.update(gs[0], two.init(p), p)[1]
  assert "0/ratio/fc1/kernel" in tr.trust_ratio_stats(s2) and "1/ratio/fc1/kernel" in tr.trust_ratio_stats(s2)


@pytest.mark.parametrize("denominator", ["paper", "optax"])
def test_zero_norms_give_the_configured_ratio(denominator):
  tx = tr.scale_by_trust_ratio(0.5, weight_decay=0.1, denominator=denominator, zero_norm_ratio=0.25, track_stats=True)
  p = {"zero_w": jnp.zeros(3), "zero_g": jnp.ones(3)}
  g = {"zero_w": jnp.ones(3), "zero_g": jnp.zeros(3)}
  u, state = tx.update(g, tx.init(p), p)
  stats = tr.trust_ratio_stats(state)
  assert float(stats["ratio/zero_w"]) == 0.25
  np.testing.assert_allclose(np.asarray(u["zero_w"]), 0.25 * np.ones(3))
  if denominator == "paper":  # ‖g‖ = 0 → ρ₀ (TF-TPU); the optax form sees ‖g + βw‖ = 0.1·√3 > 0
    assert float(stats["ratio/zero_g"]) == 0.25
  else:
    np.testing.assert_allclose(float(stats["ratio/zero_g"]), 0.5 * np.sqrt(3) / (0.1 * np.sqrt(3)), rtol=1e-6)


def test_paper_denominator_is_bounded_near_weight_decay_equilibrium():
  """g ≈ −βw: the paper ratio stays ≈ η/(2β) ≤ η/β, optax's ‖g + βw‖ blows it up (docs/science.md §3)."""
  rng = np.random.default_rng(0)
  w = jnp.asarray(rng.standard_normal(1000), jnp.float32)
  beta, eta = 1e-2, 1e-3
  g = -beta * w + 1e-7 * jnp.asarray(rng.standard_normal(1000), jnp.float32)
  ratios = {}
  for den in ("paper", "optax"):
    tx = tr.scale_by_trust_ratio(eta, weight_decay=beta, denominator=den, track_stats=True)
    _, s = tx.update({"w": g}, tx.init({"w": w}), {"w": w})
    ratios[den] = float(tr.trust_ratio_stats(s)["ratio/w"])
  assert ratios["paper"] <= eta / beta
  np.testing.assert_allclose(ratios["paper"], eta / (2 * beta), rtol=1e-3)
  assert ratios["optax"] > 100 * ratios["paper"]


def test_weight_decay_and_adaptation_masks_are_independent():
  w, g = jnp.array([3.0, 4.0]), jnp.array([0.6, 0.8])  # ‖w‖ = 5, ‖g‖ = 1
  p = {"a": w, "b": w, "c": w, "d": w}
  grads = {k: g for k in p}
  tx = tr.scale_by_trust_ratio(
    1.0,
    weight_decay=0.1,
    denominator="paper",
    weight_decay_mask={"a": True, "b": True, "c": False, "d": False},
    adaptation_mask={"a": True, "b": False, "c": True, "d": False},
  )
  u, _ = tx.update(grads, tx.init(p), p)
  np.testing.assert_allclose(np.asarray(u["a"]), 5.0 / (1.0 + 0.5) * (g + 0.1 * w), rtol=1e-6)
  np.testing.assert_allclose(np.asarray(u["b"]), g + 0.1 * w, rtol=1e-6)
  np.testing.assert_allclose(np.asarray(u["c"]), 5.0 * g, rtol=1e-6)
  np.testing.assert_allclose(np.asarray(u["d"]), g, rtol=1e-6)


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
@pytest.mark.parametrize(
  "make",
  [
    lambda: O.lars(1.0, weight_decay=1e-4, track_stats=True),
    lambda: O.lamb(1e-3, weight_decay=1e-2, track_stats=True),
    lambda: O.layerwise_adam(1e-3, ratio_bounds=(0.01, 10.0), track_stats=True),
  ],
  ids=["lars", "lamb", "layerwise_adam"],
)
def test_low_precision_params_give_finite_ratios(dtype, make):
  """‖w‖² = 9·10⁷ overflows float16 (max 65504); norms in float32 keep ratios finite and right. (Gradients of
  order 1: Adam's own (1−b2)·g² underflows in float16 for small gradients, which is not the ratio's business.)"""
  rng = np.random.default_rng(0)
  w64 = 300.0 * np.sign(rng.standard_normal(1000))
  g64 = np.sign(rng.standard_normal(1000)) * (0.5 + rng.random(1000))
  p, g = {"fc": {"kernel": jnp.asarray(w64, dtype)}}, {"fc": {"kernel": jnp.asarray(g64, dtype)}}
  tx = make()
  u, state = jax.jit(tx.update)(g, tx.init(p), p)
  assert u["fc"]["kernel"].dtype == dtype
  assert bool(jnp.all(jnp.isfinite(u["fc"]["kernel"].astype(jnp.float32))))
  stats = tr.trust_ratio_stats(state)
  assert all(bool(jnp.isfinite(v)) for v in stats.values())
  np.testing.assert_allclose(
    float(stats["param_norm/fc/kernel"]),
    np.linalg.norm(np.asarray(jnp.asarray(w64, dtype).astype(jnp.float32))),
    rtol=1e-5,
  )


def test_stacked_leaf_gets_one_ratio_per_layer():
  w = jnp.stack([jnp.full((2, 2), 0.01), jnp.full((2, 2), 1.0), jnp.full((2, 2), 100.0)])
  g = jnp.ones_like(w)
  tx = tr.scale_by_trust_ratio(stacked_mask=True, track_stats=True)
  u, s = tx.update({"k": g}, tx.init({"k": w}), {"k": w})
  np.testing.assert_allclose(np.asarray(u["k"]), np.asarray(w), rtol=1e-6)  # r_l = ‖w_l‖/‖g_l‖, g = 1
  assert s.stats["k"].ratio.shape == (3,)


def test_bad_arguments_raise():
  with pytest.raises(ValueError, match="denominator"):
    tr.scale_by_trust_ratio(denominator="median")
  with pytest.raises(ValueError, match="ratio_bounds"):
    tr.scale_by_trust_ratio(ratio_bounds=(2.0, 1.0))
  with pytest.raises(ValueError, match="phi_bounds"):
    tr.scale_by_trust_ratio(phi_bounds=(1.0,))
  tx = tr.scale_by_trust_ratio()
  with pytest.raises(ValueError):
    tx.update({"w": jnp.ones(2)}, tx.init({"w": jnp.ones(2)}))
