"""Batch-size warmup against fixed batches on MNIST / LeNet-5 (issue 26; Merrill et al. 2025, "Critical Batch Size
Revisited", arXiv:2505.23971, §5; Smith et al. 2017, "Don't Decay the Learning Rate, Increase the Batch Size").

Command:  python -m lamb_lars.study run --config=lamb_lars/configs/studies/mnist_batch_warmup.py \\
            --workdir=studies/mnist_batch_warmup
          python -m lamb_lars.study report --workdir=studies/mnist_batch_warmup --out=docs/studies/mnist_batch_warmup
Hardware: the 2-core CPU, two single-threaded trials at once (runner defaults). Cost: 12 runs of 16 epochs.

Every arm (role ``warmup``; lamb_lars/study/analysis/batch_warmup.py) is the reference recipe of the branching study
(lamb_lars/configs/studies/mnist_branching.py: the ladder's baseline, momentum 0.9, η = 0.05 at 256 scaled linearly,
cosine decay over 16 epochs, wd 5e-4, 55K/5K split), with ``data_order='examples'``, so that seed s of every arm sees
the same examples in the same order. Each runs 16 epochs (880,000 examples), is evaluated every quarter epoch, with
seeds 0, 1, 2 (the seed-0 trial and two replicates):

* ``fixed_256``: the base batch B0 = 256 throughout (3,438 steps);
* ``warmup``: :data:`SCHEDULE`, the batch-size warmup that the measured CBS(t) implies
  (docs/studies/mnist_branching, superseded, in git at 80c425a: double the batch while the conservative end of the
  CBS bracket, ``low``, is at least twice it; ε = 50% of the loss): 512 from 0.25 epochs, 1024 from 0.50, 2048
  from 8.04. The LR is the base cosine read at the examples seen, times B/256 (``batch_schedule_lr='linear'``, the
  branches' rule);
* ``warmup_bsimple``: :data:`BSIMPLE_SCHEDULE`, the same doubling rule applied to the reference's gradient noise
  scale B_simple(t) instead of CBS(t) (McCandlish et al. 2018's proxy, which Merrill et al. find unreliable):
  B_simple is 14, 22, 44, 180, 843 and 1,872 at the branch points, so 512 from 4.02 epochs and 1024 from 8.04;
* ``fixed_2048``: the final CBS (its bracket at 8 epochs is [2048, 2048]) throughout, η·2048/256.

``:lr_warmup_control`` (issue 41, published) is a new study ``mnist_batch_warmup_control``, the published four arms
plus the obvious control the published comparison lacks: ``fixed_2048_lrwarmup``, a fixed batch of 2048 with its
LR warmup and its LR searched (:data:`CONTROL_TRIALS` quasi-random points of base LR η ∈ [0.0125, 0.1], scaled
×2048/256 to [0.1, 0.8], and linear LR warmup 0–8 epochs; ASHA on validation accuracy), its chosen configuration
(on validation) replicated with seeds 1 and 2, so that the arm is compared seed by seed like the others. Its
pre-registered non-inferiority margin is ``analysis.noninferiority_margin`` = 0.2 pp, as published. Expected cost,
from the published folder's recorded trial times (runs.csv ``wall_time``, 2-core CPU beside other work): fixed_256
179 s, warmup 99 s, warmup_bsimple 117 s, fixed_2048 84 s per run; the control ≈ 84 s per full run, 8 search points
(some pruned) + 2 replicates ≈ 10 × 84 s ≈ 14 min; the whole variant (12 + 10 runs) ≈ 24 + 14 = 38 min of training,
≈ 20 min of wall time on 2 workers. Measured (docs/studies/mnist_batch_warmup_control, runs.csv ``wall_time``):
22 trials (15 done, 4 diverged, 3 pruned), 90.2 min of training summed over trials, 21:54–22:59 UTC beside other
work: 2.4× the estimate.
"""
import ml_collections

from lamb_lars.configs.studies import common
from lamb_lars.configs.studies import mnist_table3

