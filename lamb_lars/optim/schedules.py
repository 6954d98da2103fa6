"""Learning-rate schedules used in "The Limit of the Batch Size" (You et al. 2020, §3–4) and batch-size LR scaling.

Every schedule is a plain optax schedule: ``count -> learning rate``, jit-safe, in the default float dtype (float64
under ``jax_enable_x64``). t is the update count, W the warmup steps, T the decay steps (total − W), η the peak LR.

Scaling rules (peak LR from the LR tuned at a base batch B0):
  linear  η = η0 · B/B0          (Krizhevsky 2014, "One weird trick"; Goyal et al. 2017)
  sqrt    η = η0 · sqrt(B/B0)    (Krizhevsky 2014; Hoffer, Hubara & Soudry 2017)

Warmup (t < W) over f0 = ``warmup_init_factor`` (default 0) and x = (t + 1)/W, the fraction of warmup done once
update t is applied:
  linear  η · (f0 + (1 − f0) · x)                             (Goyal et al. 2017)
  cosine  η · (f0 + (1 − f0) · ½(1 − cos(π x)))               (paper §3: "cosine warmup + cosine decay")
so the first update (t = 0) already moves, with η·(f0 + (1 − f0)/W) > 0 even for f0 = 0, and the last warmup update
(t = W − 1) uses the peak η; decay starts at t = W.

Decay, with s = t − W and e = ``end_lr_factor``:
  constant  η
  cosine    η · (e + (1 − e) · ½(1 + cos(π min(s, T)/T)))          (Loshchilov & Hutter 2017)
  poly      η · (e + (1 − e) · (1 − min(s, T)/T)^p), p = 2          (LARS: You, Gitman & Ginsburg 2017; MLPerf)
  step      η · γ^k, k = number of boundaries ≤ t (absolute steps)  (He et al. 2016; Goyal et al. 2017)
  cyclical  x = (s mod C)/C, low = e·η; cycles restart at the peak:
              triangular  low + (η − low) · |1 − 2x|                (Smith 2017, started at the peak)
              cosine      low + (η − low) · ½(1 + cos(π x))          (SGDR, Loshchilov & Hutter 2017)

``decay='tf_poly'`` is the authors' own MNIST schedule (You et al. 2020; GitHub ``fastalgo/mnist_tpu``), with
TensorFlow's conventions instead of the ones above. With W the warmup in *unrounded* steps (e.g. 16 epochs of 60,000
at batch 8192 = 117.1875), T the total steps and ``end`` the absolute final LR (``end_lr``; TF's
``end_learning_rate``):
  t < W   η · t / W                                   warmup from 0: the first update (t = 0) has LR 0
  t ≥ W   (η − end) · (1 − min(t, T)/T)^p + end       ``tf.train.polynomial_decay`` at the *global* step t
so the decay counts from step 0, not from the end of warmup, and the LR jumps down to the decay curve at t = W.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import jax.numpy as jnp
import optax

from lamb_lars.common import durations

SCALING_RULES = ("none", "linear", "sqrt")
WARMUP_SHAPES = ("linear", "cosine")
DECAYS = ("constant", "cosine", "poly", "step", "cyclical", "tf_poly")
CYCLE_SHAPES = ("triangular", "cosine")


def _t(count: Any) -> Any:
  """The step as a float in the default float dtype (float64 under x64, so references can match to 1e-10)."""
  return jnp.asarray(count).astype(jnp.result_type(float))


def scale_learning_rate(learning_rate: float, batch_size: int, base_batch_size: int, rule: str) -> float:
  """η = η0 · (B/B0) for 'linear', η0 · sqrt(B/B0) for 'sqrt', η0 for 'none'."""
  if rule not in SCALING_RULES:
    raise ValueError(f"lr_scaling must be one of {SCALING_RULES}; got {rule!r}.")
  k = batch_size / base_batch_size
  return float(learning_rate) * {"none": 1.0, "linear": k, "sqrt": math.sqrt(k)}[rule]


def constant(peak: float) -> optax.Schedule:
  """lr(t) = η."""
  return lambda count: jnp.full_like(_t(count), peak)


def _warmup_fraction(count: Any, w: int) -> Any:
  """x = min(t + 1, W)/W: the fraction of warmup done once update t is applied (1/W at t = 0, 1 at t = W − 1)."""
  return jnp.minimum(_t(count) + 1.0, w) / w


def linear_warmup(peak: float, steps: int, init_factor: float = 0.0) -> optax.Schedule:
  """lr(t) = η·(f0 + (1 − f0)·min(t + 1, W)/W) (Goyal et al. 2017); the first update is η·(f0 + (1 − f0)/W)."""
  w = max(int(steps), 1)
  return lambda count: peak * (init_factor + (1.0 - init_factor) * _warmup_fraction(count, w))


def cosine_warmup(peak: float, steps: int, init_factor: float = 0.0) -> optax.Schedule:
  """lr(t) = η·(f0 + (1 − f0)·½(1 − cos(π·min(t + 1, W)/W)))."""
  w = max(int(steps), 1)
  return lambda count: (
    peak * (init_factor + (1.0 - init_factor) * 0.5 * (1.0 - jnp.cos(jnp.pi * _warmup_fraction(count, w))))
  )


def cosine_decay(peak: float, steps: int, end_factor: float = 0.0) -> optax.Schedule:
  """lr(s) = η·(e + (1 − e)·½(1 + cos(π·min(s, T)/T))) (Loshchilov & Hutter 2017)."""
  d = max(int(steps), 1)
  return lambda count: (
    peak * (end_factor + (1.0 - end_factor) * 0.5 * (1.0 + jnp.cos(jnp.pi * jnp.minimum(_t(count), d) / d)))
  )


def _remaining(count: Any, total: int) -> Any:
  """1 − min(t, T)/T as (T − min(t, T))/T, which is exactly 0 from t = T on: under jit XLA computes t/T as t·(1/T),
  so 1 − t/T left ±2e-17 at t = T, and a fractional power of that is NaN or ~1e-8 instead of 0."""
  return (total - jnp.minimum(_t(count), total)) / total


def polynomial_decay(peak: float, steps: int, end_factor: float = 0.0, power: float = 2.0) -> optax.Schedule:
  """lr(s) = η·(e + (1 − e)·(1 − min(s, T)/T)^p); the LARS / MLPerf ResNet-50 recipe uses p = 2."""
  d = max(int(steps), 1)
  return lambda count: peak * (end_factor + (1.0 - end_factor) * _remaining(count, d) ** power)


def step_decay(peak: float, boundaries: Sequence[int], factor: float = 0.1) -> optax.Schedule:
  """lr(t) = η·γ^k with k the number of boundaries ≤ t (He et al. 2016: ×0.1 at epochs 30, 60, 80)."""
  bounds = sorted(int(b) for b in boundaries)

  def schedule(count):
    t = _t(count)
    k = sum((t >= b).astype(t.dtype) for b in bounds) if bounds else jnp.zeros_like(t)
    return peak * factor**k

  return schedule


def cyclical(peak: float, cycle_steps: int, low_factor: float = 0.0, shape: str = "triangular") -> optax.Schedule:
  """Cycles of C steps between η and e·η that restart at η: triangular (Smith 2017) or cosine (SGDR)."""
  if shape not in CYCLE_SHAPES:
    raise ValueError(f"cycle_shape must be one of {CYCLE_SHAPES}; got {shape!r}.")
  c = max(int(cycle_steps), 1)
  low = low_factor * peak

  def schedule(count):
    x = jnp.mod(_t(count), c) / c
    if shape == "triangular":
      return low + (peak - low) * jnp.abs(1.0 - 2.0 * x)
    return low + (peak - low) * 0.5 * (1.0 + jnp.cos(jnp.pi * x))

  return schedule


def tf_poly(peak: float, warmup_steps: float, total_steps: int, end_lr: float, power: float) -> optax.Schedule:
  """The authors' schedule (module docstring): η·t/W for t < W, then TF ``polynomial_decay`` at the global step t."""
  w, total = float(warmup_steps), max(int(total_steps), 1)

  def schedule(count):
    t = _t(count)
    decayed = (peak - end_lr) * _remaining(t, total) ** power + end_lr
    if w <= 0:
      return decayed
    return jnp.where(t < w, peak * t / w, decayed)

  return schedule


