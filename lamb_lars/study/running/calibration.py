"""The short measured calibration behind ``study run --dry_run``'s predicted wall time (wall_time.py).

Trials alike but for their batch and optimizer form a group (``wall_time.group_of``: model, data, devices); in each
group one trial at its smallest and one at its largest batch runs through the study's own
executor — a ``run_one`` process with the trial's environment and CPU pinning, ``runner.num_workers`` at once, as the
runner starts trials — for S steps, with an evaluation and a checkpoint at S/2 and S (S = 2·⌈8192/B⌉ clamped to
[4, 200]: about 16K examples; stopping rules, branching and batch schedules off). From it (:func:`shape_cost`):

* t_step: the trainer's own ``step_time`` over the second half (compilation excluded);
* t_eval: the time between the two eval rows appearing in ``metrics.jsonl`` less the training time between them
  (``wall_time``): one checkpoint, one evaluation;
* F = the process's wall time − S·t_step − 2·t_eval: start-up, imports, data, compilation.

With ``runner.compilation_cache`` the smallest batch's trial runs a second time against the cache the first one
filled, which gives the group's F_warm. A shape between the two batches gets costs interpolated linearly in the batch
(``wall_time.interpolate``). So a study costs at most three short runs per group, ``num_workers`` at a time.
Everything is written to a temporary folder that is removed afterwards; nothing is kept.
"""

from __future__ import annotations

import dataclasses
import math
import os
import shutil
import tempfile
import time
from typing import Any, Callable, Mapping, Optional, Sequence

import ml_collections

from lamb_lars.common import io_utils, run_files
from lamb_lars.study.running import trial_checks
from lamb_lars.study.running import wall_time as wt
from lamb_lars.study.running.driver import trial_env
from lamb_lars.study.running.executor import Executor

CALIBRATION_EXAMPLES = 8192  # S/2 steps of ≈ this many examples each half
MIN_STEPS, MAX_STEPS = 4, 200
POLL_S = 0.02
TIMEOUT_S = 600.0  # one calibration run; past it the run is killed and the shape has no cost