B0 = 256
FULL = 55000
# From docs/studies/mnist_branching (in git at 80c425a; the warmup schedules printed there), in examples:
SCHEDULE = "13824:512,27648:1024,442368:2048"
BSIMPLE_SCHEDULE = "221184:512,442368:1024"
FINAL_CBS = 2048


def base_config() -> ml_collections.ConfigDict:
  """The branching study's reference recipe (lamb_lars/configs/studies/mnist_branching.py), in the examples order."""
  base = mnist_table3.base_config()
  base.optimizer.lr_table = False
  base.stop.dead_after_fraction = 0.0   # a fixed large batch that stalls early is a result, run to the end
  base.num_epochs = 16.0
  base.batch_size = B0
  base.data_order = "examples"
  base.eval_every_epochs = 0.25
  base.checkpoint_every_epochs = 2.0
  base.batch_schedule_unit = "examples"
  base.batch_schedule_lr = "linear"
  return base


CONTROL_TRIALS = 8
CONTROL_LR = (0.0125, 0.1)       # the base LR at 256, scaled linearly to the arm's batch (×8 at 2048)
CONTROL_WARMUP = (0.0, 8.0)      # epochs of linear LR warmup


def control_arm() -> dict:
  """The fixed-large-batch arm with a searched LR and LR warmup (``:lr_warmup_control``)."""
  return dict(name=f"fixed_{FINAL_CBS}_lrwarmup", role="warmup", technique=f"fixed_{FINAL_CBS}_lrwarmup",
              fixed={"batch_size": FINAL_CBS},
              search={"optimizer.learning_rate": ("log",) + CONTROL_LR,
                      "optimizer.schedule.warmup_epochs": ("linear",) + CONTROL_WARMUP},
              num_trials=CONTROL_TRIALS, seed=41)


# The control's configuration as mnist_batch_warmup_control chose it on validation (its runs.csv: the
# fixed_2048_lrwarmup trial its replicates name): base LR at 256 (scaled ×8) and epochs of linear LR warmup.
CONTROL_CHOSEN = {"batch_size": FINAL_CBS, "optimizer.learning_rate": 0.03967289343674256,
                  "optimizer.schedule.warmup_epochs": 7.839111402630806}
ADAPTIVE_SEEDS = 4  # replicate seeds beyond seed 0: 5 seeds per arm


def adaptive_arm() -> dict:
  """The batch controller (``batch_schedule='adaptive'``, docs/adaptive_batch.md) at its shipped defaults where the
  issue leaves them open: κ = 1 on B_simple (momentum SGD: P = I), a decision every quarter epoch (the evaluation
  cadence and the branch points' resolution), the batch 256·2^k within [256, 2048], grow only (a batch warmup), LR
  ×B/256 (the linear rule, as the warmup arm's), 2 micro-batches per step so that B_simple is measured on one device,
  its EMA at 0.99 (as the branching reference that the B_simple schedule came from)."""
  return dict(name="adaptive", role="warmup", technique="adaptive",
              fixed={"batch_schedule": "adaptive", "num_microbatches": 2, "microbatch_size": 0,
                     "diagnostics.noise_scale": True, "diagnostics.noise_scale_ema": 0.99,
                     "adaptive_batch.every_epochs": 0.25,
                     "adaptive_batch.kappa": 1.0, "adaptive_batch.min_batch": B0,
                     "adaptive_batch.max_batch": FINAL_CBS, "adaptive_batch.grow_only": True,
                     "adaptive_batch.lr_rule": "linear"})


