"""Gradient noise scale and gradient signal-to-noise ratio, measured during training from per-device gradients.

Simple noise scale (McCandlish et al. 2018, "An Empirical Model of Large-Batch Training", §2.2 and App. A.1):

  B_simple = tr(Σ)/|G|²,

G the true gradient, Σ the per-example gradient covariance. A mean gradient over B examples has
E|G_B|² = |G|² + tr(Σ)/B, so two batch sizes — B_small (one device's batch) and B_big (the global batch) —
give unbiased estimates

  |G|² ≈ (B_big·|G_big|² − B_small·|G_small|²) / (B_big − B_small),
  tr(Σ) ≈ (|G_small|² − |G_big|²) / (1/B_small − 1/B_big).

Each is very noisy for one step, so numerator and denominator are averaged separately (an EMA of each) and then
divided (App. A.1). Both EMAs start at 0 with the same decay, so the EMA bias cancels in the ratio. Use
|G_small|² = mean over devices of |g_d|² (each device's mean gradient over its own B_small examples) and
|G_big|² = |mean over devices of g_d|²; gradients must be *means* over examples, not sums.

Preconditioned noise scale. McCandlish et al. 2018 (§2.2, App. A) define B_noise = tr(HΣ)/(GᵀHG) for a step along
the gradient; an optimizer that steps along P·g (P its diagonal preconditioner) sees the gradient noise PΣPᵀ and the
signal PG, so the noise scale of the update direction it takes is

  B_precond = tr(PΣPᵀ)/|PG|²,

the "preconditioned gradient noise scale" of Pollux (Qiao et al. 2021, "Pollux: Co-adaptive Cluster Scheduling for
Goodput-Optimized Deep Learning", OSDI), whose statistical efficiency of batch M against the initial m₀ is
(φ + m₀)/(φ + M) with φ = B_precond. Estimated by the same two-batch formulas applied to P·g_small and P·g_big: for a
fixed P, P·G_B is a mean of the B per-example vectors P·g_i, whose mean is PG and covariance PΣPᵀ. What we read:
AdaptDL's ``adaptdl/torch/gradient_noise_scale.py`` (petuum/adaptdl), class ``AdamGradientNoiseScale``, which divides
each replica's and the averaged gradient by ``pinv = sqrt(exp_avg_sq)/sqrt(1 − β₂^step) + ε`` of PyTorch Adam's
state before ``optimizer.step()`` (P = I for its first 5 steps) and then runs the unpreconditioned estimator
unchanged. We use the same P = 1/(sqrt(v̂) + ε) from the optimizer state *before* the update — the statistics of the
previous steps, so P is fixed given the past — and mark the step before the first update as undefined instead of
using P = I (the two would mix units in the averages). Which P each optimizer has, and why LAMB's trust ratio is not
part of it: :mod:`lamb_lars.optim.preconditioner`. With P = I (SGD, momentum, LARS) B_precond = B_simple.

Interval over windows (:func:`window_interval`). The per-step estimates (|G|²_t, trΣ_t) are grouped into
consecutive non-overlapping windows of W steps; window k gives the means Ḡ_k, T̄_k. Over the last K complete windows
the estimate is R = mean_k T̄_k / mean_k Ḡ_k, with the ratio estimator's delta-method (batch-means) standard error
se = sqrt(Σ_k (T̄_k − R·Ḡ_k)² / (K(K − 1))) / mean_k Ḡ_k — the spread of the per-window ratios T̄_k/Ḡ_k weighted by
Ḡ_k/mean Ḡ — and the interval is R ± t_{0.975, K−1}·se (95 %, Student t with K − 1 degrees of freedom). Windows long
enough to span the estimates' autocorrelation make the K window means nearly independent (the batch-means method).
It is an interval for the noise scale of the last K·W steps; it says nothing of drift within them.

Gradient signal-to-noise (You et al. 2020, "The Limit of the Batch Size", §6.1): with ḡ the mean of the per-device
gradients g_d, split g_d = g∥ + g⊥ along ḡ; SNR = E‖g∥‖ / E‖g⊥‖, ‖g∥‖ = |⟨g_d, ḡ⟩|/‖ḡ‖,
‖g⊥‖ = √(‖g_d‖² − ‖g∥‖²), expectations over devices.

All functions are pure and work on numpy values and on jax arrays (also under jit / pmap); norms are accumulated
in float32 or wider.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np


def _xp(*xs: Any):
  """jax.numpy if any argument is a jax array (or tracer), else numpy."""
  return jnp if any(isinstance(x, jax.Array) for x in xs) else np


def _wide(x: Any):
  """Float32 at least (float64 numpy stays float64)."""
  xp = _xp(x)
  return x.astype(xp.promote_types(x.dtype, xp.float32)) if hasattr(x, "dtype") else xp.asarray(x, xp.float32)


def sq_norm(tree: Any) -> Any:
  """Σ over leaves of Σ x² — the squared global norm of a gradient pytree."""
  leaves = jax.tree_util.tree_leaves(tree)
  xp = _xp(*leaves)
  return sum(xp.sum(xp.square(_wide(x))) for x in leaves)


def vdot(a: Any, b: Any) -> Any:
  """Σ over leaves of ⟨a, b⟩ for two pytrees of the same structure."""
  la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
  xp = _xp(*la, *lb)
  return sum(xp.sum(_wide(x) * _wide(y)) for x, y in zip(la, lb))


def two_batch_estimates(small_sq: Any, big_sq: Any, b_small: float, b_big: float) -> tuple[Any, Any]:
  """Unbiased (|G|², tr Σ) from |G_small|², |G_big|² at batch sizes B_small < B_big (McCandlish et al. A.1)."""
  g2 = (b_big * big_sq - b_small * small_sq) / (b_big - b_small)
  trace = (small_sq - big_sq) / (1.0 / b_small - 1.0 / b_big)
  return g2, trace


class NoiseScaleState(NamedTuple):
  """EMAs of the |G|² and tr(Σ) estimates (both start at 0) and the number of updates."""

  g2: Any
  trace: Any
  count: Any


def init(dtype: Any = jnp.float32) -> NoiseScaleState:
  """Zero state as jax scalars (jit/pmap/checkpoint friendly); use NoiseScaleState(0., 0., 0) for numpy."""
  return NoiseScaleState(jnp.zeros((), dtype), jnp.zeros((), dtype), jnp.zeros((), jnp.int32))


def update(
  state: NoiseScaleState, small_sq: Any, big_sq: Any, b_small: float, b_big: float, decay: float = 0.99
) -> NoiseScaleState:
  """One step: EMA ← decay·EMA + (1 − decay)·estimate, for numerator and denominator separately."""
  g2, trace = two_batch_estimates(small_sq, big_sq, b_small, b_big)
  return NoiseScaleState(
    g2=decay * state.g2 + (1.0 - decay) * g2, trace=decay * state.trace + (1.0 - decay) * trace, count=state.count + 1
  )


def b_simple(state: NoiseScaleState) -> Any:
  """B_simple = EMA(tr Σ)/EMA(|G|²); NaN while EMA(|G|²) ≤ 0 (no signal measured yet)."""
  xp = _xp(state.g2, state.trace)
  g2 = xp.asarray(state.g2)
  safe = xp.where(g2 > 0, g2, 1.0)
  return xp.where(g2 > 0, state.trace / safe, xp.nan)


def debiased(state: NoiseScaleState, decay: float = 0.99) -> tuple[Any, Any]:
  """Bias-corrected EMAs (÷ (1 − decay^count)), for reporting |G|² and tr Σ themselves."""
  xp = _xp(state.g2, state.trace, state.count)
  corr = 1.0 - xp.power(decay, xp.maximum(xp.asarray(state.count), 1))
  return state.g2 / corr, state.trace / corr


def _stack(per_device: Any) -> Any:
  """A [D, P] matrix from an array [D, ...] or a pytree whose leaves all have the leading device axis D."""
  leaves = jax.tree_util.tree_leaves(per_device)
  xp = _xp(*leaves)
  return xp.concatenate([_wide(x).reshape(x.shape[0], -1) for x in leaves], axis=1)


def stacked_sq_norms(per_device: Any) -> tuple[Any, Any]:
  """(|G_small|², |G_big|²) from per-device mean gradients: mean_d ‖g_d‖² and ‖mean_d g_d‖²."""
  g = _stack(per_device)
  xp = _xp(g)
  return xp.mean(xp.sum(g * g, axis=1)), xp.sum(xp.square(xp.mean(g, axis=0)))


def snr_components(g: Any, g_mean: Any) -> tuple[Any, Any]:
  """(‖g∥‖, ‖g⊥‖) of one device's gradient pytree ``g`` relative to the mean gradient ``g_mean``.

  Under pmap: ``par, perp = snr_components(g, lax.pmean(g, ax))``; SNR = pmean(par) / pmean(perp).
  """
  xp = _xp(*jax.tree_util.tree_leaves(g), *jax.tree_util.tree_leaves(g_mean))
  mean_norm = xp.sqrt(sq_norm(g_mean))
  par = xp.abs(vdot(g, g_mean)) / xp.where(mean_norm > 0, mean_norm, 1.0)
  perp = xp.sqrt(xp.maximum(sq_norm(g) - par * par, 0.0))
  return par, perp


def signal_to_noise(per_device: Any) -> Any:
  """SNR = E_d‖g∥‖ / E_d‖g⊥‖ relative to ḡ = mean_d g_d (You et al. 2020 §6.1); input [D, ...] or a pytree."""
  g = _stack(per_device)
  xp = _xp(g)
  mean = xp.mean(g, axis=0)
  mean_norm = xp.sqrt(xp.sum(mean * mean))
  par = xp.abs(g @ mean) / xp.where(mean_norm > 0, mean_norm, 1.0)
  perp = xp.sqrt(xp.maximum(xp.sum(g * g, axis=1) - par * par, 0.0))
  return xp.mean(par) / xp.mean(perp)


def window_interval(g2_means: Any, trace_means: Any, level: float = 0.95) -> tuple[float, float, float]:
  """(R, lo, hi) over K window means Ḡ_k, T̄_k (module docstring): R = ΣT̄/ΣḠ ± t_{(1+level)/2, K−1}·se.

  NaN for all three with fewer than 2 windows or mean Ḡ ≤ 0 (no signal measured). Host-side (float64 numpy).
  """
  from scipy import stats  # host only; imported here so the step functions need no scipy

  g, t = np.asarray(g2_means, np.float64), np.asarray(trace_means, np.float64)
  k = g.size
  if k < 2 or not np.mean(g) > 0:
    return (float("nan"),) * 3
  r = float(np.sum(t) / np.sum(g))
  se = float(np.sqrt(np.sum(np.square(t - r * g)) / (k * (k - 1))) / np.mean(g))
  half = float(stats.t.ppf(0.5 + level / 2, k - 1)) * se
  return r, r - half, r + half


class Windows(NamedTuple):
  """The window accumulator: sums over the current, incomplete window and the last complete windows' means."""

  g2_sum: float
  trace_sum: float
  steps: int
  done: tuple  # ((Ḡ_k, T̄_k), ...), oldest first, at most ``keep``


def windows_init() -> Windows:
  return Windows(0.0, 0.0, 0, ())


def windows_update(w: Windows, g2: float, trace: float, length: int, keep: int) -> Windows:
  """Adds one step's (|G|², tr Σ) estimate; a window of ``length`` steps that fills up becomes a complete one."""
  g2_sum, trace_sum, steps = w.g2_sum + g2, w.trace_sum + trace, w.steps + 1
  if steps < length:
    return Windows(g2_sum, trace_sum, steps, w.done)
  done = (w.done + ((g2_sum / steps, trace_sum / steps),))[-keep:]
  return Windows(0.0, 0.0, 0, done)
