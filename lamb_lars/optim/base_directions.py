"""Base update directions (SGD, momentum, Nesterov, AdaGrad, RMSprop, Adam) and ``layerwise``, a trust ratio on any.

"The Limit of the Batch Size" (You et al. 2020, Table 3) runs every solver three ways at batch 8K: *original*,
*+ layer-wise* (the base direction d of each layer scaled by ‖w‖/‖d‖) and *+ layer-wise and bound ratio* (that ratio
clipped into [r_min, r_max]). :func:`layerwise` builds the last two from any :func:`base_direction`:

  d = base(g)                       (the base optimizer's direction, before the learning rate)
  u = d + βw                        (decoupled weight decay, masked)
  r = clip(η·φ(‖w‖)/(D + ε), r_min, r_max),  1 where a norm is 0     (see :mod:`lamb_lars.optim.trust_ratio`)
      D = ‖u‖ (denominator='optax', the default; LAMB's form) or ‖d‖ + β‖w‖ ('paper', LARS's form)
  w ← w − lr · r · u

With base 'adam' this is LAMB (You et al. 2019); with base 'sgd' and η = 0.001 it is LARS without momentum in
optax's form. Note where momentum sits: here the ratio scales the momentum buffer (direction = momentum), while LARS
(:func:`lamb_lars.optim.optimizers.lars`) scales the gradient and accumulates momentum afterwards.

Base directions (states follow optax, so checkpoints and ``optax.tree_utils`` work on them):
  sgd       d = g
  momentum  v ← m·v + g,  d = v                       (heavy ball, Polyak 1964; no dampening)
  nesterov  v ← m·v + g,  d = g + m·v                 (Sutskever et al. 2013, as in optax / PyTorch)
  adagrad   G ← G + g²,   d = g / sqrt(G + ε)         (Duchi, Hazan & Singer 2011; G₀ = initial accumulator)
  rmsprop   ν ← ρ·ν + (1−ρ)·g²,  d = g / sqrt(ν + ε)  (Tieleman & Hinton 2012, ε inside the root as in optax)
  adam      m ← b1·m + (1−b1)·g,  v ← b2·v + (1−b2)·g²,  m̂ = m/(1−b1ᵗ),  v̂ = v/(1−b2ᵗ),
            d = m̂ / (sqrt(v̂ + ε_root) + ε)          (Kingma & Ba 2015; bias correction can be turned off)
"""

from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp
import optax

from lamb_lars.optim import trust_ratio as tr

BASES = ("sgd", "momentum", "nesterov", "adagrad", "rmsprop", "adam")
DEFAULT_EPS = {"sgd": 0.0, "momentum": 0.0, "nesterov": 0.0, "adagrad": 1e-7, "rmsprop": 1e-8, "adam": 1e-8}


def scale_by_adam(
  b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8, eps_root: float = 0.0, bias_correction: bool = True
) -> optax.GradientTransformation:
  """Adam's direction d = m̂ / (sqrt(v̂ + ε_root) + ε) (Kingma & Ba 2015); m̂ = m, v̂ = v without bias correction.

  With bias correction this is ``optax.scale_by_adam`` itself (so LAMB equals ``optax.lamb`` bit for bit).

  Args:
    b1, b2: the decay rates of the first and second moments m and v.
    eps: ε, added to sqrt(v̂ + ε_root).
    eps_root: ε_root, added to v̂ inside the square root.
    bias_correction: divide m and v by (1 − bᵗ).

  Returns:
    An ``optax.GradientTransformation`` giving the direction d (no learning rate, no sign).

  Example:
    >>> import jax.numpy as jnp, lamb_lars
    >>> tx = lamb_lars.scale_by_adam(bias_correction=False)
    >>> d, _ = tx.update({"w": jnp.ones(2)}, tx.init({"w": jnp.ones(2)}))
    >>> round(float(d["w"][0]), 4)  # m/(sqrt(v) + ε) = 0.1/(sqrt(0.001) + 1e-8)
    3.1623
  """
  if bias_correction:
    return optax.scale_by_adam(b1=b1, b2=b2, eps=eps, eps_root=eps_root)

  def init_fn(params):
    zeros = jax.tree.map(jnp.zeros_like, params)
    return optax.ScaleByAdamState(count=jnp.zeros([], jnp.int32), mu=zeros, nu=zeros)

  def update_fn(updates, state, params=None):
    del params
    mu = jax.tree.map(lambda g, m: (1 - b1) * g + b1 * m, updates, state.mu)
    nu = jax.tree.map(lambda g, v: (1 - b2) * (g * g) + b2 * v, updates, state.nu)
    out = jax.tree.map(lambda m, v: m / (jnp.sqrt(v + eps_root) + eps), mu, nu)
    return out, optax.ScaleByAdamState(count=optax.safe_increment(state.count), mu=mu, nu=nu)

  return optax.GradientTransformation(init_fn, update_fn)


