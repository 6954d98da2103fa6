"""Datasets that fit in host memory (MNIST, CIFAR-10): whole splits as uint8/int32 numpy arrays.

Each stored split is read once per process (from the ``.npy`` cache after the first time) and kept, read-only;
'train', 'test' and 'validation' are then zero-copy slices of it (``SplitView``), so a hold-out costs nothing.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lamb_lars.input_pipeline import cifar, mnist, tfds_arrays
from lamb_lars.input_pipeline.common import SplitView, check_split, resolve_data_dir, split_views

DATASETS = ("mnist", "cifar10")
_SHAPES = {"mnist": mnist.IMAGE_SHAPE, "cifar10": cifar.IMAGE_SHAPE}
_CLASSES = {"mnist": mnist.NUM_CLASSES, "cifar10": cifar.NUM_CLASSES}


def image_shape(dataset: str) -> tuple:
  return _SHAPES[dataset]


def num_classes(dataset: str) -> int:
  return _CLASSES[dataset]


def _open_source(dataset: str, data_dir: str, data_source: str, split: str) -> Any:
  """The tfds data source of a stored split; offline MNIST is converted first if needed."""
  if dataset == "mnist" and data_source == "offline":
    path = mnist.convert_offline(data_dir)
    return tfds_arrays.open_prepared_dir(
      path, split, f"The offline MNIST in {path} is unreadable: delete that directory and run again to re-convert it."
    )
  if dataset == "mnist" and data_source == "tfds":
    return tfds_arrays.open_tfds_source("mnist", split, data_dir, mnist.tfds_howto(data_dir))
  if dataset == "mnist":
    raise ValueError(f"config.data_source must be 'offline' or 'tfds'; got {data_source!r}.")
  return tfds_arrays.open_tfds_source(dataset, split, data_dir, cifar.howto(data_dir))


_MEMO: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}


def stored_split_arrays(dataset: str, data_dir: str, data_source: str, split: str) -> tuple[np.ndarray, np.ndarray]:
  """uint8 [N, H, W, C] and int32 [N] for a stored split ('train'/'test'), read-only.

  Memoised per process when the split has files on disk; a mocked source (tests) is re-read every time so
  its random examples never outlive the mock.
  """
  key = (dataset, data_dir, data_source, split)
  if key in _MEMO:
    return _MEMO[key]
  source = _open_source(dataset, data_dir, data_source, split)
  images, labels = tfds_arrays.cached_split_arrays(source, data_dir=data_dir, image_shape=_SHAPES[dataset])
  images.setflags(write=False)
  labels.setflags(write=False)
  if tfds_arrays.source_fingerprint(source) is not None:
    _MEMO[key] = (images, labels)
  return images, labels


def clear_memo() -> None:
  """Forget the arrays held in this process (tests; or to free memory)."""
  _MEMO.clear()


def _key(config: Any) -> tuple[str, str, str]:
  dataset = config.dataset
  if dataset not in DATASETS:
    raise ValueError(f"{dataset!r} is not an in-memory dataset ({DATASETS}).")
  return dataset, resolve_data_dir(config), config.data_source


def views(config: Any) -> dict[str, SplitView]:
  """'train'/'test'/'validation' as ranges of the stored splits (reads the splits, cheap once cached)."""
  dataset, data_dir, data_source = _key(config)
  n_train = len(stored_split_arrays(dataset, data_dir, data_source, "train")[1])
  n_test = len(stored_split_arrays(dataset, data_dir, data_source, "test")[1])
  return split_views(n_train, n_test, int(config.validation_split))


def load_arrays(config: Any, which: str) -> tuple[np.ndarray, np.ndarray]:
  """The 'train', 'test' or 'validation' arrays (read-only views), honouring ``config.validation_split``."""
  check_split(which)
  view = views(config)[which]
  images, labels = stored_split_arrays(*_key(config), view.split)
  return images[view.start : view.start + view.count], labels[view.start : view.start + view.count]


def prepare(config: Any) -> None:
  """Convert (offline MNIST) and fill the ``.npy`` caches of both stored splits."""
  dataset, data_dir, data_source = _key(config)
  for split in ("train", "test"):
    stored_split_arrays(dataset, data_dir, data_source, split)
