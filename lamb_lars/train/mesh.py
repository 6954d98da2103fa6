"""The data-parallel device mesh, multi-host start-up, and putting host data onto it.

The mesh has two axes, ``('group', 'replica')``: ``replica`` runs over the devices of one BN group, ``group`` over
the groups. Gradients are averaged over both; BN statistics only over ``replica`` (see ``bn_groups``). This 2-D mesh
replaces ``axis_index_groups``, which ``shard_map`` does not support. Devices are ordered as ``jax.devices()``
(process-major), so a BN group never straddles hosts unless it must. Programs over the mesh are dispatched with a
bound on how many are in flight (:class:`InFlight`).
"""

from __future__ import annotations

import collections
import os
from typing import Any, Optional, Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

DATA_AXES = ("group", "replica")
BN_AXIS = "replica"
ACCELERATOR_CALLS_IN_FLIGHT = 8  # compiled calls dispatched and not yet finished, on GPU/TPU (see max_in_flight)


def max_in_flight(devices) -> int:
  """How many compiled calls over ``devices`` the host may have dispatched and not yet seen finish.

  XLA:CPU runs a multi-device program's collectives on thread pools sized for one collective at a time (one thread
  per device, ``xla/pjrt/cpu/cpu_client.cc``). With several such programs in flight (a chunk of 50 one-step calls,
  dispatched one chunk ahead), an all-reduce can wait for a participant that never gets a thread; XLA then aborts
  the process after 40 s ("Termination timeout … exceeded", SIGABRT; issue 44). So on CPU with more than one local
  device each call waits for the one before it (the host still builds the next batches and writes the last
  metrics meanwhile). Elsewhere the host stays a few calls ahead, enough to keep an accelerator fed, never an
  unbounded queue.
  """
  local = [d for d in devices if d.process_index == jax.process_index()]
  if len(local) > 1 and all(d.platform == "cpu" for d in local):
    return 1
  return ACCELERATOR_CALLS_IN_FLIGHT


class InFlight:
  """The outputs of the calls dispatched and maybe not yet finished, at most ``max_in_flight(devices)``."""

  def __init__(self, devices):
    self.limit, self._outputs = max_in_flight(devices), collections.deque()

  def wait_for_room(self) -> None:
    """Blocks until one more call may be dispatched."""
    while len(self._outputs) >= self.limit:
      jax.block_until_ready(self._outputs.popleft())

  def add(self, output: Any) -> None:
    """A dispatched call's output (any tree of arrays that is ready only when the call has finished)."""
    self._outputs.append(output)


def initialize_distributed(config: Any) -> None:
  """Starts ``jax.distributed`` when the config or the environment asks for it (a no-op otherwise).

  ``config.distributed.enabled``: 'auto' (TPU VM pods / SLURM / env vars set by the launcher), 'yes' or 'no'.
  On a TPU VM pod, running the same command on every worker with 'auto' is enough.
  """
  d = config.distributed
  mode = str(d.enabled)
  if mode == "no" or jax.distributed.is_initialized():
    return
  kwargs = {}
  if d.coordinator_address:
    kwargs = dict(coordinator_address=d.coordinator_address, num_processes=d.num_processes, process_id=d.process_id)
  elif mode == "auto" and not any(
    k in os.environ for k in ("TPU_WORKER_HOSTNAMES", "SLURM_JOB_ID", "JAX_COORDINATOR_ADDRESS")
  ):
    return
  if d.local_device_ids:
    kwargs["local_device_ids"] = [int(i) for i in str(d.local_device_ids).split(",")]
  if os.environ.get("JAX_PLATFORMS", "").startswith("cpu") or d.coordinator_address.startswith("localhost"):
    jax.config.update("jax_cpu_collectives_implementation", "gloo")  # CPU processes talk through gloo
  jax.distributed.initialize(**kwargs)


def make_mesh(group_devices: int, devices: Optional[Sequence[jax.Device]] = None) -> Mesh:
  """A ('group', 'replica') mesh over ``devices`` (default: all devices of all processes)."""
  devices = list(jax.devices() if devices is None else devices)
  if len(devices) % group_devices:
    raise ValueError(f"A BN group of {group_devices} devices does not divide the {len(devices)} devices.")
  grid = np.array(devices, dtype=object).reshape(len(devices) // group_devices, group_devices)
  return Mesh(grid, DATA_AXES, axis_types=(jax.sharding.AxisType.Auto,) * 2)


def batch_sharding(mesh: Mesh, batch_axis: int = 0) -> NamedSharding:
  """Sharding that splits dimension ``batch_axis`` over every device of the mesh."""
  return NamedSharding(mesh, P(*([None] * batch_axis), DATA_AXES))


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P())


def put_global_batch(mesh: Mesh, local: Any, batch_axis: int = 0) -> Any:
  """Assembles each process's slice of a global batch into global arrays split over the mesh."""
  sharding = batch_sharding(mesh, batch_axis)
  return jax.tree.map(lambda x: jax.make_array_from_process_local_data(sharding, np.asarray(x)), local)


def put_replicated(mesh: Mesh, tree: Any) -> Any:
  """Every device gets a full copy (the same host value on every process)."""
  sharding = replicated(mesh)
  return jax.tree.map(lambda x: jax.make_array_from_process_local_data(sharding, np.asarray(x)), tree)
