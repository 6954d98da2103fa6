"""The Table 3 republish config (configs/studies/mnist_table3.py:republish): one study holding both rounds' LR
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
  assert lr("b8k-momentum-original")[0] <= 0.025       # the ladder's tuned momentum trains at 8K from η ≈ 0.025
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

