"""The critical batch over training, measured by branching (Merrill et al. 2025, arXiv:2505.23971), on MNIST /
LeNet-5; B_simple of the same reference run beside it (McCandlish et al. 2018). See docs/studies.md.

Command:  python -m lamb_lars.study branch --config=lamb_lars/configs/studies/mnist_branching.py \\
              --workdir=studies/mnist_branching
          python -m lamb_lars.study report --workdir=studies/mnist_branching --out=docs/studies/mnist_branching
          (a quick try: --config=lamb_lars/configs/studies/mnist_branching.py:smoke, synthetic data, about 2 min;
          ':sqrt': the same branches at the square-root LR rule, into studies/mnist_branching_sqrt)
Hardware: a quiet 2-core CPU, two single-threaded trials at once (runner defaults).
Cost (measured 2026-11-25 on the shared 2-core CPU, one worker at nice 15, the 1-epoch point only): the reference
183 s (16 epochs with an eval and a checkpoint every quarter epoch); a branch 18–35 s, mean 24 s (start-up and
compiling included). The whole study, 126 branches on 2 workers: ≈ 3 + 126·24/2/60 ≈ 28 min.
Expected (Merrill et al.'s finding, to be tested here): CBS(t) small at the first points, rising, then flat. That
first try at 1 epoch (ε below): 512 passes, 1024 is borderline (one seed +0.020), 2048 borderline (two of three
seeds end near chance), 4096 fails: CBS(1 epoch) ∈ [512, 2048], while B_simple there is 44.

* reference: the ladder's baseline recipe (lamb_lars/configs/studies/mnist_batch_ladder.py: momentum 0.9, η = 0.05 at
  B0 = 256, cosine decay, wd 5e-4, 55K/5K split, 2 micro-batches of 128 so that the trainer logs B_simple) trained
  16 epochs instead of 30, with an evaluation and a checkpoint every quarter epoch, all kept. Why 16: the last
  branch point is 8 epochs, where the 16-epoch cosine is at half its peak LR, so the points span the warm early
  phase and the decay; a branch point near the end of any cosine run branches at an LR near 0, where every batch
  trivially ties. Cost is a minor reason (the reference takes 3 min at 16 epochs, ≈ 6 at 30): the branches are
  the cost.
* branch points 0.25, 0.5, 1, 2, 4, 8 epochs, each moved to the reference's first checkpoint at or after it (every
  54 steps = 0.2513 epochs at B0 = 256: 0.25, 0.50, 1.01, 2.01, 4.02 and 8.04 epochs); the report gives the exact
  points.
* branches at 256 (the reference's own continuation, the pair of every comparison), 512, …, 16384; 3 branch
  seeds (1, 2, 3: each seed at every batch from the same checkpoint, the same examples in the same order).
* Δ = 65,536 examples (1.19 epochs), not exactly 1 epoch: 65,536 = 2¹⁶ is a multiple of every branch batch, so
  every branch trains exactly Δ examples (one epoch of 55,000 would round up to 55,040 examples at 256 and to
  65,536 at 16K, a 19% head start for the largest batch).
* LR: 'linear' (SGD's rule, Goyal et al. 2017): a branch at batch B trains at the constant LR (B/256)·η_ref(t),
  η_ref(t) the reference's cosine LR at the branch point; momentum buffers and counts come from the checkpoint.
* ε: a batch does not lose when the 95% interval of its paired validation-loss differences after Δ lies below
  50% of the mean loss of the 256 branches. Relative, because the loss falls several-fold between the first and the
  last point: an absolute ε would be lax early and strict late. 50% is coarse, and chosen from the noise: with 3
  seeds the paired interval is mean ± 2.5 sd, and at 1 epoch (loss 0.064) it is +0.005 [−0.010, +0.020] at 512, a
  third of the loss; an ε of 5% (0.003, verdict.py's single-run tolerance) left every batch borderline. So the
  test separates batches that train on from batches that blow up or stall (here 2048 and up end near chance),
  not a few per cent of loss; a finer ε needs more seeds (the half-width falls as t_{0.975,k−1}/√k).
"""
import math

import ml_collections

from lamb_lars.configs.studies import common
from lamb_lars.configs.studies import mnist_table3
from lamb_lars.configs.studies import smoke as smoke_study

