"""A plain multilayer perceptron: flatten → [dense + ReLU] × depth → dense logits.

The model of the width/depth questions (Golmant et al. 2018 vary model size as well as data): every hidden width
is ``lenet.scaled(h, width)`` of ``hidden`` (``config.mlp_hidden``, default (300, 100): LeCun et al. 1998's
LeNet-300-100) and ``depth`` (``config.model_depth``, 0 = ``len(hidden)``) hidden layers, the sizes of ``hidden``
extended by repeating its last one or cut to the first ``depth``. Kernels LeCun-normal, biases zero (flax's
``nn.Dense`` defaults). Parameters: Σ_l (n_{l-1} + 1)·n_l over the layers, n_0 = H·W·C, the last n = num_classes.
"""

from __future__ import annotations

from typing import Any, Sequence

import flax.linen as nn
import jax.numpy as jnp

from lamb_lars.models.lenet import scaled


def hidden_sizes(hidden: Sequence[int], depth: int = 0, width: float = 1.0) -> tuple[int, ...]:
  """The hidden widths: ``hidden`` cut or extended (its last size repeated) to ``depth`` layers, each scaled."""
  sizes = list(hidden)
  if depth > 0:
    sizes = (sizes + [sizes[-1]] * depth)[:depth]
  return tuple(scaled(int(h), width) for h in sizes)


class MLP(nn.Module):
  """Flatten NHWC images, ``len(hidden_sizes(...))`` dense + ReLU layers, a dense head; float32 logits."""

  num_classes: int = 10
  dtype: Any = jnp.float32
  hidden: Sequence[int] = (300, 100)
  depth: int = 0
  width: float = 1.0

  @nn.compact
  def __call__(self, x: jnp.ndarray, train: bool = True) -> jnp.ndarray:
    del train  # no batch norm or dropout
    x = x.astype(self.dtype).reshape((x.shape[0], -1))
    for i, n in enumerate(hidden_sizes(self.hidden, self.depth, self.width)):
      x = nn.relu(nn.Dense(n, dtype=self.dtype, name=f"fc{i + 1}")(x))
    return nn.Dense(self.num_classes, dtype=self.dtype, name="head")(x).astype(jnp.float32)
