"""Optimizer aliases: LARS, LAMB, layer-wise SGD / AdaGrad / RMSprop / Adam, and the "original" solvers.

Every alias is a short ``optax.chain`` over :mod:`lamb_lars.optim.base_directions` and
:mod:`lamb_lars.optim.trust_ratio`, whose docstrings hold the formulas. The trust-ratio settings travel as one
:class:`~lamb_lars.optim.trust_ratio.TrustRatio` value: pass ``trust=TrustRatio(...)``, or its fields as keywords
(``weight_decay=1e-4, ratio_bounds=(0.1, 10)``), which override the alias's defaults (None keeps one). Masks
default to excluding biases and BatchNorm / LayerNorm scale and offset from both weight decay and trust ratios
(:data:`lamb_lars.optim.masks.DEFAULT_EXCLUDE`); pass ``True`` to apply everywhere.

Trust-ratio keywords, the same on every layer-wise alias (each a field of :class:`TrustRatio`, explained there):
``trust_coefficient`` η, ``eps`` ε of the ratio's denominator (``trust_eps`` where ``eps`` is the base optimizer's),
``denominator`` ('paper' or 'optax'), ``weight_decay`` β, ``weight_decay_mask`` and ``adaptation_mask`` (optax-style
masks: a bool, a bool tree or a callable params → bool tree), ``ratio_bounds`` (r_min, r_max; () for none),
``phi_bounds`` (LAMB's φ clip; () for the identity), ``zero_norm_ratio``, ``stacked_mask`` and ``track_stats``.

Weight decay β: the layer-wise optimizers, LARS, LAMB and AdamW add it *decoupled*, βw next to the direction (for
LARS: to the gradient, the same thing); the "original" solvers add it as L2, βw into the gradient before the base
optimizer. :mod:`lamb_lars.optim.optimizer_config` builds an optimizer from ``config.optimizer``.
"""

from __future__ import annotations

from typing import Any, Optional

import optax

from lamb_lars.optim import base_directions as lw
from lamb_lars.optim import masks
from lamb_lars.optim import trust_ratio as tr

NAMES = ("sgd", "momentum", "nesterov", "adagrad", "rmsprop", "adam", "adamw", "lars", "lamb")
DEFAULT_MASK = masks.exclude_mask(masks.DEFAULT_EXCLUDE)
LAYERWISE_TRUST = tr.TrustRatio(weight_decay_mask=DEFAULT_MASK, adaptation_mask=DEFAULT_MASK)
LARS_TRUST = LAYERWISE_TRUST.replace(trust_coefficient=0.001, denominator="paper")
LAMB_TRUST = LAYERWISE_TRUST


def _trust(defaults: tr.TrustRatio, trust: Optional[tr.TrustRatio], **fields: Any) -> tr.TrustRatio:
  """``trust`` (or the alias's ``defaults``) with each field given here, other than None, replaced."""
  return (defaults if trust is None else trust).replace(**{k: v for k, v in fields.items() if v is not None})


