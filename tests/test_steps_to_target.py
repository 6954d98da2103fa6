"""Steps-to-target (Shallue et al. 2018) on hand-computed cases."""

from __future__ import annotations

import math

from lamb_lars.study.analysis.steps_to_target import first_hit, meets, reached_arrays, steps_to_target
from lamb_lars.study.running.store import Trial


def _curve(accs, every=100, wall_per_step=0.01, batch=256, n=60000):
  return [
    {
      "step": every * (i + 1),
      "epoch": every * (i + 1) * batch / n,
      "examples": every * (i + 1) * batch,
      "wall_time": every * (i + 1) * wall_per_step,
      "eval_accuracy": a,
    }
    for i, a in enumerate(accs)
  ]


def test_meets_modes_and_nan():
  assert meets(0.99, 0.99, "max") and not meets(0.98, 0.99, "max")
  assert meets(0.01, 0.01, "min") and not meets(0.02, 0.01, "min")
  assert not meets(float("nan"), 0.5) and not meets(None, 0.5)


def test_first_hit_is_earliest_step_even_if_unsorted():
  curve = _curve([0.5, 0.991, 0.98, 0.995])
  assert first_hit(list(reversed(curve)), "eval_accuracy", 0.99)["step"] == 200
  assert first_hit(curve, "eval_accuracy", 0.999) is None
  assert first_hit(curve, "eval_accuracy", 0.6, mode="min")["step"] == 100
  assert first_hit([{"step": 1}], "eval_accuracy", 0.5) is None  # metric missing


def test_fewest_steps_across_trials_and_counts():
  ts = [
    Trial("a", 256, curve=_curve([0.9, 0.95, 0.99])),  # hits at 300
    Trial("b", 256, curve=_curve([0.99])),  # hits at 100 -> best
    Trial("c", 256, curve=_curve([0.5, 0.6])),  # never
    Trial("d", 1024, curve=_curve([0.9, 0.991], batch=1024)),
  ]
  res = steps_to_target(ts, "eval_accuracy", 0.99)
  assert list(res) == [256, 1024]
  r = res[256]
  assert (r.steps, r.best_run_id, r.num_trials, r.num_feasible, r.num_reached) == (100, "b", 3, 3, 2)
  assert math.isclose(r.epochs, 100 * 256 / 60000) and r.examples == 25600 and math.isclose(r.wall_time, 1.0)
  assert res[1024].steps == 200 and res[1024].best_run_id == "d"


def test_no_trial_reaching_goal_is_reported_not_dropped():
  res = steps_to_target([Trial("a", 512, curve=_curve([0.5])), Trial("b", 512, curve=[])], "eval_accuracy", 0.9)
  r = res[512]
  assert not r.reached and r.steps is None and r.best_run_id is None and r.wall_time is None
  assert (r.num_trials, r.num_feasible, r.num_reached) == (2, 2, 0)
  assert reached_arrays(res) == ([], [])


def test_diverged_and_failed_trials_are_infeasible_even_if_they_hit_first():
  ts = [
    Trial("div", 256, status="diverged", curve=_curve([0.99, float("nan")])),
    Trial("fail", 256, status="failed", error="OOM", curve=_curve([0.995])),
    Trial("ok", 256, curve=_curve([0.5, 0.7, 0.99])),
  ]
  r = steps_to_target(ts, "eval_accuracy", 0.99)[256]
  assert (r.steps, r.best_run_id, r.num_trials, r.num_feasible, r.num_reached) == (300, "ok", 3, 1, 1)
  only_diverged = steps_to_target(ts[:1], "eval_accuracy", 0.99)[256]
  assert not only_diverged.reached and only_diverged.num_feasible == 0


def test_ties_broken_by_wall_time_then_run_id():
  slow = Trial("a", 256, curve=_curve([0.99], wall_per_step=0.02))
  fast = Trial("z", 256, curve=_curve([0.99], wall_per_step=0.01))
  assert steps_to_target([slow, fast], "eval_accuracy", 0.99)[256].best_run_id == "z"
  same1, same2 = Trial("m", 256, curve=_curve([0.99])), Trial("k", 256, curve=_curve([0.99]))
  for order in ([same1, same2], [same2, same1]):
    assert steps_to_target(order, "eval_accuracy", 0.99)[256].best_run_id == "k"
  no_wall = Trial("0", 256, curve=[{"step": 100, "eval_accuracy": 0.99}])
  assert steps_to_target([no_wall, same1], "eval_accuracy", 0.99)[256].best_run_id == "m"


def test_by_wall_time_picks_the_fastest_trial():
  few_slow = Trial("a", 256, curve=_curve([0.99], wall_per_step=1.0))  # 100 steps, 100 s
  many_fast = Trial("b", 256, curve=_curve([0.5, 0.99], wall_per_step=0.1))  # 200 steps, 20 s
  assert steps_to_target([few_slow, many_fast], "eval_accuracy", 0.99)[256].best_run_id == "a"
  r = steps_to_target([few_slow, many_fast], "eval_accuracy", 0.99, by="wall_time")[256]
  assert (r.best_run_id, r.steps, r.wall_time) == ("b", 200, 20.0)


def test_min_mode_on_loss_and_reached_arrays():
  def lc(losses):
    return [{"step": 10 * (i + 1), "eval_loss": v} for i, v in enumerate(losses)]

  ts = [
    Trial("a", 128, curve=lc([1.0, 0.2])),
    Trial("b", 64, curve=lc([0.3, 0.25, 0.1])),
    Trial("c", 32, curve=lc([1.0])),
  ]
  res = steps_to_target(ts, "eval_loss", 0.2, mode="min")
  assert [res[b].steps for b in (32, 64, 128)] == [None, 30, 20]
  assert reached_arrays(res) == ([64, 128], [30.0, 20.0])
