"""BN over device groups and ghost batches against a float64 numpy reference written from the definition."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from lamb_lars import bn_groups, mesh as mesh_lib

EPS, MOM = 1e-5, 0.9


def reference(x: np.ndarray, group_rows: int):
  """Normalise each block of ``group_rows`` consecutive examples by its own mean and (biased) variance."""
  x = x.astype(np.float64)
  blocks = x.reshape((-1, group_rows) + x.shape[1:])
  axes = tuple(range(1, blocks.ndim - 1))
  mean = blocks.mean(axis=axes, keepdims=True)
  var = blocks.var(axis=axes, keepdims=True)
  y = ((blocks - mean) / np.sqrt(var + EPS)).reshape(x.shape)
  ra_mean = (1 - MOM) * mean.reshape(-1, x.shape[-1]).mean(0)
  ra_var = MOM * 1.0 + (1 - MOM) * var.reshape(-1, x.shape[-1]).mean(0)
  return y, ra_mean, ra_var


def run_sharded(x: np.ndarray, group: int, ghost: int):
  mesh = mesh_lib.make_mesh(group)
  bn = bn_groups.GroupBatchNorm(use_running_average=False, momentum=MOM, epsilon=EPS, ghost_batch_size=ghost,
                                group_axis_name=mesh_lib.BN_AXIS if group > 1 else None,
                                stats_axis_name="group" if group > 1 else mesh_lib.DATA_AXES)
  variables = bn.init(jax.random.key(0), jnp.asarray(x[:ghost]))

  def f(v, xl):
    y, new = bn.apply(v, xl, mutable=["batch_stats"])
    return y, new["batch_stats"]

  fn = jax.jit(jax.shard_map(f, mesh=mesh, in_specs=(P(), P(mesh_lib.DATA_AXES)),
                             out_specs=(P(mesh_lib.DATA_AXES), P())))
  y, stats = fn(variables, jax.device_put(x, mesh_lib.batch_sharding(mesh)))
  return np.asarray(y), jax.device_get(stats)


@pytest.mark.parametrize("group, ghost", [(1, 4), (1, 2), (2, 4), (4, 4), (8, 4)])
def test_group_statistics_match_per_group_reference(group, ghost):
  assert jax.device_count() == 8
  rng = np.random.RandomState(group)
  per_device = 4
  x = (rng.randn(8 * per_device, 3, 3, 5) * 3 + 2).astype(np.float32)
  y, stats = run_sharded(x, group, ghost)
  rows = group * per_device if group > 1 else ghost
  y_ref, m_ref, v_ref = reference(x, rows)
  np.testing.assert_allclose(y, y_ref, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(stats["mean"], m_ref, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(stats["var"], v_ref, rtol=1e-5, atol=1e-6)


def test_eval_uses_running_statistics():
  bn = bn_groups.GroupBatchNorm(use_running_average=True, epsilon=EPS)
  x = np.random.RandomState(0).randn(6, 4).astype(np.float32)
  v = {"params": {"scale": jnp.full((4,), 2.0), "bias": jnp.ones((4,))},
       "batch_stats": {"mean": jnp.full((4,), 0.5), "var": jnp.full((4,), 4.0)}}
  y = bn.apply(v, x)
  np.testing.assert_allclose(y, (x - 0.5) / np.sqrt(4.0 + EPS) * 2 + 1, rtol=1e-6)


def test_same_names_as_flax_batchnorm():
  import flax.linen as nn
  x = jnp.ones((4, 3))
  ours = bn_groups.GroupBatchNorm(use_running_average=False).init(jax.random.key(0), x)
  flax_bn = nn.BatchNorm(use_running_average=False).init(jax.random.key(0), x)
  assert jax.tree.structure(ours) == jax.tree.structure(flax_bn)


@pytest.mark.parametrize("kw, plan", [
    (dict(per_device_batch=32, num_devices=256, examples_per_group=128), (4, 32)),   # the paper's ratio
    (dict(per_device_batch=16, num_devices=8, examples_per_group=64), (4, 16)),      # Ying et al.
    (dict(per_device_batch=512, num_devices=8, examples_per_group=128), (1, 128)),   # ghost BN inside a device
    (dict(per_device_batch=8, num_devices=8, examples_per_group=1024), (8, 8)),      # capped at all devices
    (dict(per_device_batch=8, num_devices=8), (1, 8)),                               # per-device default
    (dict(per_device_batch=8, num_devices=8, group_devices=2, ghost_batch_size=4), (2, 4)),
])
def test_plan(kw, plan):
  p = bn_groups.plan_bn_groups(**kw)
  assert (p.group_devices, p.ghost_batch_size) == plan


@pytest.mark.parametrize("kw, words", [
    (dict(per_device_batch=0, num_devices=8), "at least one example"),
    (dict(per_device_batch=24, num_devices=8, examples_per_group=64), "not a multiple"),
    (dict(per_device_batch=8, num_devices=8, group_devices=3), "does not divide the 8 devices"),
    (dict(per_device_batch=12, num_devices=8, ghost_batch_size=8), "does not divide the per-device batch"),
])
def test_plan_errors(kw, words):
  with pytest.raises(ValueError, match=words):
    bn_groups.plan_bn_groups(**kw)


def test_axis_index_groups():
  assert bn_groups.axis_index_groups(8, 2) == [[0, 1], [2, 3], [4, 5], [6, 7]]
  assert bn_groups.axis_index_groups(8, 8) is None
