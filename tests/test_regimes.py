"""Regimes (You et al. 2020 Defs 2.1–2.3) on hand-built tagged trials. The first tests pin what the old code got
wrong: a batch where only linear scaling was tried and failed is not 'huge', a linear run that fails only the loss
test is not rescued by itself, LR-tuned or LARS runs are not linear scaling, and 'huge' needs every declared
technique to have failed."""

from __future__ import annotations

import numpy as np
import pytest

from lamb_lars.study.records import Baseline, Trial
from lamb_lars.study.analysis.baseline import baseline_from_trials
from lamb_lars.study.analysis.regimes import (
  classify_trials,
  first_failure,
  linear_evidence,
  linear_verdict,
  passes_large_batch,
  reach_verdict,
  reaches_accuracy,
  row_epoch,
  technique_evidence,
)

BASE = Baseline(batch_size=256, accuracy=0.992, val_loss=0.03, epochs=30, num_train=55000)
# thresholds: test accuracy >= 0.98704, validation loss <= 0.036
TECH = ("tuned", "lars", "lamb")


def _t(rid, b, rows, *, role="linear", technique="", status="done", optimizer="momentum"):
  return Trial(
    rid,
    b,
    optimizer,
    role=role,
    technique=technique,
    status=status,
    curve=[{"step": i + 1, "epoch": e, "eval_accuracy": a, "validation_loss": vl} for i, (e, a, vl) in enumerate(rows)],
  )


PASS = [(10, 0.9, 0.3), (30, 0.99, 0.03)]
FAIL = [(10, 0.5, 1.3), (30, 0.9, 0.4)]


def test_linear_only_failure_is_not_huge():
  r = classify_trials(BASE, [_t("l1", 1024, FAIL), _t("l4", 4096, FAIL)], TECH)
  undetermined = "large or huge: undetermined (no technique tried)"
  assert r.labels == {1024: undetermined, 4096: undetermined}
  assert (r.b_l, r.b_l_last_pass, r.b_h_next_huge) == (1024, 256, None)


def test_huge_needs_every_declared_technique_to_fail():
  trials = [_t("l", 16384, FAIL), _t("lars", 16384, FAIL, role="technique", technique="lars", optimizer="lars")]
  assert classify_trials(BASE, trials, TECH).labels[16384] == "large or huge: undetermined (untried: tuned, lamb)"
  trials += [
    _t("lamb", 16384, FAIL, role="technique", technique="lamb", optimizer="lamb"),
    _t("tuned", 16384, FAIL, role="technique", technique="tuned"),
  ]
  r = classify_trials(BASE, trials, TECH)
  assert r.labels[16384] == "huge" and r.b_h_next_huge == 16384


def test_loss_failure_of_linear_run_is_not_rescued_by_itself():
  lossy = _t("l", 2048, [(30, 0.99, 0.05)])  # accuracy passes, validation loss does not
  r = classify_trials(BASE, [lossy], TECH)
  assert r.labels == {2048: "large or huge: undetermined (no technique tried)"}
  assert (r.b_l, r.b_l_last_pass) == (2048, 256)


def test_only_tagged_linear_runs_test_def_2_1():
  tuned = _t("t", 4096, PASS, role="technique", technique="tuned")
  lars = _t("x", 4096, PASS, role="technique", technique="lars", optimizer="lars")
  assert linear_evidence([tuned, lars], BASE) == {}
  r = classify_trials(BASE, [_t("l", 4096, FAIL), tuned, lars], TECH)
  assert r.labels[4096] == "large with lars, tuned" and r.b_l == 4096 and r.b_h == 4096


def test_ladder_with_edges():
  trials = [_t(f"l{b}", b, PASS if b <= 2048 else FAIL) for b in (512, 1024, 2048, 4096, 8192, 32768)]
  for b in (8192, 32768):
    ok = b == 8192
    trials += [_t(f"{n}{b}", b, PASS if (ok and n == "lars") else FAIL, role="technique", technique=n) for n in TECH]
  r = classify_trials(BASE, trials, TECH)
  assert (r.b_l, r.b_l_last_pass, r.b_h, r.b_h_next_huge, r.b_f) == (4096, 2048, 8192, 32768, 55000)
  assert r.labels[4096] == "large: below B_H (no technique tried)" and r.labels[8192] == "large with lars"
  assert r.labels[32768] == "huge" and r.reached_by[8192] == ("lars",) and r.anomalies == ()


