"""ImageNet / ResNet-50 at batch 128K with LARS: You et al. 2020 Table 4's best setting → 73.37% top-1.

Command:  python train.py --config=lamb_lars/configs/imagenet_lars_128k.py --workdir=runs/imagenet_lars_128k \\
              --config.data_dir=$TFDS_DATA_DIR
Hardware: paper: 256 TPU chips (512 per chip). Here: any power-of-two device count, e.g. 256 GPUs (32 × 8-GPU
          nodes) at 512 images each, bf16; with fewer devices accumulate gradients, e.g. one 8-GPU node:
          --config.num_microbatches=64 (8 × 256 × 64 = 131,072). 90 epochs = 880 steps ≈ 115 M images ≈ 2.8 EFLOP:
          ≈ 64 s of compute on 256 H100s at the MLPerf-level 7,000 img/s per GPU (MLPerf Training v3.0 / v4.0
          results), ≈ 34 min on 8;
          the input pipeline (131,072 JPEG decodes per step) is the likely bound (estimate, not measured).
Expected: 73.37% top-1 on the 50,000 validation images (paper Table 4, batch 128K); the Table 2 baseline is 75.9%
          and 128K lies in ImageNet's "huge batch" regime (64K, 1.28M), where no recipe reaches 99.5% of it.

Table 4's setting: LARS, peak LR 28 (the effective peak at 128K: `lr_scaling='none'`), 25 warmup epochs (linear),
momentum 0.94429, cosine decay, weight decay 1e-4, label smoothing 0.1. Chosen here where Table 4 is silent: 90 epochs
(Table 2's budget), LARS trust coefficient η = 0.001 with the paper's denominator ‖g‖ + β‖w‖
(You, Gitman & Ginsburg 2017), BN γ/β and biases excluded from weight decay and trust ratios (TF-TPU skip list),
and BN statistics over groups of 128 examples (the paper's batch-to-core ratio of 128, §4.1).

BN rule: `bn.mode='ghost'` (Hoffer et al. 2017's ghost batches) with 128 examples. On TPUs each core normalises its
own batch, so the paper's BN group is the per-core batch: 128 examples. Ghost batches keep exactly 128 whatever a
device holds (512 per device on 256 devices → 4 ghost batches; 64 → pairs of devices), while MLPerf's span rule
(`'mlperf_span'`) would normalise all 512 together and so change the statistic the recipe was tuned with.

Built on lamb_lars/configs/imagenet_resnet50.py (model, data, evaluation). Epochs count examples
(lamb_lars/common/durations.py): 90 epochs = 880 steps, 25 of warmup = 245, evaluations and checkpoints every 4 epochs =
40 steps.
"""

from lamb_lars.configs import imagenet_resnet50

BATCH = 131_072


def get_config():
  config = imagenet_resnet50.get_config()
  config.zero_init_last_bn = False
  config.batch_size = BATCH
  config.num_epochs = 90.0
  config.eval_every_epochs = 4.0
  config.checkpoint_every_epochs = 4.0
  config.label_smoothing = 0.1
  config.bn.mode = "ghost"                # 128 examples per group, as the paper's per-core batch (docstring)
  config.bn.examples_per_group = 128
  opt = config.optimizer
  opt.name = "lars"
  opt.learning_rate = 28.0
  opt.lr_scaling = "none"
  opt.momentum = 0.94429
  opt.weight_decay = 1e-4
  opt.trust_coefficient = 0.001
  opt.denominator = "paper"
  s = opt.schedule
  s.warmup_epochs = 25.0
  s.warmup_shape = "linear"
  s.decay = "cosine"
  s.step_boundaries_epochs = ()
  return config
