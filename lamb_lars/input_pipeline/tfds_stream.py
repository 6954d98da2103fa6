"""``config.dataset = 'tfds:NAME'`` streamed from its ArrayRecord files through ``tfds.data_source`` + grain.

A prepared TFDS dataset is either held in memory (``user_data.py``: decoded once, then MNIST's path) or streamed
from disk here, record by record, as imagenet2012 is (``imagenet.py``). ``config.dataset_in_memory`` decides:

* ``'auto'`` (default): held in memory when its images have a fixed shape and the decoded 'train' and 'test'
  splits take at most :data:`IN_MEMORY_BYTES` (2 GiB: MNIST, Fashion-MNIST, CIFAR-10/100, SVHN), else streamed;
* ``'yes'``: held in memory (a fixed image shape is needed);
* ``'no'``: streamed.

Both give the **same batches**: the order is the same index arithmetic (``common.py``: keyed by (seed, epoch), process
``p`` reads only its slice, a resumed run reads from its step on without iterator state, ``data_order='examples'``
and ``train_examples`` select the same record keys), evaluation walks each split once (pad + mask), and
``input_scaling='standardize'`` uses the same statistics (:func:`mean_std`). So the choice changes memory and speed,
never a number, and it is not part of a run's identity.

Images of a fixed shape are served as stored, without augmentation. Images of varying size (e.g. imagenette) are
always streamed and cropped as ImageNet's are (``imagenet.py``): an Inception random-resized crop + flip for
training, keyed by (seed, epoch, record key), the central 87.5 % for evaluation, resized to ``config.image_size``²
RGB.
"""

from __future__ import annotations

import json
import os
from typing import Any, Iterator, Optional, Sequence

import numpy as np

from lamb_lars.common import io_utils
from lamb_lars.errors import ConfigError
from lamb_lars.input_pipeline import device_preprocess, imagenet, tfds_arrays
from lamb_lars.input_pipeline.common import (
  SplitView,
  local_batch_size,
  resolve_data_dir,
  split_views,
  train_index_batches,
)

PREFIX = "tfds:"
IN_MEMORY_CHOICES = ("auto", "yes", "no")
IN_MEMORY_BYTES = 2 * 2**30  # 'auto': decoded train + test at most this → held in memory
STATS_EXAMPLES = 10_000  # 'standardize' statistics: a fixed sample of this many training examples
STATS_KEY = 0x57A75  # keys the statistics sample apart from every data order


def tfds_name(config: Any) -> str:
  return config.dataset[len(PREFIX) :]


def howto(name: str, data_dir: str) -> str:
  """One sentence on preparing a TFDS dataset, which lamb_lars never downloads."""
  return (
    f"No prepared TFDS dataset {name!r} (ArrayRecord) in {data_dir}: run `tfds build {name} "
    f"--file_format=array_record --data_dir={data_dir}` where TensorFlow and the network are available, or set "
    f"config.data_dir to where it is."
  )


def open_split(config: Any, split: str) -> Sequence[dict]:
  """The data source of a stored split ('train' or 'test'); a missing dataset is one sentence (exit status 2)."""
  data_dir = resolve_data_dir(config)
  return tfds_arrays.open_tfds_source(tfds_name(config), split, data_dir, howto(tfds_name(config), data_dir))


def features(config: Any, source: Any) -> tuple[Optional[tuple], int]:
  """(the fixed image shape, or None when the images vary in size; the number of classes) from the dataset info."""
  feats = source.dataset_info.features
  if "image" not in feats or "label" not in feats:
    raise ConfigError(
      f"config.dataset={config.dataset!r} has features {sorted(feats)}; an image classification "
      f"dataset needs 'image' and 'label'."
    )
  shape = tuple(feats["image"].shape)
  num_classes = getattr(feats["label"], "num_classes", None)
  if not num_classes:
    raise ConfigError(
      f"config.dataset={config.dataset!r} has a 'label' feature that is not a ClassLabel; the "
      f"number of classes must come from the dataset."
    )
  if len(shape) != 3:
    raise ConfigError(
      f"config.dataset={config.dataset!r} has images of shape {shape}; lamb_lars needs (height, width, channels)."
    )
  return (None if None in shape else shape), int(num_classes)


