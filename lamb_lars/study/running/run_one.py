"""One trial of a study, in its own process (crash isolation): ``python -m lamb_lars.study.running.run_one RUN_DIR``.

Reads ``RUN_DIR/trial_config.json`` (written by the runner), holds an exclusive ``flock`` on ``RUN_DIR/.lock`` while
it trains (so two processes never train the same run, even if a killed runner left one behind), and calls
``train_and_evaluate(config, RUN_DIR)``, which resumes from ``RUN_DIR/checkpoints`` and writes ``metrics.jsonl``
and ``result.json`` (status done / diverged). Any exception is written to ``RUN_DIR/error.txt`` and the exit code is
1; the runner then records the run as ``failed`` with that text. A config or data mistake (``ConfigError``,
``DatasetNotFoundError``, or the run dir locked by another trial) is its one sentence, ``Type: message``; anything
else is a bug and keeps its traceback
(ending with ``Type: message``), in ``error.txt`` and in the run's log.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import traceback
from typing import Optional

import ml_collections

from lamb_lars.common import io_utils, run_files, workdir_lock
from lamb_lars.common.io_utils import write_text_atomic
from lamb_lars.study.running.executor import die_with_parent

LOCK_FILE = workdir_lock.TRAIN_LOCK
CACHE_ENV = "LAMB_LARS_COMPILATION_CACHE"  # set by the runner (``runner.compilation_cache``)
CACHE_DIR = "jax_cache"


def enable_compilation_cache() -> Optional[str]:
  """Points JAX's persistent compilation cache at ``$LAMB_LARS_COMPILATION_CACHE/<host>`` when that is set (and
  ``JAX_COMPILATION_CACHE_DIR`` is not), and returns the directory. Per host: compiled CPU code may use the
  instruction set of the host that compiled it,
  and a Ray cluster's nodes share the workdir. An entry another trial is still writing reads as an error, which
  JAX answers by compiling (jax/_src/compiler.py ``_cache_read``)."""
  root = os.environ.get(CACHE_ENV, "")
  if not root or os.environ.get("JAX_COMPILATION_CACHE_DIR"):  # an explicit JAX setting wins
    return None
  import jax

  path = os.path.join(root, socket.gethostname())
  jax.config.update("jax_compilation_cache_dir", path)
  return path


def load_trial_config(run_dir: str) -> ml_collections.ConfigDict:
  """The trial's training config as written by the runner (JSON; tuples come back as lists)."""
  return ml_collections.ConfigDict(json.loads(io_utils.read_text(os.path.join(run_dir, run_files.TRIAL_CONFIG_FILE))))


def load_trial_hparams(run_dir: str) -> Optional[dict]:
  """The trial's HParams (the keys its study varies), written by the runner; None if absent."""
  return io_utils.read_json(os.path.join(run_dir, run_files.HPARAMS_FILE))


def acquire_lock(run_dir: str, timeout_s: float = 60.0) -> str:
  """The run dir's exclusive lock (:mod:`lamb_lars.common.workdir_lock`, the one ``train_and_evaluate`` takes again),
  waited for up to ``timeout_s`` (a dying predecessor may still hold it); returns it for ``workdir_lock.release``."""
  return workdir_lock.acquire(run_dir, LOCK_FILE, what="another trial process", timeout_s=timeout_s)


def is_mistake(exc: BaseException) -> bool:
  """Whether ``exc`` is a config or data mistake (one sentence, as ``train.py`` prints it) rather than a bug."""
  from lamb_lars.input_pipeline import DatasetNotFoundError  # noqa: PLC0415
  from lamb_lars.train.run_plan import ConfigError  # noqa: PLC0415

  return isinstance(exc, (ConfigError, DatasetNotFoundError, workdir_lock.WorkdirLocked))


def write_error(run_dir: str, exc: BaseException) -> str:
  """Writes ``error.txt`` and returns its text: for a mistake (:func:`is_mistake`) the message alone, for
  anything else the traceback, ending with ``Type: message``."""
  if is_mistake(exc):
    text = f"{type(exc).__name__}: {exc}\n"
  else:
    text = "".join(traceback.format_exception(exc))
  write_text_atomic(os.path.join(run_dir, run_files.ERROR_FILE), text)
  return text


def main(argv: Optional[list[str]] = None) -> int:
  argv = sys.argv[1:] if argv is None else argv
  if len(argv) != 1:
    print("usage: python -m lamb_lars.study.running.run_one RUN_DIR", file=sys.stderr)
    return 2
  run_dir = argv[0]
  die_with_parent()  # before anything else: a driver killed from here on takes this trial with it
  try:
    lock = acquire_lock(run_dir)
  except RuntimeError as e:
    write_error(run_dir, e)
    return 1
  try:
    from absl import logging

    logging.set_verbosity(logging.WARNING)  # orbax logs every save at INFO
    enable_compilation_cache()
    from lamb_lars.train.trainer import train_and_evaluate

    result = train_and_evaluate(load_trial_config(run_dir), run_dir, hparams=load_trial_hparams(run_dir))
    print(f"{result['status']}: step {result['step']}/{result.get('total_steps')}", flush=True)
    return 0
  except Exception as e:  # noqa: BLE001  (every crash becomes a recorded 'failed' run)
    print(write_error(run_dir, e), end="", flush=True)  # into the run's log
    return 1
  finally:
    workdir_lock.release(lock)


if __name__ == "__main__":
  sys.exit(main())
