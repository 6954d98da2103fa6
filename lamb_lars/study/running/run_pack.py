"""Several trials of a study as one packed process: ``python -m lamb_lars.study.running.run_pack RUN_DIR...``.

The packed counterpart of :mod:`lamb_lars.study.running.run_one`: reads each ``RUN_DIR/trial_config.json``, holds
each run dir's lock while it trains, and calls :func:`lamb_lars.train.packed.train_pack`, which writes each trial's
files as an unpacked trial would (and ``result.json`` as soon as that slot ends). A crash writes ``error.txt`` into
every run dir that has no result yet, and the exit code is 1.
"""

from __future__ import annotations

import sys
from typing import Optional

from lamb_lars.common import run_files, workdir_lock
from lamb_lars.study.running import run_one


def main(argv: Optional[list[str]] = None) -> int:
  run_dirs = sys.argv[1:] if argv is None else argv
  if not run_dirs:
    print("usage: python -m lamb_lars.study.running.run_pack RUN_DIR...", file=sys.stderr)
    return 2
  run_one.die_with_parent()  # as run_one does: a driver killed from here on takes this pack with it
  locks = []
  try:
    for d in run_dirs:
      locks.append(run_one.acquire_lock(d))
  except RuntimeError as e:
    for d in run_dirs:
      run_one.write_error(d, e)
    for lock in locks:
      workdir_lock.release(lock)
    return 1
  try:
    from absl import logging

    logging.set_verbosity(logging.WARNING)  # orbax logs every save at INFO
    run_one.enable_compilation_cache()
    from lamb_lars.train.packed import train_pack

    results = train_pack(
      [run_one.load_trial_config(d) for d in run_dirs],
      run_dirs,
      hparams=[run_one.load_trial_hparams(d) for d in run_dirs],
    )
    for d, r in zip(run_dirs, results):
      print(f"{d}: {r['status']}: step {r.get('step')}/{r.get('total_steps')}", flush=True)
    return 0
  except Exception as e:  # noqa: BLE001  (every crash becomes a recorded 'failed' run of each unfinished slot)
    text = ""
    for d in run_dirs:
      if run_files.read_result(d) is None:
        text = run_one.write_error(d, e)
    print(text or run_one.write_error(run_dirs[0], e), end="", flush=True)
    return 1
  finally:
    for lock in locks:
      workdir_lock.release(lock)


if __name__ == "__main__":
  sys.exit(main())
