"""Where metrics go: a JSONL file (one object per evaluation, read by studies), TensorBoard event files (written by
tensorboardX, no TensorFlow), and the console. Only process 0 writes.
"""
from __future__ import annotations

import json
import math
import os
from typing import Any, Callable, Mapping

import numpy as np

from lamb_lars import io_utils


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
    done = ([f"removed {dropped} row(s) after step {resume_step}, the checkpoint this run resumes from"] * bool(dropped)
            + ["removed a last line cut short by a kill"] * torn + ["ended its last line with a newline"] * fixed)
    log(f"{path}: " + ", and ".join(done) + ".")


class MetricWriter:
  """Appends scalars to ``<workdir>/metrics.jsonl`` (eval rows) and to TensorBoard (all rows)."""

  def __init__(self, workdir: str, *, enabled: bool = True, resume_step: int = 0,
               log: Callable[[str], None] = print):
    self.enabled = enabled
    self.path = os.path.join(workdir, "metrics.jsonl")
    self._tb = None
    if not enabled:
      return
    io_utils.makedirs(workdir)
    keep_rows_until(self.path, resume_step, log)
    try:
      from tensorboardX import SummaryWriter
      self._tb = SummaryWriter(os.path.join(workdir, "tensorboard"), purge_step=resume_step + 1 if resume_step else None)
    except ImportError:  # TensorBoard output is optional
      self._tb = None

  def write_scalars(self, step: int, scalars: Mapping[str, Any], *, jsonl: bool = False) -> None:
    if not self.enabled:
      return
    if self._tb is not None:
      for k, v in scalars.items():
        if np.ndim(v) == 0 and isinstance(_plain(v), (int, float)):
          self._tb.add_scalar(k, float(v), step)
    if jsonl:
      io_utils.append_jsonl(self.path, {"step": int(step), **{k: _plain(v) for k, v in scalars.items()}})

  def flush(self) -> None:
    if self._tb is not None:
      self._tb.flush()

  def close(self) -> None:
    if self._tb is not None:
      self._tb.close()
