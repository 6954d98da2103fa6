"""One conversion of durations into steps, one rounding rule: round up, so a duration is never shortened."""

import math

import pytest

from lamb_lars.common import durations

N, B = 60_000, 256  # 234.375 steps per epoch


@pytest.mark.parametrize(
  "value, unit, want",
  [
    (7, "steps", 7),
    (1.0, "epochs", 235),  # ⌈234.375⌉: one epoch of examples is never cut short
    (2.0, "epochs", 469),  # ⌈468.75⌉
    (90.0, "epochs", math.ceil(90 * N / B)),
    (256 * 10, "examples", 10),  # exact: no extra step
    (256 * 10 + 1, "examples", 11),  # one example more needs one step more
    (10.0, "percent", 47),  # ⌈0.1 · 469⌉ of the total
    (0.0, "epochs", 0),
  ],
)
def test_each_unit_rounds_up(value, unit, want):
  assert durations.to_steps(value, unit, num_train=N, batch_size=B, total_steps=469) == want


def test_exact_products_do_not_round_up_by_float_error():
  assert durations.to_steps(2.0, "epochs", num_train=60_000, batch_size=240) == 500
  assert durations.to_steps(0.3, "epochs", num_train=1000, batch_size=100) == 3  # 0.3 · 10 = 3.0000000000000004


def test_huge_batch_epochs_count_examples():
  """You et al. 2020 §3.1: 90 epochs of ImageNet at batch 819,200 are 141 steps (one whole batch per data epoch)."""
  assert durations.to_steps(90, "epochs", num_train=1_281_167, batch_size=819_200) == 141


def test_one_precedence_rule_for_every_duration():
  """A unit counts when > 0; the first of steps, examples, epochs, percent wins; none given → the default."""
  cfg = dict(warmup_steps=-1, warmup_epochs=2.0, warmup_examples=-1, warmup_percent=-1.0)
  assert durations.steps("warmup", cfg, num_train=N, batch_size=B) == 469
  assert durations.steps("warmup", dict(cfg, warmup_steps=5), num_train=N, batch_size=B) == 5  # steps win
  assert durations.steps("warmup", dict(cfg, warmup_examples=B * 3), num_train=N, batch_size=B) == 3  # over epochs
  assert (
    durations.steps(
      "warmup", dict(cfg, warmup_epochs=0.0, warmup_percent=10.0), num_train=N, batch_size=B, total_steps=100
    )
    == 10
  )
  assert durations.steps("warmup", dict(cfg, warmup_epochs=0.0), num_train=N, batch_size=B, default=0) == 0
  total = dict(num_train_steps=7, num_epochs=30.0)  # the total's keys are unprefixed, under the same rule
  assert durations.steps("total", total, num_train=N, batch_size=B) == 7
  assert durations.steps("total", dict(total, num_train_steps=-1), num_train=N, batch_size=B) == math.ceil(30 * N / B)
  assert durations.steps("cycle", {}, num_train=N, batch_size=B, default=0) == 0
  with pytest.raises(ValueError, match="Set one of config.cycle_steps, config.cycle_examples"):
    durations.steps("cycle", {}, num_train=N, batch_size=B)
  with pytest.raises(ValueError, match="Set one of config.num_train_steps, config.num_epochs"):
    durations.steps("total", dict(num_train_steps=-1, num_epochs=0.0), num_train=N, batch_size=B)
  with pytest.raises(ValueError, match="total number of steps"):
    durations.to_steps(10.0, "percent", num_train=N, batch_size=B)
  with pytest.raises(ValueError, match="unit must be one of"):
    durations.to_steps(1, "hours", num_train=N, batch_size=B)


def test_the_plan_takes_every_duration_from_the_one_helper(monkeypatch):
  """Total, warmup, eval and checkpoint cadence all go through ``durations.steps`` (no rule of their own)."""
  from lamb_lars.configs import default
  from lamb_lars.train import run_plan

  names, real = [], durations.steps
  monkeypatch.setattr(durations, "steps", lambda name, *a, **k: names.append(name) or real(name, *a, **k))
  c = default.get_config()
  c.optimizer.schedule.warmup_steps, c.optimizer.schedule.warmup_epochs = 5, 1.0  # two units: steps win
  plan = run_plan.make_plan(c, num_train=N, num_devices=1)
  assert sorted(names) == ["checkpoint_every", "eval_every", "total", "warmup"]
  assert (plan.warmup_steps, plan.total_steps, plan.eval_every_steps) == (5, math.ceil(30 * N / B), 235)
