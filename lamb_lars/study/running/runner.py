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
import dataclasses
import json
import math
import os
import signal
import time
from typing import Any, Callable, Mapping, Optional

import ml_collections

from lamb_lars.common import io_utils, workdir_lock
from lamb_lars.train import run_identity
from lamb_lars.common.io_utils import read_jsonl, write_text_atomic
from lamb_lars.study.running import phases
from lamb_lars.study.running import run_one
from lamb_lars.study.running import search as search_lib
from lamb_lars.study.running import status as status_lib
from lamb_lars.study.running import store
from lamb_lars.study.running import sweep
from lamb_lars.study.running import workdir as wd
from lamb_lars.study.running.executor import Executor, LocalExecutor, TrialHandle
from lamb_lars.study.records import FINISHED, ROLES, STATUSES

SEARCH_DEFAULTS = dict(metric="validation_accuracy", mode="max", min_epochs=2, reduction_factor=3, pruner="asha",
                       rung_after_warmup=True, edge_fraction=0.1, max_extensions=2, min_full_budget=4)
REPLICATE_DEFAULTS = dict(num_seeds=3, roles=ROLES)   # phases.py
RUNNER_DEFAULTS = dict(num_workers=1, cpus_per_trial=0, retry_failed=True, timeout_s=0.0, env={},
                       compilation_cache=True,
                       resources={"CPU": 1}, max_retries=3)  # the last two: --executor=ray (ray_executor.py)


def settings(study: ml_collections.ConfigDict, section: str, defaults: Mapping[str, Any]) -> dict[str, Any]:
  """``study.<section>`` over ``defaults``; an unknown key is a one-sentence ValueError."""
  given = dict(study.get(section) or {})
  unknown = set(given) - set(defaults)
  if unknown:
    raise ValueError(f"study.{section} has unknown keys {sorted(unknown)}; allowed: {sorted(defaults)}.")
  return {**defaults, **given}


def _plain(obj: Any) -> Any:
  return store._plain(obj)  # noqa: SLF001  (the store's own JSON form, to compare configs)


def register(con, study: ml_collections.ConfigDict, specs: list[sweep.TrialSpec]) -> dict[str, str]:
  """Registers every trial (keeping recorded statuses); returns ``{run_id: status}``.

  A recorded run whose config differs from the trial's now (the study or ``--config.base.*`` changed) is an
  error: its results and checkpoints belong to another config. Use a new workdir for a changed study.
  """
  recorded = {r["run_id"]: r for r in store.runs(con)}
  for t in specs:
    old = recorded.get(t.run_id)
    changed = old is not None and old["config"] and run_identity.differing_keys(old["config"], _plain(t.config),
                                                                                allowed=False)
    if changed:  # keys absent from the record came with a code upgrade (configs are locked): not a change
      raise ValueError(f"run {t.run_id} in this workdir was recorded with a different config ({', '.join(changed[:6])}"
                       f"; the study or its overrides changed); use a new --workdir for the changed study.")
  for t in specs:
    epochs = float(t.config.num_epochs) if float(t.config.get("num_epochs", 0) or 0) > 0 else None
    store.upsert_run(con, t.run_id, study=study.name, config=t.config, params=t.params(),
                     batch_size=t.batch_size, optimizer=t.optimizer, variant=t.variant, role=t.role,
                     technique=t.technique, cell=t.cell, budget_epochs=epochs, seed=t.seed, phase=t.phase,
                     replicate_of=t.replicate_of, space=t.space)
  return {r["run_id"]: r["status"] for r in store.runs(con, study=study.name)}


