"""Optimizer aliases: LARS, LAMB, layer-wise SGD / AdaGrad / RMSprop / Adam, and the "original" solvers.

Every alias is a short ``optax.chain`` over :mod:`lamb_lars.optim.base_directions` and
:mod:`lamb_lars.optim.trust_ratio`, whose docstrings hold the formulas. The trust-ratio settings travel as one
:class:`~lamb_lars.optim.trust_ratio.TrustRatio` value: pass ``trust=TrustRatio(...)``, or its fields as keywords
(``weight_decay=1e-4, ratio_bounds=(0.1, 10)``), which override the alias's defaults. Masks default to excluding biases
and BatchNorm / LayerNorm scale and offset from both weight decay and trust ratios
(:data:`lamb_lars.optim.masks.DEFAULT_EXCLUDE`); pass ``True`` to apply everywhere.

Weight decay β: the layer-wise optimizers, LARS, LAMB and AdamW add it *decoupled*, βw next to the direction
(for LARS: to the gradient, which is the same thing). The "original" sgd / momentum / nesterov / adagrad / rmsprop /
adam add it as L2, βw into the gradient before the base optimizer. Building an optimizer from ``config.optimizer``
is :mod:`lamb_lars.optim.optimizer_config`.
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


def _trust(defaults: tr.TrustRatio, trust: Optional[tr.TrustRatio], changes: dict[str, Any]) -> tr.TrustRatio:
  return (defaults if trust is None else trust).replace(**changes)


def lars(learning_rate: optax.ScalarOrSchedule, *, momentum: float = 0.9, nesterov: bool = False,
         trust: Optional[tr.TrustRatio] = None, **trust_fields: Any) -> optax.GradientTransformation:
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
  """
  return optax.chain(_trust(LARS_TRUST, trust, trust_fields).transform(learning_rate),
                     optax.scale_by_learning_rate(learning_rate),
                     optax.trace(decay=momentum, nesterov=nesterov))


def lamb(learning_rate: optax.ScalarOrSchedule, *, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-6,
         eps_root: float = 0.0, bias_correction: bool = True, trust_eps: Optional[float] = None,
         trust: Optional[tr.TrustRatio] = None, **trust_fields: Any) -> optax.GradientTransformation:
  """LAMB (You et al. 2019, "Large Batch Optimization for Deep Learning: Training BERT in 76 minutes").

  m ← b1·m + (1−b1)·g;  v ← b2·v + (1−b2)·g²;  m̂ = m/(1−b1ᵗ), v̂ = v/(1−b2ᵗ) (bias correction on by default)
  r = m̂ / (sqrt(v̂ + ε_root) + ε);  d = r + λw (decoupled weight decay, masked)
  w ← w − lr · φ(‖w‖)/‖d‖ · d,  φ(z) = clip(z, φ_lower, φ_upper) (identity by default); ratio 1 where a norm is 0.

  ``eps`` is Adam's ε; the trust ratio's is ``trust_eps`` (default 0). With the defaults and both masks ``True`` this
  equals ``optax.lamb(learning_rate, b1, b2, eps, eps_root, weight_decay)`` bit for bit.
  """
  base = lw.scale_by_adam(b1=b1, b2=b2, eps=eps, eps_root=eps_root, bias_correction=bias_correction)
  fields = trust_fields if trust_eps is None else dict(trust_fields, eps=trust_eps)
  return lw.layerwise(base, learning_rate, _trust(LAMB_TRUST, trust, fields))


def layerwise_sgd(learning_rate: optax.ScalarOrSchedule, *, momentum: float = 0.0, nesterov: bool = False,
                  trust: Optional[tr.TrustRatio] = None, **trust_fields: Any) -> optax.GradientTransformation:
  """Layer-wise SGD: d = g (momentum 0) or the (Nesterov) momentum buffer, then w ← w − lr·r·(d + βw)."""
  name = "sgd" if momentum == 0.0 else ("nesterov" if nesterov else "momentum")
  return lw.layerwise(lw.base_direction(name, momentum=momentum), learning_rate,
                      _trust(LAYERWISE_TRUST, trust, trust_fields))


def layerwise_adagrad(learning_rate: optax.ScalarOrSchedule, *, initial_accumulator_value: float = 0.1,
                      eps: float = 1e-7, trust: Optional[tr.TrustRatio] = None,
                      **trust_fields: Any) -> optax.GradientTransformation:
  """Layer-wise AdaGrad: d = g / sqrt(G + ε), G ← G + g², then w ← w − lr·r·(d + βw)."""
  base = lw.base_direction("adagrad", initial_accumulator_value=initial_accumulator_value, eps=eps)
  return lw.layerwise(base, learning_rate, _trust(LAYERWISE_TRUST, trust, trust_fields))


def layerwise_rmsprop(learning_rate: optax.ScalarOrSchedule, *, decay: float = 0.9, eps: float = 1e-8,
                      trust: Optional[tr.TrustRatio] = None, **trust_fields: Any) -> optax.GradientTransformation:
  """Layer-wise RMSprop: d = g / sqrt(ν + ε), ν ← ρν + (1−ρ)g², then w ← w − lr·r·(d + βw)."""
  base = lw.base_direction("rmsprop", rms_decay=decay, eps=eps)
  return lw.layerwise(base, learning_rate, _trust(LAYERWISE_TRUST, trust, trust_fields))


def layerwise_adam(learning_rate: optax.ScalarOrSchedule, *, b1: float = 0.9, b2: float = 0.999,
                   eps: float = 1e-8, eps_root: float = 0.0, bias_correction: bool = True,
                   trust: Optional[tr.TrustRatio] = None, **trust_fields: Any) -> optax.GradientTransformation:
  """Layer-wise Adam: d = m̂/(sqrt(v̂ + ε_root) + ε), then w ← w − lr·r·(d + βw); with φ = id this is LAMB."""
  base = lw.scale_by_adam(b1=b1, b2=b2, eps=eps, eps_root=eps_root, bias_correction=bias_correction)
  return lw.layerwise(base, learning_rate, _trust(LAYERWISE_TRUST, trust, trust_fields))


def original(name: str, learning_rate: optax.ScalarOrSchedule, *, weight_decay: float = 0.0,
             weight_decay_mask: Any = DEFAULT_MASK, **base_kwargs: Any) -> optax.GradientTransformation:
  """The "original" solver ``name`` without trust ratio: w ← w − lr·base(g + βw) (L2 weight decay, masked).

  'adamw' is Adam with decoupled weight decay (Loshchilov & Hutter 2019): w ← w − lr·(m̂/(sqrt(v̂)+ε) + βw).
  ``base_kwargs`` go to :func:`lamb_lars.optim.base_directions.base_direction`.
  """
  if name == "adamw":
    base = lw.base_direction("adam", **base_kwargs)
    return optax.chain(base, optax.add_decayed_weights(weight_decay, weight_decay_mask),
                       optax.scale_by_learning_rate(learning_rate))
  parts = [optax.add_decayed_weights(weight_decay, weight_decay_mask)] if weight_decay else []
  parts += [lw.base_direction(name, **base_kwargs), optax.scale_by_learning_rate(learning_rate)]
  return optax.chain(*parts)

