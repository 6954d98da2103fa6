"""Trials as Ray tasks: the study runner's executor for a Ray cluster (``--executor=ray``).

The driver (``python -m lamb_lars.study run``) keeps the store, the search and the pruning; a trial is one Ray
task that starts ``python -m lamb_lars.study.running.run_one RUN_DIR`` as a subprocess on whichever node Ray picks, with
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
  ``gs://`` run dirs are refused with one sentence: a Ray task writes its trial's log, and the probe its files,
  with local file I/O (the trainer and the local executor take ``gs://`` workdirs; io_utils.py).

Ray is an optional extra (``pip install -e .[ray]``); this module imports it only when used.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from typing import Any, Mapping, Optional

from lamb_lars.common.run_files import ERROR_FILE, LOG_FILE
from lamb_lars.study.running import sections
from lamb_lars.study.running.executor import spawn_trial
from lamb_lars.study.running.ray_cluster import connect, first_line, normalize_resources, slots_for, task_options

_PROBE_DIR = ".ray_probe"


def _killed_line(run_id: str, why: str) -> str:
  """The run log's record of a kill, written by the task or, when the task could not, by the driver."""
  return f"=== {time.strftime('%Y-%m-%d %H:%M:%S')} killed {run_id} ({why})\n"


def _run_trial(run_id: str, run_dir: str, env: Mapping[str, str]) -> int:
  """The body of a trial's Ray task (on a worker): ``run_one`` in a subprocess; returns its exit status."""
  import ray  # noqa: PLC0415

  ctx = ray.get_runtime_context()
  node = ctx.get_node_id()
  with open(os.path.join(run_dir, LOG_FILE), "a", encoding="utf-8") as log:
    log.write(
      f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} start {run_id} (ray node {node[:12]} "
      f"{ray.util.get_node_ip_address()}, task {ctx.get_task_id()[:16]}, pid {os.getpid()})\n"
    )
    log.flush()
    proc = spawn_trial(run_dir, log, env)
    try:
      while True:
        try:
          return proc.wait(timeout=0.25)
        except subprocess.TimeoutExpired:
          pass
    except BaseException:  # ray.cancel: KeyboardInterrupt / TaskCancelledError in this thread
      proc.kill()
      proc.wait()
      log.write(_killed_line(run_id, "cancelled"))
      log.flush()
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
  cfg = sections.section(study, "runner")
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
          f.write(f"RayError: the trial's Ray task failed: {type(e).__name__}: {first_line(e)}\n")
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
    if force:  # the worker process was killed, so its task wrote no "killed" line: the driver writes it
      with open(os.path.join(self.run_dir, LOG_FILE), "a", encoding="utf-8") as log:
        log.write(
          _killed_line(
            self.run_id, f"worker force-killed: the task had not ended {self._kill_timeout_s:g} s after its cancel"
          )
        )
    self._code = -signal.SIGKILL


class RayExecutor:
  """Runs trials as Ray tasks on the cluster at ``address`` (see the module doc)."""

  name = "ray"

  def __init__(
    self, resources: Optional[Mapping[str, Any]] = None, *, address: Optional[str] = None, max_retries: int = 3
  ):
    self._ray = connect(address)
    self.resources = normalize_resources(resources)
    self.slots = slots_for(self._ray.nodes(), self.resources)
    self._task = self._ray.remote(_run_trial).options(
      max_retries=int(max_retries), retry_exceptions=False, **task_options(self.resources)
    )
    self._handles: list[RayTrialHandle] = []

  def check_workdir(self, workdir: str, timeout_s: float = 120.0) -> None:
    """A ValueError (one sentence) unless every alive node sees ``workdir`` at the same path, read and write."""
    if "://" in workdir:
      raise ValueError(
        f"--workdir={workdir}: Ray trials write their logs with local file I/O, so give a path that "
        "every node mounts (NFS, Filestore, or the bucket through gcsfuse) instead of a URL."
      )
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
      refs = {
        probe.options(
          num_cpus=0, max_retries=0, scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)
        ).remote(workdir, token): n
        for n in nodes
      }
      ready, pending = ray.wait(list(refs), num_returns=len(refs), timeout=timeout_s)
      for ref in pending:
        n = refs[ref]
        raise ValueError(
          f"Ray node {n['NodeManagerAddress']} ({n['NodeID'][:12]}) did not answer a workdir probe "
          f"within {timeout_s:.0f} s, so it cannot run trials."
        )
      for ref in ready:
        n = refs[ref]
        try:
          why = ray.get(ref)
        except ray.exceptions.RayError as e:
          why = first_line(e)
        if not why and not os.path.exists(os.path.join(probe_dir, f"node-{n['NodeID']}-{token}")):
          why = "its probe file did not appear on the driver's side (another copy of the workdir)"
        if why:
          raise ValueError(
            f"Ray workers on node {n['NodeManagerAddress']} ({n['NodeID'][:12]}) cannot use the "
            f"workdir {workdir}: {why}; give a path on a filesystem every node mounts at the same "
            "place."
          )
    finally:
      for name in os.listdir(probe_dir):
        if token in name:
          os.remove(os.path.join(probe_dir, name))

  def exclusive(self, env: Mapping[str, str]) -> bool:
    """Never: Ray places each trial on a node that holds its ``resources``, beside the trials it has room for."""
    return False

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
