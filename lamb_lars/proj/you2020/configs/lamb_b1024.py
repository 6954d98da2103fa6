"""The authors' MNIST run: lamb, batch 1,024, LR 0.004, warmup 1 epochs, 2050 steps (You et al. 2020).

Reproduces: GitHub fastalgo/mnist_tpu,
lamb/log2/batch-1024-lr-0.004-warmup-1-poly-0.5-weight-decay-0.01-2019-04-1*.log (5 runs at 2050 steps).
Their final test accuracy: 99.35, 99.38, 99.41, 99.41, 99.47% (five runs; five more at 1758 steps in lamb/gd_log/
reached 99.34–99.39%).
Command:  python train.py --config=lamb_lars/proj/you2020/configs/lamb_b1024.py \\
              --workdir=runs/paper/lamb_b1024 --config.seed=0
Hardware: ~2M images: 15–30 min on the 2-core CPU (docs/BENCHMARKS.md); minutes on a GPU.
Shared recipe: lamb_lars/proj/you2020/configs/common.py; comparison: docs/studies/mnist_paper_logs/.
"""
from lamb_lars.proj.you2020.configs import common


def get_config():
  config = common.base(batch_size=1024, steps=2050, learning_rate=0.004)
  return common.lamb(config, warmup_epochs=1, weight_decay=0.01)
