"""Independent float64 numpy reference for the optimizers, written from the formulas (docs/science.md §3), not the code.

Params and gradients are flat ``{path: np.ndarray}`` dicts. One ``Reference`` object runs one optimizer:

  kind='lars'       r = η‖w‖/(‖g‖+β‖w‖+ε) ('paper') or η‖w‖/(‖g+βw‖+ε) ('optax'); u = lr·r·(g+βw);
                    v = m·v + u; w -= v  (Nesterov: w -= u + m·v)
  kind='layerwise'  d = base(g); u = d + βw; r = clip(η·φ(‖w‖)/(D+ε), r_min, r_max); w -= lr·r·u
                    (LAMB is base 'adam'); D = ‖u‖ ('optax') or ‖d‖+β‖w‖ ('paper')
  kind='original'   d = base(g + βw); w -= lr·d
  kind='adamw'      d = adam(g); w -= lr·(d + βw)
A ratio is ρ₀ (1) where ‖w‖ = 0 or the direction norm is 0. Leaves excluded by the adaptation mask get r = 1;
leaves excluded by the weight-decay mask get β = 0. Stacked leaves get one ratio per slice of axis 0.
"""

from __future__ import annotations

import math
import re
from typing import Callable, Optional, Union

import numpy as np

EXCLUDE = r"(^|/)(bias|scale|offset)$"


def _norm(x: np.ndarray, stacked: bool) -> np.ndarray:
  x = np.asarray(x, np.float64)
  if stacked:
    return np.sqrt((x.reshape(x.shape[0], -1) ** 2).sum(axis=1))
  return np.asarray(math.sqrt(float((x**2).sum())))


def _per_layer(r: np.ndarray, x: np.ndarray) -> np.ndarray:
  return r.reshape(r.shape + (1,) * (x.ndim - r.ndim))


