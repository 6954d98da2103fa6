"""The runner's follow-ups of a cell's search (lamb_lars/study/running/phases.py) on a tiny study whose trials are
simulated by an in-process executor (no JAX; a row per poll, so ASHA prunes as it would): the best LR at the edge
of its range extends the range, pruned trials are promoted to the minimum of full-budget trials, the chosen
configuration (best *validation* accuracy) is replicated with fresh seeds; everything is in the store and its plan
log, a second run does nothing, and raising the number of seeds runs only the new ones."""

from __future__ import annotations

import json
import math
import os

import pytest

from lamb_lars.common import run_files
from lamb_lars.configs.studies import smoke
from lamb_lars.study.running import runner, store as st
from lamb_lars.study.running import workdir as wd

LR_OPT = 0.05  # the simulated optimum: above the first range [0.001, 0.01], inside the first extension
DIVERGE_LR = 2.0  # simulated trials above this LR diverge
SLOW = {"above": math.inf}  # simulated trials above this LR start far behind (ASHA prunes them) and end ahead
# The tests that read the module's finished study go to one pytest-xdist worker (--dist loadgroup), which runs it
# once; they also share its store (one of them adds a seed, which the report test allows for).
ON_FINISHED_WORKER = pytest.mark.xdist_group("study_phases_finished")


def _simulated_rows(cfg: dict) -> list[dict]:
  """Validation accuracy peaks at LR_OPT (log-quadratic) and grows with the epoch; the test accuracy prefers a
  *smaller* LR, so choosing on test would pick another trial than choosing on validation; the seed adds noise."""
  lr, seed, batch = cfg["optimizer"]["learning_rate"], int(cfg["seed"]), int(cfg["batch_size"])
  epochs, per_epoch = int(cfg["num_epochs"]), 512 // batch
  rows = []
  for e in range(1, epochs + 1):
    d = math.log10(lr / LR_OPT)
    val = 0.9 - 0.05 * d * d - 0.1 / e + 0.001 * ((seed * 7) % 5) - (0.5 * (e == 1) if lr > SLOW["above"] else 0.0)
    test = 0.9 - 0.05 * (d + 0.5) ** 2 - 0.1 / e + 0.002 * ((seed * 3) % 4)
    rows.append(
      {
        "step": e * per_epoch,
        "epoch": float(e),
        "examples": e * per_epoch * batch,
        "wall_time": float(e),
        "validation_accuracy": val,
        "eval_accuracy": test,
        "eval_loss": 1.0 - test,
        "validation_loss": 1.0 - val,
      }
    )
  return rows


class _Handle:
  def __init__(self, run_id, run_dir):
    self.run_id, self.dir = run_id, run_dir
    with open(os.path.join(run_dir, run_files.TRIAL_CONFIG_FILE), encoding="utf-8") as f:
      cfg = json.load(f)
    self.rows, self.lr = _simulated_rows(cfg), cfg["optimizer"]["learning_rate"]
    path = os.path.join(run_dir, "metrics.jsonl")
    self.done = sum(1 for _ in open(path, encoding="utf-8")) if os.path.exists(path) else 0  # resume
    self.killed = False

  def poll(self):
    if self.killed:
      return -9
    if self.lr > DIVERGE_LR and self.done >= 1:  # a non-finite loss after the first evaluation
      with open(os.path.join(self.dir, "result.json"), "w", encoding="utf-8") as f:
        json.dump({"status": "diverged", "step": self.rows[0]["step"], "error": "non-finite loss"}, f)
      return 0
    if self.done < len(self.rows):
      with open(os.path.join(self.dir, "metrics.jsonl"), "a", encoding="utf-8") as f:
        f.write(json.dumps(self.rows[self.done]) + "\n")
      self.done += 1
      return None
    with open(os.path.join(self.dir, "result.json"), "w", encoding="utf-8") as f:
      json.dump({"status": "done", "step": self.rows[-1]["step"], "final": self.rows[-1]}, f)
    return 0

  def kill(self):
    self.killed = True


