"""A study workdir without its checkpoints: what a study needs to be resumed on another machine or in a later
session, small enough to commit or upload.

A study on the paper's budget outlives the machine it started on: a 3-hour session, a Colab runtime, a pre-empted
VM. Its workdir is mostly checkpoints and TensorBoard events; what the study cannot recompute is small: the store
(every trial's status, eval rows and the search's decision log), the study config, the commands, and each trial's
run files. ``snapshot`` copies exactly those, the store through SQLite's online backup (a consistent copy while the
driver writes), and leaves out:

* ``runs/*/checkpoints*/`` and ``runs/*/tensorboard/`` (large; TensorBoard files are re-written by a resumed trial),
* lock files and the XLA compilation cache (machine-local).

Resuming: copy the snapshot to a workdir and re-run the study's command there
(``cp -r SNAPSHOT WORKDIR && python -m lamb_lars.study run --config=... --workdir=WORKDIR``). Finished trials are
read from the store and not run again. A trial that was running, or a pruned trial that the search promotes later,
finds no checkpoint and trains from step 0: the trainer drops the run's eval rows past its resume step
(metric_writers.keep_rows_until), and a trial is deterministic given its config, so it reaches the same result, only
later. ``snapshot.json`` records the commit of the checkout the study runs from (``--code_dir``, by default the one that
takes the snapshot): resume at that commit, so that the study's manifest names one code state.
"""

from __future__ import annotations

import collections
import os
import shutil
import sqlite3
import time
from typing import Optional

from lamb_lars.common import code_state, io_utils, run_files, workdir_lock
from lamb_lars.study.running import store
from lamb_lars.study.running import workdir as wd

SNAPSHOT_FILE = "snapshot.json"
OPTUNA_FILE = "optuna.db"
# Per trial: everything but these (large, or machine-local).
SKIPPED = (
  run_files.CHECKPOINT_DIR,
  run_files.CHECKPOINT_DIR + "_quarantine",
  run_files.TENSORBOARD_DIR,
  workdir_lock.TRAIN_LOCK,
)


def _backup_sqlite(src: str, dst: str) -> None:
  """A consistent copy of the SQLite file ``src`` (WAL included) while another process may be writing it."""
  source = sqlite3.connect(f"file:{src}?mode=ro", uri=True, timeout=60)
  target = sqlite3.connect(dst)
  try:
    source.backup(target)
  finally:
    target.close()
    source.close()


def _copy_run(src: str, dst: str) -> None:
  os.makedirs(dst)
  for name in sorted(os.listdir(src)):
    if name in SKIPPED:
      continue
    path = os.path.join(src, name)
    if os.path.isdir(path):
      shutil.copytree(path, os.path.join(dst, name))
    else:
      shutil.copy2(path, os.path.join(dst, name))


def snapshot(workdir: str, out: str, code_dir: Optional[str] = None) -> dict:
  """Writes the resumable part of the study ``workdir`` to ``out`` (replaced if it exists, written beside it first
  so that a killed snapshot leaves the previous one whole) and returns what ``snapshot.json`` records. ``code_dir``:
  the git checkout the study runs from (default: the one this code is imported from), whose commit is recorded."""
  if io_utils.is_remote(workdir) or io_utils.is_remote(out):
    raise ValueError(
      "snapshot copies a local study workdir to a local folder; an object-store workdir (gs://…) "
      "already outlives the machine, and needs none."
    )
  workdir, out = os.path.abspath(workdir), os.path.abspath(out)
  if not os.path.exists(os.path.join(workdir, wd.STORE_FILE)):
    raise ValueError(f"{workdir} is not a study workdir (no {wd.STORE_FILE}); run the study there first.")
  if out == workdir or out.startswith(workdir + os.sep):
    raise ValueError(f"--out={out} is inside the study workdir; write the snapshot somewhere else.")
  tmp = f"{out}.tmp-{os.getpid()}"
  shutil.rmtree(tmp, ignore_errors=True)
  os.makedirs(os.path.join(tmp, "runs"))
  _backup_sqlite(os.path.join(workdir, wd.STORE_FILE), os.path.join(tmp, wd.STORE_FILE))
  if os.path.exists(os.path.join(workdir, OPTUNA_FILE)):
    _backup_sqlite(os.path.join(workdir, OPTUNA_FILE), os.path.join(tmp, OPTUNA_FILE))
  for name in (wd.STUDY_CONFIG_FILE, wd.COMMANDS_FILE):
    if os.path.exists(os.path.join(workdir, name)):
      shutil.copy2(os.path.join(workdir, name), os.path.join(tmp, name))
  runs_dir = os.path.join(workdir, "runs")
  for run_id in sorted(os.listdir(runs_dir)) if os.path.isdir(runs_dir) else ():
    _copy_run(os.path.join(runs_dir, run_id), os.path.join(tmp, "runs", run_id))
  con = store.open_store(os.path.join(tmp, wd.STORE_FILE))
  try:
    counts = collections.Counter(r["status"] for r in store.runs(con))
  finally:
    con.close()
  record = {
    "taken": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    "workdir": workdir,
    "code": code_state.code_state(*([os.path.abspath(code_dir)] if code_dir else [])),
    "trials": dict(sorted(counts.items())),
    "left_out": [f"runs/*/{name}" for name in SKIPPED],
    "resume": "copy this folder to a workdir and re-run the study's command there (commands.txt), at the "
    "commit in 'code'; trials without a checkpoint train from step 0.",
  }
  io_utils.write_json_atomic(os.path.join(tmp, SNAPSHOT_FILE), record)
  old = f"{out}.old-{os.getpid()}"
  if os.path.exists(out):
    os.rename(out, old)
  os.rename(tmp, out)
  shutil.rmtree(old, ignore_errors=True)
  return record
