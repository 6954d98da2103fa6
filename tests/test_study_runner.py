"""The sweep runner end to end on a tiny synthetic study: every run recorded once, SIGKILL of the runner mid-study
and a restart finish the study, a huge LR is recorded as diverged, a bad config as failed with its error, and
``report`` writes README.md + PNGs from the store. Plus the pure parts of sweep expansion."""
from __future__ import annotations

import importlib.util
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
  for v in (u, sweep.halton(64, 3, seed=5)):  # low discrepancy: every eighth of [0, 1) holds 8 ± 1 of 64 points
    for d in range(3):
      assert np.all(np.abs(np.histogram(v[:, d], bins=8, range=(0, 1))[0] - 8) <= 1)


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


def test_trimmed_sweep_forgets_only_unstarted_runs(tmp_path):
  c = _study()
  trials = sweep.expand(c)  # 5 trials
  con = st.open_store(tmp_path / "s.sqlite")
  runner.register(con, c, trials)
  st.set_status(con, trials[4].run_id, "running")  # started: keeps its row even when trimmed away
  trimmed = _study()
  trimmed.sweeps = trimmed.sweeps[:1]  # the ladder only: trials 0-2
  statuses = runner.register(con, trimmed, sweep.expand(trimmed))
  assert set(statuses) == {t.run_id for t in trials[:3]} | {trials[4].run_id}


# --- the runner, for real ---------------------------------------------------------------------------------------

# A normal run, one with an absurd LR (diverges), one with a batch larger than the data (the trainer refuses it).
TINY_STUDY = f"""
from configs.studies import smoke

def get_config():
  c = smoke.get_config()
  c.base.num_train_steps = 3
  c.base.eval_every_epochs = 0.0625
  c.base.checkpoint_every_epochs = 0.0625
  c.sweeps = (
      dict(name="ok", fixed={{"batch_size": 32}}),
      dict(name="hugelr", fixed={{"batch_size": 32, "optimizer.learning_rate": 1e12}}),
      dict(name="bad", fixed={{"batch_size": 100000}}),
  )
  c.runner.env = {{"JAX_COMPILATION_CACHE_DIR": {JAX_CACHE!r}, "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}}
  return c
"""


