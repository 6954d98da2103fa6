"""Issue 40's "every study runs on a user workload unchanged", for the two study kinds tests/test_examples_digits.py
does not run: Table-3-style cells (solver × variant at one batch) and batch-size warmup arms, on a model and a loader
defined in a folder outside the repository; each study is run, reported and verified through the CLI."""

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

WORKLOAD = textwrap.dedent('''
    """A researcher's workload, outside lamb_lars: a conv + BatchNorm net and three-class 8×8 images."""
    from typing import Any, Callable
    import flax.linen as nn
    import jax.numpy as jnp
    import numpy as np


    class Net(nn.Module):
      num_classes: int
      dtype: Any = jnp.float32
      norm: Callable[..., nn.Module] = nn.BatchNorm

      @nn.compact
      def __call__(self, x, train: bool):
        x = nn.Conv(8, (3, 3), dtype=self.dtype, name="conv")(x.astype(self.dtype))
        x = nn.relu(self.norm(use_running_average=not train, dtype=self.dtype, name="bn")(x))
        return nn.Dense(self.num_classes, dtype=self.dtype, name="head")(x.mean((1, 2))).astype(jnp.float32)


    def _images(n, seed):
      rng = np.random.default_rng(seed)
      labels = rng.integers(0, 3, n)
      return (rng.random((n, 8, 8, 1)) * 80 + labels[:, None, None, None] * 80).astype(np.uint8), labels


    def load():
      return {"train": _images(128, 0), "validation": _images(32, 2), "test": _images(40, 1)}
    ''')

STUDIES = textwrap.dedent('''
    """Table-3-style cells and batch-size warmup arms on uwstudy_workload (tests/test_user_workload_studies.py)."""
    import ml_collections
    from lamb_lars.configs import default
    from lamb_lars.configs.studies import common


    def _base():
      base = default.get_config()
      base.model, base.dataset, base.num_classes = "uwstudy_workload:Net", "uwstudy_workload:load", 3
      base.num_epochs, base.eval_every_epochs, base.eval_batch_size, base.progress = 2.0, 1.0, 20, False
      base.diagnostics.noise_scale = False
      base.optimizer.base_batch_size, base.optimizer.learning_rate = 16, 0.05
      return base


    def table3():
      base = _base()
      base.optimizer.lr_scaling = "none"
      c = ml_collections.ConfigDict()
      c.name, c.base = "uw_table3", base
      cell = lambda name, solver, batch, variant, lr: dict(
          name=name, role="table3", variant=variant,
          fixed={"batch_size": batch, "optimizer.name": solver, "optimizer.learning_rate": lr,
                 **common.VARIANT_KEYS[variant]})
      c.sweeps = (cell("b16-momentum", "momentum", 16, "original", 0.05),
                  cell("b32-momentum", "momentum", 32, "original", 0.1),
                  cell("b32-momentum-layerwise", "momentum", 32, "layerwise", 0.1),
                  cell("b32-lars", "lars", 32, "original", 1.0))
      c.search = common.search()
      c.replicates = common.replicates(num_seeds=0)
      c.runner = common.runner(num_workers=2, cpus_per_trial=0)
      c.analysis = common.analysis(title="user workload: Table-3 cells", num_train=128, baseline_epochs=2.0,
                                   table3_batch=32, target_goal=0.5)
      return c


    def warmup():
      base = _base()
      base.data_order, base.batch_size = "examples", 16
      base.batch_schedule_unit, base.batch_schedule_lr = "examples", "linear"
      base.optimizer.lr_table = False
      c = ml_collections.ConfigDict()
      c.name, c.base = "uw_warmup", base
      c.sweeps = (dict(name="fixed_16", role="warmup", technique="fixed_16", fixed={}),
                  dict(name="warmup", role="warmup", technique="warmup", fixed={"batch_schedule": "64:32"}))
      c.search = common.search()
      c.replicates = common.replicates(num_seeds=0)
      c.runner = common.runner(num_workers=2, cpus_per_trial=0)
      c.analysis = common.analysis(title="user workload: batch-size warmup", num_train=128, baseline_epochs=2.0,
                                   target_goal=0.5)
      return c


    def get_config(part):
      return {"table3": table3, "warmup": warmup}[part]()
    ''')


def _run(args, cwd, env, timeout=600):
  proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
  assert proc.returncode == 0, f"{args}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
  return proc.stdout


@pytest.mark.slow
@pytest.mark.parametrize("part", ["table3", "warmup"])
def test_table3_cells_and_batch_warmup_on_a_user_workload(tmp_path, part):
  (tmp_path / "uwstudy_workload.py").write_text(WORKLOAD)
  (tmp_path / "uw_studies.py").write_text(STUDIES)
  env = {**os.environ, "PYTHONPATH": ROOT}
  env.pop("XLA_FLAGS", None)
  study = [sys.executable, "-m", "lamb_lars.study"]
  _run(study + ["run", f"--config=uw_studies.py:{part}", "--workdir=w"], tmp_path, env)
  _run(study + ["report", "--workdir=w", "--out=report"], tmp_path, env)
  assert "verified" in _run(study + ["verify", "report"], tmp_path, env)
  manifest = json.load(open(tmp_path / "report" / "manifest.json"))
  assert set(manifest["workload"]) == {"uwstudy_workload:Net", "uwstudy_workload:load"}
  readme = open(tmp_path / "report" / "README.md").read()
  runs = open(tmp_path / "report" / "runs.csv").read()
  if part == "table3":
    assert "b32-momentum-layerwise" in runs and "## Table 3: optimizer × layer-wise variants" in readme
    table = readme.split("## Table 3: optimizer × layer-wise variants")[1].split("\n## ")[0]
    assert "lars" in table and "momentum" in table, table
  else:
    assert "64:32" in runs and "## Batch-size warmup against fixed batches" in readme
  assert not any(name.startswith("uwstudy") for name in os.listdir(os.path.join(ROOT, "lamb_lars")))
  shutil.rmtree(tmp_path / "w")
