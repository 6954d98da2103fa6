"""The authors' MNIST workload (lamb_lars/proj/you2020/configs/): model, schedule and optimizers against float64
references.

The references are numpy float64, written from the authors' TensorFlow code (GitHub fastalgo/mnist_tpu:
``momentum_lars/mnist_tpu.py`` LARSOptimizer + ``training_ops.apply_momentum``; ``lamb/optimization.py``
create_optimizer + LAMBOptimizer; ``momentum_poly/mnist_tpu.py`` MomentumOptimizer; the ``tf.cond`` warmup around
``tf.train.polynomial_decay``) and from TensorFlow's documented op semantics, not from our code.
"""

from __future__ import annotations

import importlib
import math
import re

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lamb_lars.optim import optimizer_config
from lamb_lars.models import create_model, mnist_cnn
from test_train import data_dir  # noqa: F401  (fixture)


def paper_config(name):
  return importlib.import_module(f"lamb_lars.proj.you2020.configs.{name}").get_config()


# ---------------------------------------------------------------- model


@pytest.mark.slow  # over 4 CPU-seconds: compiles several programs
def test_mnist_cnn_parameter_count_and_shapes():
  params = create_model("mnist_cnn", num_classes=10).init(jax.random.key(0), jnp.zeros((1, 28, 28, 1)))["params"]
  shapes = jax.tree.map(lambda a: a.shape, params)
  assert shapes == {
    "conv1": {"kernel": (5, 5, 1, 32), "bias": (32,)},
    "conv2": {"kernel": (5, 5, 32, 64), "bias": (64,)},
    "fc1": {"kernel": (3136, 1024), "bias": (1024,)},
    "fc2": {"kernel": (1024, 10), "bias": (10,)},
  }
  assert sum(a.size for a in jax.tree.leaves(params)) == 3_274_634  # 832 + 51,264 + 3,212,288 + 10,250


def test_mnist_cnn_init_is_keras_default():
  """Glorot-uniform kernels: U(±sqrt(6/(fan_in + fan_out))), fans with the receptive field; zero biases."""
  params = mnist_cnn.MnistCNN().init(jax.random.key(1), jnp.zeros((1, 28, 28, 1)))["params"]
  fans = {"conv1": (25 * 1, 25 * 32), "conv2": (25 * 32, 25 * 64), "fc1": (3136, 1024), "fc2": (1024, 10)}
  for name, (fan_in, fan_out) in fans.items():
    k = np.asarray(params[name]["kernel"], np.float64)
    limit = math.sqrt(6.0 / (fan_in + fan_out))
    assert np.abs(k).max() <= limit
    assert abs(k.std() - limit / math.sqrt(3.0)) < 0.05 * limit / math.sqrt(3.0)  # std of U(±a) is a/√3
    assert not np.asarray(params[name]["bias"]).any()


def _conv_same_5x5(x, k, b):
  """NHWC 'SAME' 5×5 convolution, stride 1, as explicit sums over the 25 kernel offsets (float64)."""
  n, h, w, _ = x.shape
  xp = np.pad(x, ((0, 0), (2, 2), (2, 2), (0, 0)))
  out = np.zeros((n, h, w, k.shape[-1]))
  for i in range(5):
    for j in range(5):
      out += np.einsum("nhwc,co->nhwo", xp[:, i : i + h, j : j + w, :], k[i, j])
  return out + b


def _pool(x):
  n, h, w, c = x.shape
  return np.stack([x[:, a::2, b::2, :] for a in (0, 1) for b in (0, 1)]).max(0)


@pytest.mark.slow  # over 4 CPU-seconds: compiles several programs
def test_mnist_cnn_forward_equals_float64_reference():
  with jax.enable_x64(True):
    model = mnist_cnn.MnistCNN(dtype=jnp.float64)
    x = np.random.default_rng(0).random((3, 28, 28, 1))
    params = model.init(jax.random.key(0), jnp.zeros((1, 28, 28, 1), jnp.float64))["params"]
    params = jax.tree.map(lambda a: np.asarray(a, np.float64) + 0.01, params)  # non-zero biases too
    got = np.asarray(model.apply({"params": params}, jnp.asarray(x), train=False))
  p = params
  h = _pool(np.maximum(_conv_same_5x5(x, p["conv1"]["kernel"], p["conv1"]["bias"]), 0))
  h = _pool(np.maximum(_conv_same_5x5(h, p["conv2"]["kernel"], p["conv2"]["bias"]), 0))
  h = np.maximum(h.reshape(3, -1) @ p["fc1"]["kernel"] + p["fc1"]["bias"], 0)
  want = h @ p["fc2"]["kernel"] + p["fc2"]["bias"]
  np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


