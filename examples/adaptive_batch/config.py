"""The adaptive batch controller on a user's own workload: the digits CNN of examples/digits, its batch grown from
32 as the gradient noise scale grows (batch_schedule='adaptive', docs/adaptive_batch.md).

Command (from the repository root):
  python train.py --config=examples/adaptive_batch/config.py --workdir=/tmp/digits/adaptive
Hardware: any CPU; about a minute on a loaded 2-core machine, most of it start-up and compiling one step per batch
size.
Expected: a few batch decisions, one log line each and one row each in /tmp/digits/adaptive/batch_decisions.jsonl
(step, examples, the estimate behind it, the target, from, to, reason); the batch grows once or twice, and the test
accuracy ends near the fixed-batch run of examples/digits/config.py (about 97%).
"""

import importlib.util
import os

import ml_collections


def _digits_config() -> ml_collections.ConfigDict:
  """examples/digits/config.py, loaded by path (the workload is found from the repository root)."""
  path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "digits", "config.py")
  spec = importlib.util.spec_from_file_location("digits_config", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config()


def get_config() -> ml_collections.ConfigDict:
  config = _digits_config()  # DigitsCNN on the UCI digits, momentum SGD at η = 0.1 for batch 32, cosine, 20 epochs
  config.num_epochs = 10.0
  config.eval_every_epochs = 1.0
  config.checkpoint_every_epochs = 2.0
  config.num_microbatches = 2  # two gradient samples per step on one device: the noise scale is measured in-run
  config.diagnostics.noise_scale = "auto"
  config.batch_schedule = "adaptive"  # data_order is already 'examples' in the digits config
  a = config.adaptive_batch
  a.every_epochs = 1.0  # a decision after every epoch (1,257 examples)
  a.kappa = 1.0  # target = κ · B_simple: uncalibrated (docs/adaptive_batch.md, "When not to trust it")
  a.max_batch = 256
  a.grow_only = True  # a batch warmup (Merrill et al. 2025): the batch only grows
  a.lr_rule = "auto"  # momentum SGD: linear, η·B/32
  return config
