"""Our runs of the authors' MNIST configurations against the authors' own training logs (You et al. 2020).

The paper's MNIST code (GitHub ``fastalgo/mnist_tpu``) left about 1,900 log files, each named for its configuration
(batch, LR, warmup epochs, poly power, weight decay) and ending in the final test accuracy of one run.
:data:`lamb_lars.proj.you2020.paper.AUTHORS` transcribes the logs of the configurations in
``lamb_lars/proj/you2020/configs/``.

  python -m lamb_lars.proj.you2020.paper_logs run --workdir=studies/mnist_paper_logs --seeds=0,1 --workers=2
  python -m lamb_lars.proj.you2020.paper_logs report --workdir=studies/mnist_paper_logs \\
    --out=docs/studies/mnist_paper_logs

``run`` trains each configuration × seed in its own process (``WORKDIR/<config>/seed<k>``), ``--workers`` at a time;
re-running it skips finished runs and resumes a killed one from its checkpoint. ``report`` writes ``runs.csv``
(one row per run of ours), ``authors.csv`` (one row per log of theirs), ``README.md`` computed from them alone
(lamb_lars/proj/you2020/authors_logs.py: the comparison and its verdicts) and ``manifest.json`` (``kind:
paper_logs``: the commit that reported, the commands that ran the runs, the machine, the files' sha256), so that
``python -m lamb_lars.study verify DIR`` checks the folder like any published study.
"""

from __future__ import annotations

import argparse
import csv
import importlib
import json
import os
import subprocess
import sys
import time
from typing import Optional, Sequence

from lamb_lars.common import code_state, io_utils, run_files
from lamb_lars.proj.you2020 import authors_logs, paper
from lamb_lars.study.publishing import manifest as manifest_lib
from lamb_lars.study.running.executor import slot_cpus, spawning_on, usable_cpus

KIND = "paper_logs"  # manifest.json's kind
VERIFIER = "lamb_lars.proj.you2020.paper_logs"  # manifest.json's verifier: `study verify` calls its verify()
FILES = ("runs.csv", "authors.csv", "README.md")


def run_dir(workdir: str, config: str, seed: int, learning_rate: Optional[float] = None) -> str:
  """WORKDIR/<config>/seed<k>, or WORKDIR/<config>/lr<η>/seed<k> for a run at another LR (the slice)."""
  parts = [workdir, config] + ([f"lr{learning_rate:g}"] if learning_rate is not None else []) + [f"seed{seed}"]
  return os.path.join(*parts)


def load_config(name: str, seed: int, learning_rate: Optional[float] = None):
  config = importlib.import_module(f"lamb_lars.proj.you2020.configs.{name}").get_config()
  config.seed = seed
  config.progress = False
  if learning_rate is not None:
    config.optimizer.learning_rate = learning_rate
  return config


def _command(name: str, seed: int, out: str, learning_rate: Optional[float]) -> list[str]:
  return [sys.executable, "-m", "lamb_lars.proj.you2020.paper_logs", "one", name, str(seed), out] + (
    [f"--learning_rate={learning_rate}"] if learning_rate is not None else []
  )


def _exit_reason(returncode: int) -> str:
  """One sentence on why a run's process ended badly (a negative code is the signal that killed it)."""
  if returncode == -9:
    return (
      "killed by SIGKILL: on Linux most often the out-of-memory killer (`dmesg` says), e.g. two full-batch "
      "runs of the CNN at once with the unrolled micro-batch loop, ≈ 14 GB each, on a 24 GiB machine; then "
      "run fewer at once or use config.microbatch_loop='host'. It resumes from its last checkpoint when run "
      "again."
    )
  if returncode < 0:
    return f"killed by signal {-returncode}; it resumes from its last checkpoint when run again."
  return f"exit status {returncode} (its error is printed above)."


# Peak RSS of one run of the authors' CNN on XLA:CPU (docs/BENCHMARKS.md §22, §24): unrolled, 1.2 GB + ≈ 0.46 GB per
# extra micro-batch (14.6 GB with 30 of 2,000); the host loop, one micro-batch at a time: ≤ 2.0 GB at the full batch.
BASE_GB, PER_MICROBATCH_GB, HOST_LOOP_GB = 1.2, 0.46, 2.0


