"""The adaptive batch controller (lamb_lars/train/adaptive_batch.py): the decision rule against an independent
reference written from the module docstring's rule, the ladder, the LR rule per optimizer family, the signal
choice, one-sentence errors before compiling, and a run whose batch follows the noise scale. Bit-exact resume
across a batch change: tests/test_adaptive_batch_resume.py."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest

from lamb_lars.configs import mnist_lenet
from lamb_lars.optim import optimizers
from lamb_lars.train import adaptive_batch as ab
from lamb_lars.train import run_plan, validate


def reference_decision(batch, value, *, kappa, lo, hi, ladder, min_change, margin, grow_only):
  """The rule as stated, in float64 numpy, written apart from the module: (next batch, reason)."""
  if not np.isfinite(value) or value <= 0:
    return batch, "no_estimate"
  t = np.clip(np.float64(kappa) * value, lo, hi)
  sizes = np.sort(np.asarray(ladder, np.float64))
  dist = np.abs(np.log2(sizes) - np.log2(t))
  new = int(sizes[np.flatnonzero(dist == dist.min())[0]])  # the first (smallest) of the nearest
  if new == batch:
    return batch, "hold"
  if abs(new - batch) / batch < min_change:
    return batch, "below_min_change"
  if abs(np.log(t) - np.log(batch)) < abs(np.log(t) - np.log(new)) + np.log(1 + margin):
    return batch, "dead_band"
  if grow_only and new < batch:
    return batch, "grow_only"
  return new, ("grow" if new > batch else "shrink")


def settings(**kw):
  base = dict(base_batch=64, ladder=(16, 32, 64, 128, 256, 512, 1024), min_batch=0, max_batch=10**9, margin=0.1)
  return ab.Settings(**{**base, **kw})


def test_the_rule_matches_an_independent_reference_over_random_cases():
  """Settings as validation leaves them (the ladder inside [min_batch, max_batch]); a case on the edge of the dead
  band (equal up to rounding, e.g. ln 3 = ln 2 + ln 1.5) is skipped: float64 rounding, not the rule, decides it."""
  rng, checked = np.random.default_rng(0), 0
  for _ in range(3000):
    ladder = tuple(sorted(set(int(x) for x in rng.choice([8, 16, 24, 32, 48, 64, 96, 128, 256, 512], size=4))))
    lo, hi = int(rng.choice([0, 16, 32])), int(rng.choice([128, 256, 10**9]))
    ladder = tuple(b for b in ladder if lo <= b <= hi)
    if not ladder:
      continue
    s = settings(
      ladder=ladder,
      kappa=float(rng.choice([0.1, 0.5, 1.0, 2.0])),
      min_batch=lo,
      max_batch=hi,
      min_change=float(rng.choice([0.0, 0.2, 0.6, 1.5])),
      margin=float(rng.choice([0.0, 0.05, 0.1, 0.5])),
      grow_only=bool(rng.integers(2)),
    )
    batch = int(rng.choice(ladder))
    value = float(rng.choice([np.nan, -3.0, 0.0, *np.exp(rng.uniform(0, 7, size=5))]))
    want = reference_decision(
      batch,
      value,
      kappa=s.kappa,
      lo=s.min_batch,
      hi=s.max_batch,
      ladder=ladder,
      min_change=s.min_change,
      margin=s.margin,
      grow_only=s.grow_only,
    )
    new, target, reason = ab.decide(batch, value, s)
    if reason != "no_estimate":
      t, snapped = target, ab.snap(target, ladder)
      if abs(abs(math.log(t / batch)) - abs(math.log(t / snapped)) - math.log1p(s.margin)) < 1e-9:
        continue
    checked += 1
    assert (new, reason) == want, (batch, value, s)
    if reason != "no_estimate":
      assert target == pytest.approx(min(max(s.kappa * value, s.min_batch), s.max_batch))
  assert checked > 2000


@pytest.mark.parametrize(
  "batch, value, kw, want",
  [
    (64, 200.0, {}, (256, "grow")),  # log2 200 = 7.64: nearer 256 (8) than 128 (7)
    (64, 181.0, {}, (128, "grow")),  # 7.50 − 7 = 0.4999 < 8 − 7.50: 128
    (128, 185.0, {}, (128, "dead_band")),  # nearer 256, but |ln(185/128)| − |ln(185/256)| = 0.043 < ln 1.1
    (128, 200.0, {}, (256, "grow")),  # 0.199 ≥ ln 1.1 = 0.095
    (128, 185.0, {"margin": 0.0}, (256, "grow")),
    (256, 50.0, {}, (64, "shrink")),
    (256, 50.0, {"grow_only": True}, (256, "grow_only")),
    (64, 5000.0, {"max_batch": 300}, (256, "grow")),  # clipped to 300, then snapped: 256
    (64, 3.0, {"min_batch": 100}, (128, "grow")),  # clipped up to 100: nearer 128 than 64
    (64, 90.0, {"ladder": (64, 72, 96), "min_change": 0.25}, (96, "grow")),  # 90 snaps to 96: +50% ≥ 25%
    (64, 70.0, {"ladder": (64, 72, 96), "min_change": 0.25, "margin": 0.0}, (64, "below_min_change")),  # 72: +12.5%
    (64, float("nan"), {}, (64, "no_estimate")),
    (64, 0.0, {}, (64, "no_estimate")),
    (64, 64.0, {}, (64, "hold")),
    (64, 2.0, {"kappa": 32.0}, (64, "hold")),
  ],
)
def test_hand_worked_decisions(batch, value, kw, want):
  new, _, reason = ab.decide(batch, value, settings(**kw))
  assert (new, reason) == want


def test_snap_ties_go_to_the_smaller_size():
  assert ab.snap(math.sqrt(32 * 64), (32, 64)) == 32
  assert ab.snap(46.0, (32, 64)) == 64  # √(32·64) = 45.25


def test_the_power_ladder():
  assert ab.power_ladder(64, 0, 1000) == (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
  assert ab.power_ladder(64, 16, 512, multiple=8) == (16, 32, 64, 128, 256, 512)
  assert ab.power_ladder(96, 20, 800, multiple=8) == (24, 48, 96, 192, 384, 768)
  assert ab.power_ladder(96, 0, 800, multiple=8) == (24, 48, 96, 192, 384, 768)  # 12, 6, 3 are not multiples of 8
  assert ab.power_ladder(100, 250, 300) == () and ab.power_ladder(100, 200, 300) == (200,)


def test_the_lr_rule_follows_the_optimizer_family():
  want = {
    "sgd": 1,
    "momentum": 1,
    "nesterov": 1,
    "lars": 1,
    "adam": 0,
    "adamw": 0,
    "lamb": 0,
    "rmsprop": 0,
    "adagrad": 0,
  }
  assert set(want) == set(optimizers.NAMES)  # every optimizer has a family
  for name, linear in want.items():
    rule = ab.lr_rule("auto", name)
    assert rule == ("linear" if linear else "sqrt"), name
    assert ab.lr_multiplier(rule, 256, 64) == (4.0 if linear else 2.0)
    for given in ("linear", "sqrt", "none"):  # a user's rule wins
      assert ab.lr_rule(given, name) == given
  assert ab.lr_multiplier("none", 256, 64) == 1.0
  with pytest.raises(ValueError, match="lr_rule"):
    ab.lr_rule("cubic", "sgd")


def test_the_signal_by_family_falls_back_to_simple_while_precond_is_nan():
  assert ab.signal_kind("auto", "lamb") == "auto:simple" and ab.signal_kind("auto", "lars") == "simple"
  assert ab.signal_kind("precond", "sgd") == "precond"
  est = {"simple": (500.0, 400.0, 600.0), "precond": (math.nan,) * 3}
  assert ab.read_signal("auto:simple", est.__getitem__) == ("simple", 500.0, 400.0, 600.0)
  est["precond"] = (900.0, 800.0, 1000.0)
  assert ab.read_signal("auto:simple", est.__getitem__) == ("precond", 900.0, 800.0, 1000.0)
  assert ab.read_signal("simple", est.__getitem__)[0] == "simple"


def test_the_controller_appends_stages_and_its_state_round_trips_through_json():
  s = settings(lr_rule="sqrt")
  c = ab.Controller(s, [ab.batch_schedule.Stage(0, 0, 64)])
  values = iter([math.nan, 300.0, 290.0, 40.0])
  for step, examples in ((4, 256), (8, 512), (10, 1024), (12, 1536)):
    v = next(values)
    c.decide(step, examples, lambda kind, v=v: (v, math.nan, math.nan))
  assert [r["reason"] for r in c.records] == ["no_estimate", "grow", "hold", "shrink"]
  assert [(st.start_step, st.start_example, st.batch_size, st.lr_multiplier) for st in c.stages] == [
    (0, 0, 64, 1.0),
    (8, 512, 256, 2.0),
    (12, 1536, 32, math.sqrt(0.5)),
  ]
  d = ab.Controller(s, [ab.batch_schedule.Stage(0, 0, 64)])
  d.load_state_dict(json.loads(json.dumps(c.state_dict())))
  assert d.stages == c.stages and d.records == c.records


def _config(**kw):
  cfg = mnist_lenet.get_config()
  flat = {
    "dataset": "synthetic",
    "synthetic.num_train": 1024,
    "synthetic.num_eval": 128,
    "batch_size": 32,
    "eval_batch_size": 128,
    "num_train_steps": 40,
    "num_microbatches": 2,
    "data_order": "examples",
    "batch_schedule": "adaptive",
    "progress": False,
    **kw,
  }
  cfg.update_from_flattened_dict(flat)
  return cfg


def test_a_valid_adaptive_plan_has_its_ladder_and_cadence():
  plan = validate.validate(_config(**{"adaptive_batch.every_examples": 100, "adaptive_batch.max_batch": 512}), 1)
  assert plan.adaptive.ladder == (2, 4, 8, 16, 32, 64, 128, 256, 512)  # multiples of 1 device × 2 micro-batches
  assert plan.decide_every_steps == 4  # ⌈100 / 32⌉ base-batch steps
  assert plan.adaptive.lr_rule == "linear" and plan.adaptive.signal == "simple"  # mnist_lenet: momentum
  lamb = validate.validate(_config(**{"optimizer.name": "lamb"}), 1)
  assert lamb.adaptive.lr_rule == "sqrt" and lamb.adaptive.signal == "auto:simple"


@pytest.mark.parametrize(
  "kw, fragment",
  [
    ({"num_microbatches": 1}, "cannot measure"),
    ({"diagnostics.noise_scale": False}, "cannot measure"),
    ({"data_order": "batches"}, "data_order='examples'"),
    ({"optimizer.lr_table": True}, "lr_table"),
    ({"adaptive_batch.min_batch": 512, "adaptive_batch.max_batch": 256}, "larger than max_batch"),
    ({"adaptive_batch.ladder": (32, 33)}, "ladder=33 is not divisible by 1 devices × 2 micro-batches"),
    ({"adaptive_batch.ladder": (32, 4096)}, "lies outside"),
    ({"adaptive_batch.kappa": 0.0}, "kappa"),
    ({"adaptive_batch.margin": -1.0}, "margin"),
    ({"adaptive_batch.signal": "loud"}, "signal"),
    ({"adaptive_batch.lr_rule": "cubic"}, "lr_rule"),
    ({"adaptive_batch.every_epochs": -1.0}, "adaptive_batch"),
    ({"adaptive_batch.min_batch": 40, "adaptive_batch.max_batch": 60}, "no size"),
  ],
)
def test_a_controller_that_cannot_run_is_one_sentence_before_compiling(kw, fragment):
  with pytest.raises(run_plan.ConfigError, match=fragment) as e:
    validate.validate(_config(**kw), 1)
  msg = str(e.value)
  assert "\n" not in msg and msg.count(". ") == 0, msg


def test_a_run_follows_the_noise_scale_and_logs_every_decision(tmp_path):
  """LeNet-5 on random labels (a large noise scale): the batch grows at the first decision, the LR follows the
  linear rule, and every decision is a row of batch_decisions.jsonl and a TensorBoard scalar."""
  from lamb_lars.common import io_utils
  from lamb_lars.train.trainer import train_and_evaluate
  from test_train import tensorboard_tags

  cfg = _config(
    **{
      "adaptive_batch.every_steps": 8,
      "adaptive_batch.every_epochs": -1.0,
      "adaptive_batch.ladder": (32, 64, 128),
      "eval_every_steps": 8,
      "checkpoint_every_steps": 0,
      "optimizer.schedule.decay": "constant",
      "num_devices": 2,
    }
  )
  workdir = str(tmp_path / "run")
  result = train_and_evaluate(cfg, workdir)
  decisions = io_utils.read_jsonl(os.path.join(workdir, ab.DECISIONS_FILE))
  assert [(r["step"], r["examples"]) for r in decisions[:2]] == [(8, 256), (16, 512)]  # every 256 examples
  assert all(r["event"] == "batch_decision" and r["signal"] == "simple" for r in decisions)
  first = next(r for r in decisions if r["to"] != r["from"])
  assert first["reason"] == "grow" and first["from"] == 32 and first["to"] in (64, 128)
  assert first["target"] == pytest.approx(min(first["estimate"] * first["kappa"], 1024))  # max_batch: the data
  rows = io_utils.read_jsonl(os.path.join(workdir, "metrics.jsonl"))
  assert all("event" not in r for r in rows)  # metrics.jsonl holds evaluations only
  k = first["to"] / 32
  lr0 = next(r["lr"] for r in rows if r["batch_size"] == 32)
  later = [r for r in rows if r["batch_size"] == first["to"]]
  assert later and later[0]["lr"] == pytest.approx(lr0 * k, rel=1e-6)  # linear: momentum
  assert rows[-1]["examples"] >= 40 * 32 > rows[-1]["examples"] - first["to"]  # 40 base steps, in examples
  assert result["status"] == "done" and result["step"] == rows[-1]["step"]
  tags = tensorboard_tags(os.path.join(workdir, "tensorboard"))
  assert [(s, v) for s, v in tags["optim/adaptive_batch/to"]] == [(r["step"], r["to"]) for r in decisions]


def test_the_example_runs_the_controller_on_a_user_workload(tmp_path, monkeypatch):
  """examples/adaptive_batch/config.py, cut to 2 epochs with a decision every half epoch: the digits workload (a
  model and data outside lamb_lars/) trains under the controller, every decision is recorded, the run finishes."""
  import importlib.util

  from lamb_lars.common import io_utils
  from lamb_lars.train.trainer import train_and_evaluate

  pytest.importorskip("sklearn")
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  monkeypatch.syspath_prepend(root)  # the workload's import path, examples.digits.workload, from the repository root
  spec = importlib.util.spec_from_file_location(
    "adaptive_config", os.path.join(root, "examples/adaptive_batch/config.py")
  )
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  cfg = module.get_config()
  cfg.update_from_flattened_dict(
    {"num_epochs": 2.0, "adaptive_batch.every_epochs": 0.5, "num_devices": 1, "progress": False}
  )
  workdir = str(tmp_path / "run")
  result = train_and_evaluate(cfg, workdir)
  decisions = io_utils.read_jsonl(os.path.join(workdir, ab.DECISIONS_FILE))
  assert result["status"] == "done"
  assert len(decisions) >= 3  # every ⌈0.5 · 1257 / 32⌉ = 20 base steps = 640 examples; the run is 79 (2,528)
  for i, r in enumerate(decisions):  # at the first step boundary at or after each multiple of 640 examples
    assert r["examples"] - r["from"] < 640 * (i + 1) <= r["examples"], decisions
  assert all(r["to"] >= r["from"] for r in decisions)  # grow_only


@pytest.mark.slow
def test_the_controller_decides_the_same_resident_host_fed_and_under_pmap(tmp_path):
  """Two devices, one micro-batch each (the noise scale from the devices alone): the same decisions and the same
  stages whichever feeder and parallelism run them; losses within float tolerance."""
  from lamb_lars.common import io_utils
  from lamb_lars.train.trainer import train_and_evaluate

  common = {
    "num_devices": 2,
    "num_microbatches": 1,
    "num_train_steps": 24,
    "adaptive_batch.every_steps": 6,
    "adaptive_batch.every_epochs": -1.0,
    "adaptive_batch.ladder": (32, 64, 128),
    "eval_every_steps": 0,
    "checkpoint_every_steps": 0,
  }
  runs, decisions = [], []
  for name, par, dod in (("resident", "jit", "yes"), ("host", "jit", "no"), ("pmap", "pmap", "no")):
    cfg = _config(**common, parallelism=par, data_on_device=dod)
    runs.append(train_and_evaluate(cfg, str(tmp_path / name)))
    decisions.append(io_utils.read_jsonl(str(tmp_path / name / ab.DECISIONS_FILE)))
  keys = ("step", "examples", "from", "to", "reason")
  want = [[{k: r[k] for k in keys} for r in d] for d in decisions[:1]] * 3
  assert [[{k: r[k] for k in keys} for r in d] for d in decisions] == want
  assert any(r["to"] != r["from"] for r in decisions[0])
  assert [r["step"] for r in runs] == [runs[0]["step"]] * 3
  for r in runs[1:]:
    for key in ("train_loss", "eval_loss"):
      np.testing.assert_allclose(r["final"][key], runs[0]["final"][key], rtol=1e-4)
