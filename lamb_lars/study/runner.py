"""The sweep runner: every trial of a study, each in its own subprocess, recorded in the study's results store.

Layout of a study workdir::

  study.sqlite            the results store (store.py): one row per run, one per eval
  study_config.json       the study config (with its analysis settings), so ``report`` needs only the workdir
  commands.txt            every command that ran the study, with a time stamp
  runs/<run_id>/          the trainer's workdir: trial_config.json, checkpoints/, metrics.jsonl, result.json,
                          log.txt (the child's stdout+stderr), error.txt (a crash)

Per run: ``pending → running → done | diverged | failed``. The runner marks a run ``running``, starts
``python -m lamb_lars.study.run_one runs/<run_id>`` (up to ``num_workers`` at once), ingests its metrics every
``ingest_every_s`` while it runs, and when it exits ingests ``metrics.jsonl`` + ``result.json``
(``store.ingest_run_dir``: done or diverged) or records ``failed`` with the text of ``error.txt`` (or the exit
code and the end of the log).

Restarting the same command skips finished runs (``store.FINISHED``), retries failed ones (``retry_failed``) and
resumes interrupted ones (status ``running`` from a killed runner) from their checkpoints. Children are started
with ``PR_SET_PDEATHSIG = SIGKILL``, so a ``kill -9`` of the runner also ends its trainers (no orphan keeps
writing), and each child holds a lock on its run dir. The store commits every write, so nothing already recorded
is lost at any moment.
"""
from __future__ import annotations

import collections
import ctypes
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from typing import Any, Callable, Mapping, Optional

import ml_collections

from lamb_lars.study import run_one
from lamb_lars.study import store as st
from lamb_lars.study import sweep as sw

STORE_FILE = "study.sqlite"
STUDY_CONFIG_FILE = "study_config.json"
COMMANDS_FILE = "commands.txt"
LOG_FILE = "log.txt"
_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_PR_SET_PDEATHSIG = 1


def store_path(workdir: str) -> str:
  return os.path.join(workdir, STORE_FILE)


def run_dir(workdir: str, run_id: str) -> str:
  return os.path.join(workdir, "runs", run_id)


def _write_atomic(path: str, text: str) -> None:
  tmp = path + ".tmp"
  with open(tmp, "w", encoding="utf-8") as f:
    f.write(text)
    f.flush()
    os.fsync(f.fileno())
  os.replace(tmp, path)


def save_study_config(study: ml_collections.ConfigDict, workdir: str, command: Optional[str] = None) -> None:
  """Writes ``study_config.json`` (replacing an older one) and appends the command to ``commands.txt``."""
  os.makedirs(workdir, exist_ok=True)
  _write_atomic(os.path.join(workdir, STUDY_CONFIG_FILE), study.to_json_best_effort(indent=1, sort_keys=True))
  if command:
    with open(os.path.join(workdir, COMMANDS_FILE), "a", encoding="utf-8") as f:
      f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')}  {command}\n")


def load_study_config(workdir: str) -> ml_collections.ConfigDict:
  """The study config saved by ``run`` (JSON: tuples come back as lists)."""
  with open(os.path.join(workdir, STUDY_CONFIG_FILE), encoding="utf-8") as f:
    return ml_collections.ConfigDict(json.load(f))


def _plain_json(obj: Any) -> Any:
  """The JSON form the store keeps of a config (tuples → lists, sorted keys), for comparing configs."""
  if hasattr(obj, "to_dict"):
    obj = obj.to_dict()
  return json.loads(json.dumps(obj, sort_keys=True, default=str))


def register(con, study: ml_collections.ConfigDict, trials: list[sw.Trial]) -> dict[str, str]:
  """Registers every trial (keeping recorded statuses) and returns ``{run_id: status}``.

  A recorded run whose config differs from the trial's now (the study or ``--config.base.*`` changed) is an
  error: its results and checkpoints belong to another config. Use a new workdir for a changed study.
  """
  recorded = {r["run_id"]: r for r in st.runs(con)}
  for t in trials:
    old = recorded.get(t.run_id)
    if old is not None and old["config"] and old["config"] != _plain_json(t.config):
      raise ValueError(f"run {t.run_id} in this workdir was recorded with a different config (the study or its "
                       "overrides changed); use a new --workdir for the changed study.")
  for t in trials:
    st.upsert_run(con, t.run_id, study=study.name, config=t.config, params=t.params(), batch_size=t.batch_size,
                  optimizer=t.optimizer, variant=t.variant)
  _drop_unstarted(con, study.name, {t.run_id for t in trials})
  return {r["run_id"]: r["status"] for r in st.runs(con, study=study.name)}


