"""lamb_lars: the science of huge-batch training, in JAX.

The optimizers are optax transformations, used like optax's own::

  import lamb_lars
  tx = lamb_lars.lars(learning_rate=schedule, momentum=0.9, weight_decay=1e-4)
  tx = lamb_lars.lamb(1e-3, weight_decay=0.01, trust=lamb_lars.TrustRatio(ratio_bounds=(0.0, 10.0)))

Importing this package parses no flags and touches no devices, so every module is usable from a notebook. Training is
:func:`lamb_lars.train.trainer.train_and_evaluate` (imported on demand: it pulls in the input pipeline and the models).
"""

import importlib
from typing import Any

# The public optimizer API, imported on first use (PEP 562): ``import lamb_lars`` stays free of JAX, so the study
# command line (report, verify, status, snapshot) starts in about a second less.
_API = {
  "base_direction": "lamb_lars.optim.base_directions",
  "layerwise": "lamb_lars.optim.base_directions",
  "scale_by_adam": "lamb_lars.optim.base_directions",
  "DEFAULT_EXCLUDE": "lamb_lars.optim.masks",
  "exclude_mask": "lamb_lars.optim.masks",
  "include_mask": "lamb_lars.optim.masks",
  "DEFAULT_MASK": "lamb_lars.optim.optimizers",
  "lamb": "lamb_lars.optim.optimizers",
  "lars": "lamb_lars.optim.optimizers",
  "layerwise_adagrad": "lamb_lars.optim.optimizers",
  "layerwise_adam": "lamb_lars.optim.optimizers",
  "layerwise_rmsprop": "lamb_lars.optim.optimizers",
  "layerwise_sgd": "lamb_lars.optim.optimizers",
  "original": "lamb_lars.optim.optimizers",
  "TrustRatio": "lamb_lars.optim.trust_ratio",
  "scale_by_trust_ratio": "lamb_lars.optim.trust_ratio",
  "trust_ratio_stats": "lamb_lars.optim.trust_ratio",
}


def __getattr__(name: str) -> Any:
  if name in _API:
    return getattr(importlib.import_module(_API[name]), name)
  raise AttributeError(f"module 'lamb_lars' has no attribute {name!r}")


def __dir__() -> list[str]:
  return sorted(set(globals()) | set(_API))


__version__ = "0.1.0"

__all__ = sorted(_API)
