"""Batch-size studies on the digits workload (examples/digits/workload.py), with lamb_lars unchanged.

Commands (from the repository root):
  python -m lamb_lars.study run --config=examples/digits/ladder.py --workdir=/tmp/digits/ladder
  python -m lamb_lars.study report --workdir=/tmp/digits/ladder --out=/tmp/digits/ladder_report
  python -m lamb_lars.study verify /tmp/digits/ladder_report
  python -m lamb_lars.study branch --config=examples/digits/ladder.py:branching --workdir=/tmp/digits/branching
Hardware: a 2-core CPU, two single-threaded trials at once. The ladder is 12 trials (about 1 min each on a
loaded machine: 6–8 min with 2 workers), the branching study 17.

* ladder (default): the baseline of config.py (momentum 0.9, η = 0.1 at B0 = 32, cosine, wd 5e-4, 20 epochs),
  linear scaling of it at 64 … 1024 (B_L, You et al. 2020 Def. 2.1), and at 512 and 1024 a 'tuned' cell whose LR
  and warmup are searched at that batch (η in [0.1, 5], 3 trials each, ASHA): the technique that sets B_H
  (Def. 2.2). Steps to 95% test accuracy per batch, with the S(B) fit (Shallue et al. 2018), come with the report.
* branching: the critical batch over training by branching (Merrill et al. 2025): a reference at 32, branches at
  32 … 256 from its checkpoints at 1 and 2 epochs, 2 seeds each.
* ':tiny' and ':branching_tiny': the same studies cut to a few trials of 2 epochs, for a smoke test.
"""

import importlib.util
import os

import ml_collections

from lamb_lars.configs.studies import common


def _train_config():
  """config.py beside this file (loaded by path, so the study needs nothing on PYTHONPATH but the workload)."""
  spec = importlib.util.spec_from_file_location("digits_config", os.path.join(os.path.dirname(__file__), "config.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config()


B0 = 32
N_TRAIN = 1257
LADDER = (64, 128, 256, 512, 1024)


def ladder(tiny: bool = False) -> ml_collections.ConfigDict:
  base = _train_config()
  base.progress = False
  base.eval_every_epochs = 1.0
  base.checkpoint_every_epochs = 1.0
  if tiny:
    base.num_epochs = 2.0
  c = ml_collections.ConfigDict()
  c.name = "digits_ladder" + ("_tiny" if tiny else "")
  c.base = base
  c.sweeps = (
    dict(name="baseline", role="baseline", fixed={"batch_size": B0}),
    dict(name="linear", role="linear", grid={"batch_size": (64, 256) if tiny else LADDER}),
    dict(
      name="tuned",
      role="technique",
      technique="tuned",
      grid={"batch_size": (256,) if tiny else (512, 1024)},
      fixed={"optimizer.lr_scaling": "none"},  # the searched LR is the LR at that batch
      search={
        "optimizer.learning_rate": ("log", 0.1, 5.0),
        "optimizer.schedule.warmup_epochs": ("linear", 0.0, 1.0 if tiny else 4.0),
      },
      num_trials=2 if tiny else 3,
      seed=0,
    ),
  )
  c.search = common.search(min_epochs=1 if tiny else 2, reduction_factor=3, max_extensions=0, min_full_budget=0)
  c.replicates = common.replicates(num_seeds=0)
  c.runner = common.runner(num_workers=2, cpus_per_trial=0)
  c.analysis = common.analysis(
    title="Digits (scikit-learn) / small CNN: batch-size ladder",
    num_train=N_TRAIN,
    baseline_epochs=base.num_epochs,
    target_goal=0.5 if tiny else 0.95,
    techniques=("tuned",),
    # The S(B) fit reads the fastest trial of any technique per batch: 'tuned' runs at two batches only, and a fit
    # over two batch sizes measures no B_crit (docs/workloads.md, Studies on your workload).
    target_technique="",
  )
  return c


def branching(tiny: bool = False) -> ml_collections.ConfigDict:
  base = _train_config()
  base.progress = False
  base.optimizer.lr_table = False  # a branch restores the reference's optimizer state
  points = (0.5, 1.0) if tiny else (1.0, 2.0)
  epochs = 2.0 if tiny else 8.0
  c = ml_collections.ConfigDict()
  c.name = "digits_branching" + ("_tiny" if tiny else "")
  c.base = base
  c.sweeps = (
    dict(
      name="reference",
      role="baseline",
      fixed={
        "batch_size": B0,
        "num_epochs": epochs,
        "checkpoint_every_epochs": min(points),
        "eval_every_epochs": min(points),
        "keep_checkpoints": int(epochs / min(points)) + 2,
      },
    ),
    dict(
      name="branch",
      role="branch",
      fixed={"eval_every_epochs": 0.0, "checkpoint_every_epochs": 0.5},
      grid={"batch_size": (32, 64) if tiny else (32, 64, 128, 256), "seed": (1,) if tiny else (1, 2)},
    ),
  )
  c.branching = common.branching(
    points_epochs=points, delta_examples=256 if tiny else 2048, epsilon=0.5, relative=True, loss="validation_loss"
  )
  c.search = common.search()
  c.replicates = common.replicates(num_seeds=0)
  c.runner = common.runner(num_workers=2, cpus_per_trial=0)
  c.analysis = common.analysis(
    title="Digits / small CNN: the critical batch over training, by branching",
    num_train=N_TRAIN,
    baseline_epochs=epochs,
    target_goal=0.95,
  )
  return c


def get_config(part: str = "") -> ml_collections.ConfigDict:
  parts = {
    "": ladder,
    "tiny": lambda: ladder(tiny=True),
    "branching": branching,
    "branching_tiny": lambda: branching(tiny=True),
  }
  if part not in parts:
    raise ValueError(f"examples/digits/ladder.py:{part}: the parts are '', 'tiny', 'branching', 'branching_tiny'.")
  return parts[part]()
