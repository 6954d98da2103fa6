"""Trials as Ray tasks: the study runner's executor for a Ray cluster (``--executor=ray``).

The driver (``python -m lamb_lars.study run``) keeps the store, the search and the pruning; a trial is one Ray
task that starts ``python -m lamb_lars.study.run_one RUN_DIR`` as a subprocess on whichever node Ray picks, with
the trial's extra environment applied before JAX is imported, its stdout/stderr appended to ``RUN_DIR/log.txt``,
and ``PR_SET_PDEATHSIG = SIGKILL`` so that the trainer dies with the Ray worker that started it.

* **Resources.** ``study.runner.resources`` (``{'CPU': 1, 'GPU': 0, 'TPU': 4, 'my_label': 1}``) becomes the task's
  ``num_cpus`` / ``num_gpus`` / ``resources={...}``. Ray sets ``CUDA_VISIBLE_DEVICES`` (GPU) or the TPU chip
  variables (TPU) for the worker, and the trainer inherits them. A request that no alive node can hold is a
  ``ValueError`` before anything is submitted (Ray itself would leave the task pending forever). ``slots`` is
  the number of trials the cluster holds at once (per node: the fewest copies of the request it has, summed).
* **Retries.** A task whose worker or node dies is retried by Ray (``max_retries``, system failures only: a
  trainer that exits non-zero is a result, not retried). The retry starts ``run_one`` on the same shared run dir,
  which resumes from ``RUN_DIR/checkpoints``: ``log.txt`` shows a second ``=== ... start`` header (with the new
  node) followed by the trainer's ``Resumed from step N``.
* **Driver restart.** Ray tasks share fate with their owner: when the driver dies, Ray kills the workers running
  its tasks, and PDEATHSIG takes the trainers with them. The restarted driver finds the unfinished runs in the
  store and submits them again; each resumes from its checkpoint, and a run that had already written
  ``result.json`` is not trained again (the trainer returns at once).
* **One trainer per run dir.** ``run_one`` holds an ``flock`` on ``RUN_DIR/.lock`` and a new trainer waits up to
  60 s for it. On one node (and across nodes on NFSv4, where Linux maps ``flock`` to NFS byte-range locks) that
  excludes two live trainers; on a filesystem without cross-node locks (most FUSE mounts, e.g. gcsfuse) the lock
  is node-local and the guarantee rests on Ray killing a dead owner's or a dead node's workers first.
* **Shared storage.** The workdir must be the same path on every node (NFS, Filestore, Lustre, a gcsfuse mount):
  ``check_workdir`` runs a probe task on every alive node that reads the driver's probe file and writes its own.
  ``gs://`` run dirs are refused with one sentence: the trainer writes metrics and results with local file I/O.

Ray is an optional extra (``pip install -e .[ray]``); this module imports it only when used.
"""
from __future__ import annotations

import contextlib
import ctypes
import logging
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from typing import Any, Mapping, Optional

RAY_VERSION = "2.60.0"  # the version the tests ran with (setup.py's [ray] extra pins it)
LOG_FILE = "log.txt"
ERROR_FILE = "error.txt"
DEFAULT_RESOURCES = {"CPU": 1.0}
_PR_SET_PDEATHSIG = 1
_PROBE_DIR = ".ray_probe"


def import_ray():
  """The ``ray`` module, or a one-sentence ValueError when it is not installed."""
  try:
    import ray  # noqa: PLC0415
  except ImportError:
    raise ValueError("--executor=ray needs Ray: pip install -e .[ray]") from None
  return ray


def _first_line(e: BaseException) -> str:
  text = str(e).strip()
  return text.splitlines()[0].rstrip(".") if text else type(e).__name__


