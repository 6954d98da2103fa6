"""A workload defined outside lamb_lars: scikit-learn's handwritten digits and a small Flax CNN with batch norm.

This file is everything lamb_lars needs to know about the workload (docs/workloads.md):

* ``load()`` returns the data as numpy arrays: a dict of ``'train'``, ``'validation'``, ``'test'``, each
  ``(images uint8 [N, 8, 8, 1], labels int64 [N])``, and ``'num_classes'``. The UCI digits (1,797 8×8 images, pixel
  values 0–16) ship inside scikit-learn's wheel, so nothing is downloaded; they are scaled to 0–255 and split once,
  deterministically (a permutation keyed by seed 0): 1,257 train, 180 validation, 360 test.
* ``DigitsCNN`` is a Flax module built as ``DigitsCNN(num_classes=..., dtype=..., norm=...)`` and called as
  ``model.apply(variables, x, train=...)`` on float images [B, 8, 8, 1]; it returns float32 logits [B, 10]. Every
  batch norm is made with ``norm(...)``, so lamb_lars' BN groups (ghost batches, device groups, unbiased running
  variance) reach it.

Config:  config.model = 'examples.digits.workload:DigitsCNN', config.dataset = 'examples.digits.workload:load'.
"""

from typing import Any, Callable

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

SPLIT = (1257, 180, 360)  # train, validation, test: 70 / 10 / 20 %


def load() -> dict:
  """The digits as uint8 images and integer labels, split deterministically (module docstring)."""
  from sklearn.datasets import load_digits  # the data file is inside scikit-learn's wheel

  digits = load_digits()
  images = np.round(digits.images * (255.0 / 16.0)).astype(np.uint8)[..., None]  # [1797, 8, 8, 1]
  labels = digits.target.astype(np.int64)
  order = np.random.default_rng(0).permutation(len(labels))
  n_train, n_val, _ = SPLIT
  parts = np.split(order, [n_train, n_train + n_val])
  train, validation, test = ((images[p], labels[p]) for p in parts)
  return {"train": train, "validation": validation, "test": test, "num_classes": 10}


class DigitsCNN(nn.Module):
  """conv 3×3 (``width``) → BN → ReLU → conv 3×3/2 (2·width) → BN → ReLU → global mean → dense logits."""

  num_classes: int = 10
  dtype: Any = jnp.float32
  norm: Callable[..., nn.Module] = nn.BatchNorm
  width: int = 16

  @nn.compact
  def __call__(self, x: jnp.ndarray, train: bool) -> jnp.ndarray:
    x = x.astype(self.dtype)
    x = nn.Conv(self.width, (3, 3), dtype=self.dtype, name="conv1")(x)
    x = nn.relu(self.norm(use_running_average=not train, dtype=self.dtype, name="bn1")(x))
    x = nn.Conv(2 * self.width, (3, 3), strides=(2, 2), dtype=self.dtype, name="conv2")(x)
    x = nn.relu(self.norm(use_running_average=not train, dtype=self.dtype, name="bn2")(x))
    x = x.mean(axis=(1, 2))
    return nn.Dense(self.num_classes, dtype=self.dtype, name="head")(x).astype(jnp.float32)
