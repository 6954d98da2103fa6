"""CIFAR-10 (Krizhevsky 2009): 50K train / 10K test 32×32×3, read from a prepared tfds ``cifar10``.

There is no offline copy: the dataset must already be prepared (ArrayRecord) in the data dir. Normalisation and
the pad-4 crop + flip augmentation run on device (``device_preprocess.py``).
"""

from __future__ import annotations

NAME = "cifar10"
IMAGE_SHAPE = (32, 32, 3)
NUM_CLASSES = 10
SPLITS = ("train", "test")


def howto(data_dir: str) -> str:
  """One sentence on getting a prepared tfds ``cifar10``."""
  return (
    f"No prepared tfds 'cifar10' (ArrayRecord) in {data_dir}: run `tfds build cifar10 "
    f"--file_format=array_record --data_dir={data_dir}` on a machine with TensorFlow and network, or copy a "
    f"prepared cifar10/3.0.2 directory there (or set config.data_dir / $TFDS_DATA_DIR to where it is)."
  )
