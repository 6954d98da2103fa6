"""S(B) = S_min·(1 + B_crit/B) fitted to steps-to-target per seed, with the misses as lower bounds, and how far
the fitted B_crit can be trusted: a bootstrap over seeds and a leave-one-batch-out sensitivity.

Model (McCandlish et al. 2018, "An Empirical Model of Large-Batch Training", eq. 2.11; Golmant et al. 2018): steps
to a target fall as 1/B up to about B_crit and level off at S_min beyond it. Each seed of each batch is one point
(B_i, S_i). A seed that missed the target within its budget (replicates.py) only says S_i > L_i (its budget): a
*censored* point. The fit minimises, in log steps (steps-to-target spans decades and its noise is multiplicative),

  Σ_reached (log S_i − log Ŝ(B_i))²  +  Σ_censored min(0, log Ŝ(B_i) − log L_i)²

so a censored point costs nothing while the model predicts at least its bound, and pulls the fit up only when
the model predicts fewer steps than the budget that was not enough. With log Ŝ = c + log(1 + β/B), c = log S_min
and β = B_crit, the loss is convex in c for fixed β: c is found in closed form (``_best_c``), and β by a profile
over a log grid (10⁻³·min B … 10³·max B) refined by successively finer grids around its best point, with the
limits β = 0 (no speed-up: Ŝ = S_min) and β = ∞ (perfect scaling across the data: Ŝ = E_min/B, E_min =
S_min·B_crit) compared explicitly.
The fit needs reached points at two or more batch sizes.

Uncertainty: ``bootstrap`` resamples the seeds of each batch with replacement and refits (percentile interval of
B_crit, with the share of resamples whose B_crit is ∞); ``leave_one_batch_out`` refits without each batch in turn.
A B_crit that moves by a factor of ten when one batch is dropped rests on that batch alone.
``bootstrap_trials_and_seeds`` adds the tuning noise: which configuration each batch's search chose (issue 41).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from lamb_lars.study.analysis import precision

_GRID = 200  # points per stage of the profile over log β
_STAGES = 5  # grid stages: the last spacing is ~1e-9 in log β


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


def _best_c(g: np.ndarray, ly: np.ndarray, cens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """For each row of ``g`` ([K, n]: log Ŝ_i = c + g_i): argmin over c of the loss and its value, in closed form.

  With r_i = log y_i − g_i the derivative in c is Σ_reached (c − r_i) + Σ_censored, r_i > c (c − r_i): continuous,
  piecewise linear and increasing (``fit`` requires reached points, so n_u ≥ 2). With the censored r sorted in
  decreasing order
  (r_(0) ≥ r_(1) ≥ …) and P_j = Σ_{i<j} r_(i), it is n_u·r_(j) − S_u + j·r_(j) − P_j at the breakpoint r_(j); the
  censored points active at the minimum are the k breakpoints where it is positive (the minimiser lies below
  them), and c = (S_u + P_k)/(n_u + k), S_u = Σ_reached r_i, n_u their count."""
  r = ly[None, :] - g
  unc = ~cens
  n_u, s_u = float(unc.sum()), r[:, unc].sum(axis=1)
  rc = -np.sort(-r[:, cens], axis=1)  # censored r, decreasing
  prefix = np.concatenate([np.zeros((r.shape[0], 1)), np.cumsum(rc, axis=1)], axis=1)  # P_0 … P_m
  j = np.arange(rc.shape[1], dtype=np.float64)[None, :]
  k = ((n_u + j) * rc - s_u[:, None] - prefix[:, :-1] > 0).sum(axis=1)
  c = (s_u + np.take_along_axis(prefix, k[:, None], axis=1)[:, 0]) / (n_u + k)
  d = c[:, None] - r
  return c, np.where(unc[None, :], d * d, np.minimum(0.0, d) ** 2).sum(axis=1)


def _profile(log_betas: np.ndarray, b, ly, cens) -> tuple[np.ndarray, np.ndarray]:
  """(c, loss) at each log β; β = 0 and β = ∞ as the limits −∞ and +∞ (for β = ∞, c = log E_min)."""
  lb = np.asarray(log_betas, np.float64)[:, None]
  if np.isfinite(lb).all():  # the grids: the same expression as below, without its masks
    return _best_c(np.log1p(np.exp(lb) / b[None, :]), ly, cens)
  with np.errstate(over="ignore"):
    g = np.where(
      np.isposinf(lb),
      -np.log(b)[None, :],
      np.where(np.isneginf(lb), 0.0, np.log1p(np.exp(np.where(np.isfinite(lb), lb, 0.0)) / b[None, :])),
    )
  return _best_c(g, ly, cens)


def fit(batches: Sequence[float], steps: Sequence[float], censored: Optional[Sequence[bool]] = None) -> CensoredFit:
  """The censored least-squares fit in log steps (module docstring); ``steps`` of a censored point = its budget."""
  b, ly, cens = _arrays(batches, steps, censored)
  lo, hi = math.log(b.min()) - math.log(1e3), math.log(b.max()) + math.log(1e3)
  for _ in range(_STAGES):  # a grid, then finer grids around its best point
    grid = np.linspace(lo, hi, _GRID)
    cs, losses = _profile(grid, b, ly, cens)
    k = int(np.argmin(losses))
    step = grid[1] - grid[0]
    lo, hi = grid[k] - step, grid[k] + step
  log_beta, c, loss = float(grid[k]), float(cs[k]), float(losses[k])
  c_limits, limits = _profile(np.array([-math.inf, math.inf]), b, ly, cens)
  for limit, c_limit, f_limit in zip((-math.inf, math.inf), c_limits, limits):
    if f_limit <= loss + 1e-12:  # a limit wins a tie: the data do not bound B_crit away from it
      log_beta, c, loss = limit, float(c_limit), float(f_limit)
  n, nc = int(b.size), int(cens.sum())
  if log_beta == math.inf:
    return CensoredFit(0.0, math.inf, math.exp(c), loss, n, nc)
  b_crit = 0.0 if log_beta == -math.inf else math.exp(log_beta)
  return CensoredFit(math.exp(c), b_crit, math.exp(c) * b_crit, loss, n, nc)


@dataclasses.dataclass(frozen=True)
class Interval:
  """A percentile interval of B_crit over resamples; ``infinite``: share of resamples with B_crit = ∞;
  ``failed``: resamples without reached points at two batch sizes (no fit)."""

  lo: float
  hi: float
  num: int
  infinite: float
  failed: int
  exact: bool = False  # every distinct resample enumerated with its probability (precision.resamples)

  def text(self) -> str:
    """The interval as every report quotes it (precision.interval_cell): 2 significant figures, marked when
    enumerated."""
    return precision.interval_cell(self.lo, self.hi, self.exact)


def bootstrap(
  points: Mapping[int, Sequence[tuple[float, bool]]],
  num: int = precision.NUM_RESAMPLES,
  seed: int = 0,
  level: float = 0.95,
) -> Optional[Interval]:
  """Percentile interval of B_crit: each batch's (steps, censored) seeds resampled with replacement and refitted,
  under the precision rule (precision.resamples: every distinct joint resample, weighted, when there are at most
  ``num``; else ``num`` draws from a numpy generator seeded by ``seed``, so the interval is reproducible). None when
  no resample could be fitted."""
  keys = sorted(points)
  sizes = [len(points[b]) for b in keys]
  vals, weights, failed = [], [], 0
  for r in precision.resamples(sizes, num, seed=seed):
    bs, ys, cs = [], [], []
    for b, idx in zip(keys, r.indices):
      pts = list(points[b])
      for i in idx:
        bs.append(b)
        ys.append(pts[i][0])
        cs.append(pts[i][1])
    try:
      vals.append(fit(bs, ys, cs).b_crit)
      weights.append(r.weight)
    except ValueError:
      failed += 1
  return _interval(vals, failed, level, weights, precision.exact(sizes, num))


def _interval(
  vals: Sequence[float],
  failed: int,
  level: float,
  weights: Optional[Sequence[float]] = None,
  exact: bool = False,
) -> Optional[Interval]:
  """The percentile interval of the resampled B_crit values (None when every resample failed to fit); ``weights``
  (default equal) are the resamples' probabilities, renormalised over the fitted ones."""
  if not vals:
    return None
  v = np.asarray(vals, np.float64)
  w = np.ones_like(v) if weights is None else np.asarray(weights, np.float64)
  a = (1.0 - level) / 2.0
  inf_share = float(w[np.isinf(v)].sum() / w.sum())
  return Interval(precision.quantile(v, w, a), precision.quantile(v, w, 1.0 - a), len(vals), inf_share, failed, exact)


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


