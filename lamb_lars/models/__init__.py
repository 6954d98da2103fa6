"""Model zoo: ``create_model(name, ...)`` builds the Flax module a config names.

Names: ``lenet5`` (MNIST, You et al. 2020 Table 2); ``mnist_cnn`` (the TensorFlow official MNIST CNN with dropout that
the paper's authors trained, ``mnist_cnn.py``); ``small_cnn`` (two conv + BN layers: the cheapest model with
batch norm, for BN-group tests and quick CPU studies); ``resnet{18,34,50,101,152}`` (ImageNet ResNet v1.5: 7×7 stem +
max-pool, He et al. 2016); ``resnet{18,34,50,101,152}_cifar`` (3×3 stem, no max-pool). Every model is called as
``model.apply(variables, x, train=...)`` on NHWC images and returns logits. ``mlp``: a plain MLP (``mlp.py``).

Size knobs (``config.model_width``, ``config.model_depth``, ``config.mlp_hidden``): ``width`` multiplies every
layer's width of lenet5, mnist_cnn, small_cnn, mlp and the ResNets (their 64 base filters), ``max(1,
round(n·width))``, so width 1 builds exactly today's model; ``depth`` is the MLP's number of hidden layers.

A researcher's own model: ``name`` may be an import path ``pkg.module:Name`` (:mod:`lamb_lars.common.import_path`)
of a Flax module class or factory, called as ``Name(num_classes=..., dtype=..., norm=...)`` (docs/workloads.md).
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import flax.linen as nn
import jax.numpy as jnp

from lamb_lars.common import import_path
from lamb_lars.errors import ConfigError
from lamb_lars.models.lenet import LeNet5, scaled
from lamb_lars.models.mlp import MLP
from lamb_lars.models.mnist_cnn import MnistCNN
from lamb_lars.models.resnet import STAGE_SIZES, ResNet, build_resnet, default_norm
from lamb_lars.models.small_cnn import SmallCNN

_RESNETS = {f"resnet{d}": (d, "imagenet") for d in STAGE_SIZES}
_RESNETS.update({f"resnet{d}_cifar": (d, "cifar") for d in STAGE_SIZES})

MODEL_NAMES = ("lenet5", "mnist_cnn", "small_cnn", "mlp") + tuple(sorted(_RESNETS))
MODELS_WITHOUT_BN = ("lenet5", "mnist_cnn", "mlp")  # BN groups cannot couple devices in these
USER_MODEL_ARGS = ("num_classes", "dtype", "norm")  # the keyword arguments a user model is called with


def user_model(path: str, *, num_classes: int, dtype: Any, norm: Callable[..., nn.Module]) -> nn.Module:
  """The module ``path`` (``pkg.module:Name``) builds: ``Name(num_classes=, dtype=, norm=)``, which must be a
  ``flax.linen.Module``; a ConfigError in one sentence otherwise (docs/workloads.md)."""
  factory = import_path.resolve(path, "model")
  if not callable(factory):
    raise ConfigError(f"config.model={path!r} names a {type(factory).__name__}, not a Flax module class or factory.")
  try:
    module = factory(num_classes=num_classes, dtype=dtype, norm=norm)
  except TypeError as e:
    raise ConfigError(
      f"config.model={path!r} cannot be called as {path.split(':')[1]}(num_classes=..., dtype=..., "
      f"norm=...) ({' '.join(str(e).split())}); see docs/workloads.md."
    ) from None
  if not isinstance(module, nn.Module):
    raise ConfigError(f"config.model={path!r} returned a {type(module).__name__}, not a flax.linen.Module.")
  return module


def create_model(
  name: str,
  *,
  num_classes: int,
  dtype: Any = jnp.float32,
  norm: Optional[Callable[..., nn.Module]] = None,
  zero_init_last_bn: bool = False,
  width: float = 1.0,
  depth: int = 0,
  hidden: tuple = (300, 100),
) -> nn.Module:
  """The module called ``name``.

  ``dtype`` is the compute dtype (params stay float32). ``norm`` replaces the default
  ``nn.BatchNorm(momentum=0.9, epsilon=1e-5)`` factory (e.g. a BN-group module); ``None`` keeps the default.
  LeNet-5 has no batch norm or residual blocks and ignores ``norm`` and ``zero_init_last_bn``; ``small_cnn`` has no
  residual blocks and ignores ``zero_init_last_bn``. ``width``, ``depth``, ``hidden``: the size knobs (module
  docstring). An import path ``name`` builds the user's module (:func:`user_model`). An unknown ``name`` is a
  :class:`~lamb_lars.errors.ConfigError` (one sentence, exit status 2 on the command line).
  """
  if import_path.is_import_path(name):
    return user_model(name, num_classes=num_classes, dtype=dtype, norm=default_norm if norm is None else norm)
  if name == "lenet5":
    return LeNet5(num_classes=num_classes, dtype=dtype, width=width)
  if name == "mnist_cnn":
    return MnistCNN(num_classes=num_classes, dtype=dtype, width=width)
  if name == "small_cnn":
    return SmallCNN(num_classes=num_classes, dtype=dtype, norm=norm, width=width)
  if name == "mlp":
    return MLP(num_classes=num_classes, dtype=dtype, hidden=tuple(hidden), depth=depth, width=width)
  if name not in _RESNETS:
    raise ConfigError(
      f"config.model={name!r} is not one of {', '.join(MODEL_NAMES)}, nor an import path 'package.module:Name'."
    )
  resnet_depth, stem = _RESNETS[name]
  return build_resnet(
    resnet_depth,
    stem=stem,
    num_classes=num_classes,
    dtype=dtype,
    num_filters=scaled(64, width),
    norm=default_norm if norm is None else norm,
    zero_init_last_bn=zero_init_last_bn,
  )


__all__ = ["MLP", "MODEL_NAMES", "MODELS_WITHOUT_BN", "MnistCNN", "ResNet", "SmallCNN", "create_model", "user_model"]
