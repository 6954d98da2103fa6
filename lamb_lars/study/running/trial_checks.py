"""Every trial of a study through the trainer's validator before any trial runs, so a config a study would launch
is exactly a config ``python train.py`` would accept (:mod:`lamb_lars.train.validate`). This module is the study's
one call into it (:func:`validate_trial`).

The devices a trial is checked against are the ones it will see: ``config.num_devices`` when set, else the CPU
devices its environment forces (``--xla_force_host_platform_device_count`` in ``XLA_FLAGS``, e.g. 2 for the
gradient noise scale), else 1; a trial that takes every device of a machine checks them again when it starts.
"""

from __future__ import annotations

import json
import re
from typing import Any, Mapping, Optional, Sequence

import ml_collections

_FORCED_DEVICES = re.compile(r"--xla_force_host_platform_device_count=(\d+)")


def forced_cpu_devices(env: Mapping[str, str]) -> Optional[int]:
  """The CPU device count ``env``'s ``XLA_FLAGS`` forces, or None."""
  m = _FORCED_DEVICES.search(str(env.get("XLA_FLAGS", "")))
  return int(m.group(1)) if m else None


def trial_devices(config: ml_collections.ConfigDict, env: Mapping[str, str]) -> int:
  """The devices a trial with ``config`` and environment ``env`` will see (module docstring)."""
  if int(config.num_devices) > 0:
    return int(config.num_devices)
  return forced_cpu_devices(env) or 1


def validate_trial(config: ml_collections.ConfigDict, devices: int, info: Any) -> None:
  """The trainer's checks of one trial config on ``devices`` devices; ``info`` is its dataset's
  ``DatasetInfo``, or None when the dataset is not on this machine (it may be on the machines that run the
  trials, ``--executor=ray``): then only the checks that need no data run, and the trial's own process reports
  missing data. A failure is a one-sentence ValueError."""
  from lamb_lars.train import run_plan, validate  # noqa: PLC0415  (the trainer's stack: only when checking)
  from lamb_lars.optim import optimizer_config  # noqa: PLC0415

  if info is not None:
    validate.validate(config, devices, info)
    return
  validate.check_bounds(config)
  optimizer_config.validate_config(config.optimizer)
  k = run_plan.num_microbatches(config, devices)
  if int(config.batch_size) % (devices * k):
    raise validate.ConfigError(
      f"config.batch_size={config.batch_size} is not divisible by {devices} device(s) × {k} micro-batch(es)."
    )


def dataset_info(config: ml_collections.ConfigDict, cache: dict) -> Any:
  """The dataset's ``DatasetInfo`` (None when it is not on this machine), once per distinct data setting."""
  from lamb_lars.input_pipeline import DatasetNotFoundError  # noqa: PLC0415
  from lamb_lars.train.validate import dataset_info as get_info  # noqa: PLC0415

  keys = (
    "dataset",
    "data_source",
    "data_dir",
    "validation_split",
    "image_size",
    "train_examples",
    "train_examples_seed",
    "dataset_in_memory",
  )
  key = json.dumps([config.get(k) for k in keys] + [config.synthetic.to_dict()], default=str)
  if key not in cache:
    try:
      cache[key] = get_info(config)
    except DatasetNotFoundError:
      cache[key] = None
  return cache[key]


def validate_trials(trials: Sequence[Any], runner_env: Mapping[str, str]) -> None:
  """Every trial (a ``sweep.TrialSpec``) through :func:`validate_trial`; a ValueError naming the first bad one."""
  infos: dict[str, Any] = {}
  for t in trials:
    try:
      validate_trial(t.config, trial_devices(t.config, {**runner_env, **t.env}), dataset_info(t.config, infos))
    except ValueError as e:
      raise ValueError(f"trial {t.run_id}: {e}") from None
