"""What a researcher sees of a running study, on a tiny synthetic one (a searched cell of 4 trials, ASHA at epoch
1, interrupted while a trial runs and then resumed): the status line and ``python -m lamb_lars.study status``,
the search in Optuna's own storage (``optuna.load_study``: every trial once, with its intermediate values), and
every trial as a session in TensorBoard's HParams dashboard (tensorboard's own reader)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile

import ml_collections
import optuna
import pytest

from lamb_lars.configs.studies import smoke
from lamb_lars.study.running import runner, search, status, store as st
from lamb_lars.study.running import workdir as wd
from tensorboard_reader import hparams_sessions

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JAX_CACHE = os.path.join(tempfile.gettempdir(), "lamb_lars_study_test_jax_cache")


def tiny_study() -> ml_collections.ConfigDict:
  c = smoke.get_config()
  c.sweeps = (
    dict(
      name="tuned",
      role="technique",
      technique="tuned",
      fixed={"batch_size": 64},
      search={"optimizer.learning_rate": ("log", 0.005, 0.5)},
      num_trials=4,
      seed=1,
    ),
  )
  c.runner.env = {
    "JAX_COMPILATION_CACHE_DIR": JAX_CACHE,
    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
    "XLA_FLAGS": "",  # one CPU device per trial, not the suite's 8 fake ones
  }
  return c


def test_duration_and_eta():
  assert [status.duration(s) for s in (None, 41, 245, 4320)] == ["?", "41s", "4m05s", "1h12m"]
  runs = [
    {"run_id": "a", "status": "done", "wall_time": 300.0, "budget_epochs": 30.0},  # 30 epochs in 300 s
    {"run_id": "b", "status": "pruned", "wall_time": 30.0, "budget_epochs": 30.0},  # pruned at epoch 2
    {"run_id": "c", "status": "failed", "wall_time": 99.0, "budget_epochs": 30.0},  # not an ended trial
    {"run_id": "d", "status": "running", "wall_time": None, "budget_epochs": 60.0},  # at epoch 20 of 60
    {"run_id": "e", "status": "pending", "wall_time": None, "budget_epochs": 60.0},
    {"run_id": "f", "status": "pending", "wall_time": None, "budget_epochs": 10.0},
  ]
  epochs = {"a": 30.0, "b": 2.0, "c": 5.0, "d": 20.0}
  rate = (300.0 + 30.0) / (30.0 + 2.0)  # seconds per epoch over the ended trials
  mean = (30.0 + 2.0) / 2  # epochs an ended trial trained
  low = rate * ((60 - 20) + min(60, mean) + min(10, mean)) / 2
  high = rate * ((60 - 20) + 60 + 10) / 2
  assert status.eta_range(runs, epochs, workers=2) == (pytest.approx(low), pytest.approx(high))
  assert status.eta_range(runs[:3], epochs, workers=1) == (0.0, 0.0)  # nothing left
  assert status.eta_range(runs[2:], epochs, workers=1) is None  # no ended trial to measure a rate on
  assert status._eta_text((0.0, 0.0)) == "done" and status._eta_text(None) == "ETA ~?"
  assert status._eta_text((245.0, 4320.0)) == "ETA ~4m05s–1h12m" and status._eta_text((41.0, 41.0)) == "ETA ~41s"


@pytest.mark.slow
@pytest.mark.e2e
def test_status_optuna_and_hparams_of_a_resumed_study(tmp_path):
  workdir = str(tmp_path / "study")
  study = tiny_study()
  lines = []

  def interrupt_once_a_trial_has_ended_and_one_runs(line):
    lines.append(line)
    if line.startswith("study smoke: ") and re.search(r"[1-9]/4 finished", line) and ", running 1," in line:
      raise KeyboardInterrupt

  with pytest.raises(KeyboardInterrupt):
    runner.run_study(study, workdir, log=interrupt_once_a_trial_has_ended_and_one_runs, status_every_s=0.5)
  assert any("\n  running tuned-" in ln for ln in lines)  # the running trial, with its epoch and time
  counts = runner.run_study(study, workdir, log=lines.append, status_every_s=0.5)
  assert counts["done"] + counts["pruned"] == 4 and counts["pruned"] >= 1

  # `status` from the store alone.
  out = subprocess.run(
    [sys.executable, "-m", "lamb_lars.study", "status", f"--workdir={workdir}"],
    cwd=REPO,
    capture_output=True,
    text=True,
    timeout=120,
    env={**os.environ, "PYTHONPATH": REPO},
  )
  assert out.returncode == 0, out.stderr
  assert out.stdout.strip() == (
    f"study smoke: 4/4 finished (done {counts['done']}, pruned {counts['pruned']}), "
    "failed 0, running 0, pending 0; done"
  )

  # Optuna storage: every trial of the cell once (the interrupted one resumed, not doubled), its intermediate values
  # those the store's log recorded, its state the store's status.
  con = st.open_store(wd.store_path(workdir))
  decisions, runs = st.decisions(con), {r["run_id"]: r for r in st.runs(con)}
  con.close()
  (cell,) = {r["cell"] for r in runs.values()}
  loaded = optuna.load_study(study_name=f"smoke/{cell}", storage=f"sqlite:///{workdir}/{search.OPTUNA_DB}")
  trials = {t.user_attrs["run_id"]: t for t in loaded.trials}
  assert sorted(trials) == sorted(runs) and len(loaded.trials) == 4
  for rid, t in trials.items():
    assert t.intermediate_values == {d["step"]: pytest.approx(d["value"]) for d in decisions if d["run_id"] == rid}
    want = {"done": optuna.trial.TrialState.COMPLETE, "pruned": optuna.trial.TrialState.PRUNED}[runs[rid]["status"]]
    assert t.state == want
    assert t.user_attrs["optimizer.learning_rate"] == pytest.approx(runs[rid]["params"]["optimizer.learning_rate"])
    assert t.params["optimizer.learning_rate"] == pytest.approx(runs[rid]["params"]["optimizer.learning_rate"])
    assert t.distributions["optimizer.learning_rate"].log  # the dashboard's parameter plots have their axis

  # TensorBoard HParams: one session per trial, by the keys the study varies.
  exp, sessions = hparams_sessions(os.path.join(workdir, "runs"))
  assert {"batch_size", "optimizer.name", "optimizer.learning_rate"} <= set(exp["hparams"])
  assert "eval/validation_accuracy" in exp["metrics"]
  assert set(sessions) == {f"{rid}/tensorboard" for rid in runs}
  for rid, r in runs.items():
    s = sessions[f"{rid}/tensorboard"]
    assert s["hparams"]["optimizer.learning_rate"] == pytest.approx(r["params"]["optimizer.learning_rate"])
    assert s["status"] == ("STATUS_SUCCESS" if r["status"] == "done" else "STATUS_UNKNOWN")


def test_persisted_search_decides_like_the_in_memory_one(tmp_path):
  """Moving a cell's search into Optuna storage half-way (what a resumed runner does) changes no decision, and
  the stored study holds every report; persisting again replaces it (no trial twice)."""
  import random

  rng = random.Random(0)
  values = {(i, e): rng.random() for i in range(12) for e in range(1, 10)}

  def run(s, epochs, out):
    for e in epochs:
      for i in range(12):
        if s.would_report(f"r{i}", e):
          out.append((i, e, s.report(f"r{i}", e, values[i, e])))
          if out[-1][2]:
            s.finish(f"r{i}", "pruned")

  memory, stored, a, b = (
    [],
    [],
    search.CellSearch(min_epochs=1, reduction_factor=3),
    search.CellSearch(min_epochs=1, reduction_factor=3),
  )
  run(a, range(1, 10), memory)
  run(b, range(1, 4), stored)
  storage = search.optuna_storage(str(tmp_path))
  b.persist(storage, "s/c")
  b.persist(storage, "s/c")
  run(b, range(4, 10), stored)
  assert stored == memory and any(p for _, _, p in memory)
  loaded = optuna.load_study(study_name="s/c", storage=f"sqlite:///{tmp_path}/{search.OPTUNA_DB}")
  assert len(loaded.trials) == 12
  assert sum(len(t.intermediate_values) for t in loaded.trials) == len(memory)


def test_optuna_storage_of_an_object_store_workdir_is_local(tmp_path, monkeypatch):
  """SQLite cannot live on gs://: the Optuna mirror of a gs:// workdir goes to its machine-local folder (where the
  study store's copy is), never to a ``./gs:/…`` path under the current directory."""
  from lamb_lars.common import io_utils

  monkeypatch.setenv(io_utils.LOCAL_ROOT_ENV, str(tmp_path / "local"))
  monkeypatch.chdir(tmp_path)
  storage = search.optuna_storage("gs://bucket/studies/s")
  optuna.create_study(study_name="s/c", storage=storage)
  path = io_utils.local_path("gs://bucket/studies/s", search.OPTUNA_DB)
  assert path.startswith(str(tmp_path / "local")) and os.path.isfile(path)
  assert not os.path.exists(tmp_path / "gs:")


@pytest.mark.slow
def test_status_piped_into_a_reader_that_stops_early_ends_without_a_traceback(tmp_path):
  """``study status | head -1``: the reader closes the pipe after the first line; the command ends quietly."""
  workdir = str(tmp_path / "study")
  study = tiny_study()
  wd.save_study_config(study, workdir)
  con = st.open_store(wd.store_path(workdir))
  for i in range(3000):  # enough lines to outlast the pipe's buffer
    st.upsert_run(con, f"tuned-{i:04d}-{'x' * 60}", study=study.name, budget_epochs=3.0, status="running")
  con.close()
  cmd = f"{sys.executable} -m lamb_lars.study status --workdir={workdir} | head -1"
  proc = subprocess.run(["bash", "-c", cmd], cwd=REPO, capture_output=True, text=True, timeout=120)
  assert proc.stdout.startswith("study smoke: 0/3000 finished"), proc.stdout + proc.stderr
  assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr
