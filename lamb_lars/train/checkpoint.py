"""Orbax checkpoints of the train state plus JSON metadata, with automatic resume from the newest one.

A kill -9 during an asynchronous save leaves ``N.orbax-checkpoint-tmp``; orbax ignores it and the previous step
restores, so a killed run resumes from its last complete checkpoint.

A checkpoint that is complete but does not restore (a truncated data file, an emptied ``state/`` folder, garbled
metadata: a disk or a hand gone wrong) is moved aside by :meth:`Checkpointer.restore_newest_intact` to
``<workdir>/checkpoints_quarantine/<step>-<time>`` (renamed, never deleted) with one log line, and the previous
one restores: the run resumes exactly as from that step. When none restores, the error says so and moves nothing.

Each checkpoint's metadata carries the sha256 of its state (:func:`state_checksum`: every array's path, dtype, shape
and bytes, from host values, in the tree's order); a restored state that does not hash to it (bytes flipped on a
disk) counts as damaged too. A step folder that orbax does not list (a save cut short where no temporary name is
used, as on gs://) is moved aside the same way before the newest intact checkpoint is sought.
"""

from __future__ import annotations

import hashlib
import os
import time
from typing import Any, Callable, Optional

import jax
import numpy as np
import orbax.checkpoint as ocp

from lamb_lars.common import io_utils, run_files
from lamb_lars.errors import UserError


QUARANTINE_DIR = "checkpoints_quarantine"
CHECKSUM_KEY = "state_sha256"  # in each checkpoint's metadata
META_FILE = os.path.join("meta", "metadata")  # a step folder's JSON metadata, as orbax's JsonSave writes it


class CheckpointError(UserError, RuntimeError):
  """No checkpoint of a run restores; the message is one sentence naming the folder."""


class ChecksumMismatch(ValueError):
  """A restored state does not hash to the sha256 recorded when it was saved."""


def _host(x: Any) -> np.ndarray:
  """A leaf's value on this host (a replicated global array: its local copy)."""
  if isinstance(x, jax.Array) and not x.is_fully_addressable:
    x = x.addressable_data(0)
  return np.ascontiguousarray(np.asarray(jax.device_get(x)))


def state_checksum(state: Any) -> str:
  """sha256 over every leaf of ``state``: its tree path, dtype, shape and bytes, in the tree's flattening order."""
  h = hashlib.sha256()
  for path, leaf in jax.tree_util.tree_flatten_with_path(state)[0]:
    a = _host(leaf)
    h.update(f"{jax.tree_util.keystr(path)}|{a.dtype.str}|{a.shape}|".encode())
    h.update(a.tobytes())
  return h.hexdigest()


def verified(state: Any, meta: dict) -> tuple[Any, dict]:
  """(state, meta without the checksum); ChecksumMismatch when ``meta`` records a checksum ``state`` does not have
  (metadata of older checkpoints records none: nothing to check)."""
  meta = dict(meta)
  want = meta.pop(CHECKSUM_KEY, None)
  if want is not None and state_checksum(state) != want:
    raise ChecksumMismatch("its arrays do not match the sha256 recorded when it was saved")
  return state, meta


def saved_metas(workdir: str) -> list[tuple[int, dict]]:
  """(step, metadata) of each step folder under ``workdir``'s checkpoints whose metadata reads as a JSON object,
  newest first; read as plain files (nothing compiled, nothing restored)."""
  folder = os.path.join(workdir, run_files.CHECKPOINT_DIR)
  out = []
  for name in sorted((n for n in io_utils.listdir(folder) if n.isdigit()), key=int, reverse=True):
    try:
      meta = io_utils.read_json(os.path.join(folder, name, META_FILE))
    except (ValueError, UnicodeDecodeError, OSError):
      continue
    if isinstance(meta, dict):
      out.append((int(name), meta))
  return out


