"""The batch-size warmup comparison (lamb_lars/study/analysis/batch_warmup.py), on hand-made records; expected
values are computed here from the formulas (Student-t interval, per-seed step ratios), not by the module."""
import math

import numpy as np
from scipy import stats

from lamb_lars.study.analysis import batch_warmup as bw
from lamb_lars.study.records import Trial


def _trial(arm, batch, seed, accs, steps, status="done"):
  curve = [{"step": s, "examples": s * batch, "epoch": s * batch / 1000, "eval_accuracy": a}
           for s, a in zip(steps, accs)]
  return Trial(f"{arm}-{seed}", batch, role="warmup", technique=arm, seed=seed, status=status, curve=curve)


BASE = [_trial("fixed_256", 256, s, acc, [100, 200, 300, 400]) for s, acc in
        enumerate([[0.97, 0.985, 0.989, 0.990], [0.97, 0.984, 0.988, 0.991], [0.96, 0.986, 0.990, 0.992]])]
WARM = [_trial("warmup", 256, s, acc, [100, 150, 200, 250]) for s, acc in
        enumerate([[0.97, 0.989, 0.990, 0.991], [0.97, 0.988, 0.991, 0.991], [0.97, 0.98, 0.985, 0.987]])]
BIG = [_trial("fixed_2048", 2048, s, [0.95, 0.99], [20, 40]) for s in range(3)]


def test_the_target_is_the_low_end_of_the_base_arms_interval():
  finals = np.array([0.990, 0.991, 0.992])
  half = stats.t.ppf(0.975, 2) * finals.std(ddof=1) / math.sqrt(3)
  assert math.isclose(bw.target(BASE), finals.mean() - half, rel_tol=1e-12)
  assert bw.base_arm(bw.arms(BASE + WARM + BIG)) == "fixed_256"


def test_steps_to_target_are_per_seed_and_a_miss_is_censored():
  goal = bw.target(BASE)   # ≈ 0.98852
  assert [bw.first_reaching(t, goal) for t in BASE] == [(300, 76800), (400, 102400), (300, 76800)]
  assert [bw.first_reaching(t, goal) for t in WARM] == [(150, 38400), (200, 51200), None]
  assert bw.step_ratios(WARM, BASE, goal) == [0.5, 0.5, math.inf]
  assert bw.step_ratios(BIG, BASE, goal) == [40 / 300, 40 / 400, 40 / 300]


def test_the_saving_verdict_reads_the_interval_of_the_ratios():
  goal = bw.target(BASE)
  by_arm = bw.arms(BASE + WARM + BIG)
  rows = {r[0]: r for r in bw.rows(by_arm, "fixed_256", goal)}
  assert rows["warmup"][-1].startswith("borderline")   # one seed never reached a*: the interval is unbounded above
  assert rows["fixed_2048"][-1].startswith("pass")
  assert rows["fixed_256"][-1] == "—"
  assert "> 250" in rows["warmup"][3]


def test_the_section_has_the_table_and_figure(tmp_path):
  lines = bw.section(BASE + WARM + BIG, str(tmp_path))
  assert lines[0] == "## Batch-size warmup against fixed batches"
  assert (tmp_path / "batch_warmup.png").exists()
  assert bw.section(WARM, str(tmp_path)) == []   # no fixed arm: no base, no section
