"""The study driver: runs (or resumes) every trial of a study on an executor, keeps the results store, and spends
CPU only on trials that can still matter.

Per trial: ``pending → running → done | diverged | pruned | failed``.

* **Search and pruning.** Trials of a searched cell report their search metric at every evaluation; the cell's
  ASHA pruner (search.py) stops the ones that fall behind at a rung. Each report and decision is logged in the
  store before the runner acts on it; a pruned trial is killed and recorded ``pruned``.
* **Dead runs and targets.** The trainer itself stops a run that never leaves chance level
  (``stop.dead_after_fraction``; recorded ``diverged`` with the reason) and, in steps-to-target sub-sweeps, a run
  that reached the target (``stop.target_*``; recorded ``done``).
* **Crash isolation and resume.** Every trial is a separate process (executor.py) that resumes from its own
  checkpoints. Re-running the same command skips finished trials (``records.FINISHED``), retries failed ones
  (``runner.retry_failed``) and resumes interrupted ones; the search is rebuilt from its decision log, so a
  study killed at any moment (``kill -9`` of the runner, or of a trial) ends with every trial recorded once.
  A trial killed by a signal it did not get from us (e.g. the OOM killer) is retried once in the same run.
* **Follow-ups.** When a cell's trials have all finished, the runner extends an LR range whose best point is at
  its edge, promotes pruned trials until the cell has ``search.min_full_budget`` full-budget trials, and re-runs
  the chosen configuration (on the validation split) with ``replicates.num_seeds`` fresh seeds (phases.py); the
  study ends when no cell has a follow-up left. Each decision is logged in the store's ``plan`` table once. To add
  replicates to a finished study without searching further, run the same command with
  ``--config.replicates.num_seeds=K --config.search.max_extensions=0 --config.search.min_full_budget=0``: only
  the missing seeds run.
"""

from __future__ import annotations

import collections
import os
from typing import Any, Callable, Mapping, Optional

import ml_collections

from lamb_lars.common import io_utils, workdir_lock
from lamb_lars.train import run_identity
from lamb_lars.study.running import pack_executor, phases, sections, store, sweep
from lamb_lars.study.running import search as search_lib
from lamb_lars.study.running import workdir as wd
from lamb_lars.study.running.driver import Driver
from lamb_lars.study.running.executor import Executor, LocalExecutor
from lamb_lars.study.running.search_log import rebuild_searches
from lamb_lars.study.records import FINISHED, ROLES, STATUSES


def register(con, study: ml_collections.ConfigDict, specs: list[sweep.TrialSpec]) -> dict[str, str]:
  """Registers every trial (keeping recorded statuses); returns ``{run_id: status}``.

  A recorded run whose config differs from the trial's now (the study or ``--config.base.*`` changed) is an
  error: its results and checkpoints belong to another config. Use a new workdir for a changed study.
  """
  recorded = {r["run_id"]: r for r in store.runs(con)}
  for t in specs:
    old = recorded.get(t.run_id)
    changed = (
      old is not None
      and old["config"]
      and run_identity.differing_keys(old["config"], store.plain(t.config), allowed=False)
    )
    if changed:  # keys absent from the record came with a code upgrade (configs are locked): not a change
      raise ValueError(
        f"run {t.run_id} in this workdir was recorded with a different config ({', '.join(changed[:6])}"
        f"; the study or its overrides changed); use a new --workdir for the changed study."
      )
  for t in specs:
    epochs = float(t.config.num_epochs) if float(t.config.num_epochs) > 0 else None
    store.upsert_run(
      con,
      t.run_id,
      study=study.name,
      config=t.config,
      params=t.params(),
      batch_size=t.batch_size,
      optimizer=t.optimizer,
      variant=t.variant,
      role=t.role,
      technique=t.technique,
      cell=t.cell,
      budget_epochs=epochs,
      seed=t.seed,
      phase=t.phase,
      replicate_of=t.replicate_of,
      space=t.space,
    )
  return {r["run_id"]: r["status"] for r in store.runs(con, study=study.name)}


