"""Regimes (You et al. 2020 Defs 2.1–2.3) on hand-computed cases."""
from __future__ import annotations

import pytest

from lamb_lars.study.regimes import (Baseline, baseline_from_trial, classify, classify_trials, evidence,
                                     passes_large_batch, reaches_accuracy, row_epoch)
from lamb_lars.study.store import Trial

BASE = Baseline(batch_size=256, accuracy=0.992, val_loss=0.03, epochs=30, num_train=60000)
# thresholds: accuracy >= 0.98704, loss <= 0.036


def _trial(rid, b, rows, status="done"):
  return Trial(rid, b, status=status, curve=[{"step": i + 1, "epoch": e, "eval_accuracy": a, "eval_loss": l}
                                              for i, (e, a, l) in enumerate(rows)])


def test_trial_tests_at_the_thresholds_and_epoch_budget():
  ok = _trial("a", 2048, [(10, 0.9, 0.3), (30, 0.98704, 0.036)])
  assert passes_large_batch(ok, BASE) and reaches_accuracy(ok, BASE)
  late = _trial("b", 2048, [(10, 0.9, 0.3), (31, 0.99, 0.02)])          # only after ρ epochs
  assert not passes_large_batch(late, BASE) and not reaches_accuracy(late, BASE)
  lossy = _trial("c", 2048, [(30, 0.99, 0.05)])                          # accuracy yes, loss no
  assert not passes_large_batch(lossy, BASE) and reaches_accuracy(lossy, BASE)
  split = _trial("d", 2048, [(20, 0.99, 0.05), (30, 0.98, 0.03)])       # both, but at different evals
  assert not passes_large_batch(split, BASE)
  div = _trial("e", 2048, [(5, 0.99, 0.02)], status="diverged")
  assert not passes_large_batch(div, BASE) and not reaches_accuracy(div, BASE)


def test_row_epoch_fallbacks():
  assert row_epoch({"step": 10, "epoch": 2.5}, 256, 60000) == 2.5
  assert row_epoch({"step": 10, "examples": 120000}, 256, 60000) == 2.0
  assert row_epoch({"step": 600}, 200, 60000) == 2.0


def test_classify_monotone_case():
  linear = {512: True, 1024: True, 2048: True, 4096: False, 8192: False}
  anyt = {4096: True, 8192: True, 16384: False, 32768: False}
  r = classify(BASE, linear, anyt)
  assert (r.b_l, r.b_l_next_fail, r.b_h, r.b_h_next_fail, r.b_f) == (2048, 4096, 8192, 16384, 60000)
  assert r.labels == {512: "large", 1024: "large", 2048: "large", 4096: "large+technique",
                      8192: "large+technique", 16384: "huge", 32768: "huge"}
  assert r.anomalies == ()


def test_classify_gaps_no_data_and_edges():
  none = classify(BASE, {}, {})
  assert (none.b_l, none.b_h, none.b_f, dict(none.labels)) == (None, None, 60000, {})
  first_fails = classify(BASE, {1024: False}, {1024: False})
  assert (first_fails.b_l, first_fails.b_l_next_fail) == (256, 1024)   # the baseline passes trivially
  assert (first_fails.b_h, first_fails.b_h_next_fail) == (256, 1024)
  assert first_fails.labels == {1024: "huge"}
  unbounded = classify(BASE, {1024: True, 8192: True}, {})             # gap between 1024 and 8192: not guessed
  assert (unbounded.b_l, unbounded.b_l_next_fail, unbounded.b_h, unbounded.b_h_next_fail) == (8192, None,
                                                                                                8192, None)
  only_linear_fail = classify(BASE, {4096: False}, {})
  assert only_linear_fail.labels == {4096: "not-large"} and only_linear_fail.b_h is None
  labels = classify(BASE, {128: True, 256: True}, {60000: True}).labels
  assert labels == {128: "small", 256: "baseline", 60000: "full"}


def test_classify_non_monotone_evidence_is_flagged():
  r = classify(BASE, {1024: True, 2048: False, 4096: True}, {8192: False, 16384: True, 32768: False})
  assert (r.b_l, r.b_l_next_fail) == (1024, 2048)
  assert (r.b_h, r.b_h_next_fail) == (16384, 32768)
  assert len(r.anomalies) == 2
  assert "4096" in r.anomalies[0] and "8192" in r.anomalies[1]


def test_evidence_counts_diverged_as_failure_and_ignores_failed_and_unfinished():
  good = [(30, 0.99, 0.02)]
  ts = [_trial("a", 1024, good, status="failed"),                # crashed: no evidence
        _trial("b", 2048, good, status="diverged"),              # tested, failed
        _trial("c", 4096, [(10, 0.5, 1.0)], status="running"),   # not finished, not passed: no evidence
        _trial("d", 8192, good, status="running"),               # already passed: counts
        _trial("e", 16384, [(30, 0.5, 1.0)]), _trial("f", 16384, good)]  # search: one of two passes
  ev = evidence(ts, lambda t: reaches_accuracy(t, BASE))
  assert ev == {2048: False, 8192: True, 16384: True}


def test_classify_trials_end_to_end_and_baseline_from_trial():
  good, lossy, bad = [(30, 0.99, 0.02)], [(30, 0.99, 0.05)], [(30, 0.9, 0.3)]
  linear = [_trial("l1", 1024, good), _trial("l2", 2048, lossy), _trial("l3", 4096, bad)]
  tech = [_trial("t1", 4096, good), _trial("t2", 8192, bad, status="diverged")]
  r = classify_trials(BASE, linear, linear + tech)
  assert (r.b_l, r.b_l_next_fail, r.b_h, r.b_h_next_fail) == (1024, 2048, 4096, 8192)
  assert r.labels == {1024: "large", 2048: "large+technique", 4096: "large+technique", 8192: "huge"}
  base = baseline_from_trial(_trial("b", 256, [(15, 0.98, 0.05), (30, 0.992, 0.03), (40, 0.993, 0.029)]),
                             60000, epochs=30)
  assert base == BASE
  assert baseline_from_trial(_trial("b", 256, [(15, 0.98, 0.05)]), 60000).epochs == 15
  with pytest.raises(ValueError):
    baseline_from_trial(Trial("x", 256), 60000)
