#!/usr/bin/env bash
# The two MNIST paper-budget studies (You et al. 2020 Table 3; the batch-size ladder with B_L, B_H and steps to
# target), one after the other, then their reports and raw CSVs into docs/studies/. Resumable: run it again after
# an interruption and it picks up where it stopped. Meant for a quiet machine, in the background:
#   nohup bash scripts/paper_studies.sh > /dev/null 2>&1 &  ;  tail -f studies/paper_studies.log
# STUDIES_DIR (default studies/) holds the workdirs and the log (appended to, and also printed); extra arguments
# go to every `study run`.
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${STUDIES_DIR:-studies}"
mkdir -p "$dir"
exec > >(tee -a "$dir/paper_studies.log") 2>&1  # the script keeps its own log: it creates the folder first
start=$(date +%s)
echo "== $(date '+%F %T') start; load: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) CPUs"
for study in mnist_table3 mnist_batch_ladder; do
  t0=$(date +%s)
  python -m lamb_lars.study run --config="configs/studies/$study.py" --workdir="$dir/$study" "$@"
  echo "== $(date '+%F %T') $study finished in $(( ($(date +%s) - t0) / 60 )) min; load: $(cut -d' ' -f1-3 /proc/loadavg)"
done
for study in mnist_table3 mnist_batch_ladder; do
  python -m lamb_lars.study report --workdir="$dir/$study" --out="docs/studies/$study"
done
echo "== $(date '+%F %T') both studies and reports done in $(( ($(date +%s) - start) / 60 )) min"