def test_max_pool_2x2_equals_flax_same_pool():
  x = jax.random.normal(jax.random.key(0), (2, 14, 14, 3))
  np.testing.assert_array_equal(mnist_cnn.max_pool_2x2(x), nn.max_pool(x, (2, 2), (2, 2), padding="SAME"))


def test_max_pool_2x2_gradient_routes_to_each_window_maximum():
  """Without ties, the pool's gradient goes to the maximum of each 2×2 window (numpy float64), as nn.max_pool's."""
  x = np.random.default_rng(1).standard_normal((2, 8, 6, 3))
  g = np.random.default_rng(2).standard_normal((2, 4, 3, 3))
  with jax.enable_x64(True):
    got = jax.vjp(mnist_cnn.max_pool_2x2, jnp.asarray(x))[1](jnp.asarray(g))[0]
  want = np.zeros_like(x)
  for n, i, j, c in np.ndindex(*g.shape):
    a, b = np.unravel_index(np.argmax(x[n, 2 * i : 2 * i + 2, 2 * j : 2 * j + 2, c]), (2, 2))
    want[n, 2 * i + a, 2 * j + b, c] = g[n, i, j, c]
  np.testing.assert_array_equal(np.asarray(got), want)


def test_mnist_cnn_dropout_only_in_training():
  model = mnist_cnn.MnistCNN()
  x = jax.random.uniform(jax.random.key(0), (4, 28, 28, 1))
  v = model.init(jax.random.key(1), x)
  eval_out = model.apply(v, x, train=False)
  np.testing.assert_array_equal(eval_out, model.apply(v, x, train=False))
  a = model.apply(v, x, train=True, rngs={"dropout": jax.random.key(2)})
  b = model.apply(v, x, train=True, rngs={"dropout": jax.random.key(3)})
  assert not np.allclose(a, b) and not np.allclose(a, eval_out)


# ---------------------------------------------------------------- schedule


def tf_schedule_reference(t, *, lr, warm, train_steps, end, power):
  """``tf.cond(warm > g_step, g_step/warm·lr, polynomial_decay(lr, g_step, train_steps, end, power))``."""
  if warm > t:
    return t / warm * lr
  step = min(t, train_steps)
  return (lr - end) * (1.0 - step / train_steps) ** power + end


@pytest.mark.parametrize(
  "name, warm, end",
  [
    ("lars_b8192", 60000 * 16 / 8192, 1e-4),  # 117.1875 steps: the warmup is not rounded
    ("momentum_b60000", 12.0, 1e-4),
    ("momentum_b1024", 0.0, 1e-4),
    ("lamb_b1024", float(int(60000 * 1 / 1024)), 0.0),  # BERT's create_optimizer: int() steps, decay to 0
  ],
)
def test_paper_schedule_equals_tensorflow_formula(name, warm, end):
  cfg = paper_config(name)
  opt = cfg.optimizer
  with jax.enable_x64(True):
    _, schedule = optimizer_config.create_optimizer(
      opt, total_steps=cfg.num_train_steps, num_train=60000, batch_size=cfg.batch_size
    )
    ts = np.arange(cfg.num_train_steps + 5)
    got = np.asarray(jax.jit(schedule)(ts))
  want = [
    tf_schedule_reference(
      float(t), lr=opt.learning_rate, warm=warm, train_steps=cfg.num_train_steps, end=end, power=0.5
    )
    for t in ts
  ]
  np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)
  if warm:
    assert got[0] == 0.0  # TF's warmup starts from 0: the first update does not move the weights


# ---------------------------------------------------------------- optimizers


def _params(rng):
  """A small model-shaped tree; conv1/bias starts at zero, as Keras biases do."""
  return {
    "conv1": {"kernel": rng.normal(size=(3, 3, 1, 4)), "bias": np.zeros(4)},
    "fc1": {"kernel": rng.normal(size=(6, 5)) * 0.3, "bias": rng.normal(size=5) * 0.1},
  }