class FakeExecutor:
  """Runs trials as ``_Handle``s; with ``interrupt``, the first submit of a run id containing it raises
  KeyboardInterrupt (the runner killed at that moment)."""

  name, slots = "fake", 1

  def __init__(self, interrupt=None):
    self.submitted, self.interrupt = [], interrupt

  def check_workdir(self, workdir):
    os.makedirs(workdir, exist_ok=True)

  def exclusive(self, env):
    return False

  def submit(self, run_id, run_dir, env):
    if self.interrupt and self.interrupt in run_id:
      self.interrupt = None
      raise KeyboardInterrupt("killed")
    self.submitted.append(run_id)
    return _Handle(run_id, run_dir)

  def close(self):
    pass


def _study(num_seeds=2):
  c = smoke.get_config()
  c.sweeps = (
    dict(name="base", role="baseline", fixed={"batch_size": 32}),
    dict(
      name="tuned",
      role="technique",
      technique="tuned",
      fixed={"batch_size": 64},
      search={"optimizer.learning_rate": ("log", 0.001, 0.01)},
      num_trials=6,
      seed=3,
    ),
  )
  c.search.max_extensions = 2
  c.search.min_full_budget = 9  # 8 of the 12 trials run their full budget: one pruned trial is promoted
  c.replicates.num_seeds = num_seeds
  c.replicates.roles = ("baseline", "technique")
  return c


def _run(study, workdir, interrupt=None):
  ex, lines = FakeExecutor(interrupt), []
  runner.run_study(study, workdir, executor=ex, poll_s=0.0, log=lines.append)
  return ex, lines


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
  workdir = str(tmp_path_factory.mktemp("phases"))
  ex, lines = _run(_study(), workdir)
  con = st.open_store(wd.store_path(workdir))
  yield workdir, ex, lines, {t.run_id: t for t in st.trials(con)}, st.plan(con)
  con.close()


@pytest.mark.slow
@pytest.mark.e2e
@ON_FINISHED_WORKER
def test_best_lr_at_the_edge_extends_the_range_once_recorded(finished):
  _, _, lines, trials, plan = finished
  ext = [p for p in plan if p["kind"] == "extend"]
  assert [(p["key"], p["detail"].get("side")) for p in ext if p["cell"] == "tuned"][0] == ("1", "high")
  first = next(p for p in ext if p["cell"] == "tuned" and p["key"] == "1")
  assert first["detail"]["space"]["optimizer.learning_rate"] == pytest.approx(["log", 0.01, 0.1])
  x1 = [t for t in trials.values() if t.phase == "extend1"]
  assert len(x1) == 6 and all(t.cell == "tuned" and t.run_id.startswith("tuned-x1-") for t in x1)
  assert all(0.01 <= t.params["learning_rate"] <= 0.1 for t in x1)
  end = next(p for p in ext if p["cell"] == "tuned" and p["key"] == "end")
  assert end["detail"]["where"] == "interior" and end["detail"]["rounds"] == 1
  assert any("high edge" in ln for ln in lines)


@pytest.mark.slow
@pytest.mark.e2e
@ON_FINISHED_WORKER
def test_pruned_trials_are_promoted_to_the_minimum_of_full_budget_trials(finished):
  _, _, _, trials, plan = finished
  tuned = [t for t in trials.values() if t.cell == "tuned" and t.phase != "replicate"]
  assert len(tuned) == 12 and sum(t.status == "done" for t in tuned) == 9
  promoted = [t for t in tuned if t.promoted]
  assert promoted and len(promoted) == 9 - sum(t.status == "done" and not t.promoted for t in tuned)
  assert sorted(p["key"] for p in plan if p["kind"] == "promote") == sorted(t.run_id for t in promoted)
  assert all(t.status == "done" and t.final_epoch == 3.0 for t in promoted)
  # the pruned trials that got furthest (all were pruned at epoch 1), then with the best validation accuracy there
  pruned = [t for t in tuned if t.status == "pruned"] + promoted
  at_rung = {t.run_id: [r for r in t.curve if r["epoch"] <= 1.0][-1]["validation_accuracy"] for t in pruned}
  ranked = sorted(pruned, key=lambda t: -at_rung[t.run_id])
  assert {t.run_id for t in ranked[: len(promoted)]} == {t.run_id for t in promoted}


