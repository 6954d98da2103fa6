"""The data-parallel strategy: everything that differs between ``jit`` over a mesh and ``pmap``, in one place.

``config.parallelism = 'jit'`` (the default) runs one program over a ``('group', 'replica')`` mesh
(``jax.shard_map``, :mod:`lamb_lars.train.mesh`); the state is one replicated global array per leaf. ``'pmap'`` is
the idiom of flax's older examples: the state carries a leading axis of local devices and every input is split along
it. The loop, the feeders and the train step only call a :class:`Strategy`: the BN axes of the model, the compiled
chunk, the state's training and canonical (checkpointed, evaluated) forms, and the placement of a host batch. Both
give the same numbers (tests/test_parallel.py, tests/test_train.py).
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from lamb_lars.models import bn_groups
from lamb_lars.train import mesh as mesh_lib
from lamb_lars.train import host_accumulation, train_step as ts

PMAP_AXIS = "batch"


class Jit:
  """``jit`` + ``shard_map`` over the mesh; batches are global arrays split over its devices."""

  def __init__(self, mesh: Any):
    self.mesh = mesh

  def bn_axes(self, num_devices: int, group_devices: int) -> dict:
    """The model's BN axis arguments: statistics over a group's ``replica`` axis, or per device."""
    g = group_devices
    return dict(
      group_axis_name=mesh_lib.BN_AXIS if g > 1 else None, stats_axis_name="group" if g > 1 else mesh_lib.DATA_AXES
    )

  def train_chunk(self, model, tx, opts: ts.StepOptions, preprocess: ts.Preprocess, *, resident: bool):
    make = host_accumulation.make_host_chunk if opts.microbatch_loop == "host" else ts.make_train_chunk
    return make(model, tx, opts, preprocess, self.mesh, resident=resident)

  def to_training(self, state: Any) -> Any:
    return state

  def to_canonical(self, state: Any) -> Any:
    return state

  def put_batch(self, images: np.ndarray, labels: np.ndarray, key: Any) -> tuple:
    """This process's ``[K, b, ...]`` images and labels as global arrays split over the mesh (transfers start
    now, asynchronously), and the key."""
    return (*mesh_lib.put_global_batch(self.mesh, (images, labels), batch_axis=1), key)

  def first_replica(self, metrics: Any) -> Any:
    return metrics


class Pmap:
  """``pmap`` over the local devices: the training state and every input carry a leading device axis."""

  def __init__(self, mesh: Any):
    self.mesh = mesh
    local = [d for d in mesh.devices.flat if d.process_index == jax.process_index()]
    self.num_local = len(local)
    self._split = NamedSharding(Mesh(np.array(local), ("local",)), P("local"))  # leading axis over local devices

  def bn_axes(self, num_devices: int, group_devices: int) -> dict:
    g = group_devices
    return dict(
      group_axis_name=PMAP_AXIS if g > 1 else None,
      group_axis_index_groups=bn_groups.axis_index_groups(num_devices, g),
      stats_axis_name=PMAP_AXIS,
    )

  def train_chunk(self, model, tx, opts: ts.StepOptions, preprocess: ts.Preprocess, *, resident: bool):
    if resident:
      raise ValueError("pmap feeds batches from the host; a resident training set needs parallelism='jit'.")
    return make_pmap_train_chunk(model, tx, opts, preprocess)

  def to_training(self, state: Any) -> Any:
    d = self.num_local
    return jax.tree.map(lambda x: np.broadcast_to(np.asarray(x), (d,) + x.shape), jax.device_get(state))

  def to_canonical(self, state: Any) -> Any:
    return jax.device_put(jax.tree.map(lambda x: x[0], state), mesh_lib.replicated(self.mesh))

  def put_batch(self, images: np.ndarray, labels: np.ndarray, key: Any) -> tuple:
    """``[K, b, ...]`` → ``[D, K, b/D, ...]`` on the local devices (transfers start now), the key per device."""
    d, k = self.num_local, images.shape[0]
    images = np.moveaxis(images.reshape((k, d, -1) + images.shape[2:]), 1, 0)
    labels = np.moveaxis(labels.reshape(k, d, -1), 1, 0)
    keys = np.broadcast_to(np.asarray(key), (d,) + key.shape)
    return tuple(jax.device_put(x, self._split) for x in (images, labels, keys))

  def first_replica(self, metrics: Any) -> Any:
    return jax.tree.map(lambda x: x[0], metrics)


def make_pmap_train_chunk(model, tx, opts: ts.StepOptions, preprocess: ts.Preprocess, *, axis_name: str = PMAP_AXIS):
  """The ``pmap`` idiom of :func:`~lamb_lars.train.train_step.make_train_chunk` (host-fed): inputs carry a leading
  device axis; state is replicated along it. ``f(state, images[D, K, b, ...], labels[D, K, b], key[D])``."""
  local_step = ts.make_local_step(model, tx, opts, preprocess, axis_name, vary=lambda t: t)

  def chunk(state, images, labels, key):
    return ts.scan_steps(local_step, state, lambda xy: xy, (images, labels), key, axis_name)

  return jax.pmap(chunk, axis_name=axis_name, donate_argnums=0)


def make(config: Any, mesh: Any):
  """The strategy of ``config.parallelism``."""
  return Pmap(mesh) if config.parallelism == "pmap" else Jit(mesh)
