"""The issue-41 study variants (configs only; not run): the warmup study's fixed-large-batch control with a searched
LR and LR warmup, AdaGrad's ε and initial accumulator in the Table 3 search space, and branching with 8 seeds at a
pre-registered ε — each a study of its own, leaving the published variants' trials as they were."""

from __future__ import annotations

import importlib.util
import json
import os

import pytest

from lamb_lars.study.running import sections, sweep

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _load(name):
  spec = importlib.util.spec_from_file_location(
    name, os.path.join(REPO, "lamb_lars", "configs", "studies", f"{name}.py")
  )
  m = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(m)
  return m


def test_warmup_control_adds_one_searched_arm_to_the_published_four():
  m = _load("mnist_batch_warmup")
  pub, ctl = m.get_config(), m.get_config("lr_warmup_control")
  assert ctl.name != pub.name
  assert [s["name"] for s in ctl.sweeps] == [s["name"] for s in pub.sweeps] + ["fixed_2048_lrwarmup"]
  arm = dict(ctl.sweeps[-1])
  assert arm["fixed"]["batch_size"] == 2048 and set(arm["search"]) == {
    "optimizer.learning_rate",
    "optimizer.schedule.warmup_epochs",
  }
  assert sections.section(ctl, "analysis")["noninferiority_margin"] == 0.002
  trials = sweep.expand(ctl)
  assert sum(t.technique == "fixed_2048_lrwarmup" for t in trials) == m.CONTROL_TRIALS
  assert [t.run_id for t in sweep.expand(pub)] == [t.run_id for t in trials if t.technique != "fixed_2048_lrwarmup"]
  with pytest.raises(ValueError, match="unknown variant"):
    m.get_config("nope")


def test_adagrad_variant_searches_eps_and_the_initial_accumulator():
  m = _load("mnist_table3")
  c = m.get_config("adagrad_eps")
  assert c.name == "mnist_table3_adagrad" and len(c.sweeps) == 4
  for cell in c.sweeps:
    assert cell["fixed"]["optimizer.name"] == "adagrad" and cell["num_trials"] == m.ADAGRAD_TRIALS
    assert cell["search"]["optimizer.eps"] == m.ADAGRAD_EPS
    assert cell["search"]["optimizer.initial_accumulator_value"] == m.ADAGRAD_G0
  trials = sweep.expand(c)
  assert len(trials) == 4 * m.ADAGRAD_TRIALS
  assert all({"optimizer.eps", "optimizer.initial_accumulator_value"} <= set(t.overrides) for t in trials)
  assert m.get_config("republish").name == "mnist_table3"  # the published variant keeps its name and cells
  assert all("optimizer.eps" not in s["search"] for s in m.get_config("republish").sweeps)


@pytest.mark.parametrize("variant, rule", [("prereg", "linear"), ("sqrt_prereg", "sqrt")])
def test_branching_prereg_has_8_seeds_and_a_preregistered_eps(variant, rule):
  m = _load("mnist_branching")
  c = m.get_config(variant)
  b = sections.section(c, "branching")
  assert b["epsilon"] == m.PREREG_EPSILON and b["relative"] and b["lr_rule"] == rule
  assert tuple(b["epsilon_sensitivity"]) == (0.05, 0.1, 0.2, 0.5)
  assert len(c.sweeps[1]["grid"]["seed"]) >= 8
  pub = m.get_config("sqrt" if rule == "sqrt" else "")
  assert pub.name != c.name and sections.section(pub, "branching")["epsilon"] == 0.5
  assert tuple(pub.sweeps[1]["grid"]["seed"]) == (1, 2, 3)


def test_thin_verdicts_rerun_the_published_configurations_with_fresh_seeds():
  """':thin' re-runs, as fixed cells, exactly the configurations the published ladder chose (read here from its
  runs.csv, an independent record), with seed 10 and 6 replicates: none of the published seeds 0–3."""
  import csv

  m = _load("mnist_batch_ladder")
  c = m.get_config("thin")
  trials = sweep.expand(c)
  assert {(t.role, t.batch_size) for t in trials} == {
    ("baseline", 256),
    ("linear", 512),
    ("linear", 1024),
    ("technique", 3072),
    ("technique", 8192),
  }
  assert all(t.seed == 10 for t in trials) and not any(t.space for t in trials)  # fixed cells, fresh seeds
  assert sections.section(c, "replicates")["num_seeds"] == 6
  published = {
    r["run_id"]: r
    for r in csv.DictReader(open(os.path.join(REPO, "docs/studies/mnist_batch_ladder_replicated/runs.csv")))
  }
  for rid, fixed in (
    ("tuned-dense-b3072-lr0.00246-wu6.22-0f79", m.THIN_TUNED_3072),
    ("lamb-b8192-lr0.012-wu18.1-3c8a", m.THIN_LAMB_8K),
  ):
    row = published[rid]
    assert float(row["learning_rate"]) == fixed["optimizer.learning_rate"]
    assert float(row["warmup_epochs"]) == fixed["optimizer.schedule.warmup_epochs"]
    assert int(row["batch_size"]) == fixed["batch_size"]
    assert {k: v for k, v in json.loads(row["overrides"]).items() if not k.startswith("stop.")} == fixed
  (base,) = [r for r in published.values() if r["role"] == "baseline" and r["phase"] != "replicate"]
  assert float(base["learning_rate"]) == c.base.optimizer.learning_rate  # the baseline recipe is the published one
  assert float(base["warmup_epochs"]) == c.base.optimizer.schedule.warmup_epochs
