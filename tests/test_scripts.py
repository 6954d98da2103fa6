"""scripts/paper_studies.sh on a fresh clone: it creates its studies folder and writes its own log there, so the
documented ``nohup bash scripts/paper_studies.sh > /dev/null 2>&1 &`` works before ``studies/`` exists."""

import os
import subprocess
import time
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
def test_paper_studies_script_creates_its_log_folder(tmp_path):
  stub = tmp_path / "bin"
  stub.mkdir()
  (stub / "python").write_text('#!/bin/sh\necho "python $*"\n')  # stands in for the studies: prints its command
  (stub / "python").chmod(0o755)
  studies = tmp_path / "fresh" / "studies"  # does not exist yet
  out = subprocess.run(
    ["bash", os.path.join(ROOT, "scripts", "paper_studies.sh")],
    capture_output=True,
    text=True,
    env={**os.environ, "PATH": f"{stub}:{os.environ['PATH']}", "STUDIES_DIR": str(studies)},
    timeout=60,
  )
  assert out.returncode == 0, out.stderr
  deadline = time.time() + 10  # the log is written by a `tee` that may finish just after the script
  while "both studies and reports done" not in (log := (studies / "paper_studies.log").read_text()):
    assert time.time() < deadline, log
    time.sleep(0.1)
  assert "start" in log and "--config=lamb_lars/configs/studies/mnist_table3.py:republish" in log and "report" in log
  assert "--config=lamb_lars/configs/studies/mnist_batch_ladder.py:republish" in log
  assert "--out=docs/studies/mnist_table3_replicated" in log
  assert "--out=docs/studies/mnist_batch_ladder_replicated" in log
  assert "both studies and reports done" in log
