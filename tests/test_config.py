"""Configs load, override from the command line, and fail loudly on a misspelled key."""

import glob
import os
import subprocess
import sys

import pytest
from absl import flags
from ml_collections import config_flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = sorted(
  p
  for p in glob.glob(os.path.join(ROOT, "lamb_lars", "configs", "**", "*.py"), recursive=True)
  + glob.glob(os.path.join(ROOT, "lamb_lars", "proj", "*", "configs", "*.py"))
  if "def get_config" in open(p).read()
)


def parse(*args, path="lamb_lars/configs/mnist_lenet.py"):
  fv = flags.FlagValues()
  config_flags.DEFINE_config_file(
    "config", os.path.join(ROOT, path), flag_values=fv, lock_config=True, sys_argv=["prog", *args]
  )
  fv(["prog", *args])
  return fv.config


def test_overrides_apply():
  cfg = parse("--config.batch_size=8192", "--config.num_epochs=5", "--config.optimizer.name=lamb")
  assert (cfg.batch_size, cfg.num_epochs, cfg.optimizer.name) == (8192, 5.0, "lamb")


def test_baseline_values():
  cfg = parse()
  assert (cfg.model, cfg.dataset, cfg.batch_size, cfg.num_epochs) == ("lenet5", "mnist", 256, 30.0)


def test_misspelled_key_fails_naming_it():
  with pytest.raises(Exception, match="batch_sise"):
    parse("--config.batch_sise=8192")


@pytest.mark.slow
@pytest.mark.e2e
def test_misspelled_key_fails_on_the_command_line(tmp_path):
  out = subprocess.run(
    [
      sys.executable,
      "train.py",
      "--config=lamb_lars/configs/mnist_lenet.py",
      f"--workdir={tmp_path}",
      "--config.optimizer.nmae=lamb",
    ],
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=120,
  )
  assert out.returncode != 0
  assert "nmae" in out.stderr


@pytest.mark.slow
@pytest.mark.e2e
def test_bad_value_is_one_sentence(tmp_path):
  out = subprocess.run(
    [
      sys.executable,
      "train.py",
      "--config=lamb_lars/configs/mnist_lenet.py",
      f"--workdir={tmp_path}",
      "--config.batch_size=100",
      "--config.num_devices=8",
    ],
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=120,
    env={**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=8"},
  )
  assert out.returncode == 2, out.stderr[-2000:]
  assert "error: config.batch_size=100 is not divisible by 8 devices" in out.stderr
  assert "Traceback" not in out.stderr


@pytest.mark.parametrize("path", CONFIGS, ids=[os.path.relpath(p, ROOT) for p in CONFIGS])
def test_every_config_loads_and_validates(path):
  from lamb_lars.optim import optimizer_config

  cfg = parse(path=os.path.relpath(path, ROOT))
  if "optimizer" in cfg:
    optimizer_config.validate_config(cfg.optimizer)
  assert cfg.__doc__ if hasattr(cfg, "__doc__") else True
  with open(path) as f:
    doc = f.read()
  assert "Command" in doc or "command" in doc, f"{path} docstring should state its command"


def test_configs_are_data():
  """Configs import only ml_collections and other configs (flax / big_vision style); the library validates them."""
  import ast

  for path in glob.glob(os.path.join(ROOT, "lamb_lars", "configs", "*.py")) + glob.glob(
    os.path.join(ROOT, "lamb_lars", "proj", "*", "configs", "*.py")
  ):
    for node in ast.walk(ast.parse(open(path).read())):
      names = (
        [a.name for a in node.names]
        if isinstance(node, ast.Import)
        else ([node.module or ""] if isinstance(node, ast.ImportFrom) else [])
      )
      for name in names:
        assert (
          name.split(".")[0] in ("ml_collections", "math", "__future__", "typing")
          or name.startswith("lamb_lars.configs")
          or name.startswith("lamb_lars.proj.")
          and ".configs" in name
        ), (path, name)
