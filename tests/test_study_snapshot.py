"""``python -m lamb_lars.study snapshot``: bad destinations and folders that are not a study are one sentence. The
end-to-end check (a study killed mid-way, snapshotted with only its running trial's newest checkpoint and resumed from
a copy, ends with the same eval rows as the same study resumed in its own workdir) shares the killed study of
tests/test_study_runner.py::test_study_survives_sigkill_of_a_trial_and_of_the_runner."""

from __future__ import annotations

import os

import pytest

from lamb_lars.study.running import snapshot as snap
from lamb_lars.study.running import store as st
from lamb_lars.study.running import workdir as wd


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


def _fake_ckpt(run: str, step: int, finished: bool = True) -> None:
  d = os.path.join(run, "checkpoints", str(step))
  os.makedirs(os.path.join(d, "state"))
  with open(os.path.join(d, "state", "data"), "wb") as f:
    f.write(bytes(range(256)) * 4096)  # 1 MiB
  if finished:
    open(os.path.join(d, "commit_success.txt"), "w").close()


def test_snapshot_keeps_the_newest_finished_checkpoint_of_each_trial_that_runs_again(tmp_path):
  """A running or failed trial keeps its newest checkpoint that orbax finished (not a save in progress, neither a
  step without its commit marker nor a temporary folder); done and pruned trials keep none; with
  ``running_checkpoints=False`` nothing is kept."""
  workdir = str(tmp_path / "study")
  os.makedirs(workdir)
  con = st.open_store(os.path.join(workdir, wd.STORE_FILE))
  statuses = {"run_a": "running", "run_b": "failed", "run_c": "done", "run_d": "pruned", "run_e": "running"}
  for run_id, status in statuses.items():
    st.upsert_run(con, run_id, config={"batch_size": 32}, status=status)
    run = wd.run_dir(workdir, run_id)
    os.makedirs(run)
    open(os.path.join(run, "metrics.jsonl"), "w").close()
    if run_id != "run_e":  # run_e was killed before its first checkpoint
      for step in (10, 20):
        _fake_ckpt(run, step)
  con.close()
  _fake_ckpt(wd.run_dir(workdir, "run_a"), 30, finished=False)  # a save that was under way
  os.makedirs(os.path.join(wd.run_dir(workdir, "run_a"), "checkpoints", "40.orbax-checkpoint-tmp-123"))

  record = snap.snapshot(workdir, str(tmp_path / "snap"))
  assert record["kept_running_checkpoints"] == {"run_a": 20, "run_b": 20}
  kept = sorted(
    os.path.relpath(d, tmp_path / "snap") for d, subdirs, _ in os.walk(tmp_path / "snap") if d.endswith(("/10", "/20"))
  )
  assert kept == ["runs/run_a/checkpoints/20", "runs/run_b/checkpoints/20"]
  assert os.listdir(tmp_path / "snap" / "runs" / "run_a" / "checkpoints") == ["20"]
  assert record["checkpoint_mb"] == 2.0  # two kept checkpoints of 1 MiB
  assert snap.resume_points(workdir, [{"run_id": "run_a", "status": "done"}]) == {}

  bare = snap.snapshot(workdir, str(tmp_path / "bare"), running_checkpoints=False)
  assert bare["kept_running_checkpoints"] == {}
  assert not any("checkpoints" in d for d, _, _ in os.walk(tmp_path / "bare"))


def test_a_store_that_only_a_writer_can_recover_is_copied_read_write(tmp_path, monkeypatch):
  """A store left by a killed runner can need WAL recovery, which a read-only connection refuses ("attempt to write
  a readonly database"); the copy then goes through a read-write connection and keeps every row."""
  import sqlite3

  src, dst = str(tmp_path / "s.sqlite"), str(tmp_path / "copy.sqlite")
  con = sqlite3.connect(src)
  con.execute("CREATE TABLE t (x)")
  con.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(7)])
  con.commit()
  con.close()
  real = sqlite3.connect

  class ReadOnlyRefuses:
    def __init__(self, con):
      self.con = con

    def backup(self, target):
      raise sqlite3.OperationalError("attempt to write a readonly database")

    def close(self):
      self.con.close()

  def connect(path, *a, **k):
    con = real(path, *a, **k)
    return ReadOnlyRefuses(con) if str(path).endswith("?mode=ro") else con

  monkeypatch.setattr(snap.sqlite3, "connect", connect)
  snap._backup_sqlite(src, dst)
  assert real(dst).execute("SELECT count(*) FROM t").fetchone() == (7,)
