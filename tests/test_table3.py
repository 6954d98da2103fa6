"""Table 3 verdicts and rendering on hand-computed cases."""
from __future__ import annotations

from lamb_lars.study.store import Trial
from lamb_lars.study.table3 import (batch_label, build_table3, cell, normalise_variant, render_markdown,
                                    trial_verdict)


def _t(rid, accs, *, opt="sgd", variant="original", b=8192, status="done", loss=0.05):
  return Trial(rid, b, opt, variant, status=status,
               curve=[{"step": i + 1, "eval_accuracy": a, "eval_loss": loss} for i, a in enumerate(accs)])


def test_trial_verdicts():
  assert trial_verdict(_t("a", [0.9, 0.98, 0.99])).verdict == "ok"
  assert trial_verdict(_t("a", [0.9, 0.99], status="diverged")).reason == "run diverged"
  assert trial_verdict(_t("a", [0.9, 0.15])).verdict == "diverge"          # 0.15 <= 0.1 + 0.05
  assert trial_verdict(_t("a", [0.9, 0.1501])).verdict == "unstable"       # above chance, 75 points below best
  assert trial_verdict(_t("a", [0.9, 0.99], loss=float("nan"))).verdict == "diverge"
  v = trial_verdict(_t("a", [0.97, 0.99, 0.979]))                          # 1.1 points below best
  assert (v.verdict, v.final, v.best) == ("unstable", 0.979, 0.99)
  assert trial_verdict(_t("a", [0.97, 0.99, 0.981])).verdict == "ok"       # within 1 point
  assert trial_verdict(_t("a", [0.9, 0.84, 0.95])).verdict == "unstable"   # a 6-point fall between evals
  assert trial_verdict(_t("a", [0.9, 0.86, 0.95])).verdict == "ok"
  assert trial_verdict(_t("a", [0.99], status="failed")) is None
  assert trial_verdict(_t("a", [])) is None
  assert trial_verdict(_t("a", []), num_classes=10) is None
  assert trial_verdict(_t("a", [0.5, 0.6]), num_classes=1000).verdict == "ok"


def test_cell_summary_rules():
  ok1, ok2 = _t("b", [0.98]), _t("a", [0.98])
  c = cell([_t("u", [0.99, 0.5]), ok1, ok2, _t("d", [0.9], status="diverged")])
  assert (c.verdict, c.accuracy, c.run_id, c.num_trials) == ("ok", 0.98, "a", 4)  # tie -> smaller run_id
  assert c.counts == {"unstable": 1, "ok": 2, "diverge": 1} and c.text() == "98.0"
  assert cell([_t("u", [0.99, 0.5]), _t("d", [0.9], status="diverged")]).text() == "unstable"
  assert cell([_t("d", [0.9], status="diverged"), _t("f", [], status="failed")]).text() == "diverge"
  assert cell([]).text() == "n/a" and cell([_t("f", [0.99], status="failed")]).verdict == "n/a"


def test_variant_normalisation_and_batch_label():
  assert normalise_variant("Layer-wise + bound") == normalise_variant("layerwise_bound") == "layerwisebound"
  assert normalise_variant("") == normalise_variant("none") == "original"
  assert (batch_label(8192), batch_label(32768), batch_label(256), batch_label(1000)) == ("8K", "32K", "256",
                                                                                         "1000")


def test_build_and_render_paper_like_table():
  ts = [_t("s0", [0.992], b=256), _t("s1", [0.3, 0.1], status="diverged"),
        _t("s2", [0.99, 0.992], variant="layerwise"), _t("s3", [0.992], variant="layer-wise + bound"),
        _t("a0", [0.993], opt="adam", b=256), _t("a1", [0.991], opt="adam"),
        _t("a2", [0.99, 0.6], opt="adam", variant="layer_wise"), _t("a3", [0.994], opt="adam",
                                                                  variant="layerwise_bound"),
        _t("l1", [0.994], opt="lars"), _t("x", [0.99], opt="sgd", b=1024)]
  table = build_table3(ts, 8192, baseline_batch=256)
  assert table.rows == ("sgd", "adam", "lars")  # paper order
  assert table.columns == ("bs 256", "original", "layer-wise", "layer-wise + bound")
  md = render_markdown(table)
  assert md.splitlines() == [
      "| solver | bs 256 | 8K original | 8K layer-wise | 8K layer-wise + bound |",
      "|---|---|---|---|---|",
      "| sgd | 99.2 | diverge | 99.2 | 99.2 |",
      "| adam | 99.3 | 99.1 | unstable | 99.4 |",
      "| lars | n/a | 99.4 | n/a | n/a |"]
  no_base = build_table3(ts, 8192, optimizers=["lars"])
  assert no_base.columns == ("original", "layer-wise", "layer-wise + bound") and no_base.rows == ("lars",)
