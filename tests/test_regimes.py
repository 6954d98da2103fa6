"""Regimes (You et al. 2020 Defs 2.1–2.3) on hand-built tagged trials. The first tests pin what the old code got
wrong: a batch where only linear scaling was tried and failed is not 'huge', a linear run that fails only the loss
test is not rescued by itself, LR-tuned or LARS runs are not linear scaling, and 'huge' needs every declared
technique to have failed."""
from __future__ import annotations

import pytest

from lamb_lars.study.records import Baseline, Trial
from lamb_lars.study.regimes import (baseline_from_trials, classify_trials, linear_evidence, passes_large_batch,
                                     reaches_accuracy, row_epoch, technique_evidence)

BASE = Baseline(batch_size=256, accuracy=0.992, val_loss=0.03, epochs=30, num_train=55000)
# thresholds: test accuracy >= 0.98704, validation loss <= 0.036
TECH = ("tuned", "lars", "lamb")


def _t(rid, b, rows, *, role="linear", technique="", status="done", optimizer="momentum"):
  return Trial(rid, b, optimizer, role=role, technique=technique, status=status,
               curve=[{"step": i + 1, "epoch": e, "eval_accuracy": a, "validation_loss": vl}
                      for i, (e, a, vl) in enumerate(rows)])


PASS = [(10, 0.9, 0.3), (30, 0.99, 0.03)]
FAIL = [(10, 0.5, 1.3), (30, 0.9, 0.4)]


def test_linear_only_failure_is_not_huge():
  r = classify_trials(BASE, [_t("l1", 1024, FAIL), _t("l4", 4096, FAIL)], TECH)
  assert r.labels == {1024: "not large (no technique tried)", 4096: "not large (no technique tried)"}
  assert (r.b_l, r.b_l_next_fail, r.b_h_next_huge) == (256, 1024, None)


def test_huge_needs_every_declared_technique_to_fail():
  trials = [_t("l", 16384, FAIL), _t("lars", 16384, FAIL, role="technique", technique="lars", optimizer="lars")]
  assert classify_trials(BASE, trials, TECH).labels[16384] == "not large (untried: tuned, lamb)"
  trials += [_t("lamb", 16384, FAIL, role="technique", technique="lamb", optimizer="lamb"),
             _t("tuned", 16384, FAIL, role="technique", technique="tuned")]
  r = classify_trials(BASE, trials, TECH)
  assert r.labels[16384] == "huge" and r.b_h_next_huge == 16384


def test_loss_failure_of_linear_run_is_not_rescued_by_itself():
  lossy = _t("l", 2048, [(30, 0.99, 0.05)])            # accuracy passes, validation loss does not
  r = classify_trials(BASE, [lossy], TECH)
  assert r.labels == {2048: "not large (no technique tried)"} and r.b_l == 256


def test_only_tagged_linear_runs_test_def_2_1():
  tuned = _t("t", 4096, PASS, role="technique", technique="tuned")
  lars = _t("x", 4096, PASS, role="technique", technique="lars", optimizer="lars")
  assert linear_evidence([tuned, lars], BASE) == {}
  r = classify_trials(BASE, [_t("l", 4096, FAIL), tuned, lars], TECH)
  assert r.labels[4096] == "large with lars, tuned" and r.b_l == 256 and r.b_h == 4096


def test_ladder_with_edges():
  trials = [_t(f"l{b}", b, PASS if b <= 2048 else FAIL) for b in (512, 1024, 2048, 4096, 8192, 32768)]
  for b in (8192, 32768):
    ok = b == 8192
    trials += [_t(f"{n}{b}", b, PASS if (ok and n == "lars") else FAIL, role="technique", technique=n)
               for n in TECH]
  r = classify_trials(BASE, trials, TECH)
  assert (r.b_l, r.b_l_next_fail, r.b_h, r.b_h_next_huge, r.b_f) == (2048, 4096, 8192, 32768, 55000)
  assert r.labels[4096] == "not large (no technique tried)" and r.labels[8192] == "large with lars"
  assert r.labels[32768] == "huge" and r.reached_by[8192] == ("lars",) and r.anomalies == ()


def test_pruned_and_running_trials():
  pruned_reached = _t("p", 8192, [(2, 0.988, 0.05)], role="technique", technique="lars", status="pruned")
  running = _t("r", 8192, [(2, 0.5, 1.0)], role="technique", technique="lamb", status="running")
  ev = technique_evidence([pruned_reached, running], BASE, TECH)
  assert ev == {8192: {"lars": True}}                   # running lamb is no evidence yet
  pruned_failed = _t("q", 8192, [(2, 0.5, 1.0)], role="technique", technique="lamb", status="pruned")
  assert technique_evidence([pruned_failed], BASE, TECH) == {8192: {"lamb": False}}


def test_full_batch_is_marked():
  r = classify_trials(BASE, [_t("f", 55000, FAIL)], TECH)
  assert r.labels[55000] == "not large (no technique tried) (full batch)"


def test_trial_tests_at_the_thresholds_and_budget():
  ok = _t("a", 2048, [(10, 0.9, 0.3), (30, 0.98704, 0.036)])
  assert passes_large_batch(ok, BASE) and reaches_accuracy(ok, BASE)
  late = _t("b", 2048, [(10, 0.9, 0.3), (31, 0.99, 0.02)])
  assert not passes_large_batch(late, BASE) and not reaches_accuracy(late, BASE)
  split = _t("d", 2048, [(20, 0.99, 0.05), (30, 0.98, 0.03)])          # both, but at different evals
  assert not passes_large_batch(split, BASE)
  div = _t("e", 2048, [(5, 0.99, 0.02)], status="diverged")
  assert not passes_large_batch(div, BASE) and not reaches_accuracy(div, BASE)
  assert row_epoch({"step": 10, "examples": 110000}, 256, 55000) == 2.0


def test_baseline_is_the_one_named_recipe_with_validation_loss():
  base = _t("base", 256, [(15, 0.98, 0.05), (30, 0.991, 0.031)], role="baseline")
  tuned = _t("tuned", 256, [(30, 0.995, 0.02)], role="technique", technique="tuned")  # better, but not the baseline
  b = baseline_from_trials([base, tuned], num_train=55000, epochs=30)
  assert (b.batch_size, b.accuracy, b.val_loss, b.run_id) == (256, 0.991, 0.031, "base")
  with pytest.raises(ValueError, match="exactly one baseline"):
    baseline_from_trials([tuned], num_train=55000, epochs=30)