def test_pruned_and_running_trials():
  pruned_reached = _t("p", 8192, [(2, 0.988, 0.05)], role="technique", technique="lars", status="pruned")
  running = _t("r", 8192, [(2, 0.5, 1.0)], role="technique", technique="lamb", status="running")
  ev = technique_evidence([pruned_reached, running], BASE, TECH)
  assert ev == {8192: {"lars": True}}  # running lamb is no evidence yet
  pruned_failed = _t("q", 8192, [(2, 0.5, 1.0)], role="technique", technique="lamb", status="pruned")
  assert technique_evidence([pruned_failed], BASE, TECH) == {8192: {"lamb": False}}


def test_full_batch_is_marked():
  r = classify_trials(BASE, [_t("f", 55000, FAIL)], TECH)
  assert r.labels[55000] == "large or huge: undetermined (no technique tried) (full batch)"


def test_trial_tests_at_the_thresholds_and_budget():
  ok = _t("a", 2048, [(10, 0.9, 0.3), (30, 0.98704, 0.036)])
  assert passes_large_batch(ok, BASE) and reaches_accuracy(ok, BASE)
  late = _t("b", 2048, [(10, 0.9, 0.3), (31, 0.99, 0.02)])
  assert not passes_large_batch(late, BASE) and not reaches_accuracy(late, BASE)
  split = _t("d", 2048, [(20, 0.99, 0.05), (30, 0.98, 0.03)])  # both, but at different evals
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


def test_b_l_is_the_smallest_failing_batch_with_its_bracket():
  """You et al. 2020 Def. 2.1: linear scaling works for every B < B_L, so B_L is the *smallest* failing batch (the
  old code reported the largest passing one, 512, for a study whose linear scaling first fails at 1024)."""
  passing = {512: True, 1024: False, 2048: False, 4096: True, 8192: False}  # 4096 passes again: an anomaly
  trials = [_t(f"l{b}", b, PASS if ok else FAIL) for b, ok in passing.items()]
  r = classify_trials(BASE, trials, TECH)
  assert (r.b_l, r.b_l_last_pass) == (1024, 512)
  assert r.labels[512] == "linear scaling works" and r.labels[1024] == "large: below B_H (no technique tried)"
  assert r.anomalies == ("batch 4096: linear scaling passes above B_L = 1024 (its first failure)",)
  none_fail = classify_trials(BASE, [_t("a", 512, PASS), _t("b", 2048, PASS)], TECH)
  assert (none_fail.b_l, none_fail.b_l_last_pass) == (None, 2048)


def test_paper_table2_reads_b_l_as_the_lower_end_of_the_large_range():
  """Table 2 caption: "for ImageNet, B_L = 2K, B_H = 64K"; large = [B_L, B_H]."""
  from lamb_lars.proj.you2020.paper import TABLE2

  assert {k: (v["b_l"], v["b_h"]) for k, v in TABLE2.items()} == {
    "mnist_lenet": (2048, 8192),
    "cifar10_resnet50": (2048, 25000),
    "imagenet_resnet50": (2048, 65536),
  }
  assert all(v["large"] == (v["b_l"], v["b_h"]) for v in TABLE2.values())


def test_linear_verdict_with_seeds_and_single_runs():
  thr_acc, thr_loss = 0.995 * BASE.accuracy, 1.2 * BASE.val_loss  # 0.98704, 0.036
  one = lambda acc, loss, rid="s": _t(rid, 1024, [(30, acc, loss)])
  assert linear_verdict([one(0.990, 0.03)], BASE).verdict == "pass"  # 0.3 pp above, beyond the 0.2 pp tolerance
  assert linear_verdict([one(0.988, 0.03)], BASE).verdict == "borderline"  # 0.1 pp above: within tolerance
  assert linear_verdict([one(0.986, 0.03)], BASE).verdict == "borderline"  # 0.1 pp below: within tolerance
  assert linear_verdict([one(0.980, 0.03)], BASE).verdict == "fail"
  assert linear_verdict([one(0.995, 0.05)], BASE).verdict == "fail"  # the loss bar fails
  # three seeds: the 95% t interval of the mean, numpy float64 from the formula with t_{0.975,2} = 4.302653
  accs = [0.9880, 0.9890, 0.9875]
  x = np.array(accs)
  half = 4.302653 * x.std(ddof=1) / np.sqrt(3)
  v = linear_verdict([one(a, 0.03, f"s{i}") for i, a in enumerate(accs)], BASE)
  assert v.accuracy.low == pytest.approx(x.mean() - half, abs=1e-9)
  assert v.accuracy.high == pytest.approx(x.mean() + half, abs=1e-9)
  assert v.accuracy.num_values == 3 and v.verdict == ("pass" if x.mean() - half >= thr_acc else "borderline")
  assert v.verdict == "borderline"  # 0.98817 ± 0.00190 straddles 0.98704
  div = _t("d", 1024, [(5, 0.99, 0.02)], status="diverged")
  assert linear_verdict([one(0.995, 0.02), div], BASE).verdict == "borderline"  # one seed diverged
  assert linear_verdict([div], BASE).verdict == "fail"
  assert thr_loss == pytest.approx(0.036)


