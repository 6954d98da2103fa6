#!/usr/bin/env bash
# The two MNIST paper-budget studies as republished with replicates (issue 22): You et al. 2020 Table 3
# (lamb_lars/configs/studies/mnist_table3.py:republish) and the batch-size ladder with B_L, B_H and steps to target
# (lamb_lars/configs/studies/mnist_batch_ladder.py:republish, whose baseline is Table 3's batch-256 momentum choice), one
# after the other, then their reports and raw CSVs into docs/studies/<name>_replicated. ≈ 1.6 h + ≈ 4 h on a quiet
# 2-core CPU (the configs' docstrings). Resumable: run it again after an interruption and it picks up where it
# stopped (and across machines: `python -m lamb_lars.study snapshot`, docs/studies.md). In the background:
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
studies=("mnist_table3:mnist_table3_replicated" "mnist_batch_ladder:mnist_batch_ladder_replicated")
for entry in "${studies[@]}"; do
  study="${entry%%:*}"; t0=$(date +%s)
  python -m lamb_lars.study run --config="lamb_lars/configs/studies/$study.py:republish" --workdir="$dir/${study}_v2" "$@"
  echo "== $(date '+%F %T') $study finished in $(( ($(date +%s) - t0) / 60 )) min; load: $(cut -d' ' -f1-3 /proc/loadavg)"
done
for entry in "${studies[@]}"; do
  study="${entry%%:*}"
  python -m lamb_lars.study report --workdir="$dir/${study}_v2" --out="docs/studies/${entry#*:}"
done
echo "== $(date '+%F %T') both studies and reports done in $(( ($(date +%s) - start) / 60 )) min"
