"""The real training loop on real (offline) MNIST: learning, divergence, resume after kill -9, pmap == jit."""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import jax
import numpy as np
import pytest

from lamb_lars import input_pipeline
from lamb_lars.configs import mnist_lenet
from lamb_lars.train.trainer import train_and_evaluate

# The trainer runs tens to hundreds of steps here: run time outweighs compile time (conftest.py).
pytestmark = pytest.mark.xla_opt

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA_DIR = os.environ.get("LAMB_LARS_TEST_DATA_DIR") or os.path.join(tempfile.gettempdir(), "lamb_lars_test_tfds")


@pytest.fixture(scope="module")
def data_dir():
  cfg = mnist_lenet.get_config()
  cfg.data_dir = DATA_DIR
  input_pipeline.prepare(cfg)
  return DATA_DIR


def small_config(data_dir, **overrides):
  cfg = mnist_lenet.get_config()
  cfg.data_dir = data_dir
  cfg.progress = False
  cfg.batch_size = 128
  cfg.eval_batch_size = 2000
  cfg.num_train_steps = 20
  for k, v in overrides.items():
    node = cfg
    *path, last = k.split(".")
    for p in path:
      node = node[p]
    node[last] = v
  return cfg


def tensorboard_tags(logdir) -> dict:
  """{tag: [(step, value)]} parsed from TFRecord-framed event files with tensorboardX's protobufs (no TensorFlow)."""
  import glob
  import struct
  from tensorboardX.proto import event_pb2

  out = {}
  for path in glob.glob(os.path.join(logdir, "events.out.tfevents.*")):
    data = open(path, "rb").read()
    pos = 0
    while pos < len(data):
      (n,) = struct.unpack("<Q", data[pos : pos + 8])
      event = event_pb2.Event.FromString(data[pos + 12 : pos + 12 + n])
      pos += 12 + n + 4
      for v in event.summary.value:
        out.setdefault(v.tag, []).append((event.step, v.simple_value))
  return out


def test_one_step_end_to_end_on_synthetic_data(tmp_path):
  """The fast tier's end-to-end check (flax's train_test.py): the whole trainer for one step at batch 8 on synthetic
  images, with most XLA optimisations off; the slow tier trains MNIST for real."""
  cfg = mnist_lenet.get_config()
  cfg.dataset, cfg.progress, cfg.num_train_steps = "synthetic", False, 1
  cfg.synthetic.num_train, cfg.synthetic.num_eval = 64, 16
  cfg.batch_size, cfg.eval_batch_size = 8, 8
  old = jax.config.read("jax_disable_most_optimizations")
  jax.config.update("jax_disable_most_optimizations", True)
  try:
    result = train_and_evaluate(cfg, str(tmp_path))
  finally:
    jax.config.update("jax_disable_most_optimizations", old)
  assert result["status"] == "done" and result["step"] == 1
  assert result["final"]["eval_examples"] == 16 and np.isfinite(result["final"]["eval_loss"])
  assert [json.loads(line)["step"] for line in open(tmp_path / "metrics.jsonl")] == [1]