def holds_in_memory(config: Any) -> bool:
  """Whether ``tfds:NAME`` is held in memory (module docstring); reads only the dataset info and split sizes."""
  mode = config.get("dataset_in_memory", "auto")
  if mode not in IN_MEMORY_CHOICES:
    raise ConfigError(f"config.dataset_in_memory={mode!r} is not one of {', '.join(map(repr, IN_MEMORY_CHOICES))}.")
  if mode == "no":
    return False
  key = (config.dataset, resolve_data_dir(config), mode)
  if key in _DECIDED:
    return _DECIDED[key]
  train = open_split(config, "train")
  shape, _ = features(config, train)
  if shape is None:
    if mode == "yes":
      raise ConfigError(
        f"config.dataset={config.dataset!r} has images of varying size, which cannot be held in "
        f"memory; set config.dataset_in_memory='auto' or 'no' (streamed, cropped to image_size)."
      )
    held = False
  else:
    held = mode == "yes" or (len(train) + len(open_split(config, "test"))) * int(np.prod(shape)) <= IN_MEMORY_BYTES
  if tfds_arrays.source_fingerprint(train) is not None:  # files on disk (a mocked source is asked every time)
    _DECIDED[key] = held
  return held


_DECIDED: dict[tuple, bool] = {}


def views(config: Any) -> dict[str, SplitView]:
  return split_views(len(open_split(config, "train")), len(open_split(config, "test")), int(config.validation_split))


def image_shape(config: Any) -> tuple:
  """What a batch holds per example: the stored shape, or ``image_size``² RGB crops for images of varying size."""
  shape, _ = features(config, open_split(config, "train"))
  return shape if shape is not None else imagenet.info_shape(config)


def num_classes(config: Any) -> int:
  return features(config, open_split(config, "train"))[1]


def stats_keys(n: int) -> np.ndarray:
  """The sorted keys of the training examples whose pixels give the 'standardize' statistics: all when n is at most
  :data:`STATS_EXAMPLES`, else the first that many of a permutation keyed by (STATS_KEY, n)."""
  if n <= STATS_EXAMPLES:
    return np.arange(n, dtype=np.int64)
  rng = np.random.default_rng(np.random.SeedSequence([STATS_KEY, int(n)]))
  return np.sort(rng.permutation(n)[:STATS_EXAMPLES]).astype(np.int64)


def channel_mean_std(images: np.ndarray) -> tuple[tuple, tuple]:
  """Per-channel mean and standard deviation (floored at 1e-3) of uint8 [N, H, W, C] on the [0, 1] scale."""
  x = images.reshape(-1, images.shape[-1]).astype(np.float64) / 255.0
  return tuple(x.mean(0).tolist()), tuple(np.maximum(x.std(0), 1e-3).tolist())


def _stats_path(source: Any, data_dir: str) -> str:
  info = source.dataset_info
  return os.path.join(data_dir, tfds_arrays.CACHE_DIRNAME, info.name, str(info.version), "train.mean_std.json")


def mean_std(config: Any) -> tuple[tuple, tuple]:
  """The 'standardize' statistics of a streamed dataset: :func:`channel_mean_std` of the :func:`stats_keys` sample
  of the stored 'train' split (its evaluation crops for images of varying size), cached next to the data."""
  source = open_split(config, "train")
  data_dir = resolve_data_dir(config)
  fingerprint = tfds_arrays.source_fingerprint(source)
  path = _stats_path(source, data_dir)
  if fingerprint is not None:
    try:
      with open(path) as f:
        cached = json.load(f)
      if cached["fingerprint"] == fingerprint:
        return tuple(cached["mean"]), tuple(cached["std"])
    except (OSError, ValueError, KeyError):
      pass
  keys = stats_keys(len(source))
  shape, _ = features(config, source)
  images = (
    np.stack([_stored_image(config, shape, rec["image"]) for rec in _read(source, keys.tolist())])
    if len(keys)
    else np.zeros((0, 1, 1, 1), np.uint8)
  )
  mean, std = channel_mean_std(images)
  if fingerprint is not None:
    try:
      os.makedirs(os.path.dirname(path), exist_ok=True)
      io_utils.write_json_atomic(path, {"fingerprint": fingerprint, "mean": list(mean), "std": list(std)})
    except OSError:  # a read-only data dir: recomputed next time
      pass
  return mean, std


def _read(source: Any, keys: list[int]) -> list[dict]:
  return tfds_arrays._read_records(source, keys)  # pylint: disable=protected-access


def _stored_image(config: Any, shape: Optional[tuple], image: Any) -> np.ndarray:
  """A fixed-shape image as stored (uint8); an image of varying size as its evaluation crop."""
  if shape is not None:
    return np.asarray(image, np.uint8)
  array = np.asarray(image, np.uint8)
  return imagenet.crop_resize(
    array, imagenet.center_crop_box(array.shape[0], array.shape[1]), imagenet.image_size(config)
  )


_STATS: dict[tuple, tuple] = {}


