"""Size knobs of the built-in models (config.model_width, model_depth, mlp_hidden): parameter counts at several
widths against hand formulas written from the layer shapes, and width 1.0 = the published models bit for bit."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lamb_lars import models
from lamb_lars.models.lenet import LeNet5
from lamb_lars.models.mnist_cnn import MnistCNN
from lamb_lars.models.resnet import build_resnet

WIDTHS = (0.25, 0.5, 1.0, 1.5, 2.0)


def s(n, w):
  return max(1, int(round(n * w)))


def count(model, shape=(28, 28, 1)):
  variables = jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), jnp.zeros((1,) + shape), train=False))
  return sum(int(np.prod(p.shape)) for p in jax.tree_util.tree_leaves(variables["params"]))


def dense(n_in, n_out):
  return n_in * n_out + n_out


def conv(k, c_in, c_out, bias=True):
  return k * k * c_in * c_out + (c_out if bias else 0)


@pytest.mark.parametrize("w", WIDTHS)
def test_lenet5_parameter_count(w):
  c1, c2, f1, f2 = s(6, w), s(16, w), s(120, w), s(84, w)
  # 28 → SAME conv 28 → pool 14 → VALID 5×5 conv 10 → pool 5
  want = conv(5, 1, c1) + conv(5, c1, c2) + dense(5 * 5 * c2, f1) + dense(f1, f2) + dense(f2, 10)
  assert count(models.create_model("lenet5", num_classes=10, width=w)) == want
  if w == 1.0:
    assert want == 61_706


@pytest.mark.parametrize("w", WIDTHS)
def test_mnist_cnn_parameter_count(w):
  c1, c2, f1 = s(32, w), s(64, w), s(1024, w)
  want = conv(5, 1, c1) + conv(5, c1, c2) + dense(7 * 7 * c2, f1) + dense(f1, 10)
  assert count(models.create_model("mnist_cnn", num_classes=10, width=w)) == want
  if w == 1.0:
    assert want == 3_274_634


@pytest.mark.parametrize("w", WIDTHS)
def test_small_cnn_parameter_count(w):
  c1, c2 = s(8, w), s(16, w)
  # conv 3×3 → BN (γ, β) → pool → conv 3×3 → BN → global mean → dense
  want = conv(3, 1, c1) + 2 * c1 + conv(3, c1, c2) + 2 * c2 + dense(c2, 10)
  assert count(models.create_model("small_cnn", num_classes=10, width=w)) == want
  if w == 1.0:
    assert want == 1_466


@pytest.mark.parametrize(
  "w,depth,hidden",
  [(1.0, 0, (300, 100)), (0.5, 0, (300, 100)), (2.0, 3, (300, 100)), (1.0, 1, (64, 32)), (0.3, 4, (50,))],
)
def test_mlp_parameter_count(w, depth, hidden):
  sizes = list(hidden) if depth == 0 else (list(hidden) + [hidden[-1]] * depth)[:depth]
  layers = [28 * 28] + [s(h, w) for h in sizes] + [10]
  want = sum(dense(a, b) for a, b in zip(layers, layers[1:]))
  assert count(models.create_model("mlp", num_classes=10, width=w, depth=depth, hidden=hidden)) == want
  if (w, depth, hidden) == (1.0, 0, (300, 100)):
    assert want == 266_610  # LeNet-300-100


def resnet_count(depth, w, num_classes, stem):
  """ResNet v1 from its layer shapes: stem conv (no bias) + BN (γ, β), blocks, projections, head."""
  f0 = s(64, w)
  k = 7 if stem == "imagenet" else 3
  total = conv(k, 3, f0, bias=False) + 2 * f0
  stages = {18: (2, 2, 2, 2), 34: (3, 4, 6, 3), 50: (3, 4, 6, 3)}[depth]
  c_in = f0
  for i, n in enumerate(stages):
    f = f0 * 2**i
    for j in range(n):
      stride = 2 if (i > 0 and j == 0) else 1
      if depth < 50:
        out = f
        total += conv(3, c_in, f, False) + 2 * f + conv(3, f, f, False) + 2 * f
      else:
        out = 4 * f
        total += conv(1, c_in, f, False) + 2 * f + conv(3, f, f, False) + 2 * f + conv(1, f, out, False) + 2 * out
      if stride != 1 or c_in != out:
        total += conv(1, c_in, out, False) + 2 * out
      c_in = out
  return total + dense(c_in, num_classes)


@pytest.mark.parametrize(
  "name,depth,w",
  [
    ("resnet18", 18, 1.0),
    ("resnet18_cifar", 18, 0.25),
    ("resnet18_cifar", 18, 0.5),
    ("resnet50_cifar", 50, 0.125),
    ("resnet34_cifar", 34, 0.25),
  ],
)
def test_resnet_parameter_count(name, depth, w):
  stem = "cifar" if name.endswith("_cifar") else "imagenet"
  classes = 1000 if stem == "imagenet" else 10
  got = count(models.create_model(name, num_classes=classes, width=w), (32, 32, 3))
  assert got == resnet_count(depth, w, classes, stem)
  if name == "resnet18":
    assert got == 11_689_512  # torchvision's count


@pytest.mark.slow
@pytest.mark.parametrize(
  "name,plain",
  [
    ("lenet5", lambda: LeNet5(num_classes=10)),
    ("mnist_cnn", lambda: MnistCNN(num_classes=10)),
    ("small_cnn", lambda: models.SmallCNN(num_classes=10)),
  ],
)
def test_default_width_is_the_published_model_bit_for_bit(name, plain):
  x = jnp.zeros((1, 28, 28, 1))
  init = lambda m: jax.jit(lambda k: m.init(k, x, train=False))(jax.random.PRNGKey(3))
  a, b = init(models.create_model(name, num_classes=10)), init(plain())
  assert jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)
  for u, v in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
    np.testing.assert_array_equal(np.asarray(u), np.asarray(v))


def test_default_width_resnet_has_the_published_shapes():
  a = jax.eval_shape(
    lambda: models.create_model("resnet18_cifar", num_classes=10).init(
      jax.random.PRNGKey(0), jnp.zeros((1, 32, 32, 3)), train=False
    )
  )
  b = jax.eval_shape(
    lambda: build_resnet(18, stem="cifar", num_classes=10).init(
      jax.random.PRNGKey(0), jnp.zeros((1, 32, 32, 3)), train=False
    )
  )
  assert a == b


@pytest.mark.slow
def test_width_changes_the_fast_lenet_path_consistently():
  """LeNet-5's fast GEMM path equals its reference forward at a non-default width too."""
  from lamb_lars.models import lenet

  model = models.create_model("lenet5", num_classes=10, width=1.5)
  x = jax.random.normal(jax.random.PRNGKey(1), (8, 28, 28, 1))
  v = model.init(jax.random.PRNGKey(0), x, train=False)
  params = {k: (p["kernel"], p["bias"]) for k, p in v["params"].items()}
  np.testing.assert_allclose(
    np.asarray(model.apply(v, x, train=False)), np.asarray(lenet.reference_forward(params, x)), rtol=1e-4, atol=1e-4
  )