def lars(
  learning_rate: optax.ScalarOrSchedule,
  *,
  momentum: float = 0.9,
  nesterov: bool = False,
  trust: Optional[tr.TrustRatio] = None,
  trust_coefficient: Optional[float] = None,
  eps: Optional[float] = None,
  denominator: Optional[str] = None,
  weight_decay: Optional[float] = None,
  weight_decay_mask: Any = None,
  adaptation_mask: Any = None,
  ratio_bounds: tr.Bounds = None,
  phi_bounds: tr.Bounds = None,
  zero_norm_ratio: Optional[float] = None,
  stacked_mask: Any = None,
  track_stats: Optional[bool] = None,
) -> optax.GradientTransformation:
  """LARS (You, Gitman & Ginsburg 2017, "Large Batch Training of Convolutional Networks"; TF-TPU, flax.optim).

  denominator='paper':  r = η‖w‖ / (‖g‖ + β‖w‖ + ε)     (bounded by η/β)
  denominator='optax':  r = η‖w‖ / (‖g + βw‖ + ε)       (``optax.lars``; differs near g ≈ −βw)
  u = lr·r·(g + βw);  v ← m·v + u;  w ← w − v
  nesterov=True:  v ← m·v + u;  w ← w − (u + m·v)       (Sutskever et al. 2013 form, as ``optax.trace``)
  r = 1 where ‖w‖ or the gradient norm is 0; optional clip into ``ratio_bounds``; ``phi_bounds`` replaces ‖w‖ in
  the numerator by clip(‖w‖, lo, hi) as in LAMB.

  Trust-ratio defaults (:data:`LARS_TRUST`): η = ``trust_coefficient`` = 0.001, ε = ``eps`` = 0, the paper's
  denominator, β = ``weight_decay`` = 0, default masks. With denominator='optax' and both masks ``True`` this equals
  ``optax.lars(learning_rate, weight_decay, trust_coefficient=η, eps=ε, momentum=m, nesterov=...)`` bit for bit.

  Args:
    learning_rate: lr, a scalar or an optax schedule of the step count.
    momentum: m, the decay of the velocity v.
    nesterov: the Nesterov form of the momentum.
    trust: the trust-ratio settings, replacing :data:`LARS_TRUST`; the keywords below override its fields.
    trust_coefficient, eps, denominator, weight_decay, weight_decay_mask, adaptation_mask, ratio_bounds,
      phi_bounds, zero_norm_ratio, stacked_mask, track_stats: trust-ratio keywords (module docstring), None = default.

  Returns:
    An ``optax.GradientTransformation`` whose ``update`` needs ``params``.

  Example:
    >>> import jax, jax.numpy as jnp, optax, lamb_lars
    >>> params = {"w": jnp.ones((3, 2)), "bias": jnp.zeros(2)}
    >>> tx = lamb_lars.lars(0.1, momentum=0.9, weight_decay=1e-4)
    >>> updates, state = tx.update(jax.tree.map(jnp.ones_like, params), tx.init(params), params)
    >>> jax.tree.map(jnp.shape, optax.apply_updates(params, updates))
    {'bias': (2,), 'w': (3, 2)}
  """
  t = _trust(
    LARS_TRUST,
    trust,
    trust_coefficient=trust_coefficient,
    eps=eps,
    denominator=denominator,
    weight_decay=weight_decay,
    weight_decay_mask=weight_decay_mask,
    adaptation_mask=adaptation_mask,
    ratio_bounds=ratio_bounds,
    phi_bounds=phi_bounds,
    zero_norm_ratio=zero_norm_ratio,
    stacked_mask=stacked_mask,
    track_stats=track_stats,
  )
  return optax.chain(
    t.transform(learning_rate),
    optax.scale_by_learning_rate(learning_rate),
    optax.trace(decay=momentum, nesterov=nesterov),
  )


def lamb(
  learning_rate: optax.ScalarOrSchedule,
  *,
  b1: float = 0.9,
  b2: float = 0.999,
  eps: float = 1e-6,
  eps_root: float = 0.0,
  bias_correction: bool = True,
  trust_eps: Optional[float] = None,
  trust: Optional[tr.TrustRatio] = None,
  trust_coefficient: Optional[float] = None,
  denominator: Optional[str] = None,
  weight_decay: Optional[float] = None,
  weight_decay_mask: Any = None,
  adaptation_mask: Any = None,
  ratio_bounds: tr.Bounds = None,
  phi_bounds: tr.Bounds = None,
  zero_norm_ratio: Optional[float] = None,
  stacked_mask: Any = None,
  track_stats: Optional[bool] = None,
) -> optax.GradientTransformation:
  """LAMB (You et al. 2019, "Large Batch Optimization for Deep Learning: Training BERT in 76 minutes").

  m ← b1·m + (1−b1)·g;  v ← b2·v + (1−b2)·g²;  m̂ = m/(1−b1ᵗ), v̂ = v/(1−b2ᵗ) (bias correction on by default)
  r = m̂ / (sqrt(v̂ + ε_root) + ε);  d = r + λw (decoupled weight decay, masked)
  w ← w − lr · φ(‖w‖)/‖d‖ · d,  φ(z) = clip(z, φ_lower, φ_upper) (identity by default); ratio 1 where a norm is 0.

  ``eps`` is Adam's ε; the trust ratio's is ``trust_eps`` (default 0). With the defaults and both masks ``True`` this
  equals ``optax.lamb(learning_rate, b1, b2, eps, eps_root, weight_decay)`` bit for bit.

  Args:
    learning_rate: lr, a scalar or an optax schedule of the step count.
    b1, b2: the decay rates of Adam's first and second moments.
    eps: Adam's ε, added to sqrt(v̂ + ε_root).
    eps_root: ε_root, added to v̂ inside the square root.
    bias_correction: divide m and v by (1 − bᵗ).
    trust_eps: ε of the trust ratio's denominator (the ``eps`` field of :class:`TrustRatio`).
    trust: the trust-ratio settings, replacing :data:`LAMB_TRUST`; the keywords override its fields.
    trust_coefficient, denominator, weight_decay, weight_decay_mask, adaptation_mask, ratio_bounds, phi_bounds,
      zero_norm_ratio, stacked_mask, track_stats: trust-ratio keywords (module docstring), None = default.

  Returns:
    An ``optax.GradientTransformation`` whose ``update`` needs ``params``.

  Example:
    >>> import jax, jax.numpy as jnp, optax, lamb_lars
    >>> params = {"w": jnp.ones((3, 2)), "bias": jnp.zeros(2)}
    >>> tx = lamb_lars.lamb(1e-3, weight_decay=0.01)
    >>> updates, state = tx.update(jax.tree.map(jnp.ones_like, params), tx.init(params), params)
    >>> jax.tree.map(jnp.shape, optax.apply_updates(params, updates))
    {'bias': (2,), 'w': (3, 2)}
  """
  base = lw.scale_by_adam(b1=b1, b2=b2, eps=eps, eps_root=eps_root, bias_correction=bias_correction)
  t = _trust(
    LAMB_TRUST,
    trust,
    trust_coefficient=trust_coefficient,
    eps=trust_eps,
    denominator=denominator,
    weight_decay=weight_decay,
    weight_decay_mask=weight_decay_mask,
    adaptation_mask=adaptation_mask,
    ratio_bounds=ratio_bounds,
    phi_bounds=phi_bounds,
    zero_norm_ratio=zero_norm_ratio,
    stacked_mask=stacked_mask,
    track_stats=track_stats,
  )
  return lw.layerwise(base, learning_rate, t)


