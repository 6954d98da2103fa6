"""Command-line entry: train and evaluate one config (``train.py`` at the repo root, or ``lamb_lars_train``).

  python train.py --config=lamb_lars/configs/mnist_lenet.py --workdir=runs/mnist_lenet \
      --config.batch_size=8192 --config.optimizer.name=lamb

The config is locked: a misspelled key fails with a message naming it. Re-running the same command resumes from
the newest checkpoint in --workdir; a changed config there is refused. Every mistake (config, data, workdir) is one
sentence and exit status 2 (``lamb_lars/common/cli_errors.py``); ``--verbose`` shows its traceback. Importing this
module defines no flags (``train_and_evaluate`` is importable
from a notebook); flags exist only when it runs as a script.
"""

from __future__ import annotations

import signal
import sys

from lamb_lars.train import loop
from lamb_lars.train.trainer import train_and_evaluate


def main() -> None:
  from absl import app, flags
  from ml_collections import config_flags

  from lamb_lars.common import cli_errors, cli_help, io_utils, library_noise, run_files

  sys.modules["__main__"].__doc__ = cli_help.usage()  # --help text
  config_flags.DEFINE_config_file(
    "config", None, "Training config file (e.g. lamb_lars/configs/mnist_lenet.py).", lock_config=True
  )
  flags.DEFINE_string("workdir", None, "Directory for checkpoints, metrics.jsonl, TensorBoard logs, result.json.")
  flags.DEFINE_bool("verbose", False, "Show the traceback of a config, data or workdir mistake too.")
  flags.mark_flags_as_required(["config", "workdir"])

  def run(argv):
    from absl import logging

    logging.set_verbosity(logging.WARNING)  # orbax logs every save at INFO
    if len(argv) > 1:  # a stray word (an unquoted space in a value, a missing --): one sentence, exit 2
      print(
        f"error: unexpected argument {argv[1]!r}; every setting is a flag (--config.KEY=VALUE, --workdir=DIR).",
        file=sys.stderr,
      )
      sys.exit(2)
    config = cli_errors.load_config(lambda: flags.FLAGS.config, flags.FLAGS["config"].config_filename)
    cli_errors.check_gcs_access(flags.FLAGS.workdir)
    for sig in (signal.SIGINT, signal.SIGTERM):
      signal.signal(sig, loop.request_stop)
    if not cli_errors.verbose():  # orbax's background-thread tracebacks to <workdir>/log.txt, not before our sentence
      library_noise.keep_to_log_file(io_utils.local_path(flags.FLAGS.workdir, run_files.LOG_FILE))
    try:
      result = train_and_evaluate(config, flags.FLAGS.workdir)
    except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM: one line, rc 130 / 143 (128 + the signal)
      cli_errors.exit_interrupted(e)
    except Exception as e:  # config, data and workdir mistakes: one sentence, no traceback; bugs keep theirs
      cli_errors.exit_on_mistake(e, value_errors=False)
      raise
    final = result.get("final") or {}
    acc = final.get("eval_accuracy")
    flag = f" (not_learning: {result['not_learning']})" if result.get("not_learning") else ""
    print(
      f"{result['status']}{flag}: step {result['step']}/{result.get('total_steps')}"
      + (f", eval accuracy {100 * acc:.2f}%" if acc is not None else "")
      + (f" ({result['error']})" if result.get("error") else "")
    )

  app.run(run, flags_parser=cli_errors.flags_parser)


if __name__ == "__main__":
  main()
