"""Packed trials (lamb_lars/train/packed.py) against the independent unpacked trainer: every slot's evaluation rows
and result equal the same trial run alone (float tolerance), with slots that stop at different steps (a target, a
divergence, a prune), and a killed pack resumes bit-exactly, every slot from its own checkpoint."""

import json
import os
import subprocess
import sys

import pytest

from lamb_lars.configs import mnist_lenet
from lamb_lars.train import loop, pack_compat, packed
from lamb_lars.train.run_plan import ConfigError
from lamb_lars.train.trainer import train_and_evaluate

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMING = ("wall_time", "compile_time", "examples_per_sec", "step_time")


def tiny(lr=0.1, seed=0, **overrides):
  """LeNet-5 on 256 synthetic images, batch 32 on 2 devices, 8 steps, an evaluation and a checkpoint every 2."""
  c = mnist_lenet.get_config()
  c.dataset, c.progress, c.num_train_steps, c.num_devices = "synthetic", False, 8, 2
  c.synthetic.num_train, c.synthetic.num_eval = 256, 64
  c.batch_size, c.eval_batch_size = 32, 64
  c.eval_every_steps, c.checkpoint_every_steps = 2, 2
  c.optimizer.learning_rate, c.seed = lr, seed
  for k, v in overrides.items():
    node = c
    *path, last = k.split(".")
    for p in path:
      node = node[p]
    node[last] = v
  return c


def rows(run_dir) -> list[dict]:
  if not os.path.exists(os.path.join(run_dir, "metrics.jsonl")):  # a run that diverged before its first evaluation
    return []
  with open(os.path.join(run_dir, "metrics.jsonl")) as f:
    return [{k: v for k, v in json.loads(line).items() if k not in TIMING} for line in f]


def result(run_dir) -> dict:
  with open(os.path.join(run_dir, "result.json")) as f:
    r = json.load(f)
  r.pop("train_time")
  r["final"] = {k: v for k, v in (r["final"] or {}).items() if k not in TIMING}
  return r


def assert_rows_close(got: list[dict], want: list[dict]) -> None:
  assert [r["step"] for r in got] == [r["step"] for r in want]
  for g, w in zip(got, want):
    assert g.keys() == w.keys()
    for k in w:
      if isinstance(w[k], float):
        assert g[k] == pytest.approx(w[k], rel=1e-4, abs=1e-6, nan_ok=True), (w["step"], k)
      else:
        assert g[k] == w[k], (w["step"], k)


# The slots: two learning rates and seeds, one with weight decay (a second optimizer transformation, switched per
# slot), one that stops at its first evaluation (target reached), one that diverges (non-finite loss).
SLOTS = {
  "base": {},
  "other_lr_seed": {"optimizer.learning_rate": 0.03, "seed": 1},
  "weight_decay": {"optimizer.weight_decay": 1e-3, "seed": 2},
  "target": {"stop.target_metric": "eval_loss", "stop.target_mode": "min", "stop.target_goal": 10.0},
  "diverges": {"optimizer.learning_rate": 1e12, "seed": 3},
}


def test_pack_key_groups_by_shape_not_by_hyperparameters():
  a, b = tiny(), tiny(lr=0.5, seed=7, **{"optimizer.weight_decay": 0.1, "optimizer.schedule.warmup_steps": 2})
  assert pack_compat.pack_key(a) == pack_compat.pack_key(b)
  assert pack_compat.pack_key(a) != pack_compat.pack_key(tiny(batch_size=64))
  assert pack_compat.pack_key(a) != pack_compat.pack_key(tiny(**{"optimizer.name": "lamb"}))
  assert pack_compat.optimizer_key(a) != pack_compat.optimizer_key(b)  # weight decay: its own transformation
  table = lambda **kw: tiny(**{"optimizer.lr_table": True, **kw})
  assert pack_compat.optimizer_key(table()) == pack_compat.optimizer_key(table(lr=0.5))  # the LR is state
  assert pack_compat.unpackable(tiny(parallelism="pmap"))
  assert pack_compat.unpackable(a) is None


def test_incompatible_trials_are_refused_before_compiling(tmp_path):
  with pytest.raises(ConfigError, match="differs from trial 0"):
    packed.train_pack([tiny(), tiny(batch_size=64)], [str(tmp_path / "a"), str(tmp_path / "b")])