@pytest.mark.slow
@pytest.mark.e2e
@ON_FINISHED_WORKER
def test_chosen_on_validation_is_replicated_with_fresh_seeds(finished):
  workdir, _, _, trials, plan = finished
  tuned = [t for t in trials.values() if t.cell == "tuned" and t.phase != "replicate" and t.status == "done"]
  by_val = max(tuned, key=lambda t: (t.last("validation_accuracy"),))
  by_test = max(tuned, key=lambda t: t.last("eval_accuracy"))
  assert by_val.run_id != by_test.run_id  # the simulation makes them differ
  reps = sorted((t for t in trials.values() if t.replicate_of == by_val.run_id), key=lambda t: t.seed)
  assert [(t.run_id, t.seed, t.phase, t.status) for t in reps] == [
    (f"{by_val.run_id}-seed{s}", s, "replicate", "done") for s in (1, 2)
  ]
  with open(os.path.join(wd.run_dir(workdir, reps[0].run_id), run_files.TRIAL_CONFIG_FILE), encoding="utf-8") as f:
    cfg = json.load(f)
  assert cfg["seed"] == 1 and cfg["optimizer"]["learning_rate"] == by_val.params["learning_rate"]
  base_reps = [t for t in trials.values() if t.cell == "base" and t.phase == "replicate"]
  assert sorted(t.seed for t in base_reps) == [1, 2]
  assert sorted(p["key"] for p in plan if p["kind"] == "replicate" and p["cell"] == "tuned") == ["seed1", "seed2"]


@pytest.mark.slow
@pytest.mark.e2e
@ON_FINISHED_WORKER
def test_second_run_does_nothing_and_more_seeds_run_only_the_new_ones(finished, tmp_path):
  workdir, _, _, trials, plan = finished
  ex, lines = _run(_study(), workdir)
  assert ex.submitted == [] and "0 to run" in lines[0], lines
  con = st.open_store(wd.store_path(workdir))
  assert st.plan(con) == plan
  ex, _ = _run(_study(num_seeds=3), workdir)
  assert sorted(ex.submitted) == sorted(
    f"{t.run_id}-seed3" for t in trials.values() if any(r.replicate_of == t.run_id for r in trials.values())
  )
  assert len(ex.submitted) == 2
  con.close()


@pytest.mark.slow
@pytest.mark.e2e
@ON_FINISHED_WORKER
def test_runs_csv_has_seed_phase_and_replicate_columns(finished, tmp_path):
  import csv
  from lamb_lars.study.publishing import csv_tables

  workdir = finished[0]
  con = st.open_store(wd.store_path(workdir))
  trials = {t.run_id: t for t in st.trials(con)}
  runs_csv, _ = csv_tables.export_csvs(con, "smoke", str(tmp_path))
  con.close()
  rows = {r["run_id"]: r for r in csv.DictReader(open(runs_csv, encoding="utf-8"))}
  for rid, t in trials.items():
    assert rows[rid]["seed"] == str(t.seed) and rows[rid]["phase"] == t.phase
    assert rows[rid]["replicate_of"] == t.replicate_of
  back = {t.run_id: t for t in csv_tables.load_csvs(str(tmp_path))}
  assert {rid: (t.seed, t.phase, t.replicate_of, t.promoted) for rid, t in back.items()} == {
    rid: (t.seed, t.phase, t.replicate_of, t.promoted) for rid, t in trials.items()
  }


@pytest.mark.slow
@pytest.mark.e2e
@ON_FINISHED_WORKER
def test_report_shows_search_adequacy_and_replicates(finished, tmp_path):
  from lamb_lars.study.publishing import publish

  workdir = finished[0]
  readme = publish.publish(workdir, str(tmp_path / "report"))
  text = open(readme, encoding="utf-8").read()
  adequacy = text[text.index("## Search adequacy") : text.index("## Replicates")]
  row = next(ln for ln in adequacy.splitlines() if ln.startswith("| tuned |"))
  assert "interior" in row and "[0.001, 0.01], [0.01, 0.1]" in row and "| 12 | 9 |" in row
  reps = text[text.index("## Replicates") :]
  assert "(n=" in reps and "95% t interval" in reps  # n = 2, or 3 after the test that adds a seed
  # the baseline's replicates share its role: the single-run baseline section still finds its one baseline trial
  assert "No baseline" not in text and "run `base-ff2a`" in text


