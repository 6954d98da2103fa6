#!/usr/bin/env bash
# Installs the test dependencies (with the [ray] extra: tests/test_ray_executor.py starts a 2-node localhost Ray
# cluster), runs the linters (ruff check and ruff format --check on the tree, mypy on optim, models and train;
# settings in pyproject.toml) and then the whole suite on CPU (8 fake devices, set in tests/conftest.py). Extra
# arguments go to pytest, e.g. `bash scripts/test.sh -m "not slow"` for the fast tier.
# Three xdist workers on a 2-core machine: a worker that waits on the trainers it started, on a Ray cluster or on
# a killed run's resume leaves a core idle, and the third fills it (1167 s against 1349 s with two, the same load,
# docs/BENCHMARKS.md §1).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh test,ray
python -m ruff check .
python -m ruff format --check .
python -m mypy
python -m pytest -n 3 --dist loadgroup --durations=15 -q tests "$@"
