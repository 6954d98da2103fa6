"""What every dataset shares: info record, data-dir lookup, epoch order, per-host slicing, exact-eval padding.

Everything here is pure numpy on indices, so the host pipeline (numpy gather, grain) and a device-resident
pipeline (gather on device) use exactly the same order:

* Training order of epoch ``e`` is ``epoch_permutation(seed, e, n)``; step ``s`` of that epoch takes positions
  ``[s*B, (s+1)*B)`` of it (the last ``n % B`` examples of the permutation are dropped for that epoch only), and
  process ``p`` of ``P`` takes the ``p``-th contiguous ``B/P`` slice of the step's global batch. With
  ``data_order='examples'`` the permutations form one stream instead (:func:`stream_indices`).
* Evaluation walks the split in order in ``ceil(n/B)`` global batches; the last one is padded and carries a
  boolean ``mask`` so every example counts exactly once (flax's ``drop_remainder=True`` eval silently drops).
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any, Iterator

import numpy as np

from lamb_lars.errors import UserError


class DatasetNotFoundError(UserError, FileNotFoundError):
  """A dataset that is missing, incomplete or corrupt; the message says in one sentence how to get it."""


@dataclasses.dataclass(frozen=True)
class DatasetInfo:
  """Sizes and shapes the trainer needs before it sees any data.

  ``num_train`` is the training set after the ``validation_split`` hold-out, ``num_eval`` the test split (for
  ImageNet tfds' 'validation' split), ``num_validation`` the hold-out (0 without one); ``image_shape`` is what a
  batch holds per example (for ImageNet the crop size); ``in_memory`` says whether ``load_arrays`` can hand out
  the splits.
  """

  name: str
  num_train: int
  num_eval: int
  image_shape: tuple
  num_classes: int
  in_memory: bool
  num_validation: int = 0


@dataclasses.dataclass(frozen=True)
class SplitView:
  """A contiguous range ``[start, start + count)`` of a stored split: how 55K/5K is cut out of 60K train."""

  split: str
  start: int
  count: int


def resolve_data_dir(config: Any) -> str:
  """``config.data_dir`` if set, else ``$TFDS_DATA_DIR``, else ``~/tensorflow_datasets`` (tfds' default)."""
  data_dir = config.data_dir or os.environ.get("TFDS_DATA_DIR", "")
  return os.path.expanduser(data_dir or "~/tensorflow_datasets")


SPLITS = ("train", "test", "validation")  # what the trainer reads; 'validation' exists when validation_split > 0
EVAL_SPLITS = ("test", "validation")


def check_split(split: str, allowed: tuple = SPLITS) -> None:
  if split not in allowed:
    raise ValueError(f"split must be one of {allowed}; got {split!r}.")


def split_views(
  num_train_split: int, num_test: int, validation_split: int, *, train_split: str = "train", test_split: str = "test"
) -> dict[str, SplitView]:
  """The 'train', 'test' and 'validation' views: the LAST ``validation_split`` train examples are 'validation'
  (empty when 0) and are left out of 'train'; 'test' is the stored test split either way."""
  if validation_split < 0 or validation_split >= num_train_split:
    raise ValueError(f"config.validation_split must be in [0, {num_train_split}); got {validation_split}.")
  keep = num_train_split - validation_split
  return {
    "train": SplitView(train_split, 0, keep),
    "test": SplitView(test_split, 0, num_test),
    "validation": SplitView(train_split, keep, validation_split),
  }


def epoch_permutation(seed: int, epoch: int, n: int) -> np.ndarray:
  """The training order of epoch ``epoch``: a permutation of ``range(n)`` keyed only by (seed, epoch).

  Keyed rather than carried state, so a run resumed at any step sees the same order without iterator state.
  int64 indices from numpy's default Generator (PCG64) seeded by ``SeedSequence([seed, epoch])``.
  """
  if n < 0 or epoch < 0:
    raise ValueError(f"Need n >= 0 and epoch >= 0; got n={n}, epoch={epoch}.")
  rng = np.random.default_rng(np.random.SeedSequence([int(seed) % 2**63, int(epoch)]))
  return rng.permutation(n).astype(np.int64)


def stream_indices(seed: int, start: int, count: int, n: int, permutation=epoch_permutation) -> np.ndarray:
  """Positions ``[start, start + count)`` of the example stream of ``data_order='examples'``: epoch 0's permutation,
  then epoch 1's, … with nothing dropped, so a batch may straddle two epochs (as ``repeat().batch()`` in
  tf.data), and runs at any batch, or whose batch changes, see the same examples in the same order."""
  parts, pos, end = [], int(start), int(start) + int(count)
  while pos < end:
    epoch, offset = divmod(pos, n)
    take = min(end - pos, n - offset)
    parts.append(permutation(seed, epoch, n)[offset : offset + take])
    pos += take
  return np.concatenate(parts) if parts else np.zeros((0,), np.int64)


def batches_per_epoch(num_train: int, global_batch_size: int) -> int:
  """Full global batches in one data epoch (the remainder is dropped, different examples each epoch); the data
  order only: durations count an epoch as N/B steps (lamb_lars/common/durations.py)."""
  if global_batch_size <= 0:
    raise ValueError(f"global_batch_size must be positive; got {global_batch_size}.")
  return num_train // global_batch_size


def local_batch_size(global_batch_size: int, process_count: int) -> int:
  """This process's share of a global batch; the batch must split evenly over processes."""
  if process_count <= 0 or global_batch_size % process_count:
    raise ValueError(f"global batch {global_batch_size} does not split over {process_count} processes.")
  return global_batch_size // process_count


def _check_process(process_index: int, process_count: int) -> None:
  if not 0 <= process_index < process_count:
    raise ValueError(f"process_index {process_index} not in [0, {process_count}).")


def epoch_batch_indices(seed: int, epoch: int, n: int, global_batch_size: int) -> np.ndarray:
  """int64 [batches_per_epoch, global_batch_size]: row s is the global batch of step s (for on-device gathers)."""
  steps = batches_per_epoch(n, global_batch_size)
  return epoch_permutation(seed, epoch, n)[: steps * global_batch_size].reshape(steps, global_batch_size)


def train_index_batches(
  *,
  seed: int,
  epoch: int,
  n: int,
  global_batch_size: int,
  start_step: int = 0,
  process_index: int = 0,
  process_count: int = 1,
) -> Iterator[np.ndarray]:
  """This process's example indices for steps ``start_step .. batches_per_epoch-1`` of ``epoch``.

  Arguments are checked at call time (not at the first ``next``); ValueError when the global batch is larger
  than the training set (no step would ever run).
  """
  _check_process(process_index, process_count)
  b = local_batch_size(global_batch_size, process_count)
  if global_batch_size > n:
    raise ValueError(f"global batch {global_batch_size} exceeds the {n} training examples.")
  if start_step < 0:
    raise ValueError(f"start_step must be >= 0; got {start_step}.")
  batches = epoch_batch_indices(seed, epoch, n, global_batch_size)
  lo, hi = process_index * b, (process_index + 1) * b
  return (batches[step, lo:hi] for step in range(start_step, batches.shape[0]))


def num_eval_batches(n: int, global_batch_size: int) -> int:
  """ceil(n / B): the padded last batch included."""
  local_batch_size(global_batch_size, 1)
  return math.ceil(n / global_batch_size)


def eval_index_batches(
  *, n: int, global_batch_size: int, process_index: int = 0, process_count: int = 1
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
  """(indices, mask) per eval batch for this process; padded slots have index 0 and mask False.

  Every process yields the same number of batches (collectives stay in step); over all processes and batches
  each index in ``range(n)`` appears exactly once with mask True.
  """
  _check_process(process_index, process_count)
  b = local_batch_size(global_batch_size, process_count)
  offsets = process_index * b + np.arange(b, dtype=np.int64)

  def batch(j: int) -> tuple[np.ndarray, np.ndarray]:
    pos = j * global_batch_size + offsets
    mask = pos < n
    return np.where(mask, pos, 0), mask

  return (batch(j) for j in range(num_eval_batches(n, global_batch_size)))


def gather_batch(images: np.ndarray, labels: np.ndarray, idx: np.ndarray) -> dict:
  """``{'image', 'label'}`` for the given rows (numpy fancy indexing: one memcpy-like pass)."""
  return {"image": images[idx], "label": labels[idx]}


def gather_eval_batch(images: np.ndarray, labels: np.ndarray, idx: np.ndarray, mask: np.ndarray) -> dict:
  """``{'image', 'label', 'mask'}``; padded rows are zero images with label 0 so they are easy to spot."""
  batch = gather_batch(images, labels, idx)
  if not mask.all():
    batch["image"][~mask] = 0
    batch["label"][~mask] = 0
  batch["mask"] = mask
  return batch
