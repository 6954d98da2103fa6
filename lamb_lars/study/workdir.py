"""The layout of a study workdir (running layer)::

  study.sqlite          the results store (store.py): runs, evals, the search's decision log
  study_config.json     the study config, so ``report`` needs only the workdir
  commands.txt          every command that ran the study, time-stamped
  runs/<run_id>/        one trial: trial_config.json, checkpoints/, metrics.jsonl, result.json, log.txt, error.txt
"""
from __future__ import annotations

import json
import os
import signal
import time
from typing import Optional

import ml_collections

from lamb_lars.io_utils import write_text_atomic

STORE_FILE = "study.sqlite"
STUDY_CONFIG_FILE = "study_config.json"
COMMANDS_FILE = "commands.txt"
TRIAL_CONFIG_FILE = "trial_config.json"
TRIAL_HPARAMS_FILE = "hparams.json"  # the keys the study varies, for TensorBoard's HParams dashboard


def store_path(workdir: str) -> str:
  return os.path.join(workdir, STORE_FILE)


def run_dir(workdir: str, run_id: str) -> str:
  return os.path.join(workdir, "runs", run_id)


def save_study_config(study: ml_collections.ConfigDict, workdir: str, command: Optional[str] = None) -> None:
  """Writes ``study_config.json`` and appends the command to ``commands.txt``."""
  os.makedirs(workdir, exist_ok=True)
  write_text_atomic(os.path.join(workdir, STUDY_CONFIG_FILE), study.to_json_best_effort(indent=1, sort_keys=True))
  if command:
    with open(os.path.join(workdir, COMMANDS_FILE), "a", encoding="utf-8") as f:
      f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')}  {command}\n")


def load_study_config(workdir: str) -> ml_collections.ConfigDict:
  """The study config saved by ``run`` (JSON: tuples come back as lists)."""
  path = os.path.join(workdir, STUDY_CONFIG_FILE)
  if not os.path.exists(path):
    raise ValueError(f"{workdir} is not a study workdir (no {STUDY_CONFIG_FILE}); run the study there first.")
  with open(path, encoding="utf-8") as f:
    return ml_collections.ConfigDict(json.load(f))


def commands(workdir: str) -> list[str]:
  path = os.path.join(workdir, COMMANDS_FILE)
  if not os.path.exists(path):
    return []
  with open(path, encoding="utf-8") as f:
    return [ln.strip() for ln in f if ln.strip()]


def failure_text(rdir: str, code: Optional[int]) -> str:
  """Why a trial ended without a result: its error.txt, else the exit code or signal and the end of its log."""
  path = os.path.join(rdir, "error.txt")
  if os.path.exists(path):
    with open(path, encoding="utf-8") as f:
      return f.read().strip()
  reason = (f"killed by signal {-code} ({signal.Signals(-code).name})" if code is not None and code < 0
            else f"exit code {code}")
  tail = ""
  log = os.path.join(rdir, "log.txt")
  if os.path.exists(log):
    with open(log, encoding="utf-8", errors="replace") as f:
      tail = "".join(f.readlines()[-20:])
  return f"trainer process {reason} without a result\n{tail}".strip()
