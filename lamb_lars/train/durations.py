"""Every duration of a run — total, warmup, decay cycle, step boundaries, eval and checkpoint cadence — in steps.

A config names a duration in one of four units (big_vision's ``u.steps`` convention):

  steps     s                                   as given
  epochs    e  → ⌈e · N / B⌉                    N training examples, B the global batch
  examples  n  → ⌈n / B⌉
  percent   p  → ⌈p / 100 · T⌉                  T the total number of steps

**One rounding rule: round up**, so a duration is never shortened (a tolerance of 1e-9 keeps exact products such
as 2 · 60000 / 240 = 500 from becoming 501). An epoch counts examples seen, N / B steps, not whole batches: at batch
819,200 on ImageNet (N = 1,281,167) 90 epochs are ⌈140.8⌉ = 141 steps (You et al. 2020, §3.1), although each data
epoch only holds one whole batch. The data order uses whole batches (``RunPlan.batches_per_epoch``); durations never
do.

Prefixed keys: a duration ``name`` is given by at most one of ``name_steps``, ``name_epochs``, ``name_examples`` or
``name_percent`` (non-negative; negative or unset means "not given"), e.g. ``warmup_epochs = 5.0``.
"""
from __future__ import annotations

import math
from typing import Any, Optional

UNITS = ("steps", "epochs", "examples", "percent")
_TOLERANCE = 1e-9


def to_steps(value: float, unit: str, *, num_train: int, batch_size: int, total_steps: Optional[int] = None) -> int:
  """``value`` ``unit`` as a number of optimizer steps, rounded up (formulas in the module docstring)."""
  return int(math.ceil(to_exact_steps(value, unit, num_train=num_train, batch_size=batch_size,
                                      total_steps=total_steps) - _TOLERANCE))


def to_exact_steps(value: float, unit: str, *, num_train: int, batch_size: int,
                   total_steps: Optional[int] = None) -> float:
  """``value`` ``unit`` in optimizer steps *before* rounding (e.g. 16 epochs of 60,000 at batch 8192 = 117.1875).

  Only a schedule that is defined on fractional steps uses it: the authors' TensorFlow warmup (``schedules.tf_poly``)
  divides by 60000·W/B unrounded. Every other duration is :func:`to_steps`."""
  if unit == "steps":
    return float(value)
  if unit == "epochs":
    exact = value * num_train / batch_size
  elif unit == "examples":
    exact = value / batch_size
  elif unit == "percent":
    if total_steps is None:
      raise ValueError("A duration in percent needs the total number of steps.")
    exact = value / 100.0 * total_steps
  else:
    raise ValueError(f"unit must be one of {UNITS}; got {unit!r}.")
  return exact


def _get(cfg: Any, key: str) -> Any:
  return cfg.get(key, None) if hasattr(cfg, "get") else getattr(cfg, key, None)


def given(cfg: Any, name: str) -> dict[str, float]:
  """The unit → value pairs set (≥ 0) for duration ``name`` in ``cfg``."""
  out = {}
  for unit in UNITS:
    v = _get(cfg, f"{name}_{unit}")
    if v is not None and v >= 0:
      out[unit] = v
  return out


def steps(name: str, cfg: Any, *, num_train: int, batch_size: int, total_steps: Optional[int] = None,
          default: Optional[int] = None) -> int:
  """The duration ``name`` of ``cfg`` in steps; ValueError naming the keys when more than one unit is given, or
  none and there is no ``default``."""
  return int(math.ceil(exact_steps(name, cfg, num_train=num_train, batch_size=batch_size, total_steps=total_steps,
                                   default=default) - _TOLERANCE))


def exact_steps(name: str, cfg: Any, *, num_train: int, batch_size: int, total_steps: Optional[int] = None,
                default: Optional[float] = None) -> float:
  """:func:`steps` before rounding (see :func:`to_exact_steps`)."""
  g = given(cfg, name)
  if len(g) > 1:
    raise ValueError(f"Give the duration '{name}' in one unit only; got {', '.join(f'{name}_{u}' for u in g)}.")
  if not g:
    if default is None:
      raise ValueError(f"Set one of {', '.join(f'{name}_{u}' for u in UNITS)}.")
    return float(default)
  (unit, value), = g.items()
  return to_exact_steps(value, unit, num_train=num_train, batch_size=batch_size, total_steps=total_steps)