B0 = 256
FULL = 55000
POINTS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
BATCHES = (256, 512, 1024, 2048, 4096, 8192, 16384)
SEEDS = (1, 2, 3)
DELTA = 65536


def _reference(num_epochs: float, points: tuple, b0: int, micro: int) -> dict:
  """The reference sub-sweep: checkpoints (all kept) and evaluations every quarter epoch."""
  keep = math.ceil(num_epochs / min(points)) + 2
  return dict(name="reference", role="baseline",
              fixed={"batch_size": b0, "microbatch_size": micro, "diagnostics.noise_scale": True,
                     "diagnostics.noise_scale_ema": 0.99, "num_epochs": num_epochs,
                     "checkpoint_every_epochs": min(points), "eval_every_epochs": min(points),
                     "keep_checkpoints": keep})


def _branch(batches: tuple, seeds: tuple, micro: int) -> dict:
  """The branch sub-sweep: evaluated once, at its end; no noise scale (the reference's is the one reported)."""
  return dict(name="branch", role="branch",
              fixed={"microbatch_size": micro, "diagnostics.noise_scale": False, "eval_every_epochs": 0.0,
                     "checkpoint_every_epochs": 0.5},
              grid={"batch_size": batches, "seed": seeds})


def _smoke() -> ml_collections.ConfigDict:
  """Synthetic data (384 training examples), 2 points × 2 batches × 2 seeds, a few steps each."""
  c = ml_collections.ConfigDict()
  c.name = "mnist_branching_smoke"
  c.base = smoke_study.get_config().base
  c.base.optimizer.schedule.decay = "cosine"
  c.sweeps = (_reference(2.0, (0.25, 0.5), 32, 16), _branch((32, 64), (1, 2), 0))
  c.branching = common.branching(points_epochs=(0.25, 0.5), delta_examples=128, epsilon=0.05, relative=True)
  c.search = common.search()
  c.replicates = common.replicates(num_seeds=0)
  c.runner = common.runner(cpus_per_trial=0)
  c.analysis = common.analysis(title="Branching smoke study", num_train=384, baseline_epochs=2.0)
  return c


# ':prereg' and ':sqrt_prereg' (issue 41, published): the same study with 8 branch seeds and ε pre-registered at
# 20% of the loss before any of these trials ran (the published ε = 50% was chosen after looking at 3 seeds; at 5–20%
# those left the lower end of CBS undetermined at 5 of 6 points). With 8 seeds the paired interval's half-width is
# t_{0.975,7}/√8 = 0.84 sd instead of t_{0.975,2}/√3 = 2.48 sd, about 3× narrower. The report shows CBS(t) at 5, 10,
# 20 and 50% beside it (``epsilon_sensitivity``). Expected cost, from the published folders' recorded times (runs.csv
# ``wall_time``, shared 2-core CPU): a branch 14 s on average (18–35 s under heavier load), the reference 83–183 s;
# 6 points × 7 batches × 8 seeds = 336 branches ≈ 336 × 14–24 s / 2 workers ≈ 40–67 min, plus ≈ 3 min for the
# reference, per rule (linear or square-root). Measured (runs.csv ``wall_time`` of the published folders, 337 trials
# each, beside other work): 71.3 min of training for :prereg (22:59–23:59 UTC), 109.9 min for :sqrt_prereg
# (23:59–02:08 UTC).
PREREG_SEEDS = (1, 2, 3, 4, 5, 6, 7, 8)
PREREG_EPSILON = 0.2
EPSILON_SENSITIVITY = (0.05, 0.1, 0.2, 0.5)

