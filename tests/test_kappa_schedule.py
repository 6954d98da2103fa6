"""κ(t) for the adaptive batch controller (issue 60): ``adaptive_batch.kappa_schedule`` and its derivation from a
published branching folder (lamb_lars/study/analysis/kappa_from_branching.py)."""

from __future__ import annotations

import math
import os
import re

import numpy as np
import pytest

from lamb_lars.study.analysis import kappa_from_branching as kfb
from lamb_lars.train import adaptive_batch as ab
from lamb_lars.train import run_plan, validate
from test_adaptive_batch import _config, reference_decision, settings

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_parse_in_epochs_and_examples():
  assert ab.parse_kappa_schedule("0:40, 1:8,2.5:2", "epochs", 1000) == ((0, 40.0), (1000, 8.0), (2500, 2.0))
  assert ab.parse_kappa_schedule("0:37.5,13824:45", "examples", 55000) == ((0, 37.5), (13824, 45.0))
  assert ab.parse_kappa_schedule("", "epochs", 1000) == ()


@pytest.mark.parametrize(
  "spec, fragment",
  [
    ("1:0", "FROM:KAPPA"),
    ("1:-2", "FROM:KAPPA"),
    ("x:3", "FROM:KAPPA"),
    ("4", "FROM:KAPPA"),
    ("-1:2", "FROM:KAPPA"),
    ("1:nan", "FROM:KAPPA"),
    ("2:4,1:8", "must increase"),
    ("1:4,1:8", "must increase"),
  ],
)
def test_a_bad_schedule_is_one_sentence(spec, fragment):
  with pytest.raises(ValueError, match=fragment):
    ab.parse_kappa_schedule(spec, "epochs", 1000)


def test_kappa_follows_the_schedule_and_the_decision_uses_it():
  """κ before the first point is ``kappa``; from each point on its value. The decision at x examples equals the
  independent reference (test_adaptive_batch.reference_decision) run with κ(x)."""
  s = settings(kappa=1.0, kappa_points=((100, 40.0), (500, 2.0)))
  assert [ab.kappa_at(s, x) for x in (0, 99, 100, 499, 500, 10**6)] == [1.0, 1.0, 40.0, 40.0, 2.0, 2.0]
  rng = np.random.default_rng(1)
  for _ in range(300):
    x, batch = int(rng.integers(0, 800)), int(rng.choice(s.ladder))
    value = float(np.exp(rng.uniform(0, 6)))
    k = 1.0 if x < 100 else 40.0 if x < 500 else 2.0
    want = reference_decision(
      batch,
      value,
      kappa=k,
      lo=s.min_batch,
      hi=s.max_batch,
      ladder=s.ladder,
      min_change=s.min_change,
      margin=s.margin,
      grow_only=s.grow_only,
    )
    new, target, reason = ab.decide(batch, value, s, x)
    t = min(max(k * value, s.min_batch), s.max_batch)
    if abs(abs(math.log(t / batch)) - abs(math.log(t / ab.snap(t, s.ladder))) - math.log1p(s.margin)) < 1e-9:
      continue  # on the dead band's edge: rounding decides
    assert (new, reason) == want and target == pytest.approx(t)


def test_the_controller_records_the_kappa_it_used():
  s = settings(kappa=1.0, kappa_points=((0, 4.0), (256, 1.0)))
  c = ab.Controller(s, [ab.batch_schedule.Stage(0, 0, 64)])
  first = c.decide(4, 128, lambda kind: (50.0, 40.0, 60.0))  # κ 4: target 200 → 256
  second = c.decide(8, 640, lambda kind: (50.0, 40.0, 60.0))  # κ 1: target 50 → 64, shrink
  assert (first["kappa"], first["to"], second["kappa"], second["to"]) == (4.0, 256, 1.0, 64)


def test_a_run_config_validates_the_schedule_in_its_unit():
  plan = validate.validate(_config(**{"adaptive_batch.kappa_schedule": "0:8,0.5:2"}), 1)
  n = plan.num_train
  assert plan.adaptive.kappa_points == ((0, 8.0), (math.ceil(0.5 * n), 2.0))
  with pytest.raises(run_plan.ConfigError, match="kappa_schedule"):
    validate.validate(_config(**{"adaptive_batch.kappa_schedule": "0:8,0:2"}), 1)


def test_kappa_from_the_published_square_root_branching_matches_its_report():
  """The κ schedule derived from docs/studies/mnist_branching_sqrt_prereg is each point's CBS lower end over
  B_simple as that folder's README prints them (its table of brackets and B_simple)."""
  folder = os.path.join(REPO, "docs", "studies", "mnist_branching_sqrt_prereg")
  text = open(os.path.join(folder, "README.md")).read()
  table = re.findall(r"^\| ([\d.]+) \| \[(\d+), (\d+)\] \| no \| ([\d.]+) \|$", text, re.M)
  assert len(table) == 6
  pts = kfb.points(folder, 256, 0.2)
  assert [p.cbs_low for p in pts] == [int(low) for _, low, _, _ in table]
  for p, (_, low, _, bs) in zip(pts, table):
    assert p.kappa == pytest.approx(int(low) / float(bs), rel=2e-3)  # B_simple printed to 4 digits
  spec = kfb.schedule(pts)
  assert spec.startswith("0:37.53,27648:45.37,") and spec.count(",") == 5
  assert ab.parse_kappa_schedule(spec, "examples", 55000)[1] == (27648, 45.37)


def test_points_without_a_lower_end_give_no_entry():
  pts = [kfb.KappaPoint(100, None, 10.0), kfb.KappaPoint(200, 512, 16.0), kfb.KappaPoint(300, 1024, None)]
  assert kfb.schedule(pts) == "0:32" and kfb.schedule(pts[:1]) == ""
