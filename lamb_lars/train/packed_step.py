"""K trials as K slots of one compiled program: the per-trial chunk of :mod:`lamb_lars.train.train_step`, ``vmap``ped
over a leading slot axis (the idiom of PureJaxRL, Lu et al. 2022, github.com/luchris429/purejaxrl:
``jax.jit(jax.vmap(train))``).

What a pack's trials share is compiled once: the model, the batch size, the data pipeline, the step options, the
mesh. What differs is data with a leading slot axis:

* the train state (parameters, BN statistics, optimizer state, step counter) of each slot, stacked;
* the batch indices of each slot (its own seed, so its own data order) and its step key (dropout, noise);
* the optimizer: with ``optimizer.lr_table`` the whole LR schedule (peak LR, warmup, decay, LR scaling) is a leaf of
  the optimizer state (:mod:`lamb_lars.optim.lr_table`), so slots that differ only there share one transformation.
  Slots that differ in other optimizer constants (weight decay, momentum, β₁, β₂, ε, trust coefficient, ...)
  bring their own transformations, ``D`` of them, and a slot's update is ``lax.switch(tx_index, updates)`` — under
  ``vmap`` a select over the D updates (the forward and backward passes are computed once per slot; the optimizer
  update D times). Their optimizer states must have one structure (:func:`check_same_structure`).
* ``active``: a slot that has stopped (target, divergence, pruned, or waiting for the others at a resume) keeps its
  state: ``new = where(active, new, old)``.

A slot computes exactly what the unpacked chunk computes for its trial (the same step function, one slot of the
vmap), so its metrics equal the unpacked trial's within float tolerance (tests/test_packed.py).
"""

from __future__ import annotations

from typing import Any, Sequence

import jax
import jax.numpy as jnp
import optax
from jax.sharding import PartitionSpec as P

from lamb_lars.errors import ConfigError
from lamb_lars.train import mesh as mesh_lib
from lamb_lars.train import train_step as ts


def switched(txs: Sequence[optax.GradientTransformation], index: jax.Array) -> optax.GradientTransformation:
  """The transformation ``txs[index]`` for a traced ``index`` (one of D transformations with one state structure).

  ``init`` is the first one's (every slot's state is initialised outside the program, by its own transformation)."""
  if len(txs) == 1:
    return txs[0]

  def update(updates, state, params=None):
    branches = [lambda u, s, p, t=t: t.update(u, s, p) for t in txs]
    return jax.lax.switch(index, branches, updates, state, params)

  return optax.GradientTransformation(txs[0].init, update)


def check_same_structure(states: Sequence[Any], what: str = "optimizer states") -> None:
  """ConfigError unless every state has the tree structure, shapes and dtypes of the first."""
  sig = lambda s: (jax.tree.structure(s), [(jnp.shape(x), jnp.result_type(x)) for x in jax.tree.leaves(s)])
  first = sig(states[0])
  for i, s in enumerate(states[1:], 1):
    if sig(s) != first:
      raise ConfigError(
        f"packed trials need {what} of one structure, but slot {i}'s differs from slot 0's; run these trials "
        f"unpacked (--pack=1) or pack only trials with the same optimizer."
      )


def stack(trees: Sequence[Any]) -> Any:
  """The slots' trees stacked along a new leading axis."""
  return jax.tree.map(lambda *xs: jnp.stack(xs), *trees)


def slot(tree: Any, index: int) -> Any:
  """Slot ``index`` of a stacked tree."""
  return jax.tree.map(lambda x: x[index], tree)


def make_packed_chunk(model, txs: Sequence[optax.GradientTransformation], opts: ts.StepOptions, preprocess, mesh):
  """Compiled K-step function of S slots over ``mesh`` (jit + shard_map, the resident-data variant of
  :func:`lamb_lars.train.train_step.make_train_chunk`, vmapped over slots).

  ``f(states[S], images_all, labels_all, idx[S, K, B], keys[S], tx_index[S], active[S])`` → (new states, metrics
  ``[S, K]``). The state buffers are donated.
  """
  axes = mesh_lib.DATA_AXES
  vary = lambda t: jax.lax.pcast(t, axes, to="varying")

  def one_slot(state, images_all, labels_all, idx, key, tx_index, active):
    local_step = ts.make_local_step(model, switched(txs, tx_index), opts, preprocess, axes, vary)
    new, metrics = ts.scan_steps(local_step, state, lambda i: (images_all[i], labels_all[i]), idx, key, axes)
    return jax.tree.map(lambda n, o: jnp.where(active, n, o), new, state), metrics

  def chunk(states, images_all, labels_all, idx, keys, tx_index, active):
    return jax.vmap(one_slot, in_axes=(0, None, None, 0, 0, 0, 0))(
      states, images_all, labels_all, idx, keys, tx_index, active
    )

  in_specs = (P(), P(), P(), P(None, None, axes), P(), P(), P())
  fn = jax.shard_map(chunk, mesh=mesh, in_specs=in_specs, out_specs=(P(), P()))
  return jax.jit(fn, donate_argnums=0)
