"""TensorBoard output as TensorBoard users expect it: grouped tags and an HParams session per run, read back with
tensorboard's own reader (tests/tensorboard_reader.py)."""

import json

import pytest

from lamb_lars.train import metric_writers
from tensorboard_reader import hparams_sessions

# Every key a run writes (eval rows: trainer.py / evaluation.py / train_metrics.py; per step: step_scalars),
# with the tag a TensorBoard user should find it under. Written out by hand, not derived from the writer's table.
EXPECTED = {
  "epoch": "train/epoch",
  "examples": "train/examples",
  "train_loss": "train/loss",
  "train_accuracy": "train/accuracy",
  "step/train_loss": "train/loss_per_step",
  "eval_loss": "eval/test_loss",
  "eval_accuracy": "eval/test_accuracy",
  "eval_examples": "eval/test_examples",
  "validation_loss": "eval/validation_loss",
  "validation_accuracy": "eval/validation_accuracy",
  "step/lr": "optim/lr",
  "lr": None,
  "grad_norm": "optim/grad_norm",
  "step/grad_norm": "optim/grad_norm_per_step",
  "step/grad_norm_small_rms": "optim/grad_norm_small_rms_per_step",
  "signal_to_noise": "optim/signal_to_noise",
  "noise_scale": "optim/noise_scale_b_simple",
  "dist_from_init": "optim/dist_from_init",
  "dist_from_init/Dense_0/kernel": "optim/dist_from_init/Dense_0/kernel",
  "trust_ratio/mean": "optim/trust_ratio/mean",
  "wall_time": "perf/train_time_s",
  "compile_time": "perf/compile_time_s",
  "examples_per_sec": "perf/examples_per_sec",
  "step_time": "perf/step_time_s",
}


@pytest.mark.parametrize("key", sorted(EXPECTED))
def test_every_metric_has_a_grouped_tag(key):
  assert metric_writers.tensorboard_tag(key) == EXPECTED[key]


def test_plain_run_hparams_are_the_documented_keys():
  from lamb_lars.configs import mnist_lenet

  cfg = mnist_lenet.get_config()
  hp = metric_writers.config_hparams(cfg)
  assert set(hp) == set(metric_writers.HPARAM_KEYS)
  assert hp["batch_size"] == cfg.batch_size and hp["optimizer.name"] == cfg.optimizer.name


def test_hparams_sessions_compare_in_tensorboard(tmp_path):
  """Two runs with different LRs: TensorBoard's HParams backend lists both sessions with their hparams, their
  status and each metric's last value; the JSONL keeps its own column names."""
  runs = {"a": (0.1, "done", [0.6, 0.7]), "b": (0.5, "diverged", [0.2, 0.1])}
  for name, (lr, status, accs) in runs.items():
    w = metric_writers.MetricWriter(
      str(tmp_path / name), hparams={"optimizer.learning_rate": lr, "optimizer.name": "lars", "batch_size": 8192}
    )
    for step, acc in enumerate(accs, 1):
      w.write_scalars(step, {"step/lr": lr})
      w.write_scalars(step, {"eval_accuracy": acc, "lr": lr, "epoch": float(step)}, jsonl=True)
    w.close(status)
  exp, sessions = hparams_sessions(str(tmp_path))
  assert set(exp["hparams"]) == {"optimizer.learning_rate", "optimizer.name", "batch_size"}
  assert {"eval/test_accuracy", "optim/lr", "train/epoch"} <= set(exp["metrics"])
  assert set(sessions) == {"a/tensorboard", "b/tensorboard"}
  for name, (lr, status, accs) in runs.items():
    s = sessions[f"{name}/tensorboard"]
    assert s["hparams"] == {
      "optimizer.learning_rate": pytest.approx(lr),
      "optimizer.name": "lars",
      "batch_size": 8192.0,
    }
    assert s["status"] == {"done": "STATUS_SUCCESS", "diverged": "STATUS_FAILURE"}[status]
    assert s["metrics"]["eval/test_accuracy"] == pytest.approx(accs[-1])
  row = json.loads((tmp_path / "a" / "metrics.jsonl").read_text().splitlines()[-1])
  assert set(row) == {"step", "eval_accuracy", "lr", "epoch"}