@pytest.mark.slow  # over 4 CPU-seconds: compiles several programs
def test_a_replicate_changes_only_the_seed_which_sets_init_data_order_and_step_key():
  """A replicate's config differs from its chosen trial's in ``seed`` alone; that seed keys the initialisation and
  the per-step key (dropout, augmentation) in the trainer and the training order in the input pipeline, while
  the held-out validation split stays the same examples."""
  import jax
  import optax
  from lamb_lars.input_pipeline import pipeline
  from lamb_lars.train import mesh as mesh_lib, trainer
  from lamb_lars.models import create_model
  from lamb_lars.study.running import phases, sweep

  spec = sweep.expand(_study())[0]
  rep = phases.replicate_spec(spec, 1)
  a, b = spec.config.to_dict(), rep.config.to_dict()
  assert {k for k in a if a[k] != b[k]} == {"seed"} and (spec.seed, rep.seed) == (0, 1)
  order = [next(pipeline.train_batches(c, epoch=0, global_batch_size=32))["label"] for c in (spec.config, rep.config)]
  assert (order[0] != order[1]).any()
  val = [next(pipeline.eval_batches(c, batch_size=32, split="validation"))["label"] for c in (spec.config, rep.config)]
  assert (val[0] == val[1]).all()
  model, mesh = create_model("lenet5", num_classes=10), mesh_lib.make_mesh(1, jax.devices()[:1])
  states = [
    trainer.create_train_state(model, optax.sgd(0.1), mesh, (28, 28, 1), c.seed) for c in (spec.config, rep.config)
  ]
  (s0, k0), (s1, k1) = states
  leaves = zip(jax.tree_util.tree_leaves(s0.params), jax.tree_util.tree_leaves(s1.params))
  assert any((x != y).any() for x, y in leaves) and (k0 != k1).any()


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.parametrize("where", ["-x1-", "-seed"])
def test_runner_killed_during_a_follow_up_resumes_to_the_same_study(tmp_path, where):
  """Killed when the first extension (or replicate) trial starts, then run again: the same trials and plan log as an
  uninterrupted run, every trial recorded once."""
  workdir = str(tmp_path / "w")
  with pytest.raises(KeyboardInterrupt):
    _run(_study(), workdir, interrupt=where)
  _run(_study(), workdir)
  con = st.open_store(wd.store_path(workdir))
  got = {t.run_id: (t.status, t.phase, t.seed, t.replicate_of, t.promoted) for t in st.trials(con)}
  plan = [(p["kind"], p["cell"], p["key"]) for p in st.plan(con)]
  con.close()
  ref_dir = str(tmp_path / "ref")
  _run(_study(), ref_dir)
  con = st.open_store(wd.store_path(ref_dir))
  want = {t.run_id: (t.status, t.phase, t.seed, t.replicate_of, t.promoted) for t in st.trials(con)}
  assert got == want and sorted(plan) == sorted((p["kind"], p["cell"], p["key"]) for p in st.plan(con))
  con.close()


