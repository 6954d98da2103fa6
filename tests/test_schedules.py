"""Learning-rate schedules against their formulas (numpy float64) and optax's equivalents; LR scaling rules."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from lamb_lars.configs import optimizer as optimizer_defaults
from lamb_lars.optim import schedules as S

PEAK = 2.0
T = np.arange(0, 131)


def values(schedule, steps=T):
  return np.array([float(schedule(int(t))) for t in steps])


@pytest.mark.parametrize("rule,want", [("none", 0.1), ("linear", 3.2), ("sqrt", 0.1 * math.sqrt(32))])
def test_scaling_rules(rule, want):
  assert math.isclose(S.scale_learning_rate(0.1, 8192, 256, rule), want, rel_tol=1e-12)
  with pytest.raises(ValueError, match="lr_scaling"):
    S.scale_learning_rate(0.1, 8192, 256, "cubic")


def test_warmups_match_formula_and_optax():
  """Update t uses x = min(t + 1, W)/W: the first update moves, the last warmup update (t = W − 1) uses the peak."""
  w, f0 = 40, 0.1
  x = np.minimum(T + 1, w) / w
  lin = PEAK * (f0 + (1 - f0) * x)
  cos = PEAK * (f0 + (1 - f0) * 0.5 * (1 - np.cos(np.pi * x)))
  np.testing.assert_allclose(values(S.linear_warmup(PEAK, w, f0)), lin, rtol=1e-6)
  np.testing.assert_allclose(values(S.cosine_warmup(PEAK, w, f0)), cos, rtol=1e-6, atol=1e-7)
  np.testing.assert_allclose(
    values(S.linear_warmup(PEAK, w, f0)),  # optax's, one step ahead
    values(optax.linear_schedule(f0 * PEAK, PEAK, w), T + 1),
    rtol=1e-6,
  )


@pytest.mark.parametrize("shape", ["linear", "cosine"])
def test_first_update_lr_is_nonzero_by_default(shape):
  """With the default warmup_init_factor = 0 the first update already moves (η/W for linear warmup)."""
  cfg = _cfg(warmup_steps=10, warmup_shape=shape, decay="cosine")
  assert cfg.warmup_init_factor == 0.0
  sched = S.create_schedule(cfg, PEAK, total_steps=100, num_train=2560, batch_size=256)
  assert float(sched(0)) > 0.0
  if shape == "linear":
    np.testing.assert_allclose(float(sched(0)), PEAK / 10, rtol=1e-6)
  np.testing.assert_allclose(float(sched(9)), PEAK, rtol=1e-6)  # the last warmup update reaches the peak


def test_decays_match_formula_and_optax():
  d, e = 100, 0.05
  cos = PEAK * (e + (1 - e) * 0.5 * (1 + np.cos(np.pi * np.minimum(T, d) / d)))
  poly = PEAK * (e + (1 - e) * (1 - np.minimum(T, d) / d) ** 2)
  np.testing.assert_allclose(values(S.cosine_decay(PEAK, d, e)), cos, rtol=1e-6, atol=1e-7)
  np.testing.assert_allclose(values(S.polynomial_decay(PEAK, d, e, 2.0)), poly, rtol=1e-6, atol=1e-7)
  np.testing.assert_allclose(
    values(S.cosine_decay(PEAK, d, e)), values(optax.cosine_decay_schedule(PEAK, d, alpha=e)), rtol=1e-6, atol=1e-7
  )
  np.testing.assert_allclose(
    values(S.polynomial_decay(PEAK, d, e, 2.0)),
    values(optax.polynomial_schedule(PEAK, e * PEAK, 2.0, d)),
    rtol=1e-6,
    atol=1e-7,
  )
  np.testing.assert_allclose(values(S.constant(PEAK)), np.full(T.shape, PEAK))


def test_step_decay():
  got = values(S.step_decay(PEAK, [30, 60, 80], 0.1))
  want = PEAK * 0.1 ** ((T >= 30).astype(int) + (T >= 60) + (T >= 80))
  np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("shape", ["triangular", "cosine"])
def test_cyclical(shape):
  c, low = 20, 0.1
  x = (T % c) / c
  lo = low * PEAK
  want = lo + (PEAK - lo) * (np.abs(1 - 2 * x) if shape == "triangular" else 0.5 * (1 + np.cos(np.pi * x)))
  np.testing.assert_allclose(values(S.cyclical(PEAK, c, low, shape)), want, rtol=1e-6, atol=1e-7)


def _cfg(**kw) -> ml_collections.ConfigDict:
  c = optimizer_defaults.get_config().schedule
  for k, v in kw.items():
    c[k] = v
  return c


def test_create_schedule_warmup_then_poly_from_epochs():
  sched = S.create_schedule(
    _cfg(warmup_epochs=2.0, decay="poly", end_lr_factor=0.0), PEAK, total_steps=100, num_train=2560, batch_size=256
  )
  want = np.where(T < 20, PEAK * (T + 1) / 20, PEAK * (1 - np.minimum(T - 20, 80) / 80) ** 2)
  np.testing.assert_allclose(values(sched), want, rtol=1e-6, atol=1e-7)


def test_create_schedule_cosine_warmup_and_cosine_decay_percent():
  sched = S.create_schedule(
    _cfg(warmup_percent=10.0, warmup_shape="cosine", decay="cosine"),
    PEAK,
    total_steps=100,
    num_train=2560,
    batch_size=256,
  )
  want = np.where(
    T < 10,
    PEAK * 0.5 * (1 - np.cos(np.pi * (T + 1) / 10)),
    PEAK * 0.5 * (1 + np.cos(np.pi * np.minimum(T - 10, 90) / 90)),
  )
  np.testing.assert_allclose(values(sched), want, rtol=1e-6, atol=1e-6)


def test_create_schedule_step_boundaries_are_absolute_epochs():
  sched = S.create_schedule(
    _cfg(warmup_steps=5, decay="step", step_boundaries_epochs=(3, 6), step_factor=0.5),
    PEAK,
    total_steps=100,
    num_train=2560,
    batch_size=256,
  )
  got = values(sched, [5, 29, 30, 59, 60, 99])
  np.testing.assert_allclose(got, PEAK * np.array([1, 1, 0.5, 0.5, 0.25, 0.25]), rtol=1e-6)


def test_create_schedule_cyclical_from_examples():
  sched = S.create_schedule(
    _cfg(decay="cyclical", cycle_examples=256 * 20, end_lr_factor=0.0),
    PEAK,
    total_steps=100,
    num_train=2560,
    batch_size=256,
  )
  np.testing.assert_allclose(values(sched, [0, 10, 20, 30]), [PEAK, 0.0, PEAK, 0.0], atol=1e-6)


def test_create_schedule_errors():
  both = S.create_schedule(
    _cfg(warmup_steps=5, warmup_epochs=1.0, decay="constant"), PEAK, total_steps=10, num_train=1, batch_size=1
  )  # two units: steps win (lamb_lars/common/durations.py)
  assert float(both(3)) == pytest.approx(0.8 * PEAK)
  with pytest.raises(ValueError, match="decay"):
    S.create_schedule(_cfg(decay="exp"), PEAK, total_steps=10, num_train=1, batch_size=1)
  with pytest.raises(ValueError, match="cycle"):
    S.create_schedule(_cfg(decay="cyclical"), PEAK, total_steps=10, num_train=1, batch_size=1)


def test_schedules_are_jit_safe_and_follow_x64():
  sched = S.create_schedule(
    _cfg(warmup_steps=10, decay="cosine"), PEAK, total_steps=100, num_train=2560, batch_size=256
  )
  counts = jnp.arange(100)
  np.testing.assert_allclose(
    np.asarray(jax.jit(jax.vmap(sched))(counts)), values(sched, range(100)), rtol=1e-6, atol=1e-6
  )
  assert sched(jnp.int32(3)).dtype == jnp.float32
  with jax.enable_x64(True):
    assert sched(jnp.int32(3)).dtype == jnp.float64


def test_create_schedule_keeps_no_defaults_of_its_own():
  """lamb_lars/configs/optimizer.py is the one source of the schedule's defaults: its default decay (cosine) is the
  schedule's, and a config without a key is an error, not a silent second default (the old code decayed 'constant')."""
  defaults = _cfg()
  assert defaults.decay == "cosine"
  sched = S.create_schedule(defaults, PEAK, total_steps=100, num_train=2560, batch_size=256)
  np.testing.assert_allclose(values(sched, [0, 50, 100]), [PEAK, PEAK / 2, 0.0], rtol=1e-6, atol=1e-6)
  for key in ("decay", "warmup_shape", "end_lr_factor"):
    partial = _cfg().to_dict()
    del partial[key]
    with pytest.raises(AttributeError, match=key):
      S.create_schedule(ml_collections.ConfigDict(partial), PEAK, total_steps=100, num_train=2560, batch_size=256)
