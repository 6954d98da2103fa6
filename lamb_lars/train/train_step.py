"""Pure training and evaluation steps, data-parallel over a ('group', 'replica') mesh (``pmap``:
:mod:`lamb_lars.train.parallel`).

One compiled call runs K = ``config.steps_per_call`` optimizer steps (``lax.scan``), each over a global batch split
over devices and, inside a device, into ``num_microbatches`` micro-batches (gradient accumulation). Per step:

  g_d   = (1/k) Σ_j ∇ L(w; micro-batch j of device d)       per-device gradient (BN statistics per micro-batch)
  g     = (1/D) Σ_d g_d                                      global gradient = gradient of the global mean loss
  w, s  ← tx.update(g, s, w)                                 one optimizer update

``|g_dj|²`` of each micro-batch's gradient averaged over micro-batches and devices (``grad_sq_norm_small``, batch
B/(D·k)) and ``|g|²`` (batch B) are returned so the gradient noise scale (McCandlish et al. 2018) can be estimated
from two batch sizes for free: on several devices, or on one device with ``num_microbatches ≥ 2``. With
``StepOptions.preconditioner`` set (an adaptive optimizer and the noise scale on), the same two norms of P·g_dj and
P·g (``grad_sq_norm_small_precond``, ``grad_sq_norm_precond``; NaN before the optimizer's first update) give the
preconditioned noise scale, P from the optimizer state before the update (:mod:`lamb_lars.optim.preconditioner`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional, cast

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from jax.sharding import Mesh, PartitionSpec as P

from lamb_lars.optim import preconditioner as precond_lib
from lamb_lars.train import mesh as mesh_lib, noise_scale

Preprocess = Callable[[jax.Array, jax.Array, jax.Array], jax.Array]  # (images_u8, labels, rng) -> float images


@flax.struct.dataclass
class TrainState:
  step: jax.Array
  params: Any
  batch_stats: Any
  opt_state: Any


@dataclasses.dataclass(frozen=True)
class StepOptions:
  """Static settings of the compiled step.

  Diagnostics (You et al. 2020 §6): ``signal_to_noise`` adds E_d‖g∥‖/E_d‖g⊥‖ of the per-device gradients relative
  to their mean (§6.1); the ``*_noise`` fields inject Gaussian noise of that standard deviation into the input
  activations, the weights seen by the forward pass, or the averaged gradient, and ``label_noise`` replaces that
  fraction of labels by uniform random classes (§6.3, which found none of them helps). All are off (0) by default
  and then cost nothing.
  """

  num_classes: int
  num_microbatches: int = 1
  microbatch_loop: str = "scan"  # scan | unrolled | host (:mod:`lamb_lars.train.host_accumulation`)
  label_smoothing: float = 0.0
  signal_to_noise: bool = False
  activation_noise: float = 0.0
  weight_noise: float = 0.0
  gradient_noise: float = 0.0
  label_noise: float = 0.0
  preconditioner: Optional[precond_lib.Preconditioner] = None  # P of the preconditioned noise scale; None: off


_DROPOUT_STREAM = 0x44524F50  # fold_in constant of the dropout keys ("DROP")


def _add_noise(tree: Any, rng: jax.Array, std: float) -> Any:
  leaves, treedef = jax.tree.flatten(tree)
  keys = jax.random.split(rng, len(leaves))
  return jax.tree.unflatten(treedef, [x + std * jax.random.normal(k, x.shape, x.dtype) for x, k in zip(leaves, keys)])


def cross_entropy(logits: jax.Array, labels: jax.Array, num_classes: int, label_smoothing: float = 0.0) -> jax.Array:
  """Per-example softmax cross-entropy against one-hot labels smoothed by ε: (1−ε)·onehot + ε/C."""
  targets = jax.nn.one_hot(labels, num_classes)
  if label_smoothing:
    targets = targets * (1.0 - label_smoothing) + label_smoothing / num_classes
  return optax.softmax_cross_entropy(logits.astype(jnp.float32), targets)


def tree_sq_norm(tree: Any) -> jax.Array:
  return cast(jax.Array, sum(jnp.sum(jnp.square(x.astype(jnp.float32))) for x in jax.tree.leaves(tree)))


def init_state(model: nn.Module, tx: optax.GradientTransformation, rng: jax.Array, input_shape: tuple) -> TrainState:
  variables = model.init(rng, jnp.zeros((1,) + tuple(input_shape), jnp.float32), train=False)
  params = variables["params"]
  return TrainState(
    step=jnp.zeros((), jnp.int32),
    params=params,
    batch_stats=variables.get("batch_stats", {}),
    opt_state=tx.init(params),
  )


def make_grad_fn(model: nn.Module, opts: StepOptions):
  """∇ of the mean cross-entropy of one micro-batch, with aux (new BN statistics, correct predictions)."""

  def loss_fn(params, batch_stats, x, y, dropout_rng):
    variables = {"params": params}
    rngs = {"dropout": dropout_rng}  # unused (and compiled away) in models without dropout
    if batch_stats:
      variables["batch_stats"] = batch_stats
      logits, new_vars = model.apply(variables, x, train=True, mutable=["batch_stats"], rngs=rngs)
      new_bs = new_vars["batch_stats"]
    else:
      logits, new_bs = model.apply(variables, x, train=True, rngs=rngs), batch_stats
    loss = cross_entropy(logits, y, opts.num_classes, opts.label_smoothing).mean()
    correct = jnp.sum(jnp.argmax(logits, -1) == y)
    return loss, (new_bs, correct)

  return jax.value_and_grad(loss_fn, has_aux=True)


def _perturb(x: jax.Array, labels: jax.Array, r_act, r_lab, r_lab2, opts: StepOptions):
  """Input-activation noise and label noise (You et al. 2020 §6.3); the identity when both are off."""
  if opts.activation_noise:
    x = x + opts.activation_noise * jax.random.normal(r_act, x.shape, x.dtype)
  if opts.label_noise:
    flip = jax.random.bernoulli(r_lab, opts.label_noise, labels.shape)
    labels = jnp.where(flip, jax.random.randint(r_lab2, labels.shape, 0, opts.num_classes), labels)
  return x, labels


def step_preconditioner(opts: StepOptions, state: TrainState) -> Any:
  """(P, whether P is defined) from the state before this step's update, or None when not measured."""
  if opts.preconditioner is None:
    return None
  return precond_lib.diagonal(opts.preconditioner, state.opt_state, state.step)


