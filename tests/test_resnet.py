"""Tests for lamb_lars.models.resnet and the model registry.

Parameter counts are checked against torchvision's published numbers and against an independent layer-shape formula
(numpy); shape-only checks use ``jax.eval_shape`` (no compute). Anything that runs uses a tiny ResNet-18.
"""

from __future__ import annotations

import collections
import functools
from typing import Any, Callable, Dict, Tuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax.traverse_util import flatten_dict, unflatten_dict

from lamb_lars.models import MODEL_NAMES, create_model
from lamb_lars.models import resnet as R

TORCHVISION_COUNTS = {18: 11_689_512, 34: 21_797_672, 50: 25_557_032, 101: 44_549_160, 152: 60_192_808}


@pytest.fixture(scope="module", autouse=True)
def _fast_compile():
  """Compile time dominates these tiny models; restore the flag so other test modules are unaffected."""
  old = jax.config.read("jax_disable_most_optimizations")
  jax.config.update("jax_disable_most_optimizations", True)
  yield
  jax.config.update("jax_disable_most_optimizations", old)


def _shapes(model: nn.Module, size: int, batch: int = 1, channels: int = 3):
  x = jnp.zeros((batch, size, size, channels), jnp.float32)
  return jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), x, train=False))


def _n_params(model: nn.Module, size: int, channels: int = 3) -> int:
  leaves = jax.tree_util.tree_leaves(_shapes(model, size, channels=channels)["params"])
  return sum(int(np.prod(p.shape)) for p in leaves)


def formula_count(depth: int, stem: str, num_classes: int) -> int:
  """Parameter count from layer shapes alone: convs k·k·cin·cout (no bias), BN 2·c, head (c+1)·classes."""
  conv = lambda k, cin, cout: k * k * cin * cout
  bn = lambda c: 2 * c
  total = conv(7 if stem == "imagenet" else 3, 3, 64) + bn(64)
  stages = {18: [2, 2, 2, 2], 34: [3, 4, 6, 3], 50: [3, 4, 6, 3], 101: [3, 4, 23, 3], 152: [3, 8, 36, 3]}[depth]
  cin = 64
  for i, n in enumerate(stages):
    width = 64 * 2**i
    for j in range(n):
      if depth < 50:
        cout = width
        total += conv(3, cin, width) + bn(width) + conv(3, width, width) + bn(width)
      else:
        cout = 4 * width
        total += conv(1, cin, width) + bn(width) + conv(3, width, width) + bn(width)
        total += conv(1, width, cout) + bn(cout)
      if (i > 0 and j == 0) or cin != cout:
        total += conv(1, cin, cout) + bn(cout)
      cin = cout
  return total + cin * num_classes + num_classes


# ---------------------------------------------------------------------------------------------------- counts


def test_resnet50_imagenet_count_exact():
  assert _n_params(R.build_resnet(50, num_classes=1000), 224) == 25_557_032


@pytest.mark.parametrize("depth", [18, 34, 50, 101, 152])
def test_imagenet_counts_match_torchvision_and_formula(depth):
  n = _n_params(create_model(f"resnet{depth}", num_classes=1000), 224)
  assert n == TORCHVISION_COUNTS[depth] == formula_count(depth, "imagenet", 1000)


def test_cifar_resnet50_count():
  expected = formula_count(50, "cifar", 10)
  assert expected == 25_557_032 - 7 * 7 * 3 * 64 + 3 * 3 * 3 * 64 - 2049 * 1000 + 2049 * 10 == 23_520_842
  assert _n_params(R.build_resnet(50, stem="cifar", num_classes=10), 32) == expected
  assert _n_params(create_model("resnet50_cifar", num_classes=10), 32) == expected


def test_registry_covers_all_names():
  assert _n_params(create_model("lenet5", num_classes=10), 28, channels=1) == 61_706
  for name in MODEL_NAMES:
    assert isinstance(create_model(name, num_classes=10), nn.Module)
  with pytest.raises(ValueError):
    create_model("resnet20", num_classes=10)