def connect(address: Optional[str] = None, *, timeout_s: float = 5.0, init_timeout_s: float = 120.0):
  """Connects this process to a Ray cluster and returns the ``ray`` module.

  ``address``: ``HOST:PORT`` of the head's GCS (``ray start --head --port=PORT``), ``auto`` (the cluster this
  machine belongs to, or ``$RAY_ADDRESS``), ``ray://HOST:10001`` (Ray Client), or empty: ``$RAY_ADDRESS`` or the
  local cluster if one runs, else a new single-node Ray for this process (the CLI's default is ``auto``). Failures are one-sentence ValueErrors,
  within ``timeout_s`` for an address where nothing or something else listens, ``init_timeout_s`` otherwise.
  """
  ray = import_ray()
  if ray.is_initialized():
    return ray
  addr = (address or "").strip()
  if addr and addr != "auto" and "://" not in addr:
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit():
      raise ValueError(f"--ray_address={addr} is not HOST:PORT (e.g. 10.0.0.2:6379), auto or ray://HOST:PORT.")
    try:
      socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as e:
      raise ValueError(f"cannot reach the Ray cluster at {addr} ({e.strerror or e}): start it with "
                       f"`ray start --head --port={port}` or fix --ray_address.") from None
    if not _speaks_grpc(addr, timeout_s):  # ray.init would retry for ever against, say, an SSH port
      raise ValueError(f"{addr} answers but is not a Ray cluster's GCS: give the head's --port "
                       "(`ray start --head --port=PORT`, default 6379).")
  try:
    with _alarm(max(init_timeout_s, 1.0)):
      ray.init(address=addr or None, log_to_driver=False, logging_level=logging.WARNING, namespace="lamb_lars",
               include_dashboard=False if not addr else None, configure_logging=True)
  except _InitTimeout:
    raise ValueError(f"the Ray cluster at {addr or 'auto'} did not accept this driver within "
                     f"{init_timeout_s:.0f} s.") from None
  except (ConnectionError, RuntimeError, TimeoutError, ValueError) as e:
    raise ValueError(f"cannot connect to a Ray cluster at {addr or 'auto'}: {_first_line(e)}.") from None
  return ray


def _speaks_grpc(addr: str, timeout_s: float) -> bool:
  """Whether ``addr`` completes a gRPC (HTTP/2) handshake, as a Ray GCS does."""
  try:
    import grpc  # noqa: PLC0415  (a Ray dependency)
  except ImportError:
    return True
  channel = grpc.insecure_channel(addr)
  try:
    grpc.channel_ready_future(channel).result(timeout=timeout_s)
    return True
  except grpc.FutureTimeoutError:
    return False
  finally:
    channel.close()


class _InitTimeout(Exception):
  pass


@contextlib.contextmanager
def _alarm(seconds: float):
  """Raises _InitTimeout in the main thread after ``seconds`` (no-op elsewhere: signals need the main thread)."""
  if threading.current_thread() is not threading.main_thread():
    yield
    return

  def _raise(signum, frame):
    raise _InitTimeout()

  old = signal.signal(signal.SIGALRM, _raise)
  signal.setitimer(signal.ITIMER_REAL, seconds)
  try:
    yield
  finally:
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, old)


def normalize_resources(resources: Optional[Mapping[str, Any]]) -> dict[str, float]:
  """``study.runner.resources`` as ``{name: amount}`` (CPU defaults to 1; zero amounts dropped)."""
  out = dict(DEFAULT_RESOURCES)
  for k, v in dict(resources or {}).items():
    try:
      amount = float(v)
    except (TypeError, ValueError):
      raise ValueError(f"study.runner.resources[{k!r}] = {v!r} is not a number.") from None
    if not math.isfinite(amount) or amount < 0:
      raise ValueError(f"study.runner.resources[{k!r}] = {v!r} must be a finite number ≥ 0.")
    out[str(k)] = amount
  return {k: v for k, v in out.items() if v > 0}


def task_options(resources: Mapping[str, float]) -> dict[str, Any]:
  """``ray.remote`` options for one trial: ``num_cpus``, ``num_gpus``, custom ``resources`` (e.g. ``TPU``)."""
  res = dict(resources)
  opts: dict[str, Any] = {"num_cpus": res.pop("CPU", 0.0), "num_gpus": res.pop("GPU", 0.0)}
  if res:
    opts["resources"] = res
  return opts


def _fmt(res: Mapping[str, float]) -> str:
  return ", ".join(f"{k} {v:g}" for k, v in sorted(res.items())) or "nothing"