def adaptive_config() -> ml_collections.ConfigDict:
  """``:adaptive`` (issue 60 part 4, pre-registered here before its first trial): the controller against the fixed
  base batch, the published batch-size warmup (:data:`SCHEDULE`) and the LR-warmup control at its published chosen
  configuration (:data:`CONTROL_CHOSEN`, not searched again), 5 seeds per arm (seed 0 and :data:`ADAPTIVE_SEEDS`
  replicates), 16 epochs each, the branching reference recipe of :func:`base_config`.

  Pre-registered: the non-inferiority margin 0.2 pp on final test accuracy, paired by seed against ``fixed_256``
  (``analysis.noninferiority_margin``, as published); steps and examples to a* (the low end of ``fixed_256``'s 95%
  interval of final accuracy) per seed; the issue's aim, read from those: the controller reaches a* in ≤ 0.7× the
  steps of ``fixed_256`` with ≤ 1.1× its examples, and is non-inferior. Not run: the tuned best fixed batch of the
  to-target study (a different recipe: 90-epoch limit, its own LR search) and a second workload (compute); the
  untuned ``fixed_2048`` (it diverged in both published studies).
  Expected cost, from mnist_batch_warmup_control's runs.csv ``wall_time`` (under load): fixed_256 58–179 s,
  warmup 69–99 s, the control 172–180 s, the controller ≈ 120 s (between B_simple's schedule and the base) per run:
  ≈ 5 × 500 s ≈ 42 min of training, ≈ 25 min wall on 2 workers.
  """
  c = ml_collections.ConfigDict()
  c.name = "mnist_adaptive_batch"
  c.base = base_config()
  c.sweeps = (
      dict(name="fixed_256", role="warmup", technique="fixed_256", fixed={}),
      dict(name="warmup", role="warmup", technique="warmup", fixed={"batch_schedule": SCHEDULE}),
      dict(name=f"fixed_{FINAL_CBS}_lrwarmup", role="warmup", technique=f"fixed_{FINAL_CBS}_lrwarmup",
           fixed=dict(CONTROL_CHOSEN)),
      adaptive_arm(),
  )
  c.search = common.search()
  c.runner = common.runner()
  c.replicates = common.replicates(num_seeds=ADAPTIVE_SEEDS, roles=("warmup",))
  c.analysis = common.analysis(
      title="MNIST / LeNet-5: the adaptive batch controller against fixed batches and batch-size warmup (issue 60)",
      num_train=FULL, baseline_epochs=16.0, target_goal=0.99)
  return c


# ':sqrt_prereg' (issue 59, the referee's point 6): the batch-size warmup re-run, pre-registered here in a commit of
# its own before its first trial (the manifest records the commit). The published warmup arm used SCHEDULE, from the
# superseded, post-hoc ε = 50% linear-rule branching study, with 3 seeds, and its LR-warmup control's best warmup sat
# on its range's edge (7.84 of [0, 8] epochs). Here:
# * the schedule is the one the pre-registered square-root CBS(t) implies (docs/studies/mnist_branching_sqrt_prereg,
#   ε = 20%: double the batch while the conservative end of the CBS bracket is at least twice it):
#   SQRT_SCHEDULE, 512 from 0.25 epochs, 1024 from 0.50, 2048 from 1.01, 4096 from 2.01; the LR follows the rule
#   the branches were measured with, η_base(t)·√(B/256) (``batch_schedule_lr='sqrt'``);
# * three arms: ``fixed_256`` (the base batch), ``warmup_sqrt`` (SQRT_SCHEDULE) and ``fixed_4096_lrwarmup``, the
#   schedule's final batch with linear LR warmup, its LR (``lr_scaling='none'``: the LR at 4096 itself, log over
#   SQRT_CONTROL_LR, which holds both the √ rule's 0.2 and the linear rule's 0.8 for the base 0.05) and warmup
#   (linear over SQRT_CONTROL_WARMUP, widened from [0, 8]) searched with SQRT_CONTROL_TRIALS quasi-random points,
#   ASHA on validation accuracy, the runner's edge extensions, chosen on validation;
# * SQRT_SEEDS replicate seeds beyond seed 0 for every arm (the control: of its chosen configuration): 8 seeds each;
# * the analysis as published (lamb_lars/study/analysis/batch_warmup.py): non-inferiority of final test accuracy
#   paired by seed against ``fixed_256`` with the margin ``analysis.noninferiority_margin`` = 0.2 pp; steps and
#   examples to a* (the low end of fixed_256's 95% interval) per seed; the arm's verdict is its interval's, and a
#   control whose chosen warmup is in the outer 10% of SQRT_CONTROL_WARMUP is reported as at the edge (not a
#   finding about warmup length).
SQRT_SCHEDULE = "13824:512,27648:1024,55296:2048,110592:4096"
SQRT_FINAL = 4096
SQRT_CONTROL_LR = (0.05, 1.6)
SQRT_CONTROL_WARMUP = (0.0, 14.0)
SQRT_CONTROL_TRIALS = 12
SQRT_SEEDS = 7


