"""Where a profiled step's device time goes: a ``jax.profiler`` trace summed by kernel category.

    python -m benchmarks.trace_summary resnet50_trace.tar.gz --steps 3   # a device check's trace (or its folder)

Reads the Chrome-trace file (``*.trace.json.gz``) that ``jax.profiler.trace`` writes, keeps the complete events
('X') of the device processes (``/device:GPU:0`` …), and sums their durations by category of kernel name:

* ``conv/GEMM (cuDNN, cuBLAS)``: library kernels (cuDNN's ``xmma``/``cutlass`` convolutions, cuBLAS's ``nvjet``
  GEMMs, anything named ``gemm``, ``cudnn`` or ``conv``, but not ``convert``);
* ``select/scatter fusions``: XLA fusions whose name has ``select``, ``scatter`` or ``reduce_window`` (ReLU's and
  max-pool's backward, max-pool's forward);
* ``reduction fusions``: other XLA fusions with a ``reduce`` (batch-norm statistics, bias and weight-decay sums);
* ``elementwise fusions``: the other XLA fusions (``loop_*``, ``input_*``, ``*fusion*``);
* ``copies and memsets``: ``memcpy``/``Memset`` events;
* ``other``: the rest.

The names are XLA:GPU's (2026: jaxlib 0.11); a kernel that fits no rule counts as ``other``, so the categories
always sum to the device time. ``steps`` divides every sum into per-step milliseconds.
"""

from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import os
import re
import tarfile
import tempfile
from typing import Any, Dict, Iterable, List, Optional, Sequence

CATEGORIES = (
  "conv/GEMM (cuDNN, cuBLAS)",
  "select/scatter fusions",
  "reduction fusions",
  "elementwise fusions",
  "copies and memsets",
  "other",
)


def category(name: str) -> str:
  """The category (module docstring) of one kernel name."""
  low = name.lower()
  if any(s in low for s in ("xmma", "cutlass", "nvjet", "gemm", "cudnn")) or re.search(r"conv(?!ert)", low):
    return CATEGORIES[0]
  if "memcpy" in low or "memset" in low:
    return CATEGORIES[4]
  if any(s in low for s in ("select", "scatter", "reduce_window")):
    return CATEGORIES[1]
  if "fusion" in low or low.startswith(("loop_", "input_", "wrapped_")):
    return CATEGORIES[2] if "reduce" in low else CATEGORIES[3]
  return CATEGORIES[5]


def device_events(trace: Dict[str, Any]) -> List[Dict[str, Any]]:
  """The complete ('X') events of the trace's device processes (process name ``/device:…``)."""
  events = trace.get("traceEvents", [])
  devices = {
    e["pid"]
    for e in events
    if e.get("ph") == "M" and e.get("name") == "process_name" and "/device:" in str(e.get("args", {}).get("name"))
  }
  return [e for e in events if e.get("ph") == "X" and e.get("pid") in devices and "dur" in e]


def summarize(events: Iterable[Dict[str, Any]], steps: int = 1, top: int = 10) -> Dict[str, Any]:
  """``{"device_ms_per_step", "by_category": [(category, ms/step, share)], "top": [(name, ms/step, calls/step)]}``."""
  by_cat: Dict[str, float] = collections.defaultdict(float)
  by_name: Dict[str, List[float]] = collections.defaultdict(lambda: [0.0, 0.0])
  for e in events:
    us = float(e["dur"])
    by_cat[category(e["name"])] += us
    by_name[e["name"]][0] += us
    by_name[e["name"]][1] += 1
  total = sum(by_cat.values())
  per = 1e3 * steps
  cats = [(c, by_cat[c] / per, by_cat[c] / total if total else 0.0) for c in CATEGORIES if by_cat.get(c)]
  names = sorted(by_name.items(), key=lambda kv: -kv[1][0])[:top]
  return dict(
    device_ms_per_step=total / per,
    by_category=cats,
    top=[(n, v[0] / per, v[1] / steps) for n, v in names],
  )


def load(path: str) -> Dict[str, Any]:
  """The trace dict from a ``*.trace.json.gz`` file, a folder holding one, or a ``.tar.gz`` of such a folder."""
  if path.endswith(".json.gz"):
    with gzip.open(path, "rt", encoding="utf-8") as f:
      return json.load(f)
  if os.path.isdir(path):
    found = sorted(glob.glob(os.path.join(path, "**", "*.trace.json.gz"), recursive=True))
    if not found:
      raise ValueError(f"{path} holds no *.trace.json.gz (write one with jax.profiler.trace).")
    return load(found[-1])
  if tarfile.is_tarfile(path):
    with tempfile.TemporaryDirectory() as tmp:
      with tarfile.open(path) as tar:
        tar.extractall(tmp, filter="data")
      return load(tmp)
  raise ValueError(f"{path} is neither a *.trace.json.gz, a folder, nor a .tar.gz of a profiler trace.")


def markdown(summary: Dict[str, Any]) -> str:
  lines = [
    f"Device time {summary['device_ms_per_step']:.1f} ms per step.",
    "",
    "| category | ms/step | share |",
    "|---|---|---|",
  ]
  lines += [f"| {c} | {ms:.1f} | {share:.1%} |" for c, ms, share in summary["by_category"]]
  lines += ["", "| kernel (top by time) | ms/step | calls/step |", "|---|---|---|"]
  lines += [f"| `{n[:90]}` | {ms:.2f} | {calls:g} |" for n, ms, calls in summary["top"]]
  return "\n".join(lines) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("trace", help="a *.trace.json.gz, a folder holding one, or a .tar.gz of such a folder")
  p.add_argument("--steps", type=int, default=1, help="steps the trace covers (the device check traces 3)")
  p.add_argument("--top", type=int, default=10)
  a = p.parse_args(argv)
  try:
    events = device_events(load(a.trace))
  except (OSError, ValueError) as e:
    p.exit(2, f"error: {e}\n")
  if not events:
    p.exit(2, f"error: {a.trace} has no device events (a CPU trace has none; profile on an accelerator).\n")
  print(markdown(summarize(events, a.steps, a.top)), end="")
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
