"""Batch norm over groups of devices and ghost batches (You et al. 2020 §4.1; Hoffer et al. 2017; Ying et al. 2018).

A *BN group* is the set of examples whose mean and variance normalise each other. Three regimes:

* per-device BN (the cheap default): the group is one device's batch;
* ghost BN: a device's batch is split into virtual batches of ``ghost_batch_size`` examples, each normalised alone;
* cross-device groups: ``group_devices`` consecutive devices pool their statistics (a ``pmean`` over the mesh axis
  ``'replica'``, or ``axis_index_groups`` under ``pmap``).

:func:`plan_bn_groups` derives the group from a target number of examples per group, as the paper keeps the
batch-to-core ratio at 128 (256 TPU v3 cores at batch 32K) and Ying et al. found an effective BN batch of 64 best;
this is MLPerf's ``batchnorm_span = max(per_device_batch, target)`` rule.

Statistics (E[x], E[x²]) are computed in float32 whatever the compute dtype. Running statistics are updated with the
average of the group statistics over *all* groups (a ``pmean`` over every data axis), so every replica holds the same
running mean/variance for evaluation. The update is linear in the batch statistics, so averaging the updated running
statistics of k micro-batches equals one update with their mean statistics (used by gradient accumulation).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional, Sequence, Union

import flax.linen as nn
import jax
import jax.numpy as jnp

AxisName = Union[str, Sequence[str], None]


@dataclasses.dataclass(frozen=True)
class BNPlan:
  """How BN statistics are pooled for one training step."""
  group_devices: int       # devices whose statistics are pooled
  ghost_batch_size: int    # examples per virtual batch inside a device
  per_device_batch: int    # examples per device per (micro-)batch

  @property
  def examples_per_group(self) -> int:
    return self.group_devices * self.ghost_batch_size


def plan_bn_groups(*, per_device_batch: int, num_devices: int, group_devices: int = 0,
                   examples_per_group: int = 0, ghost_batch_size: int = 0) -> BNPlan:
  """Chooses the BN grouping; raises ValueError with one sentence when the request cannot be met.

  Args:
    per_device_batch: examples each device normalises per forward pass (the micro-batch under accumulation).
    num_devices: data-parallel devices in the mesh.
    group_devices: explicit group size in devices (0 = derive it).
    examples_per_group: target examples per BN group, e.g. 128 (the paper) or 64 (Ying et al.); 0 = per device.
    ghost_batch_size: explicit virtual batch inside a device (0 = derive it).
  """
  if per_device_batch < 1:
    raise ValueError(f"The per-device batch is {per_device_batch}: the global batch must give each device at least "
                     "one example.")
  if group_devices > 0:
    ghost = ghost_batch_size or per_device_batch
  elif examples_per_group > 0:
    if per_device_batch >= examples_per_group:
      group_devices, ghost = 1, ghost_batch_size or examples_per_group
    else:
      if examples_per_group % per_device_batch:
        raise ValueError(f"bn.examples_per_group={examples_per_group} is not a multiple of the per-device batch "
                         f"{per_device_batch}, so no whole number of devices forms a BN group.")
      group_devices = min(examples_per_group // per_device_batch, num_devices)
      ghost = per_device_batch
  else:
    group_devices, ghost = 1, ghost_batch_size or per_device_batch
  if num_devices % group_devices:
    raise ValueError(f"A BN group of {group_devices} devices does not divide the {num_devices} devices.")
  if per_device_batch % ghost:
    raise ValueError(f"The ghost batch {ghost} does not divide the per-device batch {per_device_batch}.")
  return BNPlan(group_devices=group_devices, ghost_batch_size=ghost, per_device_batch=per_device_batch)


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
        mean, mean2 = jax.lax.pmean((mean, mean2), self.group_axis_name,
                                    axis_index_groups=self.group_axis_index_groups)
      var = jnp.maximum(mean2 - jnp.square(mean), 0.0)
      if not self.is_initializing():
        new_mean, new_var = mean.mean(0), var.mean(0)
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
