"""CIFAR-10 / ResNet-50 (CIFAR stem) baseline of You et al. 2020 (Table 2): batch 128, 200 epochs → 93.9% top-1.

Command:  python train.py --config=lamb_lars/configs/cifar10_resnet50.py --workdir=runs/cifar10_resnet50 \\
              --config.data_dir=$TFDS_DATA_DIR
          (needs a prepared tfds 'cifar10' ArrayRecord directory; lamb_lars/input_pipeline/cifar.py says how to get one)
Hardware: one GPU, bf16. 200 epochs = 78,000 steps of 128 = 10 M images; ResNet-50 with the CIFAR stem costs
          ≈ 3·2·1.3 GMAC ≈ 7.8 GFLOP per 32² training image, so ≈ 78 PFLOP in all: ≈ 13 min at a sustained
          100 TFLOP/s; plan for under an hour on one H100 (estimate, not measured). Not practical on the 2-core
          CPU (docs/science.md §5: ~25 img/s for ResNet-50 at 32² there).
Expected: 93.9% test accuracy on the 10,000 test images (paper Table 2).
Larger batches (Table 2's "large" regime is [2K, 25K]): --config.batch_size=2048 scales the LR linearly from 128.

Table 2 gives the model, batch, epochs and accuracy only; the recipe here is the common CIFAR ResNet one (He et al.
2016 §4.2 with a cosine schedule): momentum SGD 0.9, LR 0.1 at batch 128 (linear scaling), cosine decay to 0 over
200 epochs without warmup, L2 weight decay 5e-4 on conv/dense kernels (not BN γ/β or biases), no label smoothing,
pad-4 random crop + horizontal flip (lamb_lars/input_pipeline/device_preprocess.py), per-device BN statistics.
Model: `resnet50_cifar` (3×3/1 stem, no max-pool) is ResNet v1.5 (stride on the 3×3 conv); the paper's row says
"ResNet-50 v1" (stride on the first 1×1). Both have 23,520,842 parameters (docs/resnet.md); `create_model` builds
v1.5 only.
"""
from lamb_lars.configs import default


def get_config():
  config = default.get_config()
  config.dataset = "cifar10"
  config.model = "resnet50_cifar"
  config.num_classes = 10
  config.dtype = "bfloat16"
  config.batch_size = 128
  config.num_epochs = 200.0
  config.eval_batch_size = 1024
  config.label_smoothing = 0.0
  config.eval_every_epochs = 5.0
  config.checkpoint_every_epochs = 5.0

  opt = config.optimizer
  opt.name = "momentum"
  opt.momentum = 0.9
  opt.learning_rate = 0.1
  opt.base_batch_size = 128
  opt.lr_scaling = "linear"
  opt.weight_decay = 5e-4
  opt.schedule.decay = "cosine"
  return config