# ':sqrt_prereg_ref2' (issue 59, the referee's point 5): the square-root CBS(t) rests on one reference run. This
# variant repeats :sqrt_prereg from a second reference seed (REF2_SEED; the first reference ran with the base seed 0)
# at the branch points the published batch-size warmup and the calibration's early claim rest on (REF2_POINTS: every
# point where the implied schedule doubles the batch), with the same batches, branch seeds, Δ, LR rule and ε
# (PREREG_EPSILON, with EPSILON_SENSITIVITY). Pre-registered here, in a commit of its own, before its first trial:
# * per point, the two references' CBS brackets [low, high] at ε = 20% **agree** when they are equal, **overlap**
#   when they share a batch size (their intervals of batch sizes intersect), and **differ** when they do not
#   intersect; the first reference's brackets are docs/studies/mnist_branching_sqrt_prereg's;
# * the headline: whether the batch-size warmup that the second reference implies (the same doubling rule) is the
#   published one (mnist_batch_warmup.SQRT_SCHEDULE), batch by batch;
# * the ε sensitivity columns are read the same way, as a sensitivity.
# Expected cost, from mnist_branching_sqrt_prereg's runs.csv ``wall_time`` (109.9 min of training for 337 trials,
# 19.6 s each, beside other work): 4 points × 7 batches × 8 seeds = 224 branches ≈ 73 min of training, plus the
# 16-epoch reference (≈ 3 min), ≈ 40 min of wall time on 2 workers.
REF2_SEED = 100
REF2_POINTS = (0.25, 0.5, 1.0, 2.0)


def sqrt_prereg_ref2_config() -> ml_collections.ConfigDict:
  """``:sqrt_prereg_ref2`` (issue 59; the comment above).

  Command:  python -m lamb_lars.study branch --config=lamb_lars/configs/studies/mnist_branching.py:sqrt_prereg_ref2 \\
                --workdir=studies/mnist_branching_sqrt_prereg_ref2
            python -m lamb_lars.study report --workdir=studies/mnist_branching_sqrt_prereg_ref2 \\
                --out=docs/studies/mnist_branching_sqrt_prereg_ref2
  """
  c = get_config("sqrt_prereg")
  c.name = "mnist_branching_sqrt_prereg_ref2"
  branch = dict(c.sweeps[1])
  ref = _reference(16.0, REF2_POINTS, B0, B0 // 2)
  ref["fixed"] = dict(ref["fixed"], seed=REF2_SEED)
  c.sweeps = (ref, branch)
  c.branching.points_epochs = REF2_POINTS
  c.analysis.title += f", second reference (seed {REF2_SEED}) at {len(REF2_POINTS)} points"
  return c


def get_config(variant: str = "") -> ml_collections.ConfigDict:
  if variant == "smoke":
    return _smoke()
  if variant == "sqrt_prereg_ref2":
    return sqrt_prereg_ref2_config()
  if variant not in ("", "sqrt", "prereg", "sqrt_prereg"):
    raise ValueError(f"unknown variant {variant!r} of mnist_branching; use '', 'sqrt', 'prereg', 'sqrt_prereg', "
                     "'sqrt_prereg_ref2' or 'smoke'.")
  prereg = variant.endswith("prereg")
  rule = "sqrt" if variant.startswith("sqrt") else "linear"
  c = ml_collections.ConfigDict()
  c.name = "mnist_branching" + ("_sqrt" if rule == "sqrt" else "") + ("_prereg" if prereg else "")
  c.base = mnist_table3.base_config()
  c.base.stop.dead_after_fraction = 0.0   # a 1-epoch branch at chance is a result (it loses), not a dead run
  c.base.optimizer.lr_table = False      # a branch restores the reference's optimizer state: no LR table in it
  c.sweeps = (_reference(16.0, POINTS, B0, B0 // 2), _branch(BATCHES, PREREG_SEEDS if prereg else SEEDS, 256))
  # ':sqrt': the same branches at (B/256)^½·η_ref(t), to tell a CBS bounded by the linear rule's instability from
  # one bounded by the batch (docs/studies/mnist_branching_prereg/discussion.md).
  c.branching = common.branching(points_epochs=POINTS, delta_examples=DELTA, lr_rule=rule,
                                 lr_multiplier=1.0,
                                 epsilon=PREREG_EPSILON if prereg else 0.5, relative=True, loss="validation_loss",
                                 **({"epsilon_sensitivity": EPSILON_SENSITIVITY} if prereg else {}))
  c.search = common.search()
  c.replicates = common.replicates(num_seeds=0)   # the branch seeds are the replicates
  c.runner = common.runner()
  c.analysis = common.analysis(
      title="MNIST / LeNet-5: the critical batch over training, by branching (Merrill et al. 2025)"
      + (", square-root LR rule" if rule == "sqrt" else "")
      + (f", {len(PREREG_SEEDS)} seeds, ε = {100 * PREREG_EPSILON:g}% pre-registered" if prereg else ""),
      paper="", num_train=FULL, baseline_epochs=16.0, target_goal=0.99)
  return c
