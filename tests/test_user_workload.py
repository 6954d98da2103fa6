"""A researcher's own model and dataset (config.model / config.dataset as import paths, tfds:NAME, train_examples):
they train, BN groups reach their BatchNorm layers, the train_examples subset is fixed and resume-exact, and each bad
input is refused in one sentence before anything compiles (docs/workloads.md)."""

import functools
import json
import os
import shutil
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow_datasets as tfds

from lamb_lars import input_pipeline as ip
from lamb_lars import models
from lamb_lars.configs import default
from lamb_lars.input_pipeline import pipeline
from lamb_lars.models import bn_groups
from lamb_lars.train import validate

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODULE = "uw_test_workload"

SOURCE = textwrap.dedent('''
    """A workload outside lamb_lars, as a researcher writes it (tests/test_user_workload.py)."""
    from typing import Any, Callable
    import flax.linen as nn
    import jax.numpy as jnp
    import numpy as np


    class Net(nn.Module):
      num_classes: int
      dtype: Any = jnp.float32
      norm: Callable[..., nn.Module] = nn.BatchNorm

      @nn.compact
      def __call__(self, x, train: bool):
        x = nn.Conv(8, (3, 3), dtype=self.dtype, name="conv")(x.astype(self.dtype))
        x = nn.relu(self.norm(use_running_average=not train, dtype=self.dtype, name="bn")(x))
        return nn.Dense(self.num_classes, dtype=self.dtype, name="head")(x.mean((1, 2))).astype(jnp.float32)


    def wrong_signature(classes):
      return Net(num_classes=classes)


    def not_a_module(num_classes, dtype, norm):
      return lambda x: x


    class WrongOutput(Net):
      def __call__(self, x, train: bool):
        return super().__call__(x, train)[:, :2]


    def _images(n, seed):
      rng = np.random.default_rng(seed)
      labels = rng.integers(0, 3, n)
      images = (rng.random((n, 8, 8, 1)) * 80 + labels[:, None, None, None] * 80).astype(np.uint8)
      return images, labels


    def load():
      return {"train": _images(96, 0), "test": _images(40, 1)}


    def load_with_validation():
      return {"train": _images(96, 0), "validation": _images(24, 2), "test": _images(40, 1), "num_classes": 3}


    def load_float():
      x, y = _images(96, 0)
      return {"train": (x / 255.0, y), "test": _images(40, 1)}


    def load_short_labels():
      x, y = _images(96, 0)
      return {"train": (x, y[:50]), "test": _images(40, 1)}


    def load_labels_too_big():
      return {"train": _images(96, 0), "test": _images(40, 1), "num_classes": 2}


    def load_negative_labels():
      x, y = _images(96, 0)
      return {"train": (x, y - 1), "test": _images(40, 1)}


    def load_test_shape():
      x, y = _images(40, 1)
      return {"train": _images(96, 0), "test": (x[:, :4], y)}


    def load_list():
      return [1, 2]
    ''')


@pytest.fixture(scope="module")
def workload_dir(tmp_path_factory):
  d = tmp_path_factory.mktemp("workload")
  (d / f"{MODULE}.py").write_text(SOURCE)
  sys.path.insert(0, str(d))
  yield d
  sys.path.remove(str(d))
  sys.modules.pop(MODULE, None)


def config(**overrides):
  c = default.get_config()
  c.model, c.dataset, c.num_classes = f"{MODULE}:Net", f"{MODULE}:load", 3
  c.batch_size, c.eval_batch_size, c.num_train_steps, c.progress = 16, 20, 6, False
  c.optimizer.base_batch_size = 16
  c.diagnostics.noise_scale = False
  for k, v in overrides.items():
    node = c
    *path, last = k.split(".")
    for p in path:
      node = node[p]
    node[last] = v
  return c


def test_user_dataset_is_in_memory_with_its_own_validation_split(workload_dir):
  info = ip.get_info(config(dataset=f"{MODULE}:load_with_validation"))
  assert (info.num_train, info.num_eval, info.num_validation, info.image_shape, info.num_classes, info.in_memory) == (
    96,
    40,
    24,
    (8, 8, 1),
    3,
    True,
  )
  evals = list(ip.eval_batches(config(dataset=f"{MODULE}:load_with_validation"), batch_size=20, split="validation"))
  assert sum(int(b["mask"].sum()) for b in evals) == 24  # exact: the padded 16 of the last batch are masked
  info = ip.get_info(config(validation_split=16))
  assert (info.num_train, info.num_validation) == (80, 16)


