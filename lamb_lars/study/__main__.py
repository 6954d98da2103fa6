"""Command line of the batch-size studies.

  python -m lamb_lars.study run --config=configs/studies/mnist_table3.py --workdir=/tmp/studies/table3 \
      [--num_workers=2] [--executor=local|ray] [--ray_address=auto|HOST:PORT] [--dry_run]
  python -m lamb_lars.study report --workdir=/tmp/studies/table3 [--out=docs/studies/mnist_table3]

``run`` expands the study into trials, runs each in its own process (searching and pruning per cell) and records
everything in ``<workdir>/study.sqlite``; re-running the same command skips finished trials and resumes the rest.
``report`` needs only the workdir: it writes runs.csv, evals.csv and README.md + PNGs computed from the CSVs.
The study config is locked: a misspelled ``--config.`` override is an error.
"""
from __future__ import annotations

import os
import shlex
import signal
import sys

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _raise_interrupt(signum, frame):  # SIGTERM → KeyboardInterrupt: the runner kills its children cleanly
  raise KeyboardInterrupt(f"signal {signum}")


def main() -> None:
  if _REPO_ROOT not in sys.path:
    sys.path.insert(0, _REPO_ROOT)  # study configs import `configs.*` from the repo root
  from absl import app, flags
  from ml_collections import config_flags

  config_flags.DEFINE_config_file("config", None, "Study config file (configs/studies/*.py).", lock_config=True)
  flags.DEFINE_string("workdir", None, "Study directory: study.sqlite, study_config.json, runs/<run_id>/.")
  flags.DEFINE_string("out", None, "report: output directory (default <workdir>/report).")
  flags.DEFINE_integer("num_workers", None, "run: trials at once (default config.runner.num_workers).")
  flags.DEFINE_bool("dry_run", False, "run: list the trials and exit.")
  flags.DEFINE_enum("executor", "local", ["local", "ray"], "run: where trials run (local processes or a Ray cluster).")
  flags.DEFINE_string("ray_address", "auto", "run --executor=ray: the cluster ('auto' or HOST:PORT).")
  flags.mark_flags_as_required(["workdir"])
  FLAGS = flags.FLAGS

  def run(argv):
    from absl import logging
    logging.set_verbosity(logging.WARNING)
    if len(argv) != 2 or argv[1] not in ("run", "report"):
      raise app.UsageError("usage: python -m lamb_lars.study {run|report} --workdir=DIR [--config=STUDY.py]")
    try:
      if argv[1] == "report":
        from lamb_lars.study.publish import publish
        print(publish(FLAGS.workdir, FLAGS.out))
        return
      if FLAGS.config is None:
        raise app.UsageError("run needs --config=configs/studies/<study>.py")
      from lamb_lars.study import runner, sweep
      if FLAGS.dry_run:
        for t in sweep.expand(FLAGS.config):
          print(t.run_id, t.role, t.technique or "-", dict(t.overrides))
        return
      executor = None
      if FLAGS.executor == "ray":
        try:
          from lamb_lars.study import ray_executor
        except ImportError:
          raise ValueError("--executor=ray needs Ray: pip install -e .[ray]") from None
        executor = ray_executor.make_executor(FLAGS.config, FLAGS.ray_address)
      signal.signal(signal.SIGTERM, _raise_interrupt)
      command = " ".join(shlex.quote(a) for a in ["python", "-m", "lamb_lars.study"] + sys.argv[1:])
      counts = runner.run_study(FLAGS.config, FLAGS.workdir, executor=executor, num_workers=FLAGS.num_workers,
                                command=command, log=lambda s: print(s, flush=True))
    except ValueError as e:  # a bad study config: one sentence, no traceback
      print(f"error: {e}", file=sys.stderr)
      sys.exit(2)
    except KeyboardInterrupt:
      print("interrupted: unfinished runs are back to pending; re-run the same command to resume.", flush=True)
      sys.exit(130)
    print("finished: " + ", ".join(f"{k} {v}" for k, v in counts.items() if v), flush=True)

  app.run(run)


if __name__ == "__main__":
  main()
