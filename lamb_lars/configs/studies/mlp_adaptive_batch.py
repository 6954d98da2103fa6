"""The adaptive batch controller on a second workload: the MLP 300-100 on MNIST (issue 60 part 4, "LeNet-5 on MNIST
and one other setting of the cross-workload study"). Pre-registered here, in a commit of its own, before its first
trial (the manifest records the commit). Study name ``mlp_adaptive_batch``.

Why this setting. Of the cross-workload study's settings (docs/studies/critical_batch_axes), the MLP is the one with
both a measured B_crit (860 [660, 1,100] at its target) and a measured CBS(t) (branch-mlp), so every arm the issue
names can be built from our own measurements, and it is the cheapest to train (its 16-epoch branching reference took
22 s).

The recipe (every arm): the branching reference of docs/studies/critical_batch_axes/branch-mlp
(critical_batch_axes._base('mlp'): momentum 0.9, η = 0.05 at B0 = 256, cosine decay, wd 5e-4, 55K/5K/10K), 16
epochs of 55K (880,000 examples), ``data_order='examples'`` so that seed s of every arm sees the same examples in the
same order, an evaluation every quarter epoch, no dead-run stop (a large batch that stalls is a result). Seeds 0 … 7
for every arm (seed 0 and NUM_SEEDS replicates; for a searched arm, of its chosen configuration).

Arms:
* ``fixed_256``: the base batch B0 (the base of a* and of non-inferiority).
* ``warmup``: the batch-size warmup that branch-mlp's measured CBS(t) implies (its README: double the batch while the
  conservative end of the CBS bracket is at least twice it): :data:`CBS_SCHEDULE`, 1024 from 0.5 epochs and 4096
  from 8.04, the LR ×B/256 (the branches' linear rule).
* ``adaptive_kappa``: the controller (docs/adaptive_batch.md) with κ(t) from branch-mlp
  (``python -m lamb_lars.study.analysis.kappa_from_branching docs/studies/critical_batch_axes/branch-mlp``:
  :data:`KAPPA_SCHEDULE`), on B_simple (momentum SGD), a decision every quarter epoch, the batch 256·2^k within
  [256, 4096], grow only, the linear LR rule (the branches'), 2 micro-batches per step, the noise scale's EMA 0.99
  (the reference's). As mnist_batch_warmup.py's ``adaptive_kappa`` arm, on this workload.
* ``adaptive_audit``: the same controller with κ = 1 and no branching study behind it: the run's own ``branch``
  self-audit (lamb_lars/train/self_audit.py) at the branching study's points (:data:`AUDIT_POINTS`: 0.5, 2 and 8
  epochs), branching at the next 4 ladder sizes above the batch (up to 4096) for Δ = :data:`AUDIT_DELTA` examples,
  ε = 0.2 relative on the validation loss (the branching study's ε).
* ``fixed_<B>_tuned`` for B in :data:`TUNED_BATCHES`: a fixed batch with its LR (absolute, ``lr_scaling='none'``,
  log over [0.05·√k / 2, 0.05·k·2], k = B/256) and its epochs of linear LR warmup (over [0, 8]) searched with
  :data:`TUNED_TRIALS` quasi-random points, ASHA on validation accuracy, the runner's edge extensions, chosen on
  validation. ``fixed_4096_tuned`` is also the LR-warmup control: the CBS warmup's final batch from the start, with
  an LR warmup instead of a batch warmup.

The rule (lamb_lars/study/analysis/batch_warmup.py; fixed here before the first trial):
* a* = the low end of fixed_256's 95% interval of final test accuracy;
* non-inferiority of final test accuracy, paired by seed against fixed_256, margin
  ``analysis.noninferiority_margin`` = 0.2 pp;
* the best fixed batch = among the fixed arms non-inferior to fixed_256 (fixed_256 eligible), the fewest median steps
  to a* over its 8 seeds (a miss counts as ∞);
* the aim per seed: a* in ≤ 0.7× the best fixed arm's steps and ≤ 1.1× its examples; over seeds, the one-sided sign
  test at 0.05 (7 of 8 seeds) with non-inferiority: ``met`` / ``not met`` / ``inconclusive``;
* the audited arm's steps and examples are the run's own. Its audits train extra branches, at most
  :func:`audit_overhead` (3 audits from batch 256: Σ Δ/b over the 5 branch sizes = 124 steps and 5·Δ = 81,920
  examples each). The discussion reads the aim a second time with this bound added to every seed's steps and
  examples to a*: a sensitivity, and a claim about the audited controller stands only if it holds in both readings.
* a chosen configuration in the outer 10% of its search range is named in the report and read as a limit of the
  tuning.

Expected cost: 4 untuned arms × 8 seeds + 3 tuned arms × (8 searched, some pruned, + 7) = 77 runs of 16 MLP epochs,
≈ 22 s each on a quiet machine (branch-mlp's reference), ≈ 30–45 s beside other work, the audited arm ≈ 1.3× (its
branches): ≈ 30–55 min of training, ≈ 15–30 min of wall time on 2 workers.

Command:  python -m lamb_lars.study run --config=lamb_lars/configs/studies/mlp_adaptive_batch.py \\
              --workdir=studies/mlp_adaptive_batch
          python -m lamb_lars.study report --workdir=studies/mlp_adaptive_batch --out=docs/studies/mlp_adaptive_batch
"""
import ml_collections

