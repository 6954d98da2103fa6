"""One feeder per data placement: how a chunk of optimizer steps gets its batches and is dispatched.

* :class:`ResidentFeeder` (``jit``, in-memory data on every device): the training set is put on the devices once;
  each step sends only the example indices of its batch, keyed by (seed, epoch) as in the host pipeline.
* :class:`HostFeeder` (host data, ``jit`` or ``pmap``): batches from ``input_pipeline.train_stream``, placed by the
  parallel strategy (:mod:`lamb_lars.train.parallel`) and prefetched to the devices :data:`PREFETCH` calls ahead
  (flax's ``prefetch_to_device``), so a transfer overlaps the call before it.

A chunk of steps ``step .. step+k-1`` runs as compiled calls of ``plan.steps_per_call`` steps each. :meth:`dispatch`
only enqueues them and returns the metrics still on the device; :meth:`fetch` waits for them. The loop fetches one
chunk late (:mod:`lamb_lars.train.trainer`), so the host's work for chunk N+1 overlaps the device's work on chunk N.
Each call shape is compiled ahead of time on first use (``.lower().compile()``), timed on its own as
``compile_time``. All feeders give the same batches for the same step, so a run resumed at any step, or run with
another placement, sees the same data.
"""

from __future__ import annotations

import collections
import functools
import time
from typing import Any, Iterator, Optional

import jax
import numpy as np

from lamb_lars import input_pipeline
from lamb_lars.train import mesh as mesh_lib
from lamb_lars.train import batch_schedule, run_plan

PREFETCH = 2  # calls whose inputs are on the devices ahead of the one running


@functools.lru_cache(maxsize=2)
def _cached_permutation(seed: int, epoch: int, n: int) -> np.ndarray:
  return input_pipeline.epoch_permutation(seed, epoch, n)


def batch_indices(seed: int, step: int, plan: run_plan.RunPlan) -> np.ndarray:
  """The example indices of the global batch of ``step`` (the host pipeline's order, ``input_pipeline.common``; with
  ``data_order='examples'`` the next B examples of the stream, B the step's stage batch)."""
  if plan.data_order == "examples":
    return input_pipeline.stream_indices(
      seed,
      plan.data_start + plan.examples(step),
      plan.stage_at(step).batch_size,
      plan.num_train,
      permutation=_cached_permutation,
    ).astype(np.int32)
  epoch, pos = divmod(step, plan.batches_per_epoch)
  perm = _cached_permutation(seed, epoch, plan.num_train)
  return perm[pos * plan.batch_size : (pos + 1) * plan.batch_size].astype(np.int32)


def _pieces(k: int, steps_per_call: int) -> Iterator[tuple[int, int]]:
  for a in range(0, k, steps_per_call):
    yield a, min(steps_per_call, k - a)


def prefetch(items: Iterator[Any], depth: int = PREFETCH) -> Iterator[Any]:
  """Yields ``items`` with up to ``depth`` more already produced (each one's device transfer already started)."""
  queue: collections.deque = collections.deque()
  for item in items:
    queue.append(item)
    if len(queue) > depth:
      yield queue.popleft()
  while queue:
    yield queue.popleft()


def _step_indices(seed: int, step: int, k: int, plan: run_plan.RunPlan) -> np.ndarray:
  """[k, B/P]: this process's example indices of steps ``step .. step+k-1`` (one stage)."""
  pi, pc = jax.process_index(), jax.process_count()
  idx = np.stack([batch_indices(seed, s, plan) for s in range(step, step + k)])
  return idx.reshape(k, pc, -1)[:, pi]


class _Feeder:
  """Shared parts: the compiled calls (one per stage of the batch schedule and call length, compiled ahead of time
  and timed), state placement."""

  def __init__(self, config: Any, plan: run_plan.RunPlan, strategy: Any, make_fn):
    self.config, self.plan, self.strategy, self._make = config, plan, strategy, make_fn
    self._fn: dict = {}
    self._compiled: dict = {}
    self.compile_time = 0.0
    self.in_flight = mesh_lib.InFlight(strategy.mesh.devices.flat)  # bounded dispatch (mesh.max_in_flight)

  def _call(self, step: int, size: int, *args):
    stage = batch_schedule.index(self.plan.stages, step)
    compiled = self._compiled.get((stage, size))
    if compiled is None:
      fn = self._fn[stage] = self._fn.get(stage) or self._make(stage)
      t0 = time.perf_counter()
      compiled = self._compiled[stage, size] = fn.lower(*args).compile()
      self.compile_time += time.perf_counter() - t0
    self.in_flight.wait_for_room()
    state, metrics = compiled(*args)
    self.in_flight.add(metrics)
    return state, metrics

  def replan(self, plan: run_plan.RunPlan, make_fn) -> None:
    """Runs ``plan`` from now on with the compiled calls of ``make_fn`` (an adaptive batch's new stage and
    optimizer, :mod:`lamb_lars.train.adaptive_batch`); the calls compiled so far are dropped."""
    self.plan, self._make = plan, make_fn
    self._fn.clear()
    self._compiled.clear()

  def to_training(self, state):
    return self.strategy.to_training(state)

  def to_canonical(self, state):
    return self.strategy.to_canonical(state)

  def fetch(self, pending: list) -> dict[str, np.ndarray]:
    """Waits for a dispatched chunk's per-step metrics; numpy arrays with a leading step axis."""
    outs = jax.device_get([self.strategy.first_replica(m) for m in pending])
    return {key: np.concatenate([np.asarray(o[key]) for o in outs]) for key in outs[0]}


