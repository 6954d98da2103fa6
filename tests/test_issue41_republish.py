"""Issue 41's republishing configs (beside tests/test_issue41_configs.py's variants) load, expand and validate
(sweep.expand runs the trainer's validator on every trial), carry their pre-registered thresholds, and their cell
choices are recomputed here from the published folders' runs.csv (csv + scipy, independently of the study code;
Table 3's from mnist_table3_replicated's as git keeps it at f995b11, since mnist_table3_robust superseded it):
lamb_lars/configs/studies/mnist_batch_ladder.py:to_target, lamb_lars/configs/studies/mnist_table3.py:robust, and
scripts/republish_issue41.sh runs them in order."""

from __future__ import annotations

import csv
import io
import math
import os
import subprocess

import numpy as np
import pytest
from scipy import stats

from lamb_lars.configs.studies import mnist_batch_ladder as ladder
from lamb_lars.configs.studies import mnist_table3 as t3
from lamb_lars.study.running import runner, sections, sweep

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The republish's runs.csv, which :robust was pre-registered from: the folder left the tree when mnist_table3_robust
# superseded it, and git keeps it at the commit that last held it (docs/studies/README.md, "Superseded").
TABLE3_RUNS = ("f995b11", "docs/studies/mnist_table3_replicated/runs.csv")
# You et al. 2020 Table 3 (test accuracy %): None where the paper prints a label (diverge / unstable).
PAPER = {
  ("momentum", "bs256"): 99.2,
  ("adagrad", "bs256"): 99.2,
  ("rmsprop", "bs256"): 99.2,
  ("adam", "bs256"): 99.3,
  ("lars", "bs256"): 99.3,
  ("momentum", "original"): None,
  ("adagrad", "original"): 98.3,
  ("rmsprop", "original"): 98.6,
  ("adam", "original"): 99.1,
  ("lars", "original"): 99.4,
  ("momentum", "layerwise"): 99.2,
  ("adagrad", "layerwise"): 99.3,
  ("rmsprop", "layerwise"): None,
  ("adam", "layerwise"): None,
  ("momentum", "layerwise_bound"): 99.2,
  ("adagrad", "layerwise_bound"): 99.3,
  ("rmsprop", "layerwise_bound"): 99.0,
  ("adam", "layerwise_bound"): 99.4,
}


@pytest.fixture(scope="module")
def to_target():
  c = ladder.get_config("to_target")
  return c, sweep.expand(c)


@pytest.fixture(scope="module")
def robust():
  c = t3.get_config("robust")
  return c, sweep.expand(c)


@pytest.fixture(scope="module")
def table3_runs():
  commit, path = TABLE3_RUNS
  out = subprocess.run(["git", "-C", ROOT, "show", f"{commit}:{path}"], capture_output=True, text=True, timeout=60)
  if out.returncode != 0:
    pytest.skip(f"{path} at {commit} is not in this clone's history (a shallow clone?): {out.stderr.strip()}")
  return list(csv.DictReader(io.StringIO(out.stdout)))


def test_to_target_runs_every_batch_to_the_target_with_a_recorded_limit(to_target):
  c, trials = to_target
  tuned = [t for t in trials if t.technique == "tuned_momentum"]
  assert sorted({t.batch_size for t in tuned}) == list(ladder.TO_TARGET_BATCHES)
  assert all(t.config.num_epochs == 90.0 and t.config.stop.target_goal == 0.99 for t in tuned)
  assert all(t.config.stop.target_metric == "eval_accuracy" for t in tuned)
  # the LR range is [η/100, 2η] around the baseline tuned at B0, scaled linearly with the batch
  eta = ladder.B0_TUNED["learning_rate"]
  assert all(eta / 100 <= t.config.optimizer.learning_rate <= 2 * eta for t in tuned)
  assert {str(t.config.optimizer.lr_scaling) for t in tuned} == {"linear"}
  assert sections.section(c, "analysis")["targets"] == (0.98, 0.985, 0.988)
  search = sections.section(c, "search")
  assert search["refine_factor"] == 1.5 and search["max_refinements"] == 3
  runner.checked_settings(c)  # the follow-up settings pass the runner's own checks


def test_to_target_keeps_the_baseline_recipe_as_its_own_cell_at_b0(to_target):
  c, trials = to_target
  base = [t for t in trials if t.role == "baseline"]
  assert len(base) == 1 and base[0].batch_size == 256 == min(ladder.TO_TARGET_BATCHES)
  assert base[0].config.optimizer.learning_rate == ladder.B0_TUNED["learning_rate"]
  assert base[0].config.num_epochs == 30.0 and not base[0].config.stop.get("target_metric")
  assert any(t.technique == "tuned_momentum" and t.batch_size == 256 for t in trials)  # the tuned B0 beside it
  assert "baseline" in tuple(c.replicates.roles) and c.replicates.num_seeds == ladder.TO_TARGET_SEEDS


def test_ladder_parts_and_a_bad_part():
  assert ladder.get_config("republish").name == "mnist_batch_ladder"
  with pytest.raises(ValueError, match="the parts are republish, to_target"):
    ladder.get_config("nope")