from lamb_lars.configs.studies import common
from lamb_lars.configs.studies import critical_batch_axes as axes

B0 = 256
FULL = axes.FULL
MAX_BATCH = 4096
NUM_SEEDS = 7                       # replicate seeds beyond seed 0: 8 seeds per arm
# From docs/studies/critical_batch_axes/branch-mlp (its README's warmup line; kappa_from_branching's printout):
CBS_SCHEDULE = "27648:1024,442368:4096"
KAPPA_SCHEDULE = "0:4.778,110592:0.9864,442368:1.147"
AUDIT_POINTS = ",".join(str(p) for p in axes.POINTS_EXAMPLES)   # 27500,110000,440000 examples
AUDIT_DELTA = 16384                 # examples per branch (0.3 epochs; a quarter of the branching study's 65,536)
AUDIT_SIZES = 4                     # 256 → 512, 1024, 2048, 4096
TUNED_BATCHES = (1024, 2048, 4096)
TUNED_TRIALS = 8
TUNED_WARMUP = (0.0, 8.0)           # epochs of linear LR warmup (half the budget)


def audit_overhead(batch: int = B0) -> tuple[int, int]:
  """The most extra (steps, examples) the audits can train: 3 audits, each from ``batch`` over the ladder up to
  MAX_BATCH (Σ Δ/b steps and (1 + sizes)·Δ examples; Δ is a multiple of every size here)."""
  sizes = [batch * 2**i for i in range(AUDIT_SIZES + 1) if batch * 2**i <= MAX_BATCH]
  n = len(AUDIT_POINTS.split(","))
  return n * sum(AUDIT_DELTA // b for b in sizes), n * len(sizes) * AUDIT_DELTA


def base_config() -> ml_collections.ConfigDict:
  """branch-mlp's reference recipe in the examples order (module docstring)."""
  base = axes._base("mlp")  # pylint: disable=protected-access
  base.optimizer.lr_table = False
  base.stop.dead_after_fraction = 0.0
  base.num_epochs = 16.0
  base.batch_size = B0
  base.data_order = "examples"
  base.eval_every_epochs = 0.25
  base.checkpoint_every_epochs = 2.0
  base.batch_schedule_unit = "examples"
  base.batch_schedule_lr = "linear"
  return base


def controller(**keys) -> dict:
  """The controller's keys (module docstring), with ``keys`` over them."""
  return {"batch_schedule": "adaptive", "num_microbatches": 2, "microbatch_size": 0,
          "diagnostics.noise_scale": True, "diagnostics.noise_scale_ema": 0.99,
          "adaptive_batch.every_epochs": 0.25, "adaptive_batch.kappa": 1.0, "adaptive_batch.min_batch": B0,
          "adaptive_batch.max_batch": MAX_BATCH, "adaptive_batch.grow_only": True,
          "adaptive_batch.lr_rule": "linear", **keys}


def tuned_lr(batch: int) -> tuple[float, float]:
  k = batch / B0
  return axes.ETA * k**0.5 / 2, axes.ETA * k * 2


def tuned_arm(batch: int) -> dict:
  return dict(name=f"fixed_{batch}_tuned", role="warmup", technique=f"fixed_{batch}_tuned",
              fixed={"batch_size": batch, "optimizer.lr_scaling": "none"},
              search={"optimizer.learning_rate": ("log",) + tuned_lr(batch),
                      "optimizer.schedule.warmup_epochs": ("linear",) + TUNED_WARMUP},
              num_trials=TUNED_TRIALS, seed=600 + batch)


def get_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.name = "mlp_adaptive_batch"
  c.base = base_config()
  c.sweeps = (
      dict(name="fixed_256", role="warmup", technique="fixed_256", fixed={}),
      dict(name="warmup", role="warmup", technique="warmup", fixed={"batch_schedule": CBS_SCHEDULE}),
      dict(name="adaptive_kappa", role="warmup", technique="adaptive_kappa",
           fixed=controller(**{"adaptive_batch.kappa_schedule": KAPPA_SCHEDULE})),
      dict(name="adaptive_audit", role="warmup", technique="adaptive_audit",
           fixed=controller(**{"adaptive_batch.audit_points": AUDIT_POINTS,
                               "adaptive_batch.audit_delta_examples": AUDIT_DELTA,
                               "adaptive_batch.audit_sizes": AUDIT_SIZES, "adaptive_batch.audit_epsilon": 0.2,
                               "adaptive_batch.audit_loss": "validation_loss"})),
  ) + tuple(tuned_arm(b) for b in TUNED_BATCHES)
  c.search = common.search()
  c.runner = common.runner()
  c.replicates = common.replicates(num_seeds=NUM_SEEDS, roles=("warmup",))
  c.analysis = common.analysis(
      title="MNIST / MLP 300-100: the adaptive batch controller against the best fixed batch, tuned, and the CBS(t) "
            "warmup (issue 60, the second workload)",
      num_train=FULL, baseline_epochs=16.0, target_goal=axes.SETTINGS["mlp"]["target"], best_fixed=True)
  return c