def warmup_then(warmup: optax.Schedule, decay: optax.Schedule, warmup_steps: int) -> optax.Schedule:
  """lr(t) = warmup(t) for t < W, decay(t − W) afterwards (decay only when W = 0)."""
  if warmup_steps <= 0:
    return decay
  return lambda count: jnp.where(_t(count) < warmup_steps, warmup(count), decay(_t(count) - warmup_steps))


def _decay(cfg: Any, peak: float, warmup_steps: int, kw: dict[str, int]) -> optax.Schedule:
  """The decay part of the schedule ``cfg`` (``cfg.decay``), counted from the end of warmup."""
  decay_steps = max(int(kw["total_steps"]) - warmup_steps, 1)
  if cfg.decay == "constant":
    return constant(peak)
  if cfg.decay == "cosine":
    return cosine_decay(peak, decay_steps, float(cfg.end_lr_factor))
  if cfg.decay == "poly":
    return polynomial_decay(peak, decay_steps, float(cfg.end_lr_factor), float(cfg.poly_power))
  if cfg.decay == "step":
    bounds = [durations.to_steps(float(e), "epochs", **kw) - warmup_steps for e in cfg.step_boundaries_epochs]
    return step_decay(peak, bounds, float(cfg.step_factor))
  if cfg.decay == "cyclical":
    return cyclical(peak, durations.steps("cycle", cfg, **kw), float(cfg.end_lr_factor), cfg.cycle_shape)
  raise ValueError(f"schedule.decay must be one of {DECAYS}; got {cfg.decay!r}.")


def create_schedule(cfg: Any, peak: float, *, total_steps: int, num_train: int, batch_size: int) -> optax.Schedule:
  """The schedule described by ``cfg`` (the ``config.optimizer.schedule`` subtree) with peak LR ``peak``.

  Every key is read from ``cfg``, whose defaults are ``lamb_lars/configs/optimizer.py`` (there are none here). Every
  duration (``warmup_*``, ``cycle_*``, ``step_boundaries_epochs``) goes through :mod:`lamb_lars.common.durations`
  (epochs are N/B steps, rounded up); step boundaries count from step 0, warmup included.
  """
  kw = dict(num_train=num_train, batch_size=batch_size, total_steps=total_steps)
  if cfg.decay == "tf_poly":
    end_lr = float(cfg.end_lr) if cfg.end_lr >= 0 else float(cfg.end_lr_factor) * peak
    return tf_poly(
      peak, durations.exact_steps("warmup", cfg, default=0, **kw), total_steps, end_lr, float(cfg.poly_power)
    )
  warmup_steps = durations.steps("warmup", cfg, default=0, **kw)
  if cfg.warmup_shape not in WARMUP_SHAPES:
    raise ValueError(f"schedule.warmup_shape must be one of {WARMUP_SHAPES}; got {cfg.warmup_shape!r}.")
  warmup = linear_warmup if cfg.warmup_shape == "linear" else cosine_warmup
  return warmup_then(
    warmup(peak, warmup_steps, float(cfg.warmup_init_factor)), _decay(cfg, peak, warmup_steps, kw), warmup_steps
  )
