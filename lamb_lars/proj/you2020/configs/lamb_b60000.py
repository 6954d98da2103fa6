"""The authors' MNIST run: lamb, batch 60,000, LR 0.11, warmup 7 epochs, 35 steps (You et al. 2020).

Reproduces: GitHub fastalgo/mnist_tpu, lamb/log1/batch-60000-lr-0.11-warmup-7-poly-0.5-2019-04-04-11-08-14.log.
Their final test accuracy: 98.87%.
Command:  python train.py --config=lamb_lars/proj/you2020/configs/lamb_b60000.py \\
              --workdir=runs/paper/lamb_b60000 --config.seed=0
Hardware: ~2M images: 15–30 min on the 2-core CPU (docs/BENCHMARKS.md); minutes on a GPU.
Shared recipe: lamb_lars/proj/you2020/configs/common.py; comparison: docs/studies/mnist_paper_logs/.
"""
from lamb_lars.proj.you2020.configs import common


def get_config():
  config = common.base(batch_size=60000, steps=35, learning_rate=0.11)
  return common.lamb(config, warmup_epochs=7, weight_decay=0.01)
