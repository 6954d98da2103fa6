"""The recipes' code path through the real trainer on 8 fake CPU devices (tests/conftest.py).

* a tiny ResNet (lamb_lars/configs/smoke_resnet18.py: ResNet-18, CIFAR stem, 8×8 synthetic images) with BN statistics
  pooled over pairs of devices lowers its training loss;
* CIFAR-10 from ``tfds.testing.mock_data``, whose 72-example eval split does not divide the eval batch of 16: every
  example is evaluated exactly once, with the same result as one unpadded batch of 72;
* gradient accumulation (``num_microbatches=2``) runs through the trainer and equals the one-pass step whose ghost
  BN batches are the micro-batches (same examples per BN group, gradient = mean of the micro-batch gradients);
* every recipe config parses with each of its arguments (as train.py does), validates, plans on its documented
  hardware, and has the paper's *effective* peak LR, warmup, optimizer and step count (no compilation).
"""

import json
import math
import os

import jax
import numpy as np
import pytest
import tensorflow_datasets as tfds
from absl import flags
from ml_collections import config_flags

from lamb_lars.configs import default, smoke_resnet18
from lamb_lars.common import durations
from lamb_lars.train import run_plan
from lamb_lars.optim import optimizer_config, schedules
from lamb_lars.train.trainer import train_and_evaluate

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IMAGENET_TRAIN = 1_281_167

MOCK_EXAMPLES = 72  # per split; 72 = 4 × 16 + 8: the last eval batch of 16 is half padding


def _rows(workdir):
  with open(workdir / "metrics.jsonl") as f:
    return [json.loads(line) for line in f]


def test_eight_fake_devices():
  assert jax.device_count() == 8


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.xla_opt  # trains long enough that the optimised program saves more than it costs (25 s → 18 s here)
def test_tiny_resnet_with_bn_groups_lowers_training_loss(tmp_path):
  cfg = smoke_resnet18.get_config()
  cfg.progress = False
  plan = run_plan.make_plan(cfg, num_train=cfg.synthetic.num_train, num_devices=8)
  assert (plan.per_device_batch, plan.bn.group_devices, plan.bn.ghost_batch_size) == (4, 2, 4)
  result = train_and_evaluate(cfg, str(tmp_path))
  assert result["status"] == "done" and result["step"] == 4
  rows = _rows(tmp_path)
  assert [r["step"] for r in rows] == [2, 4]
  first, last = rows[0]["train_loss"], rows[1]["train_loss"]
  assert first < math.log(10) + 0.3  # starts near chance
  assert last < first - 0.2, (first, last)  # and memorises the 32 examples
  assert all(r["eval_examples"] == 40 for r in rows)
  assert all(np.isfinite(r["eval_loss"]) for r in rows)


def _cifar_config(data_dir, **overrides):
  cfg = default.get_config()
  cfg.dataset = "cifar10"
  cfg.data_dir = data_dir
  cfg.model = "small_cnn"
  cfg.num_classes = 10
  cfg.batch_size = 32  # 72 // 32 = 2 steps per epoch
  cfg.num_train_steps = 2
  cfg.eval_every_epochs = 1.0  # one evaluation, after step 2
  cfg.checkpoint_every_epochs = 0.0
  cfg.progress = False
  cfg.optimizer.learning_rate = 0.1
  cfg.optimizer.lr_scaling = "none"
  cfg.update_from_flattened_dict(overrides)  # dotted keys, e.g. {"optimizer.name": "lars"}
  return cfg


# The two tests that read cifar_runs go to one pytest-xdist worker (--dist loadgroup), which trains the runs once.
ON_CIFAR_WORKER = pytest.mark.xdist_group("resnet_train_cifar")


@pytest.fixture(scope="module")
def cifar_runs(tmp_path_factory):
  """Two runs on the same mocked CIFAR-10: accumulated + padded eval, and one pass + one exact eval batch."""
  root = tmp_path_factory.mktemp("cifar")
  data_dir = str(root / "tfds")
  configs = {
    # 2 examples per device per micro-batch; BN groups of 2 devices × 2 examples.
    "accumulated": _cifar_config(data_dir, num_microbatches=2, eval_batch_size=16, **{"bn.examples_per_group": 4}),
    # 4 examples per device in one pass, split into ghost batches of 2, pooled over 2 devices.
    "one_pass": _cifar_config(
      data_dir, num_microbatches=1, eval_batch_size=MOCK_EXAMPLES, **{"bn.group_devices": 2, "bn.ghost_batch_size": 2}
    ),
  }
  out = {}
  with tfds.testing.mock_data(num_examples=MOCK_EXAMPLES, policy=tfds.testing.MockPolicy.USE_CODE):
    for name, cfg in configs.items():
      plan = run_plan.make_plan(cfg, num_train=MOCK_EXAMPLES, num_devices=8)
      result = train_and_evaluate(cfg, str(root / name))
      out[name] = dict(plan=plan, result=result, rows=_rows(root / name))
  return out


