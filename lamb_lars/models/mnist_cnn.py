"""The MNIST CNN that You et al. 2020 actually trained: TensorFlow's official MNIST model.

The paper's Table 3 cites its MNIST network as "LeNet [41]" with [41] = "Google TPU Team, Implementation of LeNet by
Google". The authors' training code (GitHub ``fastalgo/mnist_tpu``, ``*/mnist_tpu.py``: ``create_model``) builds
the model of TensorFlow's ``official/mnist`` (itself the ``mnist_deep.py`` tutorial network in ``tf.keras``):

  conv 32@5×5 SAME + ReLU → max-pool 2×2/2 SAME → conv 64@5×5 SAME + ReLU → max-pool 2×2/2 SAME →
  flatten (7·7·64 = 3136) → dense 1024 + ReLU → dropout 0.4 → dense 10

3,274,634 parameters (832 + 51,264 + 3,212,288 + 10,250), initialised as Keras does by default: Glorot-uniform kernels
(Glorot & Bengio 2010), zero biases. Inputs are pixels/255 with no mean/std normalisation (``config.input_scaling =
'unit'``). Dropout needs a ``'dropout'`` rng when ``train=True``; the train step passes one per device and step.

The 2×2/2 max-pools see even sizes (28, 14), so SAME padding adds nothing and each pool is the elementwise maximum
of the window's four strided slices. That is the same function as ``nn.max_pool(..., padding='SAME')``, and its
gradient avoids XLA's select-and-scatter, the slowest op of this model's backward pass on CPU; it is also 4.7× faster
than a reshape + max over the window (pool and ReLU of conv1's output, forward and backward, batch 256, one process
beside a study on the 2-core CPU: 12 against 58 ms). Each pool comes before its ReLU: max commutes with ReLU, so
relu(pool(x)) = pool(relu(x)) exactly, on a quarter of the elements. Without ties, the gradient goes to each
window's maximum, as TensorFlow's (with ReLU first, ties were common, but among zeros whose gradient is zero).
Both convolutions take their weight gradient from lamb_lars/models/conv_wgrad.py (per chunk of 8 images, a forward
convolution with batch and channels swapped: the same function, 4× faster than XLA's on CPU).
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax.numpy as jnp

from lamb_lars.models import conv_wgrad
from lamb_lars.models.lenet import scaled


def max_pool_2x2(x: jnp.ndarray) -> jnp.ndarray:
  """2×2 max-pool with stride 2 on NHWC ``x`` with even H and W (= SAME padding there)."""
  b, h, w, c = x.shape
  if h % 2 or w % 2:
    raise ValueError(f"max_pool_2x2 needs even spatial sizes; got {h}×{w}.")
  top = jnp.maximum(x[:, 0::2, 0::2], x[:, 0::2, 1::2])
  bottom = jnp.maximum(x[:, 1::2, 0::2], x[:, 1::2, 1::2])
  return jnp.maximum(top, bottom)


class MnistCNN(nn.Module):
  """TensorFlow's official MNIST CNN (module docstring); ``model.apply(v, x, train=..., rngs={'dropout': k})``."""

  num_classes: int = 10
  dropout_rate: float = 0.4
  dtype: Any = jnp.float32
  width: float = 1.0  # multiplies conv 32, 64 and dense 1024 (``lenet.scaled``)

  @nn.compact
  def __call__(self, x: jnp.ndarray, train: bool = False) -> jnp.ndarray:
    dense = lambda n, name: nn.Dense(n, dtype=self.dtype, kernel_init=nn.initializers.glorot_uniform(), name=name)
    conv = lambda n, name: nn.Conv(
      n,
      (5, 5),
      padding="SAME",
      dtype=self.dtype,
      name=name,
      kernel_init=nn.initializers.glorot_uniform(),
      conv_general_dilated=conv_wgrad.conv_general_dilated,
    )  # XLA:CPU's wgrad is slow
    c1, c2, f1 = (scaled(k, self.width) for k in (32, 64, 1024))
    x = nn.relu(max_pool_2x2(conv(c1, "conv1")(x.astype(self.dtype))))  # = pool(relu(·)): max commutes with relu
    x = nn.relu(max_pool_2x2(conv(c2, "conv2")(x)))
    x = x.reshape((x.shape[0], -1))
    x = nn.relu(dense(f1, "fc1")(x))
    x = nn.Dropout(self.dropout_rate, deterministic=not train)(x)
    return dense(self.num_classes, "fc2")(x).astype(jnp.promote_types(self.dtype, jnp.float32))  # f32 logits for bf16
