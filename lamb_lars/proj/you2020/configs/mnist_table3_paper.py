"""You et al. 2020 Table 3 on the workload the authors actually ran: TensorFlow's official MNIST CNN (3.3M
parameters, dropout 0.4) with their schedule (linear warmup from 0, then TF polynomial decay, power 0.5, to 1e-4),
not LeNet-5 (lamb_lars/proj/you2020/configs/common.py, docs/science.md §7b). Five solvers × {batch 256, 8K original,
8K + layer-wise, 8K + layer-wise + bound}, each cell a search selected on validation accuracy, then replicated.

Command:  python -m lamb_lars.study run --config=lamb_lars/proj/you2020/configs/mnist_table3_paper.py \\
            --workdir=studies/mnist_table3_paper
          python -m lamb_lars.study report --workdir=studies/mnist_table3_paper --out=docs/studies/mnist_table3_paper
          The two CPU cells alone: --config=lamb_lars/proj/you2020/configs/mnist_table3_paper.py:cpu (``cpu_config``).
Hardware: a GPU. Cost estimate: every trial trains ``EPOCHS`` = 34.1 epochs of 55K (the authors' 250 steps at 8K,
          ≈ 1.9M images). On the 2-core CPU, this CNN trains at ≈ 490–710 img/s (docs/BENCHMARKS.md §16), so
          one full trial takes ≈ 45–65 min. With ≈ 7.7 full-run equivalents per cell (8 searched points, ASHA, 3
          replicates; lamb_lars/configs/studies/mnist_table3.py), the 18 cells are ≈ 139 full runs: ≈ 100–150 h on the
          CPU. So run it on a GPU, where PyTorch-class throughput would bring a trial to a few minutes.
          ``:cpu`` is 2 cells × 3 seeds = 6 runs: 3.3 h of one core (measured 2026-11-27, one trial per core beside
          another run: LARS 47–59 min; momentum "original" stopped as diverged at chance after 8.3 epochs, 12–15 min;
          published in docs/studies/mnist_table3_paper_cpu).
Expected (paper, test accuracy %): momentum SGD 99.2 / diverge / 99.2 / 99.2; AdaGrad 99.2 / 98.3 / 99.3 / 99.3;
          RMSprop 99.2 / 98.6 / diverge / 99.0; Adam 99.3 / 99.1 / unstable / 99.4; LARS 99.3 / 99.4.

The search ranges centre on the authors' own settings where their logs give one: momentum 0.08 at batch 1024 (so
0.64 at 8K by linear scaling), LARS 6.0 with 16 warmup epochs at 8K. Elsewhere they reuse the LeNet-5 study's
ranges. The warmup range at 8K reaches 20 epochs, because the authors' LARS warmed up for 16.

``:cpu`` holds the two cells that issue 27 runs on the CPU, at fixed settings with three seeds each (the first trial
plus two replicates):
* LARS 8K as the authors' log ``momentum_lars/best/batch-8192-lr-6.0-warmup-16-poly-0.5-…`` (their LARS: TF
  ``LARSOptimizer``, η = 0.001, β = 1e-4 in the ratio only);
* momentum 8K "original": the authors' batch-1024 momentum recipe (LR 0.08, no warmup) scaled linearly to 8K, LR
  0.64, which the paper reports as diverging.
"""
import ml_collections

from lamb_lars.proj.you2020.configs import common as paper_common
from lamb_lars.configs.studies import common
from lamb_lars.configs.studies import mnist_table3

STEPS_AT_8K = 250
EPOCHS = STEPS_AT_8K * 8192 / 60000       # 34.13: the authors' 8K budget, in epochs so every batch gets the same
NUM_TRIALS = 8
# The LeNet-5 study's ranges, except LARS at 8K around the authors' 6.0 (their TF LARS, not ours).
LR_RANGES = {**mnist_table3.LR_RANGES, "lars": dict(bs256=(0.1, 10.0), original=(1.0, 30.0))}
WARMUP = {256: (0.0, 2.0), 8192: (0.0, 20.0)}
# The authors' LARS (lamb_lars/proj/you2020/configs/common.py ``lars``): TF LARSOptimizer, η = 0.001, β = 1e-4 in the
# ratio only, ε = 0, every variable.
TF_LARS = {"optimizer.lars_update": "tf", "optimizer.weight_decay": 1e-4, "optimizer.trust_coefficient": 0.001,
           "optimizer.trust_eps": 0.0, "optimizer.weight_decay_mask": "", "optimizer.adaptation_mask": ""}


