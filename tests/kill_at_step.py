"""``python tests/kill_at_step.py STEP train.py-arguments...``: train.py, killed by SIGKILL right after the loop's
host work at step STEP (its evaluation row written, and the checkpoint saves under way finished), so that a kill
lands at a chosen point between two checkpoints, deterministically. A test harness (tests/test_resume.py)."""

import os
import signal
import sys

from lamb_lars.train import loop

KILL_AT = int(sys.argv.pop(1))
_at_boundary = loop._Run.at_boundary


def _at_boundary_then_kill(self, train_state, ckpt):
  _at_boundary(self, train_state, ckpt)
  if self.step >= KILL_AT:
    ckpt._mngr.wait_until_finished()  # the kill lands after the last checkpoint is complete, as a slow kill would
    os.kill(os.getpid(), signal.SIGKILL)


loop._Run.at_boundary = _at_boundary_then_kill

if __name__ == "__main__":
  from lamb_lars import main

  main.main()
