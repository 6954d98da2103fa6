"""B_simple as a trajectory (noise_trajectory.py) on synthetic evals with NaNs and infs, against numpy float64
written from the definition; the report shows the phases and counts the non-finite evaluations."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lamb_lars.study.analysis import noise_trajectory as nt
from lamb_lars.study.report import report_scaling
from lamb_lars.study.records import Trial


def _trial(rid, b, steps, values):
  return Trial(
    rid, b, curve=[{"step": int(s), "noise_scale": float(v), "eval_accuracy": 0.5} for s, v in zip(steps, values)]
  )


def _reference(runs, n):
  """Phase k ∋ step s iff k·S/n < s ≤ (k+1)·S/n (step 0 in phase 0), S = the run's last step."""
  pools = [[] for _ in range(n)]
  for steps, values in runs:
    steps, values = np.asarray(steps, np.float64), np.asarray(values, np.float64)
    last = steps.max()
    for k in range(n):
      lo, hi = k * last / n, (k + 1) * last / n
      sel = (steps > lo) & (steps <= hi) | ((k == 0) & (steps == 0))
      pools[k].extend(values[sel])
  out = []
  for vals in pools:
    x = np.asarray(vals, np.float64)
    fin = x[np.isfinite(x)]
    out.append(
      (
        np.median(fin) if fin.size else None,
        np.percentile(fin, 25) if fin.size else None,
        np.percentile(fin, 75) if fin.size else None,
        fin.size,
        x.size - fin.size,
        int((fin <= 0).sum()),
      )
    )
  return out


def test_trajectory_matches_numpy_with_nonfinite_values():
  rng = np.random.default_rng(0)
  runs = []
  for last in (370, 500):
    steps = np.arange(0, last + 1, 10)
    values = np.exp(np.linspace(3.5, 11.4, steps.size)) * rng.uniform(0.5, 1.5, steps.size)  # 40 → ~90,000
    values[[3, 17, -1]] = [np.nan, np.inf, np.nan]
    values[1] = -5.0  # a negative |G|² estimate early on
    runs.append((steps, values))
  trials = [_trial(f"r{i}", 256, s, v) for i, (s, v) in enumerate(runs)]
  for n in (1, 4, 10):
    got = nt.trajectory(trials, num_phases=n)
    ref = _reference(runs, n)
    assert len(got) == n
    for p, (med, q25, q75, nf, nnf, npos) in zip(got, ref):
      assert (p.num_finite, p.num_nonfinite, p.num_nonpositive) == (nf, nnf, npos)
      assert p.median == pytest.approx(med, rel=1e-12) and p.q25 == pytest.approx(q25, rel=1e-12)
      assert p.q75 == pytest.approx(q75, rel=1e-12)
  got = nt.trajectory(trials, num_phases=10)
  assert sum(p.num_nonfinite for p in got) == 6 and sum(p.num_finite + p.num_nonfinite for p in got) == 38 + 51
  assert got[0].median < got[-1].median  # it grows over training
  assert nt.count_nonfinite(trials) == (6, 89)
  with pytest.raises(ValueError, match="num_phases"):
    nt.trajectory(trials, num_phases=0)


def test_phase_edges():
  assert [nt.phase_of(s, 100, 10) for s in (0, 1, 10, 11, 100)] == [0, 0, 0, 1, 9]


def test_report_counts_nonfinite_evaluations(tmp_path):
  steps = np.arange(1, 21)
  vals = np.linspace(100, 2000, 20)
  vals[[15, 19]] = np.nan
  lines = "\n".join(report_scaling.noise_section([_trial("a", 256, steps, vals)], str(tmp_path), None, 4))
  assert "| 256 | " in lines and "| 1 | 2 / 20 |" in lines
  second_half = vals[10:][np.isfinite(vals[10:])]
  assert f"B_simple = {np.median(second_half):.4g} (second-half median; 2 of 20 evaluations were non-finite" in lines
  assert "| 90–100% | " in lines and "1 non-finite" in lines
  assert not math.isnan(np.median(second_half))


def test_a_run_stopped_early_fills_only_its_early_phases():
  """Phases are fractions of the run's *budget* (budget_epochs × steps per epoch), not of its last step: a run
  pruned at 20% of a 1,000-step budget has its evals in phases 0–1 of 10. Phased by its own last step (the old
  rule) its step-200 value sat in the 90–100% phase beside the full runs' late values."""
  rows = lambda steps, vals: [{"step": s, "epoch": s / 100.0, "noise_scale": v} for s, v in zip(steps, vals)]
  full = Trial("full", 256, budget_epochs=10.0, curve=rows([100, 500, 1000], [10.0, 50.0, 100.0]))
  pruned = Trial("pruned", 256, budget_epochs=10.0, status="pruned", curve=rows([100, 200], [11.0, 12.0]))
  assert pruned.budget_steps() == 1000
  phases = nt.trajectory([full, pruned], num_phases=10)
  assert [p.num_finite for p in phases] == [2, 1, 0, 0, 1, 0, 0, 0, 0, 1]
  assert phases[9].median == 100.0 and phases[1].median == 12.0


def test_the_headline_b_simple_uses_the_second_half_of_each_budget():
  """'Predicted B_crit ≈ B_simple' is the median of each run's late values, late meaning the second half of its
  *budget* (as the trajectory table phases): a run pruned at 20% of its budget has no late values, so its early
  B_simple (small, before the gradient noise grows) does not enter the headline."""
  rows = lambda steps, vals: [{"step": s, "epoch": s / 100.0, "noise_scale": v} for s, v in zip(steps, vals)]
  full = Trial("full", 256, budget_epochs=10.0, curve=rows([200, 400, 600, 800, 1000], [5.0, 9.0, 80.0, 100.0, 120.0]))
  pruned = Trial("pruned", 256, budget_epochs=10.0, status="pruned", curve=rows([100, 200], [3.0, 4.0]))
  assert report_scaling.late_median(full, "noise_scale") == 100.0  # steps 600, 800, 1000 > 500
  assert report_scaling.late_median(pruned, "noise_scale") is None  # both evals in the first half
  no_budget = Trial("nb", 256, curve=rows([100, 200, 300, 400], [1.0, 2.0, 3.0, 4.0]))
  assert report_scaling.late_median(no_budget, "noise_scale") == 3.5  # S = its last step: 300, 400 > 200
