"""The trials of one ``run_study`` call in flight: starting them on the executor, reading their eval rows as they
are written (``run_files.MetricsTail``), reporting them to their cell's pruner, and recording how each ended.

:meth:`Driver.run_wave` is the runner's loop: start what the executor has room for, wait one poll, then
:meth:`Driver.poll_trial` each running trial — pruned, timed out, still running, killed by a signal it did not get
from us (resumed once from its checkpoint), or ended with a result.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import os
import signal
import time
from typing import Any, Callable, Mapping, Optional

import ml_collections

from lamb_lars.common import io_utils, run_files
from lamb_lars.study.running import pack_executor, run_one
from lamb_lars.study.running import search as search_lib
from lamb_lars.study.running import status as status_lib
from lamb_lars.study.running import store
from lamb_lars.study.running import workdir as wd
from lamb_lars.study.running.executor import Executor, TrialHandle
from lamb_lars.study.running.sweep import TrialSpec


def trial_env(runner_cfg: Mapping[str, Any], spec: TrialSpec, workdir_: str) -> dict[str, str]:
  """The extra environment of a trial: the runner's, the sub-sweep's, and with ``compilation_cache`` the study's
  persistent XLA cache (``run_one.enable_compilation_cache``: trials that compile the same program — the model
  init and the eval step of every trial, and the train step of a cell's trials with ``optimizer.lr_table`` —
  load it instead: most of a LeNet trial's 9 s of compiling; docs/BENCHMARKS.md §11)."""
  env = {**dict(runner_cfg["env"] or {}), **spec.env}
  if runner_cfg["compilation_cache"]:
    env.setdefault(run_one.CACHE_ENV, io_utils.local_path(io_utils.abspath(workdir_), run_one.CACHE_DIR))
  return env


def ingest_run_dir(con, run_id: str, run_dir: str) -> Optional[str]:
  """Reads a run's ``metrics.jsonl`` and ``result.json`` (lamb_lars/common/run_files.py) into the store;
  idempotent. Without a result the run's status is left as it is (an interrupted run stays resumable). Returns
  the status written, or None when there was no result. A run id never seen before is registered with an empty
  description."""
  run_dir = os.fspath(run_dir)
  if not store.runs(con, run_id=run_id):
    store.upsert_run(con, run_id)
  rows = [r for r in run_files.read_metrics(run_dir) if "step" in r]
  if rows:
    store.add_evals(con, run_id, rows)
  result = run_files.read_result(run_dir)
  if result is None:
    return None
  final = result.get("final") or {}
  wall = final.get("wall_time")
  status = result.get("status", "done")
  store.set_status(
    con,
    run_id,
    status,
    error=result.get("error"),
    steps=result.get("step", final.get("step")),
    final=final,
    wall_time=None if wall is None or not math.isfinite(wall) else float(wall),
    stopped=result.get("stopped"),
  )
  return status


@dataclasses.dataclass
class Active:
  """A running trial: its spec and handle, when it started, and the tail of its ``metrics.jsonl``."""

  spec: TrialSpec
  handle: TrialHandle
  started: float
  tail: run_files.MetricsTail
  note: str = ""
  exclusive: bool = False


class Driver:
  """The state of one ``run_study`` call: store connection, executor, searches and the active trials."""

  def __init__(
    self,
    study: ml_collections.ConfigDict,
    workdir_: str,
    con,
    executor: Executor,
    searches,
    search_cfg: Mapping[str, Any],
    runner_cfg: Mapping[str, Any],
    log: Callable[[str], None],
  ):
    self.study, self.workdir, self.con, self.executor = study, workdir_, con, executor
    self.searches, self.search_cfg, self.runner_cfg, self.log = searches, search_cfg, runner_cfg, log
    self.active: dict[str, Active] = {}
    self.promoted: set[str] = set()  # pruned trials resumed to their full budget: never pruned again
    self.timeout = float(runner_cfg["timeout_s"]) or 0.0
    self.done_count, self.total, self.retried = 0, 0, set()
    self.pack = 1  # trials per process (``study run --pack``, pack_executor.py); 1 = each trial alone

  def processes(self) -> int:
    """The trial processes running: a pack's slots share one."""
    return len({id(getattr(a.handle, "process", a.handle)) for a in self.active.values()})

  def prepare(self, spec: TrialSpec) -> str:
    """Writes a trial's config and HParams into its run dir, marks it running; returns the run dir."""
    rdir = wd.run_dir(self.workdir, spec.run_id)
    io_utils.makedirs(rdir)
    config_json = spec.config.to_json_best_effort(indent=1)
    io_utils.write_text_atomic(os.path.join(rdir, run_files.TRIAL_CONFIG_FILE), config_json)
    io_utils.write_text_atomic(os.path.join(rdir, run_files.HPARAMS_FILE), store.dumps(spec.hparams()))
    io_utils.remove(os.path.join(rdir, run_files.ERROR_FILE))  # from an earlier failed attempt
    io_utils.remove(os.path.join(rdir, "stop_request"))  # a promoted trial pruned in a pack (train/packed.py)
    store.set_status(self.con, spec.run_id, "running")
    return rdir

  def start(self, spec: TrialSpec, exclusive: bool = False) -> None:
    rdir = self.prepare(spec)
    handle = self.executor.submit(spec.run_id, rdir, trial_env(self.runner_cfg, spec, self.workdir))
    self.active[spec.run_id] = Active(spec, handle, time.monotonic(), run_files.MetricsTail(rdir), exclusive=exclusive)

  def fill(self, todo: collections.deque) -> None:
    """Starts trials of ``todo`` while the executor has free slots; a trial the executor wants alone on its
    machine (``Executor.exclusive``) waits for the others to end, and nothing starts beside it."""
    while todo and self.processes() < self.executor.slots and not any(a.exclusive for a in self.active.values()):
      alone = self.executor.exclusive({**dict(self.runner_cfg["env"] or {}), **todo[0].env})
      if alone and self.active:
        return
      group = pack_executor.take_pack(todo, 1 if alone else self.pack)
      if len(group) == 1:
        self.start(group[0], exclusive=alone)
      else:
        self.start_pack(group)

  def start_pack(self, specs: list[TrialSpec]) -> None:
    """Starts ``specs`` as the slots of one packed process (pack_executor.py)."""
    dirs = [self.prepare(t) for t in specs]
    env = trial_env(self.runner_cfg, specs[0], self.workdir)
    handles = pack_executor.submit_pack(self.executor, [t.run_id for t in specs], dirs, env)
    now = time.monotonic()
    for t, d, h in zip(specs, dirs, handles):
      self.active[t.run_id] = Active(t, h, now, run_files.MetricsTail(d))

  def ingest(self, a: Active) -> list[dict]:
    """The eval rows a running trial wrote since the last poll, into the store; returns them."""
    new = a.tail.read()
    if new:
      store.add_evals(self.con, a.spec.run_id, new)
    return new

  def consider(self, a: Active, rows: list[dict], running: bool) -> bool:
    """Reports new evals to the cell's pruner; kills and records the trial when pruned (True). A trial that has
    already ended, or whose report is at the end of its budget (a rung at epoch r·η^k can fall there, e.g. 30 of
    30 epochs for r = 10, η = 3: stopping it saves nothing), is reported (the pruner's state must see it) but
    keeps its own result."""
    s = self.searches.get(a.spec.cell)
    if s is None or not a.spec.searched or a.spec.run_id in self.promoted:
      return False
    metric = self.search_cfg["metric"]
    for row in sorted(rows, key=lambda r: r["step"]):
      if row.get("epoch") is None:
        continue
      step = int(round(float(row["epoch"])))
      value = search_lib.report_value(row, metric)
      if value is None or not s.would_report(a.spec.run_id, step):
        continue
      prune = s.report(a.spec.run_id, step, value)
      store.log_decision(self.con, a.spec.cell, a.spec.run_id, step, value, prune)
      if prune and running and not a.spec.at_budget_end(step):
        if self._prune(a, row, step, value):
          return True
        running = False  # it ended on its own before the kill: it keeps its result
    return False

  def _prune(self, a: Active, row: Mapping[str, Any], step: int, value: float) -> bool:
    """Kills and records a pruned trial (True); False when it ended on its own between the poll and the kill
    (it wrote its result, and its TensorBoard session its end status): it keeps that result, as any trial the
    pruner hears of after it ended does (:meth:`consider`)."""
    a.handle.kill()
    self.ingest(a)
    if run_files.read_result(wd.run_dir(self.workdir, a.spec.run_id)) is not None:
      return False
    # Rows past the prune point — later rows of the same poll, or written between the poll and the kill — are
    # not part of the trial's record.
    store.delete_evals_after(self.con, a.spec.run_id, int(row["step"]))
    store.set_status(
      self.con,
      a.spec.run_id,
      "pruned",
      stopped="pruned",
      error=f"pruned by the search at epoch {step}: {self.search_cfg['metric']} {value:.4f} was not "
      f"in the top 1/{self.search_cfg['reduction_factor']} of its cell at that rung",
    )
    return True

  def finish(self, a: Active, code: Optional[int]) -> str:
    """Records an ended trial: its result, or ``failed`` with the reason."""
    rid = a.spec.run_id
    rdir = wd.run_dir(self.workdir, rid)
    status = ingest_run_dir(self.con, rid, rdir)
    if status is None:
      status = "failed"
      store.set_status(self.con, rid, "failed", error=(a.note + "\n" if a.note else "") + wd.failure_text(rdir, code))
    return status

  def poll_trial(self, a: Active, todo: collections.deque) -> None:
    """One poll of a running trial: its new evals to the pruner, then whatever ended it, if anything did."""
    code = a.handle.poll()
    if self.consider(a, self.ingest(a), running=code is None):
      self.end(a, "pruned")
    elif code is None:
      if self.timeout and time.monotonic() - a.started > self.timeout:
        a.note = f"timed out after {self.timeout:.0f} s (runner.timeout_s)"
        a.handle.kill()
        self.end(a, self.finish(a, -signal.SIGKILL))
    else:
      status = self.finish(a, code)
      if status == "failed" and code < 0 and a.spec.run_id not in self.retried:
        self.resume_once(a, code, todo)
      else:
        self.end(a, status)

  def resume_once(self, a: Active, code: int, todo: collections.deque) -> None:
    """A trial killed by a signal we did not send (e.g. the OOM killer) goes back to the front of ``todo`` once,
    to resume from its checkpoint."""
    self.retried.add(a.spec.run_id)
    self.log(f"         {a.spec.run_id}: trial killed by signal {-code}; resuming it from its checkpoint")
    del self.active[a.spec.run_id]
    todo.appendleft(a.spec)

  def end(self, a: Active, status: str) -> None:
    """Forgets an ended trial: its end state to the cell's Optuna storage, its progress line to the log."""
    rid = a.spec.run_id
    del self.active[rid]
    if a.spec.cell in self.searches:
      self.searches[a.spec.cell].finish(rid, status)
    self.done_count += 1
    self.log(status_lib.progress_line(self.con, rid, status, self.done_count, self.total, time.monotonic() - a.started))
    wd.upload_store(self.con, self.workdir)  # an object-store workdir gets the store after every trial

  def interrupt(self) -> None:
    """Kills the active trials and puts them back to ``pending`` (they resume next time)."""
    for rid, a in self.active.items():
      getattr(a.handle, "kill_all", a.handle.kill)()  # a pack stops as a whole
      ingest_run_dir(self.con, rid, wd.run_dir(self.workdir, rid))
      if store.runs(self.con, run_id=rid)[0]["status"] == "running":
        store.set_status(self.con, rid, "pending")
    self.active.clear()

  def run_wave(self, todo: collections.deque, poll_s: float, status_every_s: float = 60.0) -> None:
    """Runs the trials of ``todo`` to their end, logging the study's status line every ``status_every_s``
    (0 = never). On any exception (KeyboardInterrupt included) the active trials are killed and put back to
    ``pending``."""
    self.total, self.done_count, self.retried = len(todo), 0, set()
    last_status = time.monotonic()
    try:
      while todo or self.active:
        if status_every_s and time.monotonic() - last_status >= status_every_s:
          last_status = time.monotonic()
          self.log(
            "\n".join(
              [status_lib.status_line(self.con, self.study.name, self.executor.slots)]
              + status_lib.running_lines(self.con, self.study.name)
            )
          )
        self.fill(todo)
        time.sleep(poll_s)
        for a in list(self.active.values()):
          self.poll_trial(a, todo)
    except BaseException:
      self.interrupt()
      raise
