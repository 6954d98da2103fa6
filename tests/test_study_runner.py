"""The study runner end to end on a tiny synthetic study: the search prunes, a huge LR is recorded as diverged, a bad
trial as failed; a trial killed with SIGKILL resumes from its checkpoint; the runner killed with SIGKILL and
restarted ends with every trial recorded exactly once (pruned ones included) and the search rebuilt from its log;
the report is written from the workdir alone; a snapshot of the killed study (only the running trial's newest
checkpoint kept), resumed in a copy, ends with the same results (``study snapshot``). Plus one sentence for a bad
study config on the command line."""

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
import pytest

from lamb_lars.common import code_state
from lamb_lars.configs.studies import smoke
from lamb_lars.study.running import runner, sections, snapshot as snap, store as st, sweep, trial_checks
from lamb_lars.study.running.driver import trial_env
from lamb_lars.study.running import workdir as wd
from lamb_lars.study.records import FINISHED

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Compiled programs are content-addressed: sharing them across tests and sessions only saves time.
JAX_CACHE = os.path.join(tempfile.gettempdir(), "lamb_lars_study_test_jax_cache")

# A baseline, a searched cell of 4 (ASHA at epoch 1), an absurd LR (diverges) and a dataset that is not on this
# machine (the trial fails with the data error). Evals and checkpoints every epoch of 3.
TINY_STUDY = f"""
from lamb_lars.configs.studies import smoke

def get_config():
  c = smoke.get_config()
  c.sweeps = (
      dict(name="base", role="baseline", fixed={{"batch_size": 32}}),
      dict(name="tuned", role="technique", technique="tuned", fixed={{"batch_size": 64}},
           search={{"optimizer.learning_rate": ("log", 0.005, 0.5)}}, num_trials=4, seed=1),
      dict(name="hugelr", fixed={{"batch_size": 32, "optimizer.learning_rate": 1e12}}),
      dict(name="bad", fixed={{"batch_size": 32, "dataset": "cifar10", "data_dir": "/nonexistent/tfds"}}),
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
  con = st.open_store(wd.store_path(workdir))
  try:
    return {r["run_id"]: r["status"] for r in st.runs(con)}
  finally:
    con.close()


def _midway_run(workdir: str, exclude=()) -> str | None:
  """A run with an eval row on disk and a finished checkpoint, not done (killing it now tests the resume)."""
  runs_dir = os.path.join(workdir, "runs")
  for rid in sorted(os.listdir(runs_dir)) if os.path.isdir(runs_dir) else ():
    d = os.path.join(runs_dir, rid)
    ckpts = os.path.join(d, "checkpoints")
    has_ckpt = os.path.isdir(ckpts) and any(n.isdigit() for n in os.listdir(ckpts))
    metrics = os.path.join(d, "metrics.jsonl")
    if (
      rid not in exclude
      and has_ckpt
      and os.path.exists(metrics)
      and os.path.getsize(metrics)
      and not os.path.exists(os.path.join(d, "result.json"))
    ):
      return rid
  return None


def _trial_pid(run_dir: str) -> int | None:
  for pid in os.listdir("/proc"):
    if pid.isdigit():
      try:
        cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
      except OSError:
        continue
      if b"lamb_lars.study.running.run_one" in cmd and run_dir.encode() in cmd:
        return int(pid)
  return None


def _wait_for(pred, proc, timeout=180):
  deadline = time.monotonic() + timeout
  while time.monotonic() < deadline and proc.poll() is None:
    got = pred()
    if got:
      return got
    time.sleep(0.05)
  return None


@pytest.mark.slow
def test_trials_share_a_persistent_compilation_cache_per_host(tmp_path):
  """The runner points every trial at <workdir>/jax_cache (unless told not to), and a trial process then writes
  its compiled programs under <workdir>/jax_cache/<host>, where the next trial finds them."""
  import socket
  import types
  from lamb_lars.study.running import run_one

  cfg = {**sections.section(smoke.get_config(), "runner"), "env": {"A": "1"}}
  spec = types.SimpleNamespace(env={"B": "2"})
  assert trial_env(cfg, spec, str(tmp_path)) == {"A": "1", "B": "2", run_one.CACHE_ENV: str(tmp_path / "jax_cache")}
  assert trial_env({**cfg, "compilation_cache": False}, spec, str(tmp_path)) == {"A": "1", "B": "2"}
  env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
  env.update(
    {
      run_one.CACHE_ENV: str(tmp_path / "jax_cache"),
      "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
      "PYTHONPATH": REPO,
    }
  )
  code = (
    "from lamb_lars.study.running import run_one; p = run_one.enable_compilation_cache(); import jax; "
    "jax.jit(lambda x: x * 3 + 1)(2.0).block_until_ready(); print(p)"
  )
  out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
  assert out.returncode == 0, out.stderr
  host_dir = tmp_path / "jax_cache" / socket.gethostname()
  assert out.stdout.strip() == str(host_dir) and any(host_dir.iterdir())


def test_changed_study_in_same_workdir_is_refused(tmp_path):
  c = smoke.get_config()
  con = st.open_store(tmp_path / "s.sqlite")
  runner.register(con, c, sweep.expand(c))
  changed = smoke.get_config()
  changed.base.num_epochs = 4.0
  with pytest.raises(ValueError, match="different config"):
    runner.register(con, changed, sweep.expand(changed))


@pytest.mark.slow
def test_study_survives_sigkill_of_a_trial_and_of_the_runner(tmp_path):
  config_path = tmp_path / "tiny_study.py"
  config_path.write_text(TINY_STUDY)
  workdir = str(tmp_path / "study")
  expected = {t.run_id for t in sweep.expand(_load_study(str(config_path)))}
  cmd = [sys.executable, "-m", "lamb_lars.study", "run", f"--config={config_path}", f"--workdir={workdir}"]
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}  # one CPU device per trial: faster here
  proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  # 1. SIGKILL a trial mid-way: the runner records it, resumes it from its checkpoint and goes on.
  first = _wait_for(lambda: _midway_run(workdir), proc)
  assert first, "no trial got mid-way"
  pid = _trial_pid(wd.run_dir(workdir, first))
  assert pid, "the trial's process was not found"
  os.kill(pid, signal.SIGKILL)
  # 2. SIGKILL the runner while another trial is mid-way.
  second = _wait_for(lambda: _midway_run(workdir, exclude=(first,)), proc)
  assert proc.poll() is None and second, "the runner ended before it could be killed:\n" + proc.stdout.read()
  os.kill(proc.pid, signal.SIGKILL)
  proc.wait()
  out1 = proc.stdout.read()
  proc.stdout.close()
  assert f"{first}: trial killed by signal 9; resuming it from its checkpoint" in out1, out1
  before = _statuses(workdir)
  assert set(before) == expected and before[second] == "running"
  # 2b. A snapshot of the killed study without its checkpoints (test_study_snapshot.py; resumed in step 6).
  snapshot = _snapshot_killed_study(workdir, second, tmp_path, env)
  # 3. Restart: the study finishes; every trial recorded exactly once; the killed ones resumed.
  out = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
  assert out.returncode == 1 and "1 trial(s) failed" in out.stderr, out.stdout + out.stderr  # the 'bad' trial
  finished = sum(v in FINISHED for v in before.values())
  assert f"{finished} already finished" in out.stdout
  con = st.open_store(wd.store_path(workdir))
  runs = {r["run_id"]: r for r in st.runs(con)}
  assert set(runs) == expected and con.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == len(expected)
  by_sweep = lambda name: [r for r in runs.values() if r["run_id"].startswith(name + "-")]
  assert [r["status"] for r in by_sweep("base")] == ["done"]
  (hugelr,) = by_sweep("hugelr")
  assert hugelr["status"] == "diverged" and "non-finite" in (hugelr["error"] or "")
  (bad,) = by_sweep("bad")
  assert bad["status"] == "failed" and "cifar10" in bad["error"]
  tuned = by_sweep("tuned")
  assert {r["status"] for r in tuned} <= {"done", "pruned"} and any(r["status"] == "pruned" for r in tuned)
  decisions = st.decisions(con)
  assert {d["run_id"] for d in decisions if d["prune"]} == {r["run_id"] for r in tuned if r["status"] == "pruned"}
  for rid in expected:  # one row per eval step
    steps = [e["step"] for e in st.evals(con, rid)]
    assert steps == sorted(set(steps))
  con.close()
  for rid in (first, second):
    if runs[rid]["status"] == "done":
      with open(os.path.join(wd.run_dir(workdir, rid), "log.txt"), encoding="utf-8") as f:
        assert "Resumed from step" in f.read(), rid
  # 4. The same command again, not retrying failed runs: nothing to do, nothing changes.
  again = subprocess.run(
    cmd + ["--config.runner.retry_failed=False"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
  )
  assert again.returncode == 1 and "0 to run" in again.stdout, again.stdout + again.stderr  # 'bad' still failed
  assert _statuses(workdir) == {rid: r["status"] for rid, r in runs.items()}
  # 5. The report and the raw results, from the workdir alone.
  rep = subprocess.run(
    [sys.executable, "-m", "lamb_lars.study", "report", f"--workdir={workdir}", f"--out={tmp_path / 'report'}"],
    cwd=REPO,
    env=env,
    capture_output=True,
    text=True,
    timeout=120,
  )
  assert rep.returncode == 0, rep.stderr
  text = (tmp_path / "report" / "README.md").read_text()
  for heading in ("## Settings", "## Trials", "## Baseline", "## Steps to target", "## Accuracy vs batch size"):
    assert heading in text
  assert {"runs.csv", "evals.csv", "accuracy_vs_batch.png"} <= set(os.listdir(tmp_path / "report"))
  # 6. The snapshot taken in step 2b, resumed in a copy: the same results as the resume from checkpoints.
  _resume_snapshot_gives_the_same_results(snapshot, workdir, second, cmd, env)


def _evals(workdir: str) -> dict:
  """Every trial's status and its eval rows."""
  con = st.open_store(wd.store_path(workdir))
  try:
    keys = ("step", "train_loss", "eval_loss", "eval_accuracy", "validation_accuracy")
    return {
      r["run_id"]: (r["status"], [tuple(e.get(k) for k in keys) for e in st.evals(con, r["run_id"])])
      for r in st.runs(con)
    }
  finally:
    con.close()