def _flat(tree, prefix=""):
  out = {}
  for k, v in tree.items():
    path = f"{prefix}/{k}" if prefix else k
    out.update(_flat(v, path) if isinstance(v, dict) else {path: np.asarray(v, np.float64)})
  return out


def _run_ours(cfg, total_steps, batch_size, params, grads):
  with jax.enable_x64(True):
    tx, _ = optimizer_config.create_optimizer(cfg, total_steps=total_steps, num_train=60000, batch_size=batch_size)
    p = jax.tree.map(jnp.asarray, params)
    state = tx.init(p)
    update = jax.jit(tx.update)
    for g in grads:
      u, state = update(jax.tree.map(jnp.asarray, g), state, p)
      p = jax.tree.map(lambda a, b: a + b, p, u)
    return _flat(jax.device_get(p))


def _schedule(cfg, total_steps, batch_size):
  opt = cfg.optimizer
  warm = (
    opt.schedule.warmup_steps if opt.schedule.warmup_steps >= 0 else 60000 * opt.schedule.warmup_epochs / batch_size
  )
  end = opt.schedule.end_lr
  return lambda t: tf_schedule_reference(
    float(t), lr=opt.learning_rate, warm=float(warm), train_steps=total_steps, end=end, power=0.5
  )


def _grads(rng, params, n):
  gs = [jax.tree.map(lambda a: rng.normal(size=np.shape(a)), params) for _ in range(n)]
  gs[1]["conv1"]["bias"] = np.zeros(4)  # a zero gradient: ratio 1
  return gs


def test_tf_lars_equals_authors_larsoptimizer_float64():
  """momentum_lars: r = η‖w‖/(‖g‖ + β‖w‖ + ε) (1 if a norm is 0); accum = m·accum + g; w −= lr·r·accum."""
  cfg = paper_config("lars_b8192")
  total, batch = 30, 8192
  cfg.optimizer.schedule.warmup_epochs = 60000 * 4.5 / batch / (60000 / batch)  # 4.5 warmup steps of 30
  rng = np.random.default_rng(0)
  params = _params(rng)
  grads = _grads(rng, params, 8)
  got = _run_ours(cfg.optimizer, total, batch, params, grads)
  lr_at = _schedule(cfg, total, batch)
  w, acc = _flat(params), {k: np.zeros_like(v) for k, v in _flat(params).items()}
  for t, g in enumerate(map(_flat, grads)):
    for k in w:
      wn, gn = np.sqrt((w[k] ** 2).sum()), np.sqrt((g[k] ** 2).sum())
      r = 0.001 * wn / (gn + 1e-4 * wn + 0.0) if wn > 0 and gn > 0 else 1.0
      acc[k] = 0.9 * acc[k] + g[k]
      w[k] = w[k] - lr_at(t) * r * acc[k]
  for k in w:
    np.testing.assert_allclose(got[k], w[k], rtol=1e-10, atol=1e-12, err_msg=k)


def test_authors_lamb_equals_bert_lamb_float64():
  """lamb/optimization.py: clip_by_global_norm(1.0); m, v without bias correction; u = m/(√v + 1e-6) + λw
  (λ = 0 for names matching 'bias'); ratio ‖w‖/‖u‖ on every variable (1 if a norm is 0); w −= ratio·lr·u."""
  cfg = paper_config("lamb_b1024")
  total, batch = 40, 1024
  rng = np.random.default_rng(1)
  params = _params(rng)
  grads = [jax.tree.map(lambda a: 3.0 * a, g) for g in _grads(rng, params, 6)]  # global norms above the clip
  got = _run_ours(cfg.optimizer, total, batch, params, grads)
  lr_at = _schedule(cfg, total, batch)
  w = _flat(params)
  m = {k: np.zeros_like(v) for k, v in w.items()}
  v = {k: np.zeros_like(x) for k, x in w.items()}
  for t, g in enumerate(map(_flat, grads)):
    gnorm = math.sqrt(sum((x**2).sum() for x in g.values()))
    g = {k: x * 1.0 / max(gnorm, 1.0) for k, x in g.items()}  # tf.clip_by_global_norm
    for k in w:
      m[k] = 0.9 * m[k] + 0.1 * g[k]
      v[k] = 0.999 * v[k] + 0.001 * g[k] ** 2
      u = m[k] / (np.sqrt(v[k]) + 1e-6)
      if re.search("bias", k) is None:
        u = u + 0.01 * w[k]
      wn, un = np.sqrt((w[k] ** 2).sum()), np.sqrt((u**2).sum())
      ratio = (wn / un if un > 0 else 1.0) if wn > 0 else 1.0
      w[k] = w[k] - ratio * lr_at(t) * u
  for k in w:
    np.testing.assert_allclose(got[k], w[k], rtol=1e-10, atol=1e-12, err_msg=k)


