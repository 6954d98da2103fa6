"""The authors' MNIST run: momentum, batch 1,024, LR 0.08, warmup 0 epochs, 2000 steps (You et al. 2020).

Reproduces: GitHub fastalgo/mnist_tpu, momentum_poly/best/batch-1024-lr-0.08-warmup-0-poly-0.5-*.log (5 runs) and
momentum_poly/log/… (1 run).
Their final test accuracy: 99.22, 99.23, 99.29, 99.32, 99.34, 99.35 (six runs: 99.22–99.35%).
Command:  python train.py --config=lamb_lars/proj/you2020/configs/momentum_b1024.py \\
              --workdir=runs/paper/momentum_b1024 --config.seed=0
Hardware: ~2M images: 15–30 min on the 2-core CPU (docs/BENCHMARKS.md); minutes on a GPU.
Shared recipe: lamb_lars/proj/you2020/configs/common.py; comparison: docs/studies/mnist_paper_logs/.
"""
from lamb_lars.proj.you2020.configs import common


def get_config():
  config = common.base(batch_size=1024, steps=2000, learning_rate=0.08)
  return common.momentum(config, warmup_epochs=0)
