"""One training run on the digits workload (examples/digits/workload.py): momentum SGD at batch 32.

Command (from the repository root):
  python train.py --config=examples/digits/config.py --workdir=/tmp/digits/run
Hardware: any CPU; about a minute on a loaded 2-core machine, most of it start-up and compiling.
Expected: test accuracy about 97% after 20 epochs (eval_accuracy in /tmp/digits/run/metrics.jsonl).
"""

import ml_collections

from lamb_lars.configs import default

WORKLOAD = "examples.digits.workload"


def get_config() -> ml_collections.ConfigDict:
  config = default.get_config()
  config.model = f"{WORKLOAD}:DigitsCNN"
  config.dataset = f"{WORKLOAD}:load"  # returns its own validation split: validation_split stays 0
  config.num_classes = 10
  config.data_order = "examples"  # 1,257 examples: at batch 1024 'batches' would drop 233 an epoch
  config.batch_size = 32
  config.eval_batch_size = 360
  config.num_epochs = 20.0
  config.eval_every_epochs = 2.0
  config.checkpoint_every_epochs = 5.0
  config.diagnostics.noise_scale = False
  opt = config.optimizer
  opt.name = "momentum"
  opt.learning_rate = 0.1
  opt.base_batch_size = 32  # the LR above is for batch 32; other batches scale it (lr_scaling)
  opt.lr_scaling = "linear"
  opt.weight_decay = 5e-4
  opt.schedule.decay = "cosine"
  return config
