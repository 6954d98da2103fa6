"""Workdirs on Google Cloud Storage, for real, against a local GCS emulator (``gcp-storage-emulator``, which speaks
the GCS JSON API) that this module starts and stops.

Every layer is pointed at the emulator through its documented endpoint override, in the environment, so that the
trainer and trial subprocesses inherit it: gcsfs (under etils.epath: config.json, metrics.jsonl, result.json, the
study files and the published report) and google-cloud-storage (under tensorboardX) read ``STORAGE_EMULATOR_HOST``;
TensorStore (under orbax: the checkpoints) reads ``TENSORSTORE_GCS_HTTP_URL`` and takes its bearer token from
``GOOGLE_AUTH_TOKEN_FOR_TESTING`` (the emulator checks none). One layer cannot be pointed at it: gcsfs's gRPC
storage-control client, which asks each bucket whether it is zonal, dials the emulator's address over TLS and
retries for 60 s per call (the emulator speaks HTTP/JSON only), so ``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false``
turns that optional layer off. The server is tests/gcs_emulator.py (why it adds a header: its docstring).

A short training run, a ``kill -9`` and resume, and a tiny study with its report all run on ``gs://bucket/...``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

pytest.importorskip("gcp_storage_emulator", reason="the GCS emulator is not installed (pip install -e .[test])")
pytest.importorskip("gcsfs", reason="gcsfs is not installed (pip install -e .[gcs])")

from lamb_lars.common import io_utils  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUCKET = "bucket"
# one emulator for the module's tests; every test here starts it (a subprocess)
pytestmark = [pytest.mark.xdist_group("gcs"), pytest.mark.slow, pytest.mark.gcs, pytest.mark.e2e]


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


@pytest.fixture(scope="module")
def gcs(tmp_path_factory):
  """The emulator on a free localhost port, and this process's environment pointed at it (restored after)."""
  port = _free_port()
  url = f"http://127.0.0.1:{port}"
  proc = subprocess.Popen(
    [sys.executable, os.path.join(ROOT, "tests", "gcs_emulator.py"), str(port), BUCKET],
    stdout=subprocess.DEVNULL,
    stderr=subprocess.DEVNULL,
  )
  deadline = time.time() + 60
  while True:
    try:
      socket.create_connection(("127.0.0.1", port), timeout=1).close()
      break
    except OSError:
      if time.time() > deadline or proc.poll() is not None:
        proc.kill()
        pytest.fail("the GCS emulator did not start")
      time.sleep(0.1)
  env = {
    "STORAGE_EMULATOR_HOST": url,
    "TENSORSTORE_GCS_HTTP_URL": url,
    "GOOGLE_AUTH_TOKEN_FOR_TESTING": "emulator",
    "GOOGLE_CLOUD_PROJECT": "test",
    "FSSPEC_GCS_TOKEN": "anon",
    "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
    io_utils.LOCAL_ROOT_ENV: str(tmp_path_factory.mktemp("local_root")),
  }
  saved = {k: os.environ.get(k) for k in env}
  os.environ.update(env)
  yield env
  for k, v in saved.items():
    if v is None:
      os.environ.pop(k, None)
    else:
      os.environ[k] = v
  proc.kill()
  proc.wait()


def test_run_files_round_trip(gcs):
  """The run-file helpers on gs://: atomic writes, appends (read-add-upload), torn-line-safe reads, listing."""
  d = f"gs://{BUCKET}/io"
  io_utils.makedirs(d)
  assert not io_utils.exists(f"{d}/a.json") and io_utils.read_json(f"{d}/a.json", {}) == {}
  io_utils.write_json_atomic(f"{d}/a.json", {"x": 1})
  assert io_utils.read_json(f"{d}/a.json") == {"x": 1}
  io_utils.append_jsonl(f"{d}/m.jsonl", {"step": 1})
  io_utils.append_jsonl(f"{d}/m.jsonl", {"step": 2})
  io_utils.append_text(f"{d}/m.jsonl", '{"step": 3')  # a torn last line
  assert io_utils.read_jsonl(f"{d}/m.jsonl") == [{"step": 1}, {"step": 2}]
  assert io_utils.listdir(d) == ["a.json", "m.jsonl"]
  io_utils.remove(f"{d}/a.json")
  assert not io_utils.exists(f"{d}/a.json")
  assert not os.path.exists(os.path.join(ROOT, "gs:")), "a URL was treated as a local path"