def layerwise_sgd(
  learning_rate: optax.ScalarOrSchedule,
  *,
  momentum: float = 0.0,
  nesterov: bool = False,
  trust: Optional[tr.TrustRatio] = None,
  trust_coefficient: Optional[float] = None,
  eps: Optional[float] = None,
  denominator: Optional[str] = None,
  weight_decay: Optional[float] = None,
  weight_decay_mask: Any = None,
  adaptation_mask: Any = None,
  ratio_bounds: tr.Bounds = None,
  phi_bounds: tr.Bounds = None,
  zero_norm_ratio: Optional[float] = None,
  stacked_mask: Any = None,
  track_stats: Optional[bool] = None,
) -> optax.GradientTransformation:
  """Layer-wise SGD: d = g (momentum 0) or the (Nesterov) momentum buffer, then w ← w − lr·r·(d + βw).

  Args:
    learning_rate: lr, a scalar or an optax schedule of the step count.
    momentum: the momentum of the base direction; 0 is plain SGD.
    nesterov: the Nesterov form of the momentum.
    trust: the trust-ratio settings, replacing :data:`LAYERWISE_TRUST`; the keywords override its fields.
    trust_coefficient, eps, denominator, weight_decay, weight_decay_mask, adaptation_mask, ratio_bounds,
      phi_bounds, zero_norm_ratio, stacked_mask, track_stats: trust-ratio keywords (module docstring), None = default.

  Returns:
    An ``optax.GradientTransformation`` whose ``update`` needs ``params``.

  Example:
    >>> import jax, jax.numpy as jnp, lamb_lars
    >>> params = {"w": jnp.ones((3, 2))}
    >>> tx = lamb_lars.layerwise_sgd(0.1, momentum=0.9, ratio_bounds=(0.0, 10.0))
    >>> updates, _ = tx.update({"w": jnp.ones((3, 2))}, tx.init(params), params)
    >>> round(float(updates["w"][0, 0]), 6)  # −lr·r·g with r = ‖w‖/‖g‖ = 1
    -0.1
  """
  name = "sgd" if momentum == 0.0 else ("nesterov" if nesterov else "momentum")
  t = _trust(
    LAYERWISE_TRUST,
    trust,
    trust_coefficient=trust_coefficient,
    eps=eps,
    denominator=denominator,
    weight_decay=weight_decay,
    weight_decay_mask=weight_decay_mask,
    adaptation_mask=adaptation_mask,
    ratio_bounds=ratio_bounds,
    phi_bounds=phi_bounds,
    zero_norm_ratio=zero_norm_ratio,
    stacked_mask=stacked_mask,
    track_stats=track_stats,
  )
  return lw.layerwise(lw.base_direction(name, momentum=momentum), learning_rate, t)


