"""Test set-up: 8 fake CPU devices (set before JAX is imported) and cheap compilation."""
import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def pytest_configure(config):
  """``@pytest.mark.slow``: a test over 20 s (a subprocess run, a notebook); ``-m "not slow"`` is the fast tier."""
  config.addinivalue_line("markers", "slow: takes over 20 s (a subprocess run, a notebook); -m 'not slow' skips it")
