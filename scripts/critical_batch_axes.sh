#!/usr/bin/env bash
# The critical-batch-axes study (issue 42; lamb_lars/configs/studies/critical_batch_axes.py): per setting, steps to target
# (`study run --config=...:<setting>`) then branching (`study branch --config=...:branch-<setting>`), each part
# published into docs/studies/critical_batch_axes/<part> as soon as it is in, then the cross-setting report and figure
# with the folder's manifest (publishing/composite.py with analysis/axes.py). ≈ 11 h on a quiet 2-core CPU (the
# config's docstring), more when shared.
# Resumable: run it again after an interruption and every part picks up where it stopped. In the background:
#   nohup bash scripts/critical_batch_axes.sh > /dev/null 2>&1 &  ;  tail -f studies/critical_batch_axes.log
# Arguments: the parts to run (default: every part, in the config's order; e.g. `lenet5 branch-lenet5`).
# STUDIES_DIR (default studies/) holds the workdirs (studies/critical_batch_axes/<part>) and the log;
# DOCS_DIR (default docs/studies/critical_batch_axes) the published parts and the cross-setting report.
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${STUDIES_DIR:-studies}"
docs="${DOCS_DIR:-docs/studies/critical_batch_axes}"
cfg="lamb_lars/configs/studies/critical_batch_axes.py"
mkdir -p "$dir/critical_batch_axes" "$docs"
exec > >(tee -a "$dir/critical_batch_axes.log") 2>&1
start=$(date +%s)
commit=$(git rev-parse --short HEAD 2>/dev/null || echo '?')
echo "== $(date '+%F %T') start; load: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) CPUs; commit $commit"
if [ "$#" -gt 0 ]; then
  parts=("$@")
else
  mapfile -t parts < <(python -c \
    "from lamb_lars.configs.studies import critical_batch_axes as c; print('\n'.join(c.parts()))")
fi
failed=()
for part in "${parts[@]}"; do
  t0=$(date +%s)
  cmd=run
  [[ "$part" == branch-* ]] && cmd=branch
  if python -m lamb_lars.study "$cmd" --config="$cfg:$part" --workdir="$dir/critical_batch_axes/$part" &&
     python -m lamb_lars.study report --workdir="$dir/critical_batch_axes/$part" --out="$docs/$part"; then
    echo "== $(date '+%F %T') $part done in $(( ($(date +%s) - t0) / 60 )) min; load: $(cut -d' ' -f1-3 /proc/loadavg)"
  else
    echo "== $(date '+%F %T') $part FAILED after $(( ($(date +%s) - t0) / 60 )) min (rerun this script to resume)"
    failed+=("$part")
  fi
done
# The cross-setting report (README.md, the figure) and the composite manifest (publishing/composite.py); it needs
# lamb_lars/ committed, and fails (the parts stay published) when a part does not verify.
if ! python -m lamb_lars.study.publishing.composite "$docs" --report=lamb_lars.study.analysis.axes; then
  echo "== $(date '+%F %T') the cross-setting report was not published (see above)"
  failed+=("cross-setting report")
fi
echo "== $(date '+%F %T') finished in $(( ($(date +%s) - start) / 60 )) min; failed parts: ${failed[*]:-none}"
[ "${#failed[@]}" -eq 0 ]
