"""The layout of a study workdir (running layer)::

study.sqlite          the results store (store.py): runs, evals, the search's decision log. SQLite needs a
                      local disk: on an object store (gs://…) the driver works on a local copy
                      (io_utils.local_path) and uploads it here after every trial and at exit
study_config.json     the study config, so ``report`` needs only the workdir
commands.txt          every command that ran the study, time-stamped
runs/<run_id>/        one trial's run dir (lamb_lars/common/run_files.py)
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import tempfile
import time
from typing import Optional

import ml_collections

from lamb_lars.common import code_state, io_utils, run_files
from lamb_lars.common.io_utils import write_text_atomic
from lamb_lars.study.running import store

STORE_FILE = "study.sqlite"
STUDY_CONFIG_FILE = "study_config.json"
COMMANDS_FILE = "commands.txt"


def store_path(workdir: str) -> str:
  """The store's file: in the workdir, or for an object-store workdir its local copy (see :func:`open_store`)."""
  return io_utils.local_path(workdir, STORE_FILE) if io_utils.is_remote(workdir) else os.path.join(workdir, STORE_FILE)


def open_store(workdir: str) -> sqlite3.Connection:
  """The study's store. For an object-store workdir, the local copy; when this machine has none yet (a study
  resumed or reported elsewhere), it is first downloaded from the workdir. A store that is missing while trial
  run directories exist is refused (one-sentence ValueError), never silently replaced by an empty one."""
  path = store_path(workdir)
  if io_utils.is_remote(workdir) and not os.path.exists(path):
    data = io_utils.read_bytes(os.path.join(workdir, STORE_FILE))
    if data is not None:
      io_utils.write_bytes_atomic(path, data)
  if not os.path.exists(path):
    runs = io_utils.listdir(os.path.dirname(run_dir(workdir, "x"))) if io_utils.exists(workdir) else []
    if runs:
      raise ValueError(
        f"{os.path.join(workdir, STORE_FILE)} is missing but {len(runs)} trial run directories exist "
        f"in {os.path.dirname(run_dir(workdir, 'x'))}; restore study.sqlite from a copy, or use a "
        f"new --workdir."
      )
  return store.open_store(path)


def upload_store(con: sqlite3.Connection, workdir: str) -> None:
  """For an object-store workdir, uploads a consistent snapshot of the store (SQLite's online backup) to it."""
  if not io_utils.is_remote(workdir):
    return
  with tempfile.TemporaryDirectory() as tmp:
    snapshot = sqlite3.connect(os.path.join(tmp, STORE_FILE))
    con.backup(snapshot)
    snapshot.close()
    with open(os.path.join(tmp, STORE_FILE), "rb") as f:
      io_utils.write_bytes_atomic(os.path.join(workdir, STORE_FILE), f.read())


def run_dir(workdir: str, run_id: str) -> str:
  return os.path.join(workdir, "runs", run_id)


def save_study_config(study: ml_collections.ConfigDict, workdir: str, command: Optional[str] = None) -> None:
  """Writes ``study_config.json`` and appends the command to ``commands.txt``, stamped with the commit of the code
  that runs it (``command_line``)."""
  io_utils.makedirs(workdir)
  write_text_atomic(os.path.join(workdir, STUDY_CONFIG_FILE), study.to_json_best_effort(indent=1, sort_keys=True))
  if command:
    line = command_line(command, code_state.code_state())
    io_utils.append_text(os.path.join(workdir, COMMANDS_FILE), f"{time.strftime('%Y-%m-%d %H:%M:%S')}  {line}\n")


def command_line(command: str, code: dict) -> str:
  """``command`` with the commit that ran it: ``<command>   # commit <sha>`` (``, uncommitted changes`` when the
  tree was dirty). A study resumed at another commit (a worktree at the study's commit, a fix between two
  sessions) shows it line by line, and the published manifest carries these lines (manifest.py)."""
  commit = code.get("commit") or "unknown (not a git checkout)"
  return f"{command}   # commit {commit}" + (", uncommitted changes" if code.get("dirty") else "")


def load_study_config(workdir: str) -> ml_collections.ConfigDict:
  """The study config saved by ``run`` (JSON: tuples come back as lists)."""
  text = io_utils.read_text(os.path.join(workdir, STUDY_CONFIG_FILE))
  if text is None:
    raise ValueError(f"{workdir} is not a study workdir (no {STUDY_CONFIG_FILE}); run the study there first.")
  return ml_collections.ConfigDict(json.loads(text))


def commands(workdir: str) -> list[str]:
  text = io_utils.read_text(os.path.join(workdir, COMMANDS_FILE)) or ""
  return [ln.strip() for ln in text.splitlines() if ln.strip()]


def failure_text(rdir: str, code: Optional[int]) -> str:
  """Why a trial ended without a result: its error.txt, else the exit code or signal and the end of its log."""
  error = io_utils.read_text(os.path.join(rdir, run_files.ERROR_FILE))
  if error is not None:
    return error.strip()
  reason = (
    f"killed by signal {-code} ({signal.Signals(-code).name})" if code is not None and code < 0 else f"exit code {code}"
  )
  log = io_utils.read_text(os.path.join(rdir, run_files.LOG_FILE), default="", errors="replace")
  tail = "".join(log.splitlines(keepends=True)[-20:])
  return f"trainer process {reason} without a result\n{tail}".strip()