def calibration_steps(batch_size: int) -> int:
  """S: an even number of steps, 2·⌈CALIBRATION_EXAMPLES / B⌉ clamped to [MIN_STEPS, MAX_STEPS]."""
  half = max(MIN_STEPS // 2, min(MAX_STEPS // 2, math.ceil(CALIBRATION_EXAMPLES / int(batch_size))))
  return 2 * half


def calibration_config(config: ml_collections.ConfigDict, steps: int) -> ml_collections.ConfigDict:
  """The trial's config trained for ``steps`` steps, evaluated and checkpointed at steps/2 and steps, with nothing
  that could end it early or make it need another run (targets, dead-run and divergence stops, ``init_from_dir``,
  a batch schedule), and a warmup longer than its few steps allowed (the step's cost does not depend on the LR)."""
  c = config.copy_and_resolve_references()
  with c.unlocked():
    c.num_train_steps = int(steps)
    c.eval_every_steps = c.checkpoint_every_steps = int(steps) // 2
    c.stop.target_metric, c.stop.dead_after_fraction = "", 0.0
    c.stop_on_divergence, c.progress = False, False
    c.init_from_dir, c.batch_schedule = "", ""
    c.optimizer.schedule.allow_long_warmup = True
  return c


def shape_cost(
  rows: Sequence[Mapping[str, Any]], row_times: Sequence[float], started: float, ended: float
) -> tuple[float, float, float]:
  """(F, t_step, t_eval) of one calibration run (module docstring) from its two eval rows, the times they appeared
  and the process's start and end (one clock)."""
  if len(rows) < 2 or len(row_times) < 2:
    raise ValueError(f"a calibration run wrote {len(rows)} evaluation rows, not 2")
  step = float(rows[1]["step_time"])
  evaluation = max(0.0, (row_times[1] - row_times[0]) - (float(rows[1]["wall_time"]) - float(rows[0]["wall_time"])))
  fixed = (ended - started) - int(rows[1]["step"]) * step - 2 * evaluation
  return max(0.0, fixed), step, evaluation


@dataclasses.dataclass
class _Run:
  shape: str
  warm: bool
  handle: Any
  run_dir: str
  started: float
  tail: run_files.MetricsTail
  rows: list = dataclasses.field(default_factory=list)
  times: list = dataclasses.field(default_factory=list)


def calibrate(
  specs: Mapping[str, Any],
  executor: Executor,
  runner_cfg: Mapping[str, Any],
  warm: Sequence[str] = (),
  log: Callable[[str], None] = print,
) -> dict[str, wt.ShapeCost]:
  """{key: its measured cost}, one calibration run per key of ``specs`` (key → the ``sweep.TrialSpec`` to run) on
  ``executor``, and a second (F_warm) for the keys in ``warm`` when the study shares a compilation cache; a key whose
  calibration failed is left out, with a line to ``log``."""
  tmp = tempfile.mkdtemp(prefix="lamb_lars_calibration_")
  try:
    return _calibrate(specs, executor, runner_cfg, set(warm), tmp, log)
  finally:
    shutil.rmtree(tmp, ignore_errors=True)


def _start(shape: str, spec: Any, warm: bool, executor: Executor, runner_cfg: Mapping[str, Any], tmp: str) -> _Run:
  """Starts one calibration run of ``spec`` in ``tmp`` (its compilation cache ``tmp/jax_cache``, shared)."""
  run_dir = os.path.join(tmp, "runs", f"{len(os.listdir(os.path.join(tmp, 'runs')))}")
  io_utils.makedirs(run_dir)
  config = calibration_config(spec.config, calibration_steps(spec.config.batch_size))
  io_utils.write_text_atomic(os.path.join(run_dir, run_files.TRIAL_CONFIG_FILE), config.to_json_best_effort(indent=1))
  handle = executor.submit(f"calibration-{shape}", run_dir, trial_env(runner_cfg, spec, tmp))
  return _Run(shape, warm, handle, run_dir, time.monotonic(), run_files.MetricsTail(run_dir))


def _calibrate(
  specs: Mapping[str, Any],
  executor: Executor,
  runner_cfg: Mapping[str, Any],
  warm_keys: set,
  tmp: str,
  log: Callable[[str], None],
) -> dict[str, wt.ShapeCost]:
  """:func:`calibrate` in ``tmp``: cold runs in shape order, each shape's warm run once its cold one has ended."""
  io_utils.makedirs(os.path.join(tmp, "runs"))
  todo: list[tuple[str, bool]] = [(shape, False) for shape in specs]
  active: list[_Run] = []
  measured: dict[str, list[tuple[float, float, float]]] = {}
  while todo or active:
    while todo and len(active) < executor.slots:
      shape, warm = todo.pop(0)
      env = {**dict(runner_cfg["env"] or {}), **specs[shape].env}
      if executor.exclusive(env) and active:
        todo.insert(0, (shape, warm))
        break
      active.append(_start(shape, specs[shape], warm, executor, runner_cfg, tmp))
    time.sleep(POLL_S)
    for run in list(active):
      new = run.tail.read()
      run.rows += new
      run.times += [time.monotonic()] * len(new)
      code = run.handle.poll()
      if code is None and time.monotonic() - run.started > TIMEOUT_S:
        run.handle.kill()
        code = -9
      if code is None:
        continue
      active.remove(run)
      ended = time.monotonic()
      run.rows += run.tail.read()
      try:
        if code != 0:
          raise ValueError(f"exit status {code}: {_last_line(run.run_dir)}")
        measured.setdefault(run.shape, []).append(shape_cost(run.rows, run.times, run.started, ended))
      except ValueError as e:
        log(f"calibration of {run.shape} failed ({e}); no prediction for its trials")
        continue
      if not run.warm and runner_cfg["compilation_cache"] and run.shape in warm_keys:
        todo.append((run.shape, True))
  return {shape: _cost(m) for shape, m in measured.items()}


def _cost(runs: Sequence[tuple[float, float, float]]) -> wt.ShapeCost:
  """The cold run's F, the warm run's F (the cold one's when there is none), and the mean t_step and t_eval."""
  cold = runs[0][0]
  warm = runs[1][0] if len(runs) > 1 else cold
  return wt.ShapeCost(
    fixed_cold=cold,
    fixed_warm=min(cold, warm),
    step=sum(r[1] for r in runs) / len(runs),
    eval=sum(r[2] for r in runs) / len(runs),
  )


def _last_line(run_dir: str) -> str:
  """The last line of a calibration run's error or log."""
  for name in (run_files.ERROR_FILE, run_files.LOG_FILE):
    path = os.path.join(run_dir, name)
    if os.path.exists(path):
      lines = [ln for ln in open(path, encoding="utf-8", errors="replace").read().splitlines() if ln.strip()]
      if lines:
        return lines[-1][:200]
  return "no output"


def plans(specs: Sequence[Any], runner_env: Mapping[str, str]) -> Optional[dict[str, Any]]:
  """run id → the trainer's ``RunPlan`` of each trial (its steps and eval cadence); None when a trial's dataset is
  not on this machine."""
  from lamb_lars.train import run_plan  # noqa: PLC0415  (the trainer's stack: only for a prediction)

  infos: dict[str, Any] = {}
  out = {}
  for t in specs:
    info = trial_checks.dataset_info(t.config, infos)
    if info is None:
      return None
    devices = trial_checks.trial_devices(t.config, {**runner_env, **t.env})
    out[t.run_id] = run_plan.make_plan(t.config, num_train=info.num_train, num_devices=devices)
  return out


def dry_run_lines(
  study: ml_collections.ConfigDict,
  specs: Sequence[Any],
  executor: Executor,
  runner_s: float,
  calibrate_first: bool = True,
  log: Callable[[str], None] = print,
) -> list[str]:
  """What ``study run --dry_run`` prints after the trials: the work planned, what the prediction assumes, and (after
  a calibration on ``executor``, unless ``calibrate_first`` is False) the predicted wall time with each shape's
  cost. ``runner_s``: the runner's own start-up (the expansion and checks, as the dry run timed them)."""
  from lamb_lars.study.running import runner  # noqa: PLC0415

  search_cfg, runner_cfg, rep_cfg = runner.checked_settings(study)
  env = lambda t: {**dict(runner_cfg["env"] or {}), **t.env}
  ps = plans(specs, dict(runner_cfg["env"] or {}))
  if ps is None:
    return ["no predicted wall time: a trial's dataset is not on this machine (the calibration trains on it)"]
  shapes = {t.run_id: wt.shape_of(t.config, env(t)) for t in specs}
  works = wt.trial_work(specs, ps, shapes, search_cfg, rep_cfg)
  first: dict[str, Any] = {}  # shape → its first trial
  for t in specs:
    first.setdefault(shapes[t.run_id], t)
  group = {s: wt.group_of(t.config, env(t)) for s, t in first.items()}
  batches: dict[str, dict[int, Any]] = {}  # group → batch → its first trial
  for s, t in first.items():
    batches.setdefault(group[s], {}).setdefault(t.batch_size, t)
  runs = {f"{g}/b{b}": by_b[b] for g, by_b in batches.items() for b in sorted({min(by_b), max(by_b)})}
  warm = [f"{g}/b{min(by_b)}" for g, by_b in batches.items()] if runner_cfg["compilation_cache"] else []
  replicates = sum(w.wave == 1 for w in works)
  lines = [
    f"plan: {len(specs)} trials + {replicates} replicates, {sum(w.steps[wt.HIGH] for w in works):,.0f} steps at "
    f"most, {len(first)} shapes in {len(batches)} calibration group(s): {len(runs) + len(warm)} calibration runs",
    wt.assumptions(search_cfg, rep_cfg, replicates, executor.slots),
  ]
  if not calibrate_first:
    return lines + ["no predicted wall time: calibration skipped (--nocalibrate)"]
  started = time.monotonic()
  measured = calibrate(runs, executor, runner_cfg, warm, log)
  took = time.monotonic() - started
  if set(measured) != set(runs):
    return lines + ["no predicted wall time: a calibration run failed (above)"]
  costs = {s: _shape_cost(measured, group[s], batches[group[s]], t.batch_size) for s, t in first.items()}
  seconds = wt.predict(works, costs, executor.slots, bool(runner_cfg["compilation_cache"]), runner_s)
  load = os.getloadavg()[0] if hasattr(os, "getloadavg") else math.nan
  note = f"{len(runs) + len(warm)} runs in {took:.0f} s at nice {os.nice(0)}, load average {load:.1f}"
  lines.append(wt.prediction_line(seconds, note))
  for s, t in first.items():
    how = "" if f"{group[s]}/b{t.batch_size}" in measured else " (interpolated)"
    lines.append("  " + wt.shape_text(s, costs[s], sum(w.shape == s for w in works), bool(warm)) + how)
  return lines


def _shape_cost(
  measured: Mapping[str, wt.ShapeCost], group: str, batches: Mapping[int, Any], batch: int
) -> wt.ShapeCost:
  """A shape's cost from its group's calibration runs (``<group>/b<batch>``): interpolated in the batch, with the
  group's F_warm (the smallest batch's; never above the shape's F_cold)."""
  by_batch = {b: measured[f"{group}/b{b}"] for b in batches if f"{group}/b{b}" in measured}
  cost = wt.interpolate(by_batch, batch)
  return dataclasses.replace(cost, fixed_warm=min(cost.fixed_cold, measured[f"{group}/b{min(batches)}"].fixed_warm))
