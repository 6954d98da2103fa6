"""You et al. 2020 Table 3 on MNIST / LeNet-5 at paper budget: five solvers × {batch 256, 8K original, 8K +
layer-wise, 8K + layer-wise + bound}, every cell a metaparameter search (paper §3.1; docs/science.md).

Command:  python -m lamb_lars.study run --config=lamb_lars/configs/studies/mnist_table3.py \\
              --workdir=studies/mnist_table3
          python -m lamb_lars.study report --workdir=studies/mnist_table3 --out=docs/studies/mnist_table3
Hardware: a quiet 2-core CPU, two single-threaded trials at once (runner defaults; docs/BENCHMARKS.md has the
          measured wall time and the worker comparison).
Expected (paper, 30 epochs, test accuracy %): momentum SGD 99.2 / diverge / 99.2 / 99.2; AdaGrad 99.2 / 98.3 /
          99.3 / 99.3; RMSprop 99.2 / 98.6 / diverge / 99.0; Adam 99.3 / 99.1 / unstable / 99.4; LARS 99.3 / 99.4.

Each of the 18 cells samples ``NUM_TRIALS`` points (scrambled Sobol) of log-LR over 2 decades around the LR that
works for that solver and of the warmup length, trains each for up to 30 epochs on 55K examples (5K held out for
the search metric, validation accuracy), and lets ASHA (rungs at 2, 6 and 18 epochs, η = 3) stop the trials that
fall behind. Runs still at chance level after 20% of the budget (or the end of warmup) stop as diverged. The cell
is the best final test accuracy (10K test set) of its trials that finished (docs/studies.md). The paper's "SGD"
row is momentum SGD (momentum 0.9, the baseline's optimizer). LRs are at the batch they run at. Layer-wise
variants use the trust ratio ‖w‖/‖d‖ with trust coefficient 1, so their LR is the relative step per layer;
bound = ratio clipped to [0, 10].

Round 2 (``ROUND2``): the four 8K cells of round 1 whose best trial sat at the edge of its LR range or whose
long-warmup trials were all pruned at epoch 2, searched again with 6 more points each on a
log-LR range re-centred on round 1's best trial (Shallue et al. 2018 widen or move a search space whose best point
lies at its edge), warmup 0–5 epochs, and the first rung after the longest warmup of the cell (round 1's rung at
epoch 2 pruned most long warmups; a4e5c88:docs/studies/mnist_table3/discussion.md). A cell is the best over both rounds.
Round 1 ran with the first rung at epoch 2 for every cell (``rung_after_warmup=False``), which its search log
must replay; round 2 sets its own rule per sub-sweep (``pruner``).
"""
import ml_collections

from lamb_lars.configs import mnist_lenet
from lamb_lars.configs.studies import common

NUM_TRIALS = 6
# log-LR ranges (lo, hi) per (solver, column): 'bs256' at batch 256, 'original' and 'layerwise' at 8K.
LR_RANGES = dict(
    momentum=dict(bs256=(0.005, 0.5), original=(0.05, 5.0), layerwise=(0.002, 0.2)),
    adagrad=dict(bs256=(0.002, 0.2), original=(0.01, 1.0), layerwise=(0.002, 0.2)),
    rmsprop=dict(bs256=(1e-4, 1e-2), original=(3e-4, 3e-2), layerwise=(0.002, 0.2)),
    adam=dict(bs256=(1e-4, 1e-2), original=(3e-4, 3e-2), layerwise=(0.002, 0.2)),
    lars=dict(bs256=(0.1, 10.0), original=(1.0, 100.0)))
WARMUP = {256: (0.0, 2.0), 8192: (0.0, 10.0)}
# Round 2: (solver, variant) → log-LR range at 8K, re-centred on round 1's best trial (in brackets: its LR and
# final test accuracy, docs/studies/mnist_table3/runs.csv at commit a4e5c88).
ROUND2 = {
    ("adagrad", "layerwise"): (0.002, 0.05),         # [0.0077: 94.8%, the two larger survivors pruned at epoch 2]
    ("rmsprop", "original"): (3e-5, 1e-3),           # [3.9e-4: 93.6%, the smallest LR of round 1]
    ("adam", "original"): (0.005, 0.15),             # [0.0265: 98.7%, the largest LR of round 1]
    ("lars", "original"): (0.3, 8.0),                # [2.70: 98.4%, the smallest LR of round 1]
}
ROUND2_WARMUP = (0.0, 5.0)  # round 1's best 8K trials warmed up for 0.4–6.7 epochs


