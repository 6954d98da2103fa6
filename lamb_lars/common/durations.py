"""Every duration of a run — total, warmup, decay cycle, step boundaries, eval and checkpoint cadence — in steps.

A config names a duration in one of four units (big_vision's ``u.steps`` convention):

  steps     s                                   as given
  examples  n  → ⌈n / B⌉
  epochs    e  → ⌈e · N / B⌉                    N training examples, B the global batch
  percent   p  → ⌈p / 100 · T⌉                  T the total number of steps

**One rounding rule: round up**, so a duration is never shortened (a tolerance of 1e-9 keeps exact products such
as 2 · 60000 / 240 = 500 from becoming 501). An epoch counts examples seen, N / B steps, not whole batches: at batch
819,200 on ImageNet (N = 1,281,167) 90 epochs are ⌈140.8⌉ = 141 steps (You et al. 2020, §3.1), although each data
epoch only holds one whole batch. The data order uses whole batches (``RunPlan.batches_per_epoch``); durations never
do.

**One precedence rule.** A duration ``name`` is read from the keys ``name_steps``, ``name_examples``, ``name_epochs``,
``name_percent`` (those the config has; the total is ``num_train_steps`` / ``num_epochs``). A unit is *given* when
its value is > 0; the first given unit in the order steps, examples, epochs, percent is the duration, and when none
is given the duration is its default (0 for warmup: none; 0 for eval and checkpoint cadence: only at the end; the
total has none and must be given). So ``--config.num_train_steps=100`` shortens a config that counts epochs, and
``--config.eval_every_steps=10`` overrides its ``eval_every_epochs``, without unsetting the other key.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Optional

UNITS = ("steps", "examples", "epochs", "percent")  # the precedence order
_TOLERANCE = 1e-9
TOTAL_KEYS = {"steps": "num_train_steps", "epochs": "num_epochs"}  # the total's unprefixed keys


def to_exact_steps(
  value: float, unit: str, *, num_train: int, batch_size: int, total_steps: Optional[int] = None
) -> float:
  """``value`` ``unit`` in optimizer steps *before* rounding (e.g. 16 epochs of 60,000 at batch 8192 = 117.1875).

  Only a schedule that is defined on fractional steps uses it: the authors' TensorFlow warmup (``schedules.tf_poly``)
  divides by 60000·W/B unrounded. Every other duration is :func:`to_steps`."""
  if unit == "steps":
    return float(value)
  if unit == "epochs":
    return value * num_train / batch_size
  if unit == "examples":
    return value / batch_size
  if unit == "percent":
    if total_steps is None:
      raise ValueError("A duration in percent needs the total number of steps.")
    return value / 100.0 * total_steps
  raise ValueError(f"unit must be one of {UNITS}; got {unit!r}.")


def to_steps(value: float, unit: str, *, num_train: int, batch_size: int, total_steps: Optional[int] = None) -> int:
  """``value`` ``unit`` as a number of optimizer steps, rounded up (formulas in the module docstring)."""
  return int(
    math.ceil(
      to_exact_steps(value, unit, num_train=num_train, batch_size=batch_size, total_steps=total_steps) - _TOLERANCE
    )
  )


def keys(name: str) -> dict[str, str]:
  """unit → config key of duration ``name`` (``'total'``: ``num_train_steps`` / ``num_epochs``)."""
  return dict(TOTAL_KEYS) if name == "total" else {unit: f"{name}_{unit}" for unit in UNITS}


def given(cfg: Mapping[str, Any], name: str) -> Optional[tuple[str, float]]:
  """(unit, value) of duration ``name`` under the precedence rule (module docstring), or None when none is given."""
  for unit, key in keys(name).items():
    if key in cfg and cfg[key] is not None and cfg[key] > 0:
      return unit, cfg[key]
  return None


def exact_steps(
  name: str,
  cfg: Mapping[str, Any],
  *,
  num_train: int,
  batch_size: int,
  total_steps: Optional[int] = None,
  default: Optional[float] = None,
) -> float:
  """:func:`steps` before rounding (see :func:`to_exact_steps`)."""
  g = given(cfg, name)
  if g is None:
    if default is None:
      raise ValueError(f"Set one of {', '.join(f'config.{k}' for k in keys(name).values())} to a positive duration.")
    return float(default)
  return to_exact_steps(g[1], g[0], num_train=num_train, batch_size=batch_size, total_steps=total_steps)


def steps(
  name: str,
  cfg: Mapping[str, Any],
  *,
  num_train: int,
  batch_size: int,
  total_steps: Optional[int] = None,
  default: Optional[int] = None,
) -> int:
  """The duration ``name`` of ``cfg`` (a ConfigDict or dict) in steps, rounded up; ValueError naming the keys when
  none is given and there is no ``default``."""
  return int(
    math.ceil(
      exact_steps(name, cfg, num_train=num_train, batch_size=batch_size, total_steps=total_steps, default=default)
      - _TOLERANCE
    )
  )
