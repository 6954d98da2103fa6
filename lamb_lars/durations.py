"""Durations given as steps, epochs, examples or a percent of training, turned into steps (big_vision style).

A config names a duration by a prefix, e.g. ``warmup``; exactly one of ``warmup_steps``, ``warmup_epochs``,
``warmup_examples`` or ``warmup_percent`` may be set (non-negative; unset or negative means "not given").
"""
from __future__ import annotations

import math
from typing import Any, Optional

_SUFFIXES = ("steps", "epochs", "examples", "percent")


def _get(cfg: Any, key: str):
  if hasattr(cfg, "get"):
    return cfg.get(key, None)
  return getattr(cfg, key, None)


def given(cfg: Any, name: str) -> dict:
  """The unit→value pairs set (≥ 0) for duration ``name`` in ``cfg``."""
  out = {}
  for suffix in _SUFFIXES:
    v = _get(cfg, f"{name}_{suffix}")
    if v is not None and v >= 0:
      out[suffix] = v
  return out


def to_steps(cfg: Any, name: str, *, steps_per_epoch: float, batch_size: int,
             total_steps: Optional[int] = None, default: Optional[int] = None) -> int:
  """Number of steps for duration ``name``; rounds up so that a duration is never silently shortened.

  Raises ValueError naming the keys when more than one unit is given, or none and no default.
  """
  g = given(cfg, name)
  if len(g) > 1:
    keys = ", ".join(f"{name}_{k}" for k in g)
    raise ValueError(f"Give the duration '{name}' in one unit only; got {keys}.")
  if not g:
    if default is None:
      raise ValueError(f"Set one of {', '.join(f'{name}_{s}' for s in _SUFFIXES)}.")
    return int(default)
  (unit, value), = g.items()
  if unit == "steps":
    return int(value)
  if unit == "epochs":
    return int(math.ceil(value * steps_per_epoch - 1e-9))
  if unit == "examples":
    return int(math.ceil(value / batch_size - 1e-9))
  if total_steps is None:
    raise ValueError(f"'{name}_percent' needs the total number of steps.")
  return int(math.ceil(value / 100.0 * total_steps - 1e-9))
