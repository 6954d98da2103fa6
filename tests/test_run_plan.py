"""Validation before compiling: one clear sentence per problem; step arithmetic."""

import math

import pytest

from lamb_lars.configs import default
from lamb_lars.train import run_plan


def cfg(**kw):
  c = default.get_config()
  for k, v in kw.items():
    *path, last = k.split(".")
    node = c
    for part in path:
      node = node[part]
    node[last] = v
  return c


def test_plan_arithmetic():
  p = run_plan.make_plan(cfg(batch_size=256, num_epochs=2.0), num_train=60000, num_devices=8)
  assert (p.batches_per_epoch, p.total_steps, p.per_device_batch) == (234, 469, 32)  # ⌈2 · 60000/256⌉
  assert p.eval_every_steps == 235 and p.chunk_size(0) == 50 and p.chunk_size(200) == 35  # ⌈234.375⌉
  assert p.next_boundary(235) == 469 and p.next_boundary(468) == 469
  assert p.epoch_of(469) == pytest.approx(469 * 256 / 60000)


def test_huge_batch_epochs_count_examples():
  """At batch 819,200 on ImageNet, 90 epochs are 141 steps (paper §3.1), not 90 whole-batch data epochs."""
  c = cfg(batch_size=819200, num_epochs=90.0, dataset="imagenet2012")
  p = run_plan.make_plan(c, num_train=1281167, num_devices=8)
  assert (p.total_steps, p.batches_per_epoch) == (141, 1)


def test_steps_override_epochs():
  p = run_plan.make_plan(cfg(num_train_steps=7), num_train=60000, num_devices=1)
  assert p.total_steps == 7


def test_accumulation_per_device_batch():
  p = run_plan.make_plan(cfg(batch_size=60000, num_microbatches=15), num_train=60000, num_devices=8)
  assert p.per_device_batch == 500 and p.batches_per_epoch == 1


