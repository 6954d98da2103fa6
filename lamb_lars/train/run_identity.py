"""A run directory belongs to one config: resuming or re-running it with another is refused.

A run dir records the config it was started with (``config.json``). A later ``train_and_evaluate`` in the same dir
compares its config with the record, key by key (flattened, ``optimizer.learning_rate``), and refuses any
difference outside :data:`ALLOWED` with one sentence naming the keys: a resumed run that changed its batch size
would otherwise splice two runs into one record (its epochs and example counts would be false), and a finished
run re-run with another optimizer would return the old result as if it were the new one.

:data:`ALLOWED` holds what changes how a run is watched or stored, never what it computes: progress bar, evaluation
and checkpoint cadence, how many checkpoints are kept, host round-trips, data location, and how a step's micro-batch
loop is compiled (``microbatch_loop``, formerly ``unroll_microbatches``: the same keys and the same sums in the same
order, tests/test_host_accumulation.py), so that a run started unrolled may resume with the host loop. A key
missing from the record is ignored: configs are locked, so only a code upgrade adds keys.

Each checkpoint carries the same record (``config`` in its metadata, :mod:`lamb_lars.train.loop`), so a run dir
whose ``config.json`` is gone is still checked, against its newest checkpoint's record.
"""

from __future__ import annotations

import json
import os
from typing import Any, Mapping, Optional

from lamb_lars.common import io_utils, run_files
from lamb_lars.train.run_plan import ConfigError

CONFIG_FILE = run_files.CONFIG_FILE
ALLOWED = (
  "progress",
  "eval_every_epochs",
  "eval_every_steps",
  "checkpoint_every_epochs",
  "checkpoint_every_steps",
  "keep_checkpoints",
  "steps_per_fetch",
  "data_dir",
  "grain_workers",
  "data_on_device",
  "dataset_in_memory",
  "distributed.",
  "microbatch_loop",
  "unroll_microbatches",
)


def _flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
  if isinstance(tree, Mapping):
    out: dict[str, Any] = {}
    for k, v in tree.items():
      out.update(_flatten(v, f"{prefix}{k}."))
    return out
  return {prefix[:-1]: tree}


def _plain(config: Any) -> Any:
  """The config as the JSON the record holds (tuples as lists, placeholders as null)."""
  if hasattr(config, "to_json_best_effort"):
    return json.loads(config.to_json_best_effort())
  return json.loads(json.dumps(config, default=str))


def _allowed(key: str) -> bool:
  return any(key == a or (a.endswith(".") and key.startswith(a)) for a in ALLOWED)


def differing_keys(recorded: Mapping[str, Any], config: Any, allowed: bool = True) -> list[str]:
  """The flattened keys whose value in ``config`` differs from ``recorded`` (keys absent from the record and, with
  ``allowed``, the :data:`ALLOWED` keys are not compared)."""
  old, new = _flatten(_plain(recorded)), _flatten(_plain(config))
  return sorted(
    k for k in old.keys() | new.keys() if k in old and old.get(k) != new.get(k) and not (allowed and _allowed(k))
  )


def config_record(config: Any) -> dict:
  """The record of ``config`` that ``config.json`` and each checkpoint's metadata hold (plain JSON)."""
  return _plain(config)


def checkpoint_config(workdir: str) -> Optional[dict]:
  """The config record of ``workdir``'s newest checkpoint that carries one, or None."""
  from lamb_lars.train import checkpoint  # orbax: imported only where a run dir is checked

  return next(
    (meta["config"] for _, meta in checkpoint.saved_metas(workdir) if isinstance(meta.get("config"), dict)), None
  )


def recorded_config(workdir: str) -> Optional[dict]:
  """The config recorded in ``workdir``, or None (a new run dir); a damaged record is a one-sentence ConfigError."""
  return io_utils.read_json_object(
    os.path.join(workdir, CONFIG_FILE),
    error=ConfigError,
    damaged="is not valid JSON, so this run's config cannot be checked",
    remedy="restore it or use a new --workdir",
  )


def check(config: Any, workdir: str) -> None:
  """ConfigError naming the differing keys when ``workdir`` was started with another config (its ``config.json``,
  or without one its newest checkpoint's record)."""
  record, where = recorded_config(workdir), "a run"
  if record is None:
    record, where = checkpoint_config(workdir), "checkpoints of a run"
  if record is None:
    return
  keys = differing_keys(record, config)
  if keys:
    shown = ", ".join(keys[:6]) + (f" and {len(keys) - 6} more" if len(keys) > 6 else "")
    raise ConfigError(
      f"{workdir} holds {where} started with a different config ({shown}); use a new --workdir for "
      f"the changed config, or restore the old values to resume it."
    )


def record(config: Any, workdir: str) -> None:
  """Writes ``config.json`` (atomically), keeping the allowed keys' latest values."""
  io_utils.write_text_atomic(os.path.join(workdir, CONFIG_FILE), config.to_json_best_effort(indent=1))
