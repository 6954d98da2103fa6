"""Does the critical batch follow the data or the model? (issue 42). B_crit from steps to target (Shallue et al. 2018;
S(B) = S_min·(1 + B_crit/B)), CBS(t) by branching (Merrill et al. 2025) and B_simple (McCandlish et al. 2018) on
two axes of MNIST workloads, to test Golmant et al. 2018 (B_crit follows the model and the data's complexity more
than the dataset size) against Zhang et al. 2024 (it follows the data size, hardly the model size).

Settings (``SETTINGS``; LeNet-5 on 55K is the shared point of both axes and runs once):
* data axis, LeNet-5 (width 1) on nested seeded subsets of the 55K training split: 7,500, 15,000, 30,000, 55,000;
* model axis, all on 55K: the MLP 300-100, LeNet-5 at widths 0.5, 1 and 2, and the authors' CNN
  (lamb_lars/proj/you2020/configs/, lamb_lars/models/mnist_cnn.py) at width 0.25 (8, 16, 256 units: the full one is ~10×
  LeNet-5's cost per step).

Command (everything, resumable, in the background; see the script for one setting at a time):
  nohup scripts/critical_batch_axes.sh studies/critical_batch_axes > studies/critical_batch_axes.log 2>&1 &
One setting by hand:
  python -m lamb_lars.study run --config=lamb_lars/configs/studies/critical_batch_axes.py:lenet5 \\
      --workdir=studies/axes/lenet5
  python -m lamb_lars.study branch --config=lamb_lars/configs/studies/critical_batch_axes.py:branch-lenet5 \\
      --workdir=studies/axes/branch-lenet5
  python -m lamb_lars.study report --workdir=studies/axes/lenet5 --out=docs/studies/critical_batch_axes/lenet5
The cross-setting answer (table + figure): ``python -m lamb_lars.study.analysis.axes docs/studies/critical_batch_axes``.

Per setting, two studies:
* ``:<setting>`` (steps to target): the baseline recipe (lamb_lars/configs/mnist_lenet.py: momentum 0.9, η = 0.05 at
  B0 = 256, cosine decay, wd 5e-4) trained on the same number of *examples* at every dataset size (30 epochs of 55K
  = 1.65M examples: 220 epochs of 7.5K), with 2 micro-batches of 128 so that it logs B_simple(t); then the
  tuned-momentum search per batch in ``LADDER`` (batches above N become the full batch N), the LR searched on a
  log range around the square-root rule (``LR_RANGE``; 6 Sobol points, the runner's edge-extension adequacy rule,
  ASHA on validation accuracy), warmup fixed at ``WARMUP_EXAMPLES``, each trial stopping at the setting's target
  (its cosine decays over the step limit, so a trial stops while its LR is still high; the same at every batch).
  Step limit: ``LIMIT_EXAMPLES`` = 3.3M examples (60 epochs of 55K, twice the baseline), generous and recorded as
  such: a trial that has not reached its target there is a censored point S > limit (scaling_fit.py), not a
  30-epoch cap. The chosen LR per batch is re-run with 3 fresh seeds; S(B) per seed uses the chosen trial and its
  3 replicates (4 seeds per batch), the B_crit interval a bootstrap over seeds (lamb_lars/study/analysis/axes.py).
* ``:branch-<setting>`` (branching): the baseline recipe as reference, trained 16 epochs-of-55K of examples, with
  branches at 256 (the pair), 1024, 4096 and 16384 (capped at N) from the points ``POINTS_EXAMPLES`` (0.5, 2 and 8
  epochs of 55K, the same examples seen at every dataset size: matched points of training), Δ = 65,536 examples,
  5 branch seeds, the linear LR rule.

Pre-registered here, before any trial (the manifest records the commit):
* targets: ``SETTINGS[s]['target']``, test accuracy, by one rule: the bar is 0.5 pp below the accuracy that the
  setting's 30-epoch-equivalent baseline is expected to reach (published or estimated from the model family,
  rounded to 0.1 pp; written beside each setting), so that large batches reach it within the limit. The bar is not
  moved after the runs: if a baseline misses it, the report says so. ``SECONDARY_TARGETS`` (a common 98.0% bar for
  every LeNet-5/CNN setting, 97.5% for the MLP, and the bar − 0.3 pp) are reported as sensitivity.
* ε of branching: ``EPSILON`` = 0.2 relative (a batch does not lose when the 95% interval of its 5 paired
  validation-loss differences after Δ lies below 20% of the mean loss of the 256 branches); the report also
  prints the brackets at ``EPSILON_SENSITIVITY`` = 0.05, 0.1, 0.5.

Cost (measured first: a pilot of one 1-epoch run of 55K per model at batch 256 and 4096, 2026-11-27 19:39–19:52
UTC, on the shared 2-core CPU while other helpers ran: load average 16–19, so every number here is LOADED; wall
seconds of one 1-epoch run, start-up and compile included, at 256 / 4096): MLP 27 / 30; LeNet-5 ×0.5 68 / 69;
LeNet-5 84 / 92; LeNet-5 ×2 140 / 78 (the load moved); CNN ×0.25 72 / 140. ``PILOT_LOADED`` splits each
into training seconds per 55K-epoch (E) and a per-trial overhead. A quiet machine is ≈ 4.5× faster
(``QUIET_FACTOR``: the ladder's LeNet-5 baseline trained 30 E in 117 s). Cost model per setting
(``E_PER_SETTING``, ``TRIALS_PER_SETTING``): ≈ 732 E in ≈ 125 trials (baseline + 3 replicates 120 E; per batch of
the 5-batch ladder ≈ 45 E of search and 3 replicates at ≈ 20 E; branching 16 + 60 × 1.19 E). ``estimate_hours()``:
≈ 6.4 h of wall time on the 2 workers of a quiet 2-core CPU (≈ 29 h at the pilot's load), within the ≈ 12 h
budget with room for misses (a replicate that misses its target at 8K costs 60 E). The width-2 LeNet-5 (2.8 of
the 12.8 worker-hours) and the CNN ×0.25 (3.6) are half of it. Cut order if it runs long: the width-2 LeNet-5,
then the 30K subset, then batch 1024 — never the seeds. Seeds: 4 trials per batch (the chosen trial and 3
replicates), 5 per branch. B_crit is fitted to the 3 replicates (analysis/axes.py, 2026-11-28: the chosen trial was
selected on validation accuracy, so, as in every report, it is not a fresh seed); the fit with it is a sensitivity.
"""
from __future__ import annotations

