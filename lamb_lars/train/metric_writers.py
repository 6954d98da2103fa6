"""Where metrics go: a JSONL file (one object per evaluation, read by studies), TensorBoard event files (written by
tensorboardX, no TensorFlow), and the console. Only process 0 writes.

TensorBoard tags are grouped the way TensorBoard users expect (``tensorboard_tag``): ``train/…`` (losses and
accuracy on the training data, progress), ``eval/…`` (test and validation splits), ``optim/…`` (LR, gradient
norms, noise scale, trust ratios, distance from init) and ``perf/…`` (throughput and time). The JSONL column names
do not change. Every run also writes a TensorBoard HParams session (``hparams``): its hyperparameters when it starts
and its status when it ends, so that runs (e.g. a study's trials, ``tensorboard --logdir=STUDY_WORKDIR/runs``)
compare in the HParams dashboard, whose metric columns are the last value of each scalar tag. A study trial's
hyperparameters are the keys its study varies (``lamb_lars.study.running.runner``); a plain run's are ``HPARAM_KEYS``.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any, Callable, Mapping, Optional

import numpy as np

from lamb_lars.common import io_utils, run_files

# The hyperparameters a plain run (not a study trial) shows in TensorBoard's HParams dashboard: the config keys that
# define a batch-size experiment (You et al. 2020, Table 3: optimizer, batch size, LR and its scaling, warmup).
HPARAM_KEYS = (
  "dataset",
  "model",
  "batch_size",
  "num_epochs",
  "num_train_steps",
  "optimizer.name",
  "optimizer.learning_rate",
  "optimizer.lr_scaling",
  "optimizer.base_batch_size",
  "optimizer.weight_decay",
  "optimizer.schedule.decay",
  "optimizer.schedule.warmup_epochs",
  "optimizer.schedule.warmup_steps",
  "label_smoothing",
  "seed",
)

# Eval-row and per-step keys → TensorBoard tag. None: not written (the same value is already logged every step).
_TAGS = {
  "epoch": "train/epoch",
  "examples": "train/examples",
  "train_loss": "train/loss",
  "train_accuracy": "train/accuracy",
  "step/train_loss": "train/loss_per_step",
  "eval_loss": "eval/test_loss",
  "eval_accuracy": "eval/test_accuracy",
  "eval_examples": "eval/test_examples",
  "validation_loss": "eval/validation_loss",
  "validation_accuracy": "eval/validation_accuracy",
  "validation_examples": "eval/validation_examples",
  "lr": None,
  "step/lr": "optim/lr",
  "grad_norm": "optim/grad_norm",
  "step/grad_norm": "optim/grad_norm_per_step",
  "step/grad_norm_small_rms": "optim/grad_norm_small_rms_per_step",
  "signal_to_noise": "optim/signal_to_noise",
  "noise_scale": "optim/noise_scale_b_simple",
  "noise_scale_lo": "optim/noise_scale_b_simple_lo",
  "noise_scale_hi": "optim/noise_scale_b_simple_hi",
  "noise_scale_precond": "optim/noise_scale_b_precond",
  "noise_scale_precond_lo": "optim/noise_scale_b_precond_lo",
  "noise_scale_precond_hi": "optim/noise_scale_b_precond_hi",
  "noise_scale_per_example": "optim/noise_scale_b_simple_per_example",
  "noise_scale_precond_per_example": "optim/noise_scale_b_precond_per_example",
  "dist_from_init": "optim/dist_from_init",
  "wall_time": "perf/train_time_s",
  "compile_time": "perf/compile_time_s",
  "examples_per_sec": "perf/examples_per_sec",
  "step_time": "perf/step_time_s",
}
_PREFIXES = {
  "adaptive_batch/": "optim/adaptive_batch/",
  "trust_ratio/": "optim/trust_ratio/",
  "relative_step/": "optim/relative_step/",
  "dist_from_init/": "optim/dist_from_init/",
  "eval_": "eval/test_",
  "validation_": "eval/validation_",
  "train_": "train/",
}
GROUPS = ("train", "eval", "optim", "perf")


def tensorboard_tag(key: str) -> Optional[str]:
  """The grouped TensorBoard tag of a metric key (``eval_accuracy`` → ``eval/test_accuracy``); None = not written.
  A key with no rule goes to ``train/<key>``."""
  if key in _TAGS:
    return _TAGS[key]
  for prefix, group in _PREFIXES.items():
    if key.startswith(prefix):
      return group + key[len(prefix) :]
  return "train/" + key


def _plain(v: Any) -> Any:
  if isinstance(v, (np.generic, np.ndarray)):
    v = v.item() if np.ndim(v) == 0 else np.asarray(v).tolist()
  if isinstance(v, float) and not math.isfinite(v):
    return str(v)  # JSON has no NaN/inf; keep the fact, as text
  return v


def _step(line: str) -> Any:
  """The step of a JSONL line that is an object with an integer step, else None."""
  try:
    row = json.loads(line)
  except json.JSONDecodeError:
    return None
  step = row.get("step") if isinstance(row, dict) else None
  return step if isinstance(step, int) else None


def keep_rows_until(path: str, resume_step: int, log: Callable[[str], None] = print) -> None:
  """Prepares ``path`` for a run resumed at ``resume_step``: rows past that step belong to the lost future and go,
  as does a last line cut short by a kill (a row appended to it would be garbled too). Every other line stays as
  it is — a middle line that is not a valid row is kept (readers skip it) and reported, never silently dropped.
  The file is rewritten only when something goes, and then says how much."""
  text = io_utils.read_text(path, errors="replace")
  if text is None:
    return
  lines = text.splitlines(keepends=True)
  keep, dropped, torn, fixed = [], 0, False, False
  for n, line in enumerate(lines, 1):
    if not line.strip():
      continue
    if not line.endswith("\n"):  # the last line, without its newline: cut short by a kill unless it parses
      try:
        json.loads(line)
      except json.JSONDecodeError:
        torn = True
        continue
      line, fixed = line + "\n", True
    step = _step(line)
    if step is not None and step > resume_step:
      dropped += 1
      continue
    if step is None:
      log(f"{path} line {n} is not a metrics row (readers skip it); kept as it is.")
    keep.append(line)
  if dropped or torn or fixed:
    io_utils.write_text_atomic(path, "".join(keep))
    done = (
      [f"removed {dropped} row(s) after step {resume_step}, the checkpoint this run resumes from"] * bool(dropped)
      + ["removed a last line cut short by a kill"] * torn
      + ["ended its last line with a newline"] * fixed
    )
    log(f"{path}: " + ", and ".join(done) + ".")


def jsonl_row(step: int, scalars: Mapping[str, Any]) -> dict:
  """The ``metrics.jsonl`` row of an evaluation: ``{"step": step, **scalars}`` as plain JSON values."""
  return {"step": int(step), **{k: _plain(v) for k, v in scalars.items()}}


def restore_rows(path: str, saved: list, log: Callable[[str], None] = print) -> None:
  """Makes ``path`` hold exactly the rows a checkpoint kept (``saved``, every row up to its step), when its rows
  differ from them: a ``metrics.jsonl`` deleted, cut short or damaged in a killed run gets its rows back. The old
  file, if any, is kept beside it as ``<path>.damaged``; one log line says so."""
  have = [r for r in io_utils.read_jsonl(path) if isinstance(r.get("step"), int)]
  if have == saved:
    return
  old = io_utils.read_text(path, errors="replace")
  if old:
    io_utils.write_text_atomic(path + ".damaged", old)
  io_utils.write_text_atomic(path, "".join(json.dumps(r) + "\n" for r in saved))
  missing = len({r["step"] for r in saved} - {r["step"] for r in have})
  log(
    f"{path}: {missing} of the checkpoint's {len(saved)} row(s) were missing and "
    f"{sum(r not in saved for r in have)} row(s) differed; rewrote it from the checkpoint"
    + (f" (the old file is {path}.damaged)." if old else ".")
  )


def _hparam_value(v: Any) -> Any:
  """An HParams value: bool, number or text (lists and None as text)."""
  v = _plain(v)
  if isinstance(v, (bool, int, float, str)):
    return v
  return json.dumps(v)


def config_hparams(config: Any, keys: tuple[str, ...] = HPARAM_KEYS) -> dict[str, Any]:
  """``{dotted key: value}`` of the ``keys`` present in ``config`` (a ConfigDict or nested mapping)."""
  out = {}
  for key in keys:
    node, ok = config, True
    for part in key.split("."):
      try:
        node = node[part]
      except (KeyError, TypeError, AttributeError):
        ok = False
        break
    if ok:
      out[key] = _hparam_value(node)
  if out.get("optimizer.learning_rate") == "null":  # the optimizer's default LR (lamb_lars/configs/optimizer.py)
    from lamb_lars.optim import optimizer_config

    out["optimizer.learning_rate"] = optimizer_config.learning_rate(config["optimizer"])
  return out


def _hparams_summary(hparams: Mapping[str, Any]):
  """The HParams plugin's session-start summary (tensorboardX.summary.hparams writes it; no experiment summary, so
  TensorBoard infers the experiment from every session of the logdir: trials that vary different keys combine)."""
  from tensorboardX.summary import hparams as hparams_summary

  _, start, _ = hparams_summary({k: _hparam_value(v) for k, v in hparams.items()}, {})
  return start


def _session_end_summary(status: str):
  from tensorboardX.proto.api_pb2 import Status
  from tensorboardX.proto.plugin_hparams_pb2 import HParamsPluginData, SessionEndInfo
  from tensorboardX.proto.summary_pb2 import Summary, SummaryMetadata

  code = {"done": "STATUS_SUCCESS", "diverged": "STATUS_FAILURE"}.get(status, "STATUS_UNKNOWN")
  content = HParamsPluginData(session_end_info=SessionEndInfo(status=Status.Value(code)), version=0)
  meta = SummaryMetadata(
    plugin_data=SummaryMetadata.PluginData(plugin_name="hparams", content=content.SerializeToString())
  )
  return Summary(value=[Summary.Value(tag="_hparams_/session_end_info", metadata=meta)])


class MetricWriter:
  """Appends scalars to ``<workdir>/metrics.jsonl`` (eval rows) and to TensorBoard (all rows, grouped tags), and
  writes the run's HParams session (``hparams``) to TensorBoard."""

  def __init__(
    self,
    workdir: str,
    *,
    enabled: bool = True,
    resume_step: int = 0,
    log: Callable[[str], None] = print,
    hparams: Optional[Mapping[str, Any]] = None,
    saved_rows: Optional[list] = None,
  ):
    """``saved_rows``: the rows the checkpoint resumed from kept (:func:`restore_rows`); None: none kept."""
    self.enabled = enabled
    self.path = os.path.join(workdir, run_files.METRICS_FILE)
    self._tb = None
    self.rows: list[dict] = []  # every eval row of the run so far (a checkpoint keeps them)
    if not enabled:
      return
    io_utils.makedirs(workdir)
    keep_rows_until(self.path, resume_step, log)
    if saved_rows is not None:
      restore_rows(self.path, saved_rows, log)
    self.rows = [r for r in io_utils.read_jsonl(self.path) if isinstance(r.get("step"), int)]
    from tensorboardX import SummaryWriter  # a pinned dependency (pyproject.toml); imported here to keep start-up light

    self._tb = SummaryWriter(
      os.path.join(workdir, run_files.TENSORBOARD_DIR), purge_step=resume_step + 1 if resume_step else None
    )
    if hparams:
      self._tb.file_writer.add_summary(_hparams_summary(hparams))
      self._tb.flush()

  def write_scalars(self, step: int, scalars: Mapping[str, Any], *, jsonl: bool = False) -> None:
    if not self.enabled:
      return
    if self._tb is not None:
      for k, v in scalars.items():
        tag = tensorboard_tag(k)
        if tag is not None and np.ndim(v) == 0 and isinstance(_plain(v), (int, float)):
          self._tb.add_scalar(tag, float(v), step)
    if jsonl:  # an eval row: on disk now, for the study runner and a live TensorBoard (a pruned trial is killed)
      row = jsonl_row(step, scalars)
      io_utils.append_jsonl(self.path, row)
      self.rows.append(row)
      self.flush()

  def flush(self) -> None:
    if self._tb is not None:
      self._tb.flush()

  def close(self, status: Optional[str] = None) -> None:
    """Closes the event file; ``status`` (done | diverged) ends the HParams session."""
    if self._tb is not None:
      writers = list((self._tb.all_writers or {}).values())
      try:
        if status is not None:
          self._tb.file_writer.add_summary(_session_end_summary(status))
        self._tb.close()
      finally:  # closed even when the last flush failed (a full disk): tensorboardX's atexit hook would retry it
        for writer in writers:  # and print its traceback after our one sentence
          writer.event_writer._closed = True
