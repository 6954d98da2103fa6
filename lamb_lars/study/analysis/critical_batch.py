"""The critical batch size and the time-optimal batch size.

Inverse law (optimal mini-batch paper; McCandlish et al. 2018, "An Empirical Model of Large-Batch Training", eq. 2.11):

  S(B) = S_min·(1 + B_crit/B),   E(B) = B·S(B) = E_min·(1 + B/B_crit),   E_min = S_min·B_crit.

S(B) is linear in x = 1/B: S = a + b·x with a = S_min, b = S_min·B_crit = E_min. The fit is least squares in
that linear form. ``weighting`` chooses the residual:

  'log'      (default) minimise Σ (log S_i − log Ŝ(B_i))² — steps-to-target spans decades, and a search's error
             is multiplicative. Its global minimum, the limits B_crit = 0 and ∞ included, is scaling_fit.fit's
             profile over log B_crit (uncensored). Gauss–Newton started from the 'relative' solution was used
             before; it was skipped whenever that start had a ≤ 0 and then returned B_crit = ∞ for data whose
             log-loss minimum is finite (tests/test_critical_batch.py).
  'relative' weighted linear least squares with weights 1/S_i², i.e. minimise Σ ((S_i − Ŝ_i)/S_i)², the
             first-order approximation of the log residual (closed form).
  'none'     ordinary linear least squares on S (dominated by the small-batch points).

Boundaries: b < 0 (steps *grow* with B, only from noise) → refit with b = 0: B_crit = 0, no parallel speed-up.
a ≤ 0 (perfect scaling across the whole measured range) → refit with a = 0: S_min = 0, B_crit = ∞, E_min = b.

Wall-clock: per-step time t(B) = γ + δ·B (ordinary least squares), T(B) = S(B)·t(B), minimised at

  B* = √(B_crit·γ/δ)   (dT/dB = S_min·(δ − B_crit·γ/B²) = 0).

Breakdown point (Golmant et al. 2018, "On the Computational Inefficiency of Large Batch Sizes for SGD"): the batch
beyond which wall-clock time to the target stops falling. Defined here on measured points (sorted by B) as the
smallest B_k with finite T_k such that no larger measured batch is faster by more than ``rel_tol``:
min_{j>k} T_j ≥ (1 − rel_tol)·T_k. If only the largest measured batch qualifies, time was still falling at the
edge of the data and the breakdown point is not observed (None).

When a fit measures B_crit (``why_not_measured``, issue 62): S(B) has two parameters, so a fit through two batch
sizes passes through both points whatever the law, and tests nothing; it needs at least ``MIN_FIT_BATCHES`` = 3.
A B_crit at or beyond the largest batch of the fit (or at or below the smallest) sits where the data show no bend:
they bound it from one side only (Shallue et al. 2018 §4). Neither is a measurement, and nothing is derived from it.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from lamb_lars.study.analysis import scaling_fit


@dataclasses.dataclass(frozen=True)
class InverseLawFit:
  """S(B) = s_min·(1 + b_crit/B); ``rms_log_residual`` = √mean (log S_i − log Ŝ_i)²."""

  s_min: float
  b_crit: float
  e_min: float
  rms_log_residual: float
  num_points: int
  weighting: str


MIN_FIT_BATCHES = 3  # distinct batch sizes a 2-parameter S(B) fit needs before B_crit is a measurement


def why_not_measured(b_crit: float, batches: Sequence[float]) -> Optional[str]:
  """Why a fitted B_crit is not a measurement, in a few words (None: it is one); ``batches``: the batch sizes of
  the fit's points that reached the target. See the module docstring."""
  bs = sorted({float(b) for b in batches})
  if len(bs) < MIN_FIT_BATCHES:
    return (
      f"only {len(bs)} batch size{'s' if len(bs) != 1 else ''} reached the target; the 2-parameter fit passes "
      f"through {'both' if len(bs) == 2 else 'its'} points and needs at least {MIN_FIT_BATCHES}"
    )
  if not b_crit < bs[-1]:
    return (
      f"the fit puts it at or beyond the largest batch that reached the target ({bs[-1]:g}), where the data show "
      f"no bend: they say only B_crit ≳ {bs[-1]:g}"
    )
  if not b_crit > bs[0]:
    return (
      f"the fit puts it at or below the smallest batch that reached the target ({bs[0]:g}): the data say only "
      f"B_crit ≲ {bs[0]:g}"
    )
  return None


@dataclasses.dataclass(frozen=True)
class StepTimeFit:
  """t(B) = gamma + delta·B seconds per step."""

  gamma: float
  delta: float


