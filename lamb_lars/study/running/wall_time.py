"""A study's wall time on this machine, predicted before it starts (``study run --dry_run``), so that a part of a
study can be sized to a session.

Each trial costs, in seconds,

    T = F + s·t_step + e·t_eval

where s is the optimizer steps it trains, e its evaluations (each with the checkpoint written beside it), and F its
fixed cost: process start, imports, data, compilation (F_cold for the first trial of a shape, F_warm for the later
ones when the study shares a compilation cache, ``runner.compilation_cache``). F, t_step and t_eval are measured per
*shape* (model, width, batch, data, devices: what sets a step's cost) by a short calibration through the study's own
executor (calibration.py). The trials run in the runner's order on its ``W`` workers, each taking the next trial
when one ends (list scheduling); the follow-ups (replicates) start once every planned trial has ended, as the
runner's waves do (runner.py). The prediction is the runner's start-up plus both waves' makespans.

The steps per trial, three ways (:func:`trial_work`):

* **high**: every trial trains its whole budget (``num_train_steps`` / ``num_epochs``, or its step limit).
* **low**: in each searched cell, ``max(1, search.min_full_budget)`` trials train their budget and the rest stop at
  the cell's first rung (``search_log.cell_min_epochs``); every other trial its budget.
* **predicted**: each searched trial trains ASHA's expected epochs, η^-k of the trials passing the k-th rung at
  r·η^k epochs (Li et al. 2020), plus the share of the cell that promotions resume to the full budget
  (``min_full_budget``), from the first rung; every other trial its budget.

In all three, ``replicates.num_seeds`` replicates of each cell whose role is in ``replicates.roles`` train the budget
of the cell's trials; range extensions and refinements (``search.max_extensions``, ``search.max_refinements``), which
depend on results, are not counted (each extension adds the cell's ``num_trials`` trials). A trial that stops at a
target, diverges or dies early is counted at its budget, so for a steps-to-target study even the low end can be
above the measured time. Durations count epochs as N/B steps of the trial's first batch (a batch schedule's later
stages are not modelled).
"""

from __future__ import annotations

import dataclasses
import hashlib
import heapq
import json
import math
from typing import Any, Mapping, Optional, Sequence

from lamb_lars.train.progress import duration
from lamb_lars.study.running.search_log import cell_min_epochs

LOW, PREDICTED, HIGH = "low", "predicted", "high"
# What sets the cost of a trial's step and evaluation (LR, schedule, seed and stopping rules do not): trials alike in
# these share one calibration.
SHAPE_KEYS = (
  "dataset",
  "synthetic",
  "train_examples",
  "validation_split",
  "image_size",
  "model",
  "model_width",
  "dtype",
  "batch_size",
  "num_microbatches",
  "microbatch_size",
  "microbatch_loop",
  "eval_batch_size",
  "parallelism",
  "num_devices",
  "steps_per_call",
  "optimizer.name",
  "optimizer.layerwise",
  "diagnostics",
)


@dataclasses.dataclass(frozen=True)
class ShapeCost:
  """The measured cost of one trial shape: fixed seconds per trial (cold and with a warm compilation cache),
  seconds per optimizer step, seconds per evaluation (with its checkpoint)."""

  fixed_cold: float
  fixed_warm: float
  step: float
  eval: float


@dataclasses.dataclass(frozen=True)
class TrialWork:
  """What one trial trains: steps and evaluations under each reading (``LOW``, ``PREDICTED``, ``HIGH``), its shape
  and its wave (0: the planned trials, 1: the follow-ups, which start when wave 0 has ended)."""

  run_id: str
  shape: str
  steps: Mapping[str, float]
  evals: Mapping[str, float]
  wave: int = 0


def _get(config: Any, dotted: str) -> Any:
  node = config
  for part in dotted.split("."):
    node = node.get(part) if hasattr(node, "get") else None
  return node.to_dict() if hasattr(node, "to_dict") else node


def shape_of(config: Any, env: Mapping[str, str]) -> str:
  """A trial's shape (``SHAPE_KEYS`` and the ``XLA_FLAGS`` it runs with), named for a reader, e.g.
  ``lenet5 b128 mnist [3f2a]``."""
  key = json.dumps([_get(config, k) for k in SHAPE_KEYS] + [env.get("XLA_FLAGS", "")], sort_keys=True, default=str)
  width = _get(config, "model_width")
  name = f"{config.model}" + (f"×{width:g}" if isinstance(width, (int, float)) and width != 1 else "")
  return f"{name} b{config.batch_size} {config.dataset} [{hashlib.sha1(key.encode()).hexdigest()[:4]}]"


GROUP_FREE = ("batch_size", "num_microbatches", "microbatch_size", "optimizer.name", "optimizer.layerwise")


