"""``study run --pack=K|auto``: the driver's pending trials grouped into packs, each pack one process
(``run_pack``, :mod:`lamb_lars.train.packed`), each trial still one row of the store.

* **Grouping** (:func:`take_pack`): the first pending trial and up to K − 1 later ones with the same
  :func:`lamb_lars.train.pack_compat.pack_key` (model, batch size, data pipeline, durations); a trial that cannot be
  packed runs alone, as today.
* **One handle per trial** (:class:`SlotHandle`): ``poll()`` is 0 once its slot wrote ``result.json``, the
  process's exit status once the process ended without one, else None. ``kill()`` (the search pruned it, or it
  timed out) writes the slot's stop request (:data:`lamb_lars.train.packed.STOP_FILE`) and waits until the pack
  has stopped that slot (the file removed), its result appeared, or the process ended; the other slots go on. So a
  pruned slot goes through the same Optuna report, decision and store record as an unpacked trial
  (``Driver.consider``).
* **auto** (:func:`resolve_pack`): packing pays on an accelerator and costs on XLA:CPU (issue 61 measured packing
  at 0.26× on the 2-core CPU: XLA:CPU runs the vmapped convolutions as grouped convolutions), so ``auto`` packs
  :data:`AUTO_PACK` trials on a GPU or TPU machine and none on a CPU. The backend is read from ``JAX_PLATFORMS`` or
  the machine's device files, not from JAX, so the driver never takes an accelerator's memory.
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import time
from typing import Any, Mapping, Optional

from lamb_lars.common import io_utils, run_files
from lamb_lars.study.running import executor as executor_lib

AUTO_PACK = 32  # slots of one pack with --pack=auto on an accelerator
STOP_WAIT_S = 600.0  # how long a stop request waits for the pack to stop the slot


def accelerator_present() -> bool:
  """Whether JAX would run on a GPU or TPU here: ``JAX_PLATFORMS``'s first platform when set, else an NVIDIA or
  TPU device file."""
  platforms = os.environ.get("JAX_PLATFORMS", "").strip()
  if platforms:
    return platforms.split(",")[0].strip() in ("cuda", "gpu", "rocm", "tpu")
  return any(os.path.exists(p) for p in ("/dev/nvidiactl", "/dev/nvidia0", "/dev/accel0", "/dev/kfd"))


def resolve_pack(pack: Any) -> int:
  """Slots per pack of ``--pack``: an integer ≥ 1, or 'auto' (:data:`AUTO_PACK` on an accelerator, else 1);
  anything else is a one-sentence ValueError."""
  if pack in (None, "", "auto"):
    return AUTO_PACK if accelerator_present() else 1
  try:
    k = int(pack)
  except (TypeError, ValueError):
    k = 0
  if k < 1:
    raise ValueError(f"--pack={pack!r} must be 'auto' or an integer ≥ 1 (1 = every trial in its own process).")
  return k


def take_pack(todo: collections.deque, size: int) -> list:
  """Removes from ``todo`` and returns its first trial and up to ``size`` − 1 later trials packable with it (in
  order); the first alone when it cannot be packed."""
  from lamb_lars.train import pack_compat  # noqa: PLC0415  (config-only; no JAX)

  first = todo.popleft()
  if size <= 1 or pack_compat.unpackable(first.config):
    return [first]
  key, group, rest = pack_compat.pack_key(first.config), [first], collections.deque()
  while todo:
    t = todo.popleft()
    if len(group) < size and not pack_compat.unpackable(t.config) and pack_compat.pack_key(t.config) == key:
      group.append(t)
    else:
      rest.append(t)
  todo.extend(rest)
  return group


class PackProcess:
  """One ``run_pack`` process, shared by its slots' handles."""

  def __init__(self, proc: subprocess.Popen, log: Any):
    self.proc, self._log = proc, log

  def poll(self) -> Optional[int]:
    code = self.proc.poll()
    if code is not None and not self._log.closed:
      self._log.close()
    return code

  def kill(self) -> None:
    if self.proc.poll() is None:
      self.proc.kill()
      self.proc.wait()
    self.poll()


class SlotHandle:
  """A trial running as one slot of a pack (module docstring)."""

  def __init__(self, run_id: str, run_dir: str, process: PackProcess):
    self.run_id, self.run_dir, self.process = run_id, run_dir, process

  def _ended(self) -> bool:
    return io_utils.exists(os.path.join(self.run_dir, run_files.RESULT_FILE))

  def poll(self) -> Optional[int]:
    if self._ended():
      return 0
    code = self.process.poll()
    return None if code is None else (code or 1)  # the pack ended without this slot's result: it failed

  def kill(self) -> None:
    """Stops this slot only (pruned or timed out): its stop request, then a wait until the pack has acted on it."""
    from lamb_lars.train import packed  # noqa: PLC0415

    if self.process.poll() is not None or self._ended():
      return
    request = os.path.join(self.run_dir, packed.STOP_FILE)
    io_utils.write_text_atomic(request, "pruned\n")
    deadline = time.monotonic() + STOP_WAIT_S
    while io_utils.exists(request) and self.process.poll() is None and not self._ended():
      if time.monotonic() > deadline:
        raise RuntimeError(f"the pack did not stop {self.run_id} within {STOP_WAIT_S:.0f} s of its stop request.")
      time.sleep(0.1)

  def kill_all(self) -> None:
    """Stops the whole pack (the driver is interrupted): its slots resume from their checkpoints next time."""
    self.process.kill()


def submit_pack(ex: Any, run_ids: list[str], run_dirs: list[str], env: Mapping[str, str]) -> list[SlotHandle]:
  """Starts one ``run_pack`` process for ``run_dirs`` on the local executor ``ex``; its output goes to the first
  trial's ``log.txt`` (the others' logs say where)."""
  env = ex.worker_env(env)
  log = open(io_utils.local_path(run_dirs[0], run_files.LOG_FILE), "a", encoding="utf-8")
  stamp = time.strftime("%Y-%m-%d %H:%M:%S")
  log.write(f"\n=== {stamp} start pack of {len(run_ids)}: {' '.join(run_ids)}\n")
  log.flush()
  for rid, d in zip(run_ids[1:], run_dirs[1:]):
    io_utils.append_text(os.path.join(d, run_files.LOG_FILE), f"\n=== {stamp} {rid} packed; log in {run_dirs[0]}\n")
  command = [sys.executable, "-m", "lamb_lars.study.running.run_pack", *run_dirs]
  proc = executor_lib.spawn_trial(run_dirs[0], log, env, command=command)  # dies with the driver
  process = PackProcess(proc, log)
  return [SlotHandle(rid, d, process) for rid, d in zip(run_ids, run_dirs)]