class Reference:
  """One optimizer; ``step(params, grads)`` returns the new params (and keeps the optimizer state)."""

  def __init__(
    self,
    kind: str,
    lr: Union[float, Callable[[int], float]],
    *,
    base: str = "sgd",
    momentum: float = 0.0,
    nesterov: bool = False,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    eps_root: float = 0.0,
    bias_correction: bool = True,
    rho: float = 0.9,
    acc0: float = 0.1,
    weight_decay: float = 0.0,
    trust_coefficient: float = 1.0,
    trust_eps: float = 0.0,
    denominator: str = "optax",
    ratio_bounds=None,
    phi_bounds=None,
    zero_norm_ratio: float = 1.0,
    wd_exclude: Optional[str] = EXCLUDE,
    adapt_exclude: Optional[str] = EXCLUDE,
    stacked: Optional[str] = None,
  ):
    self.kind, self.lr, self.base = kind, lr, base
    self.h = dict(
      momentum=momentum,
      nesterov=nesterov,
      b1=b1,
      b2=b2,
      eps=eps,
      eps_root=eps_root,
      bias_correction=bias_correction,
      rho=rho,
      acc0=acc0,
    )
    self.beta, self.tc, self.teps, self.den = weight_decay, trust_coefficient, trust_eps, denominator
    self.bounds, self.phi, self.rho0 = ratio_bounds, phi_bounds, zero_norm_ratio
    self.wd_exclude, self.adapt_exclude, self.stacked = wd_exclude, adapt_exclude, stacked
    self.state: dict[str, dict] = {}
    self.t = 0
    self.ratios: dict[str, np.ndarray] = {}

  def _match(self, pattern: Optional[str], path: str) -> bool:
    return bool(pattern) and re.search(pattern, path) is not None

  def _direction(self, path: str, g: np.ndarray) -> np.ndarray:
    """The base optimizer's direction (before the learning rate)."""
    h, st, t = self.h, self.state.setdefault(path, {}), self.t
    name = self.base
    if name == "sgd":
      return g
    if name in ("momentum", "nesterov"):
      st["v"] = h["momentum"] * st.get("v", np.zeros_like(g)) + g
      return st["v"] if name == "momentum" else g + h["momentum"] * st["v"]
    if name == "adagrad":
      st["G"] = st.get("G", np.full_like(g, h["acc0"])) + g * g
      return g / np.sqrt(st["G"] + h["eps"])
    if name == "rmsprop":
      st["nu"] = h["rho"] * st.get("nu", np.zeros_like(g)) + (1 - h["rho"]) * g * g
      return g / np.sqrt(st["nu"] + h["eps"])
    if name == "adam":
      st["m"] = h["b1"] * st.get("m", np.zeros_like(g)) + (1 - h["b1"]) * g
      st["v"] = h["b2"] * st.get("v", np.zeros_like(g)) + (1 - h["b2"]) * g * g
      m, v = st["m"], st["v"]
      if h["bias_correction"]:
        m, v = m / (1 - h["b1"] ** t), v / (1 - h["b2"] ** t)
      return m / (np.sqrt(v + h["eps_root"]) + h["eps"])
    raise ValueError(name)

  def _ratio(self, path: str, w: np.ndarray, d: np.ndarray, beta: float) -> np.ndarray:
    stacked = self._match(self.stacked, path)
    pn = _norm(w, stacked)
    if self.den == "paper":
      dn = _norm(d, stacked)
      denom = dn + beta * pn
    else:
      dn = _norm(d + beta * w, stacked)
      denom = dn
    phi = pn
    if self.phi:
      phi = np.clip(
        pn, self.phi[0] if self.phi[0] is not None else -np.inf, self.phi[1] if self.phi[1] is not None else np.inf
      )
    with np.errstate(divide="ignore", invalid="ignore"):
      raw = self.tc * phi / (denom + self.teps)
    raw = np.where((pn == 0) | (dn == 0), self.rho0, raw)
    if self.bounds:
      lo, hi = self.bounds
      raw = np.clip(raw, -np.inf if lo is None else lo, np.inf if hi is None else hi)
    return _per_layer(np.asarray(raw, np.float64), w)

  def step(self, params: dict[str, np.ndarray], grads: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    self.t += 1
    lr = self.lr(self.t - 1) if callable(self.lr) else self.lr
    out = {}
    for path, w in params.items():
      w = np.asarray(w, np.float64)
      g = np.asarray(grads[path], np.float64)
      beta = 0.0 if self._match(self.wd_exclude, path) else self.beta
      adapt = not self._match(self.adapt_exclude, path)
      if self.kind == "lars":
        r = self._ratio(path, w, g, beta) if adapt else np.ones(())
        self.ratios[path] = r
        u = lr * r * (g + beta * w)
        st = self.state.setdefault(path, {})
        st["v"] = self.h["momentum"] * st.get("v", np.zeros_like(w)) + u
        out[path] = w - (u + self.h["momentum"] * st["v"] if self.h["nesterov"] else st["v"])
      elif self.kind == "layerwise":
        d = self._direction(path, g)
        r = self._ratio(path, w, d, beta) if adapt else np.ones(())
        self.ratios[path] = r
        out[path] = w - lr * r * (d + beta * w)
      elif self.kind == "original":
        out[path] = w - lr * self._direction(path, g + beta * w)
      elif self.kind == "adamw":
        out[path] = w - lr * (self._direction(path, g) + beta * w)
      else:
        raise ValueError(self.kind)
    return out


# ------------------------------------------------------------------------------------------------ test problem

SHAPES = {
  "conv1/kernel": (3, 3, 2, 4),
  "conv1/bias": (4,),
  "bn1/scale": (4,),
  "bn1/bias": (4,),
  "fc1/kernel": (8, 5),
  "fc1/bias": (5,),
  "zero/kernel": (4, 3),
  "stack/kernel": (3, 4, 2),
}
# Weight scales spread the trust ratios over orders of magnitude, so bounds clip some leaves and not others.
W_SCALE = {"conv1/kernel": 0.5, "fc1/kernel": 20.0, "zero/kernel": 0.0, "bn1/scale": 0.2}


def make_problem(seed: int = 0, steps: int = 3) -> tuple[dict, list[dict]]:
  """Flat float64 params and ``steps`` gradients: a zero-initialised leaf ('zero/kernel'), a leaf whose gradient
  is zero at step 0 ('fc1/kernel'), a stacked leaf whose layers differ in scale by 10⁴ ('stack/kernel')."""
  rng = np.random.default_rng(seed)
  params = {}
  for path, shape in SHAPES.items():
    w = rng.standard_normal(shape) * W_SCALE.get(path, 0.1)
    if path == "bn1/scale":
      w += 1.0
    if path == "stack/kernel":
      w *= np.array([0.01, 1.0, 100.0])[:, None, None]
    params[path] = w
  grads = []
  for t in range(steps):
    g = {p: rng.standard_normal(s) * 0.1 for p, s in SHAPES.items()}
    if t == 0:
      g["fc1/kernel"] = np.zeros(SHAPES["fc1/kernel"])
    grads.append(g)
  return params, grads


def nest(flat: dict) -> dict:
  """{'a/b': x} -> {'a': {'b': x}}."""
  out: dict = {}
  for path, v in flat.items():
    node = out
    *heads, last = path.split("/")
    for h in heads:
      node = node.setdefault(h, {})
    node[last] = v
  return out


def flatten(tree: dict, prefix: str = "") -> dict:
  """{'a': {'b': x}} -> {'a/b': np.asarray(x, float64)}."""
  out = {}
  for k, v in tree.items():
    path = f"{prefix}{k}"
    if isinstance(v, dict):
      out.update(flatten(v, path + "/"))
    else:
      out[path] = np.asarray(v, np.float64)
  return out
