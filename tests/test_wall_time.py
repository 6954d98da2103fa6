"""lamb_lars/study/running/wall_time.py: the predicted wall time of a study, checked against hand computations from
the formula in its docstring (T = F + s·t_step + e·t_eval per trial, list scheduling on W workers, replicates after
the planned trials)."""

import pytest

from lamb_lars.configs.studies import smoke
from lamb_lars.study.running import calibration, runner, sweep
from lamb_lars.study.running import wall_time as wt

R = (wt.LOW, wt.PREDICTED, wt.HIGH)


def _work(run_id, shape, steps, evals, wave=0):
  return wt.TrialWork(run_id, shape, dict.fromkeys(R, steps), dict.fromkeys(R, evals), wave)


def test_evals_rungs_and_asha_by_hand():
  assert wt.evals_in(30, 30, 10) == 3  # at 10, 20, 30 (the end is on the cadence)
  assert wt.evals_in(35, 35, 10) == 4  # 10, 20, 30 and the end
  assert wt.evals_in(5, 35, 10) == 0  # stopped before the first
  assert wt.evals_in(30, 30, 0) == 1 and wt.evals_in(10, 30, 0) == 0  # only at the end
  assert wt.expected_evals(15.5, 10) == pytest.approx(1.55) and wt.expected_evals(5.0, 0) == 1.0  # expectations
  assert wt.rungs(2, 3, 30) == [2, 6, 18]
  assert wt.rungs(1, 3, 3) == [1]  # a rung at the budget's end stops nothing
  # rungs 1, 3 of a 9-epoch budget, η = 3: 1 + (3 − 1)/3 + (9 − 3)/9 = 7/3 epochs ...
  assert wt.asha_epochs([1, 3], 3, 9, full_share=0.0) == pytest.approx(7 / 3)
  # ... and promotions to half the cell at the budget add (1/2 − 1/9)·(9 − 1)
  assert wt.asha_epochs([1, 3], 3, 9, full_share=0.5) == pytest.approx(7 / 3 + (0.5 - 1 / 9) * 8)


def test_makespan_is_list_scheduling_in_order():
  assert wt.makespan([5, 3, 4], 1) == 12
  assert wt.makespan([5, 3, 4], 2) == 7  # 5 on one worker; 3 then 4 on the other
  assert wt.makespan([1, 1, 10], 2) == 11  # the long trial starts when the first worker frees, at 1


def test_predict_by_hand():
  """Two shapes on 2 workers with a shared compilation cache, one replicate after the planned trials."""
  costs = {
    "a": wt.ShapeCost(fixed_cold=10.0, fixed_warm=4.0, step=0.5, eval=2.0),
    "b": wt.ShapeCost(fixed_cold=20.0, fixed_warm=5.0, step=1.0, eval=1.0),
  }
  works = [
    _work("a1", "a", 100, 3),  # 10 + 50 + 6 = 66 (cold)
    _work("b1", "b", 10, 1),  # 20 + 10 + 1 = 31 (cold)
    _work("a2", "a", 100, 3),  # 4 + 50 + 6 = 60 (warm): starts at 31 on b1's worker, ends at 91
    _work("a1-rep", "a", 40, 2, wave=1),  # 4 + 20 + 4 = 28, after wave 0 (91)
  ]
  got = wt.predict(works, costs, workers=2, shared_cache=True, runner_s=3.0)
  assert got == {r: pytest.approx(3.0 + 91.0 + 28.0) for r in R}
  cold = wt.predict(works, costs, workers=2, shared_cache=False)  # a2 cold: 66, ends at 97; the replicate 34
  assert cold[wt.PREDICTED] == pytest.approx(97.0 + 34.0)
  line = wt.prediction_line({wt.LOW: 60.0, wt.PREDICTED: 125.0, wt.HIGH: 4000.0}, "x")
  assert line == "predicted wall time on this machine: 2m05s (range 1m00s–1h06m; calibration: x)"


def test_trial_work_of_the_smoke_study_by_hand():
  """smoke.py: 384 training examples (512 less the 128 held out), 3 epochs, an evaluation per epoch; the tuned cell
  (4 trials at batch 128: 3 steps an epoch, 9 in all) has its first rung at epoch 1 and η = 3, so no rung but 1
  (3 is the budget's end)."""
  study = smoke.get_config()
  with study.unlocked():
    study.replicates.num_seeds = 2
    study.replicates.roles = ("baseline",)
  specs = sweep.expand(study)
  search_cfg, runner_cfg, rep_cfg = runner.checked_settings(study)
  plans = calibration.plans(specs, {})
  shapes = {t.run_id: wt.shape_of(t.config, t.env) for t in specs}
  works = {w.run_id: w for w in wt.trial_work(specs, plans, shapes, search_cfg, rep_cfg)}
  base = next(t for t in specs if t.role == "baseline")
  assert plans[base.run_id].num_train == 384 and plans[base.run_id].total_steps == 36  # 3 × 384/32
  assert works[base.run_id].steps == dict.fromkeys(R, 36) and works[base.run_id].evals[wt.HIGH] == 3
  tuned = [t for t in specs if t.cell.startswith("tuned")]
  assert len(tuned) == 4 and len({shapes[t.run_id] for t in tuned}) == 1  # the LR does not change the shape
  first, rest = works[tuned[0].run_id], [works[t.run_id] for t in tuned[1:]]
  # low: max(1, min_full_budget = 0) = 1 trial trains its budget, the others stop at the rung (epoch 1 = 3 steps)
  assert first.steps[wt.LOW] == 9 and all(w.steps[wt.LOW] == 3 and w.evals[wt.LOW] == 1 for w in rest)
  # predicted: 1 + (3 − 1)/3 = 5/3 epochs (no top-up: 1/4 of the cell ≤ the 1/3 that passes the rung) = 5 steps
  assert all(w.steps[wt.PREDICTED] == pytest.approx(5.0) for w in [first, *rest])
  assert all(w.evals[wt.PREDICTED] == pytest.approx(5 / 3) for w in [first, *rest])  # 5 steps, one eval per 3
  assert all(w.steps[wt.HIGH] == 9 for w in [first, *rest])
  reps = [w for w in works.values() if w.wave == 1]
  assert [w.shape for w in reps] == [shapes[base.run_id]] * 2 and all(w.steps[wt.LOW] == 36 for w in reps)
  assert len({shapes[t.run_id] for t in specs}) == 4  # batch 32, 64, 128, and 128 layerwise (another optimizer)


