#!/usr/bin/env bash
# The noise-scale calibration (issue 60; rule pre-registered in lamb_lars/configs/studies/critical_batch_calibration.py):
# a re-analysis of published folders, no trial. Writes docs/studies/critical_batch_calibration/README.md and its
# manifest (publishing/composite.py over the source folders with analysis/calibration.py), then verifies it.
# About a minute and a half on the 2-core CPU. The checkout must be committed (the manifest records the commit).
set -euo pipefail
cd "$(dirname "$0")/.."
out="docs/studies/critical_batch_calibration"
mkdir -p "$out"
parts=$(python -c "from lamb_lars.study.analysis import calibration as c; print(','.join(c.SOURCES))")
python -m lamb_lars.study.publishing.composite "$out" --report=lamb_lars.study.analysis.calibration --parts="$parts"
