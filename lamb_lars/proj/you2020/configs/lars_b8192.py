"""The authors' MNIST run: lars, batch 8,192, LR 6.0, warmup 16 epochs, 250 steps (You et al. 2020).

Reproduces: GitHub fastalgo/mnist_tpu, momentum_lars/best/batch-8192-lr-6.0-warmup-16-poly-0.5-2019-03-05-20-21-28.log.
Their final test accuracy: 99.35%.
Command:  python train.py --config=lamb_lars/proj/you2020/configs/lars_b8192.py \\
              --workdir=runs/paper/lars_b8192 --config.seed=0
Hardware: ~2M images: 15–30 min on the 2-core CPU (docs/BENCHMARKS.md); minutes on a GPU.
Shared recipe: lamb_lars/proj/you2020/configs/common.py; comparison: docs/studies/mnist_paper_logs/.
"""
from lamb_lars.proj.you2020.configs import common


def get_config():
  config = common.base(batch_size=8192, steps=250, learning_rate=6.0)
  return common.lars(config, warmup_epochs=16)