def _snapshot_killed_study(workdir: str, midway: str, tmp_path, env: dict) -> str:
  """``study snapshot`` of a study whose runner was killed while ``midway`` ran: the store, the config, the commands,
  each trial's run files and ``midway``'s newest finished checkpoint, without the other checkpoints, tensorboard
  files or locks; returns a copy of it."""
  out_dir = tmp_path / "snap"
  out = subprocess.run(
    [sys.executable, "-m", "lamb_lars.study", "snapshot", f"--workdir={workdir}", f"--out={out_dir}"],
    cwd=REPO,
    env=env,
    capture_output=True,
    text=True,
    timeout=120,
  )
  assert out.returncode == 0 and "snapshot of" in out.stdout, out.stdout + out.stderr
  files = {os.path.relpath(os.path.join(d, f), out_dir) for d, _, fs in os.walk(out_dir) for f in fs}
  assert {wd.STORE_FILE, wd.STUDY_CONFIG_FILE, wd.COMMANDS_FILE, snap.SNAPSHOT_FILE} <= files
  record = json.loads((out_dir / snap.SNAPSHOT_FILE).read_text())
  step = record["kept_running_checkpoints"][midway]  # the killed trial's newest finished checkpoint, and no other
  kept = {f for f in files if "/checkpoints" in f}
  assert kept and all(f.startswith(f"runs/{midway}/checkpoints/{step}/") for f in kept), kept
  assert not any("/tensorboard/" in f or f.endswith(".lock") for f in files), files
  assert f"runs/{midway}/metrics.jsonl" in files
  assert record["trials"].get("running", 0) >= 1 and sum(record["trials"].values()) == len(_evals(workdir))
  assert record["code"] == code_state.code_state(REPO)  # the checkout the study ran from
  copy = str(tmp_path / "copy")
  subprocess.run(["cp", "-r", str(out_dir), copy], check=True)
  return copy