def cell_min_epochs(specs: list[sweep.TrialSpec], cfg: Mapping[str, Any]) -> dict[str, int]:
  """The first rung of each searched cell: ``min_epochs``, or with ``rung_after_warmup`` the end of the longest
  warmup among the cell's trials if later — no trial is judged while its LR is still ramping up (a rung at epoch 2
  pruned most long-warmup trials at batch 8K; docs/studies/mnist_table3/discussion.md). A sub-sweep's ``pruner``
  field overrides both for its cells (a study's later round can use a rule its first round did not)."""
  out: dict[str, int] = {}
  for t in specs:
    if not t.searched:
      continue
    rule = {**cfg, **t.pruner}
    first = int(rule["min_epochs"])
    if rule["rung_after_warmup"]:
      first = max(first, int(math.ceil(max(0.0, float(t.params()["warmup_epochs"])) - 1e-9)))
    out[t.cell] = max(out.get(t.cell, 1), first)
  return out


def _rebuild_searches(con, specs, cfg: Mapping[str, Any], log: Callable[[str], None] = print, storage=None,
                      study_name: str = "") -> dict[str, search_lib.CellSearch]:
  """One pruner per searched cell, its state replayed from the decision log (checked against it); with
  ``storage`` (search.optuna_storage) each cell's Optuna study is rebuilt there as ``<study_name>/<cell>``, and
  the trials that have ended are told so.

  A log that two runners once wrote at once (before workdir locks) is repaired: later duplicates of a report are
  deleted (``store.remove_duplicate_decisions``), and since the two runners decided from different states, the
  recorded decisions are then replayed as they were acted on instead of being checked."""
  if cfg["pruner"] == "none":
    return {}
  direction = "maximize" if cfg["mode"] == "max" else "minimize"
  attrs = {t.run_id: {k: store._plain(v) for k, v in trial_hparams(t).items()} for t in specs if t.searched}  # noqa: SLF001
  searches = {cell: search_lib.CellSearch(min_epochs=first, reduction_factor=cfg["reduction_factor"],
                                          direction=direction, trial_attrs=attrs)
              for cell, first in cell_min_epochs(specs, cfg).items()}
  repaired = store.remove_duplicate_decisions(con)
  if repaired:
    log(f"repaired the search log: removed {repaired} duplicated decision(s) that two runners sharing this workdir "
        f"wrote; the remaining decisions are replayed as recorded.")
  lenient = store.decisions_repaired(con)
  pruned = set()
  for d in store.decisions(con):
    s = searches.get(d["cell"])
    if s is None:
      continue
    value = float("nan") if d["value"] is None else d["value"]
    if s.report(d["run_id"], d["step"], value) != bool(d["prune"]) and not lenient:
      raise ValueError(f"replaying the search log of cell {d['cell']} gave a different decision for "
                       f"{d['run_id']} at epoch {d['step']} than the one recorded, so the log in "
                       f"{store_file(con)} is inconsistent; use a new --workdir for this study.")
    if d["prune"]:
      pruned.add(d["run_id"])
  for rid in pruned:  # the runner died between logging a prune and recording it
    rec = store.runs(con, run_id=rid)
    if rec and rec[0]["status"] not in FINISHED and not rec[0].get("promoted"):
      store.set_status(con, rid, "pruned", stopped="pruned", error="pruned by the search (from the log)")
  for rec in store.runs(con):
    if rec["cell"] in searches:
      searches[rec["cell"]].finish(rec["run_id"], rec["status"])
  if storage is not None:
    for cell, s in searches.items():
      s.persist(storage, f"{study_name}/{cell}")
  return searches


def store_file(con) -> str:
  row = con.execute("PRAGMA database_list").fetchone()
  return row[2] if row else "the store"


@dataclasses.dataclass
class _Active:
  spec: sweep.TrialSpec
  handle: TrialHandle
  started: float
  rows_seen: int = 0
  note: str = ""
  exclusive: bool = False