def make_executor(study: ml_collections.ConfigDict, num_workers: Optional[int] = None) -> LocalExecutor:
  """The local executor of ``study.runner`` (``num_workers`` overrides its workers)."""
  cfg = sections.section(study, "runner")
  slots = cfg["num_workers"] if num_workers is None else num_workers
  if not (isinstance(slots, int) and slots >= 1):
    raise ValueError(f"num_workers={slots!r} (--num_workers or study.runner.num_workers) must be an integer ≥ 1.")
  return LocalExecutor(slots=slots, cpus_per_trial=int(cfg["cpus_per_trial"]))


def checked_settings(study: ml_collections.ConfigDict) -> tuple[dict, dict, dict]:
  """The study's ``search``, ``runner`` and ``replicates`` settings (sections.py), each checked: a mistake is a
  one-sentence ValueError."""
  search_cfg, runner_cfg, rep_cfg = (sections.section(study, k) for k in ("search", "runner", "replicates"))
  if int(rep_cfg["num_seeds"]) < 0 or set(rep_cfg["roles"]) - set(ROLES):
    raise ValueError(
      f"study.replicates: num_seeds must be ≥ 0 and roles among {ROLES}; got "
      f"{rep_cfg['num_seeds']!r}, {tuple(rep_cfg['roles'])!r}."
    )
  if not (
    0.0 <= float(search_cfg["edge_fraction"]) < 0.5
    and int(search_cfg["max_extensions"]) >= 0
    and int(search_cfg["min_full_budget"]) >= 0
  ):
    raise ValueError(
      f"study.search: edge_fraction must be in [0, 0.5) and max_extensions, min_full_budget ≥ 0; got "
      f"{search_cfg['edge_fraction']!r}, {search_cfg['max_extensions']!r}, "
      f"{search_cfg['min_full_budget']!r}."
    )
  factor, rounds = float(search_cfg["refine_factor"]), int(search_cfg["max_refinements"])
  if not (factor == 0.0 or factor > 1.0) or rounds < 0 or (rounds > 0) != (factor > 1.0):
    raise ValueError(
      f"study.search: refine_factor must be 0 (off) or > 1 and max_refinements ≥ 0, both set or both "
      f"off; got {search_cfg['refine_factor']!r}, {search_cfg['max_refinements']!r}."
    )
  if search_cfg["pruner"] not in ("asha", "none") or search_cfg["mode"] not in ("max", "min"):
    raise ValueError(
      f"study.search: pruner must be 'asha' or 'none' and mode 'max' or 'min'; got "
      f"{search_cfg['pruner']!r}, {search_cfg['mode']!r}."
    )
  return search_cfg, runner_cfg, rep_cfg


def run_study(
  study: ml_collections.ConfigDict,
  workdir: str,
  *,
  executor: Optional[Executor] = None,
  num_workers: Optional[int] = None,
  retry_failed: Optional[bool] = None,
  timeout_s: Optional[float] = None,
  command: Optional[str] = None,
  log: Callable[[str], None] = print,
  poll_s: float = 0.25,
  status_every_s: float = 60.0,
  pack: Any = 1,
) -> dict[str, int]:
  """Runs (or resumes) every trial of ``study`` under ``workdir``; returns the count of runs per status.

  Besides one line per ended trial, every ``status_every_s`` (0 = never) it logs the study's status line and its
  running trials (status.py: done/pruned/diverged/failed/running/pending counts, ETA).

  ``num_workers``, ``retry_failed`` and ``timeout_s`` (per trial, 0 = none; a trial past it is killed and
  recorded failed) override ``study.runner``. On KeyboardInterrupt the active trials are killed and put back to
  ``pending``. ``pack`` (``study run --pack=K|auto``): trials per process, the compatible ones trained as slots of
  one vmapped program (pack_executor.py; 'auto': on a GPU or TPU only). Everything checkable is checked (one
  sentence, ValueError) before anything runs: the settings, and every trial that will run through the trainer's
  validator (``sweep.expand``; trials the workdir's store records done or diverged never run again and are not
  re-validated).
  """
  specs = sweep.expand(study, ended_trials(workdir, study.name))
  search_cfg, runner_cfg, rep_cfg = checked_settings(study)
  runner_cfg.update({k: v for k, v in (("retry_failed", retry_failed), ("timeout_s", timeout_s)) if v is not None})
  pack_size = pack_executor.resolve_pack(pack)
  if pack_size > 1 and executor is not None:
    raise ValueError("--pack needs the local executor (a Ray executor runs every trial in its own task).")
  executor = executor or make_executor(study, num_workers)
  executor.check_workdir(workdir)
  io_utils.makedirs(workdir)
  with workdir_lock.hold(workdir, workdir_lock.STUDY_LOCK, what="a study runner"):
    wd.save_study_config(study, workdir, command)
    con = wd.open_store(workdir)
    try:
      driver, specs = _driver(study, workdir, con, executor, specs, search_cfg, runner_cfg, log)
      driver.pack = pack_size
      if pack_size > 1:
        log(f"study {study.name}: packing up to {pack_size} compatible trials per process")
      _run_waves(driver, specs, rep_cfg, poll_s, status_every_s)
      counts = collections.Counter(r["status"] for r in store.runs(con, study=study.name))
      return {s: counts.get(s, 0) for s in STATUSES}
    finally:
      executor.close()
      wd.upload_store(con, workdir)
      con.close()


