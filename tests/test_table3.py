"""Table 3 verdicts (docs/studies.md) and cells on hand-built trials. The first tests pin the definitions that the
old rules got wrong: a run that never learns is 'diverge', and a run that dips and recovers is not 'unstable'."""

from __future__ import annotations

import math

from lamb_lars.study.records import Trial, chance_threshold, normalise_variant
from lamb_lars.proj.you2020.table3 import (
  batch_label,
  build_table3,
  cell,
  render_markdown,
  table3_replicates_section,
  trial_verdict,
)


def _t(
  rid,
  accs,
  *,
  opt="momentum",
  variant="original",
  b=8192,
  status="done",
  loss=0.05,
  stopped=None,
  budget=None,
  role="table3",
):
  return Trial(
    rid,
    b,
    opt,
    variant,
    role=role,
    status=status,
    stopped=stopped,
    budget_epochs=budget,
    curve=[
      {"step": i + 1, "epoch": float(i + 1), "eval_accuracy": a, "eval_loss": loss, "train_loss": loss}
      for i, a in enumerate(accs)
    ],
  )


def test_chance_threshold_is_a_quarter_of_the_way_from_chance():
  assert math.isclose(chance_threshold(10), 0.1 + 0.25 * 0.9)  # 32.5%
  assert math.isclose(chance_threshold(1000), 0.001 + 0.25 * 0.999)


def test_a_run_that_never_learns_is_diverge_not_unstable():
  # accuracy 10–23%, loss stuck at ln 10: the old rule called this 'unstable'; the paper calls it 'diverge'.
  never = _t("n", [0.10, 0.23, 0.11, 0.18], loss=math.log(10))
  v = trial_verdict(never)
  assert v.verdict == "diverge" and "never left chance level" in v.reason
  assert trial_verdict(_t("edge", [0.325])).verdict == "diverge"  # ≤ threshold
  assert trial_verdict(_t("above", [0.3251])).verdict == "ok"
  dead = _t("d", [0.11, 0.11], status="diverged", stopped="dead")  # stopped early at chance level
  assert trial_verdict(dead).verdict == "diverge"
  nan = _t("x", [0.9, 0.95], status="diverged", stopped="nonfinite")
  assert trial_verdict(nan).verdict == "diverge"
  assert trial_verdict(_t("l", [0.9, 0.99], loss=float("nan"))).verdict == "diverge"


def test_a_run_that_recovers_and_ends_at_its_best_is_not_unstable():
  # a 40-point fall between evals marked the run unstable under the old rule, although it ends at its best.
  assert trial_verdict(_t("r", [0.95, 0.55, 0.97, 0.99])).verdict == "ok"
  v = trial_verdict(_t("u", [0.97, 0.99, 0.979]))  # ends 1.1 points below its best
  assert (v.verdict, v.final, v.best) == ("unstable", 0.979, 0.99)
  assert trial_verdict(_t("w", [0.97, 0.99, 0.981])).verdict == "ok"  # within 1 point
  assert trial_verdict(_t("c", [0.9, 0.5])).verdict == "unstable"  # learned, then lost part of it
  back = trial_verdict(_t("b", [0.365, 0.096, 0.114, 0.114], loss=math.log(10)))  # seen at 8K: back to chance
  assert back.verdict == "diverge" and "fell back to chance level" in back.reason
  assert trial_verdict(_t("p", [0.9], status="pruned")).verdict == "pruned"
  assert trial_verdict(_t("f", [0.99], status="failed")) is None
  assert trial_verdict(_t("q", [0.99], status="running")) is None


def test_cell_is_best_final_over_tuned_trials_that_ran_the_budget():
  trials = [
    _t("a", [0.98, 0.990], budget=2),
    _t("b", [0.98, 0.992], budget=2),
    _t("c", [0.993], status="pruned", budget=2),  # stopped by the search: not a result
    _t("d", [0.995], status="done", stopped="target", budget=2),  # stopped at a target: not the budget
    _t("e", [0.99, 0.4], budget=2),
  ]  # unstable
  c = cell(trials)
  assert (c.verdict, c.accuracy, c.run_id, c.num_trials) == ("ok", 0.992, "b", 5)
  assert c.counts == {"ok": 3, "pruned": 1, "unstable": 1} and c.text() == "99.2"
  assert cell([_t("e", [0.99, 0.4]), _t("n", [0.1, 0.1])]).text() == "unstable"
  assert cell([_t("n", [0.1, 0.1]), _t("x", [0.9], status="diverged")]).text() == "diverge"
  assert cell([]).text() == "n/a" and cell([_t("f", [0.99], status="failed")]).text() == "n/a"


def test_variants_and_labels():
  assert normalise_variant("Layer-wise + bound") == normalise_variant("layerwise_bound") == "layerwise_bound"
  assert normalise_variant("") == normalise_variant(None) == "original"
  assert (batch_label(8192), batch_label(32768), batch_label(256), batch_label(1000)) == ("8K", "32K", "256", "1000")


