"""Tests for the ImageNet grain pipeline on ``tfds.testing.mock_data`` (random-size mock JPEG-free images)."""

from __future__ import annotations

import math

import ml_collections
import numpy as np
import pytest
import tensorflow_datasets as tfds

from lamb_lars import input_pipeline as ip
from lamb_lars.input_pipeline import imagenet

MOCK = tfds.testing.MockPolicy.USE_CODE
SIZE = 24  # a tiny crop keeps the tests fast; the default is 224


def make_config(**overrides) -> ml_collections.ConfigDict:
  config = ml_collections.ConfigDict(
    dict(
      dataset="imagenet2012",
      data_dir="/nonexistent",
      data_source="tfds",
      validation_split=0,
      seed=7,
      image_size=SIZE,
      grain_workers=0,
      grain_threads=0,
    )
  )
  config.update(overrides)
  return config


def collect(batches) -> list[dict]:
  return [{k: np.array(v) for k, v in b.items()} for b in batches]


@pytest.mark.parametrize("height,width", [(375, 500), (500, 333), (10, 25), (1, 1), (3, 400), (400, 3)])
def test_random_resized_crop_box_stays_inside_with_allowed_shapes(height, width):
  rng = np.random.default_rng(0)
  for _ in range(200):
    top, left, h, w = imagenet.random_resized_crop_box(height, width, rng)
    assert 0 <= top and top + h <= height and 0 <= left and left + w <= width and h >= 1 and w >= 1
    if height * width > 1000 and 0.3 < width / height < 3:  # not the fallback on ordinary images
      assert 0.08 * 0.8 <= h * w / (height * width) <= 1.0
      assert 3 / 4 * 0.8 <= w / h <= 4 / 3 * 1.25


def test_center_crop_box_is_87_5_percent_of_the_shorter_side():
  assert imagenet.center_crop_box(256, 320) == (16, 48, 224, 224)
  assert imagenet.center_crop_box(1, 1) == (0, 0, 1, 1)


def test_crop_resize_gives_rgb_uint8_of_the_requested_size():
  image = np.random.default_rng(0).integers(0, 256, (40, 60, 3), dtype=np.uint8)
  out = imagenet.crop_resize(image, (0, 0, 40, 60), 16)
  assert out.shape == (16, 16, 3) and out.dtype == np.uint8
  gray = imagenet.crop_resize(image[..., :1], (5, 5, 20, 20), 8)
  assert gray.shape == (8, 8, 3) and np.array_equal(gray[..., 0], gray[..., 2])
  flat = np.full((40, 60, 3), 77, np.uint8)
  assert (imagenet.crop_resize(flat, imagenet.center_crop_box(40, 60), 224) == 77).all()


def test_train_batches_shapes_determinism_resume_and_shards():
  config = make_config()
  with tfds.testing.mock_data(num_examples=70, policy=MOCK):
    info = ip.get_info(config)
    full = collect(ip.train_batches(config, epoch=2, global_batch_size=16))
    again = collect(ip.train_batches(config, epoch=2, global_batch_size=16))
    resumed = collect(ip.train_batches(config, epoch=2, global_batch_size=16, start_step=3))
    shards = [
      collect(ip.train_batches(config, epoch=2, global_batch_size=16, process_index=p, process_count=2))
      for p in range(2)
    ]
    other_epoch = collect(ip.train_batches(config, epoch=3, global_batch_size=16))
  assert (info.num_train, info.num_eval, info.image_shape, info.num_classes, info.in_memory) == (
    70,
    70,
    (SIZE, SIZE, 3),
    1000,
    False,
  )
  assert len(full) == 4 and full[0]["image"].shape == (16, SIZE, SIZE, 3) and full[0]["image"].dtype == np.uint8
  assert full[0]["label"].dtype == np.int32 and set(full[0]) == {"image", "label"}
  for a, b in zip(full, again):
    np.testing.assert_array_equal(a["image"], b["image"])
  assert len(resumed) == 1
  np.testing.assert_array_equal(resumed[0]["image"], full[3]["image"])
  for step in range(4):
    np.testing.assert_array_equal(np.concatenate([s[step]["image"] for s in shards]), full[step]["image"])
    np.testing.assert_array_equal(np.concatenate([s[step]["label"] for s in shards]), full[step]["label"])
  assert not np.array_equal(other_epoch[0]["label"], full[0]["label"])


def test_eval_batches_cover_every_example_once_across_processes():
  config = make_config()
  with tfds.testing.mock_data(num_examples=50, policy=MOCK):
    source = imagenet.open_split("/nonexistent", "validation")
    labels = np.array([source[i]["label"] for i in range(50)])
    per_proc = [collect(ip.eval_batches(config, batch_size=16, process_index=p, process_count=2)) for p in range(2)]
  assert [len(b) for b in per_proc] == [math.ceil(50 / 16)] * 2
  seen = np.concatenate([b["label"][b["mask"]] for step in zip(*per_proc) for b in step])
  np.testing.assert_array_equal(seen, labels)
  last = per_proc[1][-1]
  assert last["image"].shape == (8, SIZE, SIZE, 3) and not last["mask"].any() and not last["image"].any()


def test_validation_split_holds_out_the_end_of_train():
  config = make_config(validation_split=20)
  with tfds.testing.mock_data(num_examples=64, policy=MOCK):
    info = ip.get_info(config)
    train_labels = np.array([imagenet.open_split("/nonexistent", "train")[i]["label"] for i in range(64)])
    evals = collect(ip.eval_batches(config, batch_size=8, split="validation"))
  assert (info.num_train, info.num_eval, info.num_validation) == (44, 64, 20)
  np.testing.assert_array_equal(np.concatenate([b["label"][b["mask"]] for b in evals]), train_labels[44:])


def test_worker_processes_give_the_same_batches():
  with tfds.testing.mock_data(num_examples=24, policy=MOCK):
    threads = collect(ip.train_batches(make_config(), epoch=0, global_batch_size=8))
    workers = collect(ip.train_batches(make_config(grain_workers=1), epoch=0, global_batch_size=8))
  assert len(workers) == 3
  for a, b in zip(threads, workers):
    np.testing.assert_array_equal(a["image"], b["image"])


def test_missing_imagenet_says_how_to_prepare_it(tmp_path):
  with pytest.raises(ip.DatasetNotFoundError, match="manual_dir"):
    ip.get_info(make_config(data_dir=str(tmp_path)))
  with pytest.raises(ValueError, match="not held in memory"):
    ip.load_arrays(make_config(), "train")
