"""Replicate statistics (lamb_lars/study/analysis/replicates.py) against float64 numpy references written from the
formulas: Student's t quantile by numerical integration of the t density, the mean / sd / t interval, the
agreement and threshold rules, steps to target per seed with misses censored, and the headline-target rule."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from lamb_lars.study.analysis import replicates as R
from lamb_lars.study.records import Trial


def _t_cdf_reference(x: float, nu: int) -> float:
  """P(T ≤ x) for x > 0: 1/2 + ∫_0^x Γ((ν+1)/2)/(√(νπ) Γ(ν/2)) (1 + t²/ν)^(−(ν+1)/2) dt (Simpson, 20k panels)."""
  c = math.exp(math.lgamma((nu + 1) / 2) - math.lgamma(nu / 2)) / math.sqrt(nu * math.pi)
  t = np.linspace(0.0, x, 20_001)
  f = c * (1.0 + t * t / nu) ** (-(nu + 1) / 2)
  h = t[1] - t[0]
  return 0.5 + h / 3 * (f[0] + f[-1] + 4 * f[1:-1:2].sum() + 2 * f[2:-1:2].sum())


def _t975_reference(nu: int) -> float:
  lo, hi = 0.0, 20.0
  for _ in range(60):
    mid = (lo + hi) / 2
    lo, hi = (mid, hi) if _t_cdf_reference(mid, nu) < 0.975 else (lo, mid)
  return (lo + hi) / 2


@pytest.mark.parametrize("nu", [1, 2, 3, 4, 5, 9, 19, 29, 30, 45, 100, 500])
def test_t_quantile_matches_the_t_distribution(nu):
  tol = 1e-5 if nu in (1, 2, 3, 4, 5, 9, 19, 29, 30) else 2e-3  # tabulated exactly; interpolated beyond 30
  assert R.t975(nu) == pytest.approx(_t975_reference(nu), abs=tol)


def test_summary_is_mean_sd_and_t_interval():
  x = np.array([0.9891, 0.9902, 0.9885, 0.9910])
  s = R.summarise(x)
  mean, sd = x.sum() / 4, math.sqrt(((x - x.sum() / 4) ** 2).sum() / 3)
  half = _t975_reference(3) * sd / 2
  assert (s.n, s.mean, s.sd) == (4, pytest.approx(mean, abs=1e-15), pytest.approx(sd, rel=1e-12))
  assert (s.lo, s.hi) == (pytest.approx(mean - half, abs=1e-7), pytest.approx(mean + half, abs=1e-7))
  one = R.summarise([0.99])
  assert one.sd is None and one.lo is None and "single run" in one.text()
  with pytest.raises(ValueError, match="finite"):
    R.summarise([0.99, float("nan")])


def _s(lo, hi):
  return R.Summary((lo, hi), (lo + hi) / 2, 0.1, lo, hi)


def test_agreement_with_the_paper_compares_the_interval_with_the_tolerance_band():
  # paper 99.2%, tolerance 0.3 pp: band [98.9, 99.5]
  assert R.agreement(_s(0.990, 0.994), 0.992, 0.003) == "agrees"
  assert R.agreement(_s(0.985, 0.988), 0.992, 0.003) == "differs"
  assert R.agreement(_s(0.987, 0.991), 0.992, 0.003) == "inconclusive"  # straddles 98.9
  assert R.agreement(_s(0.985, 0.999), 0.992, 0.003) == "inconclusive"  # too wide to say
  assert R.agreement(R.summarise([0.992]), 0.992, 0.003) == "inconclusive"


def _run(rid, accs, *, b=256, status="done", seed=0, budget=None, per_epoch=10):
  return Trial(
    rid,
    b,
    status=status,
    seed=seed,
    budget_epochs=budget if budget is not None else len(accs),
    curve=[{"step": (i + 1) * per_epoch, "epoch": float(i + 1), "eval_accuracy": a} for i, a in enumerate(accs)],
  )


def test_steps_per_seed_censors_misses_and_divergence_at_the_budget():
  runs = [
    _run("hit", [0.97, 0.981, 0.99], seed=1),
    _run("miss", [0.97, 0.975, 0.979], seed=2),
    _run("div", [0.985, 0.99], status="diverged", seed=3, budget=3),
    _run("fail", [0.99], status="failed"),
    _run("late", [0.97, 0.975, 0.981], seed=4),
    _run("stopped", [0.97, 0.979], seed=5, budget=3),
  ]  # stopped at another goal after 2 of 3 epochs
  got = {s.run_id: (s.steps, s.censored) for s in R.steps_per_seed(runs, "eval_accuracy", 0.98)}
  assert got == {
    "hit": (20.0, False),
    "miss": (30.0, True),
    "div": (30.0, True),
    "late": (30.0, False),
    "stopped": (20.0, True),
  }
  half = {s.run_id: (s.steps, s.censored) for s in R.steps_per_seed(runs, "eval_accuracy", 0.98, within=0.5)}
  assert half["late"] == (15.0, True) and half["hit"] == (15.0, True)


def test_headline_target_is_the_highest_every_baseline_seed_reaches_within_half_the_budget():
  seeds = [
    _run(f"s{i}", accs)
    for i, accs in enumerate(
      [[0.981, 0.986, 0.988, 0.990], [0.982, 0.985, 0.987, 0.989], [0.980, 0.9855, 0.989, 0.989]]
    )
  ]
  # within half the budget (2 of 4 epochs): every seed reaches 98.5% (0.986, 0.985, 0.9855), not 98.8%
  assert R.headline_target(seeds, (0.98, 0.985, 0.988), "eval_accuracy") == 0.985
  assert R.headline_target(seeds, (0.99,), "eval_accuracy") is None


def test_report_scaling_section_fits_seeds_at_the_headline_target():
  """Seeds on the exact law S = 100·(1 + 1000/B) to 98.5%; one seed at 4096 misses within a 120-step budget (a
  bound below the law's 124 steps, so it costs nothing): the fit gives B_crit = 1000 at the headline target."""
  from lamb_lars.study.report import report_replicates
  from lamb_lars.study.records import Target

  def run(rid, b, hit, budget_steps, seed, role="technique", phase="replicate"):
    rows = [{"step": 1.0, "epoch": 0.1, "eval_accuracy": 0.5}]
    if hit is not None:
      rows.append({"step": float(hit), "epoch": hit / 10.0, "eval_accuracy": 0.986})
    rows.append({"step": float(budget_steps), "epoch": budget_steps / 10.0, "eval_accuracy": 0.986 if hit else 0.9})
    return Trial(
      rid,
      b,
      role=role,
      technique="tuned",
      phase=phase,
      seed=seed,
      budget_epochs=budget_steps / 10.0,
      curve=rows,
      replicate_of="c" if phase == "replicate" else "",
    )

  trials = [run(f"base{s}", 256, 100.0, 1000.0, s, role="baseline", phase="search") for s in range(3)]
  for b in (256, 512, 1024, 2048, 4096):
    for s in (1, 2):
      trials.append(run(f"b{b}s{s}", b, 100.0 * (1 + 1000.0 / b), 1000.0, s))
  trials.append(run("b4096miss", 4096, None, 120.0, 3))
  target = Target("eval_accuracy", 0.985, "max")
  text = "\n".join(report_replicates.scaling_section(trials, target, (0.98, 0.99), "tuned", bootstrap_num=20))
  assert "Headline target (the highest that every baseline seed reaches within half its budget): 98.50%" in text
  row = next(ln for ln in text.splitlines() if ln.startswith("| 98.50% (headline)"))
  assert row.split(" | ")[1] == "1,000" and ">120" in row
  assert "| 99.00% |" in text and "two or more batch sizes" in text  # nobody reaches 99%


def test_baseline_seeds_enter_the_steps_fit_once_when_there_is_no_target_technique():
  """With ``target_technique = ''`` (e.g. the ImageNet ladder), the baseline is among the target trials already;
  adding it again listed each baseline seed twice in S(B), doubling its weight in the fit and the bootstrap."""
  from lamb_lars.study.report import report, report_replicates
  from lamb_lars.study.records import Target

  def run(rid, b, hit, seed, role, phase, of=""):
    rows = [
      {"step": 1.0, "epoch": 0.1, "eval_accuracy": 0.5},
      {"step": float(hit), "epoch": hit / 10.0, "eval_accuracy": 0.986},
      {"step": 1000.0, "epoch": 100.0, "eval_accuracy": 0.986},
    ]
    return Trial(
      rid, b, role=role, phase=phase, seed=seed, budget_epochs=100.0, curve=rows, replicate_of=of, cell=f"{role}-b{b}"
    )

  trials = [
    run("base", 256, 111.0, 0, "baseline", "search"),
    *[run(f"base-s{s}", 256, 100.0 + s, s, "baseline", "replicate", "base") for s in (1, 2)],
    *[
      run(f"lin-b{b}-s{s}", b, 100.0 * (1 + 1000.0 / b) + s, s, "linear", "replicate", f"lin-b{b}")
      for b in (512, 1024)
      for s in (1, 2)
    ],
  ]
  spec = report.ReportSpec(target=Target("eval_accuracy", 0.985, "max"), targets=(0.985,), target_technique="")
  text = "\n".join(report_replicates.sections(trials, spec, 256))
  row = next(ln for ln in text.splitlines() if ln.startswith("| 98.50%"))
  assert "256: 101, 102; 512:" in row


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5])
def test_distinct_resamples_counts_the_multisets_a_bootstrap_can_draw(k):
  """The report's note on the per-seed bootstrap ('k seeds give only N distinct resamples'), against brute force:
  every ordered draw of k seeds with replacement, counted once per multiset."""
  import itertools

  from lamb_lars.study.report import report_replicates

  brute = len({tuple(sorted(d)) for d in itertools.product(range(k), repeat=k)})
  assert report_replicates.distinct_resamples(k) == brute


