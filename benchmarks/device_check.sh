#!/usr/bin/env bash
# One-command accelerator check (docs/device_check.md). Run from anywhere:
#   bash benchmarks/device_check.sh                 # on a GPU machine: ≤ 8 min, writes $OUT or ./device_check_out
#   bash benchmarks/device_check.sh --cpu-dry-run   # every stage at tiny sizes on CPU
# Extra arguments go to benchmarks/device_check.py (--out=DIR, --budget_s=S, --stages=a,b, --peak_tflops=T).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}"
exec "${PYTHON:-python3}" benchmarks/device_check.py "$@"