def _cell(name: str, solver: str, batch: int, variant: str, lr: tuple, seed: int, warmup: tuple = (),
          **extra) -> dict:
  return dict(name=name, role="table3", variant=variant,
              fixed={"batch_size": batch, "optimizer.name": solver, **common.VARIANT_KEYS[variant]},
              search={"optimizer.learning_rate": ("log",) + tuple(lr),
                      "optimizer.schedule.warmup_epochs": ("linear",) + tuple(warmup or WARMUP[batch])},
              num_trials=NUM_TRIALS, seed=seed, **extra)


def sweeps(rounds: tuple = (1, 2)) -> tuple:
  out, seed = [], 0
  for solver, lrs in LR_RANGES.items():
    out.append(_cell(f"bs256-{solver}", solver, 256, "original", lrs["bs256"], seed))
    seed += 1
  for solver, lrs in LR_RANGES.items():
    variants = ("original",) if solver == "lars" else ("original", "layerwise", "layerwise_bound")
    for v in variants:
      lr = lrs["original" if v == "original" else "layerwise"]
      out.append(_cell(f"b8k-{solver}-{v.replace('_', '')}", solver, 8192, v, lr, seed))
      seed += 1
  if 1 not in rounds:
    out = []
  if 2 not in rounds:
    return tuple(out)
  for (solver, v), lr in ROUND2.items():
    out.append(_cell(f"r2-b8k-{solver}-{v.replace('_', '')}", solver, 8192, v, lr, 100 + seed,
                     warmup=ROUND2_WARMUP, pruner={"rung_after_warmup": True}))
    seed += 1
  return tuple(out)


def base_config() -> ml_collections.ConfigDict:
  """The MNIST study base: the paper's baseline recipe on the 55K/5K/10K split, quiet, dead runs stopped, large
  batches accumulated over micro-batches of 256, the LR schedule carried as data."""
  base = mnist_lenet.get_config()  # momentum 0.9, η 0.05 at B0 = 256, cosine decay, wd 5e-4, 30 epochs
  base.validation_split = 5000
  base.progress = False
  base.eval_every_epochs = 1.0
  base.checkpoint_every_epochs = 2.0
  base.diagnostics.noise_scale = False
  base.stop.dead_after_fraction = 0.2
  # Batches above 256 accumulate over micro-batches of 256 (250 for the full batch 55K): the same gradient
  # (LeNet-5 has no BN), 1.3× faster at 16K and 2.8× at 55K on one CPU core (docs/BENCHMARKS.md §11).
  base.microbatch_size = 256
  # The LR schedule as a table in the optimizer state: trials of a cell then share one compiled train step through
  # the study's compilation cache instead of compiling it per trial (lamb_lars/optim/lr_table.py).
  base.optimizer.lr_table = True
  return base


# The republish (``:republish``): one search per cell on the hull of round 1's and round 2's log-LR ranges, so the two
# rounds become one study; momentum original at 8K from 0.005, so the range holds the LRs at which the ladder's tuned
# momentum trains at 8K (0.025–0.08, a4e5c88:docs/studies/mnist_batch_ladder); 8 points per cell, and the runner's
# edge rule extends a range whose best point lies at its edge (lamb_lars/configs/studies/common.py ``search``).
REPUBLISH_RANGES = {
    **{(solver, col): lrs[col] for solver, lrs in LR_RANGES.items() for col in lrs},
    ("momentum", "original"): (0.005, 5.0),
    **{(solver, "original" if v == "original" else "layerwise"): (
        min(lr[0], LR_RANGES[solver]["original" if v == "original" else "layerwise"][0]),
        max(lr[1], LR_RANGES[solver]["original" if v == "original" else "layerwise"][1]))
       for (solver, v), lr in ROUND2.items()},
}
REPUBLISH_TRIALS = 8
# LARS as the paper runs it (You et al. 2020 §3.1 and Table 3): linear warmup, then polynomial decay (power 2, as
# the ladder's LARS and LAMB) instead of the baseline's cosine decay.
LARS_SCHEDULE = {"optimizer.schedule.decay": "poly", "optimizer.schedule.poly_power": 2.0}


