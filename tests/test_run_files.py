"""The run-dir contract shared by the trainer and the study runner (lamb_lars/common/run_files.py)."""

from __future__ import annotations

import json
import os

import pytest

from lamb_lars.common import io_utils, run_files


def _append(path, text):
  with open(path, "a", encoding="utf-8") as f:
    f.write(text)


def test_the_tail_returns_only_new_rows(tmp_path):
  tail = run_files.MetricsTail(str(tmp_path))
  assert tail.read() == []  # no file yet
  path = os.path.join(tmp_path, run_files.METRICS_FILE)
  _append(path, json.dumps({"step": 1}) + "\n" + json.dumps({"step": 2}) + "\n")
  assert [r["step"] for r in tail.read()] == [1, 2]
  assert tail.read() == []  # nothing new
  _append(path, json.dumps({"step": 3}) + "\n")
  assert [r["step"] for r in tail.read()] == [3]
  assert tail.offset == os.path.getsize(path)


def test_a_torn_last_line_is_read_once_it_is_complete(tmp_path):
  path = os.path.join(tmp_path, run_files.METRICS_FILE)
  tail = run_files.MetricsTail(str(tmp_path))
  row = json.dumps({"step": 5, "eval_accuracy": 0.5})
  _append(path, json.dumps({"step": 4}) + "\n" + row[:7])  # the trainer is mid-line
  assert [r["step"] for r in tail.read()] == [4]
  assert tail.read() == []
  _append(path, row[7:] + "\n")
  assert tail.read() == [{"step": 5, "eval_accuracy": 0.5}]


def test_a_rewritten_file_is_read_again_from_its_start(tmp_path):
  """A resuming trainer rewrites metrics.jsonl without the rows past its checkpoint (metric_writers)."""
  path = os.path.join(tmp_path, run_files.METRICS_FILE)
  tail = run_files.MetricsTail(str(tmp_path))
  _append(path, "".join(json.dumps({"step": s}) + "\n" for s in (1, 2, 3)))
  assert len(tail.read()) == 3
  io_utils.write_text_atomic(path, json.dumps({"step": 1}) + "\n" + json.dumps({"step": 2, "x": 1}) + "\n")
  assert [r["step"] for r in tail.read()] == [1, 2]


def test_results_are_read_and_a_damaged_one_is_one_sentence(tmp_path):
  assert run_files.read_result(str(tmp_path)) is None
  with open(os.path.join(tmp_path, run_files.RESULT_FILE), "w", encoding="utf-8") as f:
    f.write('{"status": "do')
  with pytest.raises(ValueError, match="is damaged") as e:
    run_files.read_result(str(tmp_path))
  assert "\n" not in str(e.value)


def test_the_trainer_writes_the_files_the_runner_reads(tmp_path):
  """Both sides name the run-dir files only through run_files (a renamed file cannot drift on one side)."""
  import inspect
  from lamb_lars.train import checkpoint, metric_writers, run_identity, trainer
  from lamb_lars.study.running import driver, run_one, workdir

  literals = (
    '"metrics.jsonl"',
    '"result.json"',
    '"config.json"',
    '"checkpoints"',
    '"error.txt"',
    '"log.txt"',
    '"trial_config.json"',
    '"hparams.json"',
  )
  for module in (checkpoint, metric_writers, run_identity, trainer, driver, run_one, workdir):
    source = inspect.getsource(module)
    assert not [name for name in literals if name in source], module.__name__