def grad_sq_norms(grads: Any, pre: Any) -> jax.Array:
  """|g|², or [|g|², |P·g|²] when ``pre`` = (P, valid) is given."""
  sq = tree_sq_norm(grads)
  return sq if pre is None else jnp.stack([sq, tree_sq_norm(precond_lib.apply(pre[0], grads))])


def micro_sums(grad_fn, params_v, batch_stats, x, y, r_drop, pre=None):
  """One micro-batch's (gradient, loss, new BN statistics, correct predictions, |g|² [and |P·g|²])."""
  (loss, (new_bs, correct)), grads = grad_fn(params_v, batch_stats, x, y, r_drop)
  return grads, loss, new_bs, correct, grad_sq_norms(grads, pre)


def sq_zeros(pre: Any) -> jax.Array:
  """The zero of :func:`grad_sq_norms`'s result."""
  return jnp.zeros(() if pre is None else (2,), jnp.float32)


def _accumulate(grad_fn, state: TrainState, params_v, xs, ys, r_drop, opts: StepOptions, vary, pre=None):
  """(loss, new BN statistics, correct, g_d, mean |g_dj|² [and mean |P·g_dj|²]) over this device's k micro-batches
  (g_d = mean g_dj)."""
  k, batch_stats = opts.num_microbatches, state.batch_stats
  if k == 1:
    grads, loss, new_bs, correct, sq = micro_sums(grad_fn, params_v, batch_stats, xs[0], ys[0], r_drop[0], pre)
    return loss, new_bs, correct, grads, sq

  def micro(carry, xy):
    g_acc, l_acc, c_acc, sq_acc = carry
    g, l, bs, c, sq = micro_sums(grad_fn, params_v, batch_stats, *xy, pre)
    return (jax.tree.map(jnp.add, g_acc, g), l_acc + l, c_acc + c, sq_acc + sq), bs

  zeros = vary(jax.tree.map(jnp.zeros_like, state.params))
  scalar = lambda dtype: vary(jnp.zeros((), dtype))
  init = (zeros, scalar(jnp.float32), scalar(jnp.int32), vary(sq_zeros(pre)))
  (g_sum, l_sum, correct, sq_sum), bs_stack = jax.lax.scan(
    micro, init, (xs, ys, r_drop), unroll=opts.microbatch_loop == "unrolled"
  )
  return (
    l_sum / k,
    jax.tree.map(lambda s: s.mean(0), bs_stack),
    correct,
    jax.tree.map(lambda g: g / k, g_sum),
    sq_sum / k,
  )