def group_of(config: Any, env: Mapping[str, str]) -> str:
  """A trial's calibration group: its shape without the batch and the optimizer (``GROUP_FREE``). One group's
  shapes are calibrated at its smallest and largest batch and interpolated between (:func:`interpolate`)."""
  keys = [k for k in SHAPE_KEYS if k not in GROUP_FREE]
  key = json.dumps([_get(config, k) for k in keys] + [env.get("XLA_FLAGS", "")], sort_keys=True, default=str)
  return hashlib.sha1(key.encode()).hexdigest()[:8]


def interpolate(measured: Mapping[int, ShapeCost], batch: int) -> ShapeCost:
  """The cost at ``batch`` from the costs measured at some batches of one group: each field linear in the batch
  between the nearest measured batches below and above (a step's work is about a + b·B), the nearest one's outside
  them."""
  bs = sorted(measured)
  lo = max([b for b in bs if b <= batch], default=bs[0])
  hi = min([b for b in bs if b >= batch], default=bs[-1])
  if lo == hi:
    return measured[lo]
  f = (batch - lo) / (hi - lo)
  a, b = measured[lo], measured[hi]
  return ShapeCost(*((1 - f) * x + f * y for x, y in zip(dataclasses.astuple(a), dataclasses.astuple(b))))


def evals_in(steps: float, total_steps: int, every: int) -> float:
  """The evaluations of a trial that trains ``steps`` of its ``total_steps``, evaluating every ``every`` steps (0:
  only at the end) and at the end: ⌊steps/every⌋, plus one when it reaches the end off the cadence."""
  n = int(steps) // every if every > 0 else 0
  return float(n + (1 if steps >= total_steps and (every <= 0 or total_steps % every) else 0))


def expected_evals(steps: float, every: int) -> float:
  """The expected evaluations of a searched trial that trains ``steps`` in expectation: steps/every (every
  evaluation of it is at a rung or between two), one when it evaluates only at its end."""
  return steps / every if every > 0 else 1.0


def rungs(first: float, eta: int, budget_epochs: float) -> list[float]:
  """The ASHA rungs (epochs) that can stop a trial: r, r·η, r·η², … below the budget (a rung at the budget's end
  stops nothing: driver.py)."""
  out, r = [], float(first)
  while r < budget_epochs - 1e-9:
    out.append(r)
    r *= eta
  return out


def asha_epochs(rung_epochs: Sequence[float], eta: int, budget_epochs: float, full_share: float) -> float:
  """Expected epochs of a searched trial: Σ_k η^-k·(R_k − R_{k-1}) over the rungs R_0 < R_1 < … and the budget
  (R_{-1} = 0), plus, when promotions must bring ``full_share`` of the cell to the budget and fewer than that pass
  every rung (η^-K for K rungs), the missing share × (budget − R_0)."""
  edges = [0.0] + list(rung_epochs) + [float(budget_epochs)]
  expected = sum(eta ** (-k) * (edges[k + 1] - edges[k]) for k in range(len(edges) - 1))
  passing = eta ** (-len(rung_epochs))
  if rung_epochs and full_share > passing:
    expected += (full_share - passing) * (budget_epochs - rung_epochs[0])
  return expected


def _steps_of(epochs: float, plan: Any) -> float:
  """``epochs`` of a trial's data in its steps (N/B each; at most its budget), unrounded."""
  return min(float(plan.total_steps), epochs * plan.num_train / plan.batch_size)