def test_reach_verdict_uses_the_best_accuracy_within_budget():
  run = _t("r", 8192, [(10, 0.99, 0.5), (30, 0.98, 0.5), (31, 0.999, 0.01)], role="technique", technique="lars")
  v = reach_verdict([run], BASE)
  assert (v.value, v.verdict) == (0.99, "pass")  # the epoch-31 eval is past ρ


def test_sqrt_scaling_is_reported_beside_linear_and_never_sets_b_l():
  """The paper's Optimization 0 takes linear or square-root scaling; Def. 2.1 (B_L) is linear scaling's alone."""
  sq = lambda b, rows: Trial(
    f"s{b}",
    b,
    "momentum",
    role="linear",
    params={"lr_scaling": "sqrt"},
    curve=[{"step": i + 1, "epoch": e, "eval_accuracy": a, "validation_loss": vl} for i, (e, a, vl) in enumerate(rows)],
  )
  trials = [_t("l512", 512, PASS), _t("l1024", 1024, FAIL), sq(1024, PASS), sq(2048, FAIL)]
  r = classify_trials(BASE, trials, TECH)
  assert (r.b_l, r.b_l_last_pass) == (1024, 512)
  assert linear_evidence(trials, BASE) == {512: True, 1024: False}
  assert linear_evidence(trials, BASE, rule="sqrt") == {1024: True, 2048: False}
  assert first_failure(linear_evidence(trials, BASE, rule="sqrt"), 256) == (2048, 1024)


def test_untested_batches_below_b_l_are_not_large():
  """Large = [B_L, B_H] (You et al. 2020 Table 2): a batch below the last passing linear batch is not large, even
  where linear scaling was not run and a tuned technique reaches. One inside B_L's bracket (last pass 512, first
  fail 2048) is undetermined: the true B_L may lie below or above 768 (the old label called it 'below B_L')."""
  trials = [
    _t("l512", 512, PASS),
    _t("l2048", 2048, FAIL),
    _t("t384", 384, PASS, role="technique", technique="tuned"),
    _t("t768", 768, PASS, role="technique", technique="tuned"),
    _t("t4096", 4096, PASS, role="technique", technique="tuned"),
  ]
  r = classify_trials(BASE, trials, TECH)
  assert (r.b_l, r.b_l_last_pass) == (2048, 512)
  assert r.labels[384] == "below B_L (linear scaling not run here); reached by tuned"
  assert r.labels[768] == "in B_L's bracket, large or not: undetermined (linear scaling not run here); reached by tuned"
  assert r.labels[4096] == "large with tuned (linear scaling not run)"


def test_untested_batch_above_every_passing_linear_batch_is_not_called_large():
  """No tested batch fails, so B_L lies above every tested one (Def. 2.1): a tuned run at a larger, untested batch
  says nothing about whether that batch is large (the old label was 'large with tuned')."""
  trials = [
    _t("l512", 512, PASS),
    _t("l1024", 1024, PASS),
    _t("t4096", 4096, PASS, role="technique", technique="tuned"),
  ]
  r = classify_trials(BASE, trials, TECH)
  assert r.b_l is None and r.b_l_last_pass == 1024
  assert r.labels[4096] == (
    "above every tested linear batch, large or not: undetermined (linear scaling not run here); reached by tuned"
  )


def test_a_nan_eval_does_not_hide_the_best_accuracy():
  """max() over a list with NaN depends on the order (max([nan, 0.99]) is nan): a NaN eval is skipped."""
  from lamb_lars.study.analysis.regimes import best_accuracy_within_budget

  t = _t("x", 1024, [(10, float("nan"), 0.5), (30, 0.99, 0.03)], role="technique", technique="tuned")
  assert best_accuracy_within_budget(t, BASE) == 0.99


def test_an_undetermined_batch_below_b_h_is_large():
  """Def. 2.2: huge means B > B_H. At 4096 only the tuned technique ran and failed (LARS and LAMB untried), but LARS
  reached at 8192, so B_H = 8192 and 4096 is large, not 'large or huge: undetermined'."""
  trials = [
    _t("l1024", 1024, FAIL),
    _t("l4096", 4096, FAIL),
    _t("l8192", 8192, FAIL),
    _t("t4096", 4096, FAIL, role="technique", technique="tuned"),
    _t("x8192", 8192, PASS, role="technique", technique="lars", optimizer="lars"),
  ]
  r = classify_trials(BASE, trials, TECH)
  assert r.b_h == 8192
  assert r.labels[4096] == "large: below B_H (untried: lars, lamb)"
  assert r.labels[8192] == "large with lars"