def slots_for(nodes: list[Mapping[str, Any]], resources: Mapping[str, float]) -> int:
  """Trials the alive ``nodes`` (``ray.nodes()`` rows) hold at once; a ValueError when no node holds one."""
  alive = [n for n in nodes if n.get("Alive")]
  if not alive:
    raise ValueError("the Ray cluster has no alive node.")
  total = 0
  for n in alive:
    have = n.get("Resources") or {}
    fits = [math.floor(have.get(k, 0.0) / v + 1e-9) for k, v in resources.items()]
    total += min(fits) if fits else int(have.get("CPU", 1) or 1)
  if total == 0:
    best = max(alive, key=lambda n: sum(min(1.0, (n.get("Resources") or {}).get(k, 0.0) / v)
                                        for k, v in resources.items()))
    have = {k: (best.get("Resources") or {}).get(k, 0.0) for k in resources}
    raise ValueError(f"no node of the Ray cluster can run a trial that asks for {_fmt(resources)} (the closest "
                     f"node has {_fmt(have)}): change study.runner.resources or add such nodes.")
  return total


def _die_with_parent() -> None:
  try:
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
  except (OSError, AttributeError):
    pass


def _repo_root() -> str:
  return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run_trial(run_id: str, run_dir: str, env: Mapping[str, str]) -> int:
  """The body of a trial's Ray task (on a worker): ``run_one`` in a subprocess; returns its exit status."""
  import ray  # noqa: PLC0415
  ctx = ray.get_runtime_context()
  node = ctx.get_node_id()
  root = _repo_root()
  child_env = dict(os.environ)
  child_env["PYTHONPATH"] = os.pathsep.join(p for p in (root, child_env.get("PYTHONPATH", "")) if p)
  child_env.update({str(k): str(v) for k, v in env.items()})
  with open(os.path.join(run_dir, LOG_FILE), "a", encoding="utf-8") as log:
    log.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} start {run_id} (ray node {node[:12]} "
              f"{ray.util.get_node_ip_address()}, task {ctx.get_task_id()[:16]}, pid {os.getpid()})\n")
    log.flush()
    proc = subprocess.Popen([sys.executable, "-m", "lamb_lars.study.run_one", run_dir], stdout=log,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=child_env, cwd=root,
                            preexec_fn=_die_with_parent)
    try:
      while True:
        try:
          return proc.wait(timeout=0.25)
        except subprocess.TimeoutExpired:
          pass
    except BaseException:  # ray.cancel: KeyboardInterrupt / TaskCancelledError in this thread
      proc.kill()
      proc.wait()
      log.write(f"=== {time.strftime('%Y-%m-%d %H:%M:%S')} killed {run_id} (cancelled)\n")
      raise


def _probe(path: str, token: str) -> str:
  """On one node: '' when the node reads the driver's probe file under ``path`` and writes its own, else why."""
  import ray  # noqa: PLC0415
  node = ray.get_runtime_context().get_node_id()
  probe_dir = os.path.join(path, _PROBE_DIR)
  try:
    if not os.path.isdir(path):
      return f"{path} does not exist there"
    with open(os.path.join(probe_dir, f"driver-{token}"), encoding="utf-8") as f:
      if f.read() != token:
        return "it holds another copy of the workdir (the probe file differs)"
    with open(os.path.join(probe_dir, f"node-{node}-{token}"), "w", encoding="utf-8") as f:
      f.write(node)
    return ""
  except OSError as e:
    return f"{e.strerror or e} ({e.filename or path})" if isinstance(e, OSError) else str(e)


def make_executor(study, address: Optional[str] = "auto") -> "RayExecutor":
  """The executor of ``study.runner`` (``resources``, ``max_retries``) on the cluster at ``address``."""
  from lamb_lars.study import runner  # noqa: PLC0415
  cfg = runner.settings(study, "runner", runner.RUNNER_DEFAULTS)
  return RayExecutor(cfg["resources"], address=address, max_retries=int(cfg["max_retries"]))


class RayTrialHandle:
  """One submitted trial: ``poll()`` (None while it runs; its exit status once it ended) and ``kill()``."""

  def __init__(self, ray, run_id: str, run_dir: str, ref, kill_timeout_s: float = 30.0):
    self._ray, self.run_id, self.run_dir, self.ref = ray, run_id, run_dir, ref
    self._code: Optional[int] = None
    self._kill_timeout_s = kill_timeout_s

  def poll(self) -> Optional[int]:
    if self._code is None:
      ready, _ = self._ray.wait([self.ref], timeout=0)
      if ready:
        self._code = self._result()
    return self._code

  def _result(self) -> int:
    ray = self._ray
    try:
      return int(ray.get(self.ref))
    except ray.exceptions.TaskCancelledError:
      return -signal.SIGKILL
    except ray.exceptions.RayError as e:  # the worker or node died more often than max_retries, or similar
      path = os.path.join(self.run_dir, ERROR_FILE)
      if not os.path.exists(path):
        with open(path, "w", encoding="utf-8") as f:
          f.write(f"RayError: the trial's Ray task failed: {type(e).__name__}: {_first_line(e)}\n")
      return 1

  def kill(self) -> None:
    """Cancels the task (the task kills its trainer and waits for it) and returns once it has ended."""
    if self.poll() is not None:
      return
    ray = self._ray
    for force in (False, True):
      try:
        ray.cancel(self.ref, force=force)
      except Exception:  # noqa: BLE001  (already finished or its node is gone)
        pass
      ready, _ = ray.wait([self.ref], timeout=self._kill_timeout_s)
      if ready:
        break
    self._code = -signal.SIGKILL