@pytest.mark.slow
@pytest.mark.e2e
def test_few_steps_learn(data_dir, tmp_path):
  result = train_and_evaluate(small_config(data_dir), str(tmp_path))
  assert result["status"] == "done" and result["step"] == 20
  final = result["final"]
  assert final["eval_examples"] == 10000  # every test example, once
  assert final["eval_loss"] < 1.7 < np.log(10)  # from chance (2.30) after 20 steps
  assert final["eval_accuracy"] > 0.5
  assert np.isfinite(final["noise_scale"]) and final["noise_scale"] > 0  # 8 devices → two batch sizes
  rows = [json.loads(l) for l in open(tmp_path / "metrics.jsonl")]
  assert [r["step"] for r in rows] == [20]
  tags = tensorboard_tags(tmp_path / "tensorboard")
  assert [st for st, _ in tags["optim/grad_norm_per_step"]] == list(range(1, 21))  # every step
  assert len(tags["optim/grad_norm_small_rms_per_step"]) == 20
  assert tags["eval/test_accuracy"] == [(20, pytest.approx(final["eval_accuracy"]))]
  assert {t.split("/")[0] for t in tags if not t.startswith("_hparams_")} == {"train", "eval", "optim", "perf"}
  again = train_and_evaluate(small_config(data_dir), str(tmp_path))  # finished: returned, not re-run
  assert again == json.loads(open(tmp_path / "result.json").read())


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.parametrize("table", [False, True])
def test_logged_lr_is_the_schedule(data_dir, tmp_path, table):
  """The LR logged for each update (TensorBoard optim/lr) and for the eval row is η_t from the formula: linear
  warmup η·(t+1)/W over W = 4 updates, then cosine decay to 0 over the remaining 16 (schedules.py docstring)."""
  peak, w, total = 0.05, 4, 20
  cfg = small_config(
    data_dir,
    eval_every_epochs=0.0,
    checkpoint_every_epochs=0.0,
    **{
      "optimizer.lr_scaling": "none",
      "optimizer.learning_rate": peak,
      "optimizer.schedule.warmup_steps": w,
      "optimizer.lr_table": table,
    },
  )
  result = train_and_evaluate(cfg, str(tmp_path))

  def eta(t):  # the LR of update t (0-based), written from the formula
    return peak * (t + 1) / w if t < w else peak * 0.5 * (1 + np.cos(np.pi * (t - w) / (total - w)))

  logged = tensorboard_tags(tmp_path / "tensorboard")["optim/lr"]
  assert [s for s, _ in logged] == list(range(1, total + 1))
  np.testing.assert_allclose([v for _, v in logged], [eta(s - 1) for s in range(1, total + 1)], rtol=1e-5, atol=1e-9)
  assert result["final"]["lr"] == pytest.approx(eta(total - 1), abs=1e-9)


@pytest.mark.slow
@pytest.mark.e2e
def test_divergence_is_a_result(data_dir, tmp_path):
  cfg = small_config(data_dir, **{"optimizer.learning_rate": 1e6, "optimizer.schedule.decay": "constant"})
  result = train_and_evaluate(cfg, str(tmp_path))
  assert result["status"] == "diverged"
  assert "non-finite training loss at step" in result["error"]
  assert json.load(open(tmp_path / "result.json"))["status"] == "diverged"


@pytest.mark.slow
@pytest.mark.e2e
def test_pmap_path_equals_jit_path(data_dir, tmp_path):
  common = dict(
    num_train_steps=6, data_on_device="no", eval_every_epochs=0.0, checkpoint_every_epochs=0.0, eval_batch_size=5000
  )
  a = train_and_evaluate(small_config(data_dir, parallelism="jit", **common), str(tmp_path / "jit"))
  b = train_and_evaluate(small_config(data_dir, parallelism="pmap", **common), str(tmp_path / "pmap"))
  for key in ("train_loss", "eval_loss", "eval_accuracy", "grad_norm"):
    np.testing.assert_allclose(b["final"][key], a["final"][key], rtol=1e-5)


def _cmd(workdir):
  return [
    sys.executable,
    "train.py",
    "--config=lamb_lars/configs/mnist_lenet.py",
    f"--workdir={workdir}",
    f"--config.data_dir={DATA_DIR}",
    "--config.batch_size=256",
    "--config.num_train_steps=40",
    "--config.eval_every_steps=10",
    "--config.checkpoint_every_steps=10",
    "--config.num_devices=2",
    "--config.steps_per_call=1",
    "--config.eval_batch_size=5000",
    "--config.progress=False",
    "--config.optimizer.learning_rate=0.01",
  ]


def _final_rows(workdir):
  rows = [json.loads(l) for l in open(os.path.join(workdir, "metrics.jsonl"))]
  drop = ("wall_time", "compile_time", "examples_per_sec", "step_time")
  return [{k: v for k, v in r.items() if k not in drop} for r in rows]


