"""A study workdir without most of its checkpoints: what a study needs to be resumed on another machine or in a later
session, small enough to commit or upload.

A study on the paper's budget outlives the machine it started on: a 3-hour session, a Colab runtime, a pre-empted
VM. Its workdir is mostly checkpoints and TensorBoard events; what the study cannot recompute is small: the store
(every trial's status, eval rows and the search's decision log), the study config, the commands, and each trial's
run files. ``snapshot`` copies exactly those, the store through SQLite's online backup (a consistent copy while the
driver writes), and leaves out:

* ``runs/*/checkpoints*/`` and ``runs/*/tensorboard/`` (large; TensorBoard files are re-written by a resumed trial),
  except, for a branching study (branches.py), each reference run's checkpoints at the steps its branches start
  from (:func:`branch_points`): a branch still to run cannot start without them, and no re-run can recreate them
  short of training the reference again; and, unless ``running_checkpoints=False``, the newest finished
  checkpoint of each trial the store records as running or failed (:func:`resume_points`), so that a trial longer
  than what is left of a session resumes where it stopped rather than from step 0 (one checkpoint per such trial:
  about 4 MB for LeNet-5 ×2, the size of the model's state);
* lock files and the XLA compilation cache (machine-local).

Resuming: copy the snapshot to a workdir and re-run the study's command there
(``cp -r SNAPSHOT WORKDIR && python -m lamb_lars.study run --config=... --workdir=WORKDIR``). Finished trials are
read from the store and not run again. A trial that was running resumes from its kept checkpoint, bit-exactly as in
its own workdir. A trial without one (a pruned trial that the search promotes later, or any trial of a snapshot
taken with ``running_checkpoints=False``) trains from step 0: the trainer drops the run's eval rows past its resume step
(metric_writers.keep_rows_until), and a trial is deterministic given its config, so it reaches the same result, only
later. ``snapshot.json`` records the commit of the checkout the study runs from (``--code_dir``, by default the one that
takes the snapshot): resume at that commit, so that the study's manifest names one code state.
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import sqlite3
import time
from typing import Optional

import ml_collections

from lamb_lars.common import code_state, io_utils, run_files, workdir_lock
from lamb_lars.errors import ConfigError
from lamb_lars.study.running import store
from lamb_lars.study.running import workdir as wd
from lamb_lars.train import init_from

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
  """A consistent copy of the SQLite file ``src`` (WAL included) while another process may be writing it.

  Read-only first; a store whose writer was killed (SIGKILL) leaves a WAL that only a read-write connection may
  recover ("attempt to write a readonly database"), so then a read-write one, which SQLite shares safely with a
  live writer and which changes no row."""
  source = sqlite3.connect(f"file:{src}?mode=ro", uri=True, timeout=60)
  target = sqlite3.connect(dst)
  try:
    try:
      source.backup(target)
    except sqlite3.OperationalError as e:
      if "readonly" not in str(e):
        raise
      source.close()
      source = sqlite3.connect(src, timeout=60)
      source.backup(target)
  finally:
    target.close()
    source.close()


def branch_points(workdir: str, rows: list) -> tuple[dict[str, set[int]], list[str]]:
  """(per reference run in ``workdir``'s ``runs/``, the checkpoint steps that the branches among the store
  ``rows`` start from, as the trainer resolves them (train/init_from.py: the reference's checkpoint at or after the
  branch point); why a branch point's checkpoint is missing, one sentence each). A checkpoint is missing in a
  workdir restored from a snapshot taken before this rule, or by hand; a branch whose reference lies outside
  ``workdir`` is the user's to keep."""
  runs_dir = os.path.join(os.path.abspath(workdir), "runs")
  out: dict[str, set[int]] = collections.defaultdict(set)
  missing: list[str] = []
  seen = set()
  for row in rows:
    config = dict(row["config"])
    ref_dir = config.get("init_from_dir")
    if not ref_dir or os.path.dirname(os.path.abspath(ref_dir)) != runs_dir:
      continue
    key = json.dumps({k: v for k, v in config.items() if k.startswith("init_from")}, sort_keys=True)
    if key not in seen:
      seen.add(key)
      try:
        ref = init_from.resolve(ml_collections.ConfigDict(config), num_devices=1)
      except ConfigError as e:
        missing.append(str(e))
        continue
      out[os.path.basename(os.path.abspath(ref_dir))].add(ref.step)
  return dict(out), missing


RESUMABLE = ("running", "failed")  # the statuses whose trials run again, from their newest checkpoint


def newest_finished_step(checkpoint_dir: str) -> Optional[int]:
  """The newest step in ``checkpoint_dir`` that orbax finished writing (a step-named folder with its
  ``commit_success.txt``; a save in progress is a temporary folder, or has no marker yet), or None."""
  if not os.path.isdir(checkpoint_dir):
    return None
  steps = [
    int(name)
    for name in os.listdir(checkpoint_dir)
    if name.isdigit() and os.path.exists(os.path.join(checkpoint_dir, name, "commit_success.txt"))
  ]
  return max(steps, default=None)


def resume_points(workdir: str, rows: list) -> dict[str, int]:
  """Per trial among the store ``rows`` that will run again (status running or failed), the newest finished
  checkpoint step in its run dir under ``workdir``; trials without one are left out (they train from step 0)."""
  out = {}
  for row in rows:
    if row["status"] in RESUMABLE:
      step = newest_finished_step(os.path.join(wd.run_dir(workdir, row["run_id"]), run_files.CHECKPOINT_DIR))
      if step is not None:
        out[row["run_id"]] = step
  return out


def _copy_run(src: str, dst: str, keep_steps: set[int]) -> None:
  """``src``'s run files without SKIPPED, but with its checkpoints at ``keep_steps``."""
  os.makedirs(dst)
  for name in sorted(os.listdir(src)):
    path = os.path.join(src, name)
    if name in SKIPPED:
      if name == run_files.CHECKPOINT_DIR:
        for step in sorted(keep_steps):
          shutil.copytree(os.path.join(path, str(step)), os.path.join(dst, name, str(step)))
    elif os.path.isdir(path):
      shutil.copytree(path, os.path.join(dst, name))
    else:
      shutil.copy2(path, os.path.join(dst, name))


def _size(runs_dir: str, folder: str) -> int:
  """Bytes in every ``runs_dir/*/folder`` tree."""
  total = 0
  for run_id in os.listdir(runs_dir):
    for d, _, files in os.walk(os.path.join(runs_dir, run_id, folder)):
      total += sum(os.path.getsize(os.path.join(d, f)) for f in files)
  return total


def snapshot(workdir: str, out: str, code_dir: Optional[str] = None, running_checkpoints: bool = True) -> dict:
  """Writes the resumable part of the study ``workdir`` to ``out`` (replaced if it exists, written beside it first
  so that a killed snapshot leaves the previous one whole) and returns what ``snapshot.json`` records.

  Args:
    workdir: a local study workdir (``study.sqlite`` in it); the study may be running.
    out: the snapshot's folder, outside ``workdir``.
    code_dir: the git checkout the study runs from (default: the one this code is imported from), whose commit is
      recorded.
    running_checkpoints: keep the newest finished checkpoint of each running or failed trial, so that it resumes
      there; False leaves every checkpoint out but the branch points.

  Returns:
    The record written to ``snapshot.json``: trial counts by status, the code state, the checkpoints kept
    (``kept_branch_points``, ``kept_running_checkpoints``) and their size, and the branch points that are missing.
  """
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
  con = store.open_store(os.path.join(tmp, wd.STORE_FILE))
  try:
    rows = store.runs(con)
  finally:
    con.close()
  counts = collections.Counter(r["status"] for r in rows)
  kept, missing = branch_points(workdir, rows)
  running = resume_points(workdir, rows) if running_checkpoints else {}
  keep = collections.defaultdict(set, {run_id: set(steps) for run_id, steps in kept.items()})
  for run_id, step in running.items():
    keep[run_id].add(step)
  runs_dir = os.path.join(workdir, "runs")
  for run_id in sorted(os.listdir(runs_dir)) if os.path.isdir(runs_dir) else ():
    _copy_run(os.path.join(runs_dir, run_id), os.path.join(tmp, "runs", run_id), keep.get(run_id, set()))
  record = {
    "taken": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    "workdir": workdir,
    "code": code_state.code_state(*([os.path.abspath(code_dir)] if code_dir else [])),
    "trials": dict(sorted(counts.items())),
    "left_out": [f"runs/*/{name}" for name in SKIPPED],
    "kept_branch_points": {run_id: sorted(steps) for run_id, steps in sorted(kept.items())},
    "missing_branch_points": missing,
    "kept_running_checkpoints": dict(sorted(running.items())),
    "checkpoint_mb": round(_size(os.path.join(tmp, "runs"), run_files.CHECKPOINT_DIR) / 2**20, 1),
    "resume": "copy this folder to a workdir and re-run the study's command there (commands.txt), at the "
    "commit in 'code'; a running trial resumes from its kept checkpoint, a trial without one trains from step 0.",
  }
  io_utils.write_json_atomic(os.path.join(tmp, SNAPSHOT_FILE), record)
  old = f"{out}.old-{os.getpid()}"
  if os.path.exists(out):
    os.rename(out, old)
  os.rename(tmp, out)
  shutil.rmtree(old, ignore_errors=True)
  return record
