"""Test set-up: 8 fake CPU devices (set before JAX is imported) and cheap compilation."""
import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def pytest_configure(config):
  config.addinivalue_line("markers", "gpu: needs a GPU backend (skipped elsewhere); benchmarks/device_check.sh runs "
                                     "`pytest -m gpu` on the accelerator machine")
  config.addinivalue_line("markers", "slow: takes more than ~20 s on the 2-core CPU")


def pytest_collection_modifyitems(config, items):
  """Skip gpu-marked tests unless JAX's default backend is a GPU (JAX is imported only when such a test exists)."""
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