def test_move_tree_on_gcs_moves_every_object(gcs, tmp_path):
  """A checkpoint folder moved aside on gs:// (quarantine), where a folder rename does not exist: every object
  arrives under its new name with its bytes, none stays behind; locally the same call is one rename."""
  src, dst = f"gs://{BUCKET}/mv/checkpoints/7", f"gs://{BUCKET}/mv/checkpoints_quarantine/7-x"
  blobs = {"_METADATA": b"meta", "state/a.bin": bytes(range(256)), "state/b/c.bin": b"\x00" * 1000}
  for name, data in blobs.items():
    io_utils.write_bytes_atomic(f"{src}/{name}", data)
  io_utils.move_tree(src, dst)
  for name, data in blobs.items():
    assert io_utils.read_bytes(f"{dst}/{name}") == data, name
    assert not io_utils.exists(f"{src}/{name}"), name
  assert "7" not in io_utils.listdir(f"gs://{BUCKET}/mv/checkpoints")
  (tmp_path / "a" / "s").mkdir(parents=True)
  (tmp_path / "a" / "s" / "f").write_bytes(b"x")
  io_utils.move_tree(str(tmp_path / "a"), str(tmp_path / "q" / "a-1"))
  assert (tmp_path / "q" / "a-1" / "s" / "f").read_bytes() == b"x" and not (tmp_path / "a").exists()


def _train_cmd(workdir: str) -> list[str]:
  from tests.test_train import DATA_DIR

  return [
    sys.executable,
    os.path.join(ROOT, "train.py"),
    f"--config={ROOT}/lamb_lars/configs/mnist_lenet.py",
    f"--workdir={workdir}",
    f"--config.data_dir={DATA_DIR}",
    "--config.batch_size=256",
    "--config.num_train_steps=30",
    "--config.eval_every_steps=10",
    "--config.checkpoint_every_steps=10",
    "--config.num_devices=1",
    "--config.steps_per_call=1",
    "--config.eval_batch_size=5000",
    "--config.progress=False",
    "--config.optimizer.learning_rate=0.01",
  ]


def _rows(workdir: str) -> list[dict]:
  drop = ("wall_time", "compile_time", "examples_per_sec", "step_time")
  return [{k: v for k, v in r.items() if k not in drop} for r in io_utils.read_jsonl(f"{workdir}/metrics.jsonl")]


def test_train_kill_and_resume_on_gcs(gcs, tmp_path):
  """train.py on gs://: a whole run, then the same run killed with SIGKILL after its first checkpoint and resumed,
  which ends with the same metrics (bit-identical, as on a local disk) and nothing written locally."""
  from tests.test_train import data_dir as _  # noqa: F401  (the offline MNIST copy)
  from lamb_lars import input_pipeline
  from lamb_lars.configs import mnist_lenet
  from tests.test_train import DATA_DIR

  cfg = mnist_lenet.get_config()
  cfg.data_dir = DATA_DIR
  input_pipeline.prepare(cfg)
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}  # one CPU device: the point here is the storage
  ref, killed = f"gs://{BUCKET}/ref", f"gs://{BUCKET}/killed"
  out = subprocess.run(
    _train_cmd(ref), cwd=tmp_path, env={**env, "PYTHONPATH": ROOT}, capture_output=True, text=True, timeout=600
  )
  assert out.returncode == 0, out.stderr[-3000:]
  assert io_utils.read_json(f"{ref}/result.json")["status"] == "done"
  assert json.loads(io_utils.read_text(f"{ref}/config.json"))["batch_size"] == 256
  assert [r["step"] for r in _rows(ref)] == [10, 20, 30]
  assert any(n.startswith("events.out.tfevents") for n in io_utils.listdir(f"{ref}/tensorboard"))
  assert "20" in io_utils.listdir(f"{ref}/checkpoints") or "30" in io_utils.listdir(f"{ref}/checkpoints")
  assert not os.listdir(tmp_path), "the run wrote into the current directory"

  proc = subprocess.Popen(
    _train_cmd(killed),
    cwd=tmp_path,
    env={**env, "PYTHONPATH": ROOT},
    stdout=subprocess.DEVNULL,
    stderr=subprocess.DEVNULL,
  )
  deadline = time.time() + 600
  # On an object store orbax writes step 10 in place and commits it with this marker (no rename).
  while (
    not io_utils.exists(f"{killed}/checkpoints/10/commit_success.txt")
    and time.time() < deadline
    and proc.poll() is None
  ):
    time.sleep(0.2)
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  assert not io_utils.exists(f"{killed}/result.json"), "the run finished before it could be killed"
  out = subprocess.run(
    _train_cmd(killed), cwd=tmp_path, env={**env, "PYTHONPATH": ROOT}, capture_output=True, text=True, timeout=600
  )
  assert out.returncode == 0, out.stderr[-3000:]
  assert "Resumed from step" in out.stdout
  assert io_utils.read_json(f"{killed}/result.json")["status"] == "done"
  assert _rows(killed) == _rows(ref)


