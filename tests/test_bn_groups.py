"""BN over device groups and ghost batches against a float64 numpy reference written from the definition.

The two grouping rules are checked against the rules as their sources state them, not against our planner:
MLPerf's JAX ResNet reference normalises ``span = max(per_device_batch, target)`` examples together; ghost BN
(Hoffer et al. 2017) normalises ghost batches of a fixed size, pooling devices only when a device holds fewer.
"""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from lamb_lars.models import bn_groups
from lamb_lars.train import mesh as mesh_lib

EPS, MOM = 1e-5, 0.9


def reference(x: np.ndarray, group_rows: int):
  """Normalise each block of ``group_rows`` consecutive examples by its own mean and biased variance.

  Running statistics start at (0, 1) and take one momentum step towards the mean over blocks of the block mean and
  the *unbiased* block variance (n/(n−1), n = examples × spatial positions per block, as torch.nn.BatchNorm2d).
  """
  x = x.astype(np.float64)
  blocks = x.reshape((-1, group_rows) + x.shape[1:])
  axes = tuple(range(1, blocks.ndim - 1))
  n = int(np.prod([blocks.shape[a] for a in axes]))
  mean = blocks.mean(axis=axes, keepdims=True)
  var = blocks.var(axis=axes, keepdims=True)
  y = ((blocks - mean) / np.sqrt(var + EPS)).reshape(x.shape)
  ra_mean = (1 - MOM) * mean.reshape(-1, x.shape[-1]).mean(0)
  ra_var = MOM * 1.0 + (1 - MOM) * (var * n / (n - 1)).reshape(-1, x.shape[-1]).mean(0)
  return y, ra_mean, ra_var


def run_sharded(x: np.ndarray, group: int, ghost: int):
  mesh = mesh_lib.make_mesh(group)
  bn = bn_groups.GroupBatchNorm(
    use_running_average=False,
    momentum=MOM,
    epsilon=EPS,
    ghost_batch_size=ghost,
    group_axis_name=mesh_lib.BN_AXIS if group > 1 else None,
    stats_axis_name="group" if group > 1 else mesh_lib.DATA_AXES,
  )
  variables = bn.init(jax.random.key(0), jnp.asarray(x[:ghost]))

  def f(v, xl):
    y, new = bn.apply(v, xl, mutable=["batch_stats"])
    return y, new["batch_stats"]

  fn = jax.jit(
    jax.shard_map(f, mesh=mesh, in_specs=(P(), P(mesh_lib.DATA_AXES)), out_specs=(P(mesh_lib.DATA_AXES), P()))
  )
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


# ----------------------------------------------------------------------------- the two rules, on 8 fake devices


def _normalised_rows_mlperf(b: int, target: int) -> int:
  """MLPerf JAX ResNet: ``batchnorm_span = max(per_device_batch, target)`` examples are normalised together."""
  return max(b, target)


def _normalised_rows_ghost(b: int, ghost: int) -> int:
  """Hoffer et al. 2017: every ghost batch of ``ghost`` examples is normalised alone (pooled over devices if b <
  ghost)."""
  return ghost


