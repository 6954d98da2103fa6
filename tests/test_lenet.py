"""LeNet5 (fast conv blocks) against a straightforward Flax reference: same parameters, outputs, gradients."""

from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from lamb_lars.models import fast_ops
from lamb_lars.models.lenet import LeNet5


class ReferenceLeNet5(nn.Module):
  """The textbook formulation: nn.Conv / nn.relu / nn.max_pool / nn.Dense."""

  num_classes: int = 10

  @nn.compact
  def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
    x = nn.max_pool(nn.relu(nn.Conv(6, (5, 5), padding="SAME", name="conv1")(x)), (2, 2), (2, 2))
    x = nn.max_pool(nn.relu(nn.Conv(16, (5, 5), padding="VALID", name="conv2")(x)), (2, 2), (2, 2))
    x = x.reshape((x.shape[0], -1))
    x = nn.relu(nn.Dense(120, name="fc1")(x))
    x = nn.relu(nn.Dense(84, name="fc2")(x))
    return nn.Dense(self.num_classes, name="fc3")(x)


def _inputs(n: int, hw: int = 28, c: int = 1, seed: int = 0, ties: bool = True) -> tuple[jnp.ndarray, jnp.ndarray]:
  """Random images; with ties, zero regions (a zero corner in every image, one all-zero image) whose pooling
  windows hold exactly equal values in both formulations."""
  rng = np.random.default_rng(seed)
  x = rng.standard_normal((n, hw, hw, c)).astype(np.float32)
  if ties:
    x[:, :10, :10] = 0.0
    x[0] = 0.0
  return jnp.asarray(x), jnp.asarray(rng.integers(0, 10, n))


@functools.lru_cache(maxsize=None)
def _inits() -> tuple[dict, dict]:
  """(ours, reference) initial parameters from the same key, in one compiled call (compiling init is slow)."""
  init = lambda k, x: (LeNet5().init(k, x)["params"], ReferenceLeNet5().init(k, x)["params"])
  return jax.jit(init)(jax.random.PRNGKey(3), jnp.zeros((1, 28, 28, 1)))


def _reference_init() -> dict:
  return _inits()[1]


