"""Steps (epochs, wall-clock) to a target, per batch size (Shallue et al. 2018, "Measuring the Effects of Data
Parallelism on Neural Network Training", §3).

For each batch size B, a metaparameter search gives trials. A trial's steps-to-target is the step of its *first*
evaluation that meets the goal (``metric ≥ goal`` for ``mode='max'``, ``metric ≤ goal`` for ``mode='min'``; NaN
never meets). The batch size's result is the best trial's:

  S(B) = min over feasible trials at B of (first step meeting the goal).

Feasibility: trials with status ``diverged`` or ``failed`` are infeasible (Shallue et al.: "diverged trials are
infeasible") — even if an eval met the goal before the run blew up. Trials still ``pending``/``running`` are
used with the evals they have so far.

Ties (equal steps) are broken deterministically: the smaller wall-clock time at the hit wins, then the
lexicographically smaller run_id (a trial without wall time loses to one with it). With ``by='wall_time'`` the
objective is the wall-clock time at the hit (Golmant et al. 2018's time-to-target), ties broken by steps then
run_id; ``by='epochs'`` uses the epoch at the hit, ties by steps, wall time, run_id.

A batch size where no trial meets the goal is still reported, with ``steps=None`` (``reached`` is False).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Iterable, Mapping, Optional, Sequence

from lamb_lars.study.records import Trial

INFEASIBLE = ("diverged", "failed")
_INF = float("inf")


@dataclasses.dataclass(frozen=True)
class Result:
  """Best trial at one batch size. ``steps``/``epochs``/``examples``/``wall_time`` are at its first hit.

  num_trials: all trials at this batch; num_feasible: those not diverged/failed; num_reached: feasible trials
  whose curve meets the goal.
  """

  batch_size: int
  steps: Optional[int]
  epochs: Optional[float]
  examples: Optional[int]
  wall_time: Optional[float]
  best_run_id: Optional[str]
  num_trials: int
  num_feasible: int
  num_reached: int

  @property
  def reached(self) -> bool:
    return self.steps is not None


def meets(value: Any, goal: float, mode: str = "max") -> bool:
  """Whether ``value`` meets ``goal``: ≥ for mode 'max', ≤ for mode 'min'; missing or NaN never meets."""
  if mode not in ("max", "min"):
    raise ValueError(f"mode must be 'max' or 'min', got {mode!r}")
  if value is None:
    return False
  value = float(value)
  if math.isnan(value):
    return False
  return value >= goal if mode == "max" else value <= goal


def first_hit(
  curve: Iterable[Mapping[str, Any]], metric: str, goal: float, mode: str = "max"
) -> Optional[Mapping[str, Any]]:
  """The earliest eval row (by step) whose ``metric`` meets ``goal``; None if none does."""
  for row in sorted(curve, key=lambda r: r["step"]):
    if meets(row.get(metric), goal, mode):
      return row
  return None


def _opt(x: Any) -> float:
  return _INF if x is None else float(x)


def _sort_key(by: str, row: Mapping[str, Any], run_id: str) -> tuple:
  steps, wall, epochs = row["step"], _opt(row.get("wall_time")), _opt(row.get("epoch"))
  if by == "steps":
    return (steps, wall, run_id)
  if by == "wall_time":
    return (wall, steps, run_id)
  if by == "epochs":
    return (epochs, steps, wall, run_id)
  raise ValueError(f"by must be 'steps', 'wall_time' or 'epochs', got {by!r}")


def best_hit(
  trials: Sequence[Trial], metric: str, goal: float, mode: str = "max", by: str = "steps"
) -> tuple[Optional[Trial], Optional[Mapping[str, Any]]]:
  """The feasible trial with the best first hit (see module docstring for the order) and that hit row."""
  best, best_key = (None, None), None
  for t in trials:
    if t.status in INFEASIBLE:
      continue
    row = first_hit(t.curve, metric, goal, mode)
    if row is None:
      continue
    key = _sort_key(by, row, t.run_id)
    if best_key is None or key < best_key:
      best, best_key = (t, row), key
  return best


def steps_to_target(
  trials: Iterable[Trial], metric: str, goal: float, mode: str = "max", *, by: str = "steps"
) -> dict[int, Result]:
  """``{batch_size: Result}`` over all batch sizes present in ``trials`` (sorted by batch size)."""
  groups: dict[int, list[Trial]] = {}
  for t in trials:
    groups.setdefault(int(t.batch_size), []).append(t)
  out = {}
  for b in sorted(groups):
    group = groups[b]
    feasible = [t for t in group if t.status not in INFEASIBLE]
    reached = [t for t in feasible if first_hit(t.curve, metric, goal, mode) is not None]
    trial, row = best_hit(group, metric, goal, mode, by)
    out[b] = Result(
      batch_size=b,
      steps=None if row is None else int(row["step"]),
      epochs=None if row is None or row.get("epoch") is None else float(row["epoch"]),
      examples=None if row is None or row.get("examples") is None else int(row["examples"]),
      wall_time=None if row is None or row.get("wall_time") is None else float(row["wall_time"]),
      best_run_id=None if trial is None else trial.run_id,
      num_trials=len(group),
      num_feasible=len(feasible),
      num_reached=len(reached),
    )
  return out


def reached_arrays(results: Mapping[int, Result], field: str = "steps") -> tuple[list[int], list[float]]:
  """(batch sizes, values of ``field``) for the batch sizes that reached the goal, sorted by batch size."""
  pts = [(b, getattr(r, field)) for b, r in sorted(results.items()) if r.reached and getattr(r, field) is not None]
  return [b for b, _ in pts], [float(v) for _, v in pts]