def sqrt_prereg_config() -> ml_collections.ConfigDict:
  """``:sqrt_prereg`` (issue 59; the comment above). Expected cost, from mnist_adaptive_batch's and
  mnist_batch_warmup_control's runs.csv ``wall_time``: fixed_256 58–179 s, a warmup arm 69–99 s, a large fixed batch
  ≈ 60–85 s per 16-epoch run: 8 × 120 + 8 × 85 + (12 searched, some pruned, + 7) × 75 s ≈ 47 min of training,
  ≈ 25–30 min of wall time on 2 workers (``study run --dry_run`` prints this machine's prediction).

  Command:  python -m lamb_lars.study run --config=lamb_lars/configs/studies/mnist_batch_warmup.py:sqrt_prereg \\
                --workdir=studies/mnist_batch_warmup_sqrt_prereg
            python -m lamb_lars.study report --workdir=studies/mnist_batch_warmup_sqrt_prereg \\
                --out=docs/studies/mnist_batch_warmup_sqrt_prereg
  """
  c = ml_collections.ConfigDict()
  c.name = "mnist_batch_warmup_sqrt_prereg"
  c.base = base_config()
  c.sweeps = (
      dict(name="fixed_256", role="warmup", technique="fixed_256", fixed={}),
      dict(name="warmup_sqrt", role="warmup", technique="warmup_sqrt",
           fixed={"batch_schedule": SQRT_SCHEDULE, "batch_schedule_lr": "sqrt"}),
      dict(name=f"fixed_{SQRT_FINAL}_lrwarmup", role="warmup", technique=f"fixed_{SQRT_FINAL}_lrwarmup",
           fixed={"batch_size": SQRT_FINAL, "optimizer.lr_scaling": "none"},
           search={"optimizer.learning_rate": ("log",) + SQRT_CONTROL_LR,
                   "optimizer.schedule.warmup_epochs": ("linear",) + SQRT_CONTROL_WARMUP},
           num_trials=SQRT_CONTROL_TRIALS, seed=59),
  )
  c.search = common.search()
  c.runner = common.runner()
  c.replicates = common.replicates(num_seeds=SQRT_SEEDS, roles=("warmup",))
  c.analysis = common.analysis(
      title="MNIST / LeNet-5: batch-size warmup from the pre-registered square-root CBS(t), 8 seeds per arm "
            "(issue 59)",
      num_train=FULL, baseline_epochs=16.0, target_goal=0.99)
  return c


# ':adaptive_kappa' (issue 60): the controller with κ over training measured by branching, pre-registered here in a
# commit of its own before its first trial. κ(t) is what `python -m lamb_lars.study.analysis.kappa_from_branching
# docs/studies/mnist_branching_sqrt_prereg` prints (KAPPA_SCHEDULE: CBS low / B_simple at each branch point, in
# examples); the controller is adaptive_arm() with that schedule, the branches' LR rule (√), and the bounds of the
# square-root warmup (256 … SQRT_FINAL). Two arms, 8 seeds each (seed 0 and SQRT_SEEDS replicates, the seeds of
# :sqrt_prereg): ``fixed_256`` and ``adaptive_kappa``. The analysis as published (batch_warmup.py): non-inferiority of
# final test accuracy paired by seed against fixed_256 at ``analysis.noninferiority_margin`` = 0.2 pp, steps and
# examples to a* per seed, and the aim (≤ 0.7× the base's steps to a*, ≤ 1.1× its examples, non-inferior).
# The published warmup_sqrt arm (same recipe and seeds) is the comparison the discussion draws, not a test.
# Expected cost: 16 runs of 16 epochs, ≈ 65 s (fixed_256) and ≈ 50 s (the controller) each in
# mnist_batch_warmup_sqrt_prereg's runs.csv: ≈ 15 min of training, ≈ 8 min of wall time on 2 workers.
KAPPA_SCHEDULE = "0:37.53,27648:45.37,55296:45.93,110592:22.55,221184:4.951,442368:1.997"


