"""lamb_lars/study/analysis/calibration.py (issue 60 part 2): the geometric mean and its Student-t interval against
numpy float64 written from the formula with a tabulated t quantile, the within-2× rule at its edges, B_noise at the
target on a small folder written here, and the published folder verifies."""

from __future__ import annotations

import csv
import math
import os

import numpy as np
import pytest

from lamb_lars.study.analysis import calibration as cal
from lamb_lars.study.publishing import provenance

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
T_975_3 = 3.182446305  # Student t, 97.5% quantile, 3 degrees of freedom (statistical tables)


def test_log_interval_matches_the_formula_in_float64():
  x = np.array([183.0, 120.5, 260.0, 95.25], np.float64)
  logs = np.log(x)
  m, s = logs.mean(), logs.std(ddof=1)
  want = (np.exp(m), np.exp(m - T_975_3 * s / 2.0), np.exp(m + T_975_3 * s / 2.0))
  np.testing.assert_allclose(cal.log_interval(list(x), 0.95), want, rtol=1e-9)
  assert cal.log_interval([42.0])[0] == pytest.approx(42.0) and all(math.isnan(v) for v in cal.log_interval([42.0])[1:])
  with pytest.raises(ValueError, match="positive"):
    cal.log_interval([3.0, 0.0])


@pytest.mark.parametrize(
  "lo, hi, want",
  [
    (0.5, 2.0, "agrees"),  # the edges belong to [1/2, 2]
    (0.6, 1.9, "agrees"),
    (0.1, 0.49, "differs"),
    (2.01, math.inf, "differs"),
    (0.3, 0.9, "inconclusive"),
    (0.0, 5.68, "inconclusive"),
    (math.nan, 1.0, "inconclusive"),
  ],
)
def test_within_two_fold(lo, hi, want):
  assert cal.within(lo, hi, 2.0) == want


def test_combined_verdicts():
  assert cal.combined(["agrees", "agrees"]) == "agrees"
  assert cal.combined(["agrees", "inconclusive"]) == "inconclusive"
  assert cal.combined(["agrees", "differs", "inconclusive"]) == "differs"
  assert cal.combined([]) == "inconclusive"


def _write(path, rows):
  with open(path, "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)


def test_b_noise_is_read_at_each_baseline_runs_first_evaluation_meeting_the_target(tmp_path):
  _write(
    tmp_path / "runs.csv",
    [
      {"run_id": "a", "role": "baseline"},
      {"run_id": "b", "role": "baseline"},
      {"run_id": "c", "role": "baseline"},  # never meets the target: left out and counted
      {"run_id": "t", "role": "technique"},  # not a baseline: not read
    ],
  )
  evals = [
    ("a", 10, 0.90, 50.0),
    ("a", 20, 0.985, 400.0),
    ("a", 30, 0.99, 900.0),
    ("b", 20, 0.97, 100.0),
    ("b", 10, 0.981, 30.0),  # out of step order in the file: the first *step* meeting it counts
    ("c", 10, 0.5, 10.0),
    ("t", 10, 0.99, 7.0),
  ]
  _write(
    tmp_path / "evals.csv",
    [{"run_id": r, "step": s, "test_accuracy": a, "noise_scale": n} for r, s, a, n in evals],
  )
  assert cal.b_noise_at_target(str(tmp_path), 0.98) == ([400.0, 30.0], 1)


def test_kappa_divides_the_interval_ends_crosswise():
  row = cal.SettingRow("s", 0.98, (200.0, 100.0, 400.0), "", (1000.0, 500.0, 2000.0), 4, 0)
  assert row.kappa == pytest.approx((0.2, 0.05, 0.8)) and row.verdict == "inconclusive"
  assert cal.SettingRow("s", 0.98, None, "no fit", (1.0, 1.0, 1.0), 4, 0).verdict == "not measured"


def test_the_published_calibration_verifies():
  folder = os.path.join(REPO, "docs", "studies", "critical_batch_calibration")
  assert provenance.verify(folder) == []
