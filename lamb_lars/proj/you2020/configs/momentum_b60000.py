"""The authors' MNIST run: momentum, batch 60,000, LR 0.11, warmup 12 epochs, 35 steps (You et al. 2020).

Reproduces: GitHub fastalgo/mnist_tpu, momentum_poly/log/batch-60000-lr-0.11-warmup-12-poly-0.5-2019-03-05-10-38-07.log.
Their final test accuracy: 92.44%.
Command:  python train.py --config=lamb_lars/proj/you2020/configs/momentum_b60000.py \\
              --workdir=runs/paper/momentum_b60000 --config.seed=0
Hardware: ~2M images: 15–30 min on the 2-core CPU (docs/BENCHMARKS.md); minutes on a GPU.
Shared recipe: lamb_lars/proj/you2020/configs/common.py; comparison: docs/studies/mnist_paper_logs/.
"""
from lamb_lars.proj.you2020.configs import common


def get_config():
  config = common.base(batch_size=60000, steps=35, learning_rate=0.11)
  return common.momentum(config, warmup_epochs=12)