def _drop_unstarted(con, study_name: str, keep: set[str]) -> None:
  """Forgets runs of this study that the (trimmed) sweep no longer has and that never started: no results lost."""
  stale = [r["run_id"] for r in st.runs(con, study=study_name, status="pending")
           if r["run_id"] not in keep and r["started"] is None and not st.evals(con, r["run_id"])]
  if stale:
    con.execute("BEGIN IMMEDIATE")
    con.executemany("DELETE FROM runs WHERE run_id=?", [(rid,) for rid in stale])
    con.execute("COMMIT")


def _die_with_parent() -> None:
  """In the child before exec: SIGKILL when the runner dies, however it dies (Linux prctl)."""
  try:
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
  except (OSError, AttributeError):
    pass


def child_env(extra: Optional[Mapping[str, str]] = None) -> dict[str, str]:
  """The runner's environment, the repo root on PYTHONPATH, plus ``extra`` (e.g. XLA_FLAGS)."""
  env = dict(os.environ)
  env["PYTHONPATH"] = os.pathsep.join(p for p in (_REPO_ROOT, env.get("PYTHONPATH", "")) if p)
  env.update({str(k): str(v) for k, v in (extra or {}).items()})
  return env


@dataclasses.dataclass
class _Active:
  trial: sw.Trial
  proc: Any  # a subprocess.Popen, or an executor's TrialHandle (poll() / kill())
  log: Any  # the child's log file (local children), None for an executor's trials
  started: float
  last_ingest: float


def _start(trial: sw.Trial, workdir: str, con, env: dict[str, str], python: str, executor=None,
           extra_env: Optional[Mapping[str, str]] = None) -> _Active:
  rdir = run_dir(workdir, trial.run_id)
  os.makedirs(rdir, exist_ok=True)
  _write_atomic(os.path.join(rdir, run_one.CONFIG_FILE), trial.config.to_json_best_effort(indent=1))
  err = os.path.join(rdir, run_one.ERROR_FILE)
  if os.path.exists(err):  # from an earlier failed attempt
    os.remove(err)
  st.set_status(con, trial.run_id, "running")
  if executor is not None:  # the executor starts run_one where it runs trials; it appends to log.txt there
    now = time.monotonic()
    return _Active(trial, executor.submit(trial.run_id, rdir, dict(extra_env or {})), None, now, now)
  log = open(os.path.join(rdir, LOG_FILE), "a", encoding="utf-8")
  log.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} start {trial.run_id}\n")
  log.flush()
  proc = subprocess.Popen([python, "-m", "lamb_lars.study.run_one", rdir], stdout=log, stderr=subprocess.STDOUT,
                          stdin=subprocess.DEVNULL, env=env, cwd=_REPO_ROOT, preexec_fn=_die_with_parent)
  now = time.monotonic()
  return _Active(trial, proc, log, now, now)


def _failure_text(rdir: str, returncode: int) -> str:
  path = os.path.join(rdir, run_one.ERROR_FILE)
  if os.path.exists(path):
    with open(path, encoding="utf-8") as f:
      return f.read().strip()
  reason = (f"killed by signal {-returncode} ({signal.Signals(-returncode).name})" if returncode < 0
            else f"exit code {returncode}")
  tail = ""
  log = os.path.join(rdir, LOG_FILE)
  if os.path.exists(log):
    with open(log, encoding="utf-8", errors="replace") as f:
      tail = "".join(f.readlines()[-20:])
  return f"trainer process {reason} without a result\n{tail}".strip()


def _finish(a: _Active, workdir: str, con, note: str = "") -> str:
  """Ingests an exited child's results; records ``failed`` when it left no result. Returns the status."""
  if a.log is not None:
    a.log.close()
  rid = a.trial.run_id
  rdir = run_dir(workdir, rid)
  status = st.ingest_run_dir(con, rid, rdir)
  if status is None:
    status = "failed"
    st.set_status(con, rid, "failed", error=(note + "\n" if note else "") + _failure_text(rdir, a.proc.poll()))
  return status


