"""``config.dataset='tfds:NAME'`` streamed from ArrayRecord files (input_pipeline/tfds_stream.py) on tiny TFDS datasets
that the test writes itself (no download, no TensorFlow): streamed and in-memory serve the same batches as a plain
numpy reference read record by record, shard per process, resume, evaluate each example once, pick the same
train_examples subset and the same 'standardize' statistics; the auto rule; varying-size images are cropped; train.py
trains on it and counts every evaluated example; a missing dataset is one sentence with exit status 2."""

import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow_datasets as tfds
from PIL import Image

from lamb_lars import input_pipeline as ip
from lamb_lars.configs import default
from lamb_lars.input_pipeline import device_preprocess, mnist, pipeline, tfds_stream, user_data
from lamb_lars.train import validate

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAME, VARYING = "uw_tinyset", "uw_tinysizes"
N_TRAIN, N_TEST = 96, 40


def _png(array: np.ndarray) -> bytes:
  buf = io.BytesIO()
  Image.fromarray(array).save(buf, format="PNG")
  return buf.getvalue()


class Tinyset(tfds.core.GeneratorBasedBuilder, skip_registration=True):
  """8×8×1 images of 3 classes, brighter with the label (learnable in a few steps)."""

  name = NAME
  VERSION = tfds.core.Version("1.0.0")
  code_path = None

  def _info(self):
    return tfds.core.DatasetInfo(
      builder=self,
      features=tfds.features.FeaturesDict(
        {"image": tfds.features.Image(shape=(8, 8, 1)), "label": tfds.features.ClassLabel(num_classes=3)}
      ),
      supervised_keys=("image", "label"),
      disable_shuffling=True,
    )

  def _split_generators(self, dl_manager):
    del dl_manager
    return {"train": self._generate_examples(N_TRAIN, 0), "test": self._generate_examples(N_TEST, 1)}

  def _generate_examples(self, n, seed):
    rng = np.random.default_rng(seed)
    for i in range(n):
      label = int(rng.integers(0, 3))
      yield i, {"image": mnist.gray_png((rng.random((8, 8)) * 80 + label * 80).astype(np.uint8)), "label": label}


class TinySizes(tfds.core.GeneratorBasedBuilder, skip_registration=True):
  """RGB images of varying size (as imagenette's): streamed and cropped."""

  name = VARYING
  VERSION = tfds.core.Version("1.0.0")
  code_path = None

  def _info(self):
    return tfds.core.DatasetInfo(
      builder=self,
      features=tfds.features.FeaturesDict(
        {"image": tfds.features.Image(shape=(None, None, 3)), "label": tfds.features.ClassLabel(num_classes=2)}
      ),
      supervised_keys=("image", "label"),
      disable_shuffling=True,
    )

  def _split_generators(self, dl_manager):
    del dl_manager
    return {"train": self._generate_examples(12, 0), "test": self._generate_examples(5, 1)}

  def _generate_examples(self, n, seed):
    rng = np.random.default_rng(seed)
    for i in range(n):
      h, w = (10, 14) if i % 2 else (16, 9)
      yield i, {"image": _png(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)), "label": i % 2}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
  d = str(tmp_path_factory.mktemp("tfds"))
  for builder in (Tinyset, TinySizes):
    builder(data_dir=d, file_format="array_record").download_and_prepare(
      download_config=tfds.download.DownloadConfig(try_download_gcs=False)
    )
  yield d
  tfds_stream._DECIDED.clear()
  tfds_stream._STATS.clear()
  user_data.clear_memo()
  for name in (NAME, VARYING):
    device_preprocess.MEAN_STD.pop(f"tfds:{name}", None)


def config(data_dir, mode="no", **overrides):
  c = default.get_config()
  c.dataset, c.data_dir, c.dataset_in_memory, c.num_classes = f"tfds:{NAME}", data_dir, mode, 3
  c.grain_threads = 2
  c.update(overrides)
  return c


def reference(data_dir, split="train"):
  """Every record of a split, read one by one straight from tfds (not through lamb_lars)."""
  source = tfds.data_source(NAME, split=split, data_dir=data_dir, download=False)
  records = [source[i] for i in range(len(source))]
  return np.stack([r["image"] for r in records]).astype(np.uint8), np.array([r["label"] for r in records], np.int32)


def collect(batches):
  return [{k: np.array(v) for k, v in b.items()} for b in batches]


