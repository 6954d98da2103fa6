"""tfds ``data_source`` splits → uint8/int32 numpy arrays, cached as ``.npy`` next to the data.

Small datasets (MNIST, CIFAR-10) are decoded from their ArrayRecord files once (PNG decode: seconds) and then
served from ``<data_dir>/npy_cache/<name>/<version>/<split>.{images,labels}.npy`` (well under a second to
load). The cache is keyed by a fingerprint of the split's files, so a re-prepared dataset is re-read; splits
with no files on disk (``tfds.testing.mock_data``) are never cached. Writes go to a temporary name and are
renamed into place, so concurrent or killed runs never leave a half-written cache behind.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from typing import Any, Iterator, Optional, Sequence

import numpy as np
import tensorflow_datasets as tfds

from lamb_lars.input_pipeline.common import DatasetNotFoundError
from lamb_lars.common import io_utils

CACHE_DIRNAME = "npy_cache"
_READ_CHUNK = 1024


def open_tfds_source(name: str, split: str, data_dir: str, how_to_get: str) -> Sequence[dict]:
  """``tfds.data_source(name, split)`` from ``data_dir`` without downloading; missing → ``how_to_get``.

  tfds' own errors for a missing dataset are misleading (it blames the TFRecord format), hence one clear
  sentence instead, with the original error chained for debugging.
  """
  try:
    with _held_logs():
      return tfds.data_source(name, split=split, data_dir=data_dir, download=False)
  except Exception as e:  # tfds raises NotImplementedError, AssertionError, DatasetInfoFileError, ...
    raise DatasetNotFoundError(how_to_get) from e


def open_prepared_dir(path: str, split: str, how_to_get: str) -> Sequence[dict]:
  """The data source of ``split`` of a prepared tfds dataset directory (``.../<name>/<version>``)."""
  try:
    with _held_logs():
      return tfds.builder_from_directory(path).as_data_source(split=split)
  except Exception as e:
    raise DatasetNotFoundError(how_to_get) from e


class _Hold(logging.Filter):
  def __init__(self) -> None:
    super().__init__()
    self.records: list[logging.LogRecord] = []

  def filter(self, record: logging.LogRecord) -> bool:
    self.records.append(record)
    return False


@contextlib.contextmanager
def _held_logs() -> Iterator[None]:
  """tfds' log lines (absl's logger) held back while a dataset is looked up: passed on when it is found, dropped
  when it is not, so a missing dataset is our one sentence alone (tfds' lines stay on the chained error's path)."""
  logger = logging.getLogger("absl")
  hold = _Hold()
  logger.addFilter(hold)
  try:
    yield
  finally:
    logger.removeFilter(hold)
  for record in hold.records:  # reached only when the lookup succeeded
    logger.handle(record)


def _read_records(source: Sequence[dict], keys: list[int]) -> list[dict]:
  """Records by key: one batched ``__getitems__`` read when the source has a working one, else one by one."""
  try:
    records = source.__getitems__(keys)
    if len(records) == len(keys):
      return list(records)
  except (TypeError, AttributeError):  # tfds.testing.mock_data's __getitems__ is broken
    pass
  return [source[k] for k in keys]


def read_split_arrays(source: Sequence[dict], image_shape: tuple) -> tuple[np.ndarray, np.ndarray]:
  """Decode every example of ``source`` into ``uint8 [N, *image_shape]`` images and ``int32 [N]`` labels."""
  n = len(source)
  images = np.empty((n, *image_shape), np.uint8)
  labels = np.empty((n,), np.int32)
  for start in range(0, n, _READ_CHUNK):
    keys = list(range(start, min(n, start + _READ_CHUNK)))
    for k, ex in zip(keys, _read_records(source, keys)):
      image = np.asarray(ex["image"])
      if image.shape != tuple(image_shape):
        raise DatasetNotFoundError(
          f"Example {k} has image shape {image.shape}, expected {tuple(image_shape)}: "
          "the prepared dataset is not the one expected; re-prepare it."
        )
      images[k] = image
      labels[k] = int(ex["label"])
  return images, labels


def source_fingerprint(source: Any) -> Optional[dict]:
  """Names and sizes of the split's files on disk, or None when there are none (e.g. a mocked source)."""
  try:
    info = source.dataset_info
    data_dir, split = os.fspath(info.data_dir), str(source.split)
    names = sorted(f for f in os.listdir(data_dir) if f"-{split}." in f)
  except (AttributeError, OSError, TypeError):
    return None
  if not names:
    return None
  return {"num_examples": len(source), "files": {f: os.path.getsize(os.path.join(data_dir, f)) for f in names}}


