"""Orbax checkpoints of the train state plus JSON metadata, with automatic resume from the newest one.

A kill -9 during an asynchronous save leaves ``N.orbax-checkpoint-tmp``; orbax ignores it and the previous step
restores, so a killed run resumes from its last complete checkpoint.

A checkpoint that is complete but does not restore (a truncated data file, an emptied ``state/`` folder, garbled
metadata: a disk or a hand gone wrong) is moved aside by :meth:`Checkpointer.restore_newest_intact` to
``<workdir>/checkpoints_quarantine/<step>-<time>`` (renamed, never deleted) with one log line, and the previous
one restores: the run resumes exactly as from that step. When none restores, the error says so and moves nothing.
"""
from __future__ import annotations

import os
import time
from typing import Any, Callable, Optional

import jax
import orbax.checkpoint as ocp

from lamb_lars.common import io_utils, run_files
from lamb_lars.errors import UserError


QUARANTINE_DIR = "checkpoints_quarantine"


class CheckpointError(UserError, RuntimeError):
  """No checkpoint of a run restores; the message is one sentence naming the folder."""


def first_line(e: BaseException) -> str:
  text = str(e).strip().splitlines()
  return f"{type(e).__name__}: {text[0][:200]}" if text else type(e).__name__


def read_state(workdir: str, step: int, abstract_state: Any) -> Any:
  """The state saved at ``step`` in ``workdir``'s checkpoints, read only (nothing there is created or deleted)."""
  folder = io_utils.abspath(os.path.join(workdir, run_files.CHECKPOINT_DIR))
  mngr = ocp.CheckpointManager(folder, options=ocp.CheckpointManagerOptions(
      read_only=True, create=False, save_interval_steps=0))
  try:
    target = jax.tree.map(ocp.utils.to_shape_dtype_struct, abstract_state)
    return mngr.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(target)))["state"]
  finally:
    mngr.close()


class Checkpointer:
  """Keeps the newest ``keep`` checkpoints of ``{state, meta}`` under ``<workdir>/checkpoints``."""

  def __init__(self, workdir: str, keep: int = 2):
    options = ocp.CheckpointManagerOptions(max_to_keep=keep, create=True, enable_async_checkpointing=True)
    self._dir = io_utils.abspath(os.path.join(workdir, run_files.CHECKPOINT_DIR))
    self._quarantine = io_utils.abspath(os.path.join(workdir, QUARANTINE_DIR))
    self._mngr = ocp.CheckpointManager(self._dir, options=options)

  def latest_step(self) -> Optional[int]:
    return self._mngr.latest_step()

  def save(self, step: int, state: Any, meta: dict) -> None:
    self._mngr.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                                   meta=ocp.args.JsonSave(meta)))

  def restore(self, abstract_state: Any, step: Optional[int] = None) -> tuple[Any, dict]:
    """Restores into the shapes, dtypes and shardings of ``abstract_state`` (a tree of arrays or ShapeDtypeStructs)."""
    step = self._mngr.latest_step() if step is None else step
    target = jax.tree.map(ocp.utils.to_shape_dtype_struct, abstract_state)
    out = self._mngr.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(target),
                                                            meta=ocp.args.JsonRestore()))
    return out["state"], dict(out["meta"])

  def quarantine(self, step: int) -> str:
    """Moves checkpoint ``step`` to the quarantine folder (a rename, so nothing is lost); returns its new path."""
    from etils import epath  # orbax's own path library: a rename on local disks and on gs://
    quarantine = epath.Path(self._quarantine)
    quarantine.mkdir(parents=True, exist_ok=True)
    dest = quarantine / f"{step}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    (epath.Path(self._dir) / str(step)).rename(dest)
    self._mngr.reload()
    return str(dest)

  def restore_newest_intact(self, abstract_state: Any, log: Callable[[str], None] = print) -> tuple[Any, dict]:
    """The newest checkpoint that restores; each newer one that fails is quarantined with one log line.

    CheckpointError (one sentence) when none restores; then nothing is moved."""
    steps = sorted(self._mngr.all_steps(), reverse=True)
    failed: list[tuple[int, str]] = []
    for step in steps:
      try:
        out = self.restore(abstract_state, step)
      except Exception as e:  # noqa: BLE001  (orbax / tensorstore / json errors all mean "this one is damaged")
        failed.append((step, first_line(e)))
        continue
      for bad, why in failed if jax.process_index() == 0 else ():  # one process moves the shared folder
        log(f"Checkpoint at step {bad} does not restore ({why}); moved it to {self.quarantine(bad)} and resuming "
            f"from step {step}.")
      return out
    step, why = failed[0]
    raise CheckpointError(f"no checkpoint under {self._dir} restores (step {step}: {why}); move that folder away "
                          f"to start the run over.")

  def close(self) -> None:
    self._mngr.wait_until_finished()
    self._mngr.close()