@pytest.mark.slow
@pytest.mark.e2e
def test_a_cell_where_every_trial_diverged_extends_downward(tmp_path):
  c = _study(num_seeds=0)
  c.sweeps = (
    dict(
      name="hot",
      role="table3",
      fixed={"batch_size": 64},
      search={"optimizer.learning_rate": ("log", 5.0, 50.0)},
      num_trials=4,
      seed=0,
    ),
  )
  c.analysis.techniques = ()
  c.analysis.target_technique = ""
  _run(c, str(tmp_path))
  con = st.open_store(wd.store_path(str(tmp_path)))
  ext = {p["key"]: p["detail"] for p in st.plan(con) if p["kind"] == "extend"}
  trials = st.trials(con)
  con.close()
  assert ext["1"]["side"] == "low" and ext["1"]["why"] == "every trial diverged"
  assert ext["1"]["space"]["optimizer.learning_rate"] == pytest.approx(["log", 0.5, 5.0])
  assert all(t.status == "diverged" for t in trials if t.phase == "search")
  assert any(t.status == "done" for t in trials if t.phase == "extend1")


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.parametrize(
  "key, value",
  [
    ("replicates.num_seeds", -1),
    ("replicates.roles", ("tech",)),
    ("search.edge_fraction", 0.5),
    ("search.max_extensions", -1),
    ("search.min_full_budget", -2),
  ],
)
def test_bad_follow_up_settings_are_one_sentence_before_anything_runs(tmp_path, key, value):
  c = _study()
  section, name = key.split(".")
  c[section][name] = value
  with pytest.raises(ValueError, match=f"study.{section}: "):
    runner.run_study(c, str(tmp_path / "w"), executor=FakeExecutor(), poll_s=0.0, log=lambda s: None)
  assert not os.path.exists(tmp_path / "w")


@pytest.mark.slow
@pytest.mark.e2e
def test_a_promoted_winner_at_the_range_edge_extends_the_range(tmp_path, monkeypatch):
  """The highest LRs of the range start far behind (ASHA prunes them at epoch 1) but end ahead: before promotion
  the chosen trial is an interior one and the cell's search ends; promotion then makes the highest LR tried the
  chosen trial, which sits at the range's edge, so the cell is decided again and its range is extended (it was
  not before: the runner replicated an edge winner)."""
  from lamb_lars.study.running import sweep

  c = _study(num_seeds=1)
  c.sweeps = (
    dict(
      name="tuned",
      role="technique",
      technique="tuned",
      fixed={"batch_size": 64},
      search={"optimizer.learning_rate": ("log", 0.001, 0.01)},
      num_trials=6,
      seed=3,
    ),
  )
  c.search.max_extensions = 1
  c.search.min_full_budget = 6  # every pruned trial of the first range is promoted
  lrs = sorted(t.config.optimizer.learning_rate for t in sweep.expand(c))
  monkeypatch.setitem(SLOW, "above", (lrs[-3] + lrs[-2]) / 2)  # the two highest LRs are slow
  _run(c, str(tmp_path))
  con = st.open_store(wd.store_path(str(tmp_path)))
  plan = [p for p in st.plan(con) if p["kind"] in ("extend", "replicate") and p["cell"] == "tuned"]
  trials = {t.run_id: t for t in st.trials(con)}
  con.close()
  top = next(t for t in trials.values() if t.phase == "search" and t.params["learning_rate"] == lrs[-1])
  assert top.promoted and top.status == "done"  # pruned at epoch 1, then promoted: the premise
  kinds = [(p["kind"], p["key"]) for p in plan]
  assert kinds[:2] == [("extend", "end"), ("extend", "1")], kinds
  first_end, ext = plan[0]["detail"], plan[1]["detail"]
  assert first_end["where"] == "interior" and first_end["chosen"] != top.run_id
  assert ext["chosen"] == top.run_id and ext["side"] == "high"
  assert ext["space"]["optimizer.learning_rate"] == pytest.approx(["log", 0.01, 0.1])
  assert [t for t in trials.values() if t.phase == "extend1"]
  ends = [p for p in plan if p["kind"] == "extend" and p["key"].startswith("end")]
  assert [p["key"] for p in ends] == ["end", "end2"]  # decided again after the extension, once
  reps = [p for p in plan if p["kind"] == "replicate"]
  assert reps and all(p["detail"]["chosen"] == ends[-1]["detail"]["chosen"] for p in reps)


