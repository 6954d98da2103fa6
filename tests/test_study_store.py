"""Results store: round trips, idempotent ingestion of a run dir, and kill -9 safety."""

from __future__ import annotations

import json
import math
import os
import signal
import sqlite3
import subprocess
import sys

import numpy as np
import pytest

from lamb_lars.study.running import store as st
from lamb_lars.study.running.driver import ingest_run_dir
from lamb_lars.study.records import FINISHED, select

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_runs_status_lifecycle_and_trials(tmp_path):
  con = st.open_store(tmp_path / "study.sqlite")
  assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
  st.upsert_run(
    con,
    "r1",
    study="s",
    config={"lr": np.float32(0.5), "nested": {"a": [1, 2]}},
    params={"lr": 0.5},
    batch_size=np.int64(256),
    optimizer="sgd",
    variant="original",
  )
  st.upsert_run(con, "r2", study="s", batch_size=1024, optimizer="lars")
  st.upsert_run(con, "x", study="other", batch_size=64)
  st.set_status(con, "r1", "running", now=100.0)
  st.set_status(con, "r1", "running", now=150.0)  # resumed: started kept
  st.upsert_run(
    con, "r1", study="s", config={"lr": 0.5}, params={"lr": 0.5}, batch_size=256, optimizer="sgd", variant="original"
  )  # re-registering keeps the status
  st.set_status(con, "r1", "done", steps=1000, final={"eval_accuracy": 0.99}, now=160.0)
  st.set_status(con, "r2", "failed", error="OOM", now=10.0)
  r1, r2 = st.runs(con, study="s")
  assert (r1["run_id"], r1["status"], r1["started"], r1["finished"], r1["wall_time"], r1["steps"]) == (
    "r1",
    "done",
    100.0,
    160.0,
    60.0,
    1000,
  )
  assert r1["config"] == {"lr": 0.5} and r1["params"] == {"lr": 0.5} and r1["final"] == {"eval_accuracy": 0.99}
  assert (r2["status"], r2["error"], r2["wall_time"]) == ("failed", "OOM", None)
  assert [r["run_id"] for r in st.runs(con, status=FINISHED)] == ["r1"]
  assert [r["run_id"] for r in st.runs(con, status="pending")] == ["x"]
  with pytest.raises(ValueError):
    st.set_status(con, "r1", "exploded")
  with pytest.raises(KeyError):
    st.set_status(con, "nope", "done")
  st.add_evals(
    con,
    "r1",
    [
      {"step": 20, "epoch": 0.2, "examples": 5120, "wall_time": 2.0, "eval_loss": 0.1},
      {
        "step": 10,
        "epoch": 0.1,
        "examples": 2560,
        "wall_time": 1.0,
        "eval_loss": float("nan"),
        "trust_ratio/fc1/kernel": 0.01,
      },
    ],
  )
  st.add_evals(con, "r1", [{"step": 20, "eval_loss": 0.05, "noise_scale": "nan"}])  # same step replaces
  rows = st.evals(con, "r1")
  assert [r["step"] for r in rows] == [10, 20] and math.isnan(rows[0]["eval_loss"])
  assert rows[0]["trust_ratio/fc1/kernel"] == 0.01 and math.isnan(rows[1].pop("noise_scale"))  # text → float
  assert rows[1] == {"step": 20, "epoch": None, "examples": None, "wall_time": None, "eval_loss": 0.05}
  ts = st.trials(con, study="s")
  assert [(t.run_id, t.batch_size, t.optimizer, t.status, len(t.curve)) for t in ts] == [
    ("r1", 256, "sgd", "done", 2),
    ("r2", 1024, "lars", "failed", 0),
  ]
  assert select(ts, optimizer="lars")[0].error == "OOM"


def _write_run_dir(d, rows, result=None, torn=False):
  d.mkdir(parents=True, exist_ok=True)
  with open(d / "metrics.jsonl", "w") as f:
    for r in rows:
      f.write(json.dumps(r) + "\n")
    if torn:
      f.write('{"step": 999, "eval_acc')
  if result is not None:
    (d / "result.json").write_text(json.dumps(result))