def trial_work(
  specs: Sequence[Any],
  plans: Mapping[str, Any],
  shapes: Mapping[str, str],
  search_cfg: Mapping[str, Any],
  rep_cfg: Mapping[str, Any],
) -> list[TrialWork]:
  """Each trial's :class:`TrialWork` (the module docstring's three readings), in the runner's order, then the
  replicates (wave 1). ``specs``: the study's ``sweep.TrialSpec``s; ``plans``: run id → its ``RunPlan`` (total_steps,
  eval_every_steps, num_train, batch_size); ``shapes``: run id → :func:`shape_of`."""
  pruned = search_cfg["pruner"] != "none"
  first = cell_min_epochs(specs, search_cfg) if pruned else {}
  eta = int(search_cfg["reduction_factor"])
  cells: dict[str, list[Any]] = {}
  for t in specs:
    cells.setdefault(t.cell, []).append(t)
  out = []
  for t in specs:
    plan, total = plans[t.run_id], float(plans[t.run_id].total_steps)
    steps = {LOW: total, PREDICTED: total, HIGH: total}
    if pruned and t.searched and t.cell in first:
      n = len(cells[t.cell])
      full = min(n, max(1, int(search_cfg["min_full_budget"])))
      budget = total * plan.batch_size / plan.num_train
      rs = rungs(first[t.cell], eta, budget)
      if rs and cells[t.cell].index(t) >= full:
        steps[LOW] = float(math.ceil(_steps_of(rs[0], plan) - 1e-9))
      steps[PREDICTED] = _steps_of(asha_epochs(rs, eta, budget, full / n), plan)
    evals = {k: evals_in(v, plan.total_steps, plan.eval_every_steps) for k, v in steps.items()}
    if steps[PREDICTED] < total:
      evals[PREDICTED] = expected_evals(steps[PREDICTED], plan.eval_every_steps)
    out.append(TrialWork(t.run_id, shapes[t.run_id], steps, evals))
  for cell, ts in cells.items():
    if ts[0].role in tuple(rep_cfg["roles"]):
      full_work = next(w for w in out if w.run_id == ts[0].run_id)
      total = float(plans[ts[0].run_id].total_steps)
      evals = evals_in(total, plans[ts[0].run_id].total_steps, plans[ts[0].run_id].eval_every_steps)
      for k in range(int(rep_cfg["num_seeds"])):
        out.append(
          TrialWork(
            f"{cell}-replicate{k + 1}",
            full_work.shape,
            dict.fromkeys((LOW, PREDICTED, HIGH), total),
            dict.fromkeys((LOW, PREDICTED, HIGH), evals),
            wave=1,
          )
        )
  return out


def trial_seconds(work: TrialWork, cost: ShapeCost, reading: str, warm: bool) -> float:
  """T = F + s·t_step + e·t_eval (module docstring) of one trial under ``reading``."""
  fixed = cost.fixed_warm if warm else cost.fixed_cold
  return fixed + work.steps[reading] * cost.step + work.evals[reading] * cost.eval


def makespan(seconds: Sequence[float], workers: int) -> float:
  """When the last of ``seconds`` (in the runner's order) ends on ``workers`` workers, each taking the next trial
  as soon as it is free (list scheduling: the runner's ``Driver.fill``)."""
  free = [0.0] * max(1, int(workers))
  for s in seconds:
    heapq.heappush(free, heapq.heappop(free) + s)
  return max(free)


def predict(
  works: Sequence[TrialWork],
  costs: Mapping[str, ShapeCost],
  workers: int,
  shared_cache: bool,
  runner_s: float = 0.0,
) -> dict[str, float]:
  """{reading: predicted seconds}: ``runner_s`` plus the makespans of wave 0 and wave 1 on ``workers``, each trial
  :func:`trial_seconds`, cold for the first trial of its shape and warm for the later ones when ``shared_cache``."""
  out = {}
  for reading in (LOW, PREDICTED, HIGH):
    seen: set[str] = set()
    waves: dict[int, list[float]] = {}
    for w in works:
      warm = shared_cache and w.shape in seen
      seen.add(w.shape)
      waves.setdefault(w.wave, []).append(trial_seconds(w, costs[w.shape], reading, warm))
    out[reading] = runner_s + sum(makespan(waves[k], workers) for k in sorted(waves))
  return out


def prediction_line(seconds: Mapping[str, float], calibration: str) -> str:
  """``predicted wall time on this machine: 12m05s (range 8m10s–20m31s; calibration: …)``."""
  return (
    f"predicted wall time on this machine: {duration(seconds[PREDICTED])} "
    f"(range {duration(seconds[LOW])}–{duration(seconds[HIGH])}; calibration: {calibration})"
  )


def assumptions(search_cfg: Mapping, rep_cfg: Mapping, num_replicates: int, workers: int) -> str:
  """The line that says what the prediction assumed (the module docstring, in one sentence)."""
  return (
    f"assumed: {workers} worker(s); searched cells pruned by ASHA (η = {search_cfg['reduction_factor']}; low: all "
    f"but max(1, min_full_budget = {search_cfg['min_full_budget']}) per cell stop at the first rung; high: none "
    f"stops); {num_replicates} replicate(s) ({rep_cfg['num_seeds']} per cell) at the full budget after the planned "
    "trials; range extensions and refinements not counted; a trial that stops at a target or diverges counted at "
    "its budget."
  )


def shape_text(name: str, cost: ShapeCost, count: int, warm: Optional[bool]) -> str:
  """One shape's calibration, e.g. ``lenet5 b128: 12 trials, F 9.1 s (4.2 s warm), 14.2 ms/step, 0.61 s/eval``."""
  fixed = f"F {cost.fixed_cold:.1f} s" + (f" ({cost.fixed_warm:.1f} s warm)" if warm else "")
  return f"{name}: {count} trials, {fixed}, {1000 * cost.step:.1f} ms/step, {cost.eval:.2f} s/eval"