@pytest.mark.slow
@pytest.mark.e2e
def test_an_end_recorded_for_another_chosen_trial_is_decided_again(tmp_path):
  """A study whose log ended a cell's search for a trial that is no longer the chosen one (written by a runner that
  decided before promotions could change the winner) is decided again on resume: the same study as a clean run."""
  ref = str(tmp_path / "ref")
  _run(_study(num_seeds=0), ref)
  workdir = str(tmp_path / "w")
  os.makedirs(workdir)
  con = st.open_store(wd.store_path(workdir))
  st.log_plan(con, "extend", "tuned", "end", {"rounds": 0, "where": "interior", "chosen": "tuned-not-a-trial"})
  con.close()
  _run(_study(num_seeds=0), workdir)
  got, want = [], []
  for d, out in ((workdir, got), (ref, want)):
    con = st.open_store(wd.store_path(d))
    out += [(p["kind"], p["cell"], p["key"]) for p in st.plan(con) if not p["key"].startswith("end")]
    out += sorted((t.run_id, t.status) for t in st.trials(con))
    con.close()
  assert got == want


@pytest.mark.slow
@pytest.mark.e2e
def test_refinement_tries_the_chosen_lrs_neighbours_within_the_factor(tmp_path):
  """With ``search.refine_factor`` = 1.5, the cell ends with tried LRs within ×1.5 on both sides of the chosen one
  (checked from the store's LRs, not from the runner's own record), the refinement trials are never pruned, and a
  second run adds nothing. The search has a second key that sorts after the LR: the plan log stores each point
  with sorted keys, and the trials rebuilt from it on resume must keep the ids the runner gave them (the ladder to
  target of issue 41 stopped on resume with "the plan log replicates tuned-r1-b1536-…, which this study no longer
  has" before sweep._in_order)."""
  c = _study(num_seeds=1)
  c.sweeps = (
    dict(
      name="tuned",
      role="technique",
      technique="tuned",
      fixed={"batch_size": 64},
      search={"optimizer.learning_rate": ("log", 0.005, 0.5), "optimizer.schedule.warmup_epochs": ("linear", 0, 1)},
      num_trials=4,
      seed=3,
    ),
  )
  c.search.min_full_budget = 2
  c.search.refine_factor = 1.5
  c.search.max_refinements = 4
  _run(c, str(tmp_path))
  con = st.open_store(wd.store_path(str(tmp_path)))
  plan = st.plan(con)
  trials = st.trials(con)
  con.close()
  refines = [p for p in plan if p["kind"] == "refine"]
  assert refines and [p["key"] for p in refines] == [str(k + 1) for k in range(len(refines))]
  ref_trials = [t for t in trials if t.phase.startswith("refine")]
  assert ref_trials and all(t.status == "done" and t.ran_full_budget for t in ref_trials)
  chosen_id = next(p["detail"]["chosen"] for p in plan if p["kind"] == "replicate")
  chosen_lr = next(t.params["learning_rate"] for t in trials if t.run_id == chosen_id)
  lrs = sorted(t.params["learning_rate"] for t in trials if t.phase != "replicate" and t.status != "failed")
  below = max(x for x in lrs if x < chosen_lr * (1 - 1e-9))
  above = min(x for x in lrs if x > chosen_lr * (1 + 1e-9))
  assert chosen_lr / below <= 1.5 + 1e-9 and above / chosen_lr <= 1.5 + 1e-9, (below, chosen_lr, above, lrs)
  # The refinement points are η/1.5 or η·1.5 of the trial chosen when each was decided.
  by_id = {t.run_id: t for t in trials}
  for p in refines:
    lr = by_id[p["detail"]["chosen"]].params["learning_rate"]
    got = sorted(x["optimizer.learning_rate"] / lr for x in p["detail"]["points"])
    assert all(min(abs(g - 1 / 1.5), abs(g - 1.5)) < 1e-9 for g in got), got
  ex, _ = _run(c, str(tmp_path))
  assert ex.submitted == []
  # the report's adequacy table shows the neighbours' ratios (only in a study with refinement)
  from lamb_lars.study.publishing import publish

  text = open(publish.publish(str(tmp_path), str(tmp_path / "report")), encoding="utf-8").read()
  adequacy = text[text.index("## Search adequacy") : text.index("## Replicates")]
  assert "nearest tried LR below / above" in adequacy
  row = next(ln for ln in adequacy.splitlines() if ln.startswith("| tuned |"))
  assert f"×{chosen_lr / below:.2f} / ×{above / chosen_lr:.2f}" in row


