"""Two processes × 4 CPU devices (jax.distributed on localhost, gloo) train exactly like one process × 8 devices."""

import json
import os
import socket
import subprocess
import sys
import tempfile

import numpy as np
import pytest
import orbax.checkpoint as ocp

from lamb_lars import input_pipeline
from lamb_lars.configs import mnist_lenet

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA_DIR = os.environ.get("LAMB_LARS_TEST_DATA_DIR") or os.path.join(tempfile.gettempdir(), "lamb_lars_test_tfds")


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


def _cmd(workdir, *extra):
  return [
    sys.executable,
    "train.py",
    "--config=lamb_lars/configs/mnist_lenet.py",
    f"--workdir={workdir}",
    f"--config.data_dir={DATA_DIR}",
    "--config.batch_size=256",
    "--config.num_train_steps=6",
    "--config.eval_every_steps=3",
    "--config.checkpoint_every_steps=3",
    "--config.progress=False",
    "--config.eval_batch_size=5000",
    "--config.bn.group_devices=2",
    *extra,
  ]


def _env(devices):
  return {**os.environ, "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}", "JAX_PLATFORMS": "cpu"}


def _params(workdir):
  """The saved params, restored onto this process's first device whatever topology saved them."""
  import jax

  path = os.path.join(workdir, "checkpoints", "6", "state")
  ckptr = ocp.StandardCheckpointer()
  meta = ckptr.metadata(path).item_metadata
  one = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  target = jax.tree.map(lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=one), meta)
  return ckptr.restore(path, target)["params"]


@pytest.mark.slow
@pytest.mark.e2e
def test_two_processes_equal_one(tmp_path):
  cfg = mnist_lenet.get_config()
  cfg.data_dir = DATA_DIR
  input_pipeline.prepare(cfg)
  port = _free_port()
  procs = [
    subprocess.Popen(
      _cmd(
        tmp_path / "two",
        "--config.distributed.enabled=yes",
        f"--config.distributed.coordinator_address=localhost:{port}",
        "--config.distributed.num_processes=2",
        f"--config.distributed.process_id={i}",
      ),
      cwd=ROOT,
      env=_env(4),
      stdout=subprocess.PIPE,
      stderr=subprocess.STDOUT,
      text=True,
    )
    for i in range(2)
  ]
  subprocess.run(_cmd(tmp_path / "one"), cwd=ROOT, env=_env(8), check=True, capture_output=True, timeout=600)
  for p in procs:
    out, _ = p.communicate(timeout=600)
    assert p.returncode == 0, out[-3000:]
  rows = {k: [json.loads(l) for l in open(tmp_path / k / "metrics.jsonl")] for k in ("one", "two")}
  assert [r["step"] for r in rows["two"]] == [3, 6]
  for a, b in zip(rows["two"], rows["one"]):
    for key in ("train_loss", "eval_loss", "eval_accuracy", "grad_norm", "noise_scale"):
      np.testing.assert_allclose(a[key], b[key], rtol=1e-5)
    assert a["eval_examples"] == b["eval_examples"] == 10000
  p1, p2 = _params(tmp_path / "one"), _params(tmp_path / "two")
  for k, a in p1.items():
    for name in a:
      np.testing.assert_allclose(np.asarray(p2[k][name]), np.asarray(a[name]), rtol=1e-5, atol=1e-7)