def base_config() -> ml_collections.ConfigDict:
  """The authors' CNN and schedule (lamb_lars/proj/you2020/configs/common.py) on the 55K/5K/10K split: selection on
  the 5K."""
  base = paper_common.base(batch_size=8192, steps=STEPS_AT_8K, learning_rate=0.64)
  base = paper_common.momentum(base, warmup_epochs=0.0)
  base.num_train_steps = -1
  base.num_epochs = EPOCHS
  base.validation_split = 5000
  base.progress = False
  base.eval_every_steps = -1
  base.eval_every_epochs = 2.0
  base.checkpoint_every_steps = -1
  base.checkpoint_every_epochs = 2.0
  base.stop.dead_after_fraction = 0.2
  # Trials run one per core, single-threaded, where one compiled call per micro-batch is as fast as the unrolled
  # loop and needs half the memory (docs/BENCHMARKS.md §26).
  base.microbatch_loop = "host"
  return base


def _cell(name: str, solver: str, batch: int, variant: str, seed: int) -> dict:
  col = "bs256" if batch == 256 else "original" if variant == "original" else "layerwise"
  fixed = {"batch_size": batch, "optimizer.name": solver, **common.VARIANT_KEYS[variant]}
  if solver == "lars":
    fixed.update(TF_LARS)
  return dict(name=name, role="table3", variant=variant, fixed=fixed,
              search={"optimizer.learning_rate": ("log",) + LR_RANGES[solver][col],
                      "optimizer.schedule.warmup_epochs": ("linear",) + WARMUP[batch]},
              num_trials=NUM_TRIALS, seed=seed)


def sweeps() -> tuple:
  out, seed = [], 300
  for solver in LR_RANGES:
    variants = ("original",) if solver == "lars" else ("original", "layerwise", "layerwise_bound")
    for batch, cols in ((256, ("original",)), (8192, variants)):
      for v in cols:
        suffix = "" if batch == 256 else "-" + v.replace("_", "")
        out.append(_cell(f"{'bs256' if batch == 256 else 'b8k'}-{solver}{suffix}", solver, batch, v, seed))
        seed += 1
  return tuple(out)


def _study(name: str, sweeps_: tuple) -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.name = name
  c.base = base_config()
  c.sweeps = sweeps_
  c.search = common.search()
  c.runner = common.runner()
  c.analysis = common.analysis(
      title="MNIST / the authors' CNN: You et al. 2020 Table 3 on their workload (tuned per cell, replicated)",
      paper="mnist_lenet", num_train=55000, baseline_epochs=EPOCHS, table3_batch=8192)
  c.replicates = common.replicates(num_seeds=3)
  return c


def cpu_config() -> ml_collections.ConfigDict:
  """The two cells run on the CPU (module docstring): fixed settings, three seeds each."""
  lars = dict(name="b8k-lars-authors", role="table3", variant="original",
              fixed={"batch_size": 8192, "optimizer.name": "lars", **TF_LARS, "optimizer.learning_rate": 6.0,
                     "optimizer.schedule.warmup_epochs": 16.0})
  momentum = dict(name="b8k-momentum-original-linear", role="table3", variant="original",
                  fixed={"batch_size": 8192, "optimizer.name": "momentum", "optimizer.learning_rate": 0.64,
                         "optimizer.schedule.warmup_epochs": 0.0})
  c = _study("mnist_table3_paper_cpu", (lars, momentum))
  c.replicates = common.replicates(num_seeds=2)  # the first trial + 2 replicates = 3 seeds per cell
  return c


def get_config(part: str = "") -> ml_collections.ConfigDict:
  if part == "cpu":
    return cpu_config()
  if part:
    raise ValueError(f"mnist_table3_paper.py:{part}: the one part is 'cpu'.")
  return _study("mnist_table3_paper", sweeps())