def test_standardize_uses_the_training_statistics(workload_dir):
  c = config()
  images, _ = ip.load_arrays(c, "train")
  x = np.asarray(ip.preprocess(jnp.asarray(images), dataset=c.dataset, train=True), np.float64)
  assert abs(x.mean()) < 1e-5 and abs(x.std() - 1.0) < 1e-4


def test_train_examples_subset_is_fixed_nested_and_seeded(workload_dir):
  full_x, full_y = ip.load_arrays(config(), "train")
  c = config(train_examples=40)
  x, y = ip.load_arrays(c, "train")
  idx = pipeline.train_subset(0, 96, 40)
  # membership: an independent recomputation from the documented rule (first 40 of the keyed permutation, sorted)
  perm = np.random.default_rng(np.random.SeedSequence([pipeline.SUBSET_KEY, 0, 96])).permutation(96)
  np.testing.assert_array_equal(idx, np.sort(perm[:40]))
  np.testing.assert_array_equal(x, full_x[idx])
  np.testing.assert_array_equal(y, full_y[idx])
  assert set(pipeline.train_subset(0, 96, 20)) <= set(idx)  # nested
  assert set(pipeline.train_subset(1, 96, 40)) != set(idx)  # the seed picks another subset
  assert ip.get_info(c).num_train == 40
  # order: epoch e trains on the subset in the keyed permutation of range(40), the same every time
  b1 = [b["label"].tolist() for b in ip.train_batches(c, epoch=1, global_batch_size=16)]
  b2 = [b["label"].tolist() for b in ip.train_batches(c, epoch=1, global_batch_size=16)]
  want = y[ip.epoch_permutation(c.seed, 1, 40)[:32]].reshape(2, 16).tolist()
  assert b1 == b2 == want


def test_train_examples_on_mnist_sized_synthetic_data():
  c = default.get_config()
  c.dataset, c.train_examples = "synthetic", 100
  full = ip.load_arrays(c.copy_and_resolve_references(), "train")
  c2 = c.copy_and_resolve_references()
  c2.train_examples = 0
  x_all, _ = ip.load_arrays(c2, "train")
  x, _ = ip.load_arrays(c, "train")
  np.testing.assert_array_equal(x, x_all[pipeline.train_subset(0, len(x_all), 100)])
  batch = next(iter(ip.train_batches(c, epoch=0, global_batch_size=10)))
  np.testing.assert_array_equal(batch["image"], x[ip.epoch_permutation(0, 0, 100)[:10]])
  del full


def test_bn_groups_reach_the_users_batchnorm(workload_dir):
  """A ghost batch of 4 inside the user's model normalises each 4 alone: the logits of 8 examples equal those of
  each half through flax's own nn.BatchNorm (an independent implementation)."""
  x = jax.random.normal(jax.random.PRNGKey(0), (8, 8, 8, 1)) + jnp.repeat(jnp.array([0.0, 3.0]), 4)[:, None, None, None]
  ghost = models.create_model(
    f"{MODULE}:Net", num_classes=3, norm=functools.partial(bn_groups.GroupBatchNorm, ghost_batch_size=4)
  )
  plain = models.create_model(
    f"{MODULE}:Net", num_classes=3, norm=functools.partial(__import__("flax").linen.BatchNorm, epsilon=1e-5)
  )
  v = ghost.init(jax.random.PRNGKey(1), x, train=False)
  got, _ = ghost.apply(v, x, train=True, mutable=["batch_stats"])
  for half in (slice(0, 4), slice(4, 8)):
    want, _ = plain.apply(v, x[half], train=True, mutable=["batch_stats"])
    np.testing.assert_allclose(np.asarray(got[half]), np.asarray(want), rtol=1e-4, atol=1e-5)