def prepare(
  state: TrainState,
  images: jax.Array,
  labels: jax.Array,
  rng: jax.Array,
  opts: StepOptions,
  preprocess: Preprocess,
  vary,
):
  """This device's step inputs: (weights the forward pass sees, micro-batches [k, b/k, ...], labels [k, b/k], one
  dropout key per micro-batch). ``rng`` differs per device (augmentation, input/label/weight noise)."""
  k = opts.num_microbatches
  r_pre, r_act, r_lab, r_lab2, r_w = jax.random.split(rng, 5)
  # Dropout: one key per micro-batch, from a stream of its own (fold_in keeps the five keys above unchanged).
  r_drop = jax.random.split(jax.random.fold_in(rng, _DROPOUT_STREAM), k)
  x, labels = _perturb(preprocess(images, labels, r_pre), labels, r_act, r_lab, r_lab2, opts)
  xs = x.reshape((k, x.shape[0] // k) + x.shape[1:])
  ys = labels.reshape((k, -1))
  params_v = vary(state.params)
  if opts.weight_noise:
    params_v = _add_noise(params_v, r_w, opts.weight_noise)
  return params_v, xs, ys, r_drop


def finish(
  tx: optax.GradientTransformation,
  opts: StepOptions,
  axes: Any,
  state: TrainState,
  sums: tuple,
  step_rng: jax.Array,
  batch: int,
  pre: Any = None,
):
  """The optimizer update from this device's ``sums`` = (loss, new BN statistics, correct, g_d, mean |g_dj|² [and
  mean |P·g_dj|²]) of its ``batch`` examples: g = mean over devices of g_d; (new state, the step's metrics).
  ``pre``: (P, valid) of :func:`step_preconditioner`, from ``state`` before the update."""
  loss, new_bs, correct, local_grads, small_sq = sums
  grads = jax.lax.pmean(local_grads, axes)
  if opts.gradient_noise:
    grads = _add_noise(grads, step_rng, opts.gradient_noise)
  small_sq = jax.lax.pmean(small_sq, axes)  # mean over devices and micro-batches of |g_dj|² [and |P·g_dj|²]
  updates, opt_state = tx.update(grads, state.opt_state, state.params)
  params = optax.apply_updates(state.params, updates)
  metrics = {
    "train_loss": jax.lax.pmean(loss, axes),
    "train_accuracy": jax.lax.pmean(correct / batch, axes),
    "grad_norm": jnp.sqrt(tree_sq_norm(grads)),
    "grad_sq_norm_small": small_sq if pre is None else small_sq[0],
  }
  if pre is not None:
    p, valid = pre
    nan = jnp.float32(jnp.nan)
    metrics["grad_sq_norm_small_precond"] = jnp.where(valid, small_sq[1], nan)
    metrics["grad_sq_norm_precond"] = jnp.where(valid, tree_sq_norm(precond_lib.apply(p, grads)), nan)
  if opts.signal_to_noise:
    par, perp = noise_scale.snr_components(local_grads, jax.lax.pmean(local_grads, axes))
    metrics["signal_to_noise"] = jax.lax.pmean(par, axes) / jax.lax.pmean(perp, axes)
  new_state = state.replace(  # type: ignore[attr-defined]  # flax.struct.dataclass adds replace
    step=state.step + 1, params=params, batch_stats=new_bs, opt_state=opt_state
  )
  return new_state, metrics


def make_local_step(
  model: nn.Module,
  tx: optax.GradientTransformation,
  opts: StepOptions,
  preprocess: Preprocess,
  axes: Any,
  vary: Callable[[Any], Any],
):
  """One optimizer step on this device's share of the global batch; collectives over ``axes``."""
  grad_fn = make_grad_fn(model, opts)

  def local_step(state: TrainState, images: jax.Array, labels: jax.Array, rng: jax.Array, step_rng: jax.Array):
    """``rng`` differs per device (augmentation, input/label/weight noise); ``step_rng`` is shared (gradient noise)."""
    params_v, xs, ys, r_drop = prepare(state, images, labels, rng, opts, preprocess, vary)
    pre = step_preconditioner(opts, state)
    sums = _accumulate(grad_fn, state, params_v, xs, ys, r_drop, opts, vary, pre)
    return finish(tx, opts, axes, state, sums, step_rng, labels.shape[0], pre)

  return local_step


def device_rngs(key: jax.Array, step: jax.Array, axes: Any) -> tuple[jax.Array, jax.Array]:
  """(this device's key, the step's shared key) of optimizer step ``step``."""
  step_rng = jax.random.fold_in(key, step)
  return jax.random.fold_in(step_rng, jax.lax.axis_index(axes)), step_rng


def scan_steps(local_step, state, fetch, xs, key, axes):
  """Runs one local step per leading element of ``xs``; ``fetch`` turns it into (images, labels).

  The scan is unrolled: on XLA:CPU a rolled loop body runs 4–6× slower than the same step as straight-line code
  (measured: docs/performance.md), so callers keep the number of steps per call small and dispatch calls
  asynchronously instead.
  """

  def body(state, x):
    return local_step(state, *fetch(x), *device_rngs(key, state.step, axes))

  if jax.tree.leaves(xs)[0].shape[0] == 1:  # one step: straight-line code, no loop construct at all
    state, metrics = body(state, jax.tree.map(lambda x: x[0], xs))
    return state, jax.tree.map(lambda m: m[None], metrics)
  return jax.lax.scan(body, state, xs, unroll=True)


def make_train_chunk(model, tx, opts: StepOptions, preprocess: Preprocess, mesh: Mesh, *, resident: bool):
  """Compiled K-step function over ``mesh`` (jit + shard_map).

  resident=True: ``f(state, images_all, labels_all, idx[K, B], key)`` gathers each batch from a replicated
  on-device copy of the training set (no host→device traffic per step).
  resident=False: ``f(state, images[K, B, ...], labels[K, B], key)`` with host-fed batches.
  Returns (new_state, metrics with a leading K axis). The state buffers are donated.
  """
  axes = mesh_lib.DATA_AXES
  vary = lambda t: jax.lax.pcast(t, axes, to="varying")
  local_step = make_local_step(model, tx, opts, preprocess, axes, vary)
  split = P(None, axes)
  in_specs: tuple[P, ...]
  if resident:  # both variants are named ``chunk``: the compiled program is ``jit_chunk`` (the cache's file names)

    def chunk(state, images_all, labels_all, idx, key):
      return scan_steps(local_step, state, lambda i: (images_all[i], labels_all[i]), idx, key, axes)

    in_specs = (P(), P(), P(), split, P())
  else:

    def chunk(state, images, labels, key):  # type: ignore[misc]  # the other variant's signature
      return scan_steps(local_step, state, lambda xy: xy, (images, labels), key, axes)

    in_specs = (P(), split, split, P())
  fn = jax.shard_map(chunk, mesh=mesh, in_specs=in_specs, out_specs=(P(), P()))
  return jax.jit(fn, donate_argnums=0)


def make_eval_step(model, opts: StepOptions, preprocess: Preprocess):
  """Sums of loss, correct predictions and counted examples over a padded batch (``mask`` marks real examples)."""

  def eval_step(params, batch_stats, images, labels, mask):
    variables = {"params": params}
    if batch_stats:
      variables["batch_stats"] = batch_stats
    x = preprocess(images, labels, jax.random.key(0))
    logits = model.apply(variables, x, train=False)
    m = mask.astype(jnp.float32)
    loss = cross_entropy(logits, labels, opts.num_classes) * m
    correct = (jnp.argmax(logits, -1) == labels) * m
    return jnp.stack([loss.sum(), correct.sum(), m.sum()])

  return jax.jit(eval_step)
