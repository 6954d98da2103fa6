"""ResNet v1.5 (He et al. 2016, "Deep Residual Learning for Image Recognition") in Flax linen.

The paper's ImageNet workload is ResNet-50 **v1.5** (You et al. 2020, Table 2): identical to He et al.'s ResNet-50
except that a downsampling bottleneck puts its stride on the 3×3 conv instead of the first 1×1 conv (the
torchvision / NVIDIA / MLPerf convention; ≈ +0.5% top-1; forward 4.09 vs 3.86 GMAC at 224², +6%).
``stride_in_1x1=True`` gives the original v1 placement (the paper's CIFAR-10 ResNet-50 "v1"); parameter counts are
the same either way.

Two stems:
- ``'imagenet'``: 7×7/2 conv (64) → BN → ReLU → 3×3/2 max-pool (224² → 56² before stage 1).
- ``'cifar'``: 3×3/1 conv (64) → BN → ReLU, no max-pool (32² stays 32² before stage 1).

Stages 1–4 have 64·2^i base filters; the first block of stages 2–4 downsamples by 2. A block gets a projection
shortcut (1×1 conv + BN, stride s) when its stride ≠ 1 or its channel count changes, as in torchvision.

Parameter counts with a 1,000-class head (torchvision-equal): ResNet-18 11,689,512; ResNet-34 21,797,672;
ResNet-50 25,557,032; ResNet-101 44,549,160; ResNet-152 60,192,808. CIFAR ResNet-50 with 10 classes: 23,520,842.

Design choices, all switchable:
- ``norm``: the batch-norm injection point. Every normalisation is built as
  ``norm(use_running_average=not train, name=..., scale_init=..., dtype=dtype, param_dtype=float32)`` and every
  one has ``bn`` in its name, so optimizer masks (``r'bn|bias|scale'``) can find them. The default is
  ``nn.BatchNorm(momentum=0.9, epsilon=1e-5)``; a BN-group / ghost-BN module is passed here instead.
- ``dtype``: compute dtype (``jnp.bfloat16`` for mixed precision). Parameters are always float32
  (``param_dtype``); flax BatchNorm reduces mean/variance and keeps running statistics in float32 whatever
  ``dtype`` is; logits are returned as float32.
- ``zero_init_last_bn``: initialise the scale (γ) of the last BN in every residual branch to 0, so that each block
  starts as the identity (Goyal et al. 2017, "Accurate, Large Minibatch SGD", §5.1) — the standard large-batch
  trick.
- Conv kernels use He-normal fan-out init (He et al. 2015), the head N(0, 0.01²) weights and zero bias
  (Goyal et al. 2017).
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Sequence, Tuple, Type

import flax.linen as nn
import jax.numpy as jnp

Dtype = Any
ModuleDef = Callable[..., nn.Module]

conv_kernel_init = nn.initializers.variance_scaling(2.0, "fan_out", "normal")
head_kernel_init = nn.initializers.normal(stddev=0.01)

default_norm: ModuleDef = functools.partial(nn.BatchNorm, momentum=0.9, epsilon=1e-5)


def _pad(k: int) -> Tuple[Tuple[int, int], Tuple[int, int]]:
  """Symmetric padding k//2 on H and W, as torchvision (SAME would pad (0, 1) on even inputs with stride 2)."""
  return ((k // 2, k // 2), (k // 2, k // 2))


class _Block(nn.Module):
  """Shared fields and helpers of the residual blocks."""

  filters: int
  strides: int = 1
  norm: ModuleDef = default_norm
  dtype: Dtype = jnp.float32
  zero_init_last_bn: bool = False

  def conv(self, features: int, k: int, strides: int, name: str) -> nn.Conv:
    return nn.Conv(
      features,
      (k, k),
      strides=(strides, strides),
      padding=_pad(k),
      use_bias=False,
      kernel_init=conv_kernel_init,
      dtype=self.dtype,
      param_dtype=jnp.float32,
      name=name,
    )

  def bn(self, train: bool, name: str, last: bool = False) -> nn.Module:
    scale_init = nn.initializers.zeros if (last and self.zero_init_last_bn) else nn.initializers.ones
    return self.norm(
      use_running_average=not train, name=name, scale_init=scale_init, dtype=self.dtype, param_dtype=jnp.float32
    )

  def shortcut(self, x: jnp.ndarray, out_features: int, train: bool) -> jnp.ndarray:
    """Identity, or a 1×1 projection conv + BN when the stride or the channel count changes."""
    if self.strides == 1 and x.shape[-1] == out_features:
      return x
    y = self.conv(out_features, 1, self.strides, "proj_conv")(x)
    return self.bn(train, "proj_bn")(y)


class BasicBlock(_Block):
  """Two 3×3 convs (ResNet-18/34); stride on the first. Output channels = ``filters``."""

  expansion: int = 1

  @nn.compact
  def __call__(self, x: jnp.ndarray, train: bool = True) -> jnp.ndarray:
    y = self.conv(self.filters, 3, self.strides, "conv1")(x)
    y = nn.relu(self.bn(train, "bn1")(y))
    y = self.conv(self.filters, 3, 1, "conv2")(y)
    y = self.bn(train, "bn2", last=True)(y)
    return nn.relu(y + self.shortcut(x, self.filters, train))


class BottleneckBlock(_Block):
  """1×1 reduce → 3×3 → 1×1 expand (×4); v1.5 puts the stride on the 3×3 conv (``stride_in_1x1`` for v1)."""

  expansion: int = 4
  stride_in_1x1: bool = False

  @nn.compact
  def __call__(self, x: jnp.ndarray, train: bool = True) -> jnp.ndarray:
    s1, s3 = (self.strides, 1) if self.stride_in_1x1 else (1, self.strides)
    y = self.conv(self.filters, 1, s1, "conv1")(x)
    y = nn.relu(self.bn(train, "bn1")(y))
    y = self.conv(self.filters, 3, s3, "conv2")(y)
    y = nn.relu(self.bn(train, "bn2")(y))
    y = self.conv(self.filters * self.expansion, 1, 1, "conv3")(y)
    y = self.bn(train, "bn3", last=True)(y)
    return nn.relu(y + self.shortcut(x, self.filters * self.expansion, train))


class ResNet(nn.Module):
  """ResNet classifier on NHWC images; returns float32 logits of shape [N, num_classes].

  Param paths: ``stem_conv``, ``stem_bn``, ``stage{1..4}_block{j}/{conv,bn}{1,2,3}``, ``.../proj_conv``,
  ``.../proj_bn``, ``head``.
  """

  stage_sizes: Sequence[int]
  block_cls: Type[_Block]
  num_classes: int = 1000
  num_filters: int = 64
  stem: str = "imagenet"
  dtype: Dtype = jnp.float32
  norm: ModuleDef = default_norm
  zero_init_last_bn: bool = False
  stride_in_1x1: bool = False

  @nn.compact
  def __call__(self, x: jnp.ndarray, train: bool = True) -> jnp.ndarray:
    if self.stem not in ("imagenet", "cifar"):
      raise ValueError(f"stem must be 'imagenet' or 'cifar', got {self.stem!r}")
    x = jnp.asarray(x, self.dtype)
    k, s = (7, 2) if self.stem == "imagenet" else (3, 1)
    x = nn.Conv(
      self.num_filters,
      (k, k),
      strides=(s, s),
      padding=_pad(k),
      use_bias=False,
      kernel_init=conv_kernel_init,
      dtype=self.dtype,
      param_dtype=jnp.float32,
      name="stem_conv",
    )(x)
    x = self.norm(
      use_running_average=not train,
      name="stem_bn",
      scale_init=nn.initializers.ones,
      dtype=self.dtype,
      param_dtype=jnp.float32,
    )(x)
    x = nn.relu(x)
    if self.stem == "imagenet":
      x = nn.max_pool(x, (3, 3), strides=(2, 2), padding=((1, 1), (1, 1)))
    extra: dict[str, Any] = {"stride_in_1x1": self.stride_in_1x1} if issubclass(self.block_cls, BottleneckBlock) else {}
    for i, n_blocks in enumerate(self.stage_sizes):
      for j in range(n_blocks):
        x = self.block_cls(
          filters=self.num_filters * 2**i,
          strides=2 if (i > 0 and j == 0) else 1,
          norm=self.norm,
          dtype=self.dtype,
          zero_init_last_bn=self.zero_init_last_bn,
          name=f"stage{i + 1}_block{j}",
          **extra,
        )(x, train=train)
    x = jnp.mean(x, axis=(1, 2))  # global average pool
    x = nn.Dense(
      self.num_classes,
      kernel_init=head_kernel_init,
      bias_init=nn.initializers.zeros,
      dtype=self.dtype,
      param_dtype=jnp.float32,
      name="head",
    )(x)
    return jnp.asarray(x, jnp.float32)


STAGE_SIZES = {18: (2, 2, 2, 2), 34: (3, 4, 6, 3), 50: (3, 4, 6, 3), 101: (3, 4, 23, 3), 152: (3, 8, 36, 3)}


def block_for_depth(depth: int) -> Type[_Block]:
  """BasicBlock for depths 18/34, BottleneckBlock for 50 and deeper (He et al. 2016, Table 1)."""
  return BasicBlock if depth < 50 else BottleneckBlock


def build_resnet(depth: int, *, stem: str = "imagenet", num_classes: int = 1000, **kwargs: Any) -> ResNet:
  """ResNet of a standard depth (18, 34, 50, 101, 152) with the given stem; kwargs go to ``ResNet``."""
  if depth not in STAGE_SIZES:
    raise ValueError(f"depth must be one of {sorted(STAGE_SIZES)}, got {depth}")
  return ResNet(
    stage_sizes=STAGE_SIZES[depth], block_cls=block_for_depth(depth), stem=stem, num_classes=num_classes, **kwargs
  )
