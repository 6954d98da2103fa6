"""Batch norm over groups of devices and ghost batches (You et al. 2020 §4.1; Hoffer et al. 2017; Ying et al. 2018).

A *BN group* is the set of examples whose mean and variance normalise each other. It is one device's batch (per-device
BN, the cheap default), a *ghost batch* of a device's batch, or the batches of ``group_devices`` consecutive devices
pooled together (a ``pmean`` over the mesh axis ``'replica'``, or ``axis_index_groups`` under ``pmap``).

:func:`plan_bn_groups` derives the group from a target size by one of two rules (``bn.mode``); they agree when the
per-device batch b is at most the target and differ when b is larger:

* ``'ghost'`` (Hoffer et al. 2017, "Train longer, generalize better", §4: ghost batch norm; the default):
  ghost batches of exactly ``G`` examples (``bn.ghost_batch_size``, or ``bn.examples_per_group``). b ≥ G: each
  device splits its batch into b/G ghost batches normalised alone (e.g. b = 512, G = 64: 8 ghost batches of 64);
  b < G: G/b devices pool their statistics (b = 16, G = 64: 4 devices).
* ``'mlperf_span'`` (MLPerf's JAX ResNet-50 reference: ``batchnorm_span = max(per_device_batch, target)``, target
  ``bn.examples_per_group``, 64 there): b ≥ target: the whole device batch is one group (b = 512, target 64:
  all 512; b = 96: all 96); b < target: target/b devices pool statistics (target must be a multiple of b).
  A device batch is never split.

The first reproduces a fixed number of examples per group, as the paper's batch-to-core ratio of 128 (256 TPU v3
cores at batch 32K) and Ying et al.'s best effective BN batch of 64 describe; the second is what MLPerf's submissions
ran. Without a target both are per-device BN. When the target asks for more devices than exist, all devices pool.

Statistics (E[x], E[x²]) are computed in float32 whatever the compute dtype; the output is normalised with the
biased group variance. Running statistics are updated with the group mean and the *unbiased* group variance
(× n/(n−1), n = values per feature in the normalising group: examples × spatial positions), as PyTorch's BatchNorm
does; flax's ``nn.BatchNorm`` keeps the biased one, whose expectation σ²(1 − 1/n) is 0.75σ² for groups of 4. They are
averaged over *all* groups (a ``pmean`` over every data axis), so every replica holds the same running
mean/variance for evaluation. The update is linear in the batch statistics, so averaging the updated running
statistics of k micro-batches equals one update with their mean statistics (used by gradient accumulation).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Optional, Sequence, Union

import flax.linen as nn
import jax
import jax.numpy as jnp

AxisName = Union[str, Sequence[str], None]


@dataclasses.dataclass(frozen=True)
class BNPlan:
  """How BN statistics are pooled for one training step."""

  group_devices: int  # devices whose statistics are pooled
  ghost_batch_size: int  # examples per virtual batch inside a device (= per_device_batch: no split)
  per_device_batch: int  # examples per device per (micro-)batch
  mode: str = "ghost"  # the rule that chose the group: 'ghost' or 'mlperf_span' (see MODES)

  @property
  def examples_per_group(self) -> int:
    return self.group_devices * self.ghost_batch_size


MODES = ("ghost", "mlperf_span")


def plan_bn_groups(
  *,
  per_device_batch: int,
  num_devices: int,
  mode: str = "ghost",
  group_devices: int = 0,
  examples_per_group: int = 0,
  ghost_batch_size: int = 0,
) -> BNPlan:
  """Chooses the BN grouping; raises ValueError with one sentence when the request cannot be met.

  Args:
    per_device_batch: examples each device normalises per forward pass (the micro-batch under accumulation).
    num_devices: data-parallel devices in the mesh.
    mode: ``'ghost'`` (Hoffer et al.'s ghost batches of a fixed size) or ``'mlperf_span'`` (MLPerf's
      ``max(per_device_batch, target)``); see the module docstring.
    group_devices: explicit group size in devices (0 = derive it); wins over the rule. The device batch is then
      split into ghost batches of ``ghost_batch_size`` if that is set (mode ``'ghost'`` only).
    examples_per_group: the target examples per BN group, e.g. 128 (the paper) or 64 (Ying et al.; MLPerf);
      0 = per device. Under ``'ghost'`` it is the ghost batch size when ``ghost_batch_size`` is 0.
    ghost_batch_size: mode ``'ghost'``: the ghost batch size (0 = ``examples_per_group``).
  """
  b = per_device_batch
  if mode not in MODES:
    raise ValueError(f"bn.mode={mode!r} is not one of {', '.join(map(repr, MODES))}.")
  if b < 1:
    raise ValueError(f"The per-device batch is {b}: the global batch must give each device at least one example.")
  if mode == "mlperf_span" and ghost_batch_size and ghost_batch_size != b:
    raise ValueError(
      f"bn.ghost_batch_size={ghost_batch_size} splits device batches, which bn.mode='mlperf_span' "
      "never does; set bn.mode='ghost' or bn.ghost_batch_size=0."
    )
  if mode == "ghost" and ghost_batch_size and examples_per_group and ghost_batch_size != examples_per_group:
    raise ValueError(
      f"bn.ghost_batch_size={ghost_batch_size} and bn.examples_per_group={examples_per_group} both "
      "name the ghost batch under bn.mode='ghost'; set one of them."
    )
  if group_devices > 0:
    ghost = ghost_batch_size or b
  else:
    target = examples_per_group if mode == "mlperf_span" else (ghost_batch_size or examples_per_group)
    if target <= 0:
      group_devices, ghost = 1, b
    elif b >= target:  # ghost: split the device batch; mlperf_span: the whole device batch (span = b)
      group_devices, ghost = 1, (target if mode == "ghost" else b)
    else:  # both: target / b devices pool their statistics
      if target % b:
        key = "bn.examples_per_group" if mode == "mlperf_span" or not ghost_batch_size else "bn.ghost_batch_size"
        raise ValueError(
          f"{key}={target} is not a multiple of the per-device batch {b}, so no whole number of "
          f"devices forms a BN group under bn.mode={mode!r}."
        )
      group_devices, ghost = min(target // b, num_devices), b
  if num_devices % group_devices:
    raise ValueError(f"A BN group of {group_devices} devices does not divide the {num_devices} devices.")
  if b % ghost:
    raise ValueError(f"The ghost batch {ghost} does not divide the per-device batch {b}.")
  return BNPlan(group_devices=group_devices, ghost_batch_size=ghost, per_device_batch=b, mode=mode)


def axis_index_groups(num_devices: int, group_devices: int) -> Optional[list[list[int]]]:
  """``pmap`` device groups [[0..g-1], [g..2g-1], ...]; None when one group spans every device."""
  if group_devices >= num_devices:
    return None
  return [list(range(s, s + group_devices)) for s in range(0, num_devices, group_devices)]


class GroupBatchNorm(nn.Module):
  """BatchNorm whose statistics come from ghost batches pooled over a group of devices.

  Drop-in for ``flax.linen.BatchNorm`` over the last (feature) axis: same parameter names (``scale``, ``bias``) and
  batch statistics (``mean``, ``var``), so checkpoints and optimizer masks are shared.

  Attributes:
    group_axis_name: mesh/pmap axis over which a BN group's statistics are averaged (None = within device).
    group_axis_index_groups: ``pmap`` only: device groups for ``group_axis_name``.
    stats_axis_name: the data axes over which the group statistics still vary (every data axis but
      ``group_axis_name`` under ``shard_map``; the pmap axis under ``pmap``); running statistics are averaged over
      it so all replicas agree.
    ghost_batch_size: virtual batch inside a device (0 = the whole local batch).

  Normalises with the biased group variance; the running variance takes the unbiased one (× n/(n−1), n = values per
  feature in the group, counted over every device of the group), like PyTorch and unlike ``flax.linen.BatchNorm``.
  """

  use_running_average: Optional[bool] = None
  momentum: float = 0.9
  epsilon: float = 1e-5
  dtype: Optional[Any] = None
  param_dtype: Any = jnp.float32
  use_bias: bool = True
  use_scale: bool = True
  scale_init: Callable[..., Any] = nn.initializers.ones
  bias_init: Callable[..., Any] = nn.initializers.zeros
  ghost_batch_size: int = 0
  group_axis_name: AxisName = None
  group_axis_index_groups: Any = None
  stats_axis_name: AxisName = None

  @nn.compact
  def __call__(self, x: jax.Array, use_running_average: Optional[bool] = None) -> jax.Array:
    use_running_average = nn.merge_param("use_running_average", self.use_running_average, use_running_average)
    features = x.shape[-1]
    ra_mean = self.variable("batch_stats", "mean", lambda: jnp.zeros((features,), jnp.float32))
    ra_var = self.variable("batch_stats", "var", lambda: jnp.ones((features,), jnp.float32))
    n = x.shape[0]
    ghost = self.ghost_batch_size or n
    if use_running_average:
      mean, var = ra_mean.value[None], ra_var.value[None]
      xg = x.reshape((1, n) + x.shape[1:])
    else:
      if n % ghost:
        raise ValueError(f"The ghost batch {ghost} does not divide the local batch {n}.")
      xg = x.reshape((n // ghost, ghost) + x.shape[1:])
      x32 = xg.astype(jnp.float32)
      axes = tuple(range(1, xg.ndim - 1))
      mean = x32.mean(axes)
      mean2 = jnp.square(x32).mean(axes)
      if self.group_axis_name is not None and not self.is_initializing():
        mean, mean2 = jax.lax.pmean((mean, mean2), self.group_axis_name, axis_index_groups=self.group_axis_index_groups)
      var = jnp.maximum(mean2 - jnp.square(mean), 0.0)
      if not self.is_initializing():
        n = math.prod(xg.shape[1:-1]) * self._group_size()
        new_mean, new_var = mean.mean(0), var.mean(0) * (n / max(n - 1, 1))
        if self.stats_axis_name is not None:
          new_mean, new_var = jax.lax.pmean((new_mean, new_var), self.stats_axis_name)
        new_mean, new_var = jax.lax.stop_gradient((new_mean, new_var))
        ra_mean.value = self.momentum * ra_mean.value + (1.0 - self.momentum) * new_mean
        ra_var.value = self.momentum * ra_var.value + (1.0 - self.momentum) * new_var
    bshape = (mean.shape[0],) + (1,) * (xg.ndim - 2) + (features,)
    mul = jax.lax.rsqrt(var + self.epsilon).reshape(bshape)
    if self.use_scale:
      mul = mul * self.param("scale", self.scale_init, (features,), self.param_dtype).astype(jnp.float32)
    y = (xg.astype(jnp.float32) - mean.reshape(bshape)) * mul
    if self.use_bias:
      y = y + self.param("bias", self.bias_init, (features,), self.param_dtype).astype(jnp.float32)
    dtype = self.dtype or x.dtype
    return y.reshape(x.shape).astype(dtype)

  def _group_size(self) -> int:
    """Devices whose statistics are pooled (1 without ``group_axis_name``)."""
    if self.group_axis_name is None:
      return 1
    if self.group_axis_index_groups is not None:
      return len(self.group_axis_index_groups[0])
    names = (self.group_axis_name,) if isinstance(self.group_axis_name, str) else tuple(self.group_axis_name)
    return math.prod(jax.lax.axis_size(a) for a in names)