@pytest.mark.parametrize(
  "batch, devices, micro, k",
  [
    (8192, 1, 256, 32),
    (55000, 1, 256, 220),
    (55000, 8, 256, 0),
    (256, 1, 256, 1),
    (60000, 8, 256, 30),
    (512, 1, 128, 4),
  ],
)
def test_microbatch_size_derives_the_count(batch, devices, micro, k):
  """Each micro-batch is the largest divisor of the per-device batch ≤ microbatch_size (k = 0: 55000 over 8
  devices is 6875 = 5⁴·11 per device, whose largest divisor ≤ 256 is 125: refused rather than silently halved)."""
  c = cfg(batch_size=batch, microbatch_size=micro)
  if not k:
    with pytest.raises(ValueError, match="per-device batch 6875"):
      run_plan.make_plan(c, num_train=60000, num_devices=devices)
    return
  p = run_plan.make_plan(c, num_train=60000, num_devices=devices)
  assert p.num_microbatches == k and p.per_device_batch * k * devices == batch
  assert p.per_device_batch <= micro and all((batch // devices) % d for d in range(p.per_device_batch + 1, micro + 1))


@pytest.mark.parametrize(
  "kw, words",
  [
    (dict(batch_size=2 * 257, microbatch_size=256), r"no divisor of the per-device batch 514 lies in \(128, 256\]"),
    (dict(batch_size=512, microbatch_size=256, num_microbatches=2), "set one of them"),
  ],
)
def test_microbatch_size_errors(kw, words):
  with pytest.raises(ValueError, match=words):
    run_plan.make_plan(cfg(**kw), num_train=60000, num_devices=1)


@pytest.mark.parametrize(
  "kw, words",
  [
    (dict(batch_size=100), "not divisible by 8 devices × 1 micro-batches"),
    (dict(batch_size=256, num_microbatches=3), "× 3 micro-batches"),
    (dict(batch_size=120000), "exceeds the 60000 training examples"),
    (dict(**{"bn.group_devices": 3}), "does not divide the 8 devices"),
    (dict(dataset="mnsit"), "config.dataset='mnsit' is not one of"),
    (dict(parallelism="tpu"), "config.parallelism"),
    (dict(eval_batch_size=1001), "eval_batch_size"),
    (dict(num_epochs=0.0), "positive duration"),
    (dict(steps_per_call=0), "config.steps_per_call=0 must be an integer ≥ 1"),
    (dict(steps_per_fetch=-1), "config.steps_per_fetch=-1 must be an integer ≥ 0"),
  ],
)
def test_errors(kw, words):
  with pytest.raises(run_plan.ConfigError, match=words.replace("(", r"\(")):
    run_plan.make_plan(cfg(**kw), num_train=60000, num_devices=8)


@pytest.mark.parametrize(
  "kw, words",
  [
    (dict(**{"stop.target_mode": "up"}), "config.stop.target_mode"),
    (dict(**{"stop.target_metric": "validation_loss"}), "needs config.validation_split"),
    (dict(**{"stop.dead_after_fraction": 1.5}), "dead_after_fraction"),
  ],
)
def test_stop_errors(kw, words):
  from lamb_lars.train import stopping

  with pytest.raises(run_plan.ConfigError, match=words):
    stopping.validate(cfg(**kw))


def test_steps_per_call_and_steps_per_fetch_say_what_they_do():
  """steps_per_call: optimizer steps per compiled call (was the unvalidated ``scan_steps``); steps_per_fetch: steps
  between two metric fetches of the host (0 = auto, ≤ 50 and ≤ an epoch)."""
  p = run_plan.make_plan(cfg(steps_per_call=4), num_train=60000, num_devices=1)
  assert (p.steps_per_call, p.steps_per_fetch, p.chunk_size(0)) == (4, 50, 50)
  p = run_plan.make_plan(cfg(steps_per_fetch=7, batch_size=30000), num_train=60000, num_devices=1)
  assert (p.steps_per_call, p.steps_per_fetch, p.chunk_size(0)) == (1, 7, 2)  # an epoch of 2 steps ends the chunk


def test_per_device_batch_below_one():
  with pytest.raises(ValueError, match="not divisible"):
    run_plan.make_plan(cfg(batch_size=4), num_train=60000, num_devices=8)


def test_every_duration_rounds_up_in_the_same_way():
  """Total, warmup, eval and checkpoint cadence all go through lamb_lars.common.durations: epochs are N/B steps,
  rounded up."""
  c = cfg(
    batch_size=256,
    num_epochs=1.5,
    eval_every_epochs=0.5,
    checkpoint_every_epochs=0.25,
    **{"optimizer.schedule.warmup_epochs": 0.1},
  )
  p = run_plan.make_plan(c, num_train=60000, num_devices=8)
  n_b = 60000 / 256
  assert (p.total_steps, p.eval_every_steps, p.checkpoint_every_steps, p.warmup_steps) == tuple(
    math.ceil(e * n_b) for e in (1.5, 0.5, 0.25, 0.1)
  )
  c = cfg(num_train_steps=10, eval_every_steps=3, eval_every_epochs=1.0, checkpoint_every_epochs=0.0)
  p = run_plan.make_plan(c, num_train=60000, num_devices=8)
  assert (p.total_steps, p.eval_every_steps, p.checkpoint_every_steps) == (10, 3, 0)  # steps win; 0 = off


# ------------------------------------------------ diagnostics under BN groups that span devices (issue 10, item 8)


@pytest.mark.parametrize("key", ["noise_scale", "signal_to_noise"])
def test_per_device_diagnostics_refused_when_bn_groups_span_devices(key):
  """With BN groups across devices, a device's gradient depends on other devices' examples: no B_small gradient."""
  c = cfg(model="small_cnn", **{"bn.group_devices": 2, f"diagnostics.{key}": True})
  with pytest.raises(run_plan.ConfigError, match=rf"diagnostics\.{key}.*bn\.group_devices"):
    run_plan.make_plan(c, num_train=60000, num_devices=8)


@pytest.mark.parametrize(
  "kw, devices, want",
  [
    (dict(model="small_cnn"), 8, (True, False)),  # per-device BN, 8 devices
    (dict(model="small_cnn", **{"bn.group_devices": 2}), 8, (False, False)),  # groups span devices
    (dict(model="small_cnn", **{"bn.examples_per_group": 64}), 8, (False, False)),  # 32/device → 2 devices
    (dict(model="small_cnn", **{"bn.examples_per_group": 16}), 8, (True, False)),  # ghost 16 inside a device
    (dict(model="small_cnn"), 1, (False, False)),  # one device: no B_small
    (dict(model="small_cnn", num_microbatches=2), 1, (True, False)),  # ... unless 2 micro-batches
    (dict(model="lenet5", **{"bn.group_devices": 2}), 8, (True, False)),  # no BN: nothing couples
    (
      dict(model="small_cnn", **{"diagnostics.noise_scale": False, "diagnostics.signal_to_noise": True}),
      8,
      (False, True),
    ),
  ],
)
def test_diagnostics_plan_auto(kw, devices, want):
  c = cfg(**kw)
  assert c.diagnostics.noise_scale == "auto" or "diagnostics.noise_scale" in kw
  p = run_plan.make_plan(c, num_train=60000, num_devices=devices)
  d = run_plan.diagnostics_plan(c, p)
  assert (d.noise_scale, d.signal_to_noise) == want
  assert p.diagnostics == d


@pytest.mark.parametrize(
  "kw, words",
  [
    ({"diagnostics.noise_scale": "yes"}, "diagnostics.noise_scale='yes' is not one of"),
    ({"diagnostics.noise_scale": True}, "at least 2 gradient samples per step"),
  ],
)
def test_diagnostics_errors(kw, words):
  with pytest.raises(run_plan.ConfigError, match=words):
    run_plan.make_plan(cfg(**kw), num_train=60000, num_devices=1)
