"""The local executor's worker environment and CPU pinning, on a real child process: a stand-in for Python writes
its environment into the run dir instead of training."""

import json
import os
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
