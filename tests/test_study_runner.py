"""The sweep runner end to end on a tiny synthetic study: every run recorded once, SIGKILL of the runner mid-study
and a restart finish the study, a huge LR is recorded as diverged, a bad config as failed with its error, and
``report`` writes README.md + PNGs from the store. Plus the pure parts of sweep expansion."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import ml_collections
import numpy as np
import pytest

from configs.studies import smoke
from lamb_lars.study import runner, store as st, sweep
from lamb_lars.study.study_report import write_study_report

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Compiled programs are content-addressed: sharing them across tests and sessions only saves time.
JAX_CACHE = os.path.join(tempfile.gettempdir(), "lamb_lars_study_test_jax_cache")


# --- sweep expansion (pure) -------------------------------------------------------------------------------------


def test_halton_is_deterministic_and_fills_the_cube():
  u = sweep.halton(64, 3)
  assert u.shape == (64, 3) and np.all((u >= 0) & (u < 1))
  np.testing.assert_allclose(u[:3, 0], [0.5, 0.25, 0.75])  # van der Corput base 2
  np.testing.assert_allclose(u[:2, 1], [1 / 3, 2 / 3])
  np.testing.assert_array_equal(sweep.halton(8, 2, seed=3), sweep.halton(8, 2, seed=3))
  assert not np.array_equal(sweep.halton(8, 2, seed=3), sweep.halton(8, 2, seed=4))
  for d in range(3):  # low discrepancy: every eighth of [0, 1) holds 8 of the 64 points
    assert np.all(np.histogram(u[:, d], bins=8, range=(0, 1))[0] == 8)


def test_scale_point_ranges():
  assert sweep.scale_point(0.0, ("log", 1e-3, 1e-1)) == pytest.approx(1e-3)
  assert sweep.scale_point(0.5, ("log", 1e-3, 1e-1)) == pytest.approx(1e-2)
  assert sweep.scale_point(0.25, ("linear", 0, 4)) == pytest.approx(1.0)
  assert [sweep.scale_point(u, ("int", 1, 3)) for u in (0.0, 0.34, 0.99)] == [1, 2, 3]
  assert sweep.scale_point(0.7, ("choice", ("a", "b"))) == "b"
  with pytest.raises(ValueError):
    sweep.scale_point(0.5, ("exp", 1, 2))


def _study(**base_overrides) -> ml_collections.ConfigDict:
  c = smoke.get_config()
  with c.unlocked():
    c.base.update(base_overrides)
  return c


def test_expand_grid_random_and_ids():
  c = _study()
  c.sweeps = (dict(name="g", variant="layerwise_bound", fixed={"optimizer.layerwise": True},
                   grid={"batch_size": (32, 64)}, random={"optimizer.learning_rate": ("log", 1e-3, 1e-1)},
                   num_random=3, seed=1),)
  trials = sweep.expand(c)
  assert len(trials) == 6 and len({t.run_id for t in trials}) == 6
  assert [t.batch_size for t in trials] == [32, 32, 32, 64, 64, 64]
  assert all(1e-3 <= t.config.optimizer.learning_rate <= 1e-1 and t.config.optimizer.layerwise for t in trials)
  assert trials[0].run_id.startswith("g-b32-momentum-layerwise_bound-")
  assert [t.run_id for t in sweep.expand(c)] == [t.run_id for t in trials]  # deterministic
  assert c.base.batch_size == 256 and not c.base.optimizer.layerwise  # the base is not modified
  assert trials[0].params()["variant"] == "layerwise_bound" and trials[0].params()["lr_scaling"] == "linear"


@pytest.mark.parametrize("bad, match", [
    (dict(name="x", fixed={"optimizer.lerning_rate": 0.1}), "lerning_rate"),
    (dict(name="x", grid={"batch_size": ()}), "non-empty"),
    (dict(name="x", variant="sideways"), "variant"),
    (dict(name="x", fixd={}), "unknown fields"),
    (dict(name="x", grid={"batch_size": (32, 32)}), "same id"),
])
def test_expand_rejects_bad_sweeps(bad, match):
  c = _study()
  c.sweeps = (bad,)
  with pytest.raises(ValueError, match=match):
    sweep.expand(c)


def test_changed_study_in_same_workdir_is_refused(tmp_path):
  c = _study()
  trials = sweep.expand(c)
  con = st.open_store(tmp_path / "s.sqlite")
  runner.register(con, c, trials)
  changed = _study(num_train_steps=5)
  with pytest.raises(ValueError, match="different config"):
    runner.register(con, changed, sweep.expand(changed))


# --- the runner, for real ---------------------------------------------------------------------------------------


def _tiny_study() -> ml_collections.ConfigDict:
  """Two normal runs, one with an absurd LR (diverges), one with a bad batch size (the trainer refuses it)."""
  c = _study(num_train_steps=3, eval_every_epochs=0.0625, checkpoint_every_epochs=0.0625,
             stop_on_divergence=True)
  c.sweeps = (
      dict(name="ok", grid={"batch_size": (32, 64)}),
      dict(name="huge-lr", fixed={"batch_size": 32, "optimizer.learning_rate": 1e12}),
      dict(name="bad", fixed={"batch_size": 100000}),
  )
  c.runner.env = {"JAX_COMPILATION_CACHE_DIR": JAX_CACHE, "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}
  return c


def _runner_cmd(workdir: str) -> list[str]:
  """The CLI with the tiny study as overrides of the smoke config (the test's study is built the same way)."""
  return [sys.executable, "-c",
          "import sys; sys.argv[0] = 'study'; from tests.test_study_runner import _main_tiny; _main_tiny()",
          f"--workdir={workdir}"]


def _main_tiny() -> None:
  """Entry point of the runner subprocess: the tiny study through ``runner.run_study`` (flag-free)."""
  workdir = sys.argv[1].split("=", 1)[1]
  runner.run_study(_tiny_study(), workdir, log=lambda s: print(s, flush=True), poll_s=0.2, ingest_every_s=0.5)


def _statuses(workdir: str) -> dict[str, str]:
  con = st.open_store(runner.store_path(workdir))
  try:
    return {r["run_id"]: r["status"] for r in st.runs(con)}
  finally:
    con.close()


def test_runner_sigkill_restart_diverged_failed_and_report(tmp_path):
  workdir = str(tmp_path / "study")
  expected = {t.run_id for t in sweep.expand(_tiny_study())}
  env = dict(os.environ, PYTHONPATH=REPO)
  # 1. Start the runner and SIGKILL it once the first run has an eval in the store (mid-study, mid-run or not).
  proc = subprocess.Popen(_runner_cmd(workdir), cwd=REPO, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
  deadline = time.monotonic() + 120
  while time.monotonic() < deadline and proc.poll() is None:
    time.sleep(0.3)
    if os.path.exists(runner.store_path(workdir)):
      con = st.open_store(runner.store_path(workdir))
      n = con.execute("SELECT COUNT(*) FROM evals").fetchone()[0]
      con.close()
      if n:
        break
  assert proc.poll() is None, "the runner finished before it could be killed: " + proc.stdout.read()
  os.kill(proc.pid, signal.SIGKILL)
  proc.wait()
  proc.stdout.close()
  before = _statuses(workdir)
  assert set(before) == expected and "running" in before.values()
  assert not set(before.values()) - {"pending", "running", "done", "diverged", "failed"}
  # 2. Restart: it finishes; every run recorded exactly once, resumed where it was.
  out = subprocess.run(_runner_cmd(workdir), cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
  assert out.returncode == 0, out.stdout + out.stderr
  after = _statuses(workdir)
  assert set(after) == expected
  con = st.open_store(runner.store_path(workdir))
  assert con.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == len(expected)
  by_prefix = {rid.split("-b")[0]: r for rid in after for r in st.runs(con, run_id=rid)}
  assert [by_prefix["ok"]["status"]] + [s for rid, s in after.items() if rid.startswith("ok")] == ["done"] * 3
  assert by_prefix["huge-lr"]["status"] == "diverged"
  assert by_prefix["bad"]["status"] == "failed" and "100000" in by_prefix["bad"]["error"]
  assert "ValueError" in by_prefix["bad"]["error"]
  for rid in after:  # each eval step once per run; finished runs have their final eval
    steps = [e["step"] for e in st.evals(con, rid)]
    assert steps == sorted(set(steps))
  ok = [rid for rid in after if rid.startswith("ok")]
  assert all(st.evals(con, rid)[-1]["step"] == 3 for rid in ok)
  con.close()
  # 3. A third run of the same command has nothing left but the failed run (retried, fails again).
  again = subprocess.run(_runner_cmd(workdir), cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
  assert "3 already finished, 1 to run" in again.stdout
  assert _statuses(workdir) == after
  # 4. The report from the store alone.
  path = write_study_report(workdir, str(tmp_path / "report"))
  text = open(path, encoding="utf-8").read()
  for heading in ("## Settings", "## Runs", "## Steps to target", "## Accuracy vs batch size", "## Regimes"):
    assert heading in text
  assert "100000" in text  # the failed run's error is listed
  pngs = [f for f in os.listdir(tmp_path / "report") if f.endswith(".png")]
  assert "accuracy_vs_batch.png" in pngs and "training_curves.png" in pngs
  saved = json.load(open(os.path.join(workdir, runner.STUDY_CONFIG_FILE)))
  assert saved["name"] == "smoke" and saved["analysis"]["baseline_batch"] == 32


def test_cli_dry_run_and_locked_overrides():
  base = [sys.executable, "-m", "lamb_lars.study", "run", "--config=configs/studies/smoke.py",
          "--workdir=/nonexistent/dry", "--dry_run"]
  out = subprocess.run(base + ["--config.base.num_train_steps=2"], cwd=REPO, capture_output=True, text=True,
                       timeout=120)
  assert out.returncode == 0, out.stderr
  assert len(out.stdout.strip().splitlines()) == 5 and "ladder-b32-momentum-original-" in out.stdout
  bad = subprocess.run(base + ["--config.base.num_trian_steps=2"], cwd=REPO, capture_output=True, text=True,
                       timeout=120)
  assert bad.returncode != 0 and "num_trian_steps" in bad.stderr