def ended_trials(workdir: str, study_name: str) -> frozenset:
  """The run ids of ``study_name`` that ``workdir``'s store records done or diverged (none without a store)."""
  if not (os.path.exists(wd.store_path(workdir)) or io_utils.exists(os.path.join(workdir, wd.STORE_FILE))):
    return frozenset()
  con = wd.open_store(workdir)
  try:
    return frozenset(r["run_id"] for r in store.runs(con, study=study_name) if r["status"] in ("done", "diverged"))
  finally:
    con.close()


def _driver(
  study,
  workdir: str,
  con,
  executor: Executor,
  specs: list[sweep.TrialSpec],
  search_cfg: Mapping[str, Any],
  runner_cfg: Mapping[str, Any],
  log: Callable[[str], None],
) -> tuple[Driver, list[sweep.TrialSpec]]:
  """Registers the study's trials and rebuilds its cells' searches from the store (the study's own trials set
  each cell's first rung); returns the driver and the trials, with the follow-ups an earlier run planned."""
  register(con, study, specs)
  searched = search_cfg["pruner"] != "none" and any(t.searched for t in specs)
  storage = search_lib.optuna_storage(workdir) if searched else None
  searches = rebuild_searches(con, specs, search_cfg, log, storage, study.name)
  earlier = phases.planned(study, con, specs)
  register(con, study, earlier)
  return Driver(study, workdir, con, executor, searches, search_cfg, runner_cfg, log), specs + earlier


def _todo(driver: Driver, specs: list[sweep.TrialSpec], skip: tuple) -> collections.deque:
  """The trials of ``specs`` whose recorded status is not in ``skip``, in order; refreshes the promoted set."""
  recorded = store.runs(driver.con, study=driver.study.name)
  statuses = {r["run_id"]: r["status"] for r in recorded}
  driver.promoted = {r["run_id"] for r in recorded if r.get("promoted")}
  return collections.deque(t for t in specs if statuses[t.run_id] not in skip)


def _run_waves(
  driver: Driver, specs: list[sweep.TrialSpec], rep_cfg: Mapping[str, Any], poll_s: float, status_every_s: float
) -> None:
  """Runs every unfinished trial, then each cell's follow-ups (phases.py), until no cell has one left. Failed
  trials are retried once per command, at its start (with ``runner.retry_failed``)."""
  study, log = driver.study, driver.log
  todo = _todo(driver, specs, FINISHED + (() if driver.runner_cfg["retry_failed"] else ("failed",)))
  log(
    f"study {study.name}: {len(specs)} trials, {len(specs) - len(todo)} already finished, {len(todo)} to run "
    f"on {driver.executor.name} ({driver.executor.slots} at once), workdir {driver.workdir}"
  )
  while True:
    driver.run_wave(todo, poll_s, status_every_s)
    new, promoted = phases.follow_ups(study, driver.con, specs, driver.search_cfg, rep_cfg, log)
    if not new and not promoted:
      return
    register(driver.con, study, new)
    specs = specs + new
    todo = _todo(driver, specs, FINISHED + ("failed",))
    if todo:
      log(f"study {study.name}: {len(todo)} follow-up trials to run (extensions, promotions, replicates)")
