"""A small conv + BatchNorm network: the cheapest model with BN, for BN-group tests and quick CPU studies."""

from __future__ import annotations

import functools
from typing import Any, Callable, Optional

import flax.linen as nn
import jax.numpy as jnp


class SmallCNN(nn.Module):
  """conv 8@3×3 → BN → ReLU → 2×2 avg-pool → conv 16@3×3 → BN → ReLU → global mean → dense."""

  num_classes: int = 10
  dtype: Any = jnp.float32
  norm: Optional[Callable[..., nn.Module]] = None
  width: float = 1.0  # multiplies conv 8 and 16

  @nn.compact
  def __call__(self, x, train: bool = True):
    norm = self.norm or functools.partial(nn.BatchNorm, momentum=0.9, epsilon=1e-5)
    x = x.astype(self.dtype)
    x = nn.Conv(max(1, round(8 * self.width)), (3, 3), dtype=self.dtype, name="conv1")(x)
    x = nn.relu(norm(use_running_average=not train, dtype=self.dtype, name="bn1")(x))
    x = nn.avg_pool(x, (2, 2), (2, 2))
    x = nn.Conv(max(1, round(16 * self.width)), (3, 3), dtype=self.dtype, name="conv2")(x)
    x = nn.relu(norm(use_running_average=not train, dtype=self.dtype, name="bn2")(x))
    x = x.mean(axis=(1, 2))
    return nn.Dense(self.num_classes, dtype=self.dtype, name="head")(x).astype(jnp.float32)
