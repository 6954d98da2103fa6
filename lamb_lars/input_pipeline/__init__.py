"""Input pipeline for lamb_lars: MNIST (offline or tfds), CIFAR-10, ImageNet and synthetic data.

Small datasets are served from uint8 numpy arrays by index permutation (or gathered on device from
``load_arrays`` + ``epoch_permutation``); ImageNet, and a ``tfds:NAME`` too large for memory, stream through
``tfds.data_source`` + grain. Order is a pure
function of (seed, epoch, step), or with ``data_order='examples'`` of (seed, examples seen); evaluation is exact
(pad + mask); each process reads only its shard.
Importing this package parses no flags and reads no data.
"""

from __future__ import annotations

from lamb_lars.input_pipeline.common import (
  DatasetInfo,
  DatasetNotFoundError,
  epoch_batch_indices,
  epoch_permutation,
  batches_per_epoch,
  stream_indices,
)
from lamb_lars.input_pipeline.device_preprocess import preprocess
from lamb_lars.input_pipeline.pipeline import (
  eval_batches,
  gathers_examples,
  get_info,
  has_validation,
  load_arrays,
  num_train_batches_per_epoch,
  prepare,
  train_batches,
  train_gatherer,
  train_stream,
)

__all__ = [
  "DatasetInfo",
  "DatasetNotFoundError",
  "epoch_batch_indices",
  "epoch_permutation",
  "eval_batches",
  "gathers_examples",
  "get_info",
  "has_validation",
  "load_arrays",
  "num_train_batches_per_epoch",
  "prepare",
  "preprocess",
  "batches_per_epoch",
  "train_batches",
  "train_gatherer",
  "stream_indices",
  "train_stream",
]