@pytest.mark.slow
@pytest.mark.e2e
@ON_CIFAR_WORKER
def test_eval_counts_every_example_once(cifar_runs):
  padded = cifar_runs["accumulated"]["result"]["final"]
  exact = cifar_runs["one_pass"]["result"]["final"]
  assert MOCK_EXAMPLES % 16 != 0  # the padded run really has a partial last batch
  assert padded["eval_examples"] == exact["eval_examples"] == MOCK_EXAMPLES
  correct = padded["eval_accuracy"] * MOCK_EXAMPLES
  assert abs(correct - round(correct)) < 1e-6  # a whole number of the 72 examples
  np.testing.assert_allclose(padded["eval_accuracy"], exact["eval_accuracy"], rtol=0, atol=1e-9)
  np.testing.assert_allclose(padded["eval_loss"], exact["eval_loss"], rtol=1e-5)


@pytest.mark.slow
@pytest.mark.e2e
@ON_CIFAR_WORKER
def test_gradient_accumulation_through_the_trainer(cifar_runs):
  acc, one = cifar_runs["accumulated"], cifar_runs["one_pass"]
  assert (acc["plan"].num_microbatches, acc["plan"].per_device_batch) == (2, 2)
  assert (one["plan"].num_microbatches, one["plan"].per_device_batch) == (1, 4)
  assert (acc["plan"].bn.group_devices, acc["plan"].bn.ghost_batch_size) == (2, 2)
  assert (one["plan"].bn.group_devices, one["plan"].bn.ghost_batch_size) == (2, 2)
  assert acc["result"]["status"] == "done" and acc["result"]["step"] == 2
  a, b = acc["result"]["final"], one["result"]["final"]
  for key in ("train_loss", "train_accuracy", "grad_norm"):
    assert np.isfinite(a[key])
    np.testing.assert_allclose(a[key], b[key], rtol=1e-5, err_msg=key)


# ----------------------------------------------------------------------------------------- recipe configs


def _w(epochs, batch):
  """Steps covering ``epochs`` of ImageNet at ``batch`` (the recipes count durations in examples)."""
  return math.ceil(epochs * IMAGENET_TRAIN / batch)


SQRT_PEAK = 0.1 * math.sqrt(819_200 / 256)  # ladder rungs 2-3: sqrt scaling from 0.1 at 256
# (config, argument) → devices it is planned on, training examples (default ImageNet), and the paper's / the
# preset's effective numbers: optimizer, batch, peak LR after scaling, warmup steps, label smoothing, ...
RECIPES = {
  ("imagenet_resnet50", ""): dict(devices=8, opt="momentum", batch=256, peak=0.1, warmup=0, ls=0.0, steps=_w(90, 256)),
  ("imagenet_resnet50", "8192"): dict(
    devices=256, opt="momentum", batch=8192, peak=3.2, warmup=_w(5, 8192), lr0=0.1, ls=0.0
  ),
  ("cifar10_resnet50", ""): dict(
    devices=1, n=50_000, opt="momentum", batch=128, peak=0.1, warmup=0, steps=math.ceil(200 * 50_000 / 128)
  ),
  ("imagenet_ladder", "0"): dict(
    devices=256, opt="momentum", batch=819_200, peak=320.0, warmup=0, ls=0.0, steps=141, ghost=128
  ),  # the paper's "141 steps = 90 epochs"
  ("imagenet_ladder", "1"): dict(devices=256, opt="momentum", batch=819_200, peak=320.0, warmup=_w(5, 819_200), ls=0.0),
  ("imagenet_ladder", "2"): dict(
    devices=256, opt="momentum", batch=819_200, peak=SQRT_PEAK, warmup=_w(25, 819_200), ls=0.0
  ),
  ("imagenet_ladder", "3"): dict(
    devices=256, opt="momentum", batch=819_200, peak=SQRT_PEAK, warmup=_w(25, 819_200), ls=0.1
  ),
  ("imagenet_ladder", "4"): dict(
    devices=256, opt="lars", batch=819_200, peak=28.0, warmup=_w(25, 819_200), ls=0.1, momentum=0.94429, steps=141
  ),
  ("imagenet_ladder", ""): dict(devices=1024, opt="lars", batch=819_200, peak=28.0, ghost=32, group=4),
  ("imagenet_lars_128k", ""): dict(
    devices=256,
    opt="lars",
    batch=131_072,
    peak=28.0,
    warmup=_w(25, 131_072),
    ls=0.1,
    momentum=0.94429,
    steps=_w(90, 131_072),
    decay="cosine",
  ),
  ("imagenet_mlperf_lars", "8192"): dict(devices=8, opt="lars", batch=8192, peak=10.0, warmup=_w(5, 8192)),
  ("imagenet_mlperf_lars", "16K"): dict(devices=8, opt="lars", batch=16_384, peak=25.0, warmup=_w(5, 16_384)),
  ("imagenet_mlperf_lars", ""): dict(
    devices=256, opt="lars", batch=32_768, peak=32.0, warmup=_w(14, 32_768), ls=0.1, decay="poly"
  ),
  ("imagenet_mlperf_lars", "65536"): dict(devices=256, opt="lars", batch=65_536, peak=35.6, warmup=_w(40, 65_536)),
  ("imagenet_mlperf_lars", "v4.0"): dict(
    devices=2528,
    opt="lars",
    batch=40_448,
    peak=19.4,
    warmup=_w(24, 40_448),
    momentum=0.95,
    steps=_w(70, 40_448),
    group=2,
    ghost=16,
  ),
  ("smoke_resnet18", ""): dict(devices=8, n=32, opt="lars", batch=32, peak=10.0, warmup=0, group=2),
}


