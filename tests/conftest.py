"""Test set-up: 8 fake CPU devices (set before JAX is imported) and cheap compilation.

Cheap compilation: one persistent XLA compilation cache for the whole test session (every xdist worker and every
subprocess a test starts: train.py, study trials), so a program that many tests compile — the LeNet-5 train step of
the small MNIST runs — is compiled once. A cached executable is the same code, so results stay bit-identical (the
optimizers against optax, a resumed run against an uninterrupted one). ``LAMB_LARS_TEST_JAX_CACHE=0`` turns it off.
And flax's setting (``jax_disable_most_optimizations``, as in its train_test.py) in the pytest processes: a test
that compiles in-process trains for a few steps, so compiling dominates (the fast tier took 120 s with it against
152 s without, BENCHMARKS §1). The processes a test starts (train.py, study trials) compile as a user's run does and
share the persistent cache with one another, except in three tests whose trials run a few steps each and are
compared only with one another (test_lr_table, test_notebook, the branching end-to-end test): they set
``JAX_DISABLE_MOST_OPTIMIZATIONS=1`` for their subprocesses, which cut their CPU time by a third (BENCHMARKS §1);
tried on the runner, multihost, batch-schedule and digits tests, it saved nothing there. A test that trains long
in-process is marked ``xla_opt`` and compiles with the optimisations; so does every test under
``LAMB_LARS_TEST_XLA_OPT=1``. The ``unoptimized_xla`` fixture keeps the setting for a test whatever the session's.

Tiers (markers in pyproject.toml): ``pytest -m "not slow"`` is the fast tier to run while working; ``slow`` marks a
test that starts a subprocess, trains end to end or takes more than about 5 s; ``e2e``, ``ray`` and ``gcs`` name what
a slow test needs.
"""

import os
import shutil
import tempfile

import pytest

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# The tests' Ray clusters are private and on localhost. Ray 2.60 turns on token authentication for `ray start` and a
# driver whenever ~/.ray/auth_token exists, and any local `ray.init()` writes that file: after one, the second node
# of a test cluster failed to join ("InvalidAuthToken", 2026-12-03). Off for the tests, whatever ~ holds.
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

# Set in the first process (pytest itself); xdist workers and the tests' subprocesses inherit it.
_CACHE = os.path.join(tempfile.gettempdir(), f"lamb_lars_test_jax_cache_{os.getpid()}")
if os.environ.get("LAMB_LARS_TEST_JAX_CACHE", "1") != "0" and "JAX_COMPILATION_CACHE_DIR" not in os.environ:
  os.environ["JAX_COMPILATION_CACHE_DIR"] = _CACHE
  os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.5")  # the train steps, not every jnp op
_CHEAP_COMPILE = os.environ.get("LAMB_LARS_TEST_XLA_OPT", "0") != "1"


@pytest.fixture
def unoptimized_xla():
  """flax's cheap compilation (``jax_disable_most_optimizations``, as in its train_test.py) for a test that compares
  programs it compiles in this process: both sides compile the same way, several times faster. Not for a test that
  measures a compiled program (its memory) or compares with another process's run."""
  import jax  # pylint: disable=import-outside-toplevel

  old = jax.config.read("jax_disable_most_optimizations")
  jax.config.update("jax_disable_most_optimizations", True)
  yield
  jax.config.update("jax_disable_most_optimizations", old)


@pytest.fixture(autouse=True)
def _xla_opt(request):
  """A test marked ``xla_opt`` compiles in this process with XLA's optimisations: it trains long enough that the
  optimised program's run time saves more than its compile time costs."""
  if request.node.get_closest_marker("xla_opt") is None or not _CHEAP_COMPILE:
    yield
    return
  import jax  # pylint: disable=import-outside-toplevel

  old = jax.config.read("jax_disable_most_optimizations")
  jax.config.update("jax_disable_most_optimizations", False)
  yield
  jax.config.update("jax_disable_most_optimizations", old)


def pytest_sessionfinish(session, exitstatus):
  """The controller (not an xdist worker) removes the session's cache."""
  if not hasattr(session.config, "workerinput") and os.environ.get("JAX_COMPILATION_CACHE_DIR") == _CACHE:
    shutil.rmtree(_CACHE, ignore_errors=True)


def pytest_configure(config):
  if _CHEAP_COMPILE:  # this process only (pytest, each xdist worker); the subprocesses tests start are unaffected
    import jax  # pylint: disable=import-outside-toplevel

    jax.config.update("jax_disable_most_optimizations", True)
  config.addinivalue_line(
    "markers",
    "gpu: needs a GPU backend (skipped elsewhere); benchmarks/device_check.sh runs "
    "`pytest -m gpu` on the accelerator machine",
  )


def pytest_collection_modifyitems(config, items):
  """Under pytest-xdist, slow tests first; skip gpu-marked tests unless JAX's default backend is a GPU (JAX is
  imported only when such a test exists).

  Slow first: xdist hands the tests out in collection order (``--dist loadgroup``: groups first, the largest
  first), so the long subprocess tests start early and the run ends on the fast tier's tests of a few seconds,
  not on one worker finishing a two-minute test while the other waits. The order within each tier is kept.
  Without xdist (``-n 0``) the order is pytest's own.
  """
  if hasattr(config, "workerinput"):
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable
  gpu_items = [item for item in items if item.get_closest_marker("gpu")]
  if not gpu_items:
    return
  import jax  # pylint: disable=import-outside-toplevel

  if jax.default_backend() == "gpu":
    return
  import pytest  # pylint: disable=import-outside-toplevel

  skip = pytest.mark.skip(reason=f"needs a GPU (JAX backend is {jax.default_backend()!r})")
  for item in gpu_items:
    item.add_marker(skip)