def _load_study(path: str) -> ml_collections.ConfigDict:
  spec = importlib.util.spec_from_file_location("tiny_study", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config()


def _statuses(workdir: str) -> dict[str, str]:
  con = st.open_store(runner.store_path(workdir))
  try:
    return {r["run_id"]: r["status"] for r in st.runs(con)}
  finally:
    con.close()


def _checkpointed_run(workdir: str) -> str | None:
  """A run with an eval row on disk and a finished checkpoint (so that killing now tests the resume)."""
  runs_dir = os.path.join(workdir, "runs")
  for rid in sorted(os.listdir(runs_dir)) if os.path.isdir(runs_dir) else ():
    d = os.path.join(runs_dir, rid)
    ckpts = os.path.join(d, "checkpoints")
    has_ckpt = os.path.isdir(ckpts) and any(n.isdigit() for n in os.listdir(ckpts))
    has_eval = os.path.exists(os.path.join(d, "metrics.jsonl")) and os.path.getsize(os.path.join(d, "metrics.jsonl"))
    if has_ckpt and has_eval and not os.path.exists(os.path.join(d, "result.json")):
      return rid
  return None


def test_runner_sigkill_restart_diverged_failed_and_report(tmp_path):
  config_path = tmp_path / "tiny_study.py"
  config_path.write_text(TINY_STUDY)
  workdir = str(tmp_path / "study")
  expected = {t.run_id for t in sweep.expand(_load_study(str(config_path)))}
  cmd = [sys.executable, "-m", "lamb_lars.study", "run", f"--config={config_path}", f"--workdir={workdir}"]
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}  # one CPU device per trainer: faster here
  # 1. Start the runner; SIGKILL it as soon as a run is mid-way (an eval written, a checkpoint saved, not done).
  proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  deadline, killed_run = time.monotonic() + 120, None
  while time.monotonic() < deadline and proc.poll() is None and killed_run is None:
    time.sleep(0.1)
    killed_run = _checkpointed_run(workdir)
  assert proc.poll() is None, "the runner ended before it could be killed:\n" + proc.stdout.read()
  os.kill(proc.pid, signal.SIGKILL)
  proc.wait()
  proc.stdout.close()
  before = _statuses(workdir)
  assert set(before) == expected and before[killed_run] == "running"
  # 2. Restart: the study finishes, every run recorded exactly once, the killed run resumed from its checkpoint.
  out = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
  assert out.returncode == 0, out.stdout + out.stderr
  finished = sum(v in st.FINISHED for v in before.values())
  assert f"{finished} already finished, {3 - finished} to run" in out.stdout
  con = st.open_store(runner.store_path(workdir))
  runs = {r["run_id"].split("-b")[0] + str(r["batch_size"]): r for r in st.runs(con)}
  assert set(runs) == {"ok32", "hugelr32", "bad100000"}
  assert con.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == len(expected)
  assert runs["ok32"]["status"] == "done"
  assert runs["hugelr32"]["status"] == "diverged" and "non-finite" in (runs["hugelr32"]["error"] or "")
  assert runs["bad100000"]["status"] == "failed"
  assert "Error: " in runs["bad100000"]["error"] and "100000" in runs["bad100000"]["error"]
  for rid in expected:  # one row per eval step
    steps = [e["step"] for e in st.evals(con, rid)]
    assert steps == sorted(set(steps))
  assert [e["step"] for e in st.evals(con, runs["ok32"]["run_id"])] == [1, 2, 3]
  con.close()
  with open(os.path.join(runner.run_dir(workdir, killed_run), runner.LOG_FILE), encoding="utf-8") as f:
    assert "Resumed from step" in f.read()
  # 3. The same command again, not retrying failed runs: nothing to do, nothing changes.
  again = subprocess.run(cmd + ["--config.runner.retry_failed=False"], cwd=REPO, env=env, capture_output=True,
                         text=True, timeout=120)
  assert again.returncode == 0 and "3 already finished, 0 to run" in again.stdout, again.stdout + again.stderr
  assert _statuses(workdir) == {r["run_id"]: r["status"] for r in runs.values()}
  # 4. The report, from the workdir alone.
  rep = subprocess.run([sys.executable, "-m", "lamb_lars.study", "report", f"--workdir={workdir}",
                        f"--out={tmp_path / 'report'}"], cwd=REPO, env=env, capture_output=True, text=True,
                       timeout=120)
  assert rep.returncode == 0, rep.stderr
  text = (tmp_path / "report" / "README.md").read_text()
  for heading in ("## Settings", "## Runs", "## Steps to target", "## Accuracy vs batch size", "## Regimes"):
    assert heading in text
  assert "100000" in text  # the failed run's error is listed
  pngs = {f for f in os.listdir(tmp_path / "report") if f.endswith(".png")}
  assert {"accuracy_vs_batch.png", "training_curves.png"} <= pngs
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


STUDY_CONFIGS = ["smoke.py", "mnist_table3.py", "mnist_table3.py:cpu", "mnist_batch_ladder.py",
                 "mnist_batch_ladder.py:cpu", "cifar10_ladder.py", "imagenet_ladder.py"]


@pytest.mark.parametrize("name", STUDY_CONFIGS)
def test_study_configs_expand_and_every_trial_validates(name):
  """Every ready-made study expands, and each trial passes the optimizer and run-plan checks (on 8 devices)."""
  from lamb_lars import optimizers, run_plan
  path, _, arg = name.partition(":")
  spec = importlib.util.spec_from_file_location("study_cfg", os.path.join(REPO, "configs", "studies", path))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  study = module.get_config(arg) if arg else module.get_config()
  trials = sweep.expand(study)
  assert trials and len({t.run_id for t in trials}) == len(trials)
  for t in trials:
    optimizers.validate_config(t.config.optimizer)
    run_plan.make_plan(t.config, num_train=int(study.analysis.num_train), num_devices=8)
  assert study.analysis.baseline_batch in {t.batch_size for t in trials}
