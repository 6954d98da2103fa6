"""ImageNet (ILSVRC-2012, tfds ``imagenet2012``) through ``tfds.data_source`` + grain, cropped on the host.

* Training: Inception-style random-resized crop (area 8–100 %, aspect ratio 3/4–4/3, 10 tries then a center
  crop; torchvision's RandomResizedCrop) resized bicubically to ``image_size``², flipped with probability ½.
  The randomness of an example is keyed by (seed, epoch, record key), so it does not depend on workers,
  threads, sharding or where a resumed run starts.
* Evaluation: the central square covering 87.5 % of the shorter side (≡ resize the shorter side to 256, center
  crop 224) resized to ``image_size``²; padded to whole batches with a ``mask``.
* Order and sharding are the same index arithmetic as the in-memory datasets (``common.py``): process ``p``
  reads only its slice of each global batch, random access by record key, no iterator state to restore.
Images leave the host as uint8; mean/std normalisation is on device (``device_preprocess.py``).
"""

from __future__ import annotations

import math
import os
from typing import Any, Iterator, Sequence

from absl import flags
import numpy as np
from PIL import Image

from lamb_lars.input_pipeline import tfds_arrays
from lamb_lars.input_pipeline.common import (
  SplitView,
  eval_index_batches,
  local_batch_size,
  resolve_data_dir,
  split_views,
  train_index_batches,
)

NAME = "imagenet2012"
NUM_CLASSES = 1000
TRAIN_SPLIT, EVAL_SPLIT = "train", "validation"
CROP_FRACTION = 0.875
AREA_RANGE = (0.08, 1.0)
RATIO_RANGE = (3 / 4, 4 / 3)
ATTEMPTS = 10


def howto(data_dir: str) -> str:
  """One sentence on preparing ImageNet, which tfds cannot download."""
  return (
    f"No prepared tfds 'imagenet2012' (ArrayRecord) in {data_dir}: download ILSVRC2012_img_train.tar and "
    f"ILSVRC2012_img_val.tar from image-net.org into a folder DIR, then on a machine with TensorFlow run "
    f"`tfds build imagenet2012 --manual_dir=DIR --file_format=array_record --data_dir={data_dir}`, or copy "
    f"an already prepared imagenet2012/5.1.0 ArrayRecord directory into {data_dir}."
  )


def open_split(data_dir: str, split: str) -> Sequence[dict]:
  return tfds_arrays.open_tfds_source(NAME, split, data_dir, howto(data_dir))


def views(config: Any) -> dict[str, SplitView]:
  """'train'/'test'/'validation' views: 'test' is tfds' 'validation' split (the 50,000 images every paper reports);
  with ``validation_split`` > 0 the last examples of tfds' 'train' are our 'validation' hold-out."""
  data_dir = resolve_data_dir(config)
  n_train = len(open_split(data_dir, TRAIN_SPLIT))
  n_test = len(open_split(data_dir, EVAL_SPLIT))
  return split_views(n_train, n_test, int(config.validation_split), train_split=TRAIN_SPLIT, test_split=EVAL_SPLIT)


def image_size(config: Any) -> int:
  return int(config.image_size)


# --- crops (pure functions of the image size and an rng) -------------------------------------------------


def random_resized_crop_box(height: int, width: int, rng: np.random.Generator) -> tuple[int, int, int, int]:
  """(top, left, crop_height, crop_width) of an Inception-style random crop."""
  area = height * width
  log_ratio = (math.log(RATIO_RANGE[0]), math.log(RATIO_RANGE[1]))
  for _ in range(ATTEMPTS):
    target_area = area * rng.uniform(*AREA_RANGE)
    ratio = math.exp(rng.uniform(*log_ratio))
    w = int(round(math.sqrt(target_area * ratio)))
    h = int(round(math.sqrt(target_area / ratio)))
    if 0 < w <= width and 0 < h <= height:
      return int(rng.integers(0, height - h + 1)), int(rng.integers(0, width - w + 1)), h, w
  in_ratio = width / height  # fallback: the whole image, cut to the allowed aspect ratio, centred
  if in_ratio < RATIO_RANGE[0]:
    w, h = width, int(round(width / RATIO_RANGE[0]))
  elif in_ratio > RATIO_RANGE[1]:
    h, w = height, int(round(height * RATIO_RANGE[1]))
  else:
    h, w = height, width
  return (height - h) // 2, (width - w) // 2, h, w


def center_crop_box(height: int, width: int) -> tuple[int, int, int, int]:
  """(top, left, side, side): the central square covering CROP_FRACTION of the shorter side."""
  side = max(1, int(round(CROP_FRACTION * min(height, width))))
  return (height - side) // 2, (width - side) // 2, side, side


def crop_resize(image: np.ndarray, box: tuple[int, int, int, int], size: int) -> np.ndarray:
  """uint8 [size, size, 3]: the box of an RGB/grayscale uint8 image, resized bicubically (one PIL call)."""
  top, left, h, w = box
  array = np.asarray(image, np.uint8)
  pil = Image.fromarray(array[..., 0] if array.ndim == 3 and array.shape[-1] == 1 else array)
  if pil.mode != "RGB":
    pil = pil.convert("RGB")
  out = pil.resize((size, size), Image.Resampling.BICUBIC, box=(left, top, left + w, top + h))
  return np.asarray(out, np.uint8)


