r"""Command line of the batch-size studies.

  python -m lamb_lars.study run --config=lamb_lars/configs/studies/mnist_table3.py --workdir=/tmp/studies/table3 \
      [--num_workers=2] [--executor=local|ray] [--ray_address=auto|HOST:PORT] [--pack=K|auto]
      [--dry_run [--nocalibrate]]
  python -m lamb_lars.study branch --config=lamb_lars/configs/studies/mnist_branching.py \
      --workdir=/tmp/studies/branching [--num_workers=2] [--executor=local|ray] [--ray_address=auto|HOST:PORT]
  python -m lamb_lars.study report --workdir=/tmp/studies/table3 [--out=docs/studies/mnist_table3_robust]
  python -m lamb_lars.study verify docs/studies/mnist_table3_robust [DIR ...]
  python -m lamb_lars.study rereport docs/studies/mnist_table3_robust [DIR ...] [--fit_rule=measured]
  python -m lamb_lars.study status --workdir=/tmp/studies/table3
  python -m lamb_lars.study snapshot --workdir=/tmp/studies/table3 --out=studies_carry/table3

``run`` expands the study into trials, runs each in its own process (searching and pruning per cell) and records
everything in ``<workdir>/study.sqlite``; re-running the same command skips finished trials and resumes the rest.
``branch`` runs a branching study (lamb_lars/study/running/branches.py): its reference run, then the branches from the
reference's checkpoints, through the same runner and store (re-running it resumes). ``report`` needs only the workdir:
it writes runs.csv, evals.csv and README.md + PNGs computed from the CSVs, and
manifest.json (provenance). ``verify`` checks a published folder against its manifest and recomputes its README from
the CSVs; it exits 1 with one sentence per mismatch. ``rereport`` recomputes a published folder's README and
figures from its own CSVs at the current (clean) commit, after the analysis changed, and records that in its
manifest (``rereports``); the runs, the CSVs and their hashes stay as they were. With ``--fit_rule=measured``
a folder published before issue 62 adopts its rule (a B_crit fit over fewer than three batch sizes, or at an edge,
reads "not measured (why)"), recorded in the manifest.
``run --dry_run`` lists the trials and prints the study's predicted wall time on this machine, from a calibration
of its trials through the local executor (at most three short runs per group of trials alike but for their batch
and optimizer; running/calibration.py, running/wall_time.py); ``--nocalibrate`` prints the plan without it.
The study config is locked: a misspelled ``--config.`` override is an error. Every trial config is validated (by
the validator ``train.py`` uses) before any trial runs; a mistake is one sentence and exit status 2
(``--verbose`` shows the traceback). ``run`` exits 1 when trials failed, listing each failure's line.
``run`` and ``branch`` refuse to start a study whose config file has uncommitted changes (``--allow_dirty``
overrides); the commit that last changed it is recorded as its pre-registration (publishing/preregistration.py).
``status`` prints where the study stands (trials done/pruned/diverged/failed/running/pending, a rough ETA, the
running trials' epochs), read from the store; ``run`` prints the same every minute.
``snapshot`` copies what the study needs to be resumed elsewhere (the store, its config and commands, each trial's
run files, the newest checkpoint of each running trial) without the other checkpoints or TensorBoard files
(``--running_checkpoints=False``: without those either), for a study that outlives its machine or session
(lamb_lars/study/running/snapshot.py): copy it to a workdir and re-run the study's command there.
A snapshot is never committed to the repository: a study longer than a session is split into parts that each fit
one and are published as they land (docs/studies.md, "Sizing a study").
The search's Optuna studies are mirrored in ``<workdir>/optuna.db`` (``optuna-dashboard sqlite:///WORKDIR/optuna.db``;
for a gs:// workdir the file is in the workdir's machine-local folder, ``io_utils.local_path``).
"""

from __future__ import annotations

import shlex
import signal
import sys


def _raise_interrupt(signum, frame):  # SIGTERM → KeyboardInterrupt: the runner kills its children cleanly
  raise KeyboardInterrupt(f"signal {signum}")


