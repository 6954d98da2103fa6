"""The small-batch end's re-analysis (lamb_lars/study/analysis/small_batch_end.py): formatting, the pre-registered
verdict rule, and the fits on folders whose steps follow S(B) = S_min·(1 + B_crit/B) exactly."""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest

from lamb_lars.configs.studies import mnist_batch_ladder as cfg
from lamb_lars.study.analysis import precision, scaling_fit
from lamb_lars.study.analysis import small_batch_end as sbe


@pytest.mark.parametrize(
  "x, want",
  [
    (528.9, "530"),
    (286.4, "290"),
    (93.2, "93"),
    (8.04, "8.0"),
    (0.01234, "0.012"),
    (1049.9, "1,000"),
    (99501.0, "100,000"),
    (math.inf, "∞"),
    (None, "—"),
    (0.0, "0"),
  ],
)
def test_two_significant_figures(x, want):
  assert precision.significant(x) == want


def _fit(b, lo, hi, why=""):
  return sbe.Fit(b, why, scaling_fit.Interval(lo, hi, 100, 0.0, 0), 8, 0)


def test_the_pre_registered_verdict_rule():
  assert sbe.verdict(_fit(500.0, 400.0, 700.0), _fit(300.0, 200.0, 390.0)) == "differs"  # no overlap
  assert sbe.verdict(_fit(500.0, 400.0, 700.0), _fit(520.0, 450.0, 650.0)) == "agrees"  # each inside the other's
  assert sbe.verdict(_fit(500.0, 400.0, 700.0), _fit(380.0, 300.0, 450.0)) == "inconclusive"  # overlap, 380 outside
  assert sbe.verdict(_fit(500.0, 400.0, 700.0), _fit(500.0, 400.0, 700.0, why="edge")) == "inconclusive"
  assert sbe.verdict(_fit(None, 0.0, 0.0, why="no fit"), _fit(500.0, 400.0, 700.0)) == "inconclusive"


