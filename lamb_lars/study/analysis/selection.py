"""The chosen configuration of a searched cell, selected on the validation split only.

A cell's trials are compared on ``metric`` (the study's search metric, by default ``validation_accuracy``: a split
held out of training and apart from the test set), never on the test accuracy the cell then reports: the best of k
trials on the test set is biased upward by the selection itself (the winner's noise is selected along with its
skill). The test accuracy of a cell is then measured on fresh seeds of the chosen configuration (phases.py,
replicates.py), so selection and measurement use independent data and independent randomness.

Candidates: trials with status ``done`` that ran their full budget or stopped at the study's target (pruned,
diverged and failed trials are not). Order:

* ``goal`` given (steps-to-target cells, Shallue et al. 2018 §3): trials whose ``metric`` meets ``goal`` first,
  by the fewest steps to the first such evaluation; then the others by their best ``metric``.
* otherwise: the best final ``metric`` (You et al. 2020 report the accuracy at the end of the budget).

Ties: the smaller run_id. A candidate without ``metric`` in its curve (a study without a validation split) is never
chosen: such a study cannot select without the test set and gets no chosen configuration.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

from lamb_lars.study.records import Trial
from lamb_lars.study.analysis.steps_to_target import first_hit


def finished_full(t: Trial) -> bool:
  """Done, and either at its full budget or stopped at the study's target."""
  return t.status == "done" and (t.ran_full_budget or t.stopped == "target")


def _value(t: Trial, metric: str, final: bool, mode: str) -> Optional[float]:
  v = t.last(metric) if final else t.best(metric, mode)
  return v if v is not None and math.isfinite(v) else None


def choose(
  trials: Sequence[Trial], metric: str = "validation_accuracy", mode: str = "max", goal: Optional[float] = None
) -> Optional[Trial]:
  """The cell's chosen trial (module docstring), or None when no candidate has ``metric``."""
  sign = -1.0 if mode == "max" else 1.0
  ranked = []
  for t in trials:
    if not finished_full(t):
      continue
    if goal is not None:
      hit = first_hit(t.curve, metric, goal, mode)
      best = _value(t, metric, False, mode)
      if hit is not None:
        ranked.append(((0, float(hit["step"]), t.run_id), t))
      elif best is not None:
        ranked.append(((1, sign * best, t.run_id), t))
    else:
      v = _value(t, metric, True, mode)
      if v is not None:
        ranked.append(((0, sign * v, t.run_id), t))
  return min(ranked, key=lambda kt: kt[0])[1] if ranked else None


def chosen_of_cell(group: Sequence[Trial]) -> Optional[Trial]:
  """A cell's chosen trial: the one its replicates repeat (the runner chose it on validation, phases.py), else
  (an interim report, before any replicate ran) ``choose`` over its own trials on validation accuracy, which can
  differ from the runner's pick in a steps-to-target search; a cell of one trial chooses that trial."""
  ids = sorted({t.replicate_of for t in group if t.replicate_of})
  by_id = {t.run_id: t for t in group}
  if ids:
    return by_id.get(ids[0])
  own = [t for t in group if t.phase != "replicate"]
  return choose(own) if len(own) > 1 else (own[0] if own else None)