@pytest.mark.parametrize("factor, rounds", [(1.0, 2), (1.5, 0), (0.0, 3), (2.0, -1)])
def test_bad_refinement_settings_are_one_sentence(factor, rounds):
  c = _study()
  c.search.refine_factor = factor
  c.search.max_refinements = rounds
  with pytest.raises(ValueError, match="study.search: refine_factor"):
    runner.checked_settings(c)


def test_neighbours_are_the_nearest_tried_lrs_on_each_side():
  from lamb_lars.study.analysis import search_adequacy

  assert search_adequacy.neighbours(0.1, [0.01, 0.08, 0.1, 0.2, 0.3]) == pytest.approx((1.25, 2.0))
  assert search_adequacy.neighbours(0.1, [0.1, 0.2]) == (None, pytest.approx(2.0))
  assert search_adequacy.neighbours(0.1, []) == (None, None)


class _EndsBeforeTheKill(_Handle):
  """A trial that writes every row and its result in one poll yet still looks running to that poll: it ends in
  the moment between the runner's poll and its kill, the race CI met (the trial's TensorBoard session had ended
  with success while the store said pruned)."""

  def poll(self):
    if self.killed:
      return -9
    if not os.path.exists(os.path.join(self.dir, "result.json")):
      with open(os.path.join(self.dir, "metrics.jsonl"), "a", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in self.rows[self.done :])
      self.done = len(self.rows)
      with open(os.path.join(self.dir, "result.json"), "w", encoding="utf-8") as f:
        json.dump({"status": "done", "step": self.rows[-1]["step"], "final": self.rows[-1]}, f)
      return None
    return 0


def test_a_trial_that_ends_between_the_poll_and_the_prune_keeps_its_result(tmp_path):
  c = _study(num_seeds=0)
  c.sweeps = c.sweeps[1:]
  c.search.max_extensions, c.search.min_full_budget = 0, 0
  c.analysis.techniques = ()
  c.analysis.target_technique = ""
  ex = FakeExecutor()
  ex.submit = lambda run_id, run_dir, env: _EndsBeforeTheKill(run_id, run_dir)
  runner.run_study(c, str(tmp_path), executor=ex, poll_s=0.0, log=lambda _: None)
  con = st.open_store(wd.store_path(str(tmp_path)))
  decided = {d["run_id"] for d in st.decisions(con) if d["prune"]}
  trials = st.trials(con)
  con.close()
  assert decided  # the search would have pruned some of them
  for t in trials:  # ... but each had written its result first: it keeps it, rows and all
    assert (t.status, t.final_epoch) == ("done", 3.0), t.run_id


class _RanksFlipAtTheEnd(_Handle):
  """The k-th trial submitted is the best so far at epoch 1 (so ASHA keeps it at that rung) and the worst so far
  at epoch 3, a rung of r·η^k = 1·3 that is also the end of the 3-epoch budget."""

  def __init__(self, run_id, run_dir, k):
    super().__init__(run_id, run_dir)
    for r in self.rows:
      r["validation_accuracy"] = 0.5 + 0.05 * k if r["epoch"] < 3 else 0.9 - 0.05 * k


def test_the_search_never_stops_a_trial_at_the_end_of_its_budget(tmp_path):
  c = _study(num_seeds=0)
  c.sweeps = c.sweeps[1:]
  c.search.max_extensions, c.search.min_full_budget = 0, 0
  c.analysis.techniques = ()
  c.analysis.target_technique = ""
  ex = FakeExecutor()

  def submit(run_id, run_dir, env):
    ex.submitted.append(run_id)
    return _RanksFlipAtTheEnd(run_id, run_dir, len(ex.submitted))

  ex.submit = submit
  runner.run_study(c, str(tmp_path), executor=ex, poll_s=0.0, log=lambda _: None)
  con = st.open_store(wd.store_path(str(tmp_path)))
  decisions, trials = st.decisions(con), st.trials(con)
  con.close()
  assert not any(d["prune"] for d in decisions if d["step"] == 1)
  assert [d["prune"] for d in decisions if d["step"] == 3] == [0] + [1] * 5  # ASHA would stop all but the first
  assert [(t.status, t.final_epoch) for t in trials] == [("done", 3.0)] * 6  # ... which would save nothing
