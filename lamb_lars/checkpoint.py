"""Orbax checkpoints of the train state plus JSON metadata, with automatic resume from the newest one.

A kill -9 during an asynchronous save leaves ``N.orbax-checkpoint-tmp``; orbax ignores it and the previous step
restores, so a killed run resumes from its last complete checkpoint.
"""
from __future__ import annotations

import os
from typing import Any, Optional

import jax
import orbax.checkpoint as ocp


class Checkpointer:
  """Keeps the newest ``keep`` checkpoints of ``{state, meta}`` under ``<workdir>/checkpoints``."""

  def __init__(self, workdir: str, keep: int = 2):
    options = ocp.CheckpointManagerOptions(max_to_keep=keep, create=True, enable_async_checkpointing=True)
    self._mngr = ocp.CheckpointManager(os.path.abspath(os.path.join(workdir, "checkpoints")), options=options)

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

  def wait(self) -> None:
    self._mngr.wait_until_finished()

  def close(self) -> None:
    self._mngr.wait_until_finished()
    self._mngr.close()