def layerwise_adagrad(
  learning_rate: optax.ScalarOrSchedule,
  *,
  initial_accumulator_value: float = 0.1,
  eps: float = 1e-7,
  trust: Optional[tr.TrustRatio] = None,
  trust_coefficient: Optional[float] = None,
  trust_eps: Optional[float] = None,
  denominator: Optional[str] = None,
  weight_decay: Optional[float] = None,
  weight_decay_mask: Any = None,
  adaptation_mask: Any = None,
  ratio_bounds: tr.Bounds = None,
  phi_bounds: tr.Bounds = None,
  zero_norm_ratio: Optional[float] = None,
  stacked_mask: Any = None,
  track_stats: Optional[bool] = None,
) -> optax.GradientTransformation:
  """Layer-wise AdaGrad: d = g / sqrt(G + ε), G ← G + g², then w ← w − lr·r·(d + βw).

  Args:
    learning_rate: lr, a scalar or an optax schedule of the step count.
    initial_accumulator_value: G₀, the accumulator's start.
    eps: AdaGrad's ε.
    trust: the trust-ratio settings, replacing :data:`LAYERWISE_TRUST`; the keywords override its fields.
    trust_coefficient, trust_eps, denominator, weight_decay, weight_decay_mask, adaptation_mask, ratio_bounds,
      phi_bounds, zero_norm_ratio, stacked_mask, track_stats: trust-ratio keywords (module docstring), None = default.

  Returns:
    An ``optax.GradientTransformation`` whose ``update`` needs ``params``.

  Example:
    >>> import jax.numpy as jnp, lamb_lars
    >>> tx = lamb_lars.layerwise_adagrad(0.05, weight_decay=1e-4, ratio_bounds=(0.0, 10.0))
    >>> state = tx.init({"w": jnp.ones((3, 2))})
  """
  base = lw.base_direction("adagrad", initial_accumulator_value=initial_accumulator_value, eps=eps)
  t = _trust(
    LAYERWISE_TRUST,
    trust,
    trust_coefficient=trust_coefficient,
    eps=trust_eps,
    denominator=denominator,
    weight_decay=weight_decay,
    weight_decay_mask=weight_decay_mask,
    adaptation_mask=adaptation_mask,
    ratio_bounds=ratio_bounds,
    phi_bounds=phi_bounds,
    zero_norm_ratio=zero_norm_ratio,
    stacked_mask=stacked_mask,
    track_stats=track_stats,
  )
  return lw.layerwise(base, learning_rate, t)


def layerwise_rmsprop(
  learning_rate: optax.ScalarOrSchedule,
  *,
  decay: float = 0.9,
  eps: float = 1e-8,
  trust: Optional[tr.TrustRatio] = None,
  trust_coefficient: Optional[float] = None,
  trust_eps: Optional[float] = None,
  denominator: Optional[str] = None,
  weight_decay: Optional[float] = None,
  weight_decay_mask: Any = None,
  adaptation_mask: Any = None,
  ratio_bounds: tr.Bounds = None,
  phi_bounds: tr.Bounds = None,
  zero_norm_ratio: Optional[float] = None,
  stacked_mask: Any = None,
  track_stats: Optional[bool] = None,
) -> optax.GradientTransformation:
  """Layer-wise RMSprop: d = g / sqrt(ν + ε), ν ← ρν + (1−ρ)g², then w ← w − lr·r·(d + βw).

  Args:
    learning_rate: lr, a scalar or an optax schedule of the step count.
    decay: ρ, the decay of the squared-gradient average ν.
    eps: RMSprop's ε.
    trust: the trust-ratio settings, replacing :data:`LAYERWISE_TRUST`; the keywords override its fields.
    trust_coefficient, trust_eps, denominator, weight_decay, weight_decay_mask, adaptation_mask, ratio_bounds,
      phi_bounds, zero_norm_ratio, stacked_mask, track_stats: trust-ratio keywords (module docstring), None = default.

  Returns:
    An ``optax.GradientTransformation`` whose ``update`` needs ``params``.

  Example:
    >>> import jax.numpy as jnp, lamb_lars
    >>> tx = lamb_lars.layerwise_rmsprop(1e-3, decay=0.9, ratio_bounds=(0.0, 10.0))
    >>> state = tx.init({"w": jnp.ones((3, 2))})
  """
  base = lw.base_direction("rmsprop", rms_decay=decay, eps=eps)
  t = _trust(
    LAYERWISE_TRUST,
    trust,
    trust_coefficient=trust_coefficient,
    eps=trust_eps,
    denominator=denominator,
    weight_decay=weight_decay,
    weight_decay_mask=weight_decay_mask,
    adaptation_mask=adaptation_mask,
    ratio_bounds=ratio_bounds,
    phi_bounds=phi_bounds,
    zero_norm_ratio=zero_norm_ratio,
    stacked_mask=stacked_mask,
    track_stats=track_stats,
  )
  return lw.layerwise(base, learning_rate, t)