def _cache_paths(cache_dir: str, split: str) -> tuple[str, str, str]:
  base = os.path.join(cache_dir, split)
  return f"{base}.images.npy", f"{base}.labels.npy", f"{base}.meta.json"


def _atomic_save(path: str, array: np.ndarray) -> None:
  io_utils.write_file_atomic(path, lambda tmp: np.save(tmp, array))


def _load_cache(cache_dir: str, split: str, fingerprint: dict) -> Optional[tuple[np.ndarray, np.ndarray]]:
  images_path, labels_path, meta_path = _cache_paths(cache_dir, split)
  try:
    with open(meta_path) as f:
      if json.load(f) != fingerprint:
        return None
    images, labels = np.load(images_path), np.load(labels_path)
  except (OSError, ValueError, EOFError):
    return None
  n = fingerprint["num_examples"]
  if images.dtype != np.uint8 or labels.dtype != np.int32 or len(images) != n or len(labels) != n:
    return None
  return images, labels


def _save_cache(cache_dir: str, split: str, fingerprint: dict, images: np.ndarray, labels: np.ndarray) -> None:
  images_path, labels_path, meta_path = _cache_paths(cache_dir, split)
  try:
    os.makedirs(cache_dir, exist_ok=True)
    _atomic_save(images_path, images)
    _atomic_save(labels_path, labels)
    io_utils.write_json_atomic(meta_path, fingerprint)  # written last: its presence means both arrays are complete
  except OSError as e:  # a read-only shared data dir: serve from memory, just slower next time
    logging.warning("Could not cache %s arrays in %s (%s); continuing without the cache.", split, cache_dir, e)


def _read_or_explain(source: Any, image_shape: tuple) -> tuple[np.ndarray, np.ndarray]:
  """``read_split_arrays``, turning a failure to read or decode a record into one clear sentence."""
  try:
    return read_split_arrays(source, image_shape)
  except DatasetNotFoundError:
    raise
  except Exception as e:
    where = getattr(getattr(source, "dataset_info", None), "data_dir", "the dataset directory")
    raise DatasetNotFoundError(
      f"Reading split '{getattr(source, 'split', '?')}' from {where} failed ({type(e).__name__}: {e}): the files "
      "are corrupt or incomplete; delete that directory and prepare it again (offline MNIST is re-converted "
      "automatically)."
    ) from e


def cached_split_arrays(source: Any, *, data_dir: str, image_shape: tuple) -> tuple[np.ndarray, np.ndarray]:
  """All of ``source`` as numpy arrays, from the ``.npy`` cache when it matches the files, else decoded once."""
  fingerprint = source_fingerprint(source)
  if fingerprint is None:
    return _read_or_explain(source, image_shape)
  info = source.dataset_info
  cache_dir = os.path.join(data_dir, CACHE_DIRNAME, info.name, str(info.version))
  split = str(source.split)
  cached = _load_cache(cache_dir, split, fingerprint)
  if cached is not None:
    return cached
  images, labels = _read_or_explain(source, image_shape)
  _save_cache(cache_dir, split, fingerprint, images, labels)
  return images, labels


def seed_cache(source: Any, *, data_dir: str, images: np.ndarray, labels: np.ndarray, num_check: int = 256) -> None:
  """Cache arrays that a converter wrote into ``source``, skipping the slow decode of every record.

  An evenly spaced sample of ``num_check`` records is decoded and compared first, so a converter bug cannot
  put arrays in the cache that differ from what the data source serves.
  """
  fingerprint = source_fingerprint(source)
  if fingerprint is None or fingerprint["num_examples"] != len(images):
    raise ValueError("seed_cache needs a source on disk with as many records as the arrays.")
  keys = sorted(set(np.linspace(0, len(images) - 1, min(num_check, len(images))).astype(int).tolist()))
  for k, ex in zip(keys, _read_records(source, keys)):
    if not (np.array_equal(np.asarray(ex["image"]), images[k]) and int(ex["label"]) == int(labels[k])):
      raise ValueError(f"Record {k} of {source.split} differs from the arrays it was written from.")
  info = source.dataset_info
  cache_dir = os.path.join(data_dir, CACHE_DIRNAME, info.name, str(info.version))
  _save_cache(cache_dir, str(source.split), fingerprint, images, labels.astype(np.int32))