class _Driver:
  """The state of one ``run_study`` call: store connection, executor, searches and the active trials."""

  def __init__(self, study, workdir_: str, con, executor: Executor, searches, search_cfg, runner_cfg, log):
    self.study, self.workdir, self.con, self.executor = study, workdir_, con, executor
    self.searches, self.search_cfg, self.runner_cfg, self.log = searches, search_cfg, runner_cfg, log
    self.active: dict[str, _Active] = {}
    self.done_count = 0
    self.promoted: set[str] = set()   # pruned trials resumed to their full budget: never pruned again

  def start(self, spec: sweep.TrialSpec, exclusive: bool = False) -> None:
    rdir = wd.run_dir(self.workdir, spec.run_id)
    io_utils.makedirs(rdir)
    write_text_atomic(os.path.join(rdir, wd.TRIAL_CONFIG_FILE), spec.config.to_json_best_effort(indent=1))
    write_text_atomic(os.path.join(rdir, wd.TRIAL_HPARAMS_FILE), store._dumps(trial_hparams(spec)))  # noqa: SLF001
    io_utils.remove(os.path.join(rdir, "error.txt"))  # from an earlier failed attempt
    store.set_status(self.con, spec.run_id, "running")
    handle = self.executor.submit(spec.run_id, rdir, trial_env(self.runner_cfg, spec, self.workdir))
    self.active[spec.run_id] = _Active(spec, handle, time.monotonic(), exclusive=exclusive)

  def ingest(self, a: _Active) -> list[dict]:
    """New eval rows of a running trial into the store; returns them."""
    rows = read_jsonl(os.path.join(wd.run_dir(self.workdir, a.spec.run_id), "metrics.jsonl"))
    if len(rows) <= a.rows_seen:
      return []
    new, a.rows_seen = rows[a.rows_seen:], len(rows)
    store.add_evals(self.con, a.spec.run_id, new)
    return new

  def consider(self, a: _Active, rows: list[dict], running: bool) -> bool:
    """Reports new evals to the cell's pruner; kills and records the trial when pruned (True). A trial that has
    already ended is reported (the pruner's state must see it) but keeps its own result."""
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
      if prune and running:
        a.handle.kill()
        self.ingest(a)
        # Rows past the prune point — later rows of the same poll, or written between the poll and the kill —
        # are not part of the trial's record.
        store.delete_evals_after(self.con, a.spec.run_id, int(row["step"]))
        store.set_status(self.con, a.spec.run_id, "pruned", stopped="pruned",
                         error=f"pruned by the search at epoch {step}: {metric} {value:.4f} was not in the top "
                               f"1/{self.search_cfg['reduction_factor']} of its cell at that rung")
        return True
    return False

  def finish(self, a: _Active, code: Optional[int]) -> str:
    """Records an ended trial: its result, or ``failed`` with the reason."""
    rid = a.spec.run_id
    rdir = wd.run_dir(self.workdir, rid)
    status = store.ingest_run_dir(self.con, rid, rdir)
    if status is None:
      status = "failed"
      store.set_status(self.con, rid, "failed", error=(a.note + "\n" if a.note else "") + wd.failure_text(rdir, code))
    return status

  def interrupt(self) -> None:
    """Kills the active trials and puts them back to ``pending`` (they resume next time)."""
    for rid, a in self.active.items():
      a.handle.kill()
      store.ingest_run_dir(self.con, rid, wd.run_dir(self.workdir, rid))
      if store.runs(self.con, run_id=rid)[0]["status"] == "running":
        store.set_status(self.con, rid, "pending")
    self.active.clear()


def trial_hparams(spec: sweep.TrialSpec) -> dict[str, Any]:
  """What TensorBoard's HParams dashboard shows for a trial: the keys its study varies (``TrialSpec.params``: the
  sub-sweep's swept and fixed keys, the LR and warmup it uses) with its batch size and optimizer."""
  return {"batch_size": spec.batch_size, "optimizer.name": spec.optimizer, **spec.params()}