def test_ingest_run_dir_is_idempotent_and_resumable(tmp_path):
  con = st.open_store(tmp_path / "s.sqlite")
  st.upsert_run(con, "r", study="s", batch_size=512, optimizer="adam")
  st.set_status(con, "r", "running")
  rows = [
    {
      "step": 100 * i,
      "epoch": i / 2,
      "examples": 51200 * i,
      "wall_time": 3.0 * i,
      "train_loss": 1.0 / i,
      "eval_loss": 1.0 / i,
      "eval_accuracy": 1 - 0.1 / i,
      "lr": 0.1,
    }
    for i in (1, 2)
  ]
  _write_run_dir(tmp_path / "r", rows, torn=True)  # interrupted: no result.json, torn last line
  assert ingest_run_dir(con, "r", tmp_path / "r") is None
  assert st.runs(con, run_id="r")[0]["status"] == "running" and len(st.evals(con, "r")) == 2
  rows.append({**rows[-1], "step": 300, "wall_time": 9.5})
  final = rows[-1]
  _write_run_dir(tmp_path / "r", rows, {"status": "done", "step": 300, "final": final})
  for _ in range(2):
    assert ingest_run_dir(con, "r", tmp_path / "r") == "done"
  run = st.runs(con, run_id="r")[0]
  assert (run["status"], run["steps"], run["wall_time"], run["final"]) == ("done", 300, 9.5, final)
  assert [r["step"] for r in st.evals(con, "r")] == [100, 200, 300]
  assert con.execute("SELECT COUNT(*) FROM evals").fetchone()[0] == 3
  _write_run_dir(
    tmp_path / "d", rows[:1], {"status": "diverged", "step": 150, "final": rows[0], "error": "loss is nan at step 150"}
  )
  assert ingest_run_dir(con, "d", tmp_path / "d") == "diverged"  # unregistered id: registered on the fly
  d = st.runs(con, run_id="d")[0]
  assert (d["status"], d["error"], d["steps"]) == ("diverged", "loss is nan at step 150", 150)


_WRITER = r"""
import sys
from lamb_lars.study.running import store as st
from lamb_lars.study.records import select
con = st.open_store(sys.argv[1])
i = 0
while True:
  st.upsert_run(con, f"run{i}", study="kill", batch_size=i, config={"i": i})
  st.add_evals(con, f"run{i}", [{"step": s, "eval_accuracy": i + s / 10} for s in range(3)])
  st.set_status(con, f"run{i}", "done", steps=i)
  print(i, flush=True)
  i += 1
"""


@pytest.mark.slow
def test_kill_9_loses_nothing_committed(tmp_path):
  path = str(tmp_path / "kill.sqlite")
  st.open_store(path).close()
  env = {**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
  proc = subprocess.Popen([sys.executable, "-c", _WRITER, path], stdout=subprocess.PIPE, text=True, env=env)
  try:
    last = -1
    for line in proc.stdout:
      last = int(line)
      if last >= 60:
        break
  finally:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
  assert last >= 60 and proc.returncode == -signal.SIGKILL
  con = st.open_store(path)
  assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
  done = {r["run_id"]: r for r in st.runs(con, study="kill", status="done")}
  for i in range(last + 1):  # everything the writer reported as committed is there, complete
    assert done[f"run{i}"]["config"] == {"i": i} and done[f"run{i}"]["steps"] == i
    assert [r["eval_accuracy"] for r in st.evals(con, f"run{i}")] == pytest.approx([i, i + 0.1, i + 0.2])
  # A second connection (another process in a real sweep) sees the same rows.
  other = sqlite3.connect(path)
  assert other.execute("SELECT COUNT(*) FROM runs WHERE status='done'").fetchone()[0] >= last + 1


def test_last_epochs_reads_each_runs_last_row_by_step(tmp_path):
  con = st.open_store(str(tmp_path / "s.sqlite"))
  for rid in ("a", "b", "c"):
    st.upsert_run(con, rid)
  st.add_evals(con, "a", [{"step": 30, "epoch": 3.0}, {"step": 10, "epoch": 1.0}])  # added out of order
  st.add_evals(con, "b", [{"step": 5, "epoch": 0.5}, {"step": 7}])  # the last row has no epoch
  assert st.last_epochs(con) == {"a": 3.0}  # c has no rows
  assert st.last_epochs(con)["a"] == st.evals(con, "a")[-1]["epoch"]
  con.close()
