"""One feeder per data placement: how a chunk of optimizer steps gets its batches and runs.

* :class:`ResidentFeeder` (``jit``, in-memory data on every device): the training set is put on the devices once;
  each step sends only the example indices of its batch, keyed by (seed, epoch) as in the host pipeline.
* :class:`StreamFeeder` (``jit``, host data): batches from ``input_pipeline.train_stream`` are sharded over the
  mesh's batch axis.
* :class:`PmapFeeder` (``pmap``): the same host batches, split per local device; the training state carries a
  leading device axis, the canonical (checkpointed, evaluated) state does not.

Every feeder runs steps ``step .. step+k-1`` in calls of ``config.scan_steps`` steps, dispatched asynchronously; the
host waits once, for the per-step metrics. All three give the same batches for the same step, so a run resumed at
any step, or run with another placement, sees the same data.
"""
from __future__ import annotations

import functools
from typing import Any, Iterator, Optional

import jax
import numpy as np

from lamb_lars import input_pipeline
from lamb_lars.train import mesh as mesh_lib
from lamb_lars.train import run_plan
from lamb_lars.train import train_step as ts


@functools.lru_cache(maxsize=2)
def _cached_permutation(seed: int, epoch: int, n: int) -> np.ndarray:
  return input_pipeline.epoch_permutation(seed, epoch, n)


def batch_indices(seed: int, step: int, plan: run_plan.RunPlan) -> np.ndarray:
  """The example indices of the global batch of ``step`` (the host pipeline's order, ``input_pipeline.common``)."""
  epoch, pos = divmod(step, plan.batches_per_epoch)
  perm = _cached_permutation(seed, epoch, plan.num_train)
  return perm[pos * plan.batch_size:(pos + 1) * plan.batch_size].astype(np.int32)


def _concat(outs: list) -> dict[str, np.ndarray]:
  outs = jax.device_get(outs)
  return {key: np.concatenate([np.asarray(o[key]) for o in outs]) for key in outs[0]}


def _pieces(k: int, scan_steps: int) -> Iterator[tuple[int, int]]:
  n = max(1, int(scan_steps))
  for a in range(0, k, n):
    yield a, min(n, k - a)


class _Feeder:
  """Shared parts: the compiled chunk (built on first use), state placement (identity for ``jit``)."""

  def __init__(self, config: Any, plan: run_plan.RunPlan, mesh: Any, make_fn):
    self.config, self.plan, self.mesh, self._make, self._fn = config, plan, mesh, make_fn, None

  @property
  def fn(self):
    if self._fn is None:
      self._fn = self._make()
    return self._fn

  def to_training(self, state):
    return state

  def to_canonical(self, state):
    return state


class ResidentFeeder(_Feeder):
  def __init__(self, config, plan, mesh, model, tx, opts, preprocess):
    super().__init__(config, plan, mesh, lambda: ts.make_train_chunk(model, tx, opts, preprocess, mesh, resident=True))
    self.data = mesh_lib.put_replicated(mesh, input_pipeline.load_arrays(config, "train"))

  def run_chunk(self, state, step: int, k: int, key):
    pi, pc = jax.process_index(), jax.process_count()
    idx = np.stack([batch_indices(self.config.seed, s, self.plan) for s in range(step, step + k)])
    idx = idx.reshape(k, pc, -1)[:, pi]
    outs = []
    for a, size in _pieces(k, self.config.scan_steps):
      batch = mesh_lib.put_global_batch(self.mesh, idx[a:a + size], batch_axis=1)
      state, metrics = self.fn(state, *self.data, batch, key)
      outs.append(metrics)
    return state, _concat(outs)


class _HostFeeder(_Feeder):
  """Host batches from one ``train_stream``, re-created only when the next step is not the one it would yield."""

  _stream: Optional[Iterator[dict]] = None
  _next_step = -1

  def host_batches(self, step: int, k: int) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    if self._stream is None or self._next_step != step:
      self._stream = input_pipeline.train_stream(self.config, start_step=step, global_batch_size=self.plan.batch_size,
                                                 process_index=jax.process_index(),
                                                 process_count=jax.process_count())
    self._next_step = step + k
    for _, size in _pieces(k, self.config.scan_steps):
      batches = [next(self._stream) for _ in range(size)]
      yield size, np.stack([b["image"] for b in batches]), np.stack([b["label"] for b in batches])


class StreamFeeder(_HostFeeder):
  def __init__(self, config, plan, mesh, model, tx, opts, preprocess):
    super().__init__(config, plan, mesh, lambda: ts.make_train_chunk(model, tx, opts, preprocess, mesh, resident=False))

  def run_chunk(self, state, step: int, k: int, key):
    put = functools.partial(mesh_lib.put_global_batch, self.mesh, batch_axis=1)
    outs = []
    for _, images, labels in self.host_batches(step, k):
      state, metrics = self.fn(state, put(images), put(labels), key)
      outs.append(metrics)
    return state, _concat(outs)


class PmapFeeder(_HostFeeder):
  def __init__(self, config, plan, mesh, model, tx, opts, preprocess):
    super().__init__(config, plan, mesh, lambda: ts.make_pmap_train_chunk(model, tx, opts, preprocess))
    self.num_local = sum(d.process_index == jax.process_index() for d in mesh.devices.flat)

  def to_training(self, state):
    d = self.num_local
    return jax.tree.map(lambda x: np.broadcast_to(np.asarray(x), (d,) + x.shape), jax.device_get(state))

  def to_canonical(self, state):
    return jax.device_put(jax.tree.map(lambda x: x[0], state), mesh_lib.replicated(self.mesh))

  def run_chunk(self, state, step: int, k: int, key):
    d, outs = self.num_local, []
    keys = np.broadcast_to(np.asarray(key), (d,) + key.shape)
    for size, images, labels in self.host_batches(step, k):
      images = np.moveaxis(images.reshape((size, d, -1) + images.shape[2:]), 1, 0)
      labels = np.moveaxis(labels.reshape(size, d, -1), 1, 0)
      state, metrics = self.fn(state, images, labels, keys)
      outs.append(jax.tree.map(lambda x: x[0], metrics))
    return state, _concat(outs)


def make_feeder(config: Any, plan: run_plan.RunPlan, mesh: Any, info: Any, model, tx, opts: ts.StepOptions):
  """The feeder for ``config.parallelism`` and ``config.data_on_device`` ('auto': resident when it fits)."""
  ds = config.dataset
  preprocess = lambda im, lab, rng: input_pipeline.preprocess(im, lab, dataset=ds, train=True, rng=rng,
                                                                  scaling=config.input_scaling)
  if config.parallelism == "pmap":
    cls = PmapFeeder
  else:
    want = config.data_on_device
    cls = ResidentFeeder if want == "yes" or (want == "auto" and info.in_memory) else StreamFeeder
  return cls(config, plan, mesh, model, tx, opts, preprocess)
