#!/usr/bin/env bash
# Issue 41's remaining republishing runs, in order, each published into docs/studies/<name> as soon as it is in:
#   1. lamb_lars/configs/studies/mnist_batch_ladder.py:to_target → docs/studies/mnist_batch_ladder_to_target
#      steps to 98.0–99.0% without the 30-epoch cap (90-epoch limit, censored beyond), LR refinement ×1.5, 4 seeds:
#      ≈ 263 min of training, ≈ 2.2 h wall on a quiet 2-core CPU (2 workers)
#   2. lamb_lars/configs/studies/mnist_batch_ladder.py:thin → docs/studies/mnist_batch_ladder_thin
#      the thin Def. 2.1/2.2 verdicts (linear 512 and 1K, tuned momentum 3072, LAMB 8K) and the baseline, 7 fresh
#      seeds each: ≈ 42 min of training, ≈ 25 min wall (2 workers)
#   3. lamb_lars/configs/studies/mnist_table3.py:robust → docs/studies/mnist_table3_robust
#      every Table 3 cell ≥ 6 fresh seeds, dense search near each divergence cliff, AdaGrad ε and G₀ searched:
#      ≈ 553 min of training, ≈ 4.6 h wall (2 workers)
#   Total ≈ 858 min of training, ≈ 7.2 h of wall time on a quiet 2-core CPU; about twice that beside other work.
#   (Costs from the published folders' runs.csv `wall_time`; the config docstrings give the arithmetic.)
# Started by the coordinator in other worktrees (not run here; listed so that a reader sees issue 41's whole set):
#   lamb_lars/configs/studies/mnist_batch_warmup.py:lr_warmup_control, lamb_lars/configs/studies/mnist_branching.py:prereg and
#   lamb_lars/configs/studies/mnist_branching.py:sqrt_prereg.
# Resumable: run it again after an interruption and each study picks up where it stopped (a published one is
# re-reported from its finished store, nothing retrains). In the background:
#   nohup bash scripts/republish_issue41.sh > /dev/null 2>&1 &  ;  tail -f studies/republish_issue41.log
# Arguments: the studies to run (default: all three, in order; e.g. `thin robust`).
# STUDIES_DIR (default studies/) holds the workdirs and the log; DOCS_DIR (default docs/studies) the published folders.
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${STUDIES_DIR:-studies}"
docs="${DOCS_DIR:-docs/studies}"
declare -A config=(
  [to_target]="lamb_lars/configs/studies/mnist_batch_ladder.py:to_target"
  [thin]="lamb_lars/configs/studies/mnist_batch_ladder.py:thin"
  [robust]="lamb_lars/configs/studies/mnist_table3.py:robust"
)
declare -A name=(
  [to_target]="mnist_batch_ladder_to_target"
  [thin]="mnist_batch_ladder_thin"
  [robust]="mnist_table3_robust"
)
order=(to_target thin robust)
if [ "$#" -gt 0 ]; then
  order=("$@")
fi
for part in "${order[@]}"; do
  if [ -z "${config[$part]:-}" ]; then
    echo "republish_issue41.sh: unknown study '$part'; the studies are: ${!config[*]}." >&2
    exit 2
  fi
done
mkdir -p "$dir" "$docs"
exec > >(tee -a "$dir/republish_issue41.log") 2>&1
start=$(date +%s)
commit=$(git rev-parse --short HEAD 2>/dev/null || echo '?')
echo "== $(date '+%F %T') start; load: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) CPUs; commit $commit"
failed=()
for part in "${order[@]}"; do
  t0=$(date +%s)
  workdir="$dir/${name[$part]}"
  if python -m lamb_lars.study run --config="${config[$part]}" --workdir="$workdir" &&
     python -m lamb_lars.study report --workdir="$workdir" --out="$docs/${name[$part]}"; then
    echo "== $(date '+%F %T') $part done in $(( ($(date +%s) - t0) / 60 )) min; load: $(cut -d' ' -f1-3 /proc/loadavg)"
  else
    echo "== $(date '+%F %T') $part FAILED after $(( ($(date +%s) - t0) / 60 )) min (rerun this script to resume)"
    failed+=("$part")
  fi
done
echo "== $(date '+%F %T') finished in $(( ($(date +%s) - start) / 60 )) min; failed: ${failed[*]:-none}"
[ "${#failed[@]}" -eq 0 ]
