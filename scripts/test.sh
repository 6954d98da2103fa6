#!/usr/bin/env bash
# Installs the test dependencies (with the [ray] extra: tests/test_ray_executor.py starts a 2-node localhost Ray
# cluster) and runs the whole suite on CPU (8 fake devices, set in tests/conftest.py).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh test,ray
python -m pytest -n 2 --dist loadgroup --durations=15 -q tests "$@"