def _define_flags():
  from absl import flags
  from ml_collections import config_flags

  config_flags.DEFINE_config_file(
    "config", None, "Study config file (lamb_lars/configs/studies/*.py).", lock_config=True
  )
  flags.DEFINE_string("workdir", None, "Study directory: study.sqlite, study_config.json, runs/<run_id>/.")
  flags.DEFINE_string(
    "out", None, "report: output directory (default <workdir>/report); snapshot: the snapshot's folder (required)."
  )
  flags.DEFINE_string(
    "code_dir",
    None,
    "snapshot: the git checkout the study runs from, whose commit the snapshot "
    "records (default: the one this command runs from).",
  )
  flags.DEFINE_bool(
    "running_checkpoints",
    True,
    "snapshot: keep the newest finished checkpoint of each running or failed trial, so that it resumes there "
    "(False: it trains from step 0).",
  )
  flags.DEFINE_integer("num_workers", None, "run: trials at once (default config.runner.num_workers).")
  flags.DEFINE_bool(
    "dry_run",
    False,
    "run: list the trials, then the predicted wall time on this machine from a short calibration, and exit; "
    "branch: the reference and the branch points.",
  )
  flags.DEFINE_bool(
    "calibrate",
    True,
    "run --dry_run: measure each trial shape for the predicted wall time (--nocalibrate: the plan only).",
  )
  flags.DEFINE_string(
    "pack",
    "1",
    "run: trials per process, the compatible ones (same model, batch size, data) trained as slots of one vmapped "
    "program: an integer, or 'auto' (packs on a GPU/TPU, none on a CPU, where packing is slower; docs/studies.md).",
  )
  flags.DEFINE_enum("executor", "local", ["local", "ray"], "run: where trials run (local processes or a Ray cluster).")
  flags.DEFINE_string("ray_address", "auto", "run --executor=ray: the cluster ('auto' or HOST:PORT).")
  flags.DEFINE_bool(
    "allow_dirty",
    False,
    "run/branch: start a study whose config file has uncommitted changes "
    "(its thresholds are then not pre-registered; the manifest says so).",
  )
  flags.DEFINE_bool("verbose", False, "Show the traceback of a config, store or workdir mistake too.")
  flags.mark_flags_as_required(["workdir"])
  return flags.FLAGS


def _command() -> str:
  return " ".join(shlex.quote(a) for a in ["python", "-m", "lamb_lars.study"] + sys.argv[1:])


def _executor(FLAGS, study):  # noqa: N803
  """The executor ``--executor`` names for ``study`` (None: the runner's local one)."""
  if FLAGS.executor != "ray":
    return None
  try:
    from lamb_lars.study.running import ray_executor
  except ImportError:
    raise ValueError("--executor=ray needs Ray: pip install -e .[ray]") from None
  return ray_executor.make_executor(study, FLAGS.ray_address)


def _run(FLAGS, command: str) -> None:  # noqa: N803
  """``run``: the study of ``--config`` in ``--workdir`` (or with ``--dry_run`` its trials, listed); ``branch``: a
  branching study (its reference, then its branches)."""
  from absl import app

  from lamb_lars.common import cli_errors

  if not FLAGS["config"].present:
    raise app.UsageError(f"{command} needs --config=lamb_lars/configs/studies/<study>.py")
  study = cli_errors.load_config(lambda: FLAGS.config, FLAGS["config"].config_filename)
  from lamb_lars.study.running import branches, runner, sweep
  from lamb_lars.study.running import pack_executor

  pack_executor.resolve_pack(FLAGS.pack)  # a bad --pack is one sentence before anything is written

  if branches.is_branching(study) != (command == "branch"):
    raise ValueError(
      "a study with branch sub-sweeps (role 'branch') runs with `python -m lamb_lars.study branch`, "
      "and only such a study does."
    )
  if FLAGS.dry_run and command == "branch":
    ref, examples = branches.prepare(study)
    print(ref.run_id, "reference", dict(ref.overrides), "branch points (examples):", examples)
    return
  if FLAGS.dry_run:
    _dry_run(FLAGS, study)
    return
  from lamb_lars.study.publishing import preregistration
  from lamb_lars.study.running import sections

  if preregistration.load(FLAGS.workdir) is None:  # a new study: its trials checked first, so a mistake writes nothing
    if command == "branch":
      branches.prepare(study)
    else:
      sweep.expand(study)
      runner.checked_settings(study)
  preregistration.register(
    FLAGS.workdir,
    FLAGS["config"].config_filename,
    FLAGS.allow_dirty,
    [a for a in sys.argv[1:] if a.startswith("--config.")],
    analysis=sections.section(study, "analysis"),
  )
  signal.signal(signal.SIGTERM, _raise_interrupt)
  log = lambda s: print(s, flush=True)
  if command == "branch":
    counts = branches.run_branching(
      study,
      FLAGS.workdir,
      make_executor=lambda: _executor(FLAGS, study),
      num_workers=FLAGS.num_workers,
      command=_command(),
      log=log,
    )
  else:
    counts = _run_study(FLAGS, study, log)
  print("finished: " + ", ".join(f"{k} {v}" for k, v in counts.items() if v), flush=True)
  if counts.get("failed"):
    _exit_failed(FLAGS.workdir, study.name)


def _dry_run(FLAGS, study) -> None:  # noqa: N803
  """``run --dry_run``: the trials, one line each, then the plan and its predicted wall time on this machine
  (running/calibration.py, running/wall_time.py)."""
  import time

  from lamb_lars.study.running import calibration, runner, sweep

  started = time.monotonic()
  specs = sweep.expand(study)
  runner.checked_settings(study)
  runner_s = time.monotonic() - started
  for t in specs:
    print(t.run_id, t.role, t.technique or "-", dict(t.overrides))
  executor = runner.make_executor(study, FLAGS.num_workers)
  log = lambda s: print(s, flush=True)
  for line in calibration.dry_run_lines(study, specs, executor, runner_s, FLAGS.calibrate, log):
    print(line, flush=True)


