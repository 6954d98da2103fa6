"""Study expansion and search (pure, no training): tagged trials, readable deterministic run ids, Optuna's
quasi-random points, the ASHA pruner rebuilt exactly from its log, and one sentence for every bad study config."""

from __future__ import annotations

import math

import ml_collections
import pytest

from lamb_lars.configs.studies import smoke
from lamb_lars.study.running import search, search_log, sections, sweep


def _study(**changes) -> ml_collections.ConfigDict:
  c = smoke.get_config()
  with c.unlocked():
    for k, v in changes.items():
      c[k] = v
    if "sweeps" in changes:
      c.analysis.techniques = ()
  return c


def test_expand_tags_cells_and_ids():
  trials = sweep.expand(_study())
  assert [t.role for t in trials] == ["baseline", "linear", "linear"] + ["technique"] * 4 + ["table3"]
  assert [t.batch_size for t in trials] == [32, 64, 128, 128, 128, 128, 128, 128]
  tuned = [t for t in trials if t.technique == "tuned"]
  assert len({t.cell for t in tuned}) == 1 and all(t.searched for t in tuned)
  lrs = [t.config.optimizer.learning_rate for t in tuned]
  assert len(set(lrs)) == 4 and all(0.005 <= lr <= 0.5 for lr in lrs)
  assert trials[1].run_id.startswith("linear-b64-") and tuned[0].run_id.startswith("tuned-lr")
  assert trials[-1].variant == "layerwise" and trials[-1].config.optimizer.layerwise
  assert [t.run_id for t in sweep.expand(_study())] == [t.run_id for t in trials]  # deterministic
  assert len(trials[0].run_id.split("-")[-1]) == 4


def test_quasi_random_points_are_seeded_and_cover_the_range():
  space = {"lr": ("log", 1e-4, 1e-1), "w": ("linear", 0.0, 5.0)}
  a, b = search.sample(space, 8, seed=3), search.sample(space, 8, seed=3)
  assert a == b and a != search.sample(space, 8, seed=4)
  logs = sorted(math.log10(p["lr"]) for p in a)
  assert logs[0] < -3.0 and logs[-1] > -2.0  # spread over the decades, not clustered
  assert all(1e-4 <= p["lr"] <= 1e-1 and 0 <= p["w"] <= 5 for p in a)


def test_asha_decisions_replay_exactly():
  values = {
    "a": [0.5, 0.6, 0.7],
    "b": [0.9, 0.95, 0.97],
    "c": [0.7, 0.8, 0.85],
    "d": [0.95, 0.96, 0.99],
    "e": [0.6, 0.7, 0.8],
    "f": [0.8, 0.9, 0.95],
  }
  s, log = search.CellSearch(min_epochs=1, reduction_factor=3), []
  for rid, vals in values.items():
    for epoch, v in enumerate(vals, 1):
      prune = s.report(rid, epoch, v)
      log.append((rid, epoch, v, prune))
      if prune:
        break
  pruned = {rid for rid, _, _, p in log if p}
  assert "a" not in pruned and "b" not in pruned and "d" not in pruned  # best-so-far at rung 1 go on
  assert {"c", "e"} <= pruned  # behind at rung 1
  replay = search.CellSearch(min_epochs=1, reduction_factor=3)
  assert [replay.report(rid, e, v) for rid, e, v, _ in log] == [p for *_, p in log]
  assert not replay.report("a", 1, 0.0)  # an already reported step is ignored


@pytest.mark.parametrize(
  "change, match",
  [
    (dict(sweeps=(dict(name="x", fixed={"optimizer.lerning_rate": 0.1}),)), "lerning_rate"),
    (dict(sweeps=(dict(name="x", search={}, num_trials=3),)), "search space is empty"),
    (dict(sweeps=(dict(name="x", search={"optimizer.learning_rate": ("log", 0.1, 0.01)}, num_trials=3),)), "empty"),
    (
      dict(sweeps=(dict(name="x", search={"optimizer.learning_rate": ("log", 0.01, 0.1)}, num_trials=0),)),
      "num_trials",
    ),
    (dict(sweeps=(dict(name="x", fixed={"batch_size": 30, "num_microbatches": 4}),)), "not divisible"),
    (dict(sweeps=(dict(name="x", fixed={"batch_size": 1024}),)), "exceeds"),
    (dict(sweeps=(dict(name="x", role="linear", fixed={"optimizer.momentum": 0.8}),)), "batch_size only"),
    (dict(sweeps=(dict(name="x", role="linear", fixed={"optimizer.lr_scaling": "none"}),)), "batch_size only"),
    (dict(sweeps=(dict(name="x", role="baseline", grid={"batch_size": (32, 64)}),)), "at most one baseline"),
    (dict(sweeps=(dict(name="x", role="sideways"),)), "role"),
    (dict(sweeps=(dict(name="x", variant="sideways"),)), "variant"),
    (dict(sweeps=(dict(name="x", fixd={}),)), "unknown fields"),
    (dict(sweeps=(dict(name="x", grid={"batch_size": (32, 32)}),)), "same id"),
  ],
)
def test_bad_study_configs_fail_with_one_sentence(change, match):
  with pytest.raises(ValueError, match=match) as e:
    sweep.expand(_study(**change))
  assert "\n" not in str(e.value)


