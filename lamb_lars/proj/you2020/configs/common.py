"""What every configuration of the authors' MNIST code shares (GitHub ``fastalgo/mnist_tpu``, ``*/mnist_tpu.py``).

- Model: TensorFlow's official MNIST CNN with dropout 0.4 (lamb_lars/models/mnist_cnn.py), inputs pixels/255.
- Data: all 60,000 training images (no validation split: the authors tuned and reported on the test set, and these
  configs reproduce their runs, not a tuning protocol); the 10,000 test images, evaluated at the end.
- Data order: ``data_order='examples'``, one stream of epoch permutations cut into batches that may straddle two
  epochs, as their ``.repeat().shuffle(60000).batch(B, drop_remainder=True)``, which drops nothing ('batches' would
  drop 60000 mod B images an epoch: 608 at batch 1,024). The runs published before this (docs/studies/
  mnist_paper_logs, mnist_table3_paper_cpu) used 'batches' (docs/science.md, "Data order of the paper runs").
- Duration in steps, as their ``--train_steps``.
- LR: their TensorFlow schedule, ``decay='tf_poly'`` (warmup from 0 over 60000·W/B unrounded steps, then
  ``polynomial_decay(η, global_step, train_steps, end_learning_rate, power=0.5)``), no batch-size scaling.
- Momentum and LARS end at 1e-4; LAMB (BERT's ``create_optimizer``) decays to 0 and truncates its warmup to
  int(60000·W/B) steps.
"""
import ml_collections

from lamb_lars.configs import default

NUM_TRAIN = 60000
UNROLLED_UP_TO = 8192  # the largest batch whose micro-batches are unrolled in one compiled step (base() below)


def base(*, batch_size: int, steps: int, learning_rate: float) -> ml_collections.ConfigDict:
  """The shared training config; each paper config sets its optimizer on top."""
  config = default.get_config()
  config.dataset = "mnist"
  config.model = "mnist_cnn"
  config.input_scaling = "unit"
  config.validation_split = 0
  config.batch_size = batch_size
  config.num_train_steps = steps
  config.data_order = "examples"  # the authors' input stream (module docstring)
  # Accumulate over micro-batches of ≤ 2000 images (the same gradient, less memory: the full batch needs it).
  # XLA:CPU runs a rolled loop (scan) over this CNN's convolutions ~20× slower, so the loop is unrolled up to 8K:
  # on both cores that is 1.4× faster than one call per micro-batch from the host (XLA overlaps the micro-batches;
  # single-threaded the two are equal) at 3.0 GB peak RSS against 1.3 GB. At the full batch the unrolled loop keeps
  # 30 micro-batches' buffers alive (14.8 GB; a 12 GB Colab or two runs on 24 GiB do not fit), so full-batch runs
  # use the host loop (lamb_lars/train/host_accumulation.py), ≤ 2 GB. docs/BENCHMARKS.md §22, §24, §26.
  config.microbatch_size = 2000
  config.microbatch_loop = "unrolled" if batch_size <= UNROLLED_UP_TO else "host"
  config.eval_every_steps = max(steps // 10, 1)
  config.checkpoint_every_steps = max(steps // 10, 1)
  config.diagnostics.noise_scale = False
  opt = config.optimizer
  opt.learning_rate = learning_rate
  opt.lr_scaling = "none"
  opt.base_batch_size = batch_size
  opt.weight_decay = 0.0
  s = opt.schedule
  s.decay = "tf_poly"
  s.poly_power = 0.5
  s.end_lr = 1e-4
  s.warmup_steps = 0
  return config


def momentum(config: ml_collections.ConfigDict, warmup_epochs: float) -> ml_collections.ConfigDict:
  """``momentum_poly/``: ``tf.train.MomentumOptimizer(lr, 0.9)``, no weight decay (v ← 0.9·v + g; w ← w − lr·v)."""
  opt = config.optimizer
  opt.name = "momentum"
  opt.momentum = 0.9
  opt.schedule.warmup_steps = -1
  opt.schedule.warmup_epochs = float(warmup_epochs)
  return config


def lars(config: ml_collections.ConfigDict, warmup_epochs: float) -> ml_collections.ConfigDict:
  """``momentum_lars/``: their TF LARSOptimizer (lamb_lars/optim/tf_lars.py): η = 0.001, β = 1e-4 in the ratio only,
  ε = 0, momentum 0.9, every variable."""
  opt = config.optimizer
  opt.name = "lars"
  opt.lars_update = "tf"
  opt.momentum = 0.9
  opt.weight_decay = 1e-4
  opt.trust_coefficient = 0.001
  opt.trust_eps = 0.0
  opt.weight_decay_mask = ""
  opt.adaptation_mask = ""
  opt.schedule.warmup_steps = -1
  opt.schedule.warmup_epochs = float(warmup_epochs)
  return config


def lamb(config: ml_collections.ConfigDict, warmup_epochs: float, weight_decay: float) -> ml_collections.ConfigDict:
  """``lamb/optimization.py`` (BERT's LAMB): gradients clipped to global norm 1.0; Adam moments without bias
  correction, ε = 1e-6; weight decay λ added to the direction except for biases; trust ratio ‖w‖/‖u‖ on every
  variable; poly decay to 0; warmup of int(60000·W/B) steps (their April-2019 code, which wrote the logs)."""
  opt = config.optimizer
  opt.name = "lamb"
  opt.b1, opt.b2, opt.eps = 0.9, 0.999, 1e-6
  opt.bias_correction = False
  opt.weight_decay = weight_decay
  opt.adaptation_mask = ""
  opt.gradient_clip_norm = 1.0
  opt.schedule.end_lr = 0.0
  opt.schedule.warmup_steps = int(NUM_TRAIN * warmup_epochs / config.batch_size)
  return config
