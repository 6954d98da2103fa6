"""Gradient accumulation driven from the host: one compiled call per micro-batch (``config.microbatch_loop='host'``).

:func:`lamb_lars.train.train_step.make_train_chunk` compiles a step's k micro-batches into one program, as a
``lax.scan``. On XLA:CPU neither form suits a large-batch CNN: the rolled loop runs the authors' MNIST CNN ~20×
slower than straight-line code, and the unrolled one keeps the buffers of many micro-batches alive at once
(≈ 0.43 GB per micro-batch of 2,000, so a full-batch step of 30 micro-batches peaks at ≈ 14.6 GB; docs/BENCHMARKS.md
§22). Here one step is 2 + k compiled calls, dispatched asynchronously from Python:

  begin   this device's inputs (preprocessing, micro-batch split, dropout keys; ``train_step.prepare``) and zero sums
  micro   × k: micro-batch j's gradient, loss, correct predictions, |g_j|² and BN statistics added to the sums
  end     g_d = sums / k, then the update as in the scanned step (``train_step.finish``)

so only one micro-batch's buffers are alive at a time, and each compiled program is the straight-line code XLA:CPU
runs fast. It computes the scanned step's function: the same keys and the same sums in the same order (float
rounding may differ where XLA fuses differently; tests/test_host_accumulation.py). A step's per-device values travel
between the calls as global arrays with a leading device axis. ``jit`` over the mesh only (``parallelism='jit'``).
"""

from __future__ import annotations


import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from lamb_lars.train import mesh as mesh_lib, train_step as ts

_lead = lambda tree: jax.tree.map(lambda x: x[None], tree)  # per-device value → [1, ...] (spec P(axes): [D, ...])
_drop = lambda tree: jax.tree.map(lambda x: x[0], tree)


def _zero_sums(state: ts.TrainState, vary, pre) -> tuple:
  """(Σ g, Σ loss, Σ correct, Σ |g|² [and Σ |P·g|²], Σ BN statistics), all zero."""
  zeros = lambda t: vary(jax.tree.map(jnp.zeros_like, t))
  scalar = lambda dtype: vary(jnp.zeros((), dtype))
  sq = vary(ts.sq_zeros(pre))
  return zeros(state.params), scalar(jnp.float32), scalar(jnp.int32), sq, zeros(state.batch_stats)


def make_host_chunk(model, tx, opts: ts.StepOptions, preprocess: ts.Preprocess, mesh, *, resident: bool):
  """A K-step train call with the signature and results of :func:`~lamb_lars.train.train_step.make_train_chunk`
  (resident: ``f(state, images_all, labels_all, idx[K, B], key)``; host-fed: ``f(state, images[K, B, ...],
  labels[K, B], key)``), driving each step's micro-batches from the host. Like a jitted function it has
  ``lower(*args).compile()``, which compiles its three programs ahead of the first call."""
  axes = mesh_lib.DATA_AXES
  vary = lambda t: jax.lax.pcast(t, axes, to="varying")
  grad_fn = ts.make_grad_fn(model, opts)
  k, dev, split = opts.num_microbatches, P(axes), P(None, axes)

  def begin(state, images, labels, key, i):
    x = jax.lax.dynamic_index_in_dim(images, i, keepdims=False)
    y = jax.lax.dynamic_index_in_dim(labels, i, keepdims=False)
    rng, _ = ts.device_rngs(key, state.step, axes)
    pre = ts.step_preconditioner(opts, state)  # (P, valid) travels with the inputs, as each device's copy
    inputs = (*ts.prepare(state, x, y, rng, opts, preprocess, vary), vary(pre) if pre is not None else None)
    return _lead((inputs, _zero_sums(state, vary, pre)))

  def begin_resident(state, images_all, labels_all, idx, key, i):
    rows = jax.lax.dynamic_index_in_dim(idx, i, keepdims=False)
    return begin(state, images_all[rows][None], labels_all[rows][None], key, 0)

  def micro(batch_stats, inputs, sums, j):
    (params_v, xs, ys, r_drop, pre), (g_sum, l_sum, c_sum, sq_sum, bs_sum) = _drop(inputs), _drop(sums)
    at = lambda a: jax.lax.dynamic_index_in_dim(a, j, keepdims=False)
    g, l, bs, c, sq = ts.micro_sums(grad_fn, params_v, batch_stats, at(xs), at(ys), at(r_drop), pre)
    return _lead(
      (jax.tree.map(jnp.add, g_sum, g), l_sum + l, c_sum + c, sq_sum + sq, jax.tree.map(jnp.add, bs_sum, bs))
    )

  def end(state, inputs, sums, key):
    ys = _drop(inputs)[2]
    g_sum, l_sum, c_sum, sq_sum, bs_sum = _drop(sums)
    mean = lambda t: jax.tree.map(lambda s: s / k, t)
    _, step_rng = ts.device_rngs(key, state.step, axes)
    # The BN statistics are equal on every device (the model averages them over its axes; so the scanned step's are
    # replicated), but carried per device here: device 0's copy, exactly.
    first = lambda x: jax.lax.psum(jnp.where(jax.lax.axis_index(axes) == 0, x, jnp.zeros_like(x)), axes)
    new_bs = jax.tree.map(first, mean(bs_sum))
    sums_ = (l_sum / k, new_bs, c_sum, mean(g_sum), sq_sum / k)
    return ts.finish(tx, opts, axes, state, sums_, step_rng, ys.size, ts.step_preconditioner(opts, state))

  smap = lambda f, in_specs, out_specs, **kw: jax.jit(
    jax.shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs), **kw
  )
  if resident:
    first = smap(begin_resident, (P(), P(), P(), split, P(), P()), dev)
  else:
    first = smap(begin, (P(), split, split, P(), P()), dev)
  return HostChunk(
    first,
    smap(micro, (P(), dev, dev, P()), dev, donate_argnums=2),
    smap(end, (P(), dev, dev, P()), (P(), P()), donate_argnums=0),
    k,
  )


class HostChunk:
  """The K-step call: per step, ``begin``, k × ``micro``, ``end`` (compiled functions or jitted ones)."""

  def __init__(self, begin, micro, end, num_microbatches: int):
    self.begin, self.micro, self.end, self.k = begin, micro, end, num_microbatches

  def __call__(self, state, *data):
    *data, key = data
    steps = data[-1].shape[0]  # labels[K, B] or idx[K, B]
    metrics = []
    for i in range(steps):
      inputs, sums = self.begin(state, *data, key, np.int32(i))
      for j in range(self.k):
        sums = self.micro(state.batch_stats, inputs, sums, np.int32(j))
      state, m = self.end(state, inputs, sums, key)
      metrics.append(m)
    return state, jax.tree.map(lambda *ms: jnp.stack(ms), *metrics)

  def lower(self, state, *data):
    return _Lowered(self, state, data)


class _Lowered:
  """``HostChunk.lower(...).compile()``: compiles the three programs for these argument shapes."""

  def __init__(self, chunk: HostChunk, state, data):
    self.chunk, self.state, self.data = chunk, state, data

  def compile(self) -> HostChunk:
    c, state, (*data, key) = self.chunk, self.state, self.data
    i = np.int32(0)
    begin = c.begin.lower(state, *data, key, i).compile()
    inputs, sums = begin.out_info
    micro = c.micro.lower(state.batch_stats, inputs, sums, i).compile()
    end = c.end.lower(state, inputs, sums, key).compile()
    return HostChunk(begin, micro, end, c.k)