class RayExecutor:
  """Runs trials as Ray tasks on the cluster at ``address`` (see the module doc)."""

  name = "ray"

  def __init__(self, resources: Optional[Mapping[str, Any]] = None, *, address: Optional[str] = None,
               max_retries: int = 3):
    self._ray = connect(address)
    self.resources = normalize_resources(resources)
    self.slots = slots_for(self._ray.nodes(), self.resources)
    self._task = self._ray.remote(_run_trial).options(max_retries=int(max_retries), retry_exceptions=False,
                                                      **task_options(self.resources))
    self._handles: list[RayTrialHandle] = []

  def check_workdir(self, workdir: str, timeout_s: float = 120.0) -> None:
    """A ValueError (one sentence) unless every alive node sees ``workdir`` at the same path, read and write."""
    if "://" in workdir:
      raise ValueError(f"--workdir={workdir}: trials write their run dirs with local file I/O, so give a path that "
                       "every node mounts (NFS, Filestore, or the bucket through gcsfuse) instead of a URL.")
    workdir = os.path.abspath(workdir)
    ray = self._ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # noqa: PLC0415
    token = uuid.uuid4().hex
    probe_dir = os.path.join(workdir, _PROBE_DIR)
    os.makedirs(probe_dir, exist_ok=True)
    with open(os.path.join(probe_dir, f"driver-{token}"), "w", encoding="utf-8") as f:
      f.write(token)
    try:
      nodes = [n for n in ray.nodes() if n.get("Alive")]
      probe = ray.remote(_probe)
      refs = {probe.options(num_cpus=0, max_retries=0, scheduling_strategy=NodeAffinitySchedulingStrategy(
          n["NodeID"], soft=False)).remote(workdir, token): n for n in nodes}
      ready, pending = ray.wait(list(refs), num_returns=len(refs), timeout=timeout_s)
      for ref in pending:
        n = refs[ref]
        raise ValueError(f"Ray node {n['NodeManagerAddress']} ({n['NodeID'][:12]}) did not answer a workdir probe "
                         f"within {timeout_s:.0f} s, so it cannot run trials.")
      for ref in ready:
        n = refs[ref]
        try:
          why = ray.get(ref)
        except ray.exceptions.RayError as e:
          why = _first_line(e)
        if not why and not os.path.exists(os.path.join(probe_dir, f"node-{n['NodeID']}-{token}")):
          why = "its probe file did not appear on the driver's side (another copy of the workdir)"
        if why:
          raise ValueError(f"Ray workers on node {n['NodeManagerAddress']} ({n['NodeID'][:12]}) cannot use the "
                           f"workdir {workdir}: {why}; give a path on a filesystem every node mounts at the same "
                           "place.")
    finally:
      for name in os.listdir(probe_dir):
        if token in name:
          os.remove(os.path.join(probe_dir, name))

  def submit(self, run_id: str, run_dir: str, env: Optional[Mapping[str, str]] = None) -> RayTrialHandle:
    run_dir = run_dir if "://" in run_dir else os.path.abspath(run_dir)
    ref = self._task.remote(run_id, run_dir, {str(k): str(v) for k, v in (env or {}).items()})
    handle = RayTrialHandle(self._ray, run_id, run_dir, ref)
    self._handles = [h for h in self._handles if h._code is None] + [handle]
    return handle

  def close(self) -> None:
    """Kills the trials still running and disconnects from the cluster (which keeps running)."""
    for h in self._handles:
      h.kill()
    self._handles = []
    if self._ray.is_initialized():
      self._ray.shutdown()