def republish_sweeps() -> tuple:
  """The 18 Table 3 cells of the republish (``REPUBLISH_RANGES``; LARS with ``LARS_SCHEDULE``)."""
  out, seed = [], 200
  for solver in LR_RANGES:
    variants = ("original",) if solver == "lars" else ("original", "layerwise", "layerwise_bound")
    for batch, cols in ((256, ("original",)), (8192, variants)):
      for v in cols:
        lr = REPUBLISH_RANGES[(solver, "bs256" if batch == 256 else "original" if v == "original" else "layerwise")]
        cell = _cell(f"{'bs256' if batch == 256 else 'b8k'}-{solver}" + (f"-{v.replace('_', '')}" if batch > 256
                                                                        else ""), solver, batch, v, lr, seed)
        cell["num_trials"] = REPUBLISH_TRIALS
        if solver == "lars":
          cell["fixed"] = {**cell["fixed"], **LARS_SCHEDULE}
        out.append(cell)
        seed += 1
  return tuple(out)


def republish_config() -> ml_collections.ConfigDict:
  """Table 3 republished as one study (issue 22): rounds 1 and 2 merged into one search per cell, LARS with warmup +
  polynomial decay, the runner's adequacy rules and replicates (lamb_lars/configs/studies/common.py), B0 = 256 baseline
  cells.

  Command:  python -m lamb_lars.study run --config=lamb_lars/configs/studies/mnist_table3.py:republish \
                --workdir=studies/mnist_table3_v2
            python -m lamb_lars.study report --workdir=studies/mnist_table3_v2 \
                --out=docs/studies/mnist_table3_replicated
  Published: docs/studies/mnist_table3_replicated (2026-11-26; its discussion.md has the verdicts per cell);
  superseded by docs/studies/mnist_table3_robust (``robust_config``) and removed from the tree, in git at f995b11:
  git show f995b11:docs/studies/mnist_table3_replicated/discussion.md.
  Measured cost (2-core CPU, two single-threaded trials at once, partly beside the test suite): 246 trials (144
  searched, 48 in 6 range extensions, 54 replicates), 338 min of training summed over trials: 202 min for the
  search with its promotions and extensions, 136 min for the replicates (0.68× the search); a full 30-epoch trial
  ≈ 90–150 s with nothing beside it. Estimated beforehand: ≈ 4.8 h of training, the replicates ≈ 0.6×.
  """
  base = base_config()
  base.optimizer.lr_scaling = "none"  # the searched LR is the LR at the batch the trial runs at
  c = ml_collections.ConfigDict()
  c.name = "mnist_table3"
  c.base = base
  c.sweeps = republish_sweeps()
  c.search = common.search()
  c.runner = common.runner()
  c.analysis = common.analysis(
      title="MNIST / LeNet-5: You et al. 2020 Table 3 at paper budget (30 epochs, tuned per cell, replicated)",
      paper="mnist_lenet", num_train=55000, baseline_epochs=30.0, table3_batch=8192)
  c.replicates = common.replicates(num_seeds=3)
  return c


# ':adagrad_eps' (issue 41; not run yet): AdaGrad's four cells (batch 256; 8K original, layer-wise, layer-wise +
# bound) searched again with ε and the initial accumulator G₀ in the space beside the LR and warmup (the republish
# fixed them at optax's 1e-7 and 0.1, and both 8K "differs" cells had their best point next to a divergence cliff), on
# the republish's LR ranges; more points per cell for the larger space. Expected cost, from
# docs/studies/mnist_table3_replicated (in git at f995b11; runs.csv ``wall_time``): an AdaGrad trial 100 s on average
# (52 trials, 86.5 min); 4 cells × 16 points + ≈ 16 in extensions + 4 × 3 replicates ≈ 92 trials ≈ 150 min of
# training, ≈ 80 min of wall time on 2 workers (pruned trials cost less).
ADAGRAD_EPS = ("log", 1e-10, 1e-2)
ADAGRAD_G0 = ("log", 1e-4, 1.0)
ADAGRAD_TRIALS = 16


