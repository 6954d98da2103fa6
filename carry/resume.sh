#!/usr/bin/env bash
# Resumes the carried studies on a new machine, in the background, and snapshots them back into carry/ every 15
# minutes (the procedure of carry/README.md in one command). Run from the main checkout, after
# `bash scripts/install.sh test,ray`:
#   nohup bash carry/resume.sh > /tmp/resume.log 2>&1 &   # the axes parts still to run, Table 3's robust republication
#   AXES_PARTS="cnn_w0.25 branch-cnn_w0.25" nohup bash carry/resume.sh > /tmp/resume.log 2>&1 &
# (in the background: a tool that waits for its command's output to close waited its full 10 minutes on it.)
# Each study runs from a worktree at the commit its snapshot records, under `setsid nice -n N` (Table 3's robust
# republication at NICE_ROBUST=5, the axes study at NICE_AXES=19: robust's remaining replicates are independent
# trials that finish sooner with the cores, while the axes study's CNN replicates are a serial path), with the
# scheduler's autogroups switched off so that nice applies across sessions (carry/README.md). Logs: /work/studies/*.log;
# the snapshot loop's: /work/wt/snaploop.log. A finished part is left out of the loop by naming it in
# /work/wt/finished.txt (the parts this file lists as FINISHED are written there first).
# Stop everything: kill -- -<pgid> for each line of /work/wt/queue.pgid, and the loop (pkill -f snaploop.sh).
# DRY=1: say what would start, start nothing (the worktrees and copies are made).
set -euo pipefail
cd "$(dirname "$0")/.."
main=$(pwd)
AXES_PARTS="${AXES_PARTS:-cnn_w0.25 branch-cnn_w0.25}"
NICE_AXES="${NICE_AXES:-19}"
NICE_ROBUST="${NICE_ROBUST:-5}"
ROBUST="${ROBUST:-1}"
FINISHED="data7500 branch-data7500 data15000 branch-data15000 data30000 branch-data30000 lenet5 branch-lenet5 mlp
branch-mlp lenet5_w0.5 branch-lenet5_w0.5 lenet5_w2 branch-lenet5_w2"
mkdir -p /work/wt /work/studies/critical_batch_axes
# Autogroup (on by default) shares the CPU between sessions before nice orders processes within one; each queue
# runs in a session of its own (setsid), so with it on a nice 15 queue took as much CPU as the shell beside it.
if [ "${DRY:-0}" != 1 ]; then echo 0 > /proc/sys/kernel/sched_autogroup_enabled; fi
wt_out=/work/wt  # DRY=1 writes its files beside, in /tmp/resume_dry, and leaves running loops and queues alone
if [ "${DRY:-0}" = 1 ]; then wt_out=/tmp/resume_dry && mkdir -p "$wt_out"; fi
printf '%s\n' $FINISHED > "$wt_out/finished.txt"
: > "$wt_out/queue.pgid"

commit_of() {  # the code commit a snapshot records
  python -c "import json,sys; print(json.load(open(sys.argv[1]))['code']['commit'])" "$1/snapshot.json"
}

worktree() {  # path commit
  git worktree prune
  if [ ! -d "$1" ]; then git worktree add --detach "$1" "$2" > /dev/null; fi
  [ "$(git -C "$1" rev-parse HEAD)" = "$(git rev-parse "$2")" ] || { echo "$1 is not at $2" >&2; exit 1; }
}

start() {  # name worktree command...: setsid'd, its process group recorded
  local name=$1 tree=$2
  shift 2
  if [ "${DRY:-0}" = 1 ]; then echo "would start $name in $tree: $*"; return; fi
  # The pid is written from inside the new session (setsid may fork, and then $! is not the session's leader).
  (cd "$tree" && setsid bash -c 'echo $$ > "$0"; exec nohup "$@"' "/work/wt/$name.pid" "$@" \
    > "/work/wt/$name.out" 2>&1 < /dev/null &)
  sleep 2
  local pid
  pid=$(cat "/work/wt/$name.pid")  # it leads its own session and process group
  echo "$pid" >> /work/wt/queue.pgid
  echo "started $name (pid $pid, $(ps -o ni= -p "$pid" | tr -d ' ') nice)"
}

# The axes study (issue 42): the carried parts are copied in; a part not yet started begins from nothing.
axes_commit=$(commit_of carry/critical_batch_axes/lenet5)
worktree /work/wt/run_axes "$axes_commit"
for part in $AXES_PARTS; do
  if [ -d "carry/critical_batch_axes/$part" ] && [ ! -d "/work/studies/critical_batch_axes/$part" ]; then
    cp -r "carry/critical_batch_axes/$part" /work/studies/critical_batch_axes/
  fi