@pytest.mark.slow
def test_packed_slots_equal_unpacked_trials(tmp_path):
  configs = [tiny(**kw) for kw in SLOTS.values()]
  dirs = [str(tmp_path / f"packed_{name}") for name in SLOTS]
  results = packed.train_pack(configs, dirs)
  statuses = {name: (r["status"], r["stopped"], r["step"]) for name, r in zip(SLOTS, results)}
  assert statuses["base"] == ("done", None, 8)
  assert statuses["target"] == ("done", "target", 2)
  assert statuses["diverges"][:2] == ("diverged", "nonfinite") and statuses["diverges"][2] < 8
  for i, (name, c) in enumerate(zip(SLOTS, configs)):
    alone = str(tmp_path / f"alone_{name}")
    train_and_evaluate(c, alone)
    assert_rows_close(rows(dirs[i]), rows(alone))
    got, want = result(dirs[i]), result(alone)
    assert got.pop("packed") == {"size": len(SLOTS), "slot": i}
    assert_rows_close([{"step": 0, **got.pop("final")}], [{"step": 0, **want.pop("final")}])
    assert got == want


@pytest.mark.slow
def test_a_pruned_slot_stops_without_a_result_and_the_others_go_on(tmp_path, monkeypatch):
  """The driver's stop request (packed.STOP_FILE), written at the pruned trial's step-2 evaluation, stops that slot
  before the next chunk: no result, no rows after step 2; the other slot trains on as alone."""
  dirs = [str(tmp_path / "keep"), str(tmp_path / "pruned")]
  at_boundary = loop._Run.at_boundary

  def prune_at_2(self, train_state, ckpt):
    at_boundary(self, train_state, ckpt)
    if self.parts.feeder.index == 1 and self.step == 2:
      open(os.path.join(dirs[1], packed.STOP_FILE), "w").close()

  monkeypatch.setattr(loop._Run, "at_boundary", prune_at_2)
  results = packed.train_pack([tiny(), tiny(lr=0.03, seed=1)], dirs)
  assert results[1] == {"status": "pruned"} and results[0]["step"] == 8
  assert not os.path.exists(os.path.join(dirs[1], "result.json"))
  assert not os.path.exists(os.path.join(dirs[1], packed.STOP_FILE))  # removed: the slot has stopped
  assert [r["step"] for r in rows(dirs[1])] == [2]
  monkeypatch.setattr(loop._Run, "at_boundary", at_boundary)
  train_and_evaluate(tiny(), str(tmp_path / "alone"))
  assert_rows_close(rows(dirs[0]), rows(str(tmp_path / "alone")))


def _run_pack(run_dirs, kill_at=None):
  env = {**os.environ, "PYTHONPATH": ROOT, "JAX_DISABLE_MOST_OPTIMIZATIONS": "1"}
  if kill_at is None:
    cmd = [sys.executable, "-m", "lamb_lars.study.running.run_pack", *run_dirs]
  else:
    cmd = [sys.executable, os.path.join(ROOT, "tests", "kill_pack_at_step.py"), str(kill_at), *run_dirs]
  return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)


def _write_trials(root, configs) -> list[str]:
  dirs = []
  for i, c in enumerate(configs):
    d = os.path.join(root, f"slot{i}")
    os.makedirs(d)
    with open(os.path.join(d, "trial_config.json"), "w") as f:
      f.write(c.to_json_best_effort())
    dirs.append(d)
  return dirs


@pytest.mark.slow
def test_a_killed_pack_resumes_bit_exactly(tmp_path):
  """Killed by SIGKILL after slot 0's checkpoint at step 4 and before slot 1's (whose newest is step 2): the
  resumed pack lets slot 1 catch up, and every slot's rows and result equal the uninterrupted pack's exactly."""
  configs = [tiny(), tiny(lr=0.03, seed=1, **{"optimizer.weight_decay": 1e-3})]
  ref = _write_trials(str(tmp_path / "ref"), configs)
  assert _run_pack(ref).returncode == 0
  dirs = _write_trials(str(tmp_path / "killed"), configs)
  killed = _run_pack(dirs, kill_at=4)
  assert killed.returncode == -9, killed.stdout + killed.stderr
  steps = [sorted(int(n) for n in os.listdir(os.path.join(d, "checkpoints")) if n.isdigit())[-1] for d in dirs]
  assert steps == [4, 2]  # the slots' newest checkpoints are at different steps
  resumed = _run_pack(dirs)
  assert resumed.returncode == 0, resumed.stdout + resumed.stderr
  for d, r in zip(dirs, ref):
    assert rows(d) == rows(r)
    assert result(d) == result(r)