def _random_params(hw: int = 28, c: int = 1, seed: int = 1) -> dict:
  """Random parameters with random biases of both signs (cheap: no Flax init)."""
  rng = np.random.default_rng(seed)
  flat = 16 * ((hw // 2 - 4) // 2) ** 2
  shapes = {"conv1": (5, 5, c, 6), "conv2": (5, 5, 6, 16), "fc1": (flat, 120), "fc2": (120, 84), "fc3": (84, 10)}
  fan_in = lambda s: np.prod(s[:-1])
  return {
    k: {
      "kernel": jnp.asarray(rng.standard_normal(s).astype(np.float32) / np.sqrt(fan_in(s))),
      "bias": jnp.asarray(0.1 * rng.standard_normal(s[-1]).astype(np.float32)),
    }
    for k, s in shapes.items()
  }


def _loss_logits_grads(apply, p, x, y):
  """Logits and the loss gradient with respect to parameters and images, in one compiled call."""

  def loss(p, x):
    logits = apply(p, x)
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean(), logits

  (_, logits), grads = jax.value_and_grad(loss, argnums=(0, 1), has_aux=True)(p, x)
  return logits, grads


@functools.partial(jax.jit, static_argnames="batch_chunk")
def _ours(p, x, y, batch_chunk):
  return _loss_logits_grads(lambda p, x: LeNet5(batch_chunk=batch_chunk).apply({"params": p}, x), p, x, y)


@jax.jit
def _reference(p, x, y):
  return _loss_logits_grads(lambda p, x: ReferenceLeNet5().apply({"params": p}, x), p, x, y)


def _assert_close(a, b, rtol: float = 2e-5, atol: float = 2e-6) -> None:
  for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=rtol, atol=atol * max(1.0, float(jnp.abs(v).max())))


def test_param_tree_count_and_init_match_reference():
  ours, ref = _inits()
  assert jax.tree.structure(ours) == jax.tree.structure(ref)
  assert sum(t.size for t in jax.tree.leaves(ours)) == 61_706
  assert ours["conv1"]["kernel"].shape == (5, 5, 1, 6) and ours["fc1"]["kernel"].shape == (400, 120)
  for u, v in zip(jax.tree.leaves(ours), jax.tree.leaves(ref)):
    np.testing.assert_array_equal(np.asarray(u), np.asarray(v))


@pytest.mark.slow  # over 4 CPU-seconds: compiles several programs
@pytest.mark.parametrize("batch_chunk,ties", [(None, True), (4, True), (None, False)])
def test_outputs_and_gradients_match_reference(batch_chunk, ties):
  """Logits and gradients (parameters and images) equal the reference's to float32 rounding.

  Ties: zero regions with the standard (zero-bias) init, so pooling windows hold exactly equal values and the
  gradient must go to the same (first) element. No ties: random biases of both signs. (With positive biases,
  zero regions would give windows of identical non-zero patches, whose exact ties our GEMMs may round 1 ulp
  apart; see docs/performance.md.) batch_chunk=4 runs the batch of 8 as two chunks under lax.map.
  """
  x, y = _inputs(8, ties=ties)
  p = _reference_init() if ties else _random_params()
  _assert_close(_ours(p, x, y, batch_chunk), _reference(p, x, y))


@pytest.mark.slow  # over 4 CPU-seconds: compiles several programs
def test_chunk_is_the_largest_divisor_not_below_half():
  """A batch the chunk does not divide runs in chunks of its largest divisor ≤ chunk (the full batch 55,000 in
  chunks of 250), not whole; a batch with no divisor in (chunk/2, chunk] runs whole; the result is unchanged."""
  from lamb_lars.models.lenet import _chunk_size

  assert _chunk_size(55000, 256) == 250 and _chunk_size(8192, 256) == 256 and _chunk_size(12, 8) == 6
  assert _chunk_size(2 * 257, 256) is None and _chunk_size(256, 256) is None and _chunk_size(100, None) is None
  x, y = _inputs(12, ties=False)
  p = _random_params()
  _assert_close(_ours(p, x, y, 8), _reference(p, x, y))


def test_gradients_inside_shard_map():
  """Data-parallel under shard_map (as the trainer runs it): the global-mean-loss gradient equals the reference's."""
  from jax.sharding import Mesh, PartitionSpec as P

  x, y = _inputs(8, ties=False)
  p = _random_params()
  mesh = Mesh(np.array(jax.devices()[:2]), ("d",))
  loss = lambda p, x, y: optax.softmax_cross_entropy_with_integer_labels(LeNet5().apply({"params": p}, x), y).mean()
  local = lambda p, x, y: jax.grad(lambda p: jax.lax.pmean(loss(p, x, y), "d"))(p)
  grads = jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(P(), P("d"), P("d")), out_specs=P()))(p, x, y)
  _assert_close(grads, _reference(p, x, y)[1][0])


@pytest.mark.slow  # over 4 CPU-seconds: compiles several programs
def test_other_image_sizes_and_channels():
  """32×32×3 (CIFAR-sized) works too: fc1 then has 6·6·16 inputs."""
  x, y = _inputs(4, hw=32, c=3, seed=1, ties=False)
  shapes = jax.eval_shape(LeNet5().init, jax.random.PRNGKey(0), x)["params"]
  assert shapes["fc1"]["kernel"].shape == (576, 120)
  p = _random_params(hw=32, c=3)
  _assert_close(_ours(p, x, y, None), _reference(p, x, y))


def test_pool_gradient_goes_to_first_maximum():
  """All-equal windows: the whole gradient goes to the window's first (row-major) element, as in nn.max_pool."""
  w = jnp.zeros((5, 5, 1, 1)).at[2, 2, 0, 0].set(1.0)  # identity kernel
  a = jnp.ones((1, 12, 12, 1))  # conv output 8×8 of ones
  g = jax.jit(jax.grad(lambda a: fast_ops.conv_pool_relu_image(a, w, jnp.zeros(1)).sum()))(a)
  expected = jnp.zeros((8, 8)).at[::2, ::2].set(1.0)
  np.testing.assert_array_equal(np.asarray(g[0, 2:10, 2:10, 0]), np.asarray(expected))


def test_split_block_input_gradient_matches_autodiff_of_patches():
  """The hand-written col2im equals the transpose of the patch extraction."""
  rng = np.random.default_rng(2)
  p = jnp.asarray(rng.standard_normal((3, 2, 2, 7, 7, 2)).astype(np.float32))
  x, vjp = jax.vjp(lambda p: fast_ops._im2col_split(p, 5, 5), p)
  d = jnp.asarray(rng.standard_normal(x.shape).astype(np.float32))
  np.testing.assert_allclose(
    np.asarray(jax.jit(fast_ops._col2im_split, static_argnums=(1, 2, 3))(d, p.shape, 5, 5)),
    np.asarray(vjp(d)[0]),
    rtol=1e-6,
    atol=1e-6,
  )
