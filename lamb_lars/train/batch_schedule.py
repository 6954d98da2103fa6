"""Batch-size schedules: a run whose global batch changes at given points of training (``config.batch_schedule``).

Why. Smith et al. 2017 ("Don't Decay the Learning Rate, Increase the Batch Size", arXiv:1711.00489) grow the batch
instead of decaying the LR; Merrill et al. 2025 ("Critical Batch Size Revisited", arXiv:2505.23971, §5) grow it as
the measured critical batch grows (*batch-size warmup*) and save 43% of the steps on OLMo 1B. Both need a trainer
whose batch can change inside one run.

The schedule. ``config.batch_schedule = "E1:B1,E2:B2,…"``: from E_i (``config.batch_schedule_unit``: 'epochs' or
'examples') the global batch is B_i; before E1 it is ``config.batch_size`` = B0, the base batch. Training is cut
into *stages*; stage i starts at the first step boundary at or after its point (the previous stage's last step is
never cut short), so each stage is a whole number of steps at one batch, and the run's clock is examples seen:

  S_i = S_{i-1} + ⌈(X_i − E_{i-1}) / B_{i-1}⌉,   E_i = E_{i-1} + (S_i − S_{i-1})·B_{i-1}

(S_i its first step, E_i the examples seen before it, X_i its point in examples). Every duration of the config
(total, warmup, eval and checkpoint cadence) is counted in steps of the base batch and then in examples
(:mod:`lamb_lars.common.durations`), so "30 epochs" means 30·N examples whatever the schedule.

The LR (``config.batch_schedule_lr``). The LR schedule of ``config.optimizer`` is the base run's, at B0, read at the
examples seen: the update that starts at E examples, in stage i, uses η_base(E/B0)·rule(B_i/B0), rule 'linear'
(k), 'sqrt' (√k) or 'none' (1). Linear follows Goyal et al. 2017 for SGD; Smith et al. 2017 keep the LR and let
the batch do the decaying ('none').
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Sequence

import jax.numpy as jnp
import numpy as np

from lamb_lars.common import durations

UNITS = ("epochs", "examples")
LR_RULES = {"linear": lambda k: k, "sqrt": math.sqrt, "none": lambda k: 1.0}


@dataclasses.dataclass(frozen=True)
class Stage:
  """One stage: its first step, the examples seen before it, its global batch, and its LR multiplier."""

  start_step: int
  start_example: int
  batch_size: int
  lr_multiplier: float = 1.0


def parse(spec: str, unit: str, num_train: int) -> list[tuple[int, int]]:
  """``"E1:B1,E2:B2"`` → [(X_i in examples, B_i)]; ValueError (one sentence) for a malformed entry."""
  if unit not in UNITS:
    raise ValueError(f"config.batch_schedule_unit={unit!r} is not one of {', '.join(map(repr, UNITS))}.")
  out = []
  for entry in (e.strip() for e in spec.split(",") if e.strip()):
    point, sep, batch = entry.partition(":")
    try:
      x, b = float(point), int(batch)
    except ValueError:
      x, b = -1.0, 0
    if not sep or x <= 0 or b < 1 or not math.isfinite(x):
      raise ValueError(
        f"config.batch_schedule entry {entry!r} is not FROM:BATCH with FROM > 0 ({unit}) and BATCH "
        f"a positive integer, e.g. '2:512,4:1024'."
      )
    # A point in examples is a duration at batch 1 (lamb_lars/common/durations.py: epochs are x·N, rounded up).
    out.append((durations.to_steps(x, unit, num_train=num_train, batch_size=1), b))
  if any(b[0] <= a[0] for a, b in zip(out, out[1:])):
    raise ValueError(f"config.batch_schedule={spec!r}: the points must increase.")
  return out


def stages(base_batch: int, points: Sequence[tuple[int, int]], total_examples: int, rule: str) -> list[Stage]:
  """The stages of a run of ``total_examples`` (formulas in the module docstring); stage 0 is the base batch."""
  if rule not in LR_RULES:
    raise ValueError(f"config.batch_schedule_lr={rule!r} is not one of {', '.join(map(repr, LR_RULES))}.")
  out = [Stage(0, 0, base_batch)]
  for x, b in points:
    last = out[-1]
    if x >= total_examples:
      raise ValueError(
        f"config.batch_schedule: the stage at {x} examples starts after training ends "
        f"({total_examples} examples); drop it or lengthen the run."
      )
    steps = int(math.ceil((x - last.start_example) / last.batch_size))
    out.append(
      Stage(
        last.start_step + steps, last.start_example + steps * last.batch_size, b, float(LR_RULES[rule](b / base_batch))
      )
    )
  return out


def index(stages_: Sequence[Stage], step: int) -> int:
  """The stage that step ``step`` (0-based: the update from ``step`` to ``step + 1``) belongs to."""
  return int(np.searchsorted([s.start_step for s in stages_], step, side="right")) - 1


def examples(stages_: Sequence[Stage], step: int) -> int:
  """Examples seen after ``step`` steps."""
  s = stages_[index(stages_, max(step - 1, 0))] if step > 0 else stages_[0]
  return s.start_example + (step - s.start_step) * s.batch_size


def step_reaching(stages_: Sequence[Stage], n: int) -> int:
  """The first step count after which at least ``n`` examples have been seen."""
  i = len(stages_) - 1
  while i > 0 and stages_[i].start_example > n:
    i -= 1
  s = stages_[i]
  return s.start_step + max(0, int(math.ceil((n - s.start_example) / s.batch_size)))


def reschedule(stages_: Sequence[Stage], base_batch: int) -> Callable[[Callable], Callable]:
  """Wraps the base LR schedule (a function of base-batch steps) into one of this run's update count (docstring)."""
  starts = jnp.asarray([s.start_step for s in stages_])
  firsts = jnp.asarray([s.start_example for s in stages_], jnp.float32)
  batches = jnp.asarray([s.batch_size for s in stages_], jnp.float32)
  mults = jnp.asarray([s.lr_multiplier for s in stages_], jnp.float32)

  def wrap(base: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def schedule(count):
      i = jnp.searchsorted(starts, count, side="right") - 1
      seen = firsts[i] + (count - starts[i]) * batches[i]
      return base(seen / base_batch) * mults[i]

    return schedule

  return wrap
