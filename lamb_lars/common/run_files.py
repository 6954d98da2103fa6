"""The files of one run directory: the contract between the trainer, which writes them, and the study runner,
which reads them while the trial runs and after it ends. Both sides name the files through these constants only::

  RUN_DIR/trial_config.json  the trial's training config (the runner writes it; run_one reads it)
  RUN_DIR/hparams.json       the keys the study varies, for TensorBoard's HParams dashboard (the runner)
  RUN_DIR/config.json        the config the run was started with (the trainer; a changed config is refused)
  RUN_DIR/checkpoints/       the trainer's checkpoints (a restarted trial resumes from them)
  RUN_DIR/metrics.jsonl      one JSON row per evaluation, appended as the trainer goes
  RUN_DIR/result.json        ``{"status", "step", "final", "error"?, "stopped"?}`` once the run has ended
  RUN_DIR/tensorboard/       TensorBoard event files
  RUN_DIR/log.txt            the trial process's output (the executor)
  RUN_DIR/error.txt          why the trial process crashed (run_one)

:class:`MetricsTail` reads ``metrics.jsonl`` incrementally: the runner polls a running trial every 0.25 s, and
re-parsing the whole file at every poll costs time quadratic in the number of rows.
"""

from __future__ import annotations

import os
from typing import Any, Optional

from lamb_lars.common import io_utils

TRIAL_CONFIG_FILE = "trial_config.json"
HPARAMS_FILE = "hparams.json"
CONFIG_FILE = "config.json"
CHECKPOINT_DIR = "checkpoints"
METRICS_FILE = "metrics.jsonl"
RESULT_FILE = "result.json"
TENSORBOARD_DIR = "tensorboard"
LOG_FILE = "log.txt"
ERROR_FILE = "error.txt"


def read_metrics(run_dir: str) -> list[dict]:
  """Every eval row of ``metrics.jsonl`` ([] before the first); a torn last line is skipped."""
  return io_utils.read_jsonl(os.path.join(run_dir, METRICS_FILE))


def read_result(run_dir: str) -> Optional[dict]:
  """``result.json`` of an ended run, or None while it has none; a damaged file is a one-sentence ValueError."""
  return io_utils.read_json_object(
    os.path.join(run_dir, RESULT_FILE),
    damaged="is damaged (not valid JSON)",
    remedy="move it away and re-run to resume that trial from its checkpoints",
  )


class MetricsTail:
  """The rows appended to a run's ``metrics.jsonl`` since the last :meth:`read`.

  Keeps the byte offset of the first unread line. A last line without its newline is one the trainer is still
  writing (or was killed writing): it is left for the next read. When the file was replaced (the trainer, resuming,
  rewrites it without the rows past its checkpoint) or shrank, reading starts again from its first row; the store
  keys rows by step, so a row read twice is written once.
  """

  def __init__(self, run_dir: str):
    self.path = os.path.join(run_dir, METRICS_FILE)
    self.offset = 0
    self._inode: Optional[int] = None

  def _new_bytes(self) -> bytes:
    if io_utils.is_remote(self.path):
      data = io_utils.read_bytes(self.path, default=b"")
      if len(data) < self.offset:
        self.offset = 0
      return data[self.offset :]
    try:
      with open(self.path, "rb") as f:
        st = os.fstat(f.fileno())
        if st.st_ino != self._inode or st.st_size < self.offset:
          self._inode, self.offset = st.st_ino, 0
        f.seek(self.offset)
        return f.read()
    except FileNotFoundError:
      return b""

  def read(self) -> list[dict[str, Any]]:
    """The JSON-object rows of the complete lines written since the last call (other lines are skipped)."""
    data = self._new_bytes()
    end = data.rfind(b"\n") + 1
    if not end:
      return []
    self.offset += end
    return io_utils.parse_jsonl(data[:end].decode("utf-8", errors="replace").splitlines(keepends=True))