def predicted_steps(f: CensoredFit, batch: float) -> float:
  """S(B) of the fit at ``batch``: s_min·(1 + b_crit/B), or e_min/B when b_crit = ∞."""
  return f.e_min / batch if math.isinf(f.b_crit) else f.s_min * (1.0 + f.b_crit / batch)


def censored_above(f: CensoredFit, points: Mapping[int, Sequence[tuple[float, bool]]]) -> list[int]:
  """The batches the fit does not describe: every seed missed the target (censored), at budgets all larger than
  the steps the fit predicts there. The model says each seed should have reached the target; none did."""
  return [
    b
    for b in sorted(points)
    if points[b] and all(c for _, c in points[b]) and predicted_steps(f, b) < min(y for y, _ in points[b])
  ]


def fit_points(points: Mapping[int, Sequence[tuple[float, bool]]]) -> CensoredFit:
  """``fit`` over ``{batch: [(steps, censored), ...]}``."""
  bs = [b for b in sorted(points) for _ in points[b]]
  ys = [y for b in sorted(points) for y, _ in points[b]]
  cs = [c for b in sorted(points) for _, c in points[b]]
  return fit(bs, ys, cs)


@dataclasses.dataclass(frozen=True)
class Candidate:
  """One configuration a batch's search could have chosen: ``rank`` (lower is chosen first, the search's own
  order) and the (steps, censored) points of its seeds (the chosen one's replicates; another's single run)."""

  rank: float
  points: tuple[tuple[float, bool], ...]


