"""The local executor's worker environment and CPU pinning, on a real child process: a stand-in for Python writes
its environment into the run dir instead of training."""

import json
import os
import subprocess
import sys
import time

import pytest

from lamb_lars.study.running.executor import LocalExecutor

FAKE_PYTHON = f"""#!{sys.executable}
import json, os, sys
run_dir = sys.argv[-1]
with open(os.path.join(run_dir, "env.json"), "w") as f:
  cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
  json.dump({{"env": dict(os.environ), "cpus": cpus}}, f)
"""


def _run(executor: LocalExecutor, run_dir, env=None) -> dict:
  run_dir.mkdir()
  handle = executor.submit("r", str(run_dir), env or {})
  deadline = time.time() + 60
  while handle.poll() is None:
    assert time.time() < deadline
    time.sleep(0.05)
  return json.loads((run_dir / "env.json").read_text())


@pytest.fixture
def fake_python(tmp_path, monkeypatch):
  for k in ("XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_MEM_FRACTION"):
    monkeypatch.delenv(k, raising=False)
  path = tmp_path / "python"
  path.write_text(FAKE_PYTHON)
  path.chmod(0o755)
  return str(path)


@pytest.mark.slow
@pytest.mark.e2e
def test_several_workers_do_not_preallocate_the_gpu(fake_python, tmp_path):
  """Two workers each preallocating 75% of one GPU cannot both start: with several slots, trials get
  XLA_PYTHON_CLIENT_PREALLOCATE=false; one slot keeps JAX's default; a study's own setting wins."""
  got = _run(LocalExecutor(slots=2, python=fake_python), tmp_path / "two")["env"]
  assert got["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
  one = _run(LocalExecutor(slots=1, python=fake_python), tmp_path / "one")
  assert "XLA_PYTHON_CLIENT_PREALLOCATE" not in one["env"]
  own = _run(LocalExecutor(slots=2, python=fake_python), tmp_path / "own", {"XLA_PYTHON_CLIENT_MEM_FRACTION": ".4"})
  assert own["env"]["XLA_PYTHON_CLIENT_MEM_FRACTION"] == ".4" and "XLA_PYTHON_CLIENT_PREALLOCATE" not in own["env"]


@pytest.mark.slow
@pytest.mark.e2e
def test_pinning_without_sched_setaffinity_runs_unpinned(fake_python, tmp_path, monkeypatch):
  """On a platform without ``os.sched_setaffinity`` (macOS) a pinned study runs its trials unpinned instead of
  failing in the child's start-up hook."""
  ex = LocalExecutor(slots=1, cpus_per_trial=1, python=fake_python)
  assert ex.affinity(0, {}) == {0}
  monkeypatch.delattr(os, "sched_setaffinity", raising=False)
  assert ex.affinity(0, {}) is None
  assert _run(ex, tmp_path / "mac")["env"]  # the trial started


@pytest.mark.slow
@pytest.mark.e2e
def test_both_executors_start_trials_through_one_helper():
  """The trial command and the die-with-parent spawn live in executor.spawn_trial; Ray's task body calls it, and
  ``exclusive`` is part of the Executor protocol (the runner asks every executor)."""
  import inspect
  from lamb_lars.study.running import executor, ray_executor

  source = inspect.getsource(ray_executor)
  assert "spawn_trial(" in source and "Popen(" not in source and '"-m"' not in source
  assert "exclusive" in executor.Executor.__dict__
  assert not LocalExecutor(slots=1).exclusive({})


@pytest.mark.slow
@pytest.mark.e2e
def test_pinning_counts_within_the_drivers_own_cpus(fake_python, tmp_path):
  """A study started under ``taskset -c 1`` (beside another job on CPU 0) pins its one worker to CPU 1: slots
  take their CPUs from the driver's affinity, not from CPU 0 of the machine."""
  if not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2:
    pytest.skip("needs CPU pinning and 2 CPUs")
  before = os.sched_getaffinity(0)
  last = max(before)
  os.sched_setaffinity(0, {last})
  try:
    ex = LocalExecutor(slots=1, cpus_per_trial=1, python=fake_python)
    assert ex.affinity(0, {}) == {last}
    assert _run(ex, tmp_path / "pinned")["cpus"] == [last]
    with pytest.raises(ValueError, match="need 2 CPUs; this machine has 1"):
      LocalExecutor(slots=2, cpus_per_trial=1, python=fake_python)
  finally:
    os.sched_setaffinity(0, before)


SPAWN_AFTER_JAX = """
import os, sys, tempfile, warnings
warnings.simplefilter("error")  # JAX's at-fork warning would be an error here
import jax
jax.devices()  # JAX's runtime threads have started, as in a driver that traced a user's model
from lamb_lars.study.running import executor
d = tempfile.mkdtemp()
cpus = set(sorted(os.sched_getaffinity(0))[-1:]) if hasattr(os, "sched_setaffinity") else None
before = os.sched_getaffinity(0) if cpus else None
with open(os.path.join(d, "log.txt"), "w") as log:
  p = executor.spawn_trial(d, log, python=sys.argv[1], cpus=cpus)
assert p.wait() == 0
assert before is None or os.sched_getaffinity(0) == before  # the spawning thread's own affinity is restored
with open(os.path.join(d, "env.json")) as f:
  print(f.read())
"""


@pytest.mark.slow
def test_spawning_a_trial_after_jax_started_does_not_fork_python(fake_python, tmp_path):
  """A driver whose JAX runtime runs threads starts trials without JAX's ``os.fork() was called ... deadlock``
  warning (no Python runs between fork and exec), and the trial is still pinned and knows its parent."""
  repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  env = {**os.environ, "PYTHONPATH": repo}
  out = subprocess.run(
    [sys.executable, "-c", SPAWN_AFTER_JAX, fake_python], capture_output=True, text=True, env=env, timeout=120
  )
  assert out.returncode == 0, out.stderr
  assert "fork" not in out.stderr and "Warning" not in out.stderr, out.stderr
  got = json.loads(out.stdout)
  if hasattr(os, "sched_setaffinity"):
    assert got["cpus"] == sorted(os.sched_getaffinity(0))[-1:]
  assert got["env"]["LAMB_LARS_TRIAL_PARENT"].isdigit()


ORPHAN = """
import os, sys, time
sys.path.insert(0, {repo!r})
from lamb_lars.study.running.executor import die_with_parent
die_with_parent()
with open(os.path.join(sys.argv[-1], "pid"), "w") as f:
  f.write(str(os.getpid()))
time.sleep(60)
"""

DRIVER = """
import os, sys, time
from lamb_lars.study.running import executor
with open(os.path.join(sys.argv[2], "log.txt"), "w") as log:
  executor.spawn_trial(sys.argv[2], log, python=sys.argv[1])
time.sleep(60)
"""


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_trial_dies_with_its_driver(tmp_path):
  """``kill -9`` of the process that started a trial kills the trial too (it asked for ``PR_SET_PDEATHSIG``
  itself, first thing): no orphan trainer keeps writing into the study."""
  repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  child = tmp_path / "python"
  child.write_text(f"#!{sys.executable}\n" + ORPHAN.format(repo=repo))
  child.chmod(0o755)
  run_dir = tmp_path / "run"
  run_dir.mkdir()
  driver = subprocess.Popen(
    [sys.executable, "-c", DRIVER, str(child), str(run_dir)], env={**os.environ, "PYTHONPATH": repo}
  )
  deadline = time.time() + 60
  while not (run_dir / "pid").exists() or not (run_dir / "pid").read_text():
    assert time.time() < deadline and driver.poll() is None
    time.sleep(0.05)
  pid = int((run_dir / "pid").read_text())
  driver.kill()
  driver.wait()
  deadline = time.time() + 10
  while _alive(pid):
    assert time.time() < deadline, "the trial outlived its driver"
    time.sleep(0.05)


def _alive(pid: int) -> bool:
  try:
    with open(f"/proc/{pid}/stat") as f:
      return f.read().split(")")[-1].split()[0] != "Z"  # a zombie has ended
  except FileNotFoundError:
    return False
