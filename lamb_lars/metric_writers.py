"""Where metrics go: a JSONL file (one object per evaluation, read by studies), TensorBoard event files (written by
tensorboardX, no TensorFlow), and the console. Only process 0 writes.
"""
from __future__ import annotations

import json
import math
import os
from typing import Any, Mapping

import numpy as np

from lamb_lars import io_utils


def _plain(v: Any) -> Any:
  if isinstance(v, (np.generic, np.ndarray)):
    v = v.item() if np.ndim(v) == 0 else np.asarray(v).tolist()
  if isinstance(v, float) and not math.isfinite(v):
    return str(v)  # JSON has no NaN/inf; keep the fact, as text
  return v


class MetricWriter:
  """Appends scalars to ``<workdir>/metrics.jsonl`` (eval rows) and to TensorBoard (all rows)."""

  def __init__(self, workdir: str, *, enabled: bool = True, resume_step: int = 0):
    self.enabled = enabled
    self.path = os.path.join(workdir, "metrics.jsonl")
    self._tb = None
    if not enabled:
      return
    os.makedirs(workdir, exist_ok=True)
    # Rows written after the checkpoint we resume from belong to the lost future: drop them.
    rows = [r for r in io_utils.read_jsonl(self.path) if r.get("step", 0) <= resume_step]
    io_utils.write_text_atomic(self.path, "".join(json.dumps(r) + "\n" for r in rows))
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
