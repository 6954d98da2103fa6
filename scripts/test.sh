#!/usr/bin/env bash
# Installs the test dependencies and runs the whole suite on CPU (8 fake devices, set in tests/conftest.py).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh test
python -m pytest -n 2 --durations=15 -q tests "$@"
