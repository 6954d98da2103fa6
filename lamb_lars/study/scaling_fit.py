"""S(B) = S_min·(1 + B_crit/B) fitted to steps-to-target per seed, with the misses as lower bounds, and how far
the fitted B_crit can be trusted: a bootstrap over seeds and a leave-one-batch-out sensitivity.

Model (McCandlish et al. 2018, "An Empirical Model of Large-Batch Training", eq. 2.11; Golmant et al. 2018): steps
to a target fall as 1/B up to about B_crit and level off at S_min beyond it. Each seed of each batch is one point
(B_i, S_i). A seed that missed the target within its budget (replicates.py) only says S_i > L_i (its budget): a
*censored* point. The fit minimises, in log steps (steps-to-target spans decades and its noise is multiplicative),

  Σ_reached (log S_i − log Ŝ(B_i))²  +  Σ_censored min(0, log Ŝ(B_i) − log L_i)²

so a censored point costs nothing while the model predicts at least its bound, and pulls the fit up only when
the model predicts fewer steps than the budget that was not enough. With log Ŝ = c + log(1 + β/B), c = log S_min
and β = B_crit, the loss is convex in c for fixed β: c is found by bisection on the derivative, and β by a profile
over a log grid (10⁻³·min B … 10³·max B) refined by golden section, with the limits β = 0 (no speed-up:
Ŝ = S_min) and β = ∞ (perfect scaling across the data: Ŝ = E_min/B, E_min = S_min·B_crit) compared explicitly.
The fit needs reached points at two or more batch sizes.

Uncertainty: ``bootstrap`` resamples the seeds of each batch with replacement and refits (percentile interval of
B_crit, with the share of resamples whose B_crit is ∞); ``leave_one_batch_out`` refits without each batch in turn.
A B_crit that moves by a factor of ten when one batch is dropped rests on that batch alone.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Mapping, Optional, Sequence

import numpy as np

_GRID = 400
_BISECT = 200


@dataclasses.dataclass(frozen=True)
class CensoredFit:
  """S(B) = s_min·(1 + b_crit/B); ``e_min`` = s_min·b_crit (finite when b_crit = ∞); ``loss``: the objective."""
  s_min: float
  b_crit: float
  e_min: float
  loss: float
  num_points: int
  num_censored: int


def _arrays(batches, steps, censored):
  b = np.asarray(batches, np.float64)
  y = np.asarray(steps, np.float64)
  c = np.asarray(censored, bool) if censored is not None else np.zeros(b.shape, bool)
  if not (b.shape == y.shape == c.shape) or b.ndim != 1:
    raise ValueError("batches, steps and censored must be 1-D and of equal length.")
  if np.any(b <= 0) or np.any(y <= 0) or not np.all(np.isfinite(y)):
    raise ValueError("batch sizes and steps (or budgets) must be positive and finite.")
  if len(np.unique(b[~c])) < 2:
    raise ValueError("the fit needs points that reached the target at two or more batch sizes.")
  return b, np.log(y), c


def _best_c(g: np.ndarray, ly: np.ndarray, cens: np.ndarray) -> tuple[float, float]:
  """argmin over c of the loss with log Ŝ_i = c + g_i, and its value (bisection on the nondecreasing derivative)."""
  r = ly - g
  def grad(c):
    return -np.sum((r - c)[~cens]) + np.sum(np.minimum(0.0, c - r[cens]))
  lo, hi = float(r.min()) - 1.0, float(r.max()) + 1.0
  for _ in range(_BISECT):
    mid = 0.5 * (lo + hi)
    if grad(mid) > 0:
      hi = mid
    else:
      lo = mid
    if hi - lo <= 1e-13 * max(1.0, abs(mid)):
      break
  c = 0.5 * (lo + hi)
  loss = float(np.sum((r - c)[~cens] ** 2) + np.sum(np.minimum(0.0, c - r[cens]) ** 2))
  return c, loss


def _profile(log_beta: float, b, ly, cens) -> tuple[float, float]:
  if log_beta == -math.inf:
    g = np.zeros_like(b)
  elif log_beta == math.inf:
    g = -np.log(b)   # Ŝ = E_min/B with c = log E_min
  else:
    g = np.log1p(math.exp(log_beta) / b)
  return _best_c(g, ly, cens)


def fit(batches: Sequence[float], steps: Sequence[float], censored: Optional[Sequence[bool]] = None) -> CensoredFit:
  """The censored least-squares fit in log steps (module docstring); ``steps`` of a censored point = its budget."""
  b, ly, cens = _arrays(batches, steps, censored)
  grid = np.linspace(math.log(b.min()) - math.log(1e3), math.log(b.max()) + math.log(1e3), _GRID)
  losses = np.array([_profile(float(x), b, ly, cens)[1] for x in grid])
  k = int(np.argmin(losses))
  lo, hi = float(grid[max(k - 1, 0)]), float(grid[min(k + 1, _GRID - 1)])
  phi = (math.sqrt(5.0) - 1.0) / 2.0
  x1, x2 = hi - phi * (hi - lo), lo + phi * (hi - lo)
  f1, f2 = _profile(x1, b, ly, cens)[1], _profile(x2, b, ly, cens)[1]
  for _ in range(100):
    if f1 <= f2:
      hi, x2, f2 = x2, x1, f1
      x1 = hi - phi * (hi - lo)
      f1 = _profile(x1, b, ly, cens)[1]
    else:
      lo, x1, f1 = x1, x2, f2
      x2 = lo + phi * (hi - lo)
      f2 = _profile(x2, b, ly, cens)[1]
    if hi - lo < 1e-10:
      break
  log_beta, loss = min(((float(grid[k]), float(losses[k])), (x1, f1), (x2, f2)), key=lambda xf: xf[1])
  for limit in (-math.inf, math.inf):  # a limit wins a tie: the data do not bound B_crit away from it
    f_limit = _profile(limit, b, ly, cens)[1]
    if f_limit <= loss + 1e-12:
      log_beta, loss = limit, f_limit
  c, loss = _profile(log_beta, b, ly, cens)
  n, nc = int(b.size), int(cens.sum())
  if log_beta == math.inf:
    return CensoredFit(0.0, math.inf, math.exp(c), loss, n, nc)
  b_crit = 0.0 if log_beta == -math.inf else math.exp(log_beta)
  return CensoredFit(math.exp(c), b_crit, math.exp(c) * b_crit, loss, n, nc)


def predict(f: CensoredFit, batch) -> np.ndarray:
  """Ŝ(B) = S_min + E_min/B."""
  return f.s_min + f.e_min / np.asarray(batch, np.float64)


@dataclasses.dataclass(frozen=True)
class Interval:
  """A percentile interval of B_crit over resamples; ``infinite``: share of resamples with B_crit = ∞;
  ``failed``: resamples without reached points at two batch sizes (no fit)."""
  lo: float
  hi: float
  num: int
  infinite: float
  failed: int


def _order_stat(sorted_vals: np.ndarray, q: float) -> float:
  """The q-quantile by the nearest-rank rule (works with ∞ among the values)."""
  idx = min(len(sorted_vals) - 1, max(0, int(math.ceil(q * len(sorted_vals))) - 1))
  return float(sorted_vals[idx])


def bootstrap(points: Mapping[int, Sequence[tuple[float, bool]]], num: int = 200, seed: int = 0,
              level: float = 0.95) -> Optional[Interval]:
  """Percentile interval of B_crit: each batch's (steps, censored) seeds resampled with replacement, ``num``
  times (a fixed numpy generator: the interval is reproducible). None when no resample could be fitted."""
  rng = np.random.default_rng(seed)
  keys = sorted(points)
  vals, failed = [], 0
  for _ in range(num):
    bs, ys, cs = [], [], []
    for b in keys:
      pts = list(points[b])
      for i in rng.integers(0, len(pts), len(pts)):
        bs.append(b)
        ys.append(pts[i][0])
        cs.append(pts[i][1])
    try:
      vals.append(fit(bs, ys, cs).b_crit)
    except ValueError:
      failed += 1
  if not vals:
    return None
  v = np.sort(np.asarray(vals, np.float64))
  a = (1.0 - level) / 2.0
  return Interval(_order_stat(v, a), _order_stat(v, 1.0 - a), len(vals), float(np.mean(np.isinf(v))), failed)


def leave_one_batch_out(points: Mapping[int, Sequence[tuple[float, bool]]]) -> dict[int, Optional[float]]:
  """{dropped batch: B_crit fitted without it} (None where the rest cannot be fitted)."""
  out = {}
  for drop in sorted(points):
    bs, ys, cs = [], [], []
    for b in sorted(points):
      if b != drop:
        for y, c in points[b]:
          bs.append(b)
          ys.append(y)
          cs.append(c)
    try:
      out[drop] = fit(bs, ys, cs).b_crit
    except ValueError:
      out[drop] = None
  return out


def fit_points(points: Mapping[int, Sequence[tuple[float, bool]]]) -> CensoredFit:
  """``fit`` over ``{batch: [(steps, censored), ...]}``."""
  bs = [b for b in sorted(points) for _ in points[b]]
  ys = [y for b in sorted(points) for y, _ in points[b]]
  cs = [c for b in sorted(points) for _, c in points[b]]
  return fit(bs, ys, cs)