def _wls(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> tuple[float, float]:
  """Weighted least squares y ≈ a + b·x."""
  sw = np.sqrt(w)
  design = np.stack([np.ones_like(x), x], axis=1) * sw[:, None]
  (a, b), *_ = np.linalg.lstsq(design, y * sw, rcond=None)
  return float(a), float(b)


def _fit_ab(x: np.ndarray, y: np.ndarray, weighting: str) -> tuple[float, float]:
  """'none' or 'relative': the closed-form weighted linear least squares."""
  return _wls(x, y, np.ones_like(y) if weighting == "none" else 1.0 / y**2)


def _one_param(x: np.ndarray, y: np.ndarray, weighting: str, which: str) -> float:
  """Best a (model y = a) or b (model y = b·x) under the 'none' or 'relative' residual."""
  z = np.ones_like(x) if which == "a" else x
  w = np.ones_like(y) if weighting == "none" else 1.0 / y**2
  return float(np.sum(w * z * y) / np.sum(w * z * z))


def fit_inverse_law(batches: Sequence[float], steps: Sequence[float], *, weighting: str = "log") -> InverseLawFit:
  """Fits S(B) = S_min·(1 + B_crit/B) to measured steps-to-target (needs ≥ 2 distinct batch sizes)."""
  if weighting not in ("log", "relative", "none"):
    raise ValueError(f"weighting must be 'log', 'relative' or 'none', got {weighting!r}")
  bs, y = np.asarray(batches, np.float64), np.asarray(steps, np.float64)
  if bs.shape != y.shape or bs.ndim != 1:
    raise ValueError("batches and steps must be 1-D and of equal length")
  if len(np.unique(bs)) < 2:
    raise ValueError("the fit needs at least two distinct batch sizes")
  if np.any(bs <= 0) or np.any(y <= 0) or not np.all(np.isfinite(y)):
    raise ValueError("batch sizes and steps must be positive and finite")
  x = 1.0 / bs
  rms = lambda a, b: float(np.sqrt(np.mean((np.log(y) - np.log(a + b * x)) ** 2)))
  if weighting == "log":  # the global minimum of the log loss (scaling_fit's profile), boundaries included
    f = scaling_fit.fit(bs, y)
    return InverseLawFit(
      s_min=f.s_min,
      b_crit=f.b_crit,
      e_min=f.e_min,
      rms_log_residual=rms(f.s_min, f.e_min),
      num_points=len(y),
      weighting=weighting,
    )
  a, b = _fit_ab(x, y, weighting)
  if b < 0:
    a, b = _one_param(x, y, weighting, "a"), 0.0
  elif a <= 0:
    a, b = 0.0, _one_param(x, y, weighting, "b")
  b_crit = math.inf if a == 0 else b / a
  return InverseLawFit(
    s_min=a,
    b_crit=b_crit,
    e_min=b if a == 0 else a * b_crit,
    rms_log_residual=rms(a, b),
    num_points=len(y),
    weighting=weighting,
  )


def steps_model(fit: InverseLawFit, batch: Any) -> Any:
  """S(B) = S_min + E_min/B (equal to S_min·(1 + B_crit/B), and finite when B_crit = ∞)."""
  return fit.s_min + fit.e_min / np.asarray(batch, np.float64)


def fit_step_time(batches: Sequence[float], seconds_per_step: Sequence[float]) -> StepTimeFit:
  """t(B) = γ + δ·B with γ, δ ≥ 0 (needs ≥ 2 distinct batch sizes), least squares in *relative* error.

  Step times span orders of magnitude over a ladder (13 ms at 256 to 10 s at 55K on the 2-core CPU), so ordinary
  least squares lets the largest batch decide γ alone, and one slow outlier there drove γ negative (the MNIST
  ladder: γ = −0.52 s), which makes B* meaningless. Weights 1/t² fit every batch to the same relative accuracy. A
  per-step overhead is never negative: when the unconstrained γ is, the fit is δ·B through the origin (γ = 0).
  """
  bs, t = np.asarray(batches, np.float64), np.asarray(seconds_per_step, np.float64)
  if len(np.unique(bs)) < 2:
    raise ValueError("the step-time fit needs at least two distinct batch sizes")
  if np.any(bs <= 0) or np.any(t <= 0) or not np.all(np.isfinite(t)):
    raise ValueError("batch sizes and step times must be positive and finite")
  w = 1.0 / t**2
  gamma, delta = _wls(bs, t, w)
  if gamma < 0:
    gamma, delta = 0.0, float(np.sum(w * bs * t) / np.sum(w * bs * bs))
  elif delta < 0:
    gamma, delta = float(np.sum(w * t) / np.sum(w)), 0.0
  return StepTimeFit(gamma=gamma, delta=delta)


def optimal_batch(fit: InverseLawFit, step_time: StepTimeFit) -> float:
  """B* = √(B_crit·γ/δ), the minimiser of T(B); an interior optimum needs γ > 0, δ > 0, 0 < B_crit < ∞.

  Otherwise: δ ≤ 0 → ∞ (a step never gets slower, bigger is always faster); γ ≤ 0 or B_crit = 0 → 0 (the
  smallest batch is fastest); B_crit = ∞ → ∞.
  """
  gamma, delta, b_crit = step_time.gamma, step_time.delta, fit.b_crit
  if delta <= 0:
    return math.inf
  if gamma <= 0 or b_crit <= 0:
    return 0.0
  if math.isinf(b_crit):
    return math.inf
  return math.sqrt(b_crit * gamma / delta)


def seconds_per_step(curve: Sequence[Mapping[str, Any]]) -> Optional[float]:
  """Median of Δwall_time/Δstep between consecutive evals, skipping the first interval (it holds compilation).

  Uses the first interval only when it is the only one. None without two evals with wall times.
  """
  rows = sorted((r for r in curve if r.get("wall_time") is not None), key=lambda r: r["step"])
  rates = [
    (b["wall_time"] - a["wall_time"]) / (b["step"] - a["step"]) for a, b in zip(rows, rows[1:]) if b["step"] > a["step"]
  ]
  if not rates:
    return None
  return float(np.median(rates[1:] if len(rates) > 1 else rates))


def breakdown_point(
  batches: Sequence[float], times: Sequence[Optional[float]], *, rel_tol: float = 0.05
) -> Optional[float]:
  """Golmant et al. 2018 breakdown point on measured (B, T) pairs; see the module docstring.

  ``times`` may hold None or ∞ for batches that never reached the target (they are never "faster").
  """
  pts = sorted((float(b), math.inf if t is None else float(t)) for b, t in zip(batches, times))
  for k, (b, t) in enumerate(pts):
    if not math.isfinite(t):
      continue
    later = [tj for _, tj in pts[k + 1 :]]
    if not later:
      return None  # only the largest batch qualifies: still falling at the edge of the data
    if min(later) >= (1.0 - rel_tol) * t:
      return b
  return None