def _run_study(FLAGS, study, log):  # noqa: N803
  """``run`` of a study without branches: its counts per status."""
  from lamb_lars.study.running import runner

  return runner.run_study(
    study,
    FLAGS.workdir,
    executor=_executor(FLAGS, study),
    num_workers=FLAGS.num_workers,
    command=_command(),
    log=log,
    pack=FLAGS.pack,
  )


def _subcommand_help() -> None:
  """``verify --help`` / ``rereport --help``: the module's usage (these two take folders, not absl flags), exit 0."""
  if sys.argv[1:2] in (["verify"], ["rereport"]) and any(
    a in ("-h", "--help", "-?", "--helpfull") for a in sys.argv[2:]
  ):
    print(__doc__)
    sys.exit(0)


def main() -> None:
  _subcommand_help()
  if sys.argv[1:2] == ["verify"]:  # folders; --workdir=DIR (the form every other subcommand takes) is one of them
    from lamb_lars.study.publishing import provenance

    sys.exit(
      provenance.main(
        [a.split("=", 1)[1] if a.startswith("--workdir=") else a for a in sys.argv[2:] if a != "--workdir"]
      )
    )
  if sys.argv[1:2] == ["rereport"]:
    from lamb_lars.study.publishing import provenance

    sys.exit(provenance.rereport_main(sys.argv[2:]))
  from absl import app

  from lamb_lars.common import cli_errors

  FLAGS = _define_flags()

  def run(argv):
    from absl import logging

    logging.set_verbosity(logging.WARNING)
    if len(argv) != 2 or argv[1] not in ("run", "branch", "report", "status", "snapshot"):
      raise app.UsageError(
        "usage: python -m lamb_lars.study {run|branch|report|status|snapshot} --workdir=DIR "
        "[--config=STUDY.py] | verify DIR | rereport DIR"
      )
    try:
      if argv[1] == "status":
        from lamb_lars.study.running import status

        signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `status | head` ends quietly, as a Unix reader does
        print(status.report(FLAGS.workdir))
      elif argv[1] == "snapshot":
        _snapshot(FLAGS)
      elif argv[1] == "report":
        from lamb_lars.study.publishing.publish import publish

        print(publish(FLAGS.workdir, FLAGS.out, command=_command()))
      else:
        _run(FLAGS, argv[1])
    except KeyboardInterrupt:
      print("interrupted: unfinished runs are back to pending; re-run the same command to resume.", flush=True)
      sys.exit(130)
    except Exception as e:  # a bad study config, store or workdir: one sentence, no traceback; bugs keep theirs
      cli_errors.exit_on_mistake(e)
      raise

  app.run(run, flags_parser=cli_errors.flags_parser)


def _snapshot(FLAGS) -> None:  # noqa: N803
  """``snapshot``: copies what the study needs to be resumed elsewhere (running/snapshot.py) and says what it holds."""
  from absl import app

  if not FLAGS.out:
    raise app.UsageError("snapshot needs --out=DIR, the folder to write the snapshot to")
  from lamb_lars.study.running import snapshot

  record = snapshot.snapshot(FLAGS.workdir, FLAGS.out, FLAGS.code_dir, FLAGS.running_checkpoints)
  print(
    f"snapshot of {FLAGS.workdir} in {FLAGS.out}: trials "
    + ", ".join(f"{k} {v}" for k, v in record["trials"].items())
    + f"; code {record['code']['commit']}"
    + (" (dirty)" if record["code"]["dirty"] else "")
    + "".join(
      f"; kept {run_id}'s branch-point checkpoints {steps}" for run_id, steps in record["kept_branch_points"].items()
    )
    + "".join(
      f"; kept running {run_id}'s checkpoint at step {step}"
      for run_id, step in record["kept_running_checkpoints"].items()
    )
    + f"; checkpoints {record['checkpoint_mb']} MB"
  )
  for why in record["missing_branch_points"]:
    print(f"warning: a branch point's checkpoint is not in the workdir, so not in the snapshot: {why}")


def _exit_failed(workdir: str, study_name: str) -> None:
  """Exit status 1, after one line per failed trial (its error's first line; a traceback's last)."""
  from lamb_lars.study.running import status, store
  from lamb_lars.study.running import workdir as wd

  con = store.open_store(wd.store_path(workdir))
  try:
    failed = status.failures(con, study_name)
  finally:
    con.close()
  print(f"{len(failed)} trial(s) failed; re-run the same command to retry them:", file=sys.stderr)
  for run_id, line in failed:
    print(f"  {run_id}: {line}", file=sys.stderr)
  sys.exit(1)


if __name__ == "__main__":
  main()
