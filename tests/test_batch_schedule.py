"""Batch-size schedules (lamb_lars/train/batch_schedule.py): the stages, the LR on the examples clock, the data order
by examples seen, one-sentence errors before compiling, and a bit-exact resume across a stage boundary after kill -9.
Expected values are worked out by hand from the formulas in the module docstring, not computed by the module."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from lamb_lars import input_pipeline
from lamb_lars.train import batch_schedule as bs
from lamb_lars.train import feeders, run_plan, validate
from test_train import DATA_DIR, ROOT, data_dir, small_config  # noqa: F401  (fixture)


def test_stages_start_at_the_first_step_boundary_at_or_after_their_point():
  # 128 until 640 examples: 5 steps. 256 from 640: ⌈(1280 − 640)/256⌉ = 3 steps → 1408 examples at step 8.
  stages = bs.stages(128, [(640, 256), (1280, 512)], 2560, "linear")
  assert [(s.start_step, s.start_example, s.batch_size, s.lr_multiplier) for s in stages] == [
    (0, 0, 128, 1.0),
    (5, 640, 256, 2.0),
    (8, 1408, 512, 4.0),
  ]
  assert bs.step_reaching(stages, 2560) == 11  # 1408 + 3·512 = 2944 ≥ 2560 > 1408 + 2·512
  assert [bs.examples(stages, s) for s in (0, 5, 6, 8, 9, 11)] == [0, 640, 896, 1408, 1920, 2944]
  assert [s.lr_multiplier for s in bs.stages(128, [(640, 512)], 2560, "sqrt")] == [1.0, 2.0]
  assert [s.lr_multiplier for s in bs.stages(128, [(640, 512)], 2560, "none")] == [1.0, 1.0]


@pytest.mark.parametrize(
  "spec, fragment",
  [
    ("2:0", "positive integer"),
    ("2", "FROM:BATCH"),
    ("0:256", "FROM > 0"),
    ("4:512,2:1024", "must increase"),
    ("x:256", "FROM:BATCH"),
  ],
)
def test_a_malformed_schedule_is_one_sentence(spec, fragment):
  with pytest.raises(ValueError, match=fragment):
    bs.parse(spec, "epochs", 60000)


def test_epochs_are_examples_seen():
  assert bs.parse("0.5:512, 2:1024", "epochs", 55000) == [(27500, 512), (110000, 1024)]
  assert bs.parse("1000:512", "examples", 55000) == [(1000, 512)]


def test_the_lr_is_the_base_schedule_at_the_examples_seen_times_the_rule():
  """η(update c) = η_base(E_c / B0)·k_c with E_c the examples seen before update c, from a float64 reference."""
  b0, warm, total, peak = 128, 6.0, 20.0, 0.4
  base = lambda t: np.where(t < warm, peak * t / warm, peak * 0.5 * (1 + np.cos(np.pi * (t - warm) / (total - warm))))
  batches = [128] * 5 + [256] * 3 + [512] * 3  # per update, from the stages above
  seen = np.concatenate([[0], np.cumsum(batches)[:-1]]).astype(np.float64)
  want = base(seen / b0) * np.array(batches) / b0
  wrap = bs.reschedule(bs.stages(b0, [(640, 256), (1280, 512)], 2560, "linear"), b0)
  import jax.numpy as jnp

  got = wrap(
    lambda t: jnp.where(t < warm, peak * t / warm, peak * 0.5 * (1 + jnp.cos(jnp.pi * (t - warm) / (total - warm))))
  )(jnp.arange(11))
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6, atol=1e-6)  # float32 schedule


def _plan(data_dir, **kw):
  cfg = small_config(data_dir, data_order="examples", **kw)
  return validate.validate(cfg, 1)


def test_the_data_order_is_a_function_of_the_examples_seen(data_dir):
  """A run whose batch changes, and fixed-batch runs at any batch, see the stream's examples in the same order."""
  sched = _plan(data_dir, batch_size=128, num_train_steps=600, batch_schedule="0.5:256,1:512")
  fixed = _plan(data_dir, batch_size=1000, num_train_steps=60)
  seen = np.concatenate([feeders.batch_indices(0, s, sched) for s in range(sched.total_steps)])
  seen_fixed = np.concatenate([feeders.batch_indices(0, s, fixed) for s in range(fixed.total_steps)])
  n = sched.num_train
  stream = np.concatenate([input_pipeline.epoch_permutation(0, e, n) for e in range(2)])
  assert len(seen) == sched.examples(sched.total_steps) > n  # crosses an epoch inside a batch
  np.testing.assert_array_equal(seen, stream[: len(seen)])
  np.testing.assert_array_equal(seen_fixed, stream[: len(seen_fixed)])