def test_unknown_model_is_a_one_sentence_config_error():
  """A typed ConfigError (the one-sentence path, exit 2), not a bare ValueError that training reports as a bug."""
  from lamb_lars.common import cli_errors
  from lamb_lars.train.run_plan import ConfigError

  with pytest.raises(ConfigError) as e:
    create_model("resnet20", num_classes=10)
  msg = str(e.value)
  assert msg.startswith("config.model='resnet20' is not one of lenet5") and msg.endswith(".") and "\n" not in msg
  assert cli_errors.sentence(e.value, value_errors=False) == msg


# ---------------------------------------------------------------------------------------------------- shapes


def _intermediate_shapes(model: nn.Module, size: int) -> Dict[str, Tuple[int, ...]]:
  x = jnp.zeros((2, size, size, 3), jnp.float32)
  variables = _shapes(model, size)
  _, state = jax.eval_shape(lambda v: model.apply(v, x, train=False, capture_intermediates=True), variables)
  flat = flatten_dict(state["intermediates"], sep="/")
  return {k[: -len("/__call__")]: v[0].shape for k, v in flat.items()}


def test_output_and_stage_shapes_imagenet_stem():
  s = _intermediate_shapes(R.build_resnet(50, num_classes=1000), 224)
  assert s["stem_conv"] == (2, 112, 112, 64)
  assert s["stage1_block0"] == (2, 56, 56, 256)  # max-pool halves once more
  assert s["stage4_block2"] == (2, 7, 7, 2048)
  assert s[""] == (2, 1000)
  # v1.5: the downsampling block's stride sits on the 3×3 conv, not on the first 1×1.
  assert s["stage2_block0/conv1"] == (2, 56, 56, 128)
  assert s["stage2_block0/conv2"] == (2, 28, 28, 128)
  assert s["stage2_block0/proj_conv"] == (2, 28, 28, 512)


def test_output_and_stage_shapes_cifar_stem():
  s = _intermediate_shapes(R.build_resnet(50, stem="cifar", num_classes=10), 32)
  assert s["stem_conv"] == (2, 32, 32, 64)
  assert s["stage1_block0"] == (2, 32, 32, 256)  # no max-pool
  assert s["stage4_block2"] == (2, 4, 4, 2048)
  assert s[""] == (2, 10)
  v1 = _intermediate_shapes(R.build_resnet(50, stem="cifar", num_classes=10, stride_in_1x1=True), 32)
  assert v1["stage2_block0/conv1"] == (2, 16, 16, 128)


def test_param_paths_are_readable_and_bn_is_named_bn():
  paths = set(flatten_dict(_shapes(R.build_resnet(50), 64)["params"], sep="/"))
  for p in [
    "stem_conv/kernel",
    "stem_bn/scale",
    "stem_bn/bias",
    "stage1_block0/conv1/kernel",
    "stage1_block0/bn1/scale",
    "stage1_block0/proj_conv/kernel",
    "stage1_block0/proj_bn/scale",
    "stage4_block2/bn3/scale",
    "head/kernel",
    "head/bias",
  ]:
    assert p in paths, p
  for p in paths:  # every scale/bias other than the head's lives in a module whose name contains "bn"
    if p.endswith(("scale", "bias")) and not p.startswith("head"):
      assert "bn" in p.split("/")[-2], p
  assert not any(p.endswith("bias") and "conv" in p for p in paths)  # convs have no bias


# ---------------------------------------------------------------------------------------------------- running
# One tiny CIFAR ResNet-18 (widths 4-8-16-32, 16×16 inputs) is initialised once; init compiles are the slow part.


def _tiny(**kw) -> R.ResNet:
  kw.setdefault("num_filters", 4)
  kw.setdefault("zero_init_last_bn", True)
  return R.build_resnet(18, stem="cifar", num_classes=10, **kw)


