"""The batch-size warmup comparison (lamb_lars/study/analysis/batch_warmup.py; its report section
lamb_lars/study/report/report_batch_warmup.py), on hand-made records; expected
values are computed here from the formulas (Student-t interval, per-seed step ratios), not by the module."""

import math

import numpy as np
from scipy import stats

from lamb_lars.study.analysis import batch_warmup as bw
from lamb_lars.study.records import Trial
from lamb_lars.study.report import report_batch_warmup


def _trial(arm, batch, seed, accs, steps, status="done"):
  curve = [
    {"step": s, "examples": s * batch, "epoch": s * batch / 1000, "eval_accuracy": a} for s, a in zip(steps, accs)
  ]
  return Trial(f"{arm}-{seed}", batch, role="warmup", technique=arm, seed=seed, status=status, curve=curve)


BASE = [
  _trial("fixed_256", 256, s, acc, [100, 200, 300, 400])
  for s, acc in enumerate([[0.97, 0.985, 0.989, 0.990], [0.97, 0.984, 0.988, 0.991], [0.96, 0.986, 0.990, 0.992]])
]
WARM = [
  _trial("warmup", 256, s, acc, [100, 150, 200, 250])
  for s, acc in enumerate([[0.97, 0.989, 0.990, 0.991], [0.97, 0.988, 0.991, 0.991], [0.97, 0.98, 0.985, 0.987]])
]
BIG = [_trial("fixed_2048", 2048, s, [0.95, 0.99], [20, 40]) for s in range(3)]


def test_the_target_is_the_low_end_of_the_base_arms_interval():
  finals = np.array([0.990, 0.991, 0.992])
  half = stats.t.ppf(0.975, 2) * finals.std(ddof=1) / math.sqrt(3)
  assert math.isclose(bw.target(BASE), finals.mean() - half, rel_tol=1e-12)
  assert bw.base_arm(bw.arms(BASE + WARM + BIG)) == "fixed_256"


def test_steps_to_target_are_per_seed_and_a_miss_is_censored():
  goal = bw.target(BASE)  # ≈ 0.98852
  assert [bw.first_reaching(t, goal) for t in BASE] == [(300, 76800), (400, 102400), (300, 76800)]
  assert [bw.first_reaching(t, goal) for t in WARM] == [(150, 38400), (200, 51200), None]


def test_non_inferiority_reads_the_interval_of_the_paired_differences():
  d = np.array([0.991 - 0.990, 0.991 - 0.991, 0.987 - 0.992])
  np.testing.assert_allclose(bw.paired_differences(WARM, BASE), d, atol=1e-12)
  v = bw.non_inferiority(WARM, BASE)
  half = stats.t.ppf(0.975, 2) * d.std(ddof=1) / math.sqrt(3)
  assert (v.low, v.high) == (d.mean() - half, d.mean() + half)
  assert v.verdict == "borderline"  # [−0.82, +0.49] pp straddles −0.2 pp
  assert bw.non_inferiority(BIG, BASE).verdict == "borderline"  # d = 0, −0.1, −0.2 pp: [−0.35, +0.15] pp
  low = [_trial("fixed_1024", 1024, s, [0.95, a], [50, 100]) for s, a in enumerate([0.975, 0.978, 0.976])]
  assert bw.non_inferiority(low, BASE).verdict == "fail"  # d ≈ −1.5 pp on every seed
  diverged = [_trial("fixed_4096", 4096, s, [0.1], [10], status="diverged") for s in range(3)]
  assert bw.non_inferiority(diverged, BASE).verdict == "fail"


def test_the_table_gives_steps_and_their_ratio_to_the_base():
  goal = bw.target(BASE)
  rows = {r[0]: r for r in report_batch_warmup.rows(bw.arms(BASE + WARM + BIG), "fixed_256", goal)}
  assert (rows["fixed_256"][4], rows["fixed_256"][5]) == (400, "—")
  assert (rows["warmup"][4], rows["warmup"][5]) == (250, "0.625")
  assert (rows["fixed_2048"][4], rows["fixed_2048"][5]) == (40, "0.100")
  assert "> 250" in rows["warmup"][6]


def test_the_section_has_the_table_and_figure(tmp_path):
  lines = report_batch_warmup.section(BASE + WARM + BIG, str(tmp_path))
  assert lines[0] == "## Batch-size warmup against fixed batches"
  assert (tmp_path / "batch_warmup.png").exists()
  assert report_batch_warmup.section(WARM, str(tmp_path)) == []  # no fixed arm: no base, no section


def test_a_searched_arm_is_its_chosen_configuration_with_its_replicates():
  """Issue 41's control (fixed large batch, searched LR warmup): of its search trials only the one chosen on the
  validation split (here the better final validation accuracy) and that one's replicate seeds form the arm."""

  def searched(rid, val, seed=0, **kw):
    curve = [
      {"step": s, "examples": s * 2048, "epoch": 30.0 * s / 40, "eval_accuracy": 0.99, "validation_accuracy": val}
      for s in (20, 40)
    ]
    return Trial(
      rid,
      2048,
      role="warmup",
      technique="ctl",
      seed=seed,
      status="done",
      curve=curve,
      budget_epochs=30.0,
      space={"optimizer.learning_rate": ["log", 0.01, 0.1]},
      **kw,
    )

  good, bad = searched("ctl-a", 0.99), searched("ctl-b", 0.95)
  reps = [searched(f"ctl-a-s{s}", 0.98, seed=s, phase="replicate", replicate_of="ctl-a") for s in (1, 2)]
  by = bw.arms(BASE + [bad, good] + reps)
  assert [t.run_id for t in by["ctl"]] == ["ctl-a", "ctl-a-s1", "ctl-a-s2"]
  assert [t.run_id for t in bw.arms(BIG)["fixed_2048"]] == ["fixed_2048-0", "fixed_2048-1", "fixed_2048-2"]
  v = bw.non_inferiority(WARM, BASE, margin=0.01)  # the pre-registered margin from the config
  assert v.threshold == -0.01


def test_the_margin_sensitivity_reads_the_same_interval_against_each_margin():
  """fixed_2048's paired differences 0, −0.1, −0.2 pp have the interval [−0.35, +0.15] pp (t, 2 d.o.f.): it
  straddles every margin up to 0.35 pp and passes −0.5 pp; computed here from the formula."""
  d = np.array([0.0, -0.001, -0.002])
  half = stats.t.ppf(0.975, 2) * d.std(ddof=1) / math.sqrt(3)
  low, high = d.mean() - half, d.mean() + half

  def want(m):
    return "pass" if low >= -m else "fail" if high < -m else "borderline"

  rows = report_batch_warmup.margin_rows(bw.arms(BASE + BIG), "fixed_256", 0.002)
  assert rows == [["fixed_2048"] + [want(m) for m in (0.001, 0.002, 0.003, 0.005)]]
  assert rows[0][1:] == ["borderline", "borderline", "borderline", "pass"]
  lines = report_batch_warmup.section(BASE + BIG, None, margin=0.002)
  assert "| arm | −0.1 pp | −0.2 pp (pre-registered) | −0.3 pp | −0.5 pp |" in lines
