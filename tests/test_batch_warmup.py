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


# ---- against the best fixed batch (issue 60's aim) ----
def _curve_trial(arm, batch, seed, points, final, status="done"):
  """A run whose curve is (step, examples, accuracy) ``points`` followed by its final evaluation."""
  curve = [{"step": s, "examples": e, "eval_accuracy": a} for s, e, a in points]
  last_s, last_e = points[-1][0] + 10, points[-1][1] + 10 * batch
  curve.append({"step": last_s, "examples": last_e, "eval_accuracy": final})
  return Trial(f"{arm}-{seed}", batch, role="warmup", technique=arm, seed=seed, status=status, curve=curve)


FINALS = [0.990, 0.991, 0.992, 0.990, 0.991, 0.992, 0.990, 0.991]
AIM_BASE = [
  _curve_trial("fixed_256", 256, s, [(100, 25600, 0.95), (300, 76800, 0.995)], f) for s, f in enumerate(FINALS)
]
TUNED = [
  _curve_trial("fixed_1024_tuned", 1024, s, [(25, 25600, 0.95), (50, 51200, 0.995)], f) for s, f in enumerate(FINALS)
]
FAST_BAD = [_curve_trial("fixed_2048", 2048, s, [(20, 40960, 0.995)], 0.975) for s in range(8)]


def _controller(name, met_seeds):
  """Seeds in ``met_seeds`` reach a* at step 30 with 40,000 examples (ratios 0.6 and 0.78 against TUNED's 50 steps
  and 51,200 examples: the aim met); the others at step 45 (ratio 0.9: not met). Finals as the base's."""
  return [
    _curve_trial(name, 256, s, [(10, 2560, 0.9), ((30, 40000, 0.995) if s in met_seeds else (45, 60000, 0.995))], f)
    for s, f in enumerate(FINALS)
  ]


def test_the_best_fixed_batch_is_the_fastest_non_inferior_fixed_arm():
  by_arm = bw.arms(AIM_BASE + TUNED + FAST_BAD)
  goal = bw.target(by_arm["fixed_256"])
  assert 0.95 < goal < 0.995  # every run reaches a* at its 0.995 point
  assert bw.median_steps(by_arm["fixed_256"], goal) == 300 and bw.median_steps(by_arm["fixed_1024_tuned"], goal) == 50
  assert bw.non_inferiority(by_arm["fixed_2048"], by_arm["fixed_256"]).verdict == "fail"  # faster (20), not eligible
  assert bw.best_fixed(by_arm, "fixed_256", goal) == "fixed_1024_tuned"
  assert bw.best_fixed(bw.arms(AIM_BASE + FAST_BAD), "fixed_256", goal) == "fixed_256"  # the base is eligible


def test_median_steps_counts_a_miss_as_infinite_and_takes_the_lower_median():
  ts = [
    _curve_trial("x", 256, s, [(n, n * 256, 0.995 if n < 1000 else 0.5)], 0.5) for s, n in enumerate([50, 1e4, 60, 1e4])
  ]
  assert bw.median_steps(ts, 0.99) == 60  # sorted (50, 60, ∞, ∞): the lower median
  assert math.isinf(bw.median_steps(ts[1::2], 0.99))


def test_the_aim_is_a_sign_test_over_seeds_with_non_inferiority():
  goal = bw.target(AIM_BASE)
  a = bw.aim(_controller("adaptive", set(range(7))), TUNED, AIM_BASE, goal, "adaptive", "fixed_1024_tuned")
  assert [r[3] for r in a.ratios] == [True] * 7 + [False]
  assert a.ratios[0][1] == 30 / 50 and a.ratios[0][2] == 40000 / 51200 and a.ratios[7][1] == 45 / 50
  assert (a.test.k, a.test.n) == (7, 8) and math.isclose(a.test.p, 9 / 256)  # P(X ≥ 7), X ~ Bin(8, ½)
  assert a.noninferior == "pass" and a.verdict == "met"
  six = bw.aim(_controller("c6", set(range(6))), TUNED, AIM_BASE, goal, "c6", "fixed_1024_tuned")
  assert six.verdict == "inconclusive" and math.isclose(six.test.p, 37 / 256)  # P(X ≥ 6)
  none = bw.aim(_controller("c0", set()), TUNED, AIM_BASE, goal, "c0", "fixed_1024_tuned")
  assert none.verdict == "not met"  # 0 of 8: P(X ≤ 0) = 1/256
  worse = [_curve_trial("w", 256, s, [(30, 40000, 0.995)], 0.980) for s in range(8)]  # fast but 1 pp worse
  assert bw.aim(worse, TUNED, AIM_BASE, goal, "w", "fixed_1024_tuned").verdict == "not met"


def test_the_report_names_the_best_fixed_batch_and_the_aim():
  trials = AIM_BASE + TUNED + FAST_BAD + _controller("adaptive", set(range(7)))
  text = "\n".join(report_batch_warmup.section(trials, None, best_fixed=True))
  assert "### Against the best fixed batch" in text and "Best: **`fixed_1024_tuned`**." in text
  row = next(ln for ln in text.splitlines() if ln.startswith("| adaptive | fixed_1024_tuned"))
  assert "0: 0.60" in row and "7: 0.90" in row and "7 of 8" in row and "**met**" in row
  assert "### Against the best fixed batch" not in "\n".join(report_batch_warmup.section(trials, None))  # off