import math

import ml_collections

from lamb_lars.configs.studies import common, mnist_table3

FULL = 55000              # the training split (55K/5K/10K, as the paper tunes)
B0 = 256
LADDER = (128, 512, 1024, 2048, 8192)    # steps-to-target batches; > N becomes the full batch N
BRANCH_BATCHES = (256, 1024, 4096, 16384)  # > N dropped (N itself added when it is not in the list)
BRANCH_SEEDS = (1, 2, 3, 4, 5)
NUM_SEEDS = 3             # fresh seeds per chosen configuration (with the chosen trial: 4 per batch)
NUM_TRIALS = 6            # LR points per batch
BASELINE_EXAMPLES = 30 * FULL            # the baseline's training length, the same at every dataset size
LIMIT_EXAMPLES = 60 * FULL               # the step limit of steps-to-target trials (censored beyond)
WARMUP_EXAMPLES = 2 * FULL               # fixed linear warmup of the tuned trials
EVAL_EXAMPLES = FULL // 2                # an evaluation every 27,500 examples
REFERENCE_EXAMPLES = 16 * FULL           # the branching reference's length
POINTS_EXAMPLES = (FULL // 2, 2 * FULL, 8 * FULL)   # branch points, examples of the reference
DELTA = 65536
ETA = 0.05
LR_RANGE = (ETA / 30, ETA * 2)           # η0 at B0 under the square-root rule: η(B) = η0·√(B/256)
EPSILON = 0.2
EPSILON_SENSITIVITY = (0.05, 0.1, 0.2, 0.5)

# name → model, width, training examples, target (pre-registered, test accuracy), expected baseline (the rule's
# input), the axes it belongs to, and its parameter count (the layer formulas of tests/test_model_size.py).
SETTINGS = {
    "data7500": dict(model="lenet5", width=1.0, n=7500, expected=0.985, target=0.980, axes=("data",)),
    "data15000": dict(model="lenet5", width=1.0, n=15000, expected=0.988, target=0.983, axes=("data",)),
    "data30000": dict(model="lenet5", width=1.0, n=30000, expected=0.990, target=0.985, axes=("data",)),
    "lenet5": dict(model="lenet5", width=1.0, n=FULL, expected=0.992, target=0.987, axes=("data", "model")),
    "mlp": dict(model="mlp", width=1.0, n=FULL, expected=0.982, target=0.977, axes=("model",)),
    "lenet5_w0.5": dict(model="lenet5", width=0.5, n=FULL, expected=0.989, target=0.984, axes=("model",)),
    "lenet5_w2": dict(model="lenet5", width=2.0, n=FULL, expected=0.993, target=0.988, axes=("model",)),
    "cnn_w0.25": dict(model="mnist_cnn", width=0.25, n=FULL, expected=0.991, target=0.986, axes=("model",)),
}

# The pilot (2026-11-27 19:39–19:52 UTC, shared 2-core CPU at load average 16–19, one single-threaded 1-epoch run
# of 55K at a time at nice 10, batch 256 then 4096): training seconds per 55K-epoch (E) at batch 256 (from the
# trainer's examples/s; 4096 was 3–28% faster) and the rest of the wall time of a 1-epoch run (start-up, compile,
# one evaluation of 15K examples, checkpoint), per model. LOADED: a quiet machine is ≈ QUIET_FACTOR times faster
# (the ladder's baseline trained 30 epochs in 117 s, partly under load; this pilot's LeNet-5 epoch took 84 s).
PILOT_LOADED = {  # model key → (s per E, s overhead per trial); wall of 1 E at 256 / 4096 in the comments
    ("mlp", 1.0): (3.5, 23.0),            # 26.8 s / 30.1 s
    ("lenet5", 0.5): (8.5, 60.0),         # 68.4 s / 68.9 s
    ("lenet5", 1.0): (17.4, 67.0),        # 84.1 s / 91.5 s
    ("lenet5", 2.0): (51.8, 57.0),        # 139.5 s / 78.2 s (76.8 / 26.8 s per E: the load moved; the mean)
    ("mnist_cnn", 0.25): (73.5, 32.0),    # 71.6 s / 139.9 s (42.3 / 104.6 s per E; the mean)
}
QUIET_FACTOR = 4.5
# The cost model per setting, in E and trials (steps to target: baseline + 3 replicates at 30 E; per batch ≈ 45 E
# of search — 6 ASHA-pruned trials, 2 resumed to the target, half the cells one range extension — and 3 replicates
# at ≈ 20 E; branching: the 16 E reference and 60 branches of 1.19 E).
E_PER_SETTING = 4 * 30 + len(LADDER) * (45 + 3 * 20) + 16 + 60 * DELTA / FULL
TRIALS_PER_SETTING = 4 + len(LADDER) * (9 + 3) + 61


def estimate_hours(quiet: bool = True, workers: int = 2) -> float:
  """Wall hours of the whole study on ``workers`` single-threaded workers, from ``PILOT_LOADED`` and the cost model."""
  total = 0.0
  for s in SETTINGS.values():
    per_e, over = PILOT_LOADED[(s["model"], s["width"])]
    total += E_PER_SETTING * per_e + TRIALS_PER_SETTING * over
  return total / (QUIET_FACTOR if quiet else 1.0) / workers / 3600


def _s(n: int, w: float) -> int:
  return max(1, int(round(n * w)))


def num_params(model: str, width: float) -> int:
  """Parameters of the built-in MNIST models at a width (10 classes, 28×28×1 inputs)."""
  dense = lambda i, o: i * o + o
  conv = lambda k, i, o: k * k * i * o + o
  if model == "lenet5":
    c1, c2, f1, f2 = _s(6, width), _s(16, width), _s(120, width), _s(84, width)
    return conv(5, 1, c1) + conv(5, c1, c2) + dense(25 * c2, f1) + dense(f1, f2) + dense(f2, 10)
  if model == "mnist_cnn":
    c1, c2, f1 = _s(32, width), _s(64, width), _s(1024, width)
    return conv(5, 1, c1) + conv(5, c1, c2) + dense(49 * c2, f1) + dense(f1, 10)
  if model == "mlp":
    h1, h2 = _s(300, width), _s(100, width)
    return dense(784, h1) + dense(h1, h2) + dense(h2, 10)
  raise ValueError(f"no parameter formula for model {model!r}.")


def secondary_targets(name: str) -> tuple:
  """The sensitivity targets of a setting: the common bar (98.0%, MLP 97.5%) and its bar − 0.3 pp, below it."""
  s = SETTINGS[name]
  common_bar = 0.975 if s["model"] == "mlp" else 0.980
  return tuple(sorted({round(t, 4) for t in (common_bar, s["target"] - 0.003) if t < s["target"] - 1e-9}))


def batches(name: str) -> tuple:
  """The steps-to-target ladder of a setting: ``LADDER`` with batches above N replaced by N."""
  n = SETTINGS[name]["n"]
  return tuple(sorted({min(b, n) for b in LADDER}))


def branch_batches(name: str) -> tuple:
  """The branch batches of a setting: ``BRANCH_BATCHES`` up to N, and the largest power of two ≤ N when N cuts the
  list (Δ must be a multiple of every branch batch)."""
  n = SETTINGS[name]["n"]
  kept = tuple(b for b in BRANCH_BATCHES if b <= n)
  top = 2 ** int(math.floor(math.log2(n)))
  return kept if top in kept or top > max(BRANCH_BATCHES) else kept + (top,)


def _epochs(examples: float, n: int) -> float:
  return float(examples) / n


def _base(name: str) -> ml_collections.ConfigDict:
  s = SETTINGS[name]
  n = s["n"]
  base = mnist_table3.base_config()   # the MNIST study base: 55K/5K/10K, quiet, micro-batches of 256
  base.model = s["model"]
  base.model_width = float(s["width"])
  base.train_examples = 0 if n == FULL else n
  base.num_epochs = _epochs(BASELINE_EXAMPLES, n)
  base.eval_every_epochs = _epochs(EVAL_EXAMPLES, n)
  base.checkpoint_every_epochs = _epochs(4 * FULL, n)
  base.optimizer.learning_rate = ETA
  return base


def _analysis(name: str, **kw) -> ml_collections.ConfigDict:
  s = SETTINGS[name]
  return common.analysis(
      title=f"Critical batch axes: {name} ({s['model']} width {s['width']:g}, {s['n']:,} training examples)",
      paper="", num_train=s["n"], baseline_epochs=_epochs(BASELINE_EXAMPLES, s["n"]), target_goal=s["target"],
      targets=secondary_targets(name), **kw)


def steps_config(name: str) -> ml_collections.ConfigDict:
  """Steps to target of one setting: the baseline (with B_simple) and the tuned-momentum ladder (module docstring)."""
  n = SETTINGS[name]["n"]
  c = ml_collections.ConfigDict()
  c.name = f"critical_batch_axes_{name}"
  c.base = _base(name)
  rung = max(1, int(round(_epochs(2 * FULL, n))))   # ASHA's first rung at 2 epochs of 55K
  c.sweeps = (
      dict(name="baseline", role="baseline",
           fixed={"batch_size": B0, "microbatch_size": B0 // 2, "diagnostics.noise_scale": True,
                  "diagnostics.noise_scale_ema": 0.99}),
      dict(name="tuned", role="technique", technique="tuned_momentum",
           fixed={"optimizer.lr_scaling": "sqrt", "num_epochs": _epochs(LIMIT_EXAMPLES, n),
                  "optimizer.schedule.warmup_epochs": _epochs(WARMUP_EXAMPLES, n)},
           grid={"batch_size": batches(name)},
           search={"optimizer.learning_rate": ("log",) + LR_RANGE},
           num_trials=NUM_TRIALS, seed=100, stop_at_target=True, pruner={"min_epochs": rung}),
  )
  c.search = common.search(min_full_budget=2, max_extensions=1)
  c.runner = common.runner()
  c.replicates = common.replicates(num_seeds=NUM_SEEDS, roles=("baseline", "technique"))
  c.analysis = _analysis(name, techniques=("tuned_momentum",), target_technique="tuned_momentum")
  c.axes = ml_collections.ConfigDict(dict(
      target=SETTINGS[name]["target"], expected_baseline=SETTINGS[name]["expected"],
      secondary_targets=secondary_targets(name), limit_examples=LIMIT_EXAMPLES, setting=name,
      axes=tuple(SETTINGS[name]["axes"]), num_params=num_params(SETTINGS[name]["model"], SETTINGS[name]["width"]),
      train_examples=n))
  return c


def branch_config(name: str) -> ml_collections.ConfigDict:
  """The branching study of one setting (module docstring), ε pre-registered."""
  n = SETTINGS[name]["n"]
  points = tuple(_epochs(p, n) for p in POINTS_EXAMPLES)
  cadence = min(points)
  c = ml_collections.ConfigDict()
  c.name = f"critical_batch_axes_branch_{name}"
  c.base = _base(name)
  c.base.stop.dead_after_fraction = 0.0   # a branch at chance is a result (it loses), not a dead run
  c.base.optimizer.lr_table = False       # a branch restores the reference's optimizer state
  ref_epochs = _epochs(REFERENCE_EXAMPLES, n)
  c.sweeps = (
      dict(name="reference", role="baseline",
           fixed={"batch_size": B0, "microbatch_size": B0 // 2, "diagnostics.noise_scale": True,
                  "diagnostics.noise_scale_ema": 0.99, "num_epochs": ref_epochs,
                  "checkpoint_every_epochs": cadence, "eval_every_epochs": cadence,
                  "keep_checkpoints": math.ceil(ref_epochs / cadence) + 2}),
      dict(name="branch", role="branch",
           fixed={"microbatch_size": 256, "diagnostics.noise_scale": False, "eval_every_epochs": 0.0,
                  "checkpoint_every_epochs": _epochs(FULL // 2, n)},
           grid={"batch_size": branch_batches(name), "seed": BRANCH_SEEDS}),
  )
  c.branching = common.branching(points_epochs=points, delta_examples=DELTA, lr_rule="linear", lr_multiplier=1.0,
                                 epsilon=EPSILON, relative=True, loss="validation_loss")
  c.search = common.search()
  c.replicates = common.replicates(num_seeds=0)   # the branch seeds are the replicates
  c.runner = common.runner()
  c.analysis = _analysis(name, notes=f"ε = {EPSILON} relative, pre-registered; sensitivity {EPSILON_SENSITIVITY}.")
  c.analysis.baseline_epochs = ref_epochs
  c.axes = ml_collections.ConfigDict(dict(
      epsilon=EPSILON, epsilon_sensitivity=EPSILON_SENSITIVITY, setting=name, points_examples=POINTS_EXAMPLES))
  return c


def parts() -> tuple:
  """Every ``:part`` of this file, in the order the launch script runs them."""
  return tuple(p for name in SETTINGS for p in (name, f"branch-{name}"))


def get_config(part: str = "") -> ml_collections.ConfigDict:
  """``critical_batch_axes.py:<setting>`` (steps to target) or ``:branch-<setting>`` (branching); see SETTINGS. The
  bare file is ``:lenet5``, the point both axes share."""
  part = part or "lenet5"
  if part.startswith("branch-") and part[len("branch-"):] in SETTINGS:
    return branch_config(part[len("branch-"):])
  if part in SETTINGS:
    return steps_config(part)
  raise ValueError(f"critical_batch_axes.py:{part}: name a setting ({', '.join(SETTINGS)}) or branch-<setting>.")