def progress_line(con, run_id: str, status: str, index: int, total: int, seconds: float) -> str:
  """``[k/N] status run_id  acc 98.12%  step 234/234  41.2 s`` (or the error's last line)."""
  rec = st.runs(con, run_id=run_id)[0]
  final = rec.get("final") or {}
  acc = final.get("eval_accuracy")
  parts = [f"[{index}/{total}] {status:<8} {run_id}"]
  if acc is not None:
    parts.append(f"acc {100 * acc:.2f}%")
  if rec.get("steps") is not None:
    parts.append(f"step {rec['steps']}")
  parts.append(f"{seconds:.1f} s")
  if status == "failed" and rec.get("error"):
    parts.append("| " + rec["error"].strip().splitlines()[-1][:160])
  return "  ".join(parts)


def _kill(a: _Active) -> None:
  if a.proc.poll() is None:
    a.proc.kill()  # an executor's handle returns once the trial has stopped
    if isinstance(a.proc, subprocess.Popen):
      a.proc.wait()


def run_study(study: ml_collections.ConfigDict, workdir: str, *, num_workers: Optional[int] = None,
              retry_failed: Optional[bool] = None, timeout_s: Optional[float] = None, command: Optional[str] = None,
              python: str = sys.executable, log: Callable[[str], None] = print, poll_s: float = 0.5,
              ingest_every_s: float = 10.0, executor=None) -> dict[str, int]:
  """Runs (or resumes) every trial of ``study`` under ``workdir``; returns the count of runs per status.

  ``num_workers``, ``retry_failed`` and ``timeout_s`` (per run, 0 = none; a run past it is killed and recorded as
  failed) default to ``study.runner``. On KeyboardInterrupt the children are killed and their runs are put back
  to ``pending`` (they resume next time).

  ``executor``: where trials run (an object with ``name``, ``slots``, ``check_workdir(workdir)`` and
  ``submit(run_id, run_dir, env) -> handle`` with ``poll()`` / ``kill()``, e.g. ``ray_executor.RayExecutor``);
  None runs them as local child processes. With an executor, ``num_workers`` defaults to its ``slots`` and the
  trials get ``runner.env`` on top of the environment of wherever they run.
  """
  runner_cfg = study.get("runner") or ml_collections.ConfigDict()
  if executor is not None:
    num_workers = max(1, int(num_workers or executor.slots))
  num_workers = max(1, int(num_workers or runner_cfg.get("num_workers", 1) or 1))
  retry_failed = bool(runner_cfg.get("retry_failed", True) if retry_failed is None else retry_failed)
  timeout_s = float(runner_cfg.get("timeout_s", 0) if timeout_s is None else timeout_s) or 0.0
  trials = sw.expand(study)
  save_study_config(study, workdir, command)
  if executor is not None:
    executor.check_workdir(workdir)
  con = st.open_store(store_path(workdir))
  try:
    statuses = register(con, study, trials)
    skip = st.FINISHED + (() if retry_failed else ("failed",))
    todo = collections.deque(t for t in trials if statuses[t.run_id] not in skip)
    total, index = len(todo), 0
    log(f"study {study.name}: {len(trials)} trials, {len(trials) - total} already finished, {total} to run "
        f"({num_workers} {'worker(s)' if executor is None else executor.name + ' slot(s)'}), workdir {workdir}")
    env = child_env(runner_cfg.get("env") or {})
    active: dict[str, _Active] = {}
    try:
      while todo or active:
        while todo and len(active) < num_workers:
          t = todo.popleft()
          active[t.run_id] = _start(t, workdir, con, env, python, executor, runner_cfg.get("env") or {})
        time.sleep(poll_s)
        now = time.monotonic()
        for rid, a in list(active.items()):
          note = ""
          if a.proc.poll() is None:
            if timeout_s and now - a.started > timeout_s:
              _kill(a)
              note = f"timed out after {timeout_s:.0f} s (runner.timeout_s)"
            else:
              if now - a.last_ingest > ingest_every_s:
                st.ingest_run_dir(con, rid, run_dir(workdir, rid))
                a.last_ingest = now
              continue
          status = _finish(a, workdir, con, note)
          del active[rid]
          index += 1
          log(progress_line(con, rid, status, index, total, time.monotonic() - a.started))
    except BaseException:
      for rid, a in active.items():
        _kill(a)
        if a.log is not None:
          a.log.close()
        st.ingest_run_dir(con, rid, run_dir(workdir, rid))
        if st.runs(con, run_id=rid)[0]["status"] == "running":
          st.set_status(con, rid, "pending")
      raise
    counts = collections.Counter(r["status"] for r in st.runs(con, study=study.name))
    return {s: counts.get(s, 0) for s in st.STATUSES}
  finally:
    con.close()
