"""LeNet-5 for 28×28 MNIST, as in the paper's MNIST workload (You et al. 2020, Table 2).

conv 6@5×5 SAME → ReLU → 2×2 max-pool → conv 16@5×5 VALID → ReLU → 2×2 max-pool → dense 120 → 84 → 10.
61,706 parameters.
"""
from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp


def max_pool_2x2(x: jnp.ndarray) -> jnp.ndarray:
  """2×2/2 max-pool on NHWC written as reshape + max (same values as nn.max_pool; faster gradient on CPU)."""
  n, h, w, c = x.shape
  return x.reshape(n, h // 2, 2, w // 2, 2, c).max(axis=(2, 4))


class LeNet5(nn.Module):
  """LeNet-5 classifier; input NHWC float images, output logits."""
  num_classes: int = 10
  dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, x: jnp.ndarray, train: bool = True) -> jnp.ndarray:
    del train  # no batch norm or dropout
    x = x.astype(self.dtype)
    x = nn.relu(nn.Conv(6, (5, 5), padding="SAME", dtype=self.dtype, name="conv1")(x))
    x = max_pool_2x2(x)
    x = nn.relu(nn.Conv(16, (5, 5), padding="VALID", dtype=self.dtype, name="conv2")(x))
    x = max_pool_2x2(x)
    x = x.reshape((x.shape[0], -1))
    x = nn.relu(nn.Dense(120, dtype=self.dtype, name="fc1")(x))
    x = nn.relu(nn.Dense(84, dtype=self.dtype, name="fc2")(x))
    return nn.Dense(self.num_classes, dtype=self.dtype, name="fc3")(x)