def test_build_and_render_paper_like_table():
  ts = [
    _t("s0", [0.992], b=256),
    _t("s1", [0.3, float("nan")], status="diverged", stopped="nonfinite"),
    _t("s2", [0.99, 0.992], variant="layerwise"),
    _t("s3", [0.992], variant="layer-wise + bound"),
    _t("a0", [0.993], opt="adam", b=256),
    _t("a1", [0.991], opt="adam"),
    _t("a2", [0.99, 0.6], opt="adam", variant="layer_wise"),
    _t("a3", [0.994], opt="adam", variant="layerwise_bound"),
    _t("l1", [0.994], opt="lars"),
    _t("x", [0.99], opt="momentum", b=1024),
    _t("other", [0.5], opt="momentum", role="technique"),
  ]  # not a Table 3 trial
  table = build_table3(ts, 8192, baseline_batch=256)
  assert table.rows == ("momentum", "adam", "lars")  # paper order
  md = render_markdown(table, paper={"momentum": ("99.2", "diverge", "99.2", "99.2")})
  assert md.splitlines() == [
    "| solver | bs 256 | 8K original | 8K layer-wise | 8K layer-wise + bound |",
    "|---|---|---|---|---|",
    "| momentum | 99.2 / 99.2 | diverge / diverge | 99.2 / 99.2 | 99.2 / 99.2 |",
    "| adam | 99.3 / — | 99.1 / — | unstable / — | 99.4 / — |",
    "| lars | n/a / — | 99.4 / — | n/a / — | n/a / — |",
  ]


def _tv(rid, test, val, **kw):
  """A full-budget trial (2 epochs) with final test accuracy ``test`` and validation accuracy ``val``."""
  t = _t(rid, [0.9, test], budget=2, **kw)
  curve = [dict(r, validation_accuracy=v) for r, v in zip(t.curve, [0.9, val])]
  return Trial(**{**t.__dict__, "curve": curve})


def test_cell_chooses_on_validation_not_test_and_reports_its_replicates():
  # 'hi-test' is best on the test set (99.4%) but worse on validation; the old rule chose it (selection bias).
  trials = [_tv("hi-test", 0.994, 0.985), _tv("hi-val", 0.990, 0.991)]
  c = cell(trials)
  assert (c.run_id, c.accuracy, c.selected_on, c.replicates) == ("hi-val", 0.990, "validation_accuracy", None)
  # the chosen configuration's fresh seeds give the cell's accuracy: mean, sd and a 95% t interval
  reps = [
    Trial(**{**_tv(f"hi-val-seed{s}", a, 0.99).__dict__, "phase": "replicate", "replicate_of": "hi-val", "seed": s})
    for s, a in ((1, 0.989), (2, 0.991), (3, 0.993))
  ]
  c = cell(trials + reps)
  x = [0.989, 0.991, 0.993]
  mean, sd = sum(x) / 3, math.sqrt(sum((v - sum(x) / 3) ** 2 for v in x) / 2)
  assert c.run_id == "hi-val" and c.num_trials == 2 and math.isclose(c.accuracy, mean)
  assert math.isclose(c.replicates.sd, sd) and math.isclose(c.replicates.hi - mean, 4.30265273 * sd / math.sqrt(3))
  # without a validation split the cell can only select on test, and says so
  assert cell([_t("a", [0.9, 0.99], budget=2)]).selected_on == "eval_accuracy"


def test_the_verdicts_against_the_paper_include_the_b0_cells_of_a_study_without_a_baseline_trial():
  """A Table 3 study (no 'baseline' role) still compares its batch-256 cells with the paper, as its Table 3
  section shows them: the paper's B0 (You et al. 2020 Table 2, MNIST: 256) stands in for the missing baseline."""

  def reps(prefix, b, accs, opt="momentum"):
    chosen = Trial(**{**_tv(prefix, accs[0], 0.99, b=b, opt=opt).__dict__, "space": {"lr": ["log", 0.1, 10.0]}})
    return [chosen] + [
      Trial(
        **{
          **_tv(f"{prefix}-seed{s}", a, 0.99, b=b, opt=opt).__dict__,
          "phase": "replicate",
          "replicate_of": prefix,
          "seed": s,
        }
      )
      for s, a in enumerate(accs, 1)
    ]

  trials = reps("bs256", 256, [0.992, 0.993, 0.991]) + reps("b8k", 8192, [0.95, 0.96, 0.955])
  lines = table3_replicates_section(trials, 8192, None, 10, "mnist_lenet")
  rows = [ln for ln in lines if ln.startswith("| momentum |")]
  # the t interval of 99.2/99.3/99.1: 99.2 ± 4.303·0.1/√3 = [98.95, 99.45], inside 99.2 ± 0.3 (paper 99.2 at B0)
  b0 = next(r for r in rows if "| bs 256 |" in r)
  assert "[98.95, 99.45]" in b0 and "| 99.2 |" in b0 and b0.endswith("| agrees |")
  # the paper's 'diverge' at 8K original: every fresh seed of the chosen configuration trains (the label rule)
  k8 = next(r for r in rows if "| 8K original |" in r)
  assert "| diverge |" in k8 and k8.endswith("| differs (trains: 3 of 3 fresh seeds of the chosen configuration) |")