def _resume_snapshot_gives_the_same_results(copy: str, workdir: str, midway: str, cmd: list, env: dict) -> None:
  """The copy resumes its running trial from the kept checkpoint, trains its pending ones, and ends with every trial
  recorded once and the eval rows of the study resumed in its own workdir, bit for bit."""
  done = subprocess.run(
    cmd[:-1] + [f"--workdir={copy}"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
  )
  assert done.returncode == 1 and "1 trial(s) failed" in done.stderr, done.stdout + done.stderr  # the 'bad' trial
  original, resumed = _evals(workdir), _evals(copy)
  assert set(original) == set(resumed)
  assert {rid: s for rid, (s, _) in resumed.items() if s not in ("done", "pruned", "diverged")} == {
    rid: "failed" for rid in resumed if rid.startswith("bad-")
  }
  for rid, (status, rows) in resumed.items():
    steps = [row[0] for row in rows]
    assert steps == sorted(set(steps)), rid  # one row per eval step, even for a trial restarted from step 0
    n = min(len(rows), len(original[rid][1]))  # a trial may be pruned at another rung in the other resume
    assert rows[:n] == original[rid][1][:n], rid  # the same numbers, bit for bit
  step = json.loads(open(os.path.join(copy, snap.SNAPSHOT_FILE)).read())["kept_running_checkpoints"][midway]
  with open(os.path.join(wd.run_dir(copy, midway), "log.txt"), encoding="utf-8") as f:
    assert f"Resumed from step {step}" in f.read()  # where the snapshot's checkpoint left it, not from step 0


@pytest.mark.slow
@pytest.mark.e2e
def test_cli_bad_study_config_is_one_sentence(tmp_path):
  base = [
    sys.executable,
    "-m",
    "lamb_lars.study",
    "run",
    "--config=lamb_lars/configs/studies/smoke.py",
    f"--workdir={tmp_path / 'w'}",
  ]
  out = subprocess.run(
    base + ["--dry_run", "--nocalibrate", "--config.base.num_epochs=2"],
    cwd=REPO,
    capture_output=True,
    text=True,
    timeout=120,
  )
  lines = out.stdout.strip().splitlines()
  assert out.returncode == 0 and len(lines) == 8 + 3, out.stdout + out.stderr  # the trials, the plan (3 lines)
  assert lines[8].startswith("plan: 8 trials + 0 replicates") and "calibration skipped" in lines[-1]
  typo = subprocess.run(base + ["--config.base.num_epocs=2"], cwd=REPO, capture_output=True, text=True, timeout=120)
  assert typo.returncode != 0 and "num_epocs" in typo.stderr
  tech = subprocess.run(
    base + ["--config.analysis.techniques=('tuned','lamb')"], cwd=REPO, capture_output=True, text=True, timeout=120
  )
  assert tech.returncode == 2 and tech.stderr.strip().count("\n") == 0, tech.stderr
  assert tech.stderr.startswith("error: analysis.techniques names ['lamb']")
  assert not os.path.exists(tmp_path / "w" / "study.sqlite")  # nothing ran


STUDY_CONFIGS = ["smoke.py", "mnist_table3.py", "mnist_batch_ladder.py", "cifar10_ladder.py", "imagenet_ladder.py"]


@pytest.mark.parametrize("name", STUDY_CONFIGS)
def test_study_configs_expand_and_every_trial_validates(name):
  """Every ready-made study expands, and each trial passes the library's checks before compiling."""
  from lamb_lars.optim import optimizer_config
  from lamb_lars.train import run_plan

  spec = importlib.util.spec_from_file_location(
    "study_cfg", os.path.join(REPO, "lamb_lars", "configs", "studies", name)
  )
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  study = module.get_config()
  trials = sweep.expand(study)
  assert trials and len({t.run_id for t in trials}) == len(trials)
  for t in trials:
    optimizer_config.validate_config(t.config.optimizer)
    n = int(study.analysis.num_train)
    run_plan.make_plan(
      t.config, num_train=n, num_devices=trial_checks.trial_devices(t.config, {**study.runner.env, **t.env})
    )
  assert sum(t.role == "baseline" for t in trials) <= 1


def test_runner_settings_have_one_source_the_study_config(monkeypatch):
  """A study that leaves out a settings section gets lamb_lars/configs/studies/common.py's: the runner code keeps no
  defaults of its own (it once said 1 worker where the study configs said 2)."""
  from lamb_lars.configs.studies import common

  study = smoke.get_config()
  with study.unlocked():
    del study["runner"]
    del study["search"]
  monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
  assert runner.make_executor(study).slots == common.runner().num_workers == 2
  assert sections.section(study, "runner") == common.runner().to_dict()
  assert sections.section(study, "search")["rung_after_warmup"] is True
  with pytest.raises(ValueError, match=r"study.search has unknown keys \['typo'\]"):
    sections.section(ml_collections.ConfigDict({"search": {"typo": 1}}), "search")


def _crash_in_trainer(tmp_path, monkeypatch, exc):
  from lamb_lars.study.running import run_one
  from lamb_lars.train import trainer

  rdir = tmp_path / "run"
  rdir.mkdir()
  (rdir / "trial_config.json").write_text("{}")

  def train_and_evaluate(config, workdir, hparams=None):
    raise exc

  monkeypatch.setattr(trainer, "train_and_evaluate", train_and_evaluate)
  assert run_one.main([str(rdir)]) == 1
  return (rdir / "error.txt").read_text()


@pytest.mark.slow
@pytest.mark.e2e
def test_a_trial_config_error_is_one_sentence(tmp_path, monkeypatch, capsys):
  from lamb_lars.train.run_plan import ConfigError

  text = _crash_in_trainer(tmp_path, monkeypatch, ConfigError("config.batch_size=3 must be even."))
  assert text == "ConfigError: config.batch_size=3 must be even.\n"
  assert "Traceback" not in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.e2e
def test_a_trial_bug_keeps_its_traceback_even_as_a_value_error(tmp_path, monkeypatch, capsys):
  """A ValueError inside training is a bug, not a config mistake: error.txt (the store's error) and the run's log
  keep the traceback."""
  text = _crash_in_trainer(tmp_path, monkeypatch, ValueError("operands could not be broadcast"))
  assert text.startswith("Traceback") and "train_and_evaluate" in text
  assert text.strip().endswith("ValueError: operands could not be broadcast")
  assert "Traceback" in capsys.readouterr().out