def _cells(rows):
  out = {}
  for r in rows:
    out.setdefault(r["cell"], []).append(r)
  return out


def test_robust_chosen_configurations_are_the_republishs(table3_runs):
  chosen = {r["replicate_of"] for r in table3_runs if r["phase"] == "replicate"}
  got = {
    r["cell"]: (float(r["learning_rate"]), float(r["warmup_epochs"])) for r in table3_runs if r["run_id"] in chosen
  }
  assert got == t3.CHOSEN


def test_robust_every_cell_needs_more_seeds_by_the_rule(table3_runs):
  """Each cell's 95% t interval over its 3 replicates against the paper ± 0.3 pp: every cell is inconclusive, a
  label cell, or decided by less than its interval's width — so all 18 get ≥ 6 seeds."""
  thin = set()
  for cell, rows in _cells(table3_runs).items():
    reps = np.array([100 * float(r["final_test_accuracy"]) for r in rows if r["phase"] == "replicate"])
    half = stats.t.ppf(0.975, len(reps) - 1) * reps.std(ddof=1) / math.sqrt(len(reps))
    lo, hi = reps.mean() - half, reps.mean() + half
    first = rows[0]
    col = "bs256" if first["batch_size"] == "256" else first["variant"]
    p = PAPER[(first["optimizer"], col)]
    if p is None:
      thin.add(cell)
      continue
    a, b = p - 0.3, p + 0.3
    margin = min(lo - a, b - hi) if a <= lo and hi <= b else max(a - hi, lo - b) if (hi < a or lo > b) else 0.0
    if margin < hi - lo:
      thin.add(cell)
  assert thin == set(t3.CHOSEN) and len(thin) == 18


def test_robust_cliff_cells_include_every_cell_whose_search_diverged(table3_runs):
  diverged = {
    cell
    for cell, rows in _cells(table3_runs).items()
    if any(r["status"] == "diverged" and r["phase"] != "replicate" for r in rows)
  }
  assert diverged <= set(t3.CLIFF_CELLS)
  assert {"b8k-adagrad-original", "b8k-adagrad-layerwisebound"} <= set(t3.CLIFF_CELLS)
  assert not set(t3.FIXED_CELLS) & (diverged | {c for c in t3.CHOSEN if "adagrad" in c})


def test_robust_expands_every_cell_with_its_design(robust):
  c, trials = robust
  by_sweep = {}
  for t in trials:
    by_sweep.setdefault(t.sweep, []).append(t)
  assert len(by_sweep) == 18
  for name, (eta, warmup) in t3.CHOSEN.items():
    if name in t3.FIXED_CELLS:
      (t,) = by_sweep[f"fixed-{name}"]
      assert t.config.optimizer.learning_rate == eta and t.config.optimizer.schedule.warmup_epochs == warmup
      assert t.seed == t3.FIXED_SEED and not t.searched
      continue
    ts = by_sweep[f"dense-{name}"]
    assert len(ts) == t3.ROBUST_TRIALS and all(t.searched for t in ts)
    space = ts[0].space
    if "adagrad" in name:
      assert "optimizer.eps" in space and "optimizer.initial_accumulator_value" in space
    else:
      lo, hi = space["optimizer.learning_rate"][1:]
      assert lo == pytest.approx(eta / 3) and hi == pytest.approx(eta * 3)
      assert all(lo <= t.config.optimizer.learning_rate <= hi for t in ts)
  assert c.replicates.num_seeds == 6 and sections.section(c, "search")["refine_factor"] == 1.5
  runner.checked_settings(c)


def test_republish_script_runs_both_studies_in_order_and_rejects_an_unknown_one(tmp_path):
  stub = tmp_path / "bin"
  stub.mkdir()
  (stub / "python").write_text('#!/bin/sh\necho "python $*"\n')
  (stub / "python").chmod(0o755)
  env = {
    **os.environ,
    "PATH": f"{stub}:{os.environ['PATH']}",
    "STUDIES_DIR": str(tmp_path / "studies"),
    "DOCS_DIR": str(tmp_path / "docs"),
  }
  script = os.path.join(ROOT, "scripts", "republish_issue41.sh")
  out = subprocess.run(["bash", script], check=False, capture_output=True, text=True, env=env, timeout=60)
  assert out.returncode == 0, out.stderr
  log = out.stdout
  a = log.index("study run --config=lamb_lars/configs/studies/mnist_batch_ladder.py:to_target ")
  b = log.index("study run --config=lamb_lars/configs/studies/mnist_table3.py:robust ")
  t = log.index("study run --config=lamb_lars/configs/studies/mnist_batch_ladder.py:thin ")
  assert a < t < b and f"--out={tmp_path}/docs/mnist_table3_robust" in log
  assert f"--out={tmp_path}/docs/mnist_batch_ladder_thin" in log
  bad = subprocess.run(["bash", script, "nope"], check=False, capture_output=True, text=True, env=env, timeout=60)
  assert bad.returncode == 2 and bad.stderr.count("\n") == 1