@pytest.mark.slow
@pytest.mark.e2e
def test_kill_and_resume_matches_uninterrupted(data_dir, tmp_path):
  """A run killed after its first checkpoint resumes bit-identically, and its stopping rules carry over."""
  env = dict(os.environ)
  ref, killed = tmp_path / "ref", tmp_path / "killed"
  subprocess.run(_cmd(ref), cwd=ROOT, env=env, check=True, capture_output=True, timeout=600)
  want = _final_rows(ref)
  # The dead-run rule from step 30 with the threshold at the best of the first 3 evals: it fires at step 30 exactly.
  best = max(r["eval_accuracy"] for r in want[:3])
  stop = ["--config.stop.dead_after_fraction=0.75", f"--config.stop.dead_accuracy={best!r}"]
  proc = subprocess.Popen(_cmd(killed) + stop, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  ckpt = killed / "checkpoints" / "10"
  deadline = time.time() + 600
  while not ckpt.exists() and time.time() < deadline and proc.poll() is None:
    time.sleep(0.05)
  time.sleep(0.5)  # past the checkpoint, before the next one
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  assert not (killed / "result.json").exists(), "the run finished before it could be killed"
  subprocess.run(_cmd(killed) + stop, cwd=ROOT, env=env, check=True, capture_output=True, timeout=600)
  result = json.load(open(killed / "result.json"))
  assert (result["status"], result["stopped"], result["step"]) == ("diverged", "dead", 30)
  assert [r["step"] for r in want] == [10, 20, 30, 40]
  assert _final_rows(killed) == want[:3]  # bit-identical metrics after resume, up to the stop


@pytest.mark.slow
@pytest.mark.e2e
def test_divergence_without_stopping_counts_steps_once(data_dir, tmp_path):
  """stop_on_divergence=False: the run goes on to its last step; the failing step is not counted twice."""
  cfg = small_config(
    data_dir,
    stop_on_divergence=False,
    eval_every_steps=10,
    **{"optimizer.learning_rate": 1e6, "optimizer.schedule.decay": "constant"},
  )
  result = train_and_evaluate(cfg, str(tmp_path))
  assert (result["status"], result["stopped"], result["step"]) == ("diverged", None, 20)
  assert "non-finite training loss at step" in result["error"]
  assert [r["step"] for r in (json.loads(l) for l in open(tmp_path / "metrics.jsonl"))] == [10, 20]


@pytest.mark.slow
@pytest.mark.e2e
def test_validation_split_is_evaluated_with_the_test_set(data_dir, tmp_path):
  """validation_split=5000: train on 55K; every row has the 10K test set (eval_*) and the 5K hold-out."""
  result = train_and_evaluate(small_config(data_dir, validation_split=5000, num_train_steps=6), str(tmp_path))
  final = result["final"]
  assert (final["eval_examples"], final["validation_examples"]) == (10_000, 5000)
  assert 0.0 <= final["validation_accuracy"] <= 1.0 and np.isfinite(final["validation_loss"])
  assert result["stopped"] is None and result["status"] == "done"


@pytest.mark.slow
@pytest.mark.e2e
def test_stop_at_target(data_dir, tmp_path):
  cfg = small_config(
    data_dir, num_train_steps=40, eval_every_steps=5, **{"stop.target_metric": "eval_accuracy", "stop.target_goal": 0.3}
  )
  result = train_and_evaluate(cfg, str(tmp_path))
  rows = [json.loads(l) for l in open(tmp_path / "metrics.jsonl")]
  assert (result["status"], result["stopped"], result["error"]) == ("done", "target", None)
  assert result["step"] == rows[-1]["step"] < 40 and result["total_steps"] == 40
  assert rows[-1]["eval_accuracy"] >= 0.3 and all(r["eval_accuracy"] < 0.3 for r in rows[:-1])
  assert train_and_evaluate(cfg, str(tmp_path)) == result  # finished: the recorded result comes back


@pytest.mark.slow
@pytest.mark.e2e
def test_dead_run_stops_at_chance_level(data_dir, tmp_path):
  """From max(20% of the steps, warmup) on, 3 evaluations in a row at or below the threshold end the run."""
  cfg = small_config(
    data_dir,
    num_train_steps=20,
    eval_every_steps=2,
    **{"stop.dead_after_fraction": 0.2, "stop.dead_accuracy": 0.999, "optimizer.schedule.warmup_steps": 6},
  )
  result = train_and_evaluate(cfg, str(tmp_path))
  assert (result["status"], result["stopped"], result["step"]) == ("diverged", "dead", 6)  # max(4, 6)
  assert result["error"].startswith("no progress off chance level: the last 3 eval accuracies are ≤ 99.90% ")
  assert result["error"].endswith(" epochs")


def test_chance_threshold_and_stop_rules_state():
  from lamb_lars.train import stopping

  assert stopping.chance_threshold(10) == pytest.approx(0.325)
  assert stopping.chance_threshold(1000) == pytest.approx(0.25075)
  cfg = small_config(DATA_DIR, **{"stop.dead_after_fraction": 0.5})
  rules = stopping.StopRules(cfg, total_steps=10, warmup_steps=0)
  assert rules.check(2, {"eval_accuracy": 0.9}) is None
  again = stopping.StopRules(cfg, total_steps=10, warmup_steps=0)
  again.load_state_dict(rules.state_dict())  # what a checkpoint carries
  assert again.check(6, {"eval_accuracy": 0.1}) is None  # 0.9 is among the last 3: remembered
  fresh = stopping.StopRules(cfg, total_steps=10, warmup_steps=0)
  assert fresh.check(6, {"eval_accuracy": 0.1}).stopped == "dead"
  fell_back = stopping.StopRules(cfg, total_steps=10, warmup_steps=0)  # left chance level, then fell back to it
  assert [fell_back.check(s, {"eval_accuracy": a}) for s, a in ((2, 0.37), (4, 0.1), (6, 0.1))] == [None] * 3
  assert fell_back.check(7, {"eval_accuracy": 0.11}).stopped == "dead"  # 3 in a row at chance, past step 5
  dip = stopping.StopRules(cfg, total_steps=10, warmup_steps=0)
  assert [dip.check(s, {"eval_accuracy": a}) for s, a in ((5, 0.9), (6, 0.1), (7, 0.1), (8, 0.95))] == [None] * 4


@pytest.mark.slow
@pytest.mark.e2e
def test_a_crash_mid_run_still_closes_the_writer_and_the_checkpointer(data_dir, tmp_path, monkeypatch):
  """A bug at the second evaluation keeps its traceback, and the TensorBoard writer and the checkpointer are closed
  (``finally``): the first evaluation's row and checkpoint are on disk, the event file is complete."""
  from lamb_lars.train import checkpoint, evaluation, metric_writers

  closed, real_eval = [], evaluation.Evaluator.__call__
  calls = iter(range(100))

  def evaluate(self, state):
    if next(calls) == 1:
      raise ZeroDivisionError("a bug in the second evaluation")
    return real_eval(self, state)

  for cls, name in ((metric_writers.MetricWriter, "writer"), (checkpoint.Checkpointer, "checkpointer")):
    monkeypatch.setattr(
      cls, "close", (lambda real, name: lambda self, *a: closed.append(name) or real(self, *a))(cls.close, name)
    )
  monkeypatch.setattr(evaluation.Evaluator, "__call__", evaluate)
  with pytest.raises(ZeroDivisionError, match="second evaluation"):
    train_and_evaluate(small_config(data_dir, eval_every_steps=10, checkpoint_every_steps=10), str(tmp_path))
  assert sorted(closed) == ["checkpointer", "writer"]
  assert [json.loads(l)["step"] for l in open(tmp_path / "metrics.jsonl")] == [10]
  assert (tmp_path / "checkpoints" / "10").is_dir() and not (tmp_path / "result.json").exists()
  tags = tensorboard_tags(str(tmp_path / "tensorboard"))  # flushed and closed: every step's scalars are there
  assert max(step for values in tags.values() for step, _ in values) == 20
