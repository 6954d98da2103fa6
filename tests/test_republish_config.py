"""The Table 3 republish config (lamb_lars/configs/studies/mnist_table3.py:republish): one study holding both rounds' LR
ranges, LARS with warmup + polynomial decay (You et al. 2020), every trial valid before compiling."""

from __future__ import annotations

import math

from lamb_lars.configs.studies import mnist_table3 as t3
from lamb_lars.optim import optimizer_config
from lamb_lars.train import run_plan
from lamb_lars.study.running import sweep


def test_republish_merges_both_rounds_into_one_search_per_cell():
  study = t3.get_config("republish")
  cells = {s["name"]: s for s in study.sweeps}
  assert len(cells) == 18 and not any(name.startswith("r2-") for name in cells)
  lr = lambda name: cells[name]["search"]["optimizer.learning_rate"][1:]
  for (solver, variant), r2 in t3.ROUND2.items():
    name = f"b8k-{solver}-{variant.replace('_', '')}"
    r1 = t3.LR_RANGES[solver]["original" if variant == "original" else "layerwise"]
    lo, hi = lr(name)
    assert lo <= min(r1[0], r2[0]) and hi >= max(r1[1], r2[1]), name
  assert lr("b8k-momentum-original")[0] <= 0.025  # the ladder's tuned momentum trains at 8K from η ≈ 0.025
  for name, cell in cells.items():
    is_lars = cell["fixed"]["optimizer.name"] == "lars"
    assert (cell["fixed"].get("optimizer.schedule.decay") == "poly") == is_lars, name
    assert cell["search"]["optimizer.schedule.warmup_epochs"][2] > 0, name  # warmup is searched in every cell


def test_republish_trials_validate():
  study = t3.get_config("republish")
  trials = sweep.expand(study)
  assert len(trials) == 18 * t3.REPUBLISH_TRIALS and len({t.run_id for t in trials}) == len(trials)
  for t in trials:
    optimizer_config.validate_config(t.config.optimizer)
    run_plan.make_plan(t.config, num_train=int(study.analysis.num_train), num_devices=1)
    if t.optimizer == "lars":
      assert t.config.optimizer.schedule.decay == "poly" and math.isclose(t.config.optimizer.schedule.poly_power, 2.0)


def _published_chosen(repo: str, commit: str, folder: str, cell: str) -> dict:
  """The row of ``cell``'s chosen trial in a published runs.csv as git keeps it at ``commit``: the trial its
  replicates repeat."""
  import csv
  import io
  import subprocess

  import pytest

  path = f"{folder}/runs.csv"
  out = subprocess.run(["git", "-C", repo, "show", f"{commit}:{path}"], capture_output=True, text=True, timeout=60)
  if out.returncode != 0:
    pytest.skip(f"{path} at {commit} is not in this clone's history (a shallow clone?): {out.stderr.strip()}")
  rows = list(csv.DictReader(io.StringIO(out.stdout)))
  chosen = {r["replicate_of"] for r in rows if r["cell"] == cell and r["phase"] == "replicate"}
  assert len(chosen) == 1, f"{cell}: replicates of {sorted(chosen)}"
  want = chosen.pop()
  (row,) = [r for r in rows if r["run_id"] == want]
  return row


def test_ladder_republish_baseline_is_the_table3_b0_choice():
  """The republished ladder's baseline is the bs256-momentum configuration the Table 3 republish chose on the
  validation split (the baseline tuned once at B0), and every arm scales that baseline."""
  import os
  from lamb_lars.configs.studies import mnist_batch_ladder as ladder

  repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  # mnist_table3_replicated left the tree when mnist_table3_robust superseded it; git keeps it at f995b11
  row = _published_chosen(repo, "f995b11", "docs/studies/mnist_table3_replicated", "bs256-momentum")
  assert ladder.B0_TUNED["run_id"] == row["run_id"]
  assert math.isclose(ladder.B0_TUNED["learning_rate"], float(row["learning_rate"]), rel_tol=1e-9)
  assert math.isclose(ladder.B0_TUNED["warmup_epochs"], float(row["warmup_epochs"]), rel_tol=1e-9)
  study = ladder.get_config("republish")
  eta = study.base.optimizer.learning_rate
  assert eta == ladder.B0_TUNED["learning_rate"] and study.base.optimizer.lr_scaling == "linear"
  trials = sweep.expand(study)
  for t in trials:
    if t.role == "linear" and t.config.optimizer.lr_scaling == "linear":
      assert t.config.optimizer.learning_rate == eta  # scaled by B/B0 in the optimizer (lr_scaling 'linear')
      assert t.config.optimizer.schedule.warmup_epochs == ladder.B0_TUNED["warmup_epochs"]
  tuned = [s for s in study.sweeps if s.get("technique") == "tuned_momentum"]
  assert tuned and all(tuple(s["search"]["optimizer.learning_rate"]) == ("log", eta / 100, 2 * eta) for s in tuned)
  for t in trials:
    run_plan.make_plan(t.config, num_train=int(study.analysis.num_train), num_devices=1)