def test_the_eval_at_a_runs_last_step_is_within_its_budget():
  """A run of ρ epochs trains ⌈ρ·N/B⌉ steps (durations.to_steps), so its last eval logs slightly more than ρ
  epochs: 403 steps × 4096 / 55,000 = 30.0125 at B = 4096. That eval is the run's final one and counts for Defs
  2.1/2.2 and for the baseline's A and ξ; an eval past the last step does not. (The old rule, epoch ≤ ρ, dropped
  the final eval of 107 of the ladder's 123 full-budget runs.)"""
  final = _t("f", 4096, [(15.0, 0.95, 0.1), (403 * 4096 / 55000, 0.99, 0.03)])
  assert passes_large_batch(final, BASE) and reaches_accuracy(final, BASE)
  past = _t("p", 4096, [(15.0, 0.95, 0.1), (404 * 4096 / 55000, 0.99, 0.03)])
  assert not passes_large_batch(past, BASE) and not reaches_accuracy(past, BASE)
  base = _t("base", 256, [(29.9962, 0.98, 0.05), (6446 * 256 / 55000, 0.991, 0.031)], role="baseline")
  b = baseline_from_trials([base], num_train=55000, epochs=30)
  assert (b.accuracy, b.val_loss) == (0.991, 0.031)


def test_budget_steps_rounds_up_like_the_trainer():
  """Trial.budget_steps: ⌈budget_epochs · N/B⌉ from the logged (step, epoch) of its evals, epochs rounded to 6
  decimals as the trainer logs them."""
  row = lambda step, b: {"step": step, "epoch": round(step * b / 55000, 6)}
  assert Trial("a", 1024, budget_epochs=30.0, curve=[row(800, 1024)]).budget_steps() == 1612  # 1611.33 → 1612
  assert Trial("b", 1000, budget_epochs=30.0, curve=[row(1650, 1000)]).budget_steps() == 1650  # exact
  assert Trial("c", 4096, budget_epochs=30.0, curve=[row(403, 4096)]).budget_steps() == 403
  assert Trial("d", 4096, budget_epochs=None, curve=[row(403, 4096)]).budget_steps() is None


def test_no_linear_run_above_b0_leaves_every_batch_large_or_not_undetermined():
  """Without any linear-scaling run above B0, B_L is unknown (Def. 2.1), so a batch a technique reaches is not
  known to be large (the old label was 'large with tuned (linear scaling not run)')."""
  r = classify_trials(BASE, [_t("t4096", 4096, PASS, role="technique", technique="tuned")], TECH)
  assert r.b_l is None and r.labels[4096] == "large or not: undetermined (linear scaling not run); reached by tuned"


def test_one_reading_of_defs_21_and_22_any_evaluation_by_default_final_as_the_other():
  """Issue 41: the reading is written down (docs/studies.md) and applied by one function. A run whose middle eval
  meets both bars (0.99, 0.03) and whose last eval misses the loss bar (0.988, 0.05; bar 0.036) passes Def. 2.1
  under 'any' and fails under 'final'; Def. 2.2's value is its best accuracy (0.99) or its last (0.988)."""
  from lamb_lars.study.analysis import regimes

  t = _t("x", 512, [(10, 0.9, 0.3), (20, 0.99, 0.03), (30, 0.988, 0.05)])
  assert regimes.READING == "any" and regimes.READINGS == ("any", "final")
  assert regimes.def_values(t, BASE, definition="2.1") == (0.99, 0.03)
  assert regimes.def_values(t, BASE, definition="2.1", reading="final") == (0.988, 0.05)
  assert regimes.def_values(t, BASE, definition="2.2") == (0.99, 0.03)
  assert regimes.def_values(t, BASE, definition="2.2", reading="final")[0] == 0.988
  assert passes_large_batch(t, BASE) and not passes_large_batch(t, BASE, reading="final")
  late = _t("y", 512, [(10, 0.99, 0.03), (30, 0.95, 0.03)])
  assert reaches_accuracy(late, BASE) and not reaches_accuracy(late, BASE, reading="final")
  assert classify_trials(BASE, [t], TECH).b_l is None
  assert classify_trials(BASE, [t], TECH, reading="final").b_l == 512
  with pytest.raises(ValueError, match="reading"):
    regimes.def_values(t, BASE, definition="2.1", reading="best")