def _parse(name, arg):
  """Like ``train.py --config=lamb_lars/configs/NAME.py[:ARG]``: config_flags with a locked config."""
  argv = ["prog", f"--config={os.path.join(ROOT, 'lamb_lars', 'configs', name + '.py')}" + (f":{arg}" if arg else "")]
  fv = flags.FlagValues()
  config_flags.DEFINE_config_file("config", None, flag_values=fv, lock_config=True, sys_argv=argv)
  fv(argv)
  return fv.config


@pytest.mark.parametrize("name,arg", list(RECIPES), ids=[f"{n}:{a}" for n, a in RECIPES])
def test_recipe_has_the_papers_effective_numbers(name, arg):
  want = RECIPES[(name, arg)]
  cfg = _parse(name, arg)
  optimizer_config.validate_config(cfg.optimizer)
  plan = run_plan.make_plan(cfg, num_train=want.get("n", IMAGENET_TRAIN), num_devices=want["devices"])
  opt = cfg.optimizer
  assert (opt.name, plan.batch_size) == (want["opt"], want["batch"])
  peak = schedules.scale_learning_rate(opt.learning_rate, plan.batch_size, opt.base_batch_size, opt.lr_scaling)
  np.testing.assert_allclose(peak, want["peak"], rtol=1e-12)
  kw = dict(num_train=plan.num_train, batch_size=plan.batch_size, total_steps=plan.total_steps)
  warmup = durations.steps("warmup", opt.schedule, default=0, **kw)
  assert warmup == plan.warmup_steps
  if "warmup" in want:
    assert warmup == want["warmup"]
  lr = schedules.create_schedule(opt.schedule, peak, **kw)
  np.testing.assert_allclose(float(lr(warmup)), peak, rtol=1e-6)  # the peak is reached after warmup
  if "lr0" in want:  # warmup from f0·η = lr0: the first update uses lr0 + (η − lr0)/W
    np.testing.assert_allclose(float(lr(0)), want["lr0"] + (peak - want["lr0"]) / warmup, rtol=1e-6)
  for key, attr in (
    ("ls", cfg.label_smoothing),
    ("momentum", opt.momentum),
    ("steps", plan.total_steps),
    ("decay", opt.schedule.decay),
    ("ghost", plan.bn.ghost_batch_size),
    ("group", plan.bn.group_devices),
  ):
    if key in want:
      assert attr == want[key], key
  if name.startswith("imagenet"):
    assert (cfg.dataset, cfg.model, cfg.num_classes) == ("imagenet2012", "resnet50", 1000)
    assert cfg.eval_batch_size % want["devices"] == 0


def test_ladder_rejects_unknown_rungs():
  with pytest.raises(Exception, match="rung"):
    _parse("imagenet_ladder", "5")