def adaptive_kappa_config() -> ml_collections.ConfigDict:
  """``:adaptive_kappa`` (issue 60; the comment above)."""
  c = ml_collections.ConfigDict()
  c.name = "mnist_adaptive_batch_kappa"
  c.base = base_config()
  arm = adaptive_arm()
  arm.update(name="adaptive_kappa", technique="adaptive_kappa")
  arm["fixed"] = dict(arm["fixed"], **{"adaptive_batch.kappa_schedule": KAPPA_SCHEDULE,
                                       "adaptive_batch.lr_rule": "sqrt", "adaptive_batch.max_batch": SQRT_FINAL})
  c.sweeps = (dict(name="fixed_256", role="warmup", technique="fixed_256", fixed={}), arm)
  c.search = common.search()
  c.runner = common.runner()
  c.replicates = common.replicates(num_seeds=SQRT_SEEDS, roles=("warmup",))
  c.analysis = common.analysis(
      title="MNIST / LeNet-5: the adaptive batch controller with κ(t) from the square-root CBS(t), 8 seeds (issue 60)",
      num_train=FULL, baseline_epochs=16.0, target_goal=0.99)
  return c


# ``:best_fixed`` (issue 60 part 4, pre-registered here, in a commit of its own, before its first trial): the
# controller against the *best fixed batch, tuned*, the arm the aim is stated against. Study name
# mnist_adaptive_batch_best_fixed; the recipe of :func:`base_config`; every arm with seeds 0 … 7 (seed 0 and
# SQRT_SEEDS replicates, the seeds of :sqrt_prereg and :adaptive_kappa, so the same example streams).
#
# Arms:
# * ``fixed_256``: the base batch (the base of a* and of non-inferiority);
# * ``adaptive_kappa``: the controller exactly as in :adaptive_kappa (κ(t) = KAPPA_SCHEDULE, √ LR rule, 256 … 4096);
# * ``fixed_<B>_tuned`` for B in BEST_FIXED_BATCHES: a fixed batch B (k = B/256) with its LR (absolute, no scaling)
#   and its epochs of linear LR warmup searched: BEST_FIXED_TRIALS quasi-random points, LR in log from half the
#   √ rule to twice the linear rule, [0.05·√k / 2, 0.05·k·2], warmup in BEST_FIXED_WARMUP; ASHA on validation
#   accuracy, as the control arms are searched; the configuration chosen on validation (selection.chosen_of_cell)
#   replicated with seeds 1 … 7.
#
# The rule (lamb_lars/study/analysis/batch_warmup.py, "against the best fixed batch"; fixed before the first trial):
# * a* = the low end of fixed_256's 95% interval of final test accuracy, as published;
# * the best fixed batch = among the fixed arms non-inferior to fixed_256 at the margin (0.2 pp; fixed_256 itself
#   eligible), the one with the fewest median steps to a* over its 8 seeds (a seed that never reaches a* counts as
#   ∞; the lower median);
# * the aim, per seed: the controller reaches a* in ≤ 0.7× the best fixed arm's steps and ≤ 1.1× its examples (a
#   best-arm seed that never reaches a* counts as ∞ steps); over seeds, the one-sided sign test at 0.05
#   (verdict.sign_test: ``met`` needs 7 of 8 seeds) together with the controller's non-inferiority to fixed_256;
#   verdict ``met`` / ``not met`` (the sign test fails, ≤ 1 of 8, or non-inferiority fails) / ``inconclusive``.
# * A chosen configuration on the edge of its search range is named in the report (search adequacy) and read as a
#   limit of the tuning, in the discussion.
# Expected cost (the per-trial wall_time of mnist_batch_warmup_sqrt_prereg and mnist_adaptive_batch_kappa, quiet:
# ≈ 36–45 s fixed_256, ≈ 58 s the controller, ≈ 40–50 s a fixed large batch): 16 + 3 × (8 + 7) = 61 runs ≈ 46 min
# of training, ≈ 25 min of wall time on 2 workers (``study run --dry_run`` prints this machine's prediction).
# Command:  python -m lamb_lars.study run --config=lamb_lars/configs/studies/mnist_batch_warmup.py:best_fixed \
#               --workdir=studies/mnist_adaptive_batch_best_fixed
#           python -m lamb_lars.study report --workdir=studies/mnist_adaptive_batch_best_fixed \
#               --out=docs/studies/mnist_adaptive_batch_best_fixed
BEST_FIXED_BATCHES = (512, 1024, 2048)
BEST_FIXED_TRIALS = 8
BEST_FIXED_WARMUP = (0.0, 8.0)      # epochs of linear LR warmup (half the 16-epoch budget)


