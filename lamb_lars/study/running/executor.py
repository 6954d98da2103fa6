"""Where a study's trials run. The runner talks to trials only through this interface, so the same driver (store,
search, pruning) runs trials as local processes or on a cluster (``ray_executor.py``).

Contract of a trial: ``python -m lamb_lars.study.running.run_one RUN_DIR`` reads ``RUN_DIR/trial_config.json``, resumes
from ``RUN_DIR/checkpoints``, appends eval rows to ``RUN_DIR/metrics.jsonl``, writes ``RUN_DIR/result.json`` when it
ends (``error.txt`` on a crash), and its output goes to ``RUN_DIR/log.txt`` (the names: lamb_lars/common/run_files.py).
The driver reads ``metrics.jsonl`` while the trial runs and kills the trials its search prunes. Both executors
start a trial with :func:`spawn_trial`.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from typing import IO, Callable, Iterator, Mapping, Optional, Protocol

from lamb_lars.common import io_utils, run_files
from lamb_lars.study.running.trial_checks import forced_cpu_devices

_PR_SET_PDEATHSIG = 1


def usable_cpus() -> list[int]:
  """The CPUs this process may run on, in order: its affinity (``taskset``), else all of the machine's."""
  if hasattr(os, "sched_getaffinity"):
    return sorted(os.sched_getaffinity(0))
  return list(range(os.cpu_count() or 1))


def slot_cpus(slot: int, per_slot: int) -> set[int]:
  """Slot ``slot``'s share of :func:`usable_cpus`: its ``per_slot`` CPUs, counted within the process's own
  affinity, so that a study started under ``taskset -c 1`` pins its one worker to CPU 1, not to CPU 0 beside
  whatever else was placed there."""
  return set(usable_cpus()[slot * per_slot : (slot + 1) * per_slot])


class TrialHandle(Protocol):
  run_id: str

  def poll(self) -> Optional[int]:
    """None while the trial runs; its exit status once it has ended (0 = run_one returned normally)."""

  def kill(self) -> None:
    """Stops the trial now (pruned, timed out, or the driver is interrupted); idempotent."""


class Executor(Protocol):
  name: str
  slots: int

  def check_workdir(self, workdir: str) -> None:
    """Raises ValueError (one sentence) when the trials cannot see ``workdir``."""

  def exclusive(self, env: Mapping[str, str]) -> bool:
    """Whether a trial with extra environment ``env`` must have the machine to itself (the runner then starts it
    alone, once the trials before it have ended)."""

  def submit(self, run_id: str, run_dir: str, env: Mapping[str, str]) -> TrialHandle:
    """Starts the trial of ``run_dir``; ``env`` is added to the trial process's environment."""

  def close(self) -> None:
    """Releases the executor's resources (running trials must have been killed or have ended)."""


def child_env(extra: Optional[Mapping[str, str]] = None) -> dict[str, str]:
  """This process's environment plus ``extra`` (e.g. XLA_FLAGS); the trial imports the same lamb_lars."""
  env = dict(os.environ)
  env.update({str(k): str(v) for k, v in (extra or {}).items()})
  return env


def trial_command(run_dir: str, python: str = sys.executable) -> list[str]:
  return [python, "-m", "lamb_lars.study.running.run_one", run_dir]


PARENT_ENV = "LAMB_LARS_TRIAL_PARENT"  # the pid of the process that started a trial (die_with_parent)
_SPAWN_LOCK = threading.Lock()


def spawn_trial(
  run_dir: str,
  log: IO,
  env: Optional[Mapping[str, str]] = None,
  *,
  python: str = sys.executable,
  cpus: Optional[set[int]] = None,
  command: Optional[list[str]] = None,
) -> subprocess.Popen:
  """Starts the trial of ``run_dir`` (:func:`trial_command`) with ``env`` added to this process's environment, its
  output going to ``log``, pinned to ``cpus`` when given. Both executors start trials here; ``command`` replaces
  :func:`trial_command` (a pack of trials, ``run_pack``).

  No Python runs between the fork and the exec (no ``preexec_fn``): in a process whose JAX runtime has started
  threads (the driver traces a user's model to check it) that can deadlock, and JAX warns ``os.fork() was called``.
  The child inherits the pinning from the spawning thread's CPU affinity, set around the start
  (:func:`spawning_on`), and arranges to die with the process that started it itself (:func:`die_with_parent`,
  the first thing ``run_one`` does), so a ``kill -9`` of the driver, or of a Ray worker, leaves no orphan trainer
  writing into the study."""
  with spawning_on(cpus):
    return subprocess.Popen(
      command or trial_command(run_dir, python),
      stdout=log,
      stderr=subprocess.STDOUT,
      stdin=subprocess.DEVNULL,
      env=child_env({**(env or {}), PARENT_ENV: str(os.getpid())}),
    )


@contextlib.contextmanager
def spawning_on(cpus: Optional[set[int]]) -> Iterator[None]:
  """This thread's CPU affinity set to ``cpus`` for the duration (a child started meanwhile inherits it), then
  restored; nothing when ``cpus`` is empty or the OS has no ``sched_setaffinity`` (macOS)."""
  if not cpus or not hasattr(os, "sched_setaffinity"):
    yield
    return
  with _SPAWN_LOCK:
    before = os.sched_getaffinity(0)  # pid 0: the calling thread
    os.sched_setaffinity(0, cpus)
    try:
      yield
    finally:
      os.sched_setaffinity(0, before)