def _train_apply(model: nn.Module):
  """Jitted train-mode forward: (variables, x) → (logits, {batch_stats, intermediates})."""
  return jax.jit(
    functools.partial(model.apply, train=True, mutable=["batch_stats", "intermediates"], capture_intermediates=True)
  )


@pytest.fixture(scope="module")
def tiny():
  kx, ky = jax.random.split(jax.random.PRNGKey(3))
  x = jax.random.normal(kx, (8, 16, 16, 3))
  y = jax.random.randint(ky, (8,), 0, 10)
  model = _tiny()
  variables = jax.jit(functools.partial(model.init, train=False))(jax.random.PRNGKey(0), x)
  return model, variables, x, y


def _acts(state) -> Dict[str, jnp.ndarray]:
  return {k[: -len("/__call__")]: v[0] for k, v in flatten_dict(state["intermediates"], sep="/").items()}


@pytest.mark.slow  # over 4 CPU-seconds: compiles several programs
def test_bfloat16_compute_keeps_float32_params_and_stats(tiny):
  _, variables, x, _ = tiny
  model = _tiny(dtype=jnp.bfloat16)
  shapes = jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), x, train=False))
  for tree in (shapes["params"], shapes["batch_stats"]):
    assert {leaf.dtype for leaf in jax.tree_util.tree_leaves(tree)} == {jnp.dtype(jnp.float32)}
  logits, state = _train_apply(model)(variables, x)
  assert logits.dtype == jnp.float32
  assert {leaf.dtype for leaf in jax.tree_util.tree_leaves(state["batch_stats"])} == {jnp.dtype(jnp.float32)}
  acts = _acts(state)
  assert acts["stage1_block0/conv1"].dtype == jnp.bfloat16
  assert acts["stage4_block1"].dtype == jnp.bfloat16
  # train mode updated the running statistics, and they are finite
  moved = jax.tree_util.tree_map(
    lambda a, b: bool(jnp.any(a != b)) and bool(jnp.all(jnp.isfinite(b))),
    variables["batch_stats"],
    state["batch_stats"],
  )
  assert all(jax.tree_util.tree_leaves(moved))


def test_zero_init_last_bn_makes_blocks_identity(tiny):
  model, variables, x, _ = tiny
  params = flatten_dict(variables["params"], sep="/")
  apply = _train_apply(model)
  out = _acts(apply(variables, x)[1])
  for s in range(1, 5):
    np.testing.assert_array_equal(params[f"stage{s}_block0/bn2/scale"], 0.0)
    np.testing.assert_array_equal(params[f"stage{s}_block0/bn1/scale"], 1.0)
    # block1 of each stage has an identity shortcut: its output is its (post-ReLU, ≥ 0) input exactly.
    np.testing.assert_array_equal(out[f"stage{s}_block1"], out[f"stage{s}_block0"])
  ones = {k: (jnp.ones_like(v) if k.endswith("bn2/scale") else v) for k, v in params.items()}
  out = _acts(apply({**variables, "params": unflatten_dict(ones, sep="/")}, x)[1])
  assert not np.allclose(out["stage1_block1"], out["stage1_block0"])
  # without the switch the model initialises γ = 1 everywhere
  shapes = jax.eval_shape(lambda: _tiny(zero_init_last_bn=False).init(jax.random.PRNGKey(0), x, train=False))
  assert jax.tree_util.tree_structure(shapes) == jax.tree_util.tree_structure(variables)


def test_bottleneck_zero_init_identity():
  block = R.BottleneckBlock(filters=2, zero_init_last_bn=True)
  x = jax.nn.relu(jax.random.normal(jax.random.PRNGKey(0), (2, 4, 4, 8)))  # 8 = 2 × expansion, identity shortcut
  variables = jax.jit(functools.partial(block.init, train=False))(jax.random.PRNGKey(1), x)
  np.testing.assert_array_equal(variables["params"]["bn3"]["scale"], 0.0)
  y, _ = _train_apply(block)(variables, x)
  np.testing.assert_array_equal(y, x)


