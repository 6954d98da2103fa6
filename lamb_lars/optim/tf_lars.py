"""LARS as the paper's authors ran it on MNIST: TensorFlow's ``LARSOptimizer`` with ``apply_momentum``.

You et al. 2020 trained their MNIST LARS runs with the ``LARSOptimizer`` class of their TPU code (GitHub
``fastalgo/mnist_tpu``, ``momentum_lars/mnist_tpu.py``). Per variable (every one: no skip list), at update t:

  r = η‖w‖ / (‖g‖ + β‖w‖ + ε)      r = 1 where ‖w‖ = 0 or ‖g‖ = 0 (so zero-initialised biases start at ratio 1)
  v ← m·v + g                      TF ``apply_momentum(var, accum, lr·r, grad, m)``: the accumulator holds raw
  w ← w − lr_t·r·v                 gradients, and this step's lr·r scales the whole accumulator

with η = 0.001, β = 1e-4, ε = 0 and m = 0.9 in their runs. The weight decay β enters only the ratio and is never
added to the update. This differs from the paper form of :func:`lamb_lars.optim.optimizers.lars` (You, Gitman & Ginsburg
2017), where u = lr·r·(g + βw) enters the velocity, so a step's LR and ratio do not rescale older gradients.

Norms are computed in float32 (or wider), as in :mod:`lamb_lars.optim.trust_ratio`.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from lamb_lars.optim import trust_ratio as tr


class TFLarsState(NamedTuple):
  count: jax.Array  # type: ignore[assignment]  # updates applied so far (the schedule's t)
  accumulator: optax.Updates


def tf_lars(
  learning_rate: optax.ScalarOrSchedule,
  *,
  momentum: float = 0.9,
  weight_decay: float = 1e-4,
  trust_coefficient: float = 1e-3,
  eps: float = 0.0,
) -> optax.GradientTransformation:
  """The authors' TF LARS (module docstring) as an optax transformation; ``learning_rate`` may be a schedule."""

  def init_fn(params):
    return TFLarsState(jnp.zeros((), jnp.int32), jax.tree.map(jnp.zeros_like, params))

  def update_fn(grads, state, params=None):
    if params is None:
      raise ValueError("tf_lars needs the parameters: call update(grads, state, params).")
    lr = learning_rate(state.count) if callable(learning_rate) else learning_rate

    def leaf(g, w, v):
      w_norm, g_norm = tr.layer_norm(w), tr.layer_norm(g)
      ratio = jnp.where(
        w_norm > 0, jnp.where(g_norm > 0, trust_coefficient * w_norm / (g_norm + weight_decay * w_norm + eps), 1.0), 1.0
      )
      v = momentum * v + g
      return (-(lr * ratio) * v).astype(w.dtype), v

    out = jax.tree.map(leaf, grads, params, state.accumulator)
    treedef = jax.tree.structure(grads)
    updates = jax.tree.unflatten(treedef, [u for u, _ in treedef.flatten_up_to(out)])
    accumulator = jax.tree.unflatten(treedef, [v for _, v in treedef.flatten_up_to(out)])
    return updates, TFLarsState(optax.safe_increment(state.count), accumulator)

  return optax.GradientTransformation(init_fn, update_fn)
