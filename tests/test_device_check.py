"""benchmarks/device_check.sh (the accelerator check) and benchmarks/imagenet_input.py (host input throughput).

The dry run is the check itself at tiny sizes on CPU: every stage must finish with status ok, so the script works
the first time it meets a GPU.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from benchmarks import device_check, imagenet_input  # noqa: E402


def _env():
  env = dict(os.environ)
  env["PYTHONPATH"] = REPO + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
  return env


@pytest.mark.slow
def test_cpu_dry_run_runs_every_stage_ok(tmp_path):
  out = tmp_path / "dc"
  proc = subprocess.run(
    ["bash", os.path.join(REPO, "benchmarks", "device_check.sh"), "--cpu-dry-run", f"--out={out}"],
    env=_env(),
    capture_output=True,
    text=True,
    timeout=900,
    check=False,
  )
  report = json.loads((out / "device_check.json").read_text())
  stages = report["stages"]
  assert set(stages) == set(device_check.STAGES), proc.stderr[-2000:]
  bad = {k: (v.get("status"), v.get("error")) for k, v in stages.items() if v.get("status") != "ok"}
  assert not bad and proc.returncode == 0, bad
  assert stages["env"]["platform"] == "cpu" and stages["env"]["gpu_xla_flags"] == []
  row = stages["resnet50"]["rows"][0]
  assert row["status"] == "ok" and row["img_s"] > 0 and row["finite"]
  # XLA's count of one training step ≥ the analytic 3 × 2 × MACs (it adds BN, the update, the loss).
  assert row["xla_gflop_img"] >= 0.9 * stages["resnet50"]["analytic_gflop_img"]
  assert {(r["model"], r["batch"]) for r in stages["step_time"]["rows"]} == {
    (m, b) for m in ("lenet5", "mnist_cnn") for b in device_check.DRY["cnn_batches"]
  }
  assert stages["faithful"]["steps"] == 3 and 0.0 <= stages["faithful"]["eval_accuracy"] <= 1.0
  assert stages["gpu_tests"]["counts"].get("skipped", 0) >= 1 and not stages["gpu_tests"]["counts"].get("passed")
  md = (out / "device_check.md").read_text()
  assert "ResNet-50" in md and "| faithful | ok |" in md


@pytest.mark.slow
def test_cpu_dry_run_of_the_study_stage_runs_it_packed_and_unpacked(tmp_path):
  """``--stages=study --cpu-dry-run``: the fixed study at tiny size, unpacked and packed, every trial finished."""
  out = tmp_path / "dc"
  proc = subprocess.run(
    ["bash", os.path.join(REPO, "benchmarks", "device_check.sh"), "--cpu-dry-run", "--stages=study", f"--out={out}"],
    env=_env(),
    capture_output=True,
    text=True,
    timeout=900,
    check=False,
  )
  report = json.loads((out / "device_check.json").read_text())
  study = report["stages"]["study"]
  assert study["status"] == "ok" and proc.returncode == 0, (study, proc.stderr[-2000:])
  rows = study["rows"]
  assert [r["pack"] for r in rows] == [1, device_check.DRY["study"]["pack"]]
  assert all(r["finished"] == r["trials"] and r["trials_per_hour"] > 0 for r in rows)
  assert rows[0]["gpu_util_mean"] is None  # no nvidia-smi on the CPU
  assert "trials/hour" in (out / "device_check.md").read_text()


@pytest.mark.parametrize(
  "args,needle", [(["--stages=env,bogus"], "unknown stage"), (["--peak_tflops=-1"], "--peak_tflops")]
)
def test_bad_arguments_exit_2_with_one_sentence(tmp_path, args, needle):
  proc = subprocess.run(
    [sys.executable, os.path.join(REPO, "benchmarks", "device_check.py"), f"--out={tmp_path}", *args],
    env=_env(),
    capture_output=True,
    text=True,
    timeout=60,
    check=False,
  )
  assert proc.returncode == 2 and needle in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
  assert not (tmp_path / "device_check.json").exists()


@pytest.mark.parametrize(
  "kind,peak",
  [
    ("NVIDIA H100 80GB HBM3", 989.0),
    ("NVIDIA H100 PCIe", 756.0),
    ("NVIDIA H200", 989.0),
    ("NVIDIA A100-SXM4-80GB", 312.0),
    ("cpu", None),
  ],
)
def test_peak_by_device_kind_from_datasheets(kind, peak):
  assert device_check.peak_tflops(kind) == peak


@pytest.mark.parametrize(
  "kind,tbps", [("NVIDIA H100 80GB HBM3", 3.35), ("NVIDIA H100 PCIe", 2.0), ("NVIDIA H200", 4.8), ("cpu", None)]
)
def test_memory_bandwidth_by_device_kind_from_datasheets(kind, tbps):
  assert device_check.peak_tflops(kind, device_check.HBM_TBPS) == tbps


def test_imagenet_input_dataset_is_the_same_jpegs_in_both_layouts(tmp_path):
  """Our pipeline reads the tfds ArrayRecord; the peer reads the ImageFolder copy: the same pixels, label by
  label, and ImageNet-sized compressible JPEGs."""
  from PIL import Image
  import tensorflow_datasets as tfds

  stats = imagenet_input.build_dataset(str(tmp_path), 6, num_eval=2)
  assert 40 < stats["mean_kb"] < 200
  source = tfds.data_source("imagenet2012", split="train", data_dir=str(tmp_path), download=False)
  assert len(source) == 6
  for i in range(6):
    record = source[i]
    label = int(record["label"])
    path = os.path.join(
      tmp_path,
      "jpeg",
      "train",
      f"n{label:08d}",
      record["file_name"].decode() if isinstance(record["file_name"], bytes) else record["file_name"],
    )
    with open(path, "rb") as f:
      pixels = np.asarray(Image.open(io.BytesIO(f.read())).convert("RGB"))
    np.testing.assert_array_equal(np.asarray(record["image"]), pixels)
    assert pixels.shape[:2] in imagenet_input.SIZES


def test_imagenet_input_bad_cores_exit_2(tmp_path):
  proc = subprocess.run(
    [sys.executable, os.path.join(REPO, "benchmarks", "imagenet_input.py"), "--cores=0", f"--data_dir={tmp_path}"],
    env=_env(),
    capture_output=True,
    text=True,
    timeout=60,
    check=False,
  )
  assert proc.returncode == 2 and "--cores" in proc.stderr and not os.listdir(tmp_path)
