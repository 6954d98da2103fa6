"""The one validator of a training config: everything that can be rejected before anything compiles.

``train.py`` (the trainer) and the study runner (every trial, before the first is launched) call :func:`validate`,
so a config a study would launch is exactly a config ``train.py`` would accept.
Each failure is a :class:`~lamb_lars.train.run_plan.ConfigError` whose message is one sentence naming the key, the value
and the fix. On top of :func:`lamb_lars.train.run_plan.make_plan` and
:func:`lamb_lars.optim.optimizer_config.validate_config`
it checks:

* **the data** — ``num_classes`` equals the dataset's class count (a smaller one one-hot encodes the missing labels
  to zero vectors, which cost nothing, so a run "finishes" at chance-level accuracy with a tiny loss), and the
  dataset's example shape is one the model can take;
* **numeric bounds** — a finite positive learning rate; BN momentum in [0, 1) (the running average
  ``m·old + (1 − m)·batch`` of Ioffe & Szegedy 2015 diverges for m ≥ 1) and ε > 0 (the normaliser
  ``1/sqrt(var + ε)``); every count ≥ 1 (``keep_checkpoints`` = 0 would silently disable resume);
* **warmup ≤ training** — a warmup longer than the run never reaches the peak LR (Goyal et al. 2017's gradual
  warmup assumes it ends inside training); ``optimizer.schedule.allow_long_warmup=True`` opts in;
* **the LR table** — the trainer tabulates the LR of every update on the host (:mod:`lamb_lars.optim.lr_table`), so a
  run is capped at :data:`MAX_TOTAL_STEPS` updates (80 MB of float64), far beyond any run we know of (90 ImageNet
  epochs at batch 256 are 450,000).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any, Optional, Sequence, Union

from lamb_lars import input_pipeline, models
from lamb_lars.common import import_path, io_utils
from lamb_lars.optim import optimizer_config
from lamb_lars.train import init_from, run_plan, stopping

ConfigError = run_plan.ConfigError
MAX_TOTAL_STEPS = 10_000_000
MIN_IMAGE_SIZE = {"lenet5": 12}  # SAME 5×5 conv, 2×2 pool, VALID 5×5 conv, 2×2 pool: ⌊(⌊H/2⌋ − 4)/2⌋ ≥ 1


def _finite_positive(value: Any) -> bool:
  return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value) and float(value) > 0


def check_bounds(config: Any) -> None:
  """Numeric settings whose value cannot be right (module docstring); ConfigError naming the first."""
  lr = optimizer_config.learning_rate(config.optimizer)
  if lr is None:
    raise ConfigError(
      f"config.optimizer.learning_rate is None and config.optimizer.default_learning_rate has no "
      f"entry for {config.optimizer.name!r}; give --config.optimizer.learning_rate."
    )
  if not _finite_positive(lr):
    raise ConfigError(f"config.optimizer.learning_rate={lr!r} must be a finite number > 0.")
  m, eps = config.bn.momentum, config.bn.epsilon
  if not (isinstance(m, numbers.Real) and 0.0 <= float(m) < 1.0):
    raise ConfigError(f"config.bn.momentum={m!r} must be in [0, 1) (the weight of the old running statistics).")
  if not _finite_positive(eps):
    raise ConfigError(f"config.bn.epsilon={eps!r} must be a finite number > 0.")
  for key in ("keep_checkpoints", "num_microbatches", "batch_size", "eval_batch_size"):
    value = config[key]
    if not (isinstance(value, numbers.Integral) and not isinstance(value, bool) and int(value) >= 1):
      raise ConfigError(f"config.{key}={value!r} must be an integer ≥ 1.")
  check_model_size(config)
  if import_path.is_import_path(config.model):
    import_path.resolve(config.model, "model")  # the module and its attribute exist; the call is checked in check_data
  elif config.model not in models.MODEL_NAMES:
    raise ConfigError(
      f"config.model={config.model!r} is not one of {', '.join(models.MODEL_NAMES)}, nor an import "
      f"path 'package.module:Name'."
    )
  check_more_bounds(config)


def check_model_size(config: Any) -> None:
  """``model_width`` > 0, ``model_depth`` ≥ 0 (MLP only), ``mlp_hidden`` positive integers, ``train_examples`` ≥ 0."""
  width = config.model_width
  if not _finite_positive(width):
    raise ConfigError(f"config.model_width={width!r} must be a finite number > 0 (1.0 = the model as published).")
  depth = config.model_depth
  if not (isinstance(depth, numbers.Integral) and not isinstance(depth, bool) and int(depth) >= 0):
    raise ConfigError(f"config.model_depth={depth!r} must be an integer ≥ 0 (0 = the model's own depth).")
  if depth and config.model != "mlp":
    raise ConfigError(
      f"config.model_depth={depth} applies to model 'mlp' only; config.model={config.model!r} has "
      f"its depth in its name or its definition, so set model_depth=0."
    )
  hidden = tuple(config.mlp_hidden)
  if not hidden or not all(isinstance(h, numbers.Integral) and not isinstance(h, bool) and int(h) >= 1 for h in hidden):
    raise ConfigError(f"config.mlp_hidden={hidden!r} must be a non-empty tuple of integers ≥ 1.")
  n = config.train_examples
  if not (isinstance(n, numbers.Integral) and not isinstance(n, bool) and int(n) >= 0):
    raise ConfigError(f"config.train_examples={n!r} must be an integer ≥ 0 (0 = every training example).")


def check_user_model(config: Any, info: Any) -> None:
  """A model given as an import path, traced (``jax.eval_shape``: nothing compiles) on one example of the data's
  shape: it must build with (num_classes, dtype, norm), take ``(x, train=...)`` and return [1, num_classes] logits."""
  import jax  # noqa: PLC0415
  import jax.numpy as jnp  # noqa: PLC0415

  model = models.create_model(config.model, num_classes=int(config.num_classes), dtype=jnp.float32)
  x = jnp.zeros((1,) + tuple(info.image_shape), jnp.float32)
  rngs = {"params": jax.random.PRNGKey(0), "dropout": jax.random.PRNGKey(1)}
  try:
    variables = jax.eval_shape(lambda: model.init(rngs, x, train=False))
    out = jax.eval_shape(lambda v: model.apply(v, x, train=True, mutable=["batch_stats"], rngs=rngs), variables)[0]
  except Exception as e:  # noqa: BLE001  (the user's module failed on the data: a mistake in the workload)
    raise ConfigError(
      f"config.model={config.model!r} fails on one example of shape {tuple(info.image_shape)} "
      f"called as model.apply(variables, x, train=...) ({type(e).__name__}: "
      f"{' '.join(str(e).split())[:200]}); see docs/workloads.md."
    ) from None
  if getattr(out, "shape", None) != (1, int(config.num_classes)):
    raise ConfigError(
      f"config.model={config.model!r} returns {getattr(out, 'shape', type(out).__name__)} for one "
      f"example; it must return logits of shape (batch, num_classes) = (1, {config.num_classes})."
    )


def check_more_bounds(config: Any) -> None:
  """Durations, micro-batches, noise injection, synthetic sizes, a branch's reference: values that cannot be right."""
  epochs = config.num_epochs
  if not (isinstance(epochs, numbers.Real) and math.isfinite(epochs)):
    raise ConfigError(f"config.num_epochs={epochs!r} must be a finite number.")
  mb = config.microbatch_size
  if not (isinstance(mb, numbers.Integral) and not isinstance(mb, bool) and int(mb) >= 0):
    raise ConfigError(f"config.microbatch_size={mb!r} must be an integer ≥ 0 (0 = use num_microbatches).")
  noise = config.diagnostics.noise_injection
  for key in ("activations", "weights", "gradients"):
    if not (isinstance(noise[key], numbers.Real) and math.isfinite(noise[key]) and noise[key] >= 0):
      raise ConfigError(f"config.diagnostics.noise_injection.{key}={noise[key]!r} must be a finite std ≥ 0.")
  if not (isinstance(noise.labels, numbers.Real) and 0.0 <= float(noise.labels) <= 1.0):
    raise ConfigError(f"config.diagnostics.noise_injection.labels={noise.labels!r} must be a fraction in [0, 1].")
  if config.dataset == "synthetic":
    for key in ("num_train", "num_eval"):
      if not int(config.synthetic[key]) >= 1:
        raise ConfigError(f"config.synthetic.{key}={config.synthetic[key]!r} must be ≥ 1.")
  if config.init_from_dir and not io_utils.exists(config.init_from_dir):
    raise ConfigError(
      f"config.init_from_dir={config.init_from_dir!r} does not exist; give the workdir of the reference run."
    )