def register_stats(config: Any) -> None:
  """Makes ``preprocess(..., dataset=config.dataset)`` standardise with :func:`mean_std` (read once per process and
  data dir; a mocked source, with no files, every time)."""
  key = (config.dataset, resolve_data_dir(config))
  stats = _STATS.get(key)
  if stats is None:
    stats = mean_std(config)
    if tfds_arrays.source_fingerprint(open_split(config, "train")) is not None:
      _STATS[key] = stats
  device_preprocess.MEAN_STD[config.dataset] = stats


# --- batches ---------------------------------------------------------------------------------------------------


class Stored:
  """A fixed-shape record as stored; padded eval slots (mask False) become zero images with label 0."""

  def __init__(self, shape: tuple, with_mask: bool):
    self.shape, self.with_mask = tuple(shape), with_mask

  def __call__(self, record: dict) -> dict:
    valid = bool(record["mask"])
    image = np.asarray(record["image"], np.uint8) if valid else np.zeros(self.shape, np.uint8)
    out = {"image": image, "label": np.int32(record["label"])}
    if self.with_mask:
      out["mask"] = np.bool_(valid)
    return out


def _train_transform(config: Any, epoch: int) -> Any:
  shape, _ = features(config, open_split(config, "train"))
  return (
    Stored(shape, with_mask=False)
    if shape is not None
    else imagenet.TrainCrop(config.seed, epoch, imagenet.image_size(config))
  )


def train_batches(
  config: Any,
  *,
  epoch: int,
  start_step: int,
  global_batch_size: int,
  process_index: int,
  process_count: int,
  subset: Optional[np.ndarray] = None,
) -> Iterator[dict]:
  """This process's ``{'image': uint8 [b, H, W, C], 'label': int32 [b]}`` for steps start_step.. of ``epoch``; the
  positions of the (``subset`` of the) training view, read by record key."""
  view = views(config)["train"]
  n = view.count if subset is None else len(subset)
  b = local_batch_size(global_batch_size, process_count)
  parts = list(
    train_index_batches(
      seed=int(config.seed),
      epoch=epoch,
      n=n,
      global_batch_size=global_batch_size,
      start_step=start_step,
      process_index=process_index,
      process_count=process_count,
    )
  )
  pos = np.concatenate(parts) if parts else np.zeros((0,), np.int64)
  keys = view.start + (pos if subset is None else subset[pos])
  records = imagenet.KeyedRecords(open_split(config, view.split), keys, np.ones(len(keys), bool))
  return imagenet._iterate(records, _train_transform(config, epoch), b, config)  # pylint: disable=protected-access


def gather(config: Any, idx: np.ndarray, subset: Optional[np.ndarray] = None) -> tuple[np.ndarray, np.ndarray]:
  """uint8 images and int32 labels of training positions ``idx`` (any shape): ``data_order='examples'``'s batches,
  read by key. Images of varying size need an epoch for their crops, so that order is refused for them
  (``validate.py``)."""
  view = views(config)["train"]
  flat = np.asarray(idx, np.int64).reshape(-1)
  keys = view.start + (flat if subset is None else subset[flat])
  shape, _ = features(config, open_split(config, "train"))
  if shape is None:
    raise ConfigError(
      f"config.data_order='examples' needs images of one fixed shape; config.dataset="
      f"{config.dataset!r} has images of varying size, so use data_order='batches'."
    )
  records = imagenet.KeyedRecords(open_split(config, view.split), keys, np.ones(len(keys), bool))
  if not len(keys):
    return np.zeros((*np.shape(idx), *shape), np.uint8), np.zeros(np.shape(idx), np.int32)
  batch = next(imagenet._iterate(records, Stored(shape, with_mask=False), len(keys), config))  # pylint: disable=protected-access
  images = np.asarray(batch["image"], np.uint8).reshape(*np.shape(idx), *shape)
  return images, np.asarray(batch["label"], np.int32).reshape(np.shape(idx))


def eval_batches(config: Any, *, batch_size: int, split: str, process_index: int, process_count: int) -> Iterator[dict]:
  """This process's padded batches ``{'image', 'label', 'mask'}`` of 'test' or 'validation'; each example once."""
  view = views(config)[split]
  b = local_batch_size(batch_size, process_count)
  keys, mask = imagenet.eval_keys(view.count, batch_size, process_index, process_count)
  records = imagenet.KeyedRecords(open_split(config, view.split), view.start + keys, mask)
  shape, _ = features(config, open_split(config, "train"))
  transform = Stored(shape, with_mask=True) if shape is not None else imagenet.EvalCrop(imagenet.image_size(config))
  return imagenet._iterate(records, transform, b, config)  # pylint: disable=protected-access