def test_paper_momentum_equals_tf_momentum_optimizer_float64():
  """momentum_poly: tf.train.MomentumOptimizer(lr, 0.9): accum = 0.9·accum + g; w −= lr·accum; no weight decay."""
  cfg = paper_config("momentum_b60000")
  total, batch = 35, 60000
  rng = np.random.default_rng(2)
  params = _params(rng)
  grads = _grads(rng, params, 15)
  got = _run_ours(cfg.optimizer, total, batch, params, grads)
  lr_at = _schedule(cfg, total, batch)
  w = _flat(params)
  acc = {k: np.zeros_like(x) for k, x in w.items()}
  for t, g in enumerate(map(_flat, grads)):
    for k in w:
      acc[k] = 0.9 * acc[k] + g[k]
      w[k] = w[k] - lr_at(t) * acc[k]
  for k in w:
    np.testing.assert_allclose(got[k], w[k], rtol=1e-10, atol=1e-12, err_msg=k)


# ---------------------------------------------------------------- configs


@pytest.mark.parametrize(
  "name", ["momentum_b1024", "lars_b8192", "lamb_b1024", "momentum_b60000", "lars_b60000", "lamb_b60000"]
)
def test_paper_configs_are_the_authors_workload(name):
  cfg = paper_config(name)
  assert (cfg.model, cfg.input_scaling, cfg.dataset, cfg.validation_split) == ("mnist_cnn", "unit", "mnist", 0)
  assert cfg.optimizer.lr_scaling == "none" and cfg.optimizer.schedule.decay == "tf_poly"
  b, steps = int(re.search(r"_b(\d+)", name).group(1)), cfg.num_train_steps
  assert cfg.batch_size == b
  assert 1.7e6 < b * steps < 2.2e6  # the authors' budget: ≈ 2M images (35 steps at the full batch)
  # Unrolled micro-batches up to 8K (faster on several cores); at the full batch the host loop, so it fits in ≈ 2 GB.
  assert cfg.microbatch_loop == ("host" if b == 60000 else "unrolled")
  optimizer_config.validate_config(cfg.optimizer)


@pytest.mark.parametrize(
  "key, value",
  [("nesterov", True), ("adaptation_mask", "bias"), ("ratio_bounds", (0.0, 1.0)), ("denominator", "optax")],
)
def test_tf_lars_refuses_settings_it_would_ignore(key, value):
  opt = paper_config("lars_b8192").optimizer
  opt[key] = value
  with pytest.raises(ValueError, match="lars_update"):
    optimizer_config.validate_config(opt)


def test_tf_poly_refuses_other_warmup_shapes_and_end_lr_elsewhere():
  opt = paper_config("lars_b8192").optimizer
  opt.schedule.warmup_shape = "cosine"
  with pytest.raises(ValueError, match="tf_poly"):
    optimizer_config.validate_config(opt)
  opt = paper_config("lars_b8192").optimizer
  opt.schedule.decay = "cosine"
  with pytest.raises(ValueError, match="end_lr"):
    optimizer_config.validate_config(opt)


@pytest.mark.parametrize("decay", ["poly", "tf_poly"])
def test_fractional_poly_power_stays_finite_at_the_end(decay):
  """Under jit t/T becomes t·(1/T): at t = T the base was −2e-17 and (−2e-17)^0.5 = NaN (a bug before this test)."""
  opt = paper_config("lars_b8192").optimizer
  opt.schedule.decay = decay
  if decay == "poly":
    opt.schedule.end_lr = -1.0
  with jax.enable_x64(True):
    _, schedule = optimizer_config.create_optimizer(opt, total_steps=250, num_train=60000, batch_size=8192)
    lr = np.asarray(jax.jit(schedule)(np.arange(245, 256)))
  assert np.isfinite(lr).all()