class ResidentFeeder(_Feeder):
  RESIDENT = True

  def __init__(self, config, plan, strategy, make_chunk):
    super().__init__(config, plan, strategy, lambda stage: make_chunk(stage, resident=True))
    self.data = mesh_lib.put_replicated(strategy.mesh, input_pipeline.load_arrays(config, "train"))

  def dispatch(self, state, step: int, k: int, key) -> tuple[Any, list]:
    """Enqueues steps ``step .. step+k-1`` (one stage); (the new state, the chunk's metrics still on the device)."""
    idx = _step_indices(self.config.seed, step, k, self.plan)
    pending = []
    for a, size in _pieces(k, self.plan.steps_per_call):
      batch = mesh_lib.put_global_batch(self.strategy.mesh, idx[a : a + size], batch_axis=1)
      state, metrics = self._call(step, size, state, *self.data, batch, key)
      pending.append(metrics)
    return state, pending


class HostFeeder(_Feeder):
  """Host batches from one ``train_stream``, re-created only when the next step is not the one it would yield."""

  RESIDENT = False
  _stream: Optional[Iterator[dict]] = None
  _next_step = -1

  def __init__(self, config, plan, strategy, make_chunk):
    super().__init__(config, plan, strategy, lambda stage: make_chunk(stage, resident=False))

  def _gathered(self, step: int, k: int, key) -> Iterator[tuple[int, tuple]]:
    """``data_order='examples'``: each call's batches gathered from the training set (in memory, or read by record
    key from a streamed ``tfds:NAME``)."""
    gather = input_pipeline.train_gatherer(self.config)
    idx = _step_indices(self.config.seed, step, k, self.plan)
    for a, size in _pieces(k, self.plan.steps_per_call):
      yield size, self.strategy.put_batch(*gather(idx[a : a + size]), key)

  def _placed(self, step: int, k: int, key) -> Iterator[tuple[int, tuple]]:
    if self.plan.data_order == "examples":
      yield from self._gathered(step, k, key)
      return
    if self._stream is None or self._next_step != step:
      self._stream = input_pipeline.train_stream(
        self.config,
        start_step=step,
        global_batch_size=self.plan.batch_size,
        process_index=jax.process_index(),
        process_count=jax.process_count(),
      )
    self._next_step = step + k
    for _, size in _pieces(k, self.plan.steps_per_call):
      batches = [next(self._stream) for _ in range(size)]
      images, labels = np.stack([b["image"] for b in batches]), np.stack([b["label"] for b in batches])
      yield size, self.strategy.put_batch(images, labels, key)

  def dispatch(self, state, step: int, k: int, key) -> tuple[Any, list]:
    """Enqueues steps ``step .. step+k-1``; (the new state, the chunk's metrics still on the device)."""
    pending = []
    for size, args in prefetch(self._placed(step, k, key)):
      state, metrics = self._call(step, size, state, *args)
      pending.append(metrics)
    return state, pending


def chunk_maker(config: Any, strategy: Any, stage_parts, tx):
  """``make_chunk(stage, resident)``: the compiled K-step call of stage ``stage`` with the optimizer ``tx``."""
  ds = config.dataset
  preprocess = lambda im, lab, rng: input_pipeline.preprocess(
    im, lab, dataset=ds, train=True, rng=rng, scaling=config.input_scaling
  )
  return lambda stage, resident: strategy.train_chunk(
    stage_parts(stage)[0], tx, stage_parts(stage)[1], preprocess, resident=resident
  )


def replan(feeder: Any, plan: run_plan.RunPlan, stage_parts, tx) -> None:
  """``feeder`` on ``plan`` with the optimizer ``tx`` (:meth:`_Feeder.replan`)."""
  make_chunk = chunk_maker(feeder.config, feeder.strategy, stage_parts, tx)
  feeder.replan(plan, lambda stage: make_chunk(stage, resident=feeder.RESIDENT))


def make_feeder(config: Any, plan: run_plan.RunPlan, strategy: Any, info: Any, stage_parts, tx):
  """The feeder for ``config.data_on_device`` ('auto': resident when it fits; ``pmap`` is always host-fed).
  ``stage_parts(i)``: (model, step options) of stage i of the batch schedule."""
  make_chunk = chunk_maker(config, strategy, stage_parts, tx)
  want = config.data_on_device
  resident = config.parallelism == "jit" and (want == "yes" or (want == "auto" and info.in_memory))
  return (ResidentFeeder if resident else HostFeeder)(config, plan, strategy, make_chunk)
