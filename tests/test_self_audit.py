"""The adaptive batch's branch self-audit (lamb_lars/train/self_audit.py): the bracket against an independent float64
reference written from the module docstring's rule and against the branching study's single-seed analysis
(lamb_lars/study/analysis/branching.py), Δ', the sizes, when an audit is due, one-sentence errors before compiling,
and a run whose audit branches reproduce what ordinary fixed-schedule runs of the trainer reach on the same data.
Bit-exact resume across an audit: tests/test_adaptive_batch_resume.py."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

from lamb_lars.configs import mnist_lenet
from lamb_lars.study.analysis import branching
from lamb_lars.train import run_plan, validate
from lamb_lars.train import self_audit as sa


def reference_bracket(losses, batch, eps_rel):
  """The rule as stated, float64, apart from the module: (low, high, censored, verdicts)."""
  ref = np.float64(losses[batch])
  eps = np.float64(eps_rel) * ref
  sizes = sorted(b for b in losses if b != batch)
  verdicts = {}
  for b in sizes:
    x = np.float64(losses[b])
    d = np.inf if (not np.isfinite(x) or x >= 1e10) else x - ref
    lo_end, hi_end = d - eps / 2, d + eps / 2  # one value ± ε/2
    verdicts[b] = "pass" if hi_end <= eps else ("fail" if lo_end > eps else "borderline")
  low = high = batch
  for b in sizes:  # the largest size with every size up to it passing / none failing
    if all(verdicts[c] == "pass" for c in sizes if c <= b):
      low = b
    if all(verdicts[c] != "fail" for c in sizes if c <= b):
      high = b
  censored = bool(sizes) and all(v == "pass" for v in verdicts.values())
  return low, high, censored, verdicts


def _cases(n=400, seed=0):
  rng = np.random.default_rng(seed)
  for _ in range(n):
    batch = int(rng.choice([16, 32, 64]))
    k = int(rng.integers(0, 5))
    ref = float(rng.uniform(0.05, 3.0))
    losses = {batch: ref}
    for j in range(1, k + 1):
      x = ref * (1 + float(rng.normal(0.1 * j, 0.25)))
      losses[batch * 2**j] = float(rng.choice([x, x, x, x, math.inf, math.nan, 2e10]))
    yield losses, batch, float(rng.choice([0.05, 0.2, 0.5]))


def test_the_bracket_matches_an_independent_reference_over_random_cases():
  seen = set()
  for losses, batch, eps in _cases():
    c = sa.critical(losses, batch, eps)
    low, high, censored, verdicts = reference_bracket(losses, batch, eps)
    assert (c["low"], c["high"], c["censored"]) == (low, high, censored)
    assert c["verdicts"] == verdicts
    seen |= set(verdicts.values())
  assert seen == {"pass", "fail", "borderline"}  # the cases reach every verdict


def test_the_bracket_is_the_branching_studys_single_seed_analysis():
  """lamb_lars/study/analysis/branching.py with one branch seed and ε relative gives the same verdicts and bracket
  (it says None where no size above B passes; the audit says B)."""
  for losses, batch, eps in _cases(200, seed=1):
    if len(losses) < 2:
      continue
    rows = [branching.BranchLoss(1.0, b, 0, x) for b, x in losses.items()]
    theirs = branching.critical_batch(rows, 1.0, batch, eps, relative=True)
    ours = sa.critical(losses, batch, eps)
    assert {b: v.verdict for b, v in theirs.verdicts.items()} == ours["verdicts"]
    assert (theirs.low or batch, theirs.high or batch, theirs.censored) == (ours["low"], ours["high"], ours["censored"])


def test_hand_worked_audit_record():
  # continuation 1.0, ε = 0.2 → 0.2 absolute, tolerance 0.1: 32 +0.05 pass, 64 +0.15 borderline, 128 +0.4 fail
  r = sa.record(
    step=8,
    examples=128,
    batch=16,
    delta_examples=128,
    loss="validation_loss",
    losses={16: 1.0, 32: 1.05, 64: 1.15, 128: 1.4},
    epsilon=0.2,
    signal="simple",
    estimate=8.0,
    kappa_before=1.0,
  )
  assert r["verdicts"] == {"32": "pass", "64": "borderline", "128": "fail"}
  assert (r["cbs_low"], r["cbs_high"], r["censored"]) == (32, 64, False)
  assert r["kappa_after"] == pytest.approx(32 / 8.0)
  none_pass = sa.record(**{**_kw(), "losses": {16: 1.0, 32: 1.5}})
  assert none_pass["cbs_low"] == 16 and none_pass["kappa_after"] == pytest.approx(16 / 8.0)  # hold B
  no_estimate = sa.record(**{**_kw(), "estimate": math.nan})
  assert no_estimate["kappa_after"] is None and no_estimate["estimate"] == "nan"
  blew = sa.record(**{**_kw(), "losses": {16: math.inf, 32: 1.0}})
  assert blew["cbs_low"] is None and blew["kappa_after"] is None
  assert "κ stays 1" in sa.describe(blew) and "blew up" in sa.describe(blew)


def _kw():
  return dict(
    step=8,
    examples=128,
    batch=16,
    delta_examples=128,
    loss="validation_loss",
    losses={16: 1.0, 32: 1.05},
    epsilon=0.2,
    signal="simple",
    estimate=8.0,
    kappa_before=1.0,
  )


def test_delta_sizes_and_when_an_audit_is_due():
  assert sa.branch_sizes((16, 32, 64, 128, 256), 32, 2) == (32, 64, 128)
  assert sa.branch_sizes((16, 32, 64), 64, 3) == (64,)  # the top of the ladder: nothing to branch to
  assert sa.delta(100, (16, 32, 64)) == 128 and sa.delta(128, (16, 32, 64)) == 128
  assert sa.delta(1, (24, 40)) == 120  # every size divides Δ'
  assert not sa.due((200, 600), [], 128)
  assert sa.due((200, 600), [], 256)
  assert not sa.due((200, 600), [{"examples": 256}], 512)
  assert sa.due((200, 600), [{"examples": 256}], 640)
  assert not sa.due((200, 600), [{"examples": 256}, {"examples": 640}], 10**6)


def _config(**kw):
  cfg = mnist_lenet.get_config()
  flat = {
    "dataset": "synthetic",
    "synthetic.num_train": 576,
    "synthetic.num_eval": 64,
    "validation_split": 64,
    "batch_size": 16,
    "eval_batch_size": 64,
    "num_train_steps": 48,
    "num_microbatches": 2,
    "data_order": "examples",
    "batch_schedule_unit": "examples",
    "eval_every_steps": 4,
    "checkpoint_every_steps": 0,
    "progress": False,
    **kw,
  }
  cfg.update_from_flattened_dict(flat)
  return cfg


AUDITED = {
  "batch_schedule": "adaptive",
  "adaptive_batch.every_steps": 8,  # a decision every 128 examples
  "adaptive_batch.every_epochs": -1.0,
  "adaptive_batch.ladder": (16, 32, 64),
  # the decision at 384 examples (step 24, the first with an estimate) audits; the one at 640 has no size above
  # the batch (64, every branch of random labels passes, so the first audit's target is the top of the ladder)
  "adaptive_batch.audit_points": "300,600",
  "adaptive_batch.audit_delta_examples": 64,
  "adaptive_batch.audit_sizes": 2,
}


@pytest.mark.parametrize(
  "kw, fragment",
  [
    ({"adaptive_batch.audit_points": "0"}, "positive number"),
    ({"adaptive_batch.audit_points": "300,200"}, "must increase"),
    ({"adaptive_batch.audit_delta_examples": 0}, "audit_delta_examples"),
    ({"adaptive_batch.audit_sizes": 0}, "audit_sizes"),
    ({"adaptive_batch.audit_epsilon": -0.1}, "audit_epsilon"),
    ({"adaptive_batch.audit_loss": "train_loss"}, "audit_loss"),
    ({"validation_split": 0}, "validation split"),
    ({"adaptive_batch.audit_points": "300,768"}, "run ends at 768"),
  ],
)
def test_an_audit_that_cannot_run_is_one_sentence_before_compiling(kw, fragment):
  with pytest.raises(run_plan.ConfigError, match=fragment) as e:
    validate.validate(_config(**{**AUDITED, **kw}), 1)
  msg = str(e.value)
  assert "\n" not in msg and msg.count(". ") == 0, msg


def _val_loss_at(workdir, examples):
  from lamb_lars.common import io_utils

  rows = io_utils.read_jsonl(os.path.join(workdir, "metrics.jsonl"))
  (row,) = [r for r in rows if r["examples"] == examples]
  return row["validation_loss"]


@pytest.mark.slow
def test_audit_branches_reproduce_fixed_schedule_runs_and_set_kappa(tmp_path):
  """The audit at step 24 (384 examples, batch 16) branches at 16, 32 and 64 for Δ' = 64 examples. Each branch's
  validation loss is what an ordinary run of the trainer reaches at 448 examples with the fixed schedule 'batch 16
  to 384 examples, then B' (the linear LR rule, as the controller's): the branches are the run's own continuation.
  The decision right after uses κ' = CBS_low / B_simple, so its target is the measured CBS_low."""
  from lamb_lars.common import io_utils
  from lamb_lars.train.trainer import train_and_evaluate
  from test_train import tensorboard_tags

  audited = str(tmp_path / "audited")
  result = train_and_evaluate(_config(**AUDITED), audited)
  assert result["status"] in ("done", "diverged")  # random labels: a run that does not learn is fine here
  audit, skipped = io_utils.read_jsonl(os.path.join(audited, sa.AUDITS_FILE))
  assert (audit["step"], audit["examples"], audit["batch"], audit["delta_examples"]) == (24, 384, 16, 64)
  assert sorted(audit["losses"], key=int) == ["16", "32", "64"]
  for b in (16, 32, 64):
    fixed = str(tmp_path / f"fixed{b}")
    schedule = "" if b == 16 else f"384:{b}"
    train_and_evaluate(_config(batch_schedule=schedule, batch_schedule_lr="linear"), fixed)
    assert audit["losses"][str(b)] == pytest.approx(_val_loss_at(fixed, 448), rel=1e-5), b
  decisions = io_utils.read_jsonl(os.path.join(audited, "batch_decisions.jsonl"))
  at = next(r for r in decisions if r["step"] == 24)
  assert audit["kappa_after"] == pytest.approx(audit["cbs_low"] / at["estimate"])
  assert at["kappa"] == pytest.approx(audit["kappa_after"]) and at["target"] == pytest.approx(audit["cbs_low"])
  assert at["to"] == 64
  assert skipped["examples"] == 640 and skipped["kappa_after"] is None and "no ladder size" in skipped["skipped"]
  later = [r for r in decisions if r["step"] > 24]
  assert later and all(r["kappa"] == pytest.approx(audit["kappa_after"]) for r in later)
  tags = tensorboard_tags(os.path.join(audited, "tensorboard"))
  assert [s for s, _ in tags["optim/adaptive_batch/audit_cbs_low"]] == [24]
