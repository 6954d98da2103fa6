"""Model zoo: ``create_model(name, ...)`` builds the Flax module a config names.

Names: ``lenet5`` (MNIST, You et al. 2020 Table 2); ``mnist_cnn`` (the TensorFlow official MNIST CNN with dropout that
the paper's authors trained, ``mnist_cnn.py``); ``small_cnn`` (two conv + BN layers: the cheapest model with
batch norm, for BN-group tests and quick CPU studies); ``resnet{18,34,50,101,152}`` (ImageNet ResNet v1.5: 7×7 stem +
max-pool, He et al. 2016); ``resnet{18,34,50,101,152}_cifar`` (3×3 stem, no max-pool). Every model is called as
``model.apply(variables, x, train=...)`` on NHWC images and returns logits.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import flax.linen as nn
import jax.numpy as jnp

from lamb_lars.errors import ConfigError
from lamb_lars.models.lenet import LeNet5
from lamb_lars.models.mnist_cnn import MnistCNN
from lamb_lars.models.resnet import STAGE_SIZES, ResNet, build_resnet, default_norm
from lamb_lars.models.small_cnn import SmallCNN

_RESNETS = {f"resnet{d}": (d, "imagenet") for d in STAGE_SIZES}
_RESNETS.update({f"resnet{d}_cifar": (d, "cifar") for d in STAGE_SIZES})

MODEL_NAMES = ("lenet5", "mnist_cnn", "small_cnn") + tuple(sorted(_RESNETS))
MODELS_WITHOUT_BN = ("lenet5", "mnist_cnn")   # BN groups cannot couple devices in these


def create_model(name: str, *, num_classes: int, dtype: Any = jnp.float32,
                 norm: Optional[Callable[..., nn.Module]] = None, zero_init_last_bn: bool = False) -> nn.Module:
  """The module called ``name``.

  ``dtype`` is the compute dtype (params stay float32). ``norm`` replaces the default
  ``nn.BatchNorm(momentum=0.9, epsilon=1e-5)`` factory (e.g. a BN-group module); ``None`` keeps the default.
  LeNet-5 has no batch norm or residual blocks and ignores ``norm`` and ``zero_init_last_bn``; ``small_cnn`` has no
  residual blocks and ignores ``zero_init_last_bn``. An unknown ``name`` is a
  :class:`~lamb_lars.errors.ConfigError` (one sentence, exit status 2 on the command line).
  """
  if name == "lenet5":
    return LeNet5(num_classes=num_classes, dtype=dtype)
  if name == "mnist_cnn":
    return MnistCNN(num_classes=num_classes, dtype=dtype)
  if name == "small_cnn":
    return SmallCNN(num_classes=num_classes, dtype=dtype, norm=norm)
  if name not in _RESNETS:
    raise ConfigError(f"config.model={name!r} is not one of {', '.join(MODEL_NAMES)}.")
  depth, stem = _RESNETS[name]
  return build_resnet(depth, stem=stem, num_classes=num_classes, dtype=dtype,
                norm=default_norm if norm is None else norm, zero_init_last_bn=zero_init_last_bn)


__all__ = ["MODEL_NAMES", "MODELS_WITHOUT_BN", "MnistCNN", "ResNet", "SmallCNN", "create_model"]