def test_technique_set_must_be_matched():
  c = _study()
  c.analysis.techniques = ("tuned", "lamb")
  with pytest.raises(ValueError, match=r"\['lamb'\], which no sub-sweep tests"):
    sweep.expand(c)


def test_batch_divisibility_uses_the_trial_devices():
  c = _study(
    sweeps=(dict(name="x", fixed={"batch_size": 36}, env={"XLA_FLAGS": "--xla_force_host_platform_device_count=8"}),)
  )
  with pytest.raises(ValueError, match="by 8 device"):
    sweep.expand(c)


def test_first_rung_comes_after_the_longest_warmup_of_the_cell():
  c = _study(
    sweeps=(
      dict(
        name="w",
        fixed={"batch_size": 64},
        num_trials=4,
        seed=0,
        search={"optimizer.schedule.warmup_epochs": ("linear", 0.0, 4.5)},
      ),
      dict(
        name="n", fixed={"batch_size": 64}, num_trials=2, seed=0, search={"optimizer.learning_rate": ("log", 0.01, 0.1)}
      ),
    )
  )
  c.base.optimizer.schedule.allow_long_warmup = True  # warmups past the smoke run's end pass the trial checks
  specs = sweep.expand(c)
  longest = max(t.params()["warmup_epochs"] for t in specs if t.sweep == "w")
  cfg = {**sections.section(c, "search"), "min_epochs": 2}
  got = search_log.cell_min_epochs(specs, cfg)
  assert got == {"w": max(2, math.ceil(longest)), "n": 2} and got["w"] >= 4
  assert search_log.cell_min_epochs(specs, {**cfg, "rung_after_warmup": False}) == {"w": 2, "n": 2}


def test_a_sub_sweeps_pruner_field_overrides_the_study_rule_for_its_cells_only():
  """A later round of a study (its first round ran with rung_after_warmup=False, whose log must still replay)
  can judge its own trials after their warmup, or from its own first rung."""
  space = {"optimizer.schedule.warmup_epochs": ("linear", 0.0, 4.5)}
  c = _study(
    sweeps=(
      dict(name="r1", fixed={"batch_size": 64}, num_trials=4, seed=0, search=space),
      dict(name="r2", fixed={"batch_size": 64}, num_trials=4, seed=0, search=space, pruner={"rung_after_warmup": True}),
      dict(
        name="r3",
        fixed={"batch_size": 64},
        num_trials=2,
        seed=0,
        search=space,
        pruner={"rung_after_warmup": False, "min_epochs": 3},
      ),
    )
  )
  c.base.optimizer.schedule.allow_long_warmup = True
  specs = sweep.expand(c)
  longest = max(t.params()["warmup_epochs"] for t in specs if t.sweep == "r2")
  cfg = {**sections.section(c, "search"), "min_epochs": 2, "rung_after_warmup": False}
  assert search_log.cell_min_epochs(specs, cfg) == {"r1": 2, "r2": math.ceil(longest), "r3": 3} and longest > 3
  for bad in ({"reduction_factor": 2}, {"min_epochs": 3, "typo": 1}):
    with pytest.raises(ValueError, match="'pruner' may set only"):
      sweep.expand(_study(sweeps=(dict(name="x", fixed={"batch_size": 64}, num_trials=2, search=space, pruner=bad),)))
  with pytest.raises(ValueError, match="only on a searched sub-sweep"):
    sweep.expand(_study(sweeps=(dict(name="x", fixed={"batch_size": 64}, pruner={"min_epochs": 3}),)))


@pytest.mark.slow
@pytest.mark.e2e
def test_a_trial_with_more_cpu_devices_than_cpus_is_not_pinned():
  from lamb_lars.study.running.executor import LocalExecutor

  ex = LocalExecutor(slots=2, cpus_per_trial=1)
  assert ex.affinity(1, {}) == {1}
  assert ex.affinity(0, {"XLA_FLAGS": "--xla_force_host_platform_device_count=1"}) == {0}
  assert ex.affinity(0, {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}) is None  # would deadlock
  assert LocalExecutor(slots=1).affinity(0, {}) is None
  assert ex.exclusive({"XLA_FLAGS": "--xla_force_host_platform_device_count=2"})
  assert not ex.exclusive({"XLA_FLAGS": "--xla_force_host_platform_device_count=1"})
  assert not LocalExecutor(slots=2).exclusive({"XLA_FLAGS": "--xla_force_host_platform_device_count=2"})