TINY_STUDY = """
from lamb_lars.configs.studies import common, smoke

def get_config():
  c = smoke.get_config()
  c.base.num_epochs = 2.0
  c.sweeps = (dict(name="baseline", role="baseline", fixed={"batch_size": 32}),
              dict(name="linear", role="linear", grid={"batch_size": (64,)}))
  c.analysis = common.analysis(title="GCS study", target_goal=0.05, num_train=512, baseline_epochs=2.0)
  return c
"""


def test_study_and_report_on_gcs(gcs, tmp_path, monkeypatch):
  """A tiny study on gs://: every trial's files, the uploaded store and the report live in the bucket; the
  report, made where the local copy of the store is missing (another machine), downloads the store first."""
  from lamb_lars.study.running import store as st
  from lamb_lars.study.running import workdir as wd

  config = tmp_path / "tiny_study.py"
  config.write_text(TINY_STUDY)
  workdir = f"gs://{BUCKET}/studies/tiny"
  env = {**{k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}, "PYTHONPATH": ROOT}  # one CPU device per trial
  cmd = [sys.executable, "-m", "lamb_lars.study", "run", f"--config={config}", f"--workdir={workdir}"]
  out = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
  assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
  assert "finished: done 2" in out.stdout, out.stdout
  runs = io_utils.listdir(f"{workdir}/runs")
  assert len(runs) == 2
  for rid in runs:
    rdir = f"{workdir}/runs/{rid}"
    assert io_utils.read_json(f"{rdir}/result.json")["status"] == "done"
    assert len(io_utils.read_jsonl(f"{rdir}/metrics.jsonl")) == 2
    assert "start " + rid in io_utils.read_text(f"{rdir}/log.txt")
  assert "lamb_lars.study run" in io_utils.read_text(f"{workdir}/commands.txt")
  assert [p for p in os.listdir(tmp_path) if p != "tiny_study.py"] == [], "the study wrote into the current directory"

  again = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
  assert again.returncode == 0 and "2 already finished" in again.stdout, again.stdout + again.stderr[-2000:]

  monkeypatch.setenv(io_utils.LOCAL_ROOT_ENV, str(tmp_path / "elsewhere"))  # no local copy of the store here
  con = wd.open_store(workdir)
  assert sorted(r["status"] for r in st.runs(con)) == ["done", "done"]
  con.close()
  out = subprocess.run(
    [sys.executable, "-m", "lamb_lars.study", "report", f"--workdir={workdir}"],
    cwd=tmp_path,
    env={**env, io_utils.LOCAL_ROOT_ENV: str(tmp_path / "third")},
    capture_output=True,
    text=True,
    timeout=600,
  )
  assert out.returncode == 0, out.stderr[-3000:]
  report = io_utils.listdir(f"{workdir}/report")
  assert {"README.md", "runs.csv", "evals.csv"} <= set(report) and any(n.endswith(".png") for n in report)
  assert io_utils.read_bytes(f"{workdir}/report/" + next(n for n in report if n.endswith(".png")))[:4] == b"\x89PNG"
  assert "# GCS study" in io_utils.read_text(f"{workdir}/report/README.md")
  # The provenance (manifest.json with the study config's hash) is in the bucket and verifies; status reads the
  # store's copy, downloaded on this "machine" too.
  from lamb_lars.common import code_state
  from lamb_lars.study.publishing import provenance
  from lamb_lars.study.running import status

  manifest = io_utils.read_json(f"{workdir}/report/manifest.json")
  config_json = io_utils.read_text(f"{workdir}/study_config.json")
  assert manifest["config_sha256"] == code_state.config_sha256(config_json)
  assert provenance.verify(f"{workdir}/report") == []
  monkeypatch.setenv(io_utils.LOCAL_ROOT_ENV, str(tmp_path / "fourth"))
  assert "2/2 finished (done 2)" in status.report(workdir)
  assert [p for p in os.listdir(tmp_path) if p not in ("tiny_study.py", "elsewhere", "third", "fourth")] == []