def first_line(e: BaseException) -> str:
  text = str(e).strip().splitlines()
  return f"{type(e).__name__}: {text[0][:200]}" if text else type(e).__name__


def read_state(workdir: str, step: int, abstract_state: Any) -> Any:
  """The state saved at ``step`` in ``workdir``'s checkpoints, read only (nothing there is created or deleted)."""
  folder = io_utils.abspath(os.path.join(workdir, run_files.CHECKPOINT_DIR))
  mngr = ocp.CheckpointManager(
    folder, options=ocp.CheckpointManagerOptions(read_only=True, create=False, save_interval_steps=0)
  )
  try:
    target = jax.tree.map(ocp.utils.to_shape_dtype_struct, abstract_state)
    out = mngr.restore(
      step, args=ocp.args.Composite(state=ocp.args.StandardRestore(target), meta=ocp.args.JsonRestore())
    )
    return verified(out["state"], dict(out["meta"]))[0]
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
    """Saves ``state`` and ``meta`` (a JSON object) as step ``step``; the metadata also records the state's sha256."""
    meta = {**meta, CHECKSUM_KEY: state_checksum(state)}
    self._mngr.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta)))

  def restore(self, abstract_state: Any, step: Optional[int] = None) -> tuple[Any, dict]:
    """Restores into the shapes, dtypes and shardings of ``abstract_state`` (a tree of arrays or ShapeDtypeStructs),
    checked against the recorded sha256 (ChecksumMismatch)."""
    step = self._mngr.latest_step() if step is None else step
    target = jax.tree.map(ocp.utils.to_shape_dtype_struct, abstract_state)
    out = self._mngr.restore(
      step, args=ocp.args.Composite(state=ocp.args.StandardRestore(target), meta=ocp.args.JsonRestore())
    )
    return verified(out["state"], dict(out["meta"]))

  def quarantine(self, step: int) -> str:
    """Moves checkpoint ``step`` to the quarantine folder (a rename, so nothing is lost); returns its new path."""
    dest = f"{self._quarantine.rstrip('/')}/{step}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    io_utils.move_tree(f"{str(self._dir).rstrip('/')}/{step}", dest)  # on gs:// object by object
    self._mngr.reload()
    return dest

  def quarantine_unlisted(self, log: Callable[[str], None] = print) -> None:
    """Moves aside each step folder that orbax does not list as a checkpoint (a save cut short), one log line each;
    on process 0 only."""
    if jax.process_index() != 0:
      return
    listed = set(self._mngr.all_steps())
    for name in io_utils.listdir(self._dir):
      if name.isdigit() and int(name) not in listed:
        log(
          f"Checkpoint folder {name} in {self._dir} was never completed (a save cut short); moved it to "
          f"{self.quarantine(int(name))}."
        )

  def restore_newest_intact(self, abstract_state: Any, log: Callable[[str], None] = print) -> tuple[Any, dict]:
    """The newest checkpoint that restores and matches its checksum; each newer one that fails is quarantined with
    one log line.

    CheckpointError (one sentence) when none restores; then nothing is moved."""
    self.quarantine_unlisted(log)
    steps = sorted(self._mngr.all_steps(), reverse=True)
    failed: list[tuple[int, str]] = []
    for step in steps:
      try:
        out = self.restore(abstract_state, step)
      except Exception as e:  # noqa: BLE001  (orbax / tensorstore / json errors all mean "this one is damaged")
        failed.append((step, first_line(e)))
        continue
      for bad, why in failed if jax.process_index() == 0 else ():  # one process moves the shared folder
        log(
          f"Checkpoint at step {bad} does not restore ({why}); moved it to {self.quarantine(bad)} and resuming "
          f"from step {step}."
        )
      return out
    step, why = failed[0]
    raise CheckpointError(
      f"no checkpoint under {self._dir} restores (step {step}: {why}); move that folder away to start the run over."
    )

  def close(self) -> None:
    self._mngr.wait_until_finished()
    self._mngr.close()