def best_fixed_lr(batch: int) -> tuple[float, float]:
  """The searched LR range of a fixed batch: half the √ rule to twice the linear rule from η = 0.05 at 256."""
  k = batch / B0
  return 0.05 * k**0.5 / 2, 0.05 * k * 2


def tuned_fixed_arm(batch: int) -> dict:
  """A fixed batch with its LR and LR warmup searched (``:best_fixed``)."""
  return dict(name=f"fixed_{batch}_tuned", role="warmup", technique=f"fixed_{batch}_tuned",
              fixed={"batch_size": batch, "optimizer.lr_scaling": "none"},
              search={"optimizer.learning_rate": ("log",) + best_fixed_lr(batch),
                      "optimizer.schedule.warmup_epochs": ("linear",) + BEST_FIXED_WARMUP},
              num_trials=BEST_FIXED_TRIALS, seed=60 + batch)


def best_fixed_config() -> ml_collections.ConfigDict:
  """``:best_fixed`` (issue 60; the comment above)."""
  c = adaptive_kappa_config()
  c.name = "mnist_adaptive_batch_best_fixed"
  c.sweeps = tuple(c.sweeps) + tuple(tuned_fixed_arm(b) for b in BEST_FIXED_BATCHES)
  c.analysis.title = "MNIST / LeNet-5: the adaptive batch controller against the best fixed batch, tuned (issue 60)"
  c.analysis.best_fixed = True
  return c


def get_config(variant: str = "") -> ml_collections.ConfigDict:
  if variant == "adaptive_kappa":
    return adaptive_kappa_config()
  if variant == "best_fixed":
    return best_fixed_config()
  if variant == "adaptive":
    return adaptive_config()
  if variant == "sqrt_prereg":
    return sqrt_prereg_config()
  if variant not in ("", "lr_warmup_control"):
    raise ValueError(f"unknown variant {variant!r} of mnist_batch_warmup; use '', 'lr_warmup_control', 'adaptive', "
                     "'sqrt_prereg', 'adaptive_kappa' or 'best_fixed'.")
  c = ml_collections.ConfigDict()
  c.name = "mnist_batch_warmup" + ("_control" if variant else "")
  c.base = base_config()
  c.sweeps = (
      dict(name="fixed_256", role="warmup", technique="fixed_256", fixed={}),
      dict(name="warmup", role="warmup", technique="warmup", fixed={"batch_schedule": SCHEDULE}),
      dict(name="warmup_bsimple", role="warmup", technique="warmup_bsimple",
           fixed={"batch_schedule": BSIMPLE_SCHEDULE}),
      dict(name=f"fixed_{FINAL_CBS}", role="warmup", technique=f"fixed_{FINAL_CBS}", fixed={"batch_size": FINAL_CBS}),
  ) + ((control_arm(),) if variant else ())
  c.search = common.search()
  c.runner = common.runner()
  c.replicates = common.replicates(num_seeds=2, roles=("warmup",))
  c.analysis = common.analysis(
      title="MNIST / LeNet-5: batch-size warmup against fixed batches (Merrill et al. 2025 §5)",
      num_train=FULL, baseline_epochs=16.0, target_goal=0.99)
  return c
