"""Def. 2.2 from seeds (lamb_lars/study/analysis/reach.py; You et al. 2020 Def. 2.2): which cell's evidence wins,
and the cautions where the regime label (one run suffices) and the verdict over seeds disagree."""

from __future__ import annotations

from lamb_lars.study.analysis import reach, regimes
from lamb_lars.study.records import Baseline, Trial

BASE = Baseline(batch_size=256, accuracy=0.99, val_loss=0.03, epochs=30, num_train=55000)  # bar: 0.98505


def _run(rid, tech, acc, val=0.98, cell="", **kw):
  return Trial(
    rid,
    8192,
    tech,
    role="technique",
    technique=tech,
    cell=cell or f"{tech}-b8192",
    budget_epochs=30.0,
    curve=[{"step": 10, "epoch": 30.0, "eval_accuracy": acc, "validation_accuracy": val, "validation_loss": 0.03}],
    **kw,
  )


def test_a_chosen_configuration_outranks_a_best_on_test_single_run():
  """LARS's cell has no chosen trial (one search trial, pruned: nothing ran its full budget), so it is read from its
  best trial on test, 98.9% (a pass by the single-run tolerance); LAMB's chosen configuration is borderline over 3
  seeds. Selected on test, the LARS run is optimistic: the validation-chosen LAMB evidence is the batch's (before,
  the stronger verdict won whatever its footing)."""
  lars = [_run("lars-a", "lars", 0.989, status="pruned"), _run("lars-b", "lars", 0.95, status="pruned")]
  lamb = [_run("lamb-a", "lamb", 0.986, val=0.99), _run("lamb-b", "lamb", 0.97, val=0.97)]
  reps = [
    _run(f"lamb-a-s{k}", "lamb", acc, phase="replicate", replicate_of="lamb-a", seed=k)
    for k, acc in ((1, 0.984), (2, 0.986), (3, 0.985))
  ]
  ev = reach.reach_evidence(lars + lamb + reps, reps, ("lars", "lamb"), 8192, BASE)
  assert (ev.technique, ev.run_id, ev.best_on_test, ev.verdict.num_values) == ("lamb", "lamb-a", False, 3)


def test_seeds_passing_where_no_own_trial_reaches_is_a_caution():
  """The label reads the cell's own trials (none reaches 0.995·A here), the verdict reads the chosen
  configuration's replicate seeds (all reach): the report must say they disagree."""
  own = [_run("lamb-a", "lamb", 0.984, val=0.99), _run("lamb-b", "lamb", 0.97, val=0.97)]
  reps = [
    _run(f"lamb-a-s{k}", "lamb", acc, phase="replicate", replicate_of="lamb-a", seed=k)
    for k, acc in ((1, 0.988), (2, 0.989), (3, 0.988))
  ]
  r = regimes.classify_trials(BASE, own, ("lamb",))
  d22 = {8192: reach.reach_evidence(own + reps, reps, ("lamb",), 8192, BASE)}
  assert d22[8192].verdict.verdict == "pass" and not r.reached_by[8192]
  assert reach.disagreements(r, {}, d22) == [
    "batch 8192: no trial's own run reaches 99.5%·A, but lamb's chosen configuration does over its replicate seeds "
    "(Def. 2.2 pass (lamb, 3 seeds)); the label reads the trials alone"
  ]


def test_seeds_of_leaves_a_selected_trial_out_and_unfinished_seeds():
  t = _run("a", "lamb", 0.98)
  reps = [
    _run("a-s1", "lamb", 0.98, phase="replicate", replicate_of="a"),
    _run("a-s2", "lamb", 0.98, phase="replicate", replicate_of="a", status="pending"),
    _run("b-s1", "lamb", 0.98, phase="replicate", replicate_of="b"),
  ]
  assert [s.run_id for s in reach.seeds_of(reps, t, selected=True)] == ["a-s1"]
  assert [s.run_id for s in reach.seeds_of(reps, t)] == ["a", "a-s1"]