def adagrad_config() -> ml_collections.ConfigDict:
  """``:adagrad_eps``: the republish's AdaGrad cells with ε and G₀ searched (a study of its own,
  ``mnist_table3_adagrad``)."""
  c = republish_config()
  c.name = "mnist_table3_adagrad"
  cells = []
  for cell in republish_sweeps():
    if cell["fixed"]["optimizer.name"] == "adagrad":
      cell = dict(cell, search={**cell["search"], "optimizer.eps": ADAGRAD_EPS,
                                "optimizer.initial_accumulator_value": ADAGRAD_G0},
                  num_trials=ADAGRAD_TRIALS, seed=cell["seed"] + 1000)
      cells.append(cell)
  c.sweeps = tuple(cells)
  c.analysis.title = ("MNIST / LeNet-5: You et al. 2020 Table 3, AdaGrad cells with ε and the initial accumulator "
                      "searched")
  return c


# ':robust' (issue 41): Table 3 until every cell decides or is called inconclusive with 6+ seeds. Pre-registered
# here, before its first trial, from docs/studies/mnist_table3_replicated (in git at f995b11 since this study
# superseded it; runs.csv; the verdict rule of its README:
# the 95% t interval of the replicates inside the paper's value ± 0.3 pp agrees, wholly outside differs):
# * every one of the 18 cells gets ≥ 6 fresh seeds: 7 were inconclusive at n = 3, and each of the other 11 was
#   decided by less than its interval's width (the closest: AdaGrad at 256, 0.003 pp inside the band; the
#   widest margin, AdaGrad 8K original's 0.99 pp, is below its 1.36 pp width) or is a label cell (paper
#   "diverge"/"unstable", a judgement call: momentum 8K original had 9 of 16 trials diverge);
# * ``CLIFF_CELLS``: the cells whose search had a diverged trial (momentum 8K original 9/16, layer-wise 2/8,
#   layer-wise + bound 2/8; RMSprop 8K original 1/8, layer-wise + bound 7/16; Adam 8K layer-wise + bound 3/8;
#   LARS 8K original 4/8; AdaGrad 8K original 4/8) and the two AdaGrad "differs" cells the issue names: searched
#   again densely near the cliff: log-LR over [η*/3, 3η*] around the republish's chosen η* (``CHOSEN``) × warmup
#   over the cell's range, ``ROBUST_TRIALS`` Sobol points, the runner's edge extensions, then LR refinement until
#   the chosen LR has tried LRs within ×1.5 on both sides (``search.refine_factor``, phases.py);
# * AdaGrad's four cells: ``adagrad_config``'s search (ε and the initial accumulator G₀ beside LR and warmup, on
#   the republish's LR ranges; ``:adagrad_eps``, which this part includes and so replaces) with the same refinement;
# * the other cells (``FIXED_CELLS``: no divergence in their search, not AdaGrad): the republish's chosen
#   configuration re-run as a fixed cell, seed 10 and 6 replicates (11–16): 7 fresh seeds, none the republish's.
# Searched cells: 6 replicate seeds of the configuration chosen on validation (its own seed not counted).
# The two AdaGrad cliff cells keep the republish's LR range (not [η*/3, 3η*]): with G₀ now searched, the step size
# is η/√(G₀ + Σg²), so the republish's η* (at G₀ = 0.1) is no centre for the new space; LR refinement ×1.5 around
# the new choice gives the density near the optimum. The verdict of a paper label cell (momentum 8K original
# "diverge", RMSprop 8K layer-wise "diverge", Adam 8K layer-wise "unstable") follows table3.label_agreement,
# pre-registered on 2026-11-28 before the first trial: agrees when nothing trains or a fresh seed of the chosen
# configuration diverges or is unstable, differs ("trains") when all ≥ 3 fresh seeds train.
CHOSEN = {  # cell → (η, warmup epochs) of the republish's chosen trial (runs.csv, ``replicate_of``)
    "bs256-adagrad": (0.13167898212763338, 1.8321594428271055),
    "bs256-adam": (0.011898778961173924, 0.19893049564276555),
    "bs256-lars": (7.59896898568246, 0.8472661450505257),
    "bs256-momentum": (0.04615117286627923, 0.6617712788283825),
    "bs256-rmsprop": (0.007784644965825879, 0.29100441560149193),
    "b8k-adagrad-layerwise": (0.047635048295836216, 8.096460746601224),
    "b8k-adagrad-layerwisebound": (0.09019305203530664, 4.593259058892727),
    "b8k-adagrad-original": (0.06734014265933723, 5.780420023947954),
    "b8k-adam-layerwise": (0.03070076993196979, 6.506109228357673),
    "b8k-adam-layerwisebound": (0.022107913116414, 3.45052189193666),
    "b8k-adam-original": (0.017954008783858635, 9.141904106363654),
    "b8k-lars-original": (9.049512421162424, 0.9769798070192337),
    "b8k-momentum-layerwise": (0.014621601222964365, 9.916822155937552),
    "b8k-momentum-layerwisebound": (0.04828396780916916, 9.601285895332694),
    "b8k-momentum-original": (0.00715063759441176, 2.6863384153693914),
    "b8k-rmsprop-layerwise": (0.02804371426857667, 4.723229855298996),
    "b8k-rmsprop-layerwisebound": (0.08247382719940412, 5.359201217070222),
    "b8k-rmsprop-original": (0.009330454408077608, 4.157574027776718),
}
CLIFF_CELLS = ("b8k-momentum-original", "b8k-momentum-layerwise", "b8k-momentum-layerwisebound",
               "b8k-rmsprop-original", "b8k-rmsprop-layerwisebound", "b8k-adam-layerwisebound", "b8k-lars-original",
               "b8k-adagrad-original", "b8k-adagrad-layerwisebound")