@pytest.mark.parametrize(
  "kw, fragment",
  [
    (dict(batch_schedule="640:129", num_microbatches=2), "batch_schedule's batch from step 5=129 is not divisible"),
    (dict(batch_schedule="640:100000"), "exceeds the"),
    (dict(batch_schedule="640:256", data_order="batches"), "data_order='examples'"),
    (dict(batch_schedule="99999:256"), "starts after training ends"),
    (dict(batch_schedule="640:256", batch_schedule_lr="cubic"), "batch_schedule_lr"),
  ],
)
def test_a_stage_that_cannot_be_planned_is_one_sentence_before_compiling(data_dir, kw, fragment):
  cfg = small_config(data_dir, **{"data_order": "examples", "batch_schedule_unit": "examples", **kw})
  with pytest.raises(run_plan.ConfigError, match=fragment) as e:
    validate.validate(cfg, 1)
  assert str(e.value).count(". ") == 0 and "\n" not in str(e.value)


def _cmd(workdir):
  return [
    sys.executable,
    "train.py",
    "--config=lamb_lars/configs/mnist_lenet.py",
    f"--workdir={workdir}",
    f"--config.data_dir={DATA_DIR}",
    "--config.batch_size=128",
    "--config.num_train_steps=40",
    "--config.data_order=examples",
    "--config.batch_schedule=2000:256,3500:512",
    "--config.batch_schedule_unit=examples",
    "--config.eval_every_steps=5",
    "--config.checkpoint_every_steps=10",
    "--config.steps_per_call=1",
    "--config.eval_batch_size=5000",
    "--config.progress=False",
    "--config.optimizer.learning_rate=0.01",
  ]


def _rows(workdir):
  drop = ("wall_time", "compile_time", "examples_per_sec", "step_time")
  lines = open(os.path.join(workdir, "metrics.jsonl"))
  return [{k: v for k, v in json.loads(line).items() if k not in drop} for line in lines]


@pytest.mark.slow
@pytest.mark.e2e
def test_kill_and_resume_across_a_stage_boundary_is_bit_exact(data_dir, tmp_path):
  """Killed after its step-10 checkpoint (stage 0: 128 until 2000 examples, step 16), resumed: the same rows."""
  ref, killed = tmp_path / "ref", tmp_path / "killed"
  # One CPU device (the next test runs a schedule across devices): each stage's batch is a new program, and compiling
  # it for the suite's 8 fake devices would be most of this test's time.
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
  subprocess.run(_cmd(ref), cwd=ROOT, env=env, check=True, capture_output=True, timeout=600)
  want = _rows(ref)
  # 128 × 16 = 2048 ≥ 2000 → 256 from step 16; ⌈(3500 − 2048)/256⌉ = 6 → 512 from step 22 (3584); 40·128 = 5120
  # examples end at step 22 + ⌈1536/512⌉ = 25. Evaluations every 640 examples: the first step at or past each multiple.
  assert [(r["step"], r["examples"], r["batch_size"]) for r in want] == [
    (5, 640, 128),
    (10, 1280, 128),
    (15, 1920, 128),
    (18, 2560, 256),
    (21, 3328, 256),
    (23, 4096, 512),
    (24, 4608, 512),
    (25, 5120, 512),
  ]
  proc = subprocess.Popen(_cmd(killed), cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  ckpt, deadline = killed / "checkpoints" / "10", time.time() + 600
  while not ckpt.exists() and time.time() < deadline and proc.poll() is None:
    time.sleep(0.02)
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  assert not (killed / "result.json").exists(), "the run finished before it could be killed"
  for later in (killed / "checkpoints").iterdir():  # as if killed right after step 10: resume inside stage 0
    if later.name != "10":
      shutil.rmtree(later)
  subprocess.run(_cmd(killed), cwd=ROOT, env=env, check=True, capture_output=True, timeout=600)
  assert _rows(killed) == want


@pytest.mark.slow
@pytest.mark.e2e
def test_a_schedule_runs_the_same_resident_host_fed_and_under_pmap(data_dir, tmp_path):
  """The stream order and the per-stage steps are the same whichever feeder and parallelism run them."""
  from lamb_lars.train.trainer import train_and_evaluate

  common = dict(
    batch_size=128,
    num_train_steps=12,
    num_devices=2,
    data_order="examples",
    batch_schedule="640:256",
    batch_schedule_unit="examples",
    eval_every_steps=0,
    checkpoint_every_steps=0,
    eval_batch_size=5000,
  )
  runs = [
    train_and_evaluate(small_config(data_dir, parallelism=p, data_on_device=d, **common), str(tmp_path / name))
    for name, p, d in (("resident", "jit", "yes"), ("host", "jit", "no"), ("pmap", "pmap", "no"))
  ]
  assert [r["step"] for r in runs] == [9, 9, 9]  # 5 steps of 128, then ⌈(1536 − 640)/256⌉ = 4 of 256
  for r in runs[1:]:
    for key in ("train_loss", "eval_loss", "eval_accuracy"):
      np.testing.assert_allclose(r["final"][key], runs[0]["final"][key], rtol=1e-5)