def layerwise_adam(
  learning_rate: optax.ScalarOrSchedule,
  *,
  b1: float = 0.9,
  b2: float = 0.999,
  eps: float = 1e-8,
  eps_root: float = 0.0,
  bias_correction: bool = True,
  trust: Optional[tr.TrustRatio] = None,
  trust_coefficient: Optional[float] = None,
  trust_eps: Optional[float] = None,
  denominator: Optional[str] = None,
  weight_decay: Optional[float] = None,
  weight_decay_mask: Any = None,
  adaptation_mask: Any = None,
  ratio_bounds: tr.Bounds = None,
  phi_bounds: tr.Bounds = None,
  zero_norm_ratio: Optional[float] = None,
  stacked_mask: Any = None,
  track_stats: Optional[bool] = None,
) -> optax.GradientTransformation:
  """Layer-wise Adam: d = m̂/(sqrt(v̂ + ε_root) + ε), then w ← w − lr·r·(d + βw); with φ = id this is LAMB.

  Args:
    learning_rate: lr, a scalar or an optax schedule of the step count.
    b1, b2: the decay rates of Adam's first and second moments.
    eps: Adam's ε, added to sqrt(v̂ + ε_root).
    eps_root: ε_root, added to v̂ inside the square root.
    bias_correction: divide m and v by (1 − bᵗ).
    trust: the trust-ratio settings, replacing :data:`LAYERWISE_TRUST`; the keywords override its fields.
    trust_coefficient, trust_eps, denominator, weight_decay, weight_decay_mask, adaptation_mask, ratio_bounds,
      phi_bounds, zero_norm_ratio, stacked_mask, track_stats: trust-ratio keywords (module docstring), None = default.

  Returns:
    An ``optax.GradientTransformation`` whose ``update`` needs ``params``.

  Example:
    >>> import jax.numpy as jnp, lamb_lars
    >>> tx = lamb_lars.layerwise_adam(1e-3, ratio_bounds=(0.01, 10.0))
    >>> state = tx.init({"w": jnp.ones((3, 2))})
  """
  base = lw.scale_by_adam(b1=b1, b2=b2, eps=eps, eps_root=eps_root, bias_correction=bias_correction)
  t = _trust(
    LAYERWISE_TRUST,
    trust,
    trust_coefficient=trust_coefficient,
    eps=trust_eps,
    denominator=denominator,
    weight_decay=weight_decay,
    weight_decay_mask=weight_decay_mask,
    adaptation_mask=adaptation_mask,
    ratio_bounds=ratio_bounds,
    phi_bounds=phi_bounds,
    zero_norm_ratio=zero_norm_ratio,
    stacked_mask=stacked_mask,
    track_stats=track_stats,
  )
  return lw.layerwise(base, learning_rate, t)


def original(
  name: str,
  learning_rate: optax.ScalarOrSchedule,
  *,
  weight_decay: float = 0.0,
  weight_decay_mask: Any = DEFAULT_MASK,
  **base_kwargs: Any,
) -> optax.GradientTransformation:
  """The "original" solver ``name`` without trust ratio: w ← w − lr·base(g + βw) (L2 weight decay, masked).

  'adamw' is Adam with decoupled weight decay (Loshchilov & Hutter 2019): w ← w − lr·(m̂/(sqrt(v̂)+ε) + βw).

  Args:
    name: one of ``sgd``, ``momentum``, ``nesterov``, ``adagrad``, ``rmsprop``, ``adam``, ``adamw``.
    learning_rate: lr, a scalar or an optax schedule of the step count.
    weight_decay: β: L2 (βw added to the gradient), decoupled for 'adamw'.
    weight_decay_mask: an optax-style mask of the leaves that decay (default: not biases, BN scale or offset).
    **base_kwargs: the base direction's settings (``momentum``, ``b1``, ``b2``, ``eps``, ``eps_root``,
      ``initial_accumulator_value``, ``rms_decay``, ``bias_correction``), passed to
      :func:`lamb_lars.optim.base_directions.base_direction`.

  Returns:
    An ``optax.GradientTransformation``.

  Example:
    >>> import jax.numpy as jnp, lamb_lars
    >>> tx = lamb_lars.original("momentum", 0.05, weight_decay=5e-4, momentum=0.9)
    >>> state = tx.init({"w": jnp.ones((3, 2))})
  """
  if name == "adamw":
    base = lw.base_direction("adam", **base_kwargs)
    return optax.chain(
      base, optax.add_decayed_weights(weight_decay, weight_decay_mask), optax.scale_by_learning_rate(learning_rate)
    )
  parts = [optax.add_decayed_weights(weight_decay, weight_decay_mask)] if weight_decay else []
  parts += [lw.base_direction(name, **base_kwargs), optax.scale_by_learning_rate(learning_rate)]
  return optax.chain(*parts)