def trial_env(runner_cfg: Mapping[str, Any], spec: sweep.TrialSpec, workdir_: str) -> dict[str, str]:
  """The extra environment of a trial: the runner's, the sub-sweep's, and with ``compilation_cache`` the study's
  persistent XLA cache (``run_one.enable_compilation_cache``: trials that compile the same program — the model
  init and the eval step of every trial, and the train step of a cell's trials with ``optimizer.lr_table`` —
  load it instead: most of a LeNet trial's 9 s of compiling; docs/BENCHMARKS.md §11)."""
  env = {**dict(runner_cfg["env"] or {}), **spec.env}
  if runner_cfg.get("compilation_cache"):
    env.setdefault(run_one.CACHE_ENV, io_utils.local_path(io_utils.abspath(workdir_), run_one.CACHE_DIR))
  return env


def _exclusive(executor: Executor, runner_cfg: Mapping[str, Any], spec: sweep.TrialSpec) -> bool:
  """Whether the executor wants this trial alone on its machine (LocalExecutor.exclusive)."""
  check = getattr(executor, "exclusive", None)
  return bool(check and check({**dict(runner_cfg["env"] or {}), **spec.env}))


def progress_line(con, run_id: str, status: str, index: int, total: int, seconds: float) -> str:
  """``[k/N] status run_id  test 98.12%  epoch 12.0  41.2 s`` (or the reason it stopped)."""
  rec = store.runs(con, run_id=run_id)[0]
  final = rec.get("final") or {}
  ev = store.evals(con, run_id)
  last = ev[-1] if ev else {}
  parts = [f"[{index}/{total}] {status:<8} {run_id}"]
  acc = final.get("eval_accuracy", last.get("eval_accuracy"))
  if acc is not None:
    parts.append(f"test {100 * acc:.2f}%")
  if last.get("epoch") is not None:
    parts.append(f"epoch {last['epoch']:.1f}")
  parts.append(f"{seconds:.1f} s")
  if status != "done" and rec.get("error"):
    parts.append("| " + rec["error"].strip().splitlines()[-1][:160])
  return "  ".join(parts)


def make_executor(study: ml_collections.ConfigDict, num_workers: Optional[int] = None) -> LocalExecutor:
  cfg = settings(study, "runner", RUNNER_DEFAULTS)
  slots = cfg["num_workers"] if num_workers is None else num_workers
  if not (isinstance(slots, int) and slots >= 1):
    raise ValueError(f"num_workers={slots!r} (--num_workers or study.runner.num_workers) must be an integer ≥ 1.")
  return LocalExecutor(slots=slots, cpus_per_trial=int(cfg["cpus_per_trial"]))


def validate_trials(specs: list[sweep.TrialSpec]) -> None:
  """Every trial's config through the validator ``train.py`` uses (lamb_lars/train/validate.py), before any trial runs:
  a ValueError naming the first bad trial. Devices: the trial's ``num_devices``, or 1 when it takes all of them
  (a trial checks its own devices again when it starts). A dataset that is not on this machine may be on the
  machines that run the trials (``--executor=ray``): such a trial gets the checks that need no data, and its own
  process reports the missing data."""
  from lamb_lars.input_pipeline import DatasetNotFoundError
  from lamb_lars.optim import optimizer_config
  from lamb_lars.train import validate
  from lamb_lars.train.trainer import get_info
  infos: dict[str, Any] = {}
  for t in specs:
    c = t.config
    data_key = json.dumps([c.get(k) for k in ("dataset", "data_source", "data_dir", "validation_split",
                                              "image_size")] + [_plain(c.get("synthetic"))])
    try:
      if data_key not in infos:
        try:
          infos[data_key] = get_info(c)
        except DatasetNotFoundError:
          infos[data_key] = None
      if infos[data_key] is None:
        validate.check_bounds(c)
        optimizer_config.validate_config(c.optimizer)
      else:
        validate.check(c, infos[data_key], int(c.get("num_devices", 0) or 1))
    except ValueError as e:
      raise ValueError(f"trial {t.run_id}: {e}") from None


