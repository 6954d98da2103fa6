"""A researcher's own data, held in memory: ``config.dataset = 'tfds:NAME'`` or ``'pkg.module:load_fn'``.

Both end as the uint8/int32 arrays MNIST ends as, so they get everything an in-memory dataset gets: exact
evaluation (pad + mask), per-process shards, keyed resumable order, the on-device gather, ``data_order='examples'``,
``validation_split`` and ``train_examples``.

* ``tfds:NAME``: a TFDS dataset prepared (ArrayRecord) under ``config.data_dir``, read through ``tfds.data_source``
  (no TensorFlow) once into memory (and a ``.npy`` cache, ``tfds_arrays``) when ``tfds_stream.holds_in_memory``
  says so, else streamed (``tfds_stream.py``, the same batches); splits 'train' and 'test', features 'image'
  (uint8 [H, W, C]) and 'label' (``ClassLabel``: its ``num_classes``).
* ``pkg.module:load_fn`` (:mod:`lamb_lars.common.import_path`): ``load_fn()`` returns a dict with ``'train'`` and
  ``'test'``, each ``(images, labels)``: images uint8 [N, H, W, C] (pixels 0–255), labels integer [N] in
  [0, num_classes); optionally ``'validation'`` (the same form: then ``config.validation_split`` must be 0) and
  ``'num_classes'`` (else max label + 1). Anything else is a one-sentence ConfigError (docs/workloads.md).

``input_scaling='standardize'`` normalises with the per-channel mean and standard deviation of the training split
(on the [0, 1] scale), computed when the arrays are loaded; for ``tfds:NAME`` of its fixed sample
(``tfds_stream.stats_keys``), the same whether held in memory or streamed.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from lamb_lars.common import import_path
from lamb_lars.errors import ConfigError
from lamb_lars.input_pipeline import device_preprocess, tfds_stream
from lamb_lars.input_pipeline.common import SplitView, check_split, resolve_data_dir, split_views

TFDS_PREFIX = "tfds:"
_MEMO: dict[tuple, dict] = {}


def is_user_dataset(name: Any) -> bool:
  return isinstance(name, str) and (name.startswith(TFDS_PREFIX) or import_path.is_import_path(name))


def is_streamed(config: Any) -> bool:
  """Whether ``config.dataset`` is a ``tfds:NAME`` streamed from disk (``tfds_stream.holds_in_memory``)."""
  name = config.dataset
  return isinstance(name, str) and name.startswith(TFDS_PREFIX) and not tfds_stream.holds_in_memory(config)


def _check_pair(name: str, split: str, pair: Any, num_classes: Any) -> tuple[np.ndarray, np.ndarray]:
  """(images, labels) of one split in the contract's shapes and dtypes, or a ConfigError naming what is wrong."""
  where = f"config.dataset={name!r}: split {split!r}"
  if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
    raise ConfigError(f"{where} must be a pair (images, labels); got {type(pair).__name__}.")
  images, labels = np.asarray(pair[0]), np.asarray(pair[1])
  if images.ndim != 4 or images.dtype != np.uint8:
    raise ConfigError(
      f"{where} has images {images.dtype} of shape {images.shape}; they must be uint8 of shape "
      f"[N, height, width, channels] (pixels 0–255; e.g. np.round(x * 255).astype(np.uint8))."
    )
  if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer) or len(labels) != len(images):
    raise ConfigError(
      f"{where} has labels {labels.dtype} of shape {labels.shape}; they must be integers of shape "
      f"[{len(images)}], one per image."
    )
  if len(labels) == 0:
    raise ConfigError(f"{where} is empty.")
  hi = int(num_classes) if num_classes is not None else None
  if labels.min() < 0 or (hi is not None and labels.max() >= hi):
    raise ConfigError(
      f"{where} has labels in [{labels.min()}, {labels.max()}], outside [0, num_classes) = "
      f"[0, {hi if hi is not None else 'max label + 1'})."
    )
  images.setflags(write=False)
  labels = labels.astype(np.int32)
  labels.setflags(write=False)
  return images, labels