def test_sensitivity_span_of_a_two_batch_study_reads_not_measured():
  """Replicates at two batch sizes only (Table 3's 256 and 8K): under the 'measured' fit rule every variant's B_crit
  is 'not measured', and the span line under the table says so instead of an empty span (it printed ': .')."""
  from lamb_lars.study.report import report_replicates
  from lamb_lars.study.records import Target

  def run(rid, b, hit, seed):
    rows = [
      {"step": 1.0, "epoch": 0.1, "eval_accuracy": 0.5},
      {"step": float(hit), "epoch": hit / 10.0, "eval_accuracy": 0.991},
      {"step": 1000.0, "epoch": 100.0, "eval_accuracy": 0.991},
    ]
    return Trial(
      rid,
      b,
      role="technique",
      technique="t",
      phase="replicate",
      seed=seed,
      budget_epochs=100.0,
      curve=rows,
      replicate_of=f"c{b}",
      cell=f"c{b}",
    )

  trials = [run(f"b{b}s{s}", b, 100.0 * (1 + 1000.0 / b) + s, s) for b in (256, 8192) for s in (1, 2, 3)]
  target = Target("eval_accuracy", 0.99, "max")
  measured = "\n".join(
    report_replicates.sensitivity_section(trials, target, (0.99,), None, "t", bootstrap_num=20, fit_rule="measured")
  )
  assert "B_crit over every variant, interval and left-out batch of the table: 99.00%: not measured." in measured
  assert "not measured (only 2 batch sizes" in measured
  old = "\n".join(report_replicates.sensitivity_section(trials, target, (0.99,), None, "t", bootstrap_num=20))
  span = next(ln for ln in old.splitlines() if ln.startswith("B_crit over every variant"))
  assert re.search(r"99\.00%: [\d.]+ … [\d.]+\.$", span), span  # the 'any' rule still prints the 2-point fit's span