# --- grain pipeline ---------------------------------------------------------------------------------------


class KeyedRecords:
  """A grain source over record ``keys`` of a tfds data source; padded slots (mask False) are not read."""

  def __init__(self, source: Sequence[dict], keys: np.ndarray, mask: np.ndarray):
    self.source, self.keys, self.mask = source, keys, mask

  def __len__(self) -> int:
    return len(self.keys)

  def __getitem__(self, i: int) -> dict:
    key, valid = int(self.keys[i]), bool(self.mask[i])
    record = self.source[key] if valid else {"image": None, "label": 0}
    return {"image": record["image"], "label": record["label"], "key": key, "mask": valid}


class TrainCrop:
  """Random-resized crop + flip, randomness keyed by (seed, epoch, record key)."""

  def __init__(self, seed: int, epoch: int, size: int):
    self.seed, self.epoch, self.size = int(seed) % 2**63, int(epoch), size

  def __call__(self, record: dict) -> dict:
    rng = np.random.default_rng([self.seed, self.epoch, record["key"]])
    image = np.asarray(record["image"])
    out = crop_resize(image, random_resized_crop_box(image.shape[0], image.shape[1], rng), self.size)
    if rng.random() < 0.5:
      out = out[:, ::-1]
    return {"image": np.ascontiguousarray(out), "label": np.int32(record["label"])}


class EvalCrop:
  """Center crop; padded slots become zero images with label 0 and mask False."""

  def __init__(self, size: int):
    self.size = size

  def __call__(self, record: dict) -> dict:
    if not record["mask"]:
      image = np.zeros((self.size, self.size, 3), np.uint8)
    else:
      image = np.asarray(record["image"])
      image = crop_resize(image, center_crop_box(image.shape[0], image.shape[1]), self.size)
    return {"image": image, "label": np.int32(record["label"]), "mask": np.bool_(record["mask"])}


def _iterate(records: KeyedRecords, transform: Any, batch: int, config: Any) -> Iterator[dict]:
  """Batches of ``transform(records[i])`` in order, with threads and optional worker processes."""
  if len(records) == 0:
    return iter(())
  import grain  # noqa: PLC0415  (0.2–0.4 s to import: only a run that reads through grain pays it)

  ds = grain.MapDataset.source(records).map(transform).batch(batch, drop_remainder=False)
  threads = int(config.grain_threads) or min(16, 2 * (os.cpu_count() or 1))
  it = ds.to_iter_dataset(grain.ReadOptions(num_threads=threads, prefetch_buffer_size=min(4096, 2 * batch)))
  workers = int(config.grain_workers)
  if workers > 0:
    if not flags.FLAGS.is_parsed():  # grain's mp_prefetch reads absl flags; outside absl.app use their defaults
      flags.FLAGS.mark_as_parsed()
    it = it.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
  return iter(it)


def train_batches(
  config: Any, *, epoch: int, start_step: int, global_batch_size: int, process_index: int, process_count: int
) -> Iterator[dict]:
  """This process's ``{'image': uint8 [b, S, S, 3], 'label': int32 [b]}`` for steps start_step.. of epoch."""
  view = views(config)["train"]
  b = local_batch_size(global_batch_size, process_count)
  parts = list(
    train_index_batches(
      seed=int(config.seed),
      epoch=epoch,
      n=view.count,
      global_batch_size=global_batch_size,
      start_step=start_step,
      process_index=process_index,
      process_count=process_count,
    )
  )
  keys = view.start + (np.concatenate(parts) if parts else np.zeros((0,), np.int64))
  records = KeyedRecords(open_split(resolve_data_dir(config), view.split), keys, np.ones(len(keys), bool))
  transform = TrainCrop(config.seed, epoch, image_size(config))
  return _iterate(records, transform, b, config)


def eval_keys(count: int, batch_size: int, process_index: int, process_count: int) -> tuple[np.ndarray, np.ndarray]:
  """This process's record keys (offsets into a split of ``count`` examples) for exact evaluation, padded to whole
  batches, and the mask that marks the real ones."""
  parts = list(
    eval_index_batches(n=count, global_batch_size=batch_size, process_index=process_index, process_count=process_count)
  )
  keys = np.concatenate([idx for idx, _ in parts]) if parts else np.zeros((0,), np.int64)
  mask = np.concatenate([m for _, m in parts]) if parts else np.zeros((0,), bool)
  return keys, mask


def eval_batches(
  config: Any, *, batch_size: int, split: str = "test", process_index: int, process_count: int
) -> Iterator[dict]:
  """This process's padded batches ``{'image', 'label', 'mask'}`` of 'test' or 'validation'; each example once."""
  view = views(config)[split]
  b = local_batch_size(batch_size, process_count)
  keys, mask = eval_keys(view.count, batch_size, process_index, process_count)
  records = KeyedRecords(open_split(resolve_data_dir(config), view.split), view.start + keys, mask)
  return _iterate(records, EvalCrop(image_size(config)), b, config)


def prepare(config: Any) -> None:
  """Check that both splits are there (ImageNet cannot be prepared here; see ``howto``)."""
  views(config)


def num_examples(config: Any) -> tuple[int, int]:
  """(num_train, num_test) after the validation hold-out."""
  v = views(config)
  return v["train"].count, v["test"].count


def info_shape(config: Any) -> tuple[int, int, int]:
  size = image_size(config)
  return (size, size, 3)