def bootstrap_trials_and_seeds(
  cells: Mapping[Any, Sequence[Candidate]], num: int = precision.NUM_RESAMPLES, seed: int = 0, level: float = 0.95
) -> Optional[Interval]:
  """Percentile interval of B_crit over tuning noise and seed noise (issue 41). ``cells``: per searched cell, keyed
  by its batch or by (batch, cell name) when a batch has several cells (their points are pooled, as in ``fit``),
  the configurations its search could have chosen. Per resample and cell: its candidates are drawn with
  replacement (as many as it has) and the search's choice among those drawn is re-applied (the lowest ``rank``);
  then k points are drawn with replacement from that candidate's seeds, k = the largest seed count in the cell (so
  each cell keeps its weight in the fit). With one candidate per cell this is ``bootstrap``. None when no resample
  could be fitted."""
  rng = np.random.default_rng(seed)
  keys = sorted(cells)
  vals, failed = [], 0
  for _ in range(num):
    bs, ys, cs = [], [], []
    for key in keys:
      b = key[0] if isinstance(key, tuple) else key
      cands = list(cells[key])
      drawn = [cands[i] for i in rng.integers(0, len(cands), len(cands))]
      pick = min(drawn, key=lambda c: c.rank)
      k = max(len(c.points) for c in cands)
      for i in rng.integers(0, len(pick.points), k):
        bs.append(b)
        ys.append(pick.points[i][0])
        cs.append(pick.points[i][1])
    try:
      vals.append(fit(bs, ys, cs).b_crit)
    except ValueError:
      failed += 1
  return _interval(vals, failed, level)


def reached_only(points: Mapping[int, Sequence[tuple[float, bool]]]) -> dict[int, list[tuple[float, bool]]]:
  """The points without the censored ones (the seeds that missed the target), batches left empty dropped."""
  out = {b: [p for p in v if not p[1]] for b, v in points.items()}
  return {b: v for b, v in out.items() if v}
