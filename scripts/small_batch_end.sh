#!/usr/bin/env bash
# Publishes docs/studies/mnist_batch_ladder_small_batch_end (issue 59): B_crit with and without batches 64 and 128,
# a re-analysis of the published to-target ladder and its small-batch part (lamb_lars/study/analysis/small_batch_end.py;
# the rule is pre-registered in lamb_lars/configs/studies/mnist_batch_ladder.py, ':to_target_small'). Both parts must
# be published first; about 1 minute on the 2-core CPU (2,000 bootstrap resamples per fit).
set -euo pipefail
cd "$(dirname "$0")/.."
out="docs/studies/mnist_batch_ladder_small_batch_end"
mkdir -p "$out"
parts=$(python -c "from lamb_lars.study.analysis import small_batch_end as s; print(','.join(s.SOURCES))")
python -m lamb_lars.study.publishing.composite "$out" --report=lamb_lars.study.analysis.small_batch_end --parts="$parts"
