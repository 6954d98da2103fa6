"""``python tests/kill_pack_at_step.py STEP RUN_DIR...``: a packed process (``run_pack``) killed by SIGKILL right after
the first slot's host work at step STEP (its evaluation row written and its checkpoint complete), before the other
slots' work at that step: the slots' newest checkpoints are then at different steps. A test harness
(tests/test_packed.py)."""

import os
import signal
import sys

from lamb_lars.train import loop

KILL_AT = int(sys.argv.pop(1))
_at_boundary = loop._Run.at_boundary


def _at_boundary_then_kill(self, train_state, ckpt):
  _at_boundary(self, train_state, ckpt)
  if self.step >= KILL_AT:
    ckpt._mngr.wait_until_finished()  # the kill lands after this slot's checkpoint is complete
    os.kill(os.getpid(), signal.SIGKILL)


loop._Run.at_boundary = _at_boundary_then_kill

if __name__ == "__main__":
  from lamb_lars.study.running import run_pack

  sys.exit(run_pack.main())