def _from_loader(name: str) -> dict:
  fn = import_path.resolve(name, "dataset")
  if not callable(fn):
    raise ConfigError(f"config.dataset={name!r} names a {type(fn).__name__}, not a function returning arrays.")
  try:
    out = fn()
  except TypeError as e:
    raise ConfigError(
      f"config.dataset={name!r} cannot be called with no arguments ({' '.join(str(e).split())}); see docs/workloads.md."
    ) from None
  except Exception as e:  # noqa: BLE001  (the researcher's loader failed: its file, its network; --verbose: traceback)
    text = " ".join(str(e).split()) or "no message"
    raise ConfigError(
      f"config.dataset={name!r} raised {type(e).__name__}: {text.rstrip('.')}; fix the loader or what it reads "
      f"(see docs/workloads.md)."
    ) from e
  if not isinstance(out, dict) or "train" not in out or "test" not in out:
    raise ConfigError(
      f"config.dataset={name!r} must return a dict with 'train' and 'test' (and optionally "
      f"'validation', 'num_classes'); got {type(out).__name__}"
      + (f" with keys {sorted(map(str, out))}." if isinstance(out, dict) else ".")
    )
  unknown = sorted(set(map(str, out)) - {"train", "test", "validation", "num_classes"})
  if unknown:
    raise ConfigError(
      f"config.dataset={name!r} returns unknown keys {unknown}; only 'train', 'test', 'validation' "
      f"and 'num_classes' are read."
    )
  num_classes = out.get("num_classes")
  if num_classes is not None and not (isinstance(num_classes, numbers.Integral) and num_classes >= 1):
    raise ConfigError(f"config.dataset={name!r} returns num_classes={num_classes!r}; it must be an integer ≥ 1.")
  splits = {s: _check_pair(name, s, out[s], num_classes) for s in ("train", "test", "validation") if s in out}
  shape = splits["train"][0].shape[1:]
  for s, (images, _) in splits.items():
    if images.shape[1:] != shape:
      raise ConfigError(
        f"config.dataset={name!r}: split {s!r} has images of shape {images.shape[1:]}, the "
        f"'train' split {shape}; every split must have the same example shape."
      )
  if num_classes is None:
    num_classes = 1 + max(int(lab.max()) for _, lab in splits.values())
  return {"splits": splits, "num_classes": int(num_classes)}


def loader_data(name: str) -> dict:
  """``{"splits": {split: (images, labels)}, "num_classes": n}`` as the loader ``name`` returns them now, checked
  against the contract and not memoised (a study's provenance hashes them: workload_provenance.py)."""
  return _from_loader(name)


def _from_tfds(config: Any, name: str, data_dir: str) -> dict:
  from lamb_lars.input_pipeline import tfds_arrays  # noqa: PLC0415  (imports tensorflow_datasets)

  splits, num_classes, on_disk = {}, None, True
  for split in ("train", "test"):
    source = tfds_stream.open_split(config, split)
    shape, num_classes = tfds_stream.features(config, source)
    if shape is None:
      raise ConfigError(
        f"config.dataset={name!r} has images of varying size, which cannot be held in memory; set "
        f"config.dataset_in_memory='auto' or 'no' (streamed, cropped to image_size)."
      )
    images, labels = tfds_arrays.cached_split_arrays(source, data_dir=data_dir, image_shape=shape)
    on_disk = on_disk and tfds_arrays.source_fingerprint(source) is not None
    splits[split] = _check_pair(name, split, (images, labels), num_classes)
  return {"splits": splits, "num_classes": num_classes, "memo": on_disk}


def _load(config: Any) -> dict:
  """The dataset's splits and class count, read once per process (a mocked tfds source every time)."""
  name = config.dataset
  if name.startswith(TFDS_PREFIX):
    data_dir = resolve_data_dir(config)
    key = (name, data_dir)
    if key in _MEMO:
      return _MEMO[key]
    data = _from_tfds(config, name, data_dir)
    images = data["splits"]["train"][0]
    data["mean_std"] = tfds_stream.channel_mean_std(images[tfds_stream.stats_keys(len(images))])
  else:
    key = (name,)
    if key in _MEMO:
      return _MEMO[key]
    data = _from_loader(name)
    data["mean_std"] = tfds_stream.channel_mean_std(data["splits"]["train"][0])
  device_preprocess.MEAN_STD[name] = data["mean_std"]  # 'standardize' for this dataset: its training statistics
  if data.get("memo", True):  # a mocked tfds source (tests) is re-read every time, as in in_memory.py
    _MEMO[key] = data
  return data


def clear_memo() -> None:
  _MEMO.clear()


def views(config: Any) -> dict[str, SplitView]:
  data = _load(config)
  splits = data["splits"]
  if "validation" in splits:
    if int(config.validation_split):
      raise ConfigError(
        f"config.validation_split={config.validation_split} but config.dataset={config.dataset!r} "
        f"returns its own 'validation' split; set config.validation_split=0."
      )
    return {s: SplitView(s, 0, len(splits[s][1])) for s in ("train", "test", "validation")}
  return split_views(len(splits["train"][1]), len(splits["test"][1]), int(config.validation_split))


def image_shape(config: Any) -> tuple:
  return tuple(_load(config)["splits"]["train"][0].shape[1:])


def num_classes(config: Any) -> int:
  return _load(config)["num_classes"]


def load_arrays(config: Any, which: str) -> tuple[np.ndarray, np.ndarray]:
  """The 'train', 'test' or 'validation' arrays (read-only views), honouring ``config.validation_split``."""
  check_split(which)
  view = views(config)[which]
  images, labels = _load(config)["splits"].get(view.split, _load(config)["splits"]["train"])
  return images[view.start : view.start + view.count], labels[view.start : view.start + view.count]