def failures(con, study_name: str) -> list[tuple[str, str]]:
  """(run_id, the failure's first line) of every failed trial; for a traceback, its last line (``Type: message``)."""
  out = []
  for r in store.runs(con, study=study_name, status="failed"):
    lines = [ln.strip() for ln in (r.get("error") or "").strip().splitlines() if ln.strip()]
    line = (lines[-1] if lines and lines[0].startswith("Traceback") else lines[0]) if lines else "(no error text)"
    out.append((r["run_id"], line[:200]))
  return out


def _run_wave(driver: "_Driver", todo: collections.deque, timeout: float, poll_s: float,
              status_every_s: float = 60.0) -> None:
  """Runs the trials of ``todo`` to their end (pruning, timeouts, one resume after a foreign kill), logging the
  study's status line every ``status_every_s`` (0 = never)."""
  executor, runner_cfg, con, log = driver.executor, driver.runner_cfg, driver.con, driver.log
  total, driver.done_count = len(todo), 0
  retried: set[str] = set()
  last_status = time.monotonic()
  try:
    while todo or driver.active:
      if status_every_s and time.monotonic() - last_status >= status_every_s:
        last_status = time.monotonic()
        log("\n".join([status_lib.status_line(con, driver.study.name, executor.slots)]
                      + status_lib.running_lines(con, driver.study.name)))
      while todo and len(driver.active) < executor.slots and not any(a.exclusive for a in driver.active.values()):
        alone = _exclusive(executor, runner_cfg, todo[0])
        if alone and driver.active:
          break  # a trial that needs the machine to itself waits for the others to end
        driver.start(todo.popleft(), exclusive=alone)
      time.sleep(poll_s)
      for rid, a in list(driver.active.items()):
        code = a.handle.poll()
        if driver.consider(a, driver.ingest(a), running=code is None):
          status = "pruned"
        elif code is None:
          if timeout and time.monotonic() - a.started > timeout:
            a.note = f"timed out after {timeout:.0f} s (runner.timeout_s)"
            a.handle.kill()
            status = driver.finish(a, -signal.SIGKILL)
          else:
            continue
        else:
          status = driver.finish(a, code)
          if status == "failed" and code is not None and code < 0 and rid not in retried:
            retried.add(rid)  # killed by a signal we did not send: resume it once from its checkpoint
            log(f"         {rid}: trial killed by signal {-code}; resuming it from its checkpoint")
            del driver.active[rid]
            todo.appendleft(a.spec)
            continue
        del driver.active[rid]
        if a.spec.cell in driver.searches:
          driver.searches[a.spec.cell].finish(rid, status)   # the trial's end state in the Optuna storage
        driver.done_count += 1
        log(progress_line(con, rid, status, driver.done_count, total, time.monotonic() - a.started))
        wd.upload_store(con, driver.workdir)  # an object-store workdir gets the store after every trial
  except BaseException:
    driver.interrupt()
    raise