def die_with_parent() -> None:
  """In a trial's process: asks the kernel to SIGKILL it when the process that started it ends
  (``PR_SET_PDEATHSIG``), and exits at once if that process has already ended (its pid, :data:`PARENT_ENV`, is no
  longer the parent). Nothing where there is no ``prctl`` (macOS) or no recorded parent (run by hand)."""
  parent = os.environ.get(PARENT_ENV, "")
  if not parent.isdigit():
    return
  try:
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
  except (OSError, AttributeError):
    return
  if os.getppid() != int(parent):  # the driver died before the request took effect
    os._exit(1)


class LocalHandle:
  """A trial running as a child process of the driver."""

  def __init__(self, run_id: str, proc: subprocess.Popen, log: IO, on_exit):
    self.run_id, self._proc, self._log, self._on_exit = run_id, proc, log, on_exit

  def poll(self) -> Optional[int]:
    code = self._proc.poll()
    if code is not None:
      self._close()
    return code

  def kill(self) -> None:
    if self._proc.poll() is None:
      self._proc.kill()
      self._proc.wait()
    self._close()

  def _close(self) -> None:
    if not self._log.closed:
      self._log.close()
      self._on_exit()


def _open_log(run_dir: str) -> tuple[IO, Callable[[], None]]:
  """The trial's log, open for appending, and what to do once the trial has ended. A child process writes its
  output to a local file; for a run dir on an object store that file is local (``io_utils.local_path``) and its
  text is appended to ``RUN_DIR/log.txt`` when the trial ends."""
  path = io_utils.local_path(run_dir, run_files.LOG_FILE)
  log = open(path, "a", encoding="utf-8")
  if not io_utils.is_remote(run_dir):
    return log, lambda: None

  def upload() -> None:
    with open(path, encoding="utf-8", errors="replace") as f:
      io_utils.append_text(os.path.join(run_dir, run_files.LOG_FILE), f.read())
    os.remove(path)

  return log, upload


class LocalExecutor:
  """Up to ``slots`` trials at once as child processes on this machine.

  ``cpus_per_trial`` > 0 pins slot i to the i-th c of the CPUs the driver may use (:func:`slot_cpus`,
  ``sched_setaffinity``; where the OS has none, as on macOS, trials run unpinned), so two single-threaded trials do
  not share a core; XLA sizes its CPU thread pool by the CPUs it may run on. Children die with the driver
  (``PR_SET_PDEATHSIG``): a ``kill -9`` of the driver leaves no orphan trainer writing into the study. A trial
  that forces more CPU devices than ``cpus_per_trial`` (e.g. 2 for the gradient noise scale) runs unpinned.
  """

  name = "local"

  def __init__(self, slots: int = 1, cpus_per_trial: int = 0, python: str = sys.executable):
    self.slots, self._cpus, self._python = max(1, int(slots)), int(cpus_per_trial), python
    self._free = list(range(self.slots))
    ncpu = len(usable_cpus())
    if self._cpus and self._cpus * self.slots > ncpu:
      raise ValueError(
        f"{self.slots} workers × {self._cpus} CPUs each need {self._cpus * self.slots} CPUs; this machine has {ncpu}."
      )

  def check_workdir(self, workdir: str) -> None:
    io_utils.makedirs(workdir)

  def affinity(self, slot: int, env: Mapping[str, str]) -> Optional[set[int]]:
    """The CPUs slot ``slot`` is pinned to, or None (not pinned). A trial that forces more XLA CPU devices than
    its share of CPUs is not pinned: the devices' collectives need a thread each at the same time, and on fewer
    CPUs XLA's all-reduce rendezvous times out and aborts the process."""
    if not self._cpus or not hasattr(os, "sched_setaffinity"):  # e.g. macOS: no CPU pinning, trials run unpinned
      return None
    if (forced_cpu_devices(env) or 0) > self._cpus:
      return None
    return slot_cpus(slot, self._cpus)

  def exclusive(self, env: Mapping[str, str]) -> bool:
    """Whether a trial with ``env`` must have the machine to itself: one that forces more CPU devices than its CPU
    share. Beside a pinned trial, its devices' all-reduce rendezvous stalled and aborted (measured here: the same
    2-device MNIST run alone trains at 30K ex/s)."""
    return bool(self._cpus) and self.affinity(0, {**os.environ, **env}) is None

  def worker_env(self, env: Mapping[str, str]) -> dict[str, str]:
    """A trial's extra environment. With several slots, JAX on a GPU must not preallocate: by default each process
    takes 75% of the GPU's memory at start, so a second trial on the same GPU fails to allocate. Trials then
    allocate what they use (``XLA_PYTHON_CLIENT_PREALLOCATE=false``) unless the study sets either variable."""
    env = dict(env)
    if self.slots > 1 and not {"XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_MEM_FRACTION"} & {*env, *os.environ}:
      env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    return env

  def submit(self, run_id: str, run_dir: str, env: Mapping[str, str]) -> LocalHandle:
    slot = self._free.pop(0) if self._free else 0
    env = self.worker_env(env)
    log, upload = _open_log(run_dir)
    log.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} start {run_id} (local slot {slot})\n")
    log.flush()
    proc = spawn_trial(run_dir, log, env, python=self._python, cpus=self.affinity(slot, {**os.environ, **env}))
    return LocalHandle(run_id, proc, log, lambda: (upload(), self._free.append(slot)))

  def close(self) -> None:
    pass
