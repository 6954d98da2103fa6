"""The per-run reading of Defs 2.1–2.2 (docs/science.md, "Divergence and per-run verdicts"): the sign test against
scipy's exact binomial test, and the report's table beside the interval reading."""

from __future__ import annotations

import pytest
from scipy import stats

from lamb_lars.study.analysis import regimes
from lamb_lars.study.analysis.verdict import sign_test
from lamb_lars.study.records import Baseline, Trial
from lamb_lars.study.report import report_per_run

BASE = Baseline(batch_size=256, accuracy=0.992, val_loss=0.03, epochs=30, num_train=55000)


@pytest.mark.parametrize("n", [1, 4, 5, 7, 11])
def test_sign_test_matches_scipys_exact_binomial(n):
  for k in range(n + 1):
    up = stats.binomtest(k, n, 0.5, alternative="greater").pvalue
    lo = stats.binomtest(k, n, 0.5, alternative="less").pvalue
    s = sign_test(k, n)
    want = "pass" if up < 0.05 else "fail" if lo < 0.05 else "inconclusive"
    assert s.verdict == want and (s.k, s.n) == (k, n)
    assert s.p == pytest.approx(up if want == "pass" else lo if want == "fail" else min(up, lo), rel=1e-12)


def test_the_rules_published_numbers():
  """docs/science.md: 0 of 4 and 4 of 4 give p = 0.0625 (nothing decided), 0 of 7 p = 0.0078 (fail), 0 of 11
  p = 0.00049 (fail), 7 of 7 a pass."""
  assert sign_test(0, 4).verdict == sign_test(4, 4).verdict == "inconclusive" and sign_test(0, 4).p == 0.0625
  assert (sign_test(0, 7).verdict, round(sign_test(0, 7).p, 4)) == ("fail", 0.0078)
  assert (sign_test(0, 11).verdict, round(sign_test(0, 11).p, 5)) == ("fail", 0.00049)
  assert sign_test(7, 7).verdict == "pass"
  with pytest.raises(ValueError, match="0 ≤ k ≤ n"):
    sign_test(5, 4)


def _t(rid, acc, loss, status="done"):
  rows = [
    {"step": 1, "epoch": 10, "eval_accuracy": 0.9, "validation_loss": 0.3},
    {"step": 2, "epoch": 30, "eval_accuracy": acc, "validation_loss": loss},
  ]
  return Trial(rid, 1024, "momentum", role="linear", status=status, curve=[] if status == "diverged" else rows)


def test_a_diverged_seed_is_a_failure_and_the_readings_are_shown_side_by_side():
  """Seven seeds at 1K: three diverge, four miss the loss bar (0.036) though their accuracy passes: 0 of 7 meet
  Def. 2.1, p = 1/128, a fail. The interval reading of the same seeds is printed beside it, and the row says
  whether the two differ."""
  seeds = [_t(f"d{i}", 0, 0, status="diverged") for i in range(3)] + [_t(f"m{i}", 0.99, 0.05) for i in range(4)]
  assert not any(regimes.passes_large_batch(t, BASE) for t in seeds)
  old = regimes.linear_verdict(seeds, BASE).verdict
  lines = report_per_run.section(seeds, BASE, {1024: seeds}, {1024: old}, {}, "validation_loss")
  row = next(line for line in lines if line.startswith("| 1024 "))
  assert "0 of 7 (3 diverged or failed)" in row and "| 0.0078 | fail |" in row
  assert row.endswith("| yes |") == (old != "fail")
  # An interval reading of "borderline" is the per-run reading's "inconclusive": the same verdict, no "yes".
  four = [_t(f"p{i}", 0.99, 0.03) for i in range(4)]
  lines = report_per_run.section(four, BASE, {1024: four}, {1024: "borderline"}, {}, "validation_loss")
  assert next(line for line in lines if line.startswith("| 1024 ")).endswith("| inconclusive (add seeds) | — |")


def test_no_seeds_no_section():
  assert report_per_run.section([], BASE, {}, {}, {}, "validation_loss") == []


def test_def22_reads_the_chosen_configurations_replicate_seeds():
  """Def. 2.2's row reads the seeds its interval verdict read (ReachEvidence.seeds), replicates included: five
  seeds all reaching 99.5%·A give 5 of 5, p = 1/32, a pass."""
  from lamb_lars.study.analysis import reach

  seeds = [_t(f"s{i}", 0.99, 0.05) for i in range(5)]
  v = regimes.reach_verdict(seeds, BASE)
  e = reach.ReachEvidence("tuned", "s0", v, seeds=tuple(t.run_id for t in seeds))
  lines = report_per_run.section(seeds, BASE, {}, {}, {3072: e}, "validation_loss")
  row = next(line for line in lines if line.startswith("| 3072 "))
  assert "| 5 of 5 | 0.031 | pass |" in row
