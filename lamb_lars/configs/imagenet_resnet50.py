"""ImageNet / ResNet-50 v1.5 baseline of You et al. 2020 (Table 2): batch 256, 90 epochs, momentum SGD → 75.9% top-1.

Command:  python train.py --config=lamb_lars/configs/imagenet_resnet50.py --workdir=runs/imagenet_resnet50 \\
              --config.data_dir=$TFDS_DATA_DIR
          Goyal et al.'s large-batch version of the same recipe (linear scaling + 5-epoch gradual warmup):
          python train.py --config=lamb_lars/configs/imagenet_resnet50.py:8192 --workdir=runs/imagenet_resnet50_8k
Hardware: one 8-GPU node (32 images per GPU, as Goyal et al.), bf16. 90 epochs = 450,360 steps ≈ 115 M images
          ≈ 2.8 EFLOP (24.6 GFLOP/img, docs/science.md §5); at the MLPerf-level ≈ 7,000 img/s per H100 that is ≈ 35
          min on
          8 H100s, several times that for an unoptimised input pipeline (estimate, not measured).
Expected: 75.9% top-1 on the 50,000 validation images (paper Table 2; also the MLPerf ResNet-50 quality target).
          The paper's Table 1 lists Goyal et al.'s 8K run of this recipe at 76.3%.

Table 2 gives only the batch, the epochs and the accuracy; the recipe is the standard one of Goyal et al. 2017
("Accurate, Large Minibatch SGD", §2 and §5.1):
  * momentum SGD, m = 0.9 (Goyal et al. use Nesterov and note standard momentum is equally effective);
  * peak LR η = 0.1·B/256 (linear scaling rule), step decay ×0.1 at epochs 30, 60, 80;
  * gradual warmup for B > 256: linear from 0.1 to η over the first 5 epochs (no warmup at B = 256);
  * L2 weight decay 1e-4 on conv and dense kernels only — not on BN γ/β or biases (the default masks);
  * BN statistics per GPU of 32 images; γ = 0 in the last BN of every residual block;
  * no label smoothing (the baseline row of Table 2).
Input: Inception-style random-resized 224² crops + flips, centre 87.5% crop for evaluation
(lamb_lars/input_pipeline/imagenet.py). The config argument is the global batch (default 256); it sets the batch, the
scaled LR and the warmup together.
"""
from lamb_lars.configs import default

BASE_BATCH = 256


def get_config(batch=None):
  config = default.get_config()
  b = int(batch) if batch else BASE_BATCH
  config.dataset = "imagenet2012"
  config.image_size = 224
  config.model = "resnet50"
  config.num_classes = 1000
  config.dtype = "bfloat16"
  config.zero_init_last_bn = True
  config.batch_size = b
  config.num_epochs = 90.0
  config.eval_batch_size = 4096       # a multiple of any power-of-two device count up to 4,096
  config.label_smoothing = 0.0
  config.bn.examples_per_group = 0     # per-device statistics (32 images per GPU on 8 GPUs)
  config.checkpoint_every_epochs = 1.0

  opt = config.optimizer
  opt.name = "momentum"
  opt.momentum = 0.9
  opt.learning_rate = 0.1
  opt.base_batch_size = BASE_BATCH
  opt.lr_scaling = "linear"
  opt.weight_decay = 1e-4
  s = opt.schedule
  s.decay = "step"
  s.step_boundaries_epochs = (30.0, 60.0, 80.0)
  s.step_factor = 0.1
  if b > BASE_BATCH:                   # Goyal et al.: from η0 = 0.1 to η0·B/256 over 5 epochs
    s.warmup_epochs = 5.0
    s.warmup_shape = "linear"
    s.warmup_init_factor = BASE_BATCH / b
  return config
