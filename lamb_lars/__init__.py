"""lamb_lars: the science of huge-batch training, in JAX.

The optimizers are optax transformations, used like optax's own::

  import lamb_lars
  tx = lamb_lars.lars(learning_rate=schedule, momentum=0.9, weight_decay=1e-4)
  tx = lamb_lars.lamb(1e-3, weight_decay=0.01, trust=lamb_lars.TrustRatio(ratio_bounds=(0.0, 10.0)))

Importing this package parses no flags and touches no devices, so every module is usable from a notebook. Training is
:func:`lamb_lars.train.trainer.train_and_evaluate` (imported on demand: it pulls in the input pipeline and the models).
"""

from lamb_lars.optim.base_directions import base_direction, layerwise, scale_by_adam
from lamb_lars.optim.masks import DEFAULT_EXCLUDE, exclude_mask, include_mask
from lamb_lars.optim.optimizers import (
  DEFAULT_MASK,
  lamb,
  lars,
  layerwise_adagrad,
  layerwise_adam,
  layerwise_rmsprop,
  layerwise_sgd,
  original,
)
from lamb_lars.optim.trust_ratio import TrustRatio, scale_by_trust_ratio, trust_ratio_stats

__version__ = "0.1.0"

__all__ = [
  "DEFAULT_EXCLUDE",
  "DEFAULT_MASK",
  "TrustRatio",
  "base_direction",
  "exclude_mask",
  "include_mask",
  "lamb",
  "lars",
  "layerwise",
  "layerwise_adagrad",
  "layerwise_adam",
  "layerwise_rmsprop",
  "layerwise_sgd",
  "original",
  "scale_by_adam",
  "scale_by_trust_ratio",
  "trust_ratio_stats",
]