def test_the_trainer_builds_the_users_batchnorm_from_config_bn(workload_dir):
  """trainer.build_model hands the user's module the norm of config.bn: with ghost batches of 4 the running mean and
  variance after one training step are momentum·init + (1 − momentum)·(the mean over ghost batches of each one's
  mean and *unbiased* variance), recomputed here in float64 from the user's own conv output."""
  import flax.linen as nn
  from lamb_lars.train import mesh as mesh_lib, parallel, trainer

  c = config(batch_size=8, **{"bn.ghost_batch_size": 4, "bn.momentum": 0.8}, num_devices=1)
  plan = validate.validate(c, 1)
  model = trainer.build_model(c, plan, parallel.make(c, mesh_lib.make_mesh(1, jax.devices()[:1])))
  x = np.array(jax.random.normal(jax.random.PRNGKey(0), (8, 8, 8, 1)), np.float32)
  x[4:] += 3.0
  v = model.init(jax.random.PRNGKey(1), jnp.asarray(x), train=False)
  mesh = mesh_lib.make_mesh(1, jax.devices()[:1])
  P = jax.sharding.PartitionSpec
  step = jax.shard_map(
    lambda v, x: model.apply(v, x, train=True, mutable=["batch_stats"])[1],
    mesh=mesh,
    in_specs=(P(), P(mesh_lib.DATA_AXES)),
    out_specs=P(),
  )  # as the train step runs it
  new = step(v, jnp.asarray(x))
  h = np.asarray(nn.Conv(8, (3, 3)).apply({"params": v["params"]["conv"]}, jnp.asarray(x)), np.float64)
  groups = h.reshape(2, 4 * 8 * 8, 8)  # ghost batches of 4 examples × 8×8 positions
  want_mean = 0.2 * groups.mean(1).mean(0)
  want_var = 0.8 + 0.2 * groups.var(1, ddof=1).mean(0)
  np.testing.assert_allclose(np.asarray(new["batch_stats"]["bn"]["mean"]), want_mean, rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(np.asarray(new["batch_stats"]["bn"]["var"]), want_var, rtol=1e-4, atol=1e-6)


BAD = [
  (dict(model="uw_no_such_module:Net"), "module 'uw_no_such_module' cannot be imported"),
  (dict(model=f"{MODULE}:Missing"), "has no attribute 'Missing'"),
  (
    dict(model=f"{MODULE}:wrong_signature"),
    "cannot be called as wrong_signature(num_classes=..., dtype=..., norm=...)",
  ),
  (dict(model=f"{MODULE}:not_a_module"), "returned a function, not a flax.linen.Module"),
  (dict(model=f"{MODULE}:WrongOutput"), "it must return logits of shape (batch, num_classes) = (1, 3)"),
  (dict(model="nets.py"), "is not one of"),
  (dict(dataset="uw_no_such_module:load"), "module 'uw_no_such_module' cannot be imported"),
  (dict(dataset=f"{MODULE}:load_float"), "must be uint8 of shape [N, height, width, channels]"),
  (dict(dataset=f"{MODULE}:load_short_labels"), "they must be integers of shape [96], one per image"),
  (dict(dataset=f"{MODULE}:load_labels_too_big"), "outside [0, num_classes) = [0, 2)"),
  (dict(dataset=f"{MODULE}:load_negative_labels"), "has labels in [-1, 1], outside [0, num_classes)"),
  (dict(dataset=f"{MODULE}:load_test_shape"), "split 'test' has images of shape (4, 8, 1)"),
  (dict(dataset=f"{MODULE}:load_list"), "must return a dict with 'train' and 'test'"),
  (dict(num_classes=5), "config.num_classes=5 but dataset 'uw_test_workload:load' has 3 classes"),
  (dict(train_examples=97), "config.train_examples=97 is larger than the 96 training examples"),
  (dict(dataset=f"{MODULE}:load_with_validation", validation_split=8), "returns its own 'validation' split"),
  (dict(model_width=0.0), "config.model_width=0.0 must be a finite number > 0"),
  (dict(model="lenet5", model_depth=2), "config.model_depth=2 applies to model 'mlp' only"),
]


@pytest.mark.parametrize("overrides,message", BAD, ids=[m[:40] for _, m in BAD])
def test_bad_workload_is_one_sentence(workload_dir, overrides, message):
  with pytest.raises(ValueError) as e:
    validate.validate(config(**overrides), 1)
  text = str(e.value)
  assert message in text, text
  assert "\n" not in text and text.endswith((".", ")")), text


@pytest.mark.parametrize("overrides,message", BAD, ids=[m[:40] for _, m in BAD])
def test_bad_workload_inside_a_study_is_refused_before_any_trial(workload_dir, overrides, message):
  from lamb_lars.study.running import trial_checks

  class Spec:
    run_id, env = "t0", {}

  Spec.config = config(**overrides)
  with pytest.raises(ValueError, match="^trial t0: ") as e:
    trial_checks.validate_trials([Spec], {})
  assert message in str(e.value)


def test_train_py_exits_2_with_one_sentence(workload_dir, tmp_path):
  env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, str(workload_dir)])}
  proc = subprocess.run(
    [
      sys.executable,
      os.path.join(ROOT, "train.py"),
      "--config=lamb_lars/configs/default.py",
      f"--workdir={tmp_path / 'run'}",
      f"--config.model={MODULE}:Net",
      f"--config.dataset={MODULE}:load_labels_too_big",
      "--config.num_classes=3",
    ],
    cwd=ROOT,
    env=env,
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert proc.returncode == 2, proc.stderr[-2000:]
  lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
  assert len(lines) == 1 and "outside [0, num_classes) = [0, 2)" in lines[0], proc.stderr[-2000:]


STUDY = textwrap.dedent('''
    """A tiny study on the test workload (tests/test_user_workload.py)."""
    import ml_collections
    from lamb_lars.configs import default
    from lamb_lars.configs.studies import common


    def get_config(part=""):
      base = default.get_config()
      base.model, base.dataset, base.num_classes = "uw_test_workload:Net", "uw_test_workload:" + (part or "load"), 3
      base.num_epochs, base.progress, base.eval_batch_size = 1.0, False, 20
      base.optimizer.base_batch_size, base.optimizer.lr_scaling = 16, "linear"
      base.diagnostics.noise_scale = False
      c = ml_collections.ConfigDict()
      c.name, c.base = "uw_tiny", base
      c.sweeps = (dict(name="baseline", role="baseline", fixed={"batch_size": 16}),
                  dict(name="linear", role="linear", grid={"batch_size": (32,)}))
      c.search = common.search()
      c.replicates = common.replicates(num_seeds=0)
      c.runner = common.runner(num_workers=1, cpus_per_trial=0)
      c.analysis = common.analysis(num_train=96, baseline_epochs=1.0, target_goal=0.5)
      return c
    ''')


@pytest.mark.slow
def test_study_cli_refuses_a_bad_workload_before_any_trial(workload_dir, tmp_path):
  """`python -m lamb_lars.study run` on a study whose loader breaks the contract: one sentence naming the trial,
  exit status 2, and no workdir (nothing started)."""
  (tmp_path / "uw_study.py").write_text(STUDY)
  env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, str(workload_dir)])}
  proc = subprocess.run(
    [sys.executable, "-m", "lamb_lars.study", "run", "--config=uw_study.py:load_labels_too_big", "--workdir=w"],
    cwd=tmp_path,
    env=env,
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert proc.returncode == 2, proc.stderr[-2000:]
  lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
  assert len(lines) == 1 and lines[0].startswith("error: trial ") and "outside [0, num_classes) = [0, 2)" in lines[0]
  assert not (tmp_path / "w").exists()


def test_tfds_dataset_through_data_source_without_tensorflow():
  c = default.get_config()
  c.dataset, c.data_dir, c.validation_split = "tfds:fashion_mnist", "/nonexistent", 8
  with tfds.testing.mock_data(num_examples=40, policy=tfds.testing.MockPolicy.USE_CODE):
    info = ip.get_info(c)
    train = list(ip.train_batches(c, epoch=0, global_batch_size=16))
    test = list(ip.eval_batches(c, batch_size=12))
  assert (info.num_train, info.num_eval, info.num_validation, info.image_shape, info.num_classes) == (
    32,
    40,
    8,
    (28, 28, 1),
    10,
  )
  assert len(train) == 2 and train[0]["image"].dtype == np.uint8 and sum(int(b["mask"].sum()) for b in test) == 40
  assert "tensorflow" not in sys.modules or not hasattr(sys.modules["tensorflow"], "Graph")


def _rows(workdir):
  return [json.loads(line) for line in open(os.path.join(workdir, "metrics.jsonl"))]


@pytest.mark.slow
def test_user_workload_trains_and_resumes_exactly_on_a_subset(workload_dir, tmp_path):
  """6 steps on a 48-example subset, data_order='examples', evaluations and checkpoints every 2 steps; a copy cut
  back to its step-2 checkpoint resumes to bit-identical metrics."""
  from lamb_lars.train import trainer

  c = config(
    train_examples=48,
    data_order="examples",
    eval_every_steps=2,
    checkpoint_every_steps=2,
    keep_checkpoints=5,
    num_devices=1,
  )
  full = str(tmp_path / "full")
  result = trainer.train_and_evaluate(c, full)
  assert result["status"] == "done" and result["step"] == 6
  cut = str(tmp_path / "cut")
  shutil.copytree(full, cut)
  os.remove(os.path.join(cut, "result.json"))
  for step in (4, 6):
    shutil.rmtree(os.path.join(cut, "checkpoints", str(step)))
  with open(os.path.join(cut, "metrics.jsonl"), "w") as f:
    f.writelines(json.dumps(r) + "\n" for r in _rows(full) if r["step"] <= 2)
  trainer.train_and_evaluate(c, cut)
  keys = ("step", "train_loss", "eval_loss", "eval_accuracy")
  assert [r["step"] for r in _rows(full)] == [2, 4, 6]
  assert [[r[k] for k in keys] for r in _rows(cut)] == [[r[k] for k in keys] for r in _rows(full)]


def test_manifest_records_the_workload_hash_and_verify_sees_a_change(workload_dir, tmp_path):
  """publish records sha256 of the user module beside our commit; verify fails once the module's source changes."""
  import hashlib
  import ml_collections
  from lamb_lars.study.publishing import provenance, publish
  from lamb_lars.study.running import store as st
  from lamb_lars.study.running import workdir as wd

  path = workload_dir / f"{MODULE}.py"
  work = str(tmp_path / "work")
  study = ml_collections.ConfigDict(
    dict(
      name="tiny",
      base=dict(model=f"{MODULE}:Net", dataset=f"{MODULE}:load", num_classes=3, num_epochs=2.0, eval_every_epochs=1.0),
      search=dict(metric="validation_accuracy"),
      runner=dict(num_workers=1),
      analysis=dict(title="Tiny", num_train=96, baseline_epochs=2.0, target_goal=0.5),
    )
  )
  wd.save_study_config(study, work, command="python -m lamb_lars.study run --config=tiny.py --workdir=w")
  con = st.open_store(wd.store_path(work))
  for rid, b in (("baseline", 16), ("linear-32", 32)):
    st.upsert_run(
      con,
      rid,
      study="tiny",
      batch_size=b,
      optimizer="momentum",
      role="baseline" if b == 16 else "linear",
      technique="",
      cell=rid,
      budget_epochs=2.0,
      params={"learning_rate": 0.05},
    )
    st.add_evals(
      con, rid, [{"step": 6, "epoch": 1.0, "examples": 96, "wall_time": 1.0, "eval_accuracy": 0.6, "eval_loss": 0.9}]
    )
    st.set_status(con, rid, "running")
    st.set_status(con, rid, "done")
  con.close()
  out = str(tmp_path / "out")
  publish.publish(work, out)
  m = json.load(open(os.path.join(out, "manifest.json")))
  want = hashlib.sha256(path.read_bytes()).hexdigest()
  where = os.path.realpath(str(path))  # outside the working directory: recorded as an absolute path
  assert m["workload"] == {
    f"{MODULE}:Net": {"file": where, "sha256": want},
    f"{MODULE}:load": {"file": where, "sha256": want},
  }
  assert "commit" in m["code"]
  assert provenance.verify(out) == []
  original = path.read_text()
  try:
    path.write_text(original + "\n# edited\n")
    problems = provenance.verify(out)
  finally:
    path.write_text(original)
  assert len(problems) == 2 and all("changed since the study was reported" in p for p in problems), problems