def check_eval_batch(config: Any, info: Any) -> None:
  """An eval batch larger than every evaluated split (rounded up to whole batches per device) only pads; refused
  before its buffers are allocated."""
  most = max(int(info.num_eval), int(info.num_validation), 1)
  if config.eval_batch_size > max(most, 65536):
    raise ConfigError(
      f"config.eval_batch_size={config.eval_batch_size:,} is larger than the {most:,} examples of "
      f"the largest evaluated split; use at most {max(most, 65536):,}."
    )


def check_data(config: Any, info: Any) -> None:
  """``num_classes`` and the example shape against the dataset (``input_pipeline.DatasetInfo``)."""
  if int(config.num_classes) != int(info.num_classes):
    raise ConfigError(
      f"config.num_classes={config.num_classes} but dataset {info.name!r} has {info.num_classes} "
      f"classes; set config.num_classes={info.num_classes}."
    )
  shape = tuple(info.image_shape)
  if len(shape) != 3 or min(shape) < 1:
    raise ConfigError(
      f"dataset {info.name!r} gives examples of shape {shape}; the models need (height, width, channels), each ≥ 1."
    )
  least = MIN_IMAGE_SIZE.get(config.model, 1)
  if min(shape[:2]) < least:
    raise ConfigError(
      f"config.model={config.model!r} needs images of at least {least}×{least}; dataset "
      f"{info.name!r} gives {shape[0]}×{shape[1]}."
    )
  if import_path.is_import_path(config.model):
    check_user_model(config, info)