def estimated_gb(name: str) -> float:
  """A run's peak host memory, estimated from its micro-batch loop and number of micro-batches (constants above)."""
  from lamb_lars.train import run_plan

  config = load_config(name, 0)
  k = run_plan.num_microbatches(config, 1) if config.microbatch_loop == "unrolled" else 1
  return HOST_LOOP_GB if config.microbatch_loop == "host" else BASE_GB + PER_MICROBATCH_GB * (k - 1)


def machine_gb() -> float:
  """The machine's physical memory in GB (inf where the OS does not say)."""
  try:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9
  except (ValueError, OSError, AttributeError):
    return float("inf")


def _next_fitting(todo: list, running_gb: float, budget_gb: float, gb) -> Optional[int]:
  """The index of the first run in ``todo`` whose memory fits beside the running ones (any run when none runs)."""
  for i, (name, _, _) in enumerate(todo):
    if running_gb == 0 or running_gb + gb(name) <= budget_gb:
      return i
  return None


def run(
  workdir: str,
  configs: Sequence[str],
  seeds: Sequence[int],
  learning_rates: Sequence[Optional[float]] = (None,),
  workers: int = 1,
  memory_gb: Optional[float] = None,
  gb=estimated_gb,
) -> int:
  """Trains every configuration × LR × seed not finished yet, one process each, ``workers`` at a time; returns how
  many failed. With ``workers`` > 1 each process gets its own share of the CPUs (pinned) and a single-threaded XLA
  (one intra-op thread per CPU of its share): on the 2-core CPU two such runs of the authors' CNN train at 819 + 771
  img/s together against 929–1,055 img/s for one run on both cores (docs/BENCHMARKS.md §18). A free slot takes
  the first waiting run whose estimated memory (``gb``) fits beside the running ones within ``memory_gb`` (default
  90% of the machine's memory): two full-batch runs with the unrolled micro-batch loop (≈ 14 GB each) do not run
  together on a 24 GiB machine; with the host loop of the full-batch paper configs (≤ 2 GB each) they do."""
  todo = [
    (name, lr, seed)
    for name in configs
    for lr in learning_rates
    for seed in seeds
    if not os.path.exists(os.path.join(run_dir(workdir, name, seed, lr), run_files.RESULT_FILE))
  ]
  ncpu = len(usable_cpus())
  share = max(1, ncpu // workers) if workers > 1 else 0
  env = dict(os.environ)
  if share:
    env["XLA_FLAGS"] = (
      env.get("XLA_FLAGS", "") + f" --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads={share}"
    ).strip()
  running: dict[int, tuple[str, subprocess.Popen, float]] = {}  # slot → (what runs, its process, its memory)
  budget = 0.9 * machine_gb() if memory_gb is None else memory_gb
  est = {name: gb(name) for name in {n for n, _, _ in todo}}  # once, before any run starts
  failed = 0
  while todo or running:
    for slot in [s for s, (_, p, _) in running.items() if p.poll() is not None]:
      what, proc, _ = running.pop(slot)
      if proc.returncode != 0:
        failed += 1
        print(f"{time.strftime('%H:%M:%S')} {what} FAILED: {_exit_reason(proc.returncode)}", flush=True)
    free = [s for s in range(max(1, workers)) if s not in running]
    while todo and free:
      i = _next_fitting(todo, sum(m for _, _, m in running.values()), budget, est.get)
      if i is None:  # nothing waiting fits beside what runs: wait for a slot to end
        break
      (name, lr, seed), slot = todo.pop(i), free.pop(0)
      out = run_dir(workdir, name, seed, lr)
      os.makedirs(out, exist_ok=True)
      cpus = slot_cpus(slot, share) if share and ncpu >= workers else None
      what = f"{name} lr {lr or 'as logged'} seed {seed}"
      print(f"{time.strftime('%H:%M:%S')} {what} → {out}" + (f" (CPUs {sorted(cpus)})" if cpus else ""), flush=True)
      with spawning_on(cpus):  # pinned by inheritance: no preexec_fn, no fork warning (executor.spawn_trial)
        proc = subprocess.Popen(_command(name, seed, out, lr), env=env)
      running[slot] = (what, proc, est[name])
    if running:
      time.sleep(1.0)
  return failed


def record_command(workdir: str, command: str) -> None:
  """Appends ``command`` to WORKDIR/commands.txt, time-stamped, with the commit of the code that runs it
  (workdir.command_line); the published manifest's ``run_commands`` are these lines."""
  from lamb_lars.study.running import workdir as wd

  os.makedirs(workdir, exist_ok=True)
  with open(os.path.join(workdir, "commands.txt"), "a") as f:
    f.write(
      f"{time.strftime('%Y-%m-%d %H:%M:%S')}  {wd.command_line(command, code_state.code_state())}{_placement()}\n"
    )


def _placement() -> str:
  """How the process was placed, when not the machine's default: its CPUs (taskset) and XLA_FLAGS, so that the
  record says which runs shared a machine how (``; CPUs [1]; XLA_FLAGS=…``)."""
  out = ""
  if hasattr(os, "sched_getaffinity") and len(os.sched_getaffinity(0)) < (os.cpu_count() or 1):
    out += f"; CPUs {sorted(os.sched_getaffinity(0))}"
  if os.environ.get("XLA_FLAGS"):
    out += f"; XLA_FLAGS={os.environ['XLA_FLAGS']!r}"
  return out


def _one(name: str, seed: int, out: str, learning_rate: Optional[float]) -> None:
  from lamb_lars.train import trainer

  trainer.train_and_evaluate(load_config(name, seed, learning_rate), out)


def _microbatch_loop(run_dir: str) -> str:
  """How the run looped over its micro-batches, from its recorded config (older runs: ``unroll_microbatches``)."""
  c = io_utils.read_json(os.path.join(run_dir, run_files.CONFIG_FILE)) or {}
  return c.get("microbatch_loop") or ("unrolled" if c.get("unroll_microbatches") else "scan" if c else "")


def _run_row(config: str, learning_rate: str, seed: int, path: str) -> list:
  with open(path) as f:
    r = json.load(f)
  acc = (r.get("final") or {}).get("eval_accuracy")
  return [
    config,
    learning_rate,
    seed,
    r["status"],
    int(r["step"]),
    "" if acc is None else f"{acc:.6f}",
    "" if r.get("train_time") is None else f"{r['train_time']:.1f}",
    _microbatch_loop(os.path.dirname(path)),
  ]


def collect(workdir: str) -> list[list]:
  """runs.csv's rows: every finished run under WORKDIR/<config>/[lr<η>/]seed<k>/result.json."""
  rows = []
  for name in paper.AUTHORS:
    base = os.path.join(workdir, name)
    for entry in sorted(os.listdir(base)) if os.path.isdir(base) else ():
      if entry.startswith("seed") and os.path.exists(os.path.join(base, entry, run_files.RESULT_FILE)):
        rows.append(_run_row(name, "", int(entry[4:]), os.path.join(base, entry, run_files.RESULT_FILE)))
      elif entry.startswith("lr"):
        for seed_dir in sorted(os.listdir(os.path.join(base, entry))):
          path = os.path.join(base, entry, seed_dir, run_files.RESULT_FILE)
          if os.path.exists(path):
            rows.append(_run_row(name, entry[2:], int(seed_dir[4:]), path))
  return rows


def _write_csv(path: str, header: Sequence[str], rows: Sequence[Sequence]) -> None:
  with open(path, "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(header)
    w.writerows(rows)


def _read_csv(path: str) -> list[dict]:
  with open(path, newline="") as f:
    return list(csv.DictReader(f))


def write_report(workdir: str, out: str, command: str) -> None:
  """runs.csv, authors.csv, README.md (computed from the CSVs) and manifest.json in ``out``."""
  code = code_state.code_state()  # before writing: the report's own files would make the checkout look edited
  os.makedirs(out, exist_ok=True)
  _write_csv(os.path.join(out, "runs.csv"), authors_logs.RUNS_COLUMNS, collect(workdir))
  _write_csv(os.path.join(out, "authors.csv"), authors_logs.AUTHORS_COLUMNS, authors_logs.authors_rows())
  with open(os.path.join(out, "README.md"), "w") as f:
    f.write(authors_logs.render(_read_csv(os.path.join(out, "runs.csv")), command, authors_logs.PATHS))
  commands = os.path.join(workdir, "commands.txt")  # how the runs were launched, at which commit (record_command)
  manifest = dict(
    kind=KIND,
    verifier=VERIFIER,
    paths=authors_logs.PATHS,
    code=code,
    report_command=command,
    run_commands=open(commands).read().splitlines() if os.path.exists(commands) else [],
    machine=code_state.machine(),
    runs=len(collect(workdir)),
    files={n: code_state.sha256(os.path.join(out, n)) for n in FILES},
  )
  manifest_lib.write_manifest(out, manifest)


def verify(out: str, manifest: dict) -> list[str]:
  """The mismatches of a published comparison with its manifest: file hashes, authors.csv against
  :data:`lamb_lars.proj.you2020.paper.AUTHORS`, and the README recomputed from runs.csv (one sentence each)."""
  problems = [
    f"{n} has sha256 {code_state.sha256(os.path.join(out, n))[:12]}…, the manifest says "
    f"{str(manifest.get('files', {}).get(n))[:12]}…."
    for n in FILES
    if not os.path.isfile(os.path.join(out, n))
    or code_state.sha256(os.path.join(out, n)) != manifest.get("files", {}).get(n)
  ]
  if problems:
    return problems
  theirs = [list(r.values()) for r in _read_csv(os.path.join(out, "authors.csv"))]
  if theirs != authors_logs.authors_rows():
    problems.append("authors.csv differs from the authors' logs transcribed in lamb_lars/proj/you2020/paper.py.")
  runs = _read_csv(os.path.join(out, "runs.csv"))
  if len(runs) != manifest.get("runs"):
    problems.append(f"runs.csv has {len(runs)} runs, the manifest says {manifest.get('runs')}.")
  with open(os.path.join(out, "README.md")) as f:
    if f.read() != authors_logs.render(
      runs, manifest.get("report_command", ""), manifest.get("paths") or authors_logs.LEGACY_PATHS
    ):
      problems.append("README.md differs from the one recomputed from runs.csv.")
  return problems


def main(argv: Optional[Sequence[str]] = None) -> int:
  ap = argparse.ArgumentParser(prog="python -m lamb_lars.proj.you2020.paper_logs", description=__doc__.split("\n\n")[0])
  sub = ap.add_subparsers(dest="cmd", required=True)
  r = sub.add_parser("run")
  r.add_argument("--workdir", required=True)
  r.add_argument("--seeds", default="0,1")
  r.add_argument("--configs", default=",".join(paper.AUTHORS))
  r.add_argument("--workers", type=int, default=1, help="runs at once, each pinned to its share of the CPUs")
  r.add_argument(
    "--memory_gb",
    type=float,
    default=None,
    help="host memory the runs at once may use (default: 90%% of the machine's); see estimated_gb",
  )
  r.add_argument(
    "--slice_lrs", default="", help=f"also run {paper.SLICE_CONFIG} at these LRs (the response-surface slice)"
  )
  p = sub.add_parser("report")
  p.add_argument("--workdir", required=True)
  p.add_argument("--out", required=True)
  o = sub.add_parser("one")
  o.add_argument("name")
  o.add_argument("seed", type=int)
  o.add_argument("out")
  o.add_argument("--learning_rate", type=float, default=None)
  a = ap.parse_args(argv)
  if a.cmd == "one":
    _one(a.name, a.seed, a.out, a.learning_rate)
    return 0
  if a.cmd == "run":
    unknown = set(a.configs.split(",")) - set(paper.AUTHORS)
    if unknown:
      print(f"error: unknown configuration(s) {sorted(unknown)}; known: {', '.join(paper.AUTHORS)}.", file=sys.stderr)
      return 2
    seeds = [int(s) for s in a.seeds.split(",")]
    record_command(a.workdir, " ".join(["python -m lamb_lars.proj.you2020.paper_logs"] + list(argv or sys.argv[1:])))
    failed = run(a.workdir, a.configs.split(","), seeds, workers=a.workers, memory_gb=a.memory_gb)
    if a.slice_lrs:
      failed += run(
        a.workdir,
        [paper.SLICE_CONFIG],
        seeds,
        [float(x) for x in a.slice_lrs.split(",")],
        workers=a.workers,
        memory_gb=a.memory_gb,
      )
    print(f"finished: {failed} run(s) failed")
    return 1 if failed else 0
  command = " ".join(["python -m lamb_lars.proj.you2020.paper_logs"] + list(argv or sys.argv[1:]))
  write_report(a.workdir, a.out, command)
  return 0


if __name__ == "__main__":
  sys.exit(main())