def _write(path, rows):
  with open(path, "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)


def _folder(path, batches, s_min, b_crit, limit, metric_offset=0.0):
  """A published-like folder: per batch, one chosen trial and 2 replicate seeds whose validation accuracy crosses
  each target at steps ⌈S(B)·g/0.98⌉ (S(B) from the law, numpy float64), with evaluations every step; a batch
  whose S exceeds ``limit`` stops there (a censored seed)."""
  path.mkdir()
  runs, evals = [], []
  for b in batches:
    chosen = f"tuned-b{b}-x"
    runs.append(
      dict(run_id=chosen, cell=f"tuned-b{b}", batch_size=b, phase="search", replicate_of="", steps=0, stopped="")
    )
    for k in range(2):
      s = float(np.float64(s_min) * (1.0 + np.float64(b_crit) / b)) * (1.0 + 0.05 * k)
      last = int(min(limit, math.ceil(1.1 * s)))
      rid = f"tuned-b{b}-rep{k}"
      runs.append(
        dict(
          run_id=rid,
          cell=f"tuned-b{b}",
          batch_size=b,
          phase="replicate",
          replicate_of=chosen,
          steps=last,
          stopped="" if last == limit else "target",
        )
      )
      for step in range(1, last + 1):
        acc = min(0.9875, 0.98 * step / s)  # crosses 0.98 at step ≥ s; never reaches 98.8%
        evals.append(dict(run_id=rid, step=step, validation_accuracy=acc, test_accuracy=acc + metric_offset))
  _write(path / "runs.csv", runs)
  _write(path / "evals.csv", evals)


def test_rows_recover_the_law_and_the_small_batches_move_nothing_when_it_holds(tmp_path):
  """Both folders follow one law (S_min = 100, B_crit = 400): the fit with 64 and 128 agrees with the one
  without, and both recover B_crit; the 99.0% goal is never reached (acc ≤ 98.75%) so it has no B_crit."""
  _folder(tmp_path / sbe.LADDER, (256, 512, 1024, 2048, 4096), 100.0, 400.0, limit=10_000)
  _folder(tmp_path / sbe.SMALL, (64, 128), 100.0, 400.0, limit=10_000)
  rs = sbe.rows(str(tmp_path), num_bootstrap=50)
  row = next(r for r in rs if r.metric == cfg.SMALL_TARGET_METRIC and r.goal == 0.98)
  # Seeds at S and 1.05·S, observed at ⌈·⌉: the fit sits within a few percent of the law's B_crit.
  assert row.without.b_crit == pytest.approx(400.0, rel=0.1) and row.with_small.b_crit == pytest.approx(400.0, rel=0.1)
  assert row.verdict == "agrees" and sorted(row.small_points) == [64, 128]
  goal = next(r for r in rs if r.metric == cfg.SMALL_TARGET_METRIC and r.goal == 0.99)
  assert not goal.without.measured and goal.verdict == "inconclusive"
  assert row.stopped_before == 0


def test_a_different_small_batch_end_differs(tmp_path):
  """At 64 and 128 the steps follow a law with B_crit = 50 instead of 400 (fewer steps than the big law's): the
  joint fit flattens S(B) at the small end, which moves B_crit up, outside the interval of the fit without them."""
  _folder(tmp_path / sbe.LADDER, (256, 512, 1024, 2048, 4096), 100.0, 400.0, limit=10_000)
  _folder(tmp_path / sbe.SMALL, (64, 128), 437.5, 50.0, limit=10_000)  # S(128) = 608 < the big law's 1350
  row = next(
    r for r in sbe.rows(str(tmp_path), num_bootstrap=50) if r.metric == cfg.SMALL_TARGET_METRIC and r.goal == 0.98
  )
  assert row.with_small.b_crit > row.without.interval.hi and row.verdict == "differs"


def test_a_seed_stopped_before_the_target_is_a_lower_bound_and_counted(tmp_path):
  _folder(tmp_path / sbe.LADDER, (256, 512, 1024, 2048, 4096), 100.0, 400.0, limit=10_000, metric_offset=0.0)
  _folder(tmp_path / sbe.SMALL, (64, 128), 100.0, 400.0, limit=10_000)
  # Truncate the 256 seeds' curves before the target and mark them stopped at their own (test) target.
  runs = list(csv.DictReader(open(tmp_path / sbe.LADDER / "runs.csv")))
  for r in runs:
    if r["batch_size"] == "256" and r["phase"] == "replicate":
      r["steps"], r["stopped"] = "200", "target"
  _write(tmp_path / sbe.LADDER / "runs.csv", runs)
  evals = [
    e
    for e in csv.DictReader(open(tmp_path / sbe.LADDER / "evals.csv"))
    if not (e["run_id"].startswith("tuned-b256-rep") and int(e["step"]) > 200)
  ]
  _write(tmp_path / sbe.LADDER / "evals.csv", evals)
  row = next(
    r for r in sbe.rows(str(tmp_path), num_bootstrap=20) if r.metric == cfg.SMALL_TARGET_METRIC and r.goal == 0.98
  )
  assert row.without.censored == 2 and row.stopped_before == 2
  assert sbe.rows(str(tmp_path), num_bootstrap=20)[0].without.points == 10


def test_the_pre_registrations_wording_of_the_rule_ignores_the_rejection_by_misses():
  """A fit rejected only by its own misses measures B_crit under the pre-registration's wording (why_not_measured
  alone), and the literal verdict then reads it; an edge reason stays under both wordings."""
  rejected = sbe.Fit(
    320.0, "the fit's own misses reject it at 8192", scaling_fit.Interval(210.0, 450.0, 100, 0.0, 0), 40, 14, ""
  )
  other = _fit(520.0, 430.0, 640.0)
  assert not rejected.measured and sbe.literal(rejected).measured
  row = sbe.Row("validation_accuracy", 0.99, rejected, other, {}, 0)
  assert row.verdict == "inconclusive" and row.literal_verdict == "inconclusive"  # overlap 430–450, 320 outside
  assert sbe.verdict(sbe.literal(rejected), _fit(330.0, 220.0, 440.0)) == "agrees"
  edge = sbe.Fit(9000.0, "beyond the largest", None, 40, 0, "beyond the largest")
  assert not sbe.literal(edge).measured
  lines = sbe.literal_table([row])
  assert lines[2].startswith("| `validation_accuracy` | 99.0% | 320 | [210, 450]") and "**inconclusive**" in lines[2]
