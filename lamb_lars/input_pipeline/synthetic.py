"""Synthetic data: deterministic random uint8 images and labels of a configured shape, no disk.

For benchmarks and tests. Example ``i`` is row ``i mod P`` of a fixed pool of ``P`` random images with random
labels (``P`` ≤ 1024, pool ≤ 64 MiB), so batches of any shape cost one numpy gather like the real in-memory
datasets, the data is identical in every run, and a model can fit it (loss goes down in smoke tests). Stored
'train' has ``num_train`` examples (a ``validation_split`` hold-out is its last ones); test example ``j`` is example
``num_train + j``.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from lamb_lars.input_pipeline.common import SplitView, check_split, split_views

MAX_POOL = 1024
MAX_POOL_BYTES = 64 << 20
MAX_IN_MEMORY_BYTES = 2 << 30


def settings(config: Any) -> dict:
  """``config.synthetic`` (its one table of defaults is ``lamb_lars/configs/default.py``), with image_shape as a
  tuple."""
  s = config.synthetic
  return {
    "image_shape": tuple(int(d) for d in s.image_shape),
    "num_classes": int(s.num_classes),
    "num_train": int(s.num_train),
    "num_eval": int(s.num_eval),
    "seed": int(s.seed),
  }


def fits_in_memory(config: Any) -> bool:
  """Whether ``load_arrays`` may materialise both splits (≤ 2 GiB), e.g. to put them on device."""
  s = settings(config)
  return (s["num_train"] + s["num_eval"]) * math.prod(s["image_shape"]) <= MAX_IN_MEMORY_BYTES


@functools.lru_cache(maxsize=4)
def _pool(image_shape: tuple, num_classes: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
  size = max(1, min(MAX_POOL, MAX_POOL_BYTES // math.prod(image_shape)))
  rng = np.random.default_rng(np.random.SeedSequence([seed, 0x5EED]))
  images = rng.integers(0, 256, size=(size, *image_shape), dtype=np.uint8)
  labels = rng.integers(0, num_classes, size=(size,)).astype(np.int32)
  images.setflags(write=False)
  labels.setflags(write=False)
  return images, labels


def views(config: Any) -> dict[str, SplitView]:
  s = settings(config)
  return split_views(int(s["num_train"]), int(s["num_eval"]), int(config.validation_split))


def examples(config: Any, idx: np.ndarray, which: str) -> tuple[np.ndarray, np.ndarray]:
  """Images uint8 [len(idx), *shape] and labels int32 for indices into the 'train', 'test' or 'validation' view."""
  check_split(which)
  s = settings(config)
  images, labels = _pool(s["image_shape"], int(s["num_classes"]), int(s["seed"]))
  view = views(config)[which]
  offset = view.start + (s["num_train"] if view.split == "test" else 0)
  rows = (np.asarray(idx, np.int64) + offset) % len(labels)
  return images[rows], labels[rows]


def load_arrays(config: Any, which: str) -> tuple[np.ndarray, np.ndarray]:
  """A whole view, materialised (refused above 2 GiB: use batches instead)."""
  if not fits_in_memory(config):
    raise ValueError("Synthetic data this large is not held in memory; use train_batches/eval_batches.")
  return examples(config, np.arange(views(config)[which].count), which)
