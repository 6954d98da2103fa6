"""An exclusive lock on a workdir, so two jobs never write one run or one study at once.

Two ``train.py`` in one workdir both crash and leave duplicate metrics rows; two study runners in one workdir
duplicate the search's decision log, after which the study can never be resumed. :func:`hold` takes an exclusive
``flock`` on ``<workdir>/<name>`` and writes the holder's PID into it; a second job gets
:class:`WorkdirLocked`, one sentence naming that PID. The kernel drops a ``flock`` when its holder dies (even by
``kill -9``), so a lock left by a dead process is never stale: the next job takes it and overwrites the PID.

Locks are per process and re-entrant: a study trial (``run_one``) holds its run dir's lock and calls
``train_and_evaluate``, which asks for the same lock again. An object store (``gs://``) has no ``flock``: the lock
of such a workdir is a local file (``io_utils.local_path``), so it excludes a second job on this machine only;
across machines one job per workdir is left to the scheduler (a cross-machine lock would be a lease object
created with ``ifGenerationMatch=0`` and renewed by its holder).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from typing import Iterator

from lamb_lars.common import io_utils
from lamb_lars.errors import UserError

TRAIN_LOCK = ".lock"  # a run dir (train.py, a study trial)
STUDY_LOCK = ".study.lock"  # a study workdir (the runner)

_held: dict[str, int] = {}  # lock path → how many holds this process has on it
_files: dict[str, object] = {}


class WorkdirLocked(UserError, RuntimeError):
  """Another live process holds the workdir; the message is one sentence naming its PID."""


def _holder(path: str) -> str:
  try:
    with open(path, encoding="utf-8") as f:
      return f.read().strip() or "unknown"
  except OSError:
    return "unknown"


def acquire(workdir: str, name: str = TRAIN_LOCK, *, what: str = "a training run", timeout_s: float = 0.0) -> str:
  """Takes the lock (waiting up to ``timeout_s`` for a dying holder); returns its path. WorkdirLocked if held."""
  path = os.path.abspath(io_utils.local_path(str(workdir), name))
  if _held.get(path):
    _held[path] += 1
    return path
  os.makedirs(os.path.dirname(path), exist_ok=True)
  f = open(path, "a+", encoding="utf-8")
  deadline = time.monotonic() + timeout_s
  while True:
    try:
      fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
      break
    except BlockingIOError:
      if time.monotonic() >= deadline:
        f.close()
        raise WorkdirLocked(
          f"{workdir} is in use by {what} (PID {_holder(path)}); wait for it to end, stop it, or use another --workdir."
        ) from None
      time.sleep(0.2)
  f.seek(0)
  f.truncate()
  f.write(f"{os.getpid()}\n")
  f.flush()
  _held[path], _files[path] = 1, f
  return path


def release(path: str) -> None:
  """Drops one hold; the last one unlocks (the PID file stays, unlocked, for the next holder to overwrite)."""
  if not _held.get(path):
    return
  _held[path] -= 1
  if _held[path] == 0:
    del _held[path]
    _files.pop(path).close()  # closing the descriptor drops the flock


@contextlib.contextmanager
def hold(
  workdir: str, name: str = TRAIN_LOCK, *, what: str = "a training run", timeout_s: float = 0.0
) -> Iterator[None]:
  """``with hold(workdir): ...`` — the workdir is ours inside; WorkdirLocked (one sentence) if another holds it."""
  path = acquire(workdir, name, what=what, timeout_s=timeout_s)
  try:
    yield
  finally:
    release(path)
