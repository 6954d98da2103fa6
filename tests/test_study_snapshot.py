"""``python -m lamb_lars.study snapshot``: a study killed mid-way, snapshotted without its checkpoints, and resumed
from a copy of the snapshot ends with every trial recorded once, and with the same eval rows as the same study
resumed in its own workdir from its checkpoints (a trial restarted from step 0 is deterministic)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from lamb_lars.common import code_state
from lamb_lars.study.running import snapshot as snap
from lamb_lars.study.running import store as st
from lamb_lars.study.running import workdir as wd
from test_study_runner import REPO, TINY_STUDY, _midway_run, _wait_for

# The tiny study without its failing trial: every trial of it ends in a result.
STUDY = "\n".join(line for line in TINY_STUDY.splitlines() if 'name="bad"' not in line)


def _evals(workdir: str) -> dict:
  con = st.open_store(wd.store_path(workdir))
  try:
    keys = ("step", "train_loss", "eval_loss", "eval_accuracy", "validation_accuracy")
    return {
      r["run_id"]: (r["status"], [tuple(e.get(k) for k in keys) for e in st.evals(con, r["run_id"])])
      for r in st.runs(con)
    }
  finally:
    con.close()


@pytest.mark.slow
def test_a_snapshot_without_checkpoints_resumes_to_the_same_results(tmp_path):
  assert 'name="bad"' not in STUDY and 'name="tuned"' in STUDY
  config = tmp_path / "study.py"
  config.write_text(STUDY)
  workdir, copy = str(tmp_path / "study"), str(tmp_path / "copy")
  cmd = lambda w: [sys.executable, "-m", "lamb_lars.study", "run", f"--config={config}", f"--workdir={w}"]
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
  proc = subprocess.Popen(cmd(workdir), cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  midway = _wait_for(lambda: _midway_run(workdir), proc)
  assert midway and proc.poll() is None, "no trial got mid-way before the study ended"
  os.kill(proc.pid, signal.SIGKILL)  # the driver dies; its trials may run on a moment, as after a session's end
  proc.wait()
  out = subprocess.run(
    [sys.executable, "-m", "lamb_lars.study", "snapshot", f"--workdir={workdir}", f"--out={tmp_path / 'snap'}"],
    cwd=REPO,
    env=env,
    capture_output=True,
    text=True,
    timeout=120,
  )
  assert out.returncode == 0 and "snapshot of" in out.stdout, out.stdout + out.stderr
  files = {
    os.path.relpath(os.path.join(d, f), tmp_path / "snap") for d, _, fs in os.walk(tmp_path / "snap") for f in fs
  }
  assert {wd.STORE_FILE, wd.STUDY_CONFIG_FILE, wd.COMMANDS_FILE, snap.SNAPSHOT_FILE} <= files
  assert not any("/checkpoints" in f or "/tensorboard/" in f or f.endswith(".lock") for f in files), files
  assert f"runs/{midway}/metrics.jsonl" in files
  record = json.loads((tmp_path / "snap" / snap.SNAPSHOT_FILE).read_text())
  assert record["trials"].get("running", 0) >= 1 and sum(record["trials"].values()) == len(_evals(workdir))
  assert record["code"] == code_state.code_state(REPO)  # the checkout the study ran from
  subprocess.run(["cp", "-r", str(tmp_path / "snap"), copy], check=True)
  for w in (workdir, copy):  # resume both: from checkpoints, and from nothing for the unfinished trials
    done = subprocess.run(cmd(w), cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
  original, resumed = _evals(workdir), _evals(copy)
  assert set(original) == set(resumed)
  assert all(s in ("done", "pruned", "diverged") for s, _ in resumed.values()), resumed
  for rid, (status, rows) in resumed.items():
    steps = [row[0] for row in rows]
    assert steps == sorted(set(steps)), rid  # one row per eval step, even for a trial restarted from step 0
    n = min(len(rows), len(original[rid][1]))  # a trial may be pruned at another rung in the other resume
    assert rows[:n] == original[rid][1][:n], rid  # the same numbers, bit for bit
  assert resumed[midway][1] and original[midway][1][:1] == resumed[midway][1][:1]  # restarted from step 0


@pytest.mark.parametrize("out", ["inside", "remote"])
def test_snapshot_refuses_bad_destinations_in_one_sentence(tmp_path, out):
  workdir = tmp_path / "study"
  workdir.mkdir()
  st.open_store(str(workdir / wd.STORE_FILE)).close()
  dest = str(workdir / "snap") if out == "inside" else "gs://bucket/snap"
  with pytest.raises(ValueError, match="inside the study workdir|object-store"):
    snap.snapshot(str(workdir), dest)


def test_snapshot_of_a_folder_that_is_not_a_study(tmp_path):
  with pytest.raises(ValueError, match="not a study workdir"):
    snap.snapshot(str(tmp_path), str(tmp_path.parent / "snap"))