def base_direction(
  name: str,
  *,
  momentum: float = 0.9,
  b1: float = 0.9,
  b2: float = 0.999,
  eps: Optional[float] = None,
  eps_root: float = 0.0,
  initial_accumulator_value: float = 0.1,
  rms_decay: float = 0.9,
  bias_correction: bool = True,
) -> optax.GradientTransformation:
  """The base optimizer's direction d (before the learning rate); formulas in the module docstring.

  ``eps=None`` takes the usual default for the base (adagrad 1e-7, rmsprop and adam 1e-8).

  Args:
    name: sgd, momentum, nesterov, adagrad, rmsprop or adam.
    momentum: the momentum of 'momentum' and 'nesterov'.
    b1, b2, eps_root, bias_correction: Adam's settings (:func:`scale_by_adam`).
    eps: the adaptive bases' ε (None: their default).
    initial_accumulator_value: AdaGrad's G₀.
    rms_decay: RMSprop's ρ.

  Returns:
    An ``optax.GradientTransformation`` giving the direction d (no learning rate, no sign).

  Example:
    >>> import jax.numpy as jnp, lamb_lars
    >>> tx = lamb_lars.base_direction("momentum", momentum=0.9)
    >>> d, _ = tx.update({"w": jnp.ones(2)}, tx.init({"w": jnp.ones(2)}))
    >>> d["w"].tolist()
    [1.0, 1.0]
  """
  if name not in BASES:
    raise ValueError(f"base direction must be one of {BASES}; got {name!r}.")
  eps = DEFAULT_EPS[name] if eps is None else eps
  if name == "sgd":
    return optax.identity()
  if name in ("momentum", "nesterov"):
    return optax.trace(decay=momentum, nesterov=name == "nesterov")
  if name == "adagrad":
    return optax.scale_by_rss(initial_accumulator_value=initial_accumulator_value, eps=eps)
  if name == "rmsprop":
    return optax.scale_by_rms(decay=rms_decay, eps=eps)
  return scale_by_adam(b1=b1, b2=b2, eps=eps, eps_root=eps_root, bias_correction=bias_correction)


def layerwise(
  base: optax.GradientTransformation,
  learning_rate: Optional[optax.ScalarOrSchedule] = None,
  trust: tr.TrustRatio = tr.TrustRatio(),
) -> optax.GradientTransformation:
  """``base`` followed by the trust ratio ``trust`` (a :class:`~lamb_lars.optim.trust_ratio.TrustRatio`) and the LR.

  w ← w − lr · r · (d + βw) with r = clip(η·φ(‖w‖)/(D + ε), r_min, r_max) per layer (You et al. 2020, "The Limit of
  the Batch Size", Table 3 "+ layer-wise" / "+ bound ratio"). ``learning_rate=None`` leaves the sign and scale to a
  later transformation (the output is then the descent direction r·u, not an update).

  Args:
    base: the base optimizer's direction d, e.g. :func:`base_direction` or :func:`scale_by_adam`.
    learning_rate: lr, a scalar or an optax schedule of the step count; None leaves out the LR step.
    trust: the trust-ratio settings (:class:`~lamb_lars.optim.trust_ratio.TrustRatio`).

  Returns:
    An ``optax.GradientTransformation`` whose ``update`` needs ``params``.

  Example:
    >>> import jax.numpy as jnp, lamb_lars
    >>> tx = lamb_lars.layerwise(lamb_lars.base_direction("sgd"), 0.1, lamb_lars.TrustRatio(ratio_bounds=(0, 10)))
    >>> params = {"w": 2 * jnp.ones(4)}
    >>> u, _ = tx.update({"w": jnp.ones(4)}, tx.init(params), params)
    >>> round(float(u["w"][0]), 6)  # −lr·(‖w‖/‖g‖)·g = −0.1·2·1
    -0.2
  """
  parts = [base, trust.transform(learning_rate)]
  if learning_rate is not None:
    parts.append(optax.scale_by_learning_rate(learning_rate))
  return optax.chain(*parts)
