"""Which trials can share one packed program (:mod:`lamb_lars.train.packed`): decided from their configs alone,
before anything is imported or compiled, so the study runner can group its pending trials.

Trials pack together when their configs are equal outside :data:`SLOT_KEYS` (:func:`pack_key`): the same model,
batch size, data pipeline, durations and evaluation cadence, the same optimizer family and state structure. Per
slot may differ: the seed (initialisation, data order, dropout), the stopping rules, and the optimizer's numbers
(LR and its schedule, weight decay, momentum, β₁, β₂, ε, trust-ratio constants). A trial that cannot be packed at
all (:func:`unpackable`) runs alone.
"""

from __future__ import annotations

import json
from typing import Any, Optional

from lamb_lars.train import run_identity

# Flattened config keys (a trailing '.' = a prefix) that may differ among a pack's slots.
SLOT_KEYS = (
  "seed",
  "stop.",
  "progress",
  "optimizer.learning_rate",
  "optimizer.default_learning_rate.",
  "optimizer.lr_scaling",
  "optimizer.base_batch_size",
  "optimizer.schedule.",
  "optimizer.momentum",
  "optimizer.b1",
  "optimizer.b2",
  "optimizer.eps",
  "optimizer.eps_root",
  "optimizer.rms_decay",
  "optimizer.initial_accumulator_value",
  "optimizer.weight_decay",
  "optimizer.trust_coefficient",
  "optimizer.trust_eps",
  "optimizer.zero_norm_ratio",
)
# With optimizer.lr_table the schedule is state, not code (lamb_lars/optim/lr_table.py): slots that differ only in
# these keys share one optimizer transformation.
TABLE_KEYS = (
  "optimizer.learning_rate",
  "optimizer.default_learning_rate.",
  "optimizer.lr_scaling",
  "optimizer.base_batch_size",
  "optimizer.schedule.",
)


def _matches(key: str, patterns: tuple[str, ...]) -> bool:
  return any(key == p or (p.endswith(".") and key.startswith(p)) for p in patterns)


def _without(config: Any, patterns: tuple[str, ...]) -> str:
  flat = run_identity._flatten(run_identity.config_record(config))  # noqa: SLF001  (the one flattening rule)
  return json.dumps({k: v for k, v in sorted(flat.items()) if not _matches(k, patterns)}, sort_keys=True, default=str)


def pack_key(config: Any) -> str:
  """Trials with equal keys can be slots of one packed program."""
  return _without(config, SLOT_KEYS)


def optimizer_key(config: Any) -> str:
  """Slots with equal keys share one optimizer transformation (the LR schedule is in its state with lr_table)."""
  record = json.loads(_without(config, ()))
  opt = {k: v for k, v in record.items() if k.startswith("optimizer.") or k == "diagnostics.trust_ratios"}
  if opt.get("optimizer.lr_table"):
    opt = {k: v for k, v in opt.items() if not _matches(k, TABLE_KEYS)}
  return json.dumps(opt, sort_keys=True)


def unpackable(config: Any) -> Optional[str]:
  """Why ``config`` cannot be a slot of a packed program (one phrase), or None when it can."""
  if config.parallelism != "jit":
    return "parallelism='pmap'"
  if config.microbatch_loop == "host":
    return "microbatch_loop='host'"
  if config.data_on_device == "no":
    return "data_on_device='no' (a pack gathers its batches from the training set on the device)"
  if config.batch_schedule:
    return "a batch schedule"
  if config.get("init_from_dir"):
    return "a branch (init_from_dir)"
  return None
