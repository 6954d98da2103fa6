"""``python train.py --help`` lists the run configs and the most-used keys with their defaults."""

import ast
import glob
import os
import subprocess
import sys

import pytest

from lamb_lars.configs import default
from lamb_lars.common import cli_help

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_help_lists_every_run_config_and_the_main_keys():
  text = cli_help.usage().replace("%%", "%")
  for path in glob.glob(os.path.join(REPO, "lamb_lars", "configs", "*.py")):
    name = os.path.basename(path)
    if name in ("__init__.py", "optimizer.py"):  # not run configs (optimizer.py is the config.optimizer subtree)
      assert f"  lamb_lars/configs/{name} " not in text
      continue
    doc = ast.get_docstring(ast.parse(open(path, encoding="utf-8").read())).splitlines()[0]
    assert f"  lamb_lars/configs/{name} " in text and doc in text, name
  config = default.get_config()
  assert f"batch_size={config.batch_size!r}" in text and "global batch" in text
  assert f"optimizer.name={config.optimizer.name!r}" in text and "lars | lamb" in text
  assert f"optimizer.schedule.warmup_epochs={config.optimizer.schedule.warmup_epochs!r}" in text


@pytest.mark.slow
@pytest.mark.e2e
def test_train_help_on_the_command_line():
  out = subprocess.run(
    [sys.executable, "train.py", "--help"],
    cwd=REPO,
    capture_output=True,
    text=True,
    timeout=300,
    env={**os.environ, "PYTHONPATH": REPO},
  )
  text = out.stdout + out.stderr
  assert out.returncode == 0, text  # asking for help is not a failure (absl alone exits 1)
  assert "lamb_lars/configs/mnist_lenet.py" in text and "optimizer.learning_rate=None" in text and "--workdir" in text
  keys = text.split("Most-used keys")[1].split("TensorBoard:")[0].splitlines()[1:]
  assert all(line.count("(") == line.count(")") and not line.rstrip().endswith(",") for line in keys), keys
  assert "93.9% top-1" in text  # a '%' in a docstring survives absl's %-formatting of the help text


@pytest.mark.slow
@pytest.mark.parametrize("sub", ["verify", "rereport"])
def test_study_subcommand_help_exits_0_with_the_usage(sub):
  """``verify`` and ``rereport`` take folders, not absl flags; their ``--help`` is the study usage, exit 0."""
  out = subprocess.run(
    [sys.executable, "-m", "lamb_lars.study", sub, "--help"],
    cwd=REPO,
    capture_output=True,
    text=True,
    timeout=120,
    env={**os.environ, "PYTHONPATH": REPO},
  )
  assert out.returncode == 0 and out.stderr == "", out.stderr
  assert f"python -m lamb_lars.study {sub} docs/studies/" in out.stdout