@pytest.mark.parametrize(
  "mode, b, target",
  [
    ("mlperf_span", 512, 64),  # the whole device batch of 512, not 8 × 64
    ("mlperf_span", 96, 64),  # 96 (no ghost split, no error)
    ("mlperf_span", 16, 64),  # 4 devices pool their 16 each
    ("mlperf_span", 64, 64),
    ("ghost", 512, 64),  # 8 ghost batches of 64 inside each device
    ("ghost", 16, 64),  # ghost batch of 64 = 4 devices × 16
    ("ghost", 32, 32),
  ],
)
def test_rule_normalises_like_its_definition(mode, b, target):
  assert jax.device_count() == 8
  key = "examples_per_group" if mode == "mlperf_span" else "ghost_batch_size"
  plan = bn_groups.plan_bn_groups(per_device_batch=b, num_devices=8, mode=mode, **{key: target})
  rows = (_normalised_rows_mlperf if mode == "mlperf_span" else _normalised_rows_ghost)(b, target)
  assert plan.examples_per_group == rows
  rng = np.random.RandomState(b + target)
  x = (rng.randn(8 * b, 3) * 3 + 2).astype(np.float32)
  y, stats = run_sharded(x, plan.group_devices, plan.ghost_batch_size)
  y_ref, m_ref, v_ref = reference(x, rows)
  np.testing.assert_allclose(y, y_ref, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(stats["mean"], m_ref, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(stats["var"], v_ref, rtol=1e-5, atol=1e-6)


def _parse_config(name, arg):
  from absl import flags
  from ml_collections import config_flags

  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  argv = ["prog", f"--config={os.path.join(root, 'lamb_lars', 'configs', name + '.py')}:{arg}"]
  fv = flags.FlagValues()
  config_flags.DEFINE_config_file("config", None, flag_values=fv, lock_config=True, sys_argv=argv)
  fv(argv)
  return fv.config


@pytest.mark.parametrize(
  "batch, devices, rows",
  [
    (32_768, 64, 512),  # 512 per device ≥ 64: MLPerf normalises all 512 together
    (12_288, 128, 96),  # 96 per device: MLPerf uses 96
    (16_384, 256, 64),  # 64 per device
    (8_192, 512, 64),  # 16 per device: 4 devices pool
  ],
)
def test_mlperf_config_uses_the_mlperf_span(batch, devices, rows):
  from lamb_lars.train import run_plan

  cfg = _parse_config("imagenet_mlperf_lars", str(batch))
  plan = run_plan.make_plan(cfg, num_train=1_281_167, num_devices=devices)
  assert plan.bn.examples_per_group == rows == _normalised_rows_mlperf(batch // devices, 64)


# --------------------------------------------------------------------------- unbiased running variance


@pytest.mark.parametrize(
  "group, per_device, ghost, spatial",
  [
    (1, 64, 4, (1, 1)),  # ghost batches of 4 examples inside each device
    (1, 64, 2, (1, 2)),  # ghost batches of 2 examples × 2 positions = 4 values
    (2, 2, 2, (1, 1)),  # 2 devices × 2 examples
    (4, 1, 1, (1, 1)),  # 4 devices × 1 example
  ],
)
def test_running_variance_is_unbiased(group, per_device, ghost, spatial):
  """Groups of n = 4 values drawn from N(μ, σ²): the running-variance update must average to σ², not σ²(1 − 1/n)."""
  sigma2, features = 4.0, 512
  rng = np.random.RandomState(group * 10 + ghost)
  x = (rng.randn(8 * per_device, *spatial, features) * np.sqrt(sigma2) + 1.5).astype(np.float32)
  mesh = mesh_lib.make_mesh(group)
  bn = bn_groups.GroupBatchNorm(
    use_running_average=False,
    momentum=0.0,
    epsilon=EPS,
    ghost_batch_size=ghost,
    group_axis_name=mesh_lib.BN_AXIS if group > 1 else None,
    stats_axis_name="group" if group > 1 else mesh_lib.DATA_AXES,
  )
  variables = bn.init(jax.random.key(0), jnp.asarray(x[:ghost]))
  f = lambda v, xl: bn.apply(v, xl, mutable=["batch_stats"])[1]["batch_stats"]
  fn = jax.jit(jax.shard_map(f, mesh=mesh, in_specs=(P(), P(mesh_lib.DATA_AXES)), out_specs=P()))
  var = np.asarray(fn(variables, jax.device_put(x, mesh_lib.batch_sharding(mesh)))["var"], np.float64)
  groups = 8 * per_device // (group * ghost) * features  # independent groups of n = 4 values
  se = sigma2 * np.sqrt(2.0 / 3.0 / groups)  # sd of an unbiased n=4 variance: σ²·√(2/(n−1))
  assert se < 0.05 * sigma2  # the biased 0.75σ² is > 5 standard errors away
  assert abs(var.mean() - sigma2) < 4 * se, (var.mean(), sigma2, se)


def test_eval_uses_running_statistics():
  bn = bn_groups.GroupBatchNorm(use_running_average=True, epsilon=EPS)
  x = np.random.RandomState(0).randn(6, 4).astype(np.float32)
  v = {
    "params": {"scale": jnp.full((4,), 2.0), "bias": jnp.ones((4,))},
    "batch_stats": {"mean": jnp.full((4,), 0.5), "var": jnp.full((4,), 4.0)},
  }
  y = bn.apply(v, x)
  np.testing.assert_allclose(y, (x - 0.5) / np.sqrt(4.0 + EPS) * 2 + 1, rtol=1e-6)


def test_same_names_as_flax_batchnorm():
  import flax.linen as nn

  x = jnp.ones((4, 3))
  ours = bn_groups.GroupBatchNorm(use_running_average=False).init(jax.random.key(0), x)
  flax_bn = nn.BatchNorm(use_running_average=False).init(jax.random.key(0), x)
  assert jax.tree.structure(ours) == jax.tree.structure(flax_bn)


@pytest.mark.parametrize(
  "kw, plan",
  [
    (dict(per_device_batch=32, num_devices=256, examples_per_group=128), (4, 32)),  # the paper's ratio
    (dict(per_device_batch=16, num_devices=8, examples_per_group=64), (4, 16)),  # Ying et al.
    (dict(per_device_batch=512, num_devices=8, examples_per_group=128), (1, 128)),  # ghost BN inside a device
    (dict(per_device_batch=8, num_devices=8, examples_per_group=1024), (8, 8)),  # capped at all devices
    (dict(per_device_batch=8, num_devices=8), (1, 8)),  # per-device default
    (dict(per_device_batch=8, num_devices=8, group_devices=2, ghost_batch_size=4), (2, 4)),
    (dict(per_device_batch=512, num_devices=8, mode="ghost", ghost_batch_size=64), (1, 64)),
    (dict(per_device_batch=16, num_devices=8, mode="ghost", ghost_batch_size=64), (4, 16)),
    (dict(per_device_batch=512, num_devices=8, mode="mlperf_span", examples_per_group=64), (1, 512)),
    (dict(per_device_batch=96, num_devices=8, mode="mlperf_span", examples_per_group=64), (1, 96)),
    (dict(per_device_batch=16, num_devices=8, mode="mlperf_span", examples_per_group=64), (4, 16)),
    (dict(per_device_batch=8, num_devices=8, mode="mlperf_span"), (1, 8)),  # no target: per device
    (dict(per_device_batch=8, num_devices=8, mode="mlperf_span", group_devices=2), (2, 8)),
  ],
)
def test_plan(kw, plan):
  p = bn_groups.plan_bn_groups(**kw)
  assert (p.group_devices, p.ghost_batch_size) == plan


@pytest.mark.parametrize(
  "kw, words",
  [
    (dict(per_device_batch=0, num_devices=8), "at least one example"),
    (dict(per_device_batch=24, num_devices=8, examples_per_group=64), "not a multiple"),
    (dict(per_device_batch=8, num_devices=8, group_devices=3), "does not divide the 8 devices"),
    (dict(per_device_batch=12, num_devices=8, ghost_batch_size=8), "does not divide the per-device batch"),
    (
      dict(per_device_batch=24, num_devices=8, mode="mlperf_span", examples_per_group=64),
      r"bn.examples_per_group=64 is not a multiple of the per-device batch 24",
    ),
    (
      dict(per_device_batch=24, num_devices=8, mode="ghost", ghost_batch_size=64),
      r"bn.ghost_batch_size=64 is not a multiple",
    ),
    (dict(per_device_batch=64, num_devices=8, mode="mlperf_span", ghost_batch_size=32), "never does"),
    (
      dict(per_device_batch=64, num_devices=8, mode="ghost", ghost_batch_size=32, examples_per_group=64),
      "set one of them",
    ),
    (dict(per_device_batch=64, num_devices=8, mode="span"), "bn.mode='span' is not one of"),
  ],
)
def test_plan_errors(kw, words):
  with pytest.raises(ValueError, match=words):
    bn_groups.plan_bn_groups(**kw)


def test_axis_index_groups():
  assert bn_groups.axis_index_groups(8, 2) == [[0, 1], [2, 3], [4, 5], [6, 7]]
  assert bn_groups.axis_index_groups(8, 8) is None