@pytest.mark.parametrize("mode", ["no", "yes"])
def test_batches_match_a_numpy_reference_in_both_modes(data_dir, mode):
  c = config(data_dir, mode, validation_split=8, seed=3)
  x, y = reference(data_dir)
  x_test, y_test = reference(data_dir, "test")
  info = ip.get_info(c)
  assert (info.num_train, info.num_eval, info.num_validation, info.image_shape, info.num_classes, info.in_memory) == (
    88,
    40,
    8,
    (8, 8, 1),
    3,
    mode == "yes",
  )
  full = collect(ip.train_batches(c, epoch=2, global_batch_size=16))
  order = ip.epoch_permutation(3, 2, 88)[:80].reshape(5, 16)  # the documented order, on the first 88 examples
  assert len(full) == 5
  for step, batch in enumerate(full):
    np.testing.assert_array_equal(batch["image"], x[order[step]])
    np.testing.assert_array_equal(batch["label"], y[order[step]])
  resumed = collect(ip.train_batches(c, epoch=2, start_step=3, global_batch_size=16))
  assert [b["label"].tolist() for b in resumed] == [b["label"].tolist() for b in full[3:]]
  shards = [
    collect(ip.train_batches(c, epoch=2, global_batch_size=16, process_index=p, process_count=2)) for p in range(2)
  ]
  for step in range(5):
    np.testing.assert_array_equal(np.concatenate([s[step]["image"] for s in shards]), full[step]["image"])
  for split, (xs, ys) in (("test", (x_test, y_test)), ("validation", (x[88:], y[88:]))):
    parts = [
      collect(ip.eval_batches(c, batch_size=12, split=split, process_index=p, process_count=2)) for p in range(2)
    ]
    assert len(parts[0]) == len(parts[1]) == -(-len(ys) // 12)
    kept = lambda key: np.concatenate([p[j][key][p[j]["mask"]] for j in range(len(parts[0])) for p in parts])
    np.testing.assert_array_equal(kept("label"), ys)  # each example once, in order, padding masked out
    np.testing.assert_array_equal(kept("image"), xs)
  got_x, got_y = ip.train_gatherer(c)(np.array([[5, 0], [87, 5]]))
  np.testing.assert_array_equal(got_x, x[[[5, 0], [87, 5]]])
  np.testing.assert_array_equal(got_y, y[[[5, 0], [87, 5]]])


@pytest.mark.parametrize("mode", ["no", "yes"])
def test_train_examples_subset_and_statistics_are_the_same_in_both_modes(data_dir, mode, monkeypatch):
  monkeypatch.setattr(tfds_stream, "STATS_EXAMPLES", 30)  # a sample smaller than the split: the sampled rule
  device_preprocess.MEAN_STD.pop(f"tfds:{NAME}", None)
  tfds_stream._STATS.clear()
  user_data.clear_memo()
  for stale in __import__("glob").glob(os.path.join(data_dir, "npy_cache", NAME, "*", "train.mean_std.json")):
    os.remove(stale)
  c = config(data_dir, mode, train_examples=40, train_examples_seed=5)
  x, y = reference(data_dir)
  info = ip.get_info(c)
  assert info.num_train == 40
  keep = pipeline.train_subset(5, N_TRAIN, 40)
  batch = collect(ip.train_batches(c, epoch=0, global_batch_size=8))[1]
  want = keep[ip.epoch_permutation(c.seed, 0, 40)[8:16]]
  np.testing.assert_array_equal(batch["image"], x[want])
  got = ip.train_gatherer(c)(np.arange(40))
  np.testing.assert_array_equal(got[1], y[keep])
  # 'standardize': per-channel mean/std (float64, [0, 1] scale) of the 30 sampled training images
  sample = np.sort(
    np.random.default_rng(np.random.SeedSequence([tfds_stream.STATS_KEY, N_TRAIN])).permutation(N_TRAIN)[:30]
  )
  pixels = x[sample].astype(np.float64).ravel() / 255.0
  mean, std = device_preprocess.MEAN_STD[c.dataset]
  np.testing.assert_allclose([mean[0], std[0]], [pixels.mean(), pixels.std()], rtol=1e-12)
  device_preprocess.MEAN_STD.pop(c.dataset)
  tfds_stream._STATS.clear()
  user_data.clear_memo()


def test_auto_holds_small_data_in_memory_and_streams_the_rest(data_dir, monkeypatch):
  tfds_stream._DECIDED.clear()
  assert ip.get_info(config(data_dir, "auto")).in_memory  # 136 × 64 bytes
  tfds_stream._DECIDED.clear()
  monkeypatch.setattr(tfds_stream, "IN_MEMORY_BYTES", 136 * 64 - 1)
  assert not ip.get_info(config(data_dir, "auto")).in_memory
  tfds_stream._DECIDED.clear()
  with pytest.raises(ValueError, match="config.dataset_in_memory='maybe' is not one of 'auto', 'yes', 'no'"):
    ip.get_info(config(data_dir, "maybe"))


def test_images_of_varying_size_are_streamed_and_cropped(data_dir):
  c = config(data_dir, "auto", dataset=f"tfds:{VARYING}", num_classes=2, image_size=6, seed=1)
  info = ip.get_info(c)
  assert (info.num_train, info.num_eval, info.image_shape, info.num_classes, info.in_memory) == (
    12,
    5,
    (6, 6, 3),
    2,
    False,
  )
  a = collect(ip.train_batches(c, epoch=0, global_batch_size=4))
  b = collect(ip.train_batches(c, epoch=0, global_batch_size=4, start_step=1))
  assert len(a) == 3 and a[0]["image"].shape == (4, 6, 6, 3)
  np.testing.assert_array_equal(a[1]["image"], b[0]["image"])  # crops keyed by (seed, epoch, key): resumable
  ev = collect(ip.eval_batches(c, batch_size=4))
  assert sum(int(e["mask"].sum()) for e in ev) == 5
  with pytest.raises(ValueError, match="images of varying size, which cannot be held in memory"):
    ip.get_info(config(data_dir, "yes", dataset=f"tfds:{VARYING}", num_classes=2))
  with pytest.raises(
    ValueError, match="^config.data_order='examples' needs a dataset held in memory or images of one fixed shape;"
  ):
    validate.validate(
      config(
        data_dir,
        "auto",
        dataset=f"tfds:{VARYING}",
        num_classes=2,
        image_size=6,
        data_order="examples",
        model="mlp",
        batch_size=4,
        eval_batch_size=4,
      ),
      1,
    )


def test_a_streamed_dataset_validates_with_data_order_examples(data_dir):
  plan = validate.validate(
    config(data_dir, "no", data_order="examples", model="mlp", batch_size=16, eval_batch_size=20, num_train_steps=4), 1
  )
  assert plan.num_train == N_TRAIN
  with pytest.raises(ValueError, match="^config.data_on_device='yes' needs a dataset held in memory"):
    validate.validate(config(data_dir, "no", data_on_device="yes", model="mlp", batch_size=16, eval_batch_size=20), 1)


def _train_py(args, cwd, timeout=600):
  env = {**os.environ, "PYTHONPATH": ROOT}
  env.pop("XLA_FLAGS", None)
  command = [sys.executable, os.path.join(ROOT, "train.py"), "--config=lamb_lars/configs/default.py"] + args
  return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_train_py_trains_on_a_streamed_tfds_dataset(data_dir, tmp_path):
  """A few steps of an MLP on the streamed dataset through train.py (data_order='examples', 8 held out): every
  evaluation counts the 40 test and 8 validation examples exactly once, and the loss falls."""
  work = tmp_path / "run"
  proc = _train_py(
    [
      f"--workdir={work}",
      f"--config.dataset=tfds:{NAME}",
      f"--config.data_dir={data_dir}",
      "--config.dataset_in_memory=no",
      "--config.num_classes=3",
      "--config.model=mlp",
      "--config.batch_size=16",
      "--config.eval_batch_size=12",
      "--config.num_train_steps=10",
      "--config.eval_every_steps=5",
      "--config.validation_split=8",
      "--config.data_order=examples",
      "--config.optimizer.learning_rate=0.1",
      "--config.optimizer.base_batch_size=16",
      "--config.diagnostics.noise_scale=False",
      "--config.progress=False",
    ],
    ROOT,
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  rows = [json.loads(line) for line in open(work / "metrics.jsonl")]
  evals = [r for r in rows if "eval_examples" in r]
  assert [r["step"] for r in evals] == [5, 10]
  assert all(r["eval_examples"] == 40 and r["validation_examples"] == 8 for r in evals)
  assert json.load(open(work / "result.json"))["status"] == "done"


@pytest.mark.slow
def test_train_py_missing_tfds_dataset_is_one_sentence_exit_2(data_dir, tmp_path):
  proc = _train_py(
    [
      f"--workdir={tmp_path / 'run'}",
      "--config.dataset=tfds:uw_nosuch",
      f"--config.data_dir={data_dir}",
      "--config.dataset_in_memory=no",
    ],
    ROOT,
  )
  assert proc.returncode == 2, proc.stderr[-3000:]
  lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
  assert len(lines) == 1 and f"No prepared TFDS dataset 'uw_nosuch' (ArrayRecord) in {data_dir}" in lines[0], lines
  assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_streamed_and_in_memory_train_to_the_same_numbers(data_dir, tmp_path):
  """The trainer on the streamed dataset (data_order='batches', two epochs of 6 steps) gives bit-identical losses and
  accuracies to the trainer on the same dataset held in memory (host-fed, so both run the same compiled step)."""
  from lamb_lars.train import trainer

  rows = {}
  for mode in ("no", "yes"):
    c = config(
      data_dir,
      mode,
      model="mlp",
      batch_size=16,
      eval_batch_size=12,
      num_train_steps=12,
      eval_every_steps=6,
      data_on_device="no",
      num_devices=1,
      progress=False,
    )
    c.optimizer.base_batch_size, c.optimizer.learning_rate = 16, 0.1
    c.diagnostics.noise_scale = False
    result = trainer.train_and_evaluate(c, str(tmp_path / mode))
    assert result["status"] == "done"
    rows[mode] = [json.loads(line) for line in open(tmp_path / mode / "metrics.jsonl")]
  keys = ("step", "train_loss", "eval_loss", "eval_accuracy", "eval_examples")
  assert [[r.get(k) for k in keys] for r in rows["no"]] == [[r.get(k) for k in keys] for r in rows["yes"]]
  assert [r["step"] for r in rows["no"] if "eval_loss" in r] == [6, 12]
  assert all(r.get("train_loss") is not None for r in rows["no"]) and rows["no"][-1]["eval_examples"] == 40