def test_a_cell_with_fixed_settings_counts_its_first_run_as_a_seed():
  """A cell of one trial drawn from no search space (e.g. a recipe pinned by the authors' log) selected nothing, so
  its first run is an unbiased seed: the accuracy and its interval pool it with the replicates, and every seed's
  verdict counts. A searched cell (a space, or several trials) keeps its chosen trial out."""
  from lamb_lars.study.report import report_replicates

  def seed(rid, acc, s, of=""):
    t = _tv(rid, acc, acc, opt="lars")
    return Trial(
      **{**t.__dict__, "seed": s, "phase": "replicate" if of else "search", "replicate_of": of, "cell": "fx"}
    )

  x = [0.9914, 0.9921, 0.9930]
  trials = [seed("fx", x[0], 0), seed("fx-seed1", x[1], 1, "fx"), seed("fx-seed2", x[2], 2, "fx")]
  c = cell(trials)
  mean = sum(x) / 3
  sd = math.sqrt(sum((v - mean) ** 2 for v in x) / 2)
  assert (c.verdict, c.run_id, c.counts, c.replicates.n) == ("ok", "fx", {"ok": 3}, 3)
  assert math.isclose(c.accuracy, mean) and math.isclose(c.replicates.sd, sd)
  assert math.isclose(c.replicates.lo, mean - 4.30265273 * sd / math.sqrt(3))
  row = next(ln for ln in report_replicates.replicates_section(trials) if ln.startswith("| fx |"))
  assert "99.14 (fixed settings: a seed)" in row and "(n=3)" in row and "0: 99.14, 1: 99.21, 2: 99.30" in row
  # the same runs with a search space behind the first: it was selected, so only its two replicates count
  searched = [Trial(**{**trials[0].__dict__, "space": {"lr": ["log", 1.0, 30.0]}})] + trials[1:]
  c = cell(searched)
  assert (c.counts, c.replicates.n) == ({"ok": 1}, 2) and math.isclose(c.accuracy, (x[1] + x[2]) / 2)
  row = next(ln for ln in report_replicates.replicates_section(searched) if ln.startswith("| fx |"))
  assert "fixed settings" not in row and "(n=2)" in row
  # a fixed cell whose seeds all sit at chance: 'diverge', over all three seeds
  dead = [
    Trial(
      **{
        **_t(r, [0.11, 0.11], status="diverged", stopped="dead", budget=2).__dict__,
        "seed": s,
        "phase": p,
        "replicate_of": of,
      }
    )
    for r, s, p, of in (("m", 0, "search", ""), ("m-seed1", 1, "replicate", "m"), ("m-seed2", 2, "replicate", "m"))
  ]
  assert (cell(dead).text(), cell(dead).counts) == ("diverge", {"diverge": 3})


def test_a_paper_label_is_judged_by_the_fresh_seeds_of_the_chosen_configuration():
  """The pre-registered label rule: against the paper's 'diverge', a cell agrees when a fresh seed of its chosen
  configuration diverges (or is unstable) or nothing trains, differs when ≥ 3 fresh seeds all train, and is
  inconclusive with fewer seeds."""
  from lamb_lars.proj.you2020.table3 import label_agreement

  def cell_with(seed_accs):
    chosen = Trial(**{**_tv("c", 0.97, 0.97).__dict__, "space": {"lr": ["log", 0.1, 10.0]}})  # searched: not a seed
    reps = [
      Trial(**{**_tv(f"c-seed{s}", a, 0.97).__dict__, "phase": "replicate", "replicate_of": "c", "seed": s})
      for s, a in enumerate(seed_accs, 1)
    ]
    return cell([chosen] + reps)

  assert label_agreement(cell_with([0.97, 0.11, 0.96])).startswith("agrees (1 of 3 fresh seeds")  # one at chance
  assert label_agreement(cell_with([0.97, 0.96, 0.965])) == (
    "differs (trains: 3 of 3 fresh seeds of the chosen configuration)"
  )
  assert label_agreement(cell_with([0.97, 0.96])).startswith("inconclusive (2 fresh seeds")
  nothing = cell([_t("d1", [0.11, 0.10], status="diverged", stopped="dead"), _t("d2", [0.5, 0.1])])
  assert nothing.verdict == "diverge" and label_agreement(nothing).startswith("agrees (no configuration")
