"""A tiny study for tests and for trying the runner: synthetic 28×28 data, LeNet-5, a few steps per trial.

Command:  python -m lamb_lars.study run --config=lamb_lars/configs/studies/smoke.py --workdir=/tmp/studies/smoke
          python -m lamb_lars.study report --workdir=/tmp/studies/smoke
Hardware: any CPU; ~5–10 s per trial here (mostly start-up and compilation).
Expected: 8 trials — a baseline at 32, linear scaling at 64 and 128, a searched technique cell of 4 trials at 128
(ASHA prunes the ones behind at epoch 1) and a Table 3 cell; the report with runs.csv, evals.csv and PNGs.
"""
import ml_collections

from lamb_lars.configs import default
from lamb_lars.configs.studies import common


def get_config():
  base = default.get_config()
  base.dataset = "synthetic"
  base.synthetic.num_train = 512
  base.synthetic.num_eval = 128
  base.validation_split = 128
  base.model = "lenet5"
  base.num_epochs = 3.0
  base.eval_every_epochs = 1.0
  base.checkpoint_every_epochs = 1.0
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
      dict(name="baseline", role="baseline", fixed={"batch_size": 32}),
      dict(name="linear", role="linear", grid={"batch_size": (64, 128)}),
      dict(name="tuned", role="technique", technique="tuned", fixed={"batch_size": 128},
           search={"optimizer.learning_rate": ("log", 0.005, 0.5)}, num_trials=4, seed=0),
      dict(name="t3", role="table3", variant="layerwise", fixed={"batch_size": 128, "optimizer.layerwise": True}),
  )
  # Off here so the study stays 8 trials (the runner tests kill and resume it); turn them on with
  # --config.replicates.num_seeds=3 --config.search.min_full_budget=2 --config.search.max_extensions=1.
  c.search = common.search(min_epochs=1, reduction_factor=3, max_extensions=0, min_full_budget=0)
  c.replicates = common.replicates(num_seeds=0)
  c.runner = common.runner(num_workers=1, cpus_per_trial=0)
  c.analysis = common.analysis(title="Smoke study", target_goal=0.05, num_train=512, baseline_epochs=3.0,
                               techniques=("tuned",), target_technique="tuned")
  return c
