"""CBS(t) by branching (lamb_lars/study/analysis/branching.py) against hand-computed intervals.

The reference intervals are written here from the formula (mean ± t_{0.975,k−1}·sd/√k with scipy's t quantile),
not taken from lamb_lars.study.analysis.verdict.
"""

import math

import numpy as np
import pytest
from scipy import stats

from lamb_lars.study.analysis import branching
from lamb_lars.study.analysis.branching import BranchLoss

REF = [0.50, 0.52, 0.48]
EPS = 0.01


def _branches(point, diffs_by_batch):
  out = [BranchLoss(point, 256, s, REF[s]) for s in range(3)]
  for batch, diffs in diffs_by_batch.items():
    out += [BranchLoss(point, batch, s, REF[s] + d) for s, d in enumerate(diffs)]
  return out


def _interval(x):
  x = np.asarray(x, np.float64)
  half = stats.t.ppf(0.975, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size)
  return x.mean() - half, x.mean() + half


def test_bracket_from_pass_borderline_fail():
  diffs = {
    512: [0.004, 0.005, 0.006],  # interval ⊂ (−∞, ε]: pass
    1024: [0.0, 0.02, 0.01],  # straddles ε: borderline
    2048: [0.05, 0.06, 0.055],  # wholly above ε: fail
    4096: [0.0, 0.0, 0.001],
  }  # passes, but above a failing batch: ignored (monotone closure)
  lo, hi = _interval(diffs[512])
  assert hi <= EPS
  lo, hi = _interval(diffs[1024])
  assert lo <= EPS < hi
  lo, hi = _interval(diffs[2048])
  assert lo > EPS
  c = branching.critical_batch(_branches(1.0, diffs), 1.0, 256, EPS)
  assert (c.low, c.high, c.censored) == (512, 1024, False)
  assert {b: v.verdict for b, v in c.verdicts.items()} == {512: "pass", 1024: "borderline", 2048: "fail", 4096: "pass"}
  assert c.verdicts[1024].high == pytest.approx(_interval(diffs[1024])[1], rel=1e-12)


def test_differences_are_paired_by_seed():
  # Seed 2's reference is low (0.48) and so is its branch: paired differences are all 0.004 (pass), while the
  # unpaired spread of the branch losses (0.484 … 0.524) would make the interval straddle ε.
  c = branching.critical_batch(_branches(0.5, {512: [0.004] * 3}), 0.5, 256, EPS)
  assert c.verdicts[512].verdict == "pass" and c.low == 512 and c.censored


def test_diverged_branch_loses_and_relative_epsilon():
  c = branching.critical_batch(_branches(2.0, {512: [0.001] * 3, 1024: [0.0, float("nan"), 0.0]}), 2.0, 256, EPS)
  assert c.low == 512 and c.verdicts[1024].verdict != "pass"
  # relative ε = 2% of the mean reference loss 0.5 = 0.01: the same verdicts as the absolute ε above
  d = {512: [0.004, 0.005, 0.006], 2048: [0.05, 0.06, 0.055]}
  rel = branching.critical_batch(_branches(1.0, d), 1.0, 256, 0.02, relative=True)
  assert (rel.low, rel.high) == (512, 512)


def test_no_reference_is_an_error():
  with pytest.raises(ValueError, match="no reference"):
    branching.critical_batch([BranchLoss(1.0, 512, 0, 0.4)], 1.0, 256, EPS)


def test_trajectory_and_warmup_schedule():
  data = (
    _branches(0.25, {512: [0.05] * 3})  # nothing passes: low None
    + _branches(0.5, {512: [0.0] * 3, 1024: [0.03] * 3})  # low 512
    + _branches(1.0, {512: [0.0] * 3, 1024: [0.0] * 3, 2048: [0.1] * 3})  # low 1024
    + _branches(2.0, {b: [0.0] * 3 for b in (512, 1024, 2048, 4096)})  # low 4096, censored
    + _branches(4.0, {512: [0.0] * 3, 1024: [0.0] * 3, 2048: [0.1] * 3})
  )  # low 1024: never shrink
  traj = branching.trajectory(data, 256, EPS)
  assert [(c.point, c.low) for c in traj] == [(0.25, None), (0.5, 512), (1.0, 1024), (2.0, 4096), (4.0, 1024)]
  assert traj[3].censored and not traj[2].censored
  assert branching.warmup_schedule(traj, 256) == [(0.0, 256), (0.5, 512), (1.0, 1024), (2.0, 4096)]
  assert branching.warmup_schedule(traj, 256, max_batch=2048) == [(0.0, 256), (0.5, 512), (1.0, 1024), (2.0, 2048)]


def test_the_doubling_rule_on_any_limit_such_as_the_noise_scale():
  # B_simple of the MNIST reference at its branch points (docs/studies/mnist_branching, in git at 80c425a): 512 from
  # 4.02 epochs (843 ≥ 512, < 1024), 1024 from 8.04 (1872 ≥ 1024, < 2048); a missing or non-finite value keeps the
  # batch.
  limits = [(0.25, 13.7), (0.5, 22.3), (1.0, None), (2.0, float("nan")), (4.02, 843.0), (8.04, 1872.0)]
  assert branching.doubling_schedule(limits, 256) == [(0.0, 256), (4.02, 512), (8.04, 1024)]
  assert branching.doubling_schedule(limits, 256, max_batch=512) == [(0.0, 256), (4.02, 512)]


def test_a_branch_that_blew_up_fails_its_batch_rather_than_straddling():
  """Issue 41: a loss ≥ 1e10 (or non-finite) in one seed made the t-interval so wide that the verdict was
  'borderline'; such a batch is 'fail', so the bracket's high end stops below it."""
  diffs = {512: [0.004, 0.005, 0.006], 1024: [0.0, 2e10, 0.001], 2048: [0.0, math.nan, 0.0]}
  c = branching.critical_batch(_branches(1.0, diffs), 1.0, 256, EPS)
  assert [c.verdicts[b].verdict for b in (512, 1024, 2048)] == ["pass", "fail", "fail"]
  assert (c.low, c.high) == (512, 512)
  assert branching.blew_up(1e10) and branching.blew_up(math.inf) and not branching.blew_up(9.9e9)
  below = branching.critical_batch(_branches(1.0, {512: [0.0, 9e9, 0.0]}), 1.0, 256, EPS)
  assert below.verdicts[512].verdict == "borderline"  # large but finite and below 1e10: the interval decides


def test_epsilon_sensitivity_lists_the_bracket_at_every_epsilon():
  from lamb_lars.study.report import report_branching as rb

  assert rb.other_epsilons(0.5, True) == [0.05, 0.1, 0.2, 0.5]
  assert rb.other_epsilons(0.01, False) == pytest.approx([0.001, 0.002, 0.005, 0.01, 0.02])
  assert rb.other_epsilons(0.1, True, (0.2,)) == [0.1, 0.2]
  diffs = {512: [0.004, 0.005, 0.006], 1024: [0.02, 0.021, 0.019]}  # reference loss mean 0.5
  lines = rb.sensitivity(_branches(1.0, diffs), 256, 0.02, True, (0.01, 0.02, 0.05))
  # ε = 1% (0.005): 512's interval [0.0025, 0.0075] straddles it, 1024 fails; 2% (0.01): 512 passes, 1024 fails;
  # 5% (0.025): both pass (censored).
  row = next(l for l in lines if l.startswith("| 1 |"))
  assert row == "| 1 | [—, 512] | [512, 512] | [1024, 1024] censored |", row