FIXED_CELLS = ("bs256-momentum", "bs256-rmsprop", "bs256-adam", "bs256-lars", "b8k-adam-original",
               "b8k-adam-layerwise", "b8k-rmsprop-layerwise")
ROBUST_TRIALS = 16
ROBUST_SEEDS = 6
CLIFF_SPAN = 3.0          # the dense LR range around η*: [η*/3, 3η*]
FIXED_SEED = 10


def robust_sweeps() -> tuple:
  """The 18 cells of ``:robust`` (the comment above ``CHOSEN``), in the republish's order."""
  adagrad = {c["name"]: c for c in adagrad_config().sweeps}
  out = []
  for cell in republish_sweeps():
    name = cell["name"]
    eta, warmup = CHOSEN[name]
    if name in FIXED_CELLS:
      out.append(dict(name=f"fixed-{name}", role="table3", variant=cell["variant"],
                      fixed={**cell["fixed"], "optimizer.learning_rate": eta,
                             "optimizer.schedule.warmup_epochs": warmup, "seed": FIXED_SEED}))
      continue
    if name in adagrad:
      dense = dict(adagrad[name])
    else:
      dense = dict(cell)
    if name in CLIFF_CELLS and name not in adagrad:
      dense["search"] = {**dense["search"], "optimizer.learning_rate": ("log", eta / CLIFF_SPAN, eta * CLIFF_SPAN)}
    dense.update(name=f"dense-{name}", num_trials=ROBUST_TRIALS, seed=int(dense["seed"]) + 2000)
    out.append(dense)
  return tuple(out)


