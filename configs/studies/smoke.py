"""A tiny study for tests and for trying the runner: synthetic 28×28 data, LeNet-5, a few steps per run.

Command:  python -m lamb_lars.study run --config=configs/studies/smoke.py --workdir=/tmp/studies/smoke
          python -m lamb_lars.study report --workdir=/tmp/studies/smoke
Hardware: any CPU. Takes ~10–20 s per run here (mostly start-up and compilation).
Expected: 5 runs done (batch 32/64/128 momentum, 128 layer-wise, 128 sqrt scaling); the report with PNGs.
Tests add an absurd-LR trial (diverged) and a bad-config trial (failed) via ``extra_sweeps``.
"""
import ml_collections

from configs import default
from configs.studies import common


def get_config():
  base = default.get_config()
  base.dataset = "synthetic"
  base.synthetic.num_train = 512
  base.synthetic.num_eval = 128
  base.model = "lenet5"
  base.num_train_steps = 4
  base.eval_every_epochs = 0.125
  base.checkpoint_every_epochs = 0.125
  base.eval_batch_size = 128
  base.progress = False
  base.diagnostics.noise_scale = False
  opt = base.optimizer
  opt.name = "momentum"
  opt.learning_rate = 0.05
  opt.base_batch_size = 32
  opt.lr_scaling = "linear"
  opt.schedule.decay = "constant"

  c = ml_collections.ConfigDict()
  c.name = "smoke"
  c.base = base
  c.sweeps = (
      dict(name="ladder", grid={"batch_size": (32, 64, 128)}),
      dict(name="lw", variant="layerwise", fixed={"batch_size": 128, "optimizer.layerwise": True}),
      dict(name="sqrt", fixed={"batch_size": 128, "optimizer.lr_scaling": "sqrt"}),
  )
  c.analysis = common.analysis(title="Smoke study", target_goal=0.05, baseline_batch=32, num_train=512)
  c.runner = common.runner()
  return c
