"""LeNet-5 for 28×28 MNIST, as in the paper's MNIST workload (You et al. 2020, Table 2).

conv 6@5×5 SAME → ReLU → 2×2 max-pool → conv 16@5×5 VALID → ReLU → 2×2 max-pool → dense 120 → 84 → 10.
61,706 parameters. ``width`` (``config.model_width``) scales the 6, 16, 120 and 84 by :func:`scaled`.

The parameters are exactly those of the straightforward Flax model (``nn.Conv`` / ``nn.Dense`` named conv1, conv2,
fc1, fc2, fc3; HWIO conv kernels, [in, out] dense kernels, same initialisers and RNG streams), so checkpoints and
optimizer masks see the usual tree. The computation is restructured for speed on CPU (see ``fast_ops`` and
docs/performance.md): each conv+ReLU+pool block is three GEMMs with a hand-written gradient, activations are kept
batch-last, and large batches are processed in chunks that fit in cache. Outputs and gradients equal the
straightforward model's to float32 rounding, including the max-pool's tie-breaking (first maximum of a window).
"""

from __future__ import annotations

from typing import Any, cast

import flax.linen as nn
import jax
import jax.numpy as jnp

from lamb_lars.models.fast_ops import conv_pool_relu_image, conv_pool_relu_split


class _Params(nn.Module):
  """Holds one layer's ``kernel`` and ``bias`` exactly as ``nn.Conv`` / ``nn.Dense`` would create them."""

  kernel_shape: tuple[int, ...]
  param_dtype: Any = jnp.float32

  @nn.compact
  def __call__(self) -> tuple[jnp.ndarray, jnp.ndarray]:
    kernel = self.param("kernel", nn.initializers.lecun_normal(), self.kernel_shape, self.param_dtype)
    bias = self.param("bias", nn.initializers.zeros_init(), (self.kernel_shape[-1],), self.param_dtype)
    return kernel, bias


Params = dict[str, tuple[jnp.ndarray, jnp.ndarray]]  # layer name → (kernel, bias)


def reference_forward(params: Params, x: jnp.ndarray) -> jnp.ndarray:
  """The textbook computation (XLA convolutions and max-pools): cheap to trace, used for ``init`` and as fallback."""
  dn = ("NHWC", "HWIO", "NHWC")
  pool = lambda a: jax.lax.reduce_window(a, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
  (k1, b1), (k2, b2) = params["conv1"], params["conv2"]
  a = pool(jax.nn.relu(jax.lax.conv_general_dilated(x, k1, (1, 1), "SAME", dimension_numbers=dn) + b1))
  a = pool(jax.nn.relu(jax.lax.conv_general_dilated(a, k2, (1, 1), "VALID", dimension_numbers=dn) + b2))
  z = a.reshape(a.shape[0], -1)
  for name in ("fc1", "fc2"):
    z = jax.nn.relu(z @ params[name][0] + params[name][1])
  return z @ params["fc3"][0] + params["fc3"][1]


def fast_path_supported(image_shape: tuple[int, ...]) -> bool:
  """Whether ``lenet_forward`` handles NHWC images of this (H, W, C): conv1's output must split into 4×4 cells."""
  h, w = image_shape[-3], image_shape[-2]
  return h % 4 == 0 and w % 4 == 0 and h >= 12 and w >= 12


@jax.jit
def lenet_forward(params: Params, x: jnp.ndarray) -> jnp.ndarray:
  """Logits of LeNet-5 for NHWC images x via the fast conv blocks (jitted, so eager calls compile once)."""
  (k1, b1), (k2, b2) = params["conv1"], params["conv2"]
  n = x.shape[0]
  pad = (k1.shape[0] // 2, k1.shape[1] // 2)  # SAME for odd kernels
  a = jnp.pad(x.transpose(3, 1, 2, 0), ((0, 0), (pad[0], pad[0]), (pad[1], pad[1]), (0, 0)))  # [c, H, W, n]
  p = conv_pool_relu_image(a, k1, b1)  # [6, 2, 2, 7, 7, n]
  p = conv_pool_relu_split(p, k2, b2)  # [16, 5, 5, n]
  c, h, w, _ = p.shape
  # fc layers batch-last too; fc1's kernel rows are (h, w, c) as Flax flattens NHWC, ours are (c, h, w).
  (f1, c1), (f2, c2), (f3, c3) = params["fc1"], params["fc2"], params["fc3"]
  f1 = f1.reshape(h, w, c, -1).transpose(3, 2, 0, 1).reshape(-1, c * h * w)
  z = jax.nn.relu(f1 @ p.reshape(c * h * w, n) + c1[:, None])
  z = jax.nn.relu(f2.T @ z + c2[:, None])
  return (f3.T @ z + c3[:, None]).T


def scaled(features: int, width: float) -> int:
  """A layer's width under the width multiplier: ``max(1, round(features · width))`` (width 1 keeps it exactly)."""
  return max(1, int(round(features * width)))


def _chunk_size(n: int, chunk: int | None) -> int | None:
  """The largest divisor of ``n`` that is ≤ ``chunk`` and > chunk/2; None = run the batch whole."""
  if not chunk or n <= chunk:
    return None
  size = max(d for d in range(1, chunk + 1) if n % d == 0)
  return size if 2 * size > chunk else None


class LeNet5(nn.Module):
  """LeNet-5 classifier; input NHWC float images, output logits.

  Attributes:
    num_classes: number of logits.
    dtype: computation dtype (parameters stay float32).
    batch_chunk: batches larger than this run chunk by chunk under ``lax.map``, forward and backward, so each
      chunk's activations stay in cache: same math, 1.6× faster at batch 8192 on our CPU. The chunk is the largest
      divisor of the batch ≤ batch_chunk (e.g. 250 for the full batch 55,000), or none when that is ≤ half of it.
      None or 0 disables chunking. (Gradient accumulation over micro-batches of 256 in the train step is faster
      still, 2.2×; the model then sees 256 and does not chunk. See docs/performance.md.)
  """

  num_classes: int = 10
  dtype: Any = jnp.float32
  batch_chunk: int | None = 256
  width: float = 1.0  # multiplies every layer's width: conv 6, 16 and dense 120, 84 (``scaled``)

  @nn.compact
  def __call__(self, x: jnp.ndarray, train: bool = True) -> jnp.ndarray:
    del train  # no batch norm or dropout
    x = x.astype(self.dtype)
    n, h, w, c = x.shape
    c1, c2, f1, f2 = (scaled(k, self.width) for k in (6, 16, 120, 84))
    flat = c2 * ((h // 2 - 4) // 2) * ((w // 2 - 4) // 2)
    shapes = {
      "conv1": (5, 5, c, c1),
      "conv2": (5, 5, c1, c2),
      "fc1": (flat, f1),
      "fc2": (f1, f2),
      "fc3": (f2, self.num_classes),
    }
    params = {name: tuple(t.astype(self.dtype) for t in _Params(shape, name=name)()) for name, shape in shapes.items()}
    if self.is_initializing() or not fast_path_supported(x.shape):
      return reference_forward(cast(Params, params), x)
    chunk = _chunk_size(n, self.batch_chunk)
    if chunk is None:
      return lenet_forward(params, x)
    logits = jax.lax.map(lambda xc: lenet_forward(params, xc), x.reshape(n // chunk, chunk, h, w, c))
    return logits.reshape(n, self.num_classes)