def run_study(study: ml_collections.ConfigDict, workdir: str, *, executor: Optional[Executor] = None,
              num_workers: Optional[int] = None, retry_failed: Optional[bool] = None,
              timeout_s: Optional[float] = None, command: Optional[str] = None,
              log: Callable[[str], None] = print, poll_s: float = 0.25,
              status_every_s: float = 60.0) -> dict[str, int]:
  """Runs (or resumes) every trial of ``study`` under ``workdir``; returns the count of runs per status.

  Besides one line per ended trial, every ``status_every_s`` (0 = never) it logs the study's status line and its
  running trials (status.py: done/pruned/diverged/failed/running/pending counts, ETA).

  ``num_workers``, ``retry_failed`` and ``timeout_s`` (per trial, 0 = none; a trial past it is killed and
  recorded failed) default to ``study.runner``. On KeyboardInterrupt the active trials are killed and put back to
  ``pending``. Everything checkable is checked (one sentence, ValueError) before anything runs.
  """
  specs = sweep.expand(study)
  search_cfg = settings(study, "search", SEARCH_DEFAULTS)
  runner_cfg = settings(study, "runner", RUNNER_DEFAULTS)
  rep_cfg = settings(study, "replicates", REPLICATE_DEFAULTS)
  if int(rep_cfg["num_seeds"]) < 0 or set(rep_cfg["roles"]) - set(ROLES):
    raise ValueError(f"study.replicates: num_seeds must be ≥ 0 and roles among {ROLES}; got "
                     f"{rep_cfg['num_seeds']!r}, {tuple(rep_cfg['roles'])!r}.")
  if not (0.0 <= float(search_cfg["edge_fraction"]) < 0.5 and int(search_cfg["max_extensions"]) >= 0
          and int(search_cfg["min_full_budget"]) >= 0):
    raise ValueError(f"study.search: edge_fraction must be in [0, 0.5) and max_extensions, min_full_budget ≥ 0; got "
                     f"{search_cfg['edge_fraction']!r}, {search_cfg['max_extensions']!r}, "
                     f"{search_cfg['min_full_budget']!r}.")
  if search_cfg["pruner"] not in ("asha", "none") or search_cfg["mode"] not in ("max", "min"):
    raise ValueError(f"study.search: pruner must be 'asha' or 'none' and mode 'max' or 'min'; got "
                     f"{search_cfg['pruner']!r}, {search_cfg['mode']!r}.")
  retry = bool(runner_cfg["retry_failed"] if retry_failed is None else retry_failed)
  timeout = float(runner_cfg["timeout_s"] if timeout_s is None else timeout_s) or 0.0
  validate_trials(specs)
  executor = executor or make_executor(study, num_workers)
  executor.check_workdir(workdir)
  io_utils.makedirs(workdir)
  with workdir_lock.hold(workdir, workdir_lock.STUDY_LOCK, what="a study runner"):
    return _run_locked(study, workdir, specs, executor, search_cfg, runner_cfg, rep_cfg, retry, timeout, command, log,
                       poll_s, status_every_s)


def _run_locked(study, workdir, specs, executor, search_cfg, runner_cfg, rep_cfg, retry, timeout, command, log,
                poll_s, status_every_s=60.0):
  wd.save_study_config(study, workdir, command)
  con = wd.open_store(workdir)
  try:
    register(con, study, specs)
    searched = search_cfg["pruner"] != "none" and any(t.searched for t in specs)
    storage = search_lib.optuna_storage(workdir) if searched else None
    # the study's own trials set each cell's first rung
    searches = _rebuild_searches(con, specs, search_cfg, log, storage, study.name)
    earlier = phases.planned(study, con, specs)
    register(con, study, earlier)
    specs = specs + earlier
    driver = _Driver(study, workdir, con, executor, searches, search_cfg, runner_cfg, log)
    skip = FINISHED + (() if retry else ("failed",))
    first = True
    while True:
      statuses = {r["run_id"]: r["status"] for r in store.runs(con, study=study.name)}
      driver.promoted = {r["run_id"] for r in store.runs(con, study=study.name) if r.get("promoted")}
      todo = collections.deque(t for t in specs if statuses[t.run_id] not in skip)
      if first:
        log(f"study {study.name}: {len(specs)} trials, {len(specs) - len(todo)} already finished, {len(todo)} to run "
            f"on {executor.name} ({executor.slots} at once), workdir {workdir}")
      elif todo:
        log(f"study {study.name}: {len(todo)} follow-up trials to run (extensions, promotions, replicates)")
      _run_wave(driver, todo, timeout, poll_s, status_every_s)
      first, skip = False, FINISHED + ("failed",)  # failed trials are retried once per command, at its start
      new, promoted = phases.follow_ups(study, con, specs, search_cfg, rep_cfg, log)
      if not new and not promoted:
        break
      register(con, study, new)
      specs = specs + new
    counts = collections.Counter(r["status"] for r in store.runs(con, study=study.name))
    return {s: counts.get(s, 0) for s in STATUSES}
  finally:
    executor.close()
    wd.upload_store(con, workdir)
    con.close()