def test_sgd_steps_lower_the_loss(tiny):
  model, variables, x, y = tiny
  params, stats = variables["params"], variables["batch_stats"]
  tx = optax.sgd(0.1, momentum=0.9)
  opt = tx.init(params)

  def loss_fn(p, s):
    logits, new = model.apply({"params": p, "batch_stats": s}, x, train=True, mutable=["batch_stats"])
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean(), new["batch_stats"]

  @jax.jit
  def step(p, s, o):
    (loss, s), g = jax.value_and_grad(loss_fn, has_aux=True)(p, s)
    u, o = tx.update(g, o, p)
    return optax.apply_updates(p, u), s, o, loss

  losses = []
  for _ in range(10):
    params, stats, opt, loss = step(params, stats, opt)
    losses.append(float(loss))
  assert np.all(np.isfinite(losses))
  assert losses[-1] < 0.5 * losses[0], losses


_NORM_LOG: list = []


class _RecordingNorm(nn.Module):
  """Stand-in for the BN-group module: takes the same construction kwargs and logs what it was given."""

  use_running_average: bool
  scale_init: Callable = nn.initializers.ones
  dtype: Any = jnp.float32
  param_dtype: Any = jnp.float32
  group_size: int = 1

  @nn.compact
  def __call__(self, x):
    _NORM_LOG.append(
      (
        self.name,
        self.use_running_average,
        self.scale_init is nn.initializers.zeros,
        jnp.dtype(self.dtype),
        jnp.dtype(self.param_dtype),
        self.group_size,
        x.dtype,
      )
    )
    return nn.BatchNorm(
      use_running_average=self.use_running_average,
      scale_init=self.scale_init,
      dtype=self.dtype,
      param_dtype=self.param_dtype,
      name="inner",
    )(x)


def test_norm_injection_with_custom_partial(tiny):
  _, variables, x, _ = tiny
  # a plain partial of nn.BatchNorm: no offsets anywhere, and its momentum (0: stats = batch stats) is used
  model = _tiny(norm=functools.partial(nn.BatchNorm, momentum=0.0, use_bias=False))
  shapes = jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), x, train=False))
  flat = flatten_dict(variables["params"], sep="/")
  no_bias = {k: v for k, v in flat.items() if not (k.endswith("bias") and "bn" in k)}
  assert set(flatten_dict(shapes["params"], sep="/")) == set(no_bias)
  _, new = _train_apply(model)({**variables, "params": unflatten_dict(no_bias, sep="/")}, x)
  stem = jax.lax.conv_general_dilated(
    x, flat["stem_conv/kernel"], (1, 1), ((1, 1), (1, 1)), dimension_numbers=("NHWC", "HWIO", "NHWC")
  )
  np.testing.assert_allclose(new["batch_stats"]["stem_bn"]["mean"], stem.mean(axis=(0, 1, 2)), rtol=1e-4, atol=1e-5)
  # a custom module through the registry gets every BN site (1 + 8×2 + 3 projections), with the right kwargs
  _NORM_LOG.clear()
  model = create_model(
    "resnet18_cifar",
    num_classes=10,
    dtype=jnp.bfloat16,
    zero_init_last_bn=True,
    norm=functools.partial(_RecordingNorm, group_size=4),
  )
  shapes = jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), x, train=True))
  assert "stage2_block0/proj_bn/inner/scale" in flatten_dict(shapes["params"], sep="/")
  log = list(_NORM_LOG)
  assert collections.Counter(e[0] for e in log) == {"stem_bn": 1, "bn1": 8, "bn2": 8, "proj_bn": 3}
  assert all(e[1:2] == (False,) and e[3:] == (jnp.bfloat16, jnp.float32, 4, jnp.bfloat16) for e in log)
  assert sorted(e[0] for e in log if e[2]) == ["bn2"] * 8  # zero-init exactly on each block's last BN
