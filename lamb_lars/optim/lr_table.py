"""The learning-rate schedule as data: a table of per-update LRs carried in the optimizer state.

A schedule built by :func:`lamb_lars.optim.schedules.create_schedule` is a function whose peak LR, warmup length and
decay constants become constants of every compiled program that evaluates it. Two trials of a study cell that differ
only in LR or warmup therefore compile their train step separately, although the programs are otherwise equal. On a
CPU study of short MNIST trials that compile is a sizeable part of each trial (4 s of a LeNet trial's ≈ 9 s of
compiling, docs/performance.md).

:func:`with_lr_table` tabulates the schedule over the run's updates (``lr_table[t]`` = schedule(t), t = 0 … T; later
counts use the last entry) and keeps the table in the optimizer state, where the update reads it. The compiled step
then depends on the table's *length* (the run's total steps) only, so the persistent compilation cache shares it
among all trials of a cell. The trainer passes the table to its jitted init as an argument
(:func:`set_lr_table`), so the init program is shared too. ``config.optimizer.lr_table`` switches it on; the
MNIST studies do. The cost: T + 1 floats in the state and the checkpoints (52 KB for 30 epochs of MNIST at batch
256 in float64).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax


class LRTableState(NamedTuple):
  lr_table: jax.Array  # learning rate at update count 0 … T; counts past T use lr_table[T]
  inner_state: optax.OptState


def tabulate(schedule: optax.Schedule, total_steps: int) -> np.ndarray:
  """schedule(t) for t = 0 … total_steps, as a host array in the default float dtype.

  One jitted evaluation: evaluated op by op, a schedule compiles a dozen small programs for every new shape of
  its argument (≈ 0.3 s each time on a CPU, docs/performance.md)."""
  return np.asarray(jax.device_get(jax.jit(schedule)(np.arange(int(total_steps) + 1))))


def lookup(table: np.ndarray, steps: Any) -> np.ndarray:
  """table[min(t, len − 1)] for each update count t, on the host: the same values :func:`table_schedule` reads."""
  return table[np.clip(np.asarray(steps), 0, table.shape[0] - 1)]


def table_schedule(table: jax.Array) -> optax.Schedule:
  """count -> table[min(count, len − 1)]: the schedule read back from its table (traced or concrete)."""
  last = table.shape[0] - 1
  return lambda count: table[jnp.clip(jnp.asarray(count, jnp.int32), 0, last)]


def with_lr_table(
  make_tx: Callable[[optax.Schedule], optax.GradientTransformation], table: Any
) -> optax.GradientTransformation:
  """``make_tx(schedule)`` whose schedule is read from ``table``, a leaf of the state, not a compiled constant."""
  table = jnp.asarray(table)
  if table.ndim != 1 or table.shape[0] < 1:
    raise ValueError(f"an LR table is a non-empty vector of per-update learning rates; got shape {table.shape}.")

  def init_fn(params):
    return LRTableState(table, make_tx(table_schedule(table)).init(params))

  def update_fn(updates, state, params=None):
    updates, inner = make_tx(table_schedule(state.lr_table)).update(updates, state.inner_state, params)
    return updates, LRTableState(state.lr_table, inner)

  return optax.GradientTransformation(init_fn, update_fn)


def _is_table_state(x: Any) -> bool:
  return isinstance(x, LRTableState)


def set_lr_table(opt_state: Any, table: jax.Array) -> Any:
  """``opt_state`` with the table of every :class:`LRTableState` in it replaced by ``table`` (same length)."""

  def put(s):
    if not _is_table_state(s):
      return s
    if s.lr_table.shape != table.shape:
      raise ValueError(f"an LR table of shape {table.shape} cannot replace one of shape {s.lr_table.shape}.")
    return s._replace(lr_table=jnp.asarray(table, s.lr_table.dtype))

  return jax.tree.map(put, opt_state, is_leaf=_is_table_state)