def test_interpolate_is_linear_in_the_batch_between_measured_batches():
  small = wt.ShapeCost(fixed_cold=10.0, fixed_warm=4.0, step=0.01, eval=1.0)
  large = wt.ShapeCost(fixed_cold=14.0, fixed_warm=6.0, step=0.41, eval=2.0)
  mid = wt.interpolate({100: small, 500: large}, 200)  # a quarter of the way
  assert mid == wt.ShapeCost(fixed_cold=11.0, fixed_warm=4.5, step=pytest.approx(0.11), eval=1.25)
  assert wt.interpolate({100: small, 500: large}, 500) == large
  assert wt.interpolate({100: small}, 400) == small  # one batch measured: its cost


def test_shape_cost_by_hand():
  """Two eval rows at steps 10 and 20: t_step is the second window's step_time; t_eval the 2 s between the rows
  less the 1.2 s trained between them; F the rest of the process's 10.5 s."""
  rows = [dict(step=10, wall_time=5.0, step_time=0.1), dict(step=20, wall_time=6.2, step_time=0.12)]
  fixed, step, evaluation = calibration.shape_cost(rows, [7.0, 9.0], started=0.0, ended=10.5)
  assert (step, evaluation) == (0.12, pytest.approx(0.8))
  assert fixed == pytest.approx(10.5 - 20 * 0.12 - 2 * 0.8)
  with pytest.raises(ValueError, match="1 evaluation rows"):
    calibration.shape_cost(rows[:1], [7.0], 0.0, 1.0)


def test_calibration_config_cannot_end_early():
  study = smoke.get_config()
  c = calibration.calibration_config(study.base, calibration.calibration_steps(128))
  assert calibration.calibration_steps(128) == 128 and calibration.calibration_steps(8192) == 4
  assert calibration.calibration_steps(8) == 200
  assert (c.num_train_steps, c.eval_every_steps, c.checkpoint_every_steps) == (128, 64, 64)
  assert c.stop.target_metric == "" and not c.stop_on_divergence and c.init_from_dir == ""


def test_calibration_config_passes_validation_with_a_long_warmup():
  """A trial whose warmup outlasts the calibration's few steps (to_target_small's 7.4 epochs at batch 64) is
  still calibrated: the check that refuses such a warmup in a real run passes on the calibration config."""
  from lamb_lars.configs.studies import mnist_batch_ladder
  from lamb_lars.errors import ConfigError
  from lamb_lars.train import validate

  study = mnist_batch_ladder.get_config("to_target_small")
  cfg = study.base.copy_and_resolve_references()
  with cfg.unlocked():
    cfg.batch_size, cfg.optimizer.schedule.warmup_epochs = 64, 7.41
  c = calibration.calibration_config(cfg, calibration.calibration_steps(64))
  assert c.optimizer.schedule.allow_long_warmup and not cfg.optimizer.schedule.allow_long_warmup
  validate.validate(c, 1)
  with c.unlocked():
    c.optimizer.schedule.allow_long_warmup = False
  with pytest.raises(ConfigError, match="warmup"):
    validate.validate(c, 1)


@pytest.mark.slow
def test_dry_run_prints_a_predicted_wall_time(tmp_path):
  """The smoke study's dry run calibrates its one group (batch 32 and 128; no compilation cache: no warm run) and
  prints the prediction; nothing is written to the workdir."""
  import os
  import re
  import subprocess
  import sys

  repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  out = subprocess.run(
    [sys.executable, "-m", "lamb_lars.study", "run", "--config=lamb_lars/configs/studies/smoke.py"]
    + [f"--workdir={tmp_path / 'w'}", "--dry_run", "--config.runner.compilation_cache=False"],
    cwd=repo,
    capture_output=True,
    text=True,
    timeout=600,
  )
  assert out.returncode == 0, out.stderr
  assert "1 calibration group(s): 2 calibration runs" in out.stdout
  line = [ln for ln in out.stdout.splitlines() if ln.startswith("predicted wall time on this machine: ")]
  assert len(line) == 1 and re.search(r": \S+ \(range \S+–\S+; calibration: 2 runs in \d+ s", line[0]), out.stdout
  assert not os.path.exists(tmp_path / "w")
