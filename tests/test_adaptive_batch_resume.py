"""An adaptive-batch run killed by SIGKILL and resumed across a batch change (tests/kill_at_step.py) writes exactly
the uninterrupted run's metrics.jsonl, batch_decisions.jsonl and result.json, timing aside: resumed from a
checkpoint after the change (the stages come back from its metadata) and from one before it (the resumed run makes
the same decision again). LeNet-5 on 512 synthetic examples, one CPU device with 2 micro-batches. With a ``branch``
self-audit (lamb_lars/train/self_audit.py) the same holds, and batch_audits.jsonl too: resumed after the audit it is
not repeated, resumed before it the audit runs again on the same state and data."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys

import pytest

from lamb_lars.common import io_utils
from test_resume import ENV, REPO, final, rows

ARGS = {
  "dataset": "synthetic",
  "synthetic.num_train": 512,
  "synthetic.num_eval": 64,
  "batch_size": 16,
  "eval_batch_size": 64,
  "num_train_steps": 40,  # 640 examples
  "num_microbatches": 2,
  "data_order": "examples",
  "batch_schedule": "adaptive",
  "adaptive_batch.every_steps": 8,  # a decision every 128 examples
  "adaptive_batch.every_epochs": -1.0,
  "adaptive_batch.ladder": "(16,32,64)",
  "eval_every_steps": 4,  # 64 examples
  "checkpoint_every_steps": 6,  # 96 examples: never on a decision's boundary alone
  "keep_checkpoints": 20,
  "progress": False,
}


AUDITED = {
  "validation_split": 64,  # the audit compares validation losses
  "batch_schedule_unit": "examples",
  "adaptive_batch.audit_points": "200",  # the first decision at or after 200 examples audits
  "adaptive_batch.audit_delta_examples": 64,
  "adaptive_batch.audit_sizes": 2,
}


def _train(workdir, kill_at=None, extra=None):
  script = ["tests/kill_at_step.py", str(kill_at)] if kill_at is not None else ["train.py"]
  cmd = [sys.executable, *script, "--config=lamb_lars/configs/mnist_lenet.py", f"--workdir={workdir}"]
  cmd += [f"--config.{k}={v}" for k, v in {**ARGS, **(extra or {})}.items()]
  return subprocess.run(cmd, cwd=REPO, env=ENV, capture_output=True, text=True, timeout=600)


def _decisions(workdir):
  return io_utils.read_jsonl(os.path.join(workdir, "batch_decisions.jsonl"))


def _checkpoints(workdir):
  return sorted(int(os.path.basename(d)) for d in glob.glob(os.path.join(workdir, "checkpoints", "*")))


def _audits(workdir):
  """batch_audits.jsonl without ``seconds`` (wall time, the audit's one timing field)."""
  path = os.path.join(workdir, "batch_audits.jsonl")
  if not os.path.exists(path):
    return None
  return [{k: v for k, v in r.items() if k != "seconds"} for r in io_utils.read_jsonl(path)]


@pytest.mark.slow
@pytest.mark.parametrize("extra", [None, AUDITED], ids=["plain", "self_audit"])
def test_a_kill_across_a_batch_change_resumes_bit_exactly(tmp_path, extra):
  ref, killed = tmp_path / "ref", tmp_path / "killed"
  out = _train(ref, extra=extra)
  assert out.returncode == 0, out.stderr[-3000:]
  changes = [r for r in _decisions(ref) if r["to"] != r["from"]]
  assert changes, "the noise scale of random labels should grow the batch"
  s1 = changes[0]["step"]
  assert 6 in _checkpoints(ref) and s1 >= 8  # a checkpoint before the first change
  if extra:
    audits = _audits(ref)
    assert audits and all(a["kappa_after"] is not None for a in audits), audits
    assert audits[0]["step"] <= s1, "the audit comes before the change, so 'before' below re-runs it"
  out = _train(killed, kill_at=s1 + 4, extra=extra)
  assert out.returncode == -9, out.stderr[-3000:]
  assert not (killed / "result.json").exists()
  after = [c for c in _checkpoints(killed) if c > s1]
  assert after, "the kill should land after a checkpoint that follows the change"

  before = tmp_path / "before"  # as if killed before any checkpoint after the change was written
  shutil.copytree(killed, before)
  for step in _checkpoints(before):
    if step >= s1:
      shutil.rmtree(before / "checkpoints" / str(step))

  for run in (killed, before):
    out = _train(run, extra=extra)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Resumed from step" in out.stdout
    assert rows(run) == rows(ref)
    assert _decisions(run) == _decisions(ref)
    assert final(run) == final(ref)
    assert _audits(run) == _audits(ref)
