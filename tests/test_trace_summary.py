"""benchmarks/trace_summary.py: a profiler trace's device time by kernel category, on a hand-made trace whose
sums are written out below (not computed by the module)."""

from __future__ import annotations

import gzip
import json
import os
import tarfile

import pytest

from benchmarks import trace_summary as ts

# Device events (µs): conv/GEMM 300 + 100 + 50 = 450; select/scatter 80 + 20 = 100; reduction 150; elementwise
# 60 + 40 = 100; copies 10; other 5. The host event (pid 2) and the metadata are not device time.
EVENTS = [
  ("sm90_xmma_fprop_implicit_gemm_bf16", 300),
  ("void cutlass__5x_cudnn::Kernel<fprop>", 100),
  ("nvjet_sm90_tst_256x128_TNT", 50),
  ("input_scatter_fusion", 80),
  ("loop_select_fusion_1", 20),
  ("input_add_reduce_fusion_37", 150),
  ("loop_add_fusion", 60),
  ("wrapped_convert", 40),
  ("MemcpyD2D", 10),
  ("some_custom_kernel", 5),
]


def _trace():
  meta = [
    {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "/device:GPU:0"}},
    {"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "/host:CPU"}},
  ]
  dev = [{"ph": "X", "pid": 1, "tid": 7, "name": n, "ts": i, "dur": d} for i, (n, d) in enumerate(EVENTS)]
  host = [{"ph": "X", "pid": 2, "tid": 1, "name": "PjitFunction(train_step)", "ts": 0, "dur": 10_000}]
  return {"traceEvents": meta + dev + host}


def test_device_time_by_category_per_step():
  s = ts.summarize(ts.device_events(_trace()), steps=5)
  assert s["device_ms_per_step"] == pytest.approx(815 / 5 / 1e3)
  got = {c: ms for c, ms, _ in s["by_category"]}
  want_us = {
    "conv/GEMM (cuDNN, cuBLAS)": 450,
    "select/scatter fusions": 100,
    "reduction fusions": 150,
    "elementwise fusions": 100,
    "copies and memsets": 10,
    "other": 5,
  }
  assert got == pytest.approx({c: us / 5 / 1e3 for c, us in want_us.items()})
  assert sum(share for _, _, share in s["by_category"]) == pytest.approx(1.0)
  assert s["top"][0] == ("sm90_xmma_fprop_implicit_gemm_bf16", pytest.approx(0.06), pytest.approx(0.2))


def test_reads_a_tarred_profile_folder_and_the_cli_prints_the_table(tmp_path, capsys):
  folder = tmp_path / "resnet50_trace" / "plugins" / "profile" / "2026_11_28"
  os.makedirs(folder)
  with gzip.open(folder / "vm.trace.json.gz", "wt", encoding="utf-8") as f:
    json.dump(_trace(), f)
  tar = tmp_path / "trace.tar.gz"
  with tarfile.open(tar, "w:gz") as t:
    t.add(tmp_path / "resnet50_trace", arcname="resnet50_trace")
  assert ts.main([str(tar), "--steps", "1"]) == 0
  out = capsys.readouterr().out
  assert "| conv/GEMM (cuDNN, cuBLAS) | 0.5 | 55.2% |" in out  # 450 of 815 µs


def test_a_trace_without_device_events_is_one_sentence(tmp_path, capsys):
  path = tmp_path / "cpu.trace.json.gz"
  with gzip.open(path, "wt", encoding="utf-8") as f:
    json.dump({"traceEvents": [e for e in _trace()["traceEvents"] if e["pid"] == 2]}, f)
  with pytest.raises(SystemExit) as e:
    ts.main([str(path)])
  assert e.value.code == 2
  assert "no device events" in capsys.readouterr().err


def test_the_device_check_report_prints_the_trace_table_and_says_why_xla_mfu_is_left_out():
  """benchmarks/device_check.markdown on a GPU-like resnet50 stage: XLA counted too few FLOPs (cuDNN calls), so the
  MFU (XLA) cell is empty and the note says why; the profile's category table follows."""
  from benchmarks import device_check

  row = dict(batch=512, status="ok", step_ms=71.8, img_s=7133.0, xla_gflop_img=0.40, mfu_analytic=0.177)
  report = {
    "date": "2026-11-28",
    "command": "bash benchmarks/device_check.sh",
    "total_s": 1.0,
    "budget_s": 450.0,
    "stages": {
      "resnet50": {
        "status": "ok",
        "image": 224,
        "analytic_gflop_img": 24.54,
        "rows": [row],
        "xla_cost_note": "XLA's cost analysis counts 0.40 of the 24.54 analytic GFLOP/img",
        "profile_summary": ts.summarize(ts.device_events(_trace()), steps=1),
      }
    },
  }
  md = device_check.markdown(report)
  line = next(ln for ln in md.splitlines() if ln.startswith("| 512 |"))
  assert "| 17.7% |" in line and line.count("%") == 1  # the analytic MFU only
  assert "counts 0.40 of the 24.54 analytic GFLOP/img" in md
  assert "| conv/GEMM (cuDNN, cuBLAS) | 0.5 | 55.2% |" in md
