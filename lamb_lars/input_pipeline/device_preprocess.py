"""On-device preprocessing: uint8 batches in, normalised float32 out (jit-friendly jnp, no host work).

Images travel host→device as uint8 (4× less transfer than float32); the cast, normalisation and the cheap
CIFAR augmentation happen here, vectorised over the batch with per-example randomness from one ``rng``.

* MNIST: ``(x/255 − 0.1307) / 0.3081`` (the usual MNIST mean/std); no augmentation (LeNet baseline, docs/science.md §7).
* CIFAR-10: training takes a random 32×32 crop of the image zero-padded by 4 and flips it horizontally with
  probability ½ (He et al. 2016); then per-channel mean/std normalisation (statistics of the 50K train set).
* ImageNet: crops are taken on the host (``imagenet.py``); here only per-channel mean/std normalisation.
* synthetic: ``(x/255 − 0.5) / 0.5``.

``scaling='unit'`` replaces the mean/std normalisation by ``x/255`` alone for every dataset: the input of
TensorFlow's official MNIST model, which You et al. 2020 trained (``config.input_scaling``).
"""

from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp

MEAN_STD = {
  "mnist": ((0.1307,), (0.3081,)),
  "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
  "imagenet2012": ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
  "synthetic": ((0.5,), (0.5,)),
}
CIFAR_PAD = 4
SCALINGS = ("standardize", "unit")


def normalize(images: jax.Array, mean: tuple, std: tuple, dtype=jnp.float32) -> jax.Array:
  """``(images/255 − mean) / std`` per channel, in ``dtype`` (statistics given on the [0, 1] scale)."""
  x = images.astype(jnp.float32) * (1.0 / 255.0)
  x = (x - jnp.asarray(mean, jnp.float32)) / jnp.asarray(std, jnp.float32)
  return x.astype(dtype)


def random_crop(images: jax.Array, rng: jax.Array, pad: int) -> jax.Array:
  """Per-example random H×W crop of the batch zero-padded by ``pad`` on each side (dtype preserved)."""
  n, h, w, c = images.shape
  padded = jnp.pad(images, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
  offsets = jax.random.randint(rng, (n, 2), 0, 2 * pad + 1)
  crop = lambda image, o: jax.lax.dynamic_slice(image, (o[0], o[1], 0), (h, w, c))
  return jax.vmap(crop)(padded, offsets)


def random_flip(images: jax.Array, rng: jax.Array) -> jax.Array:
  """Flip each example left-right with probability ½."""
  flip = jax.random.bernoulli(rng, 0.5, (images.shape[0],))
  return jnp.where(flip[:, None, None, None], images[:, :, ::-1, :], images)


def cifar_augment(images: jax.Array, rng: jax.Array) -> jax.Array:
  """Pad-4 random crop + horizontal flip on uint8 images (black padding, as torchvision's RandomCrop)."""
  crop_rng, flip_rng = jax.random.split(rng)
  return random_flip(random_crop(images, crop_rng, CIFAR_PAD), flip_rng)


def preprocess(
  images: jax.Array,
  labels: Optional[jax.Array] = None,
  *,
  dataset: str,
  train: bool,
  rng: Optional[jax.Array] = None,
  dtype=jnp.float32,
  scaling: str = "standardize",
) -> jax.Array:
  """uint8 [B, H, W, C] → normalised ``dtype`` [B, H, W, C] for ``dataset``; ``rng`` needed for CIFAR training.

  ``scaling``: 'standardize' ((x/255 − mean)/std, the dataset's statistics) or 'unit' (x/255).

  ``labels`` is accepted for a uniform call signature (and future label-aware augmentation) and unused.
  """
  del labels
  if dataset not in MEAN_STD:
    raise ValueError(f"Unknown dataset {dataset!r}; expected one of {sorted(MEAN_STD)}.")
  if dataset == "cifar10" and train:
    if rng is None:
      raise ValueError("CIFAR-10 training augmentation needs an rng.")
    images = cifar_augment(images, rng)
  if scaling not in SCALINGS:
    raise ValueError(f"input_scaling must be one of {SCALINGS}; got {scaling!r}.")
  if scaling == "unit":
    return (images.astype(jnp.float32) * (1.0 / 255.0)).astype(dtype)
  mean, std = MEAN_STD[dataset]
  return normalize(images, mean, std, dtype)