def test_conv_weight_gradient_equals_xla_in_float64():
  """lamb_lars/models/conv_wgrad.py: the chunked-im2col weight gradient and the input gradient equal XLA's own
  (float64, so summation order cannot hide a wrong index), for SAME 5×5 and a batch the chunk does not divide."""
  from jax import lax
  from lamb_lars.models import conv_wgrad

  with jax.enable_x64(True):
    rng = np.random.default_rng(0)
    for b, cin, cout, hw in ((10, 3, 4, 14), (8, 1, 2, 28)):
      x = jnp.asarray(rng.standard_normal((b, hw, hw, cin)))
      w = jnp.asarray(rng.standard_normal((5, 5, cin, cout)))
      dy = jnp.asarray(rng.standard_normal((b, hw, hw, cout)))
      ref = lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
      got = lambda x, w: conv_wgrad.conv_general_dilated(
        x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
      )
      np.testing.assert_allclose(got(x, w), ref(x, w), rtol=1e-12, atol=1e-12)
      (gx, gw), (rx, rw) = jax.vjp(got, x, w)[1](dy), jax.vjp(ref, x, w)[1](dy)
      np.testing.assert_allclose(gw, rw, rtol=1e-11, atol=1e-11)
      np.testing.assert_allclose(gx, rx, rtol=1e-11, atol=1e-11)
    # strides fall back to XLA's own convolution
    y = conv_wgrad.conv_general_dilated(x, w, (2, 2), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    assert y.shape == (8, 14, 14, 2)


@pytest.mark.slow
@pytest.mark.e2e
def test_a_paper_config_trains_through_the_trainer(data_dir, tmp_path):
  """The authors' CNN with its chunked weight gradient, micro-batches and TF LARS through the real trainer on 8
  devices (shard_map): a scan inside the custom VJP must keep the varying-axes type of its carry (it once did not,
  and every faithful run failed at its first step)."""
  from lamb_lars.train import trainer

  cfg = paper_config("lars_b8192")
  cfg.data_dir, cfg.progress = data_dir, False
  cfg.batch_size, cfg.microbatch_size, cfg.num_train_steps = 64, 16, 2
  cfg.eval_every_steps = cfg.checkpoint_every_steps = 2
  cfg.eval_batch_size = 2000
  cfg.optimizer.schedule.allow_long_warmup = True
  result = trainer.train_and_evaluate(cfg, str(tmp_path / "run"))
  assert result["status"] == "done" and result["step"] == 2, result
  assert math.isfinite(result["final"]["train_loss"]) and 0.0 <= result["final"]["eval_accuracy"] <= 1.0


@pytest.mark.slow
@pytest.mark.e2e
def test_host_micro_batch_loop_equals_the_unrolled_one_through_the_trainer(data_dir, tmp_path):
  """The paper configs' ``microbatch_loop='host'`` (one compiled call per micro-batch: the full batch in ≈ one
  micro-batch's memory) against the unrolled loop, the authors' CNN with dropout on 2 devices × 2 micro-batches:
  the same dropout keys and sums, so the same run (tests/test_host_accumulation.py checks the step itself)."""
  from lamb_lars.train import trainer

  results = {}
  for loop in ("unrolled", "host"):
    cfg = paper_config("lamb_b60000")
    cfg.data_dir, cfg.progress, cfg.num_devices = data_dir, False, 2
    cfg.batch_size, cfg.microbatch_size, cfg.num_train_steps = 64, 16, 2
    cfg.eval_every_steps = cfg.checkpoint_every_steps = 2
    cfg.eval_batch_size = 2000
    cfg.microbatch_loop = loop
    cfg.optimizer.schedule.allow_long_warmup = True
    results[loop] = trainer.train_and_evaluate(cfg, str(tmp_path / loop))
  a, h = results["unrolled"]["final"], results["host"]["final"]
  for key in ("train_loss", "eval_loss", "eval_accuracy"):
    np.testing.assert_allclose(h[key], a[key], rtol=1e-5, err_msg=key)