done
for part in $FINISHED; do  # the cross-setting report at the end of a queue reads the finished parts' reports
  [ -d "/work/studies/critical_batch_axes/$part" ] || cp -r "carry/critical_batch_axes/$part" /work/studies/critical_batch_axes/
done
# Two queues, so that a branching part's lone reference trial does not leave a core idle: the steps-to-target parts,
# each followed by its own branching part when that is listed too (it waits for them), and the other branching parts.
steps=() branches=()
for part in $AXES_PARTS; do
  if [[ "$part" == branch-* ]] && [[ " $AXES_PARTS " == *" ${part#branch-} "* ]]; then
    continue  # queued after its steps part, below
  elif [[ "$part" == branch-* ]]; then
    branches+=("$part")
  else
    steps+=("$part")
    [[ " $AXES_PARTS " == *" branch-$part "* ]] && steps+=("branch-$part")
  fi
done
axes_env=(env STUDIES_DIR=/work/studies DOCS_DIR=/work/studies/axes_docs PYTHONPATH=/work/wt/run_axes nice -n "$NICE_AXES")
if [ "${#branches[@]}" -gt 0 ]; then
  start axes_branch /work/wt/run_axes "${axes_env[@]}" bash scripts/critical_batch_axes.sh "${branches[@]}"
fi
if [ "${#steps[@]}" -gt 0 ]; then
  start axes_steps /work/wt/run_axes "${axes_env[@]}" bash scripts/critical_batch_axes.sh "${steps[@]}"
fi

# Table 3's robust republication (issue 41).
# It restarted from nothing at e216fd6 on 2026-12-02 (session 14): the run begun at 7a6f081 recorded trials that ran
# their whole budget as pruned at epoch 30 (a rung at the budget's end), fixed in e216fd6.
if [ "$ROBUST" = 1 ]; then
  robust_commit=e216fd6
  [ -d carry/mnist_table3_robust ] && robust_commit=$(commit_of carry/mnist_table3_robust)
  worktree /work/wt/run_r41 "$robust_commit"
  if [ ! -d /work/studies/mnist_table3_robust ] && [ -d carry/mnist_table3_robust ]; then
    cp -r carry/mnist_table3_robust /work/studies/mnist_table3_robust
  fi
  start robust /work/wt/run_r41 env STUDIES_DIR=/work/studies DOCS_DIR=/work/studies/r41_docs \
    PYTHONPATH=/work/wt/run_r41 nice -n "$NICE_ROBUST" bash scripts/republish_issue41.sh robust
fi

# The snapshot loop: main's `snapshot` (it keeps the running trials' newest checkpoints), each study's own commit.
cat > "$wt_out/snaploop.sh" <<EOF
#!/usr/bin/env bash
snap() {  # workdir out code_dir name
  cd $main
  if PYTHONPATH=$main nice -n 15 python -m lamb_lars.study snapshot --workdir="\$1" --out="\$2.new" --code_dir="\$3" \\
      > /work/wt/snap_\$4.log 2>&1; then
    rm -rf "\$2" && mv "\$2.new" "\$2"; echo "\$(date +%T) \$4 ok" >> /work/wt/snaploop.log
  else
    rm -rf "\$2.new"; echo "\$(date +%T) \$4 FAILED" >> /work/wt/snaploop.log
  fi
}
while true; do
  sleep 900
  for d in /work/studies/critical_batch_axes/*/; do
    part=\$(basename "\$d")
    grep -qx "\$part" /work/wt/finished.txt && continue
    [ -f "\$d/study.sqlite" ] || continue
    snap "\$d" $main/carry/critical_batch_axes/\$part /work/wt/run_axes \$part
  done
  [ -f /work/studies/mnist_table3_robust/study.sqlite ] &&
    snap /work/studies/mnist_table3_robust $main/carry/mnist_table3_robust /work/wt/run_r41 robust
done
EOF
if [ "${DRY:-0}" = 1 ]; then exit 0; fi
(setsid nohup bash /work/wt/snaploop.sh > /dev/null 2>&1 & echo $! > /work/wt/snaploop.pid)
echo "snapshot loop started; process groups in /work/wt/queue.pgid: $(tr '\n' ' ' < /work/wt/queue.pgid)"