def robust_config() -> ml_collections.ConfigDict:
  """``:robust`` (issue 41): every Table 3 cell with ≥ 6 fresh seeds, a dense LR × warmup search near every
  divergence cliff with LR refinement ×1.5, AdaGrad's ε and G₀ searched (study ``mnist_table3_robust``).

  Command:  python -m lamb_lars.study run --config=lamb_lars/configs/studies/mnist_table3.py:robust \\
                --workdir=studies/mnist_table3_robust
            python -m lamb_lars.study report --workdir=studies/mnist_table3_robust \\
                --out=docs/studies/mnist_table3_robust
  (or scripts/republish_issue41.sh, resumable, in the background).
  Expected cost, from docs/studies/mnist_table3_replicated/runs.csv (in git at f995b11) ``wall_time`` (2-core CPU, two
  single-threaded trials at once, partly loaded): per fixed cell 7 runs at the cell's mean replicate time (112–128 s)
  ≈ 13–15 min, 7 cells ≈ 100 min; per dense cell 16 points at the cell's mean searched-trial time (42–85 s, pruned
  ones included) + ≈ 2 refinement + 6 replicates at its replicate time (108–304 s) ≈ 29–59 min, 11 cells ≈ 453 min.
  Total ≈ 553 min of training summed over trials, ≈ 4.6 h of wall time on 2 workers (more beside other work; the
  AdaGrad layer-wise 8K replicates took ≈ 300 s each under load), ≈ 240 trials.
  Measured (docs/studies/mnist_table3_robust, its README "Settings" and discussion.md "Cost"): 310 trials (7 × 7
  fixed + 11 × 16 dense points + 16 extension + 3 refinement + 66 searched-cell replicates; the per-cell terms
  above add up to ≈ 313, so the ≈ 240 total was a slip), 2543.6 min of training summed over trials, wall
  2026-12-02 19:00 to 2026-12-05 16:39 over several sessions, under load (two trials at nice 15, later nice 5,
  beside the axes study and test suites, on machines that differ by up to 1.6–2.1× per CPU-second). About
  1298 min of the sum are three pruned trials whose ``wall_time`` spans a break between sessions; the other 307
  sum to ≈ 1245 min. Not a quiet-machine cost.
  """
  c = republish_config()
  c.name = "mnist_table3_robust"
  c.sweeps = robust_sweeps()
  c.search = common.search(refine_factor=1.5, max_refinements=3)
  c.replicates = common.replicates(num_seeds=ROBUST_SEEDS)
  c.analysis.title = ("MNIST / LeNet-5: You et al. 2020 Table 3, robust: ≥ 6 seeds per cell, dense search near "
                      "the divergence cliffs, AdaGrad ε and G₀ searched")
  return c


def get_config(part: str = "") -> ml_collections.ConfigDict:
  """Both rounds (default), or ``lamb_lars/configs/studies/mnist_table3.py:round2`` for round 2 alone as its own study
  ``mnist_table3_round2``: the published round 1 predates the dead-run rule's ``stop.dead_evals``, so its
  workdir refuses the changed trial configs and round 2 ran in a workdir of its own. ``:republish`` is the merged
  study of the republish (``republish_config``)."""
  if part == "republish":
    return republish_config()
  if part == "adagrad_eps":
    return adagrad_config()
  if part == "robust":
    return robust_config()
  if part not in ("", "round2"):
    raise ValueError(f"mnist_table3.py:{part}: the parts are 'round2', 'republish', 'adagrad_eps' and 'robust'.")
  base = base_config()
  base.optimizer.lr_scaling = "none"  # the searched LR is the LR at the batch the trial runs at
  c = ml_collections.ConfigDict()
  c.name = "mnist_table3_round2" if part else "mnist_table3"
  c.base = base
  c.sweeps = sweeps((2,) if part else (1, 2))
  c.search = common.search(rung_after_warmup=False)  # round 1's rule; round 2 sets its own (``pruner``)
  c.runner = common.runner()
  c.replicates = common.replicates(num_seeds=3)
  c.analysis = common.analysis(
      title="MNIST / LeNet-5: You et al. 2020 Table 3 at paper budget (30 epochs, tuned per cell)"
      + (", round 2: four 8K cells on re-centred LR ranges" if part else ""),
      paper="mnist_lenet", num_train=55000, baseline_epochs=30.0, table3_batch=8192)
  return c
