"""A stride-1 NHWC convolution whose weight gradient XLA:CPU computes 4× faster (per chunk of the batch, a forward
convolution with batch and channels swapped, in a rolled loop), for the authors' MNIST CNN (models/mnist_cnn.py).

Why. On the 2-core CPU, XLA's own weight-gradient convolution of the CNN's conv2 (5×5, 32 → 64 channels on 14×14, batch
256) took 245 ms against 70 ms for the forward convolution of the same FLOPs. A straight im2col GEMM was no faster
(its 160 MB patch tensor is memory-bound), nor was an unrolled sum over chunks. A ``lax.scan`` over chunks of 8
images, each an im2col (25 shifted slices) and one einsum, took 104 ms (docs/BENCHMARKS.md §16). Each chunk as the
forward convolution below runs at the forward convolution's speed: 54 against 101–122 ms of one core for the im2col
chunks (CPU time, pinned to one core, loaded machine), and conv1's 7.5 against 18.5 ms.

What. ``conv_general_dilated`` has ``lax.conv_general_dilated``'s signature, so it drops into ``nn.Conv``
(``conv_general_dilated=``). Its forward pass and input gradient are XLA's. Its weight gradient is

  ∂L/∂W[i, j, c, o] = Σ_b Σ_{h,w} x_pad[b, h + i, w + j, c] · ∂L/∂y[b, h, w, o],

summed over chunks of the batch in a rolled loop (``_weight_grad_chunk``). This is the same function as XLA's weight
gradient, up to float32 summation order (tests/test_paper_workload.py checks it against XLA's in float64). A case it
does not cover (strides, dilation, feature groups, other layouts) goes to ``lax.conv_general_dilated`` unchanged,
and so does every convolution when JAX's default backend is not the CPU: on a GPU the rolled loop would launch one
small conv per 8 images (7,500 per step at batch 60K), where cuDNN's own weight gradient is one kernel.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax

LAYOUT = ("NHWC", "HWIO", "NHWC")
CHUNK = 8  # images per chunk: the fastest of 2–64 for conv1 and conv2 on one core (4–16 within 4%)


def _chunk(batch: int) -> int:
  """The largest divisor of ``batch`` that is ≤ CHUNK."""
  return max(d for d in range(1, min(CHUNK, batch) + 1) if batch % d == 0)


def _conv(x: jnp.ndarray, w: jnp.ndarray, pads: tuple) -> jnp.ndarray:
  return lax.conv_general_dilated(x, w, (1, 1), pads, dimension_numbers=LAYOUT)


def _weight_grad_chunk(x: jnp.ndarray, dy: jnp.ndarray, w_shape: tuple, pads: tuple) -> jnp.ndarray:
  """One chunk's weight gradient as a forward convolution with batch and channels swapped.

  dW[i, j, c, o] = Σ_{b,h,w} x_pad[b, h + i, w + j, c] · dy[b, h, w, o] is the NHWC forward convolution of
  x as [c, H, W, b] (its channels as the batch, its images as the input channels) with dy as an HWIO kernel
  [h, w, b, o], whose output [c, kh, kw, o] is dW transposed. The transposes must be explicit: the same
  convolution through dimension numbers alone (("CHWN", "IHWO", "HWNC")) took 40× longer on XLA:CPU.
  """
  dw = lax.conv_general_dilated(
    x.transpose(3, 1, 2, 0), dy.transpose(1, 2, 0, 3), (1, 1), pads, dimension_numbers=LAYOUT
  )
  return dw.transpose(1, 2, 0, 3).reshape(w_shape)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def conv_same_stride1(x: jnp.ndarray, w: jnp.ndarray, pads: tuple) -> jnp.ndarray:
  """NHWC × HWIO → NHWC, stride 1, explicit ``pads`` ((top, bottom), (left, right))."""
  return _conv(x, w, pads)


def _fwd(x, w, pads):
  return _conv(x, w, pads), (x, w)


def _bwd(pads, res, dy):
  x, w = res
  dx = jax.vjp(lambda x_: _conv(x_, w, pads), x)[1](dy)[0]
  n = _chunk(x.shape[0])
  xs = x.reshape(-1, n, *x.shape[1:])
  dys = dy.reshape(-1, n, *dy.shape[1:])
  acc_dtype = jnp.promote_types(w.dtype, jnp.float32)
  chunk = lambda xc, dyc: _weight_grad_chunk(xc, dyc, w.shape, pads).astype(acc_dtype)
  # The first chunk starts the sum: a zeros carry would not vary over a shard_map's axes as the chunks do (jax
  # refuses a scan whose carry changes its varying-manual-axes type).
  step = lambda acc, xy: (acc + chunk(*xy), None)
  dw = lax.scan(step, chunk(xs[0], dys[0]), (xs[1:], dys[1:]))[0]
  return dx, dw.astype(w.dtype)


conv_same_stride1.defvjp(_fwd, _bwd)


def conv_general_dilated(
  lhs,
  rhs,
  window_strides,
  padding,
  lhs_dilation=None,
  rhs_dilation=None,
  dimension_numbers=None,
  feature_group_count=1,
  batch_group_count=1,
  precision=None,
  preferred_element_type=None,
):
  """``lax.conv_general_dilated`` with the fast weight gradient where it applies (module docstring)."""
  ones = (1,) * (lhs.ndim - 2)
  simple = (
    jax.default_backend() == "cpu"
    and tuple(window_strides) == ones
    and tuple(lhs_dilation or ones) == ones
    and tuple(rhs_dilation or ones) == ones
    and feature_group_count == 1
    and batch_group_count == 1
    and preferred_element_type is None
    and lhs.ndim == 4
    and lax.conv_dimension_numbers(lhs.shape, rhs.shape, dimension_numbers)
    == lax.conv_dimension_numbers(lhs.shape, rhs.shape, LAYOUT)
  )
  if not simple:
    return lax.conv_general_dilated(
      lhs,
      rhs,
      window_strides,
      padding,
      lhs_dilation,
      rhs_dilation,
      dimension_numbers,
      feature_group_count,
      batch_group_count,
      precision,
      preferred_element_type,
    )
  pads = padding if not isinstance(padding, str) else lax.padtype_to_pads(lhs.shape[1:3], rhs.shape[:2], ones, padding)
  return conv_same_stride1(lhs, rhs, tuple(tuple(int(v) for v in p) for p in pads))
