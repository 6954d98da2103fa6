"""Test set-up: 8 fake CPU devices (set before JAX is imported) and cheap compilation."""
import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def pytest_configure(config):
  config.addinivalue_line("markers", "slow: a test that runs for more than ~20 s (deselect with -m 'not slow')")