def check_plan(config: Any, plan: run_plan.RunPlan) -> None:
  """Checks that need the step counts: warmup ≤ training, the LR table's size."""
  if plan.total_steps > MAX_TOTAL_STEPS:
    raise ConfigError(
      f"the run has {plan.total_steps:,} steps (config.num_train_steps / num_epochs), more than the "
      f"{MAX_TOTAL_STEPS:,} the host LR table holds; shorten it."
    )
  if plan.warmup_steps > plan.total_steps and not config.optimizer.schedule.allow_long_warmup:
    raise ConfigError(
      f"the warmup ({plan.warmup_steps} steps) is longer than training ({plan.total_steps} steps), "
      f"so the LR never reaches its peak; shorten config.optimizer.schedule.warmup_* or set "
      f"config.optimizer.schedule.allow_long_warmup=True."
    )


def dataset_info(config: Any) -> input_pipeline.DatasetInfo:
  """The dataset's sizes and shapes; a bad data setting (unknown dataset, validation_split) is a ConfigError, a
  missing dataset stays a ``DatasetNotFoundError``. The config's own bounds are checked first (:func:`check_bounds`),
  so that a value that cannot be right (``train_examples=-5``, ``synthetic.num_train=0``) is named as such rather
  than as a mismatch with the data."""
  check_bounds(config)
  try:
    return input_pipeline.get_info(config)
  except input_pipeline.DatasetNotFoundError:
    raise
  except ValueError as e:
    raise ConfigError(str(e)) from None


def validate(
  config: Any, devices: Union[int, Sequence[Any]], info: Optional[input_pipeline.DatasetInfo] = None
) -> run_plan.RunPlan:
  """Every check of a training config, before anything compiles: the run's plan, or a one-sentence ConfigError.

  ``devices``: the devices the run will use (a list, checked against ``config.num_devices``), or their number.
  ``info``: the dataset's :class:`~lamb_lars.input_pipeline.DatasetInfo` when the caller has it (a study caches one
  per dataset), else read from ``config``.
  """
  if not isinstance(devices, int):
    devices = len(devices)
    if config.num_devices > devices:
      raise ConfigError(f"config.num_devices={config.num_devices} but only {devices} devices exist.")
  check_bounds(config)
  info = dataset_info(config) if info is None else info
  check_data(config, info)
  check_eval_batch(config, info)
  try:
    optimizer_config.validate_config(config.optimizer)
  except ValueError as e:
    raise ConfigError(str(e)) from None
  stopping.validate(config)
  if config.data_order == "examples" and not info.in_memory and not input_pipeline.gathers_examples(config):
    raise ConfigError(
      f"config.data_order='examples' needs a dataset held in memory or images of one fixed shape; "
      f"{info.name!r} is streamed with crops, so use data_order='batches' (and no batch_schedule or "
      f"init_from_dir)."
    )
  if config.data_on_device == "yes" and config.parallelism == "jit" and not info.in_memory:
    raise ConfigError(
      f"config.data_on_device='yes' needs a dataset held in memory; {info.name!r} is streamed, so "
      f"set config.data_on_device='auto' or 'no'."
    )
  plan = run_plan.make_plan(config, num_train=info.num_train, num_devices=devices)
  ref = init_from.resolve(config, devices)
  if ref is not None:
    plan = dataclasses.replace(plan, data_start=ref.data_start, branch=ref)
  check_plan(config, plan)
  audit = plan.adaptive.audit if plan.adaptive is not None else None
  if audit is not None and audit.loss == "validation_loss" and not info.num_validation > 0:
    raise ConfigError(
      "config.adaptive_batch.audit_points audits on the validation loss, and this run holds out no validation "
      "split; set config.validation_split > 0 (or adaptive_batch.audit_loss='eval_loss', the test split)."
    )
  return plan
