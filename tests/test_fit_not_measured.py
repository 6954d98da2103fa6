"""A fit that measures nothing is never printed as a number (issue 62): an S(B) fit over fewer than three batch
sizes, or whose B_crit sits at the edge of them, reads "not measured (why)" in the README and in the drawn figure;
no time-optimal batch is derived from it; every trial the fit leaves out is listed with its reason. Reports
published before (``fit_rule='any'``) keep their numbers."""

from __future__ import annotations

import dataclasses
import math
import re

import matplotlib

matplotlib.use("Agg")
import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from lamb_lars.study.analysis import critical_batch  # noqa: E402
from lamb_lars.study.publishing import csv_tables  # noqa: E402
from lamb_lars.study.records import Target  # noqa: E402
from lamb_lars.study.report import report  # noqa: E402
from lamb_lars.study.running import store as st  # noqa: E402
from test_report import _add, _curve  # noqa: E402


@pytest.mark.parametrize(
  "b_crit,batches,expected",
  [
    (700.0, [512, 1024], "only 2 batch sizes"),
    (700.0, [512], "only 1 batch size reached"),
    (1024.0, [256, 512, 1024], "at or beyond the largest batch that reached the target (1024)"),
    (math.inf, [256, 512, 1024], "B_crit ≳ 1024"),
    (0.0, [256, 512, 1024], "B_crit ≲ 256"),
    (600.0, [256, 512, 1024], None),
    (600.0, [256, 256, 512, 1024, 1024], None),  # repeated batches count once
  ],
)
def test_why_not_measured(b_crit, batches, expected):
  why = critical_batch.why_not_measured(b_crit, batches)
  assert (why is None) if expected is None else (expected in why), why


def _digits_like_store(tmp_path, tuned_batches=(512, 1024)):
  """The new user's study of issue 62: linear scaling at 64 … 1024 reaches the goal; the target technique 'tuned'
  ran at 512 and 1024 only."""
  con = st.open_store(tmp_path / "study.sqlite")
  _add(con, "baseline", 32, _curve(32, 4000), role="baseline")
  for b in (64, 128, 256, 512, 1024):
    _add(con, f"linear-b{b}", b, _curve(b, 3 * 400.0 * (1 + 400.0 / b)), role="linear")
  for b in tuned_batches:
    _add(con, f"tuned-b{b}", b, _curve(b, 400.0 * (1 + 400.0 / b)), role="technique", technique="tuned")
  _add(con, "tuned-slow-b1024", 1024, _curve(1024, 5000), role="technique", technique="tuned")
  out = tmp_path / "csv"
  csv_tables.export_csvs(con, "mnist", str(out))
  return csv_tables.load_csvs(str(out))


SPEC = report.ReportSpec(
  title="digits",
  target=Target("eval_accuracy", 0.99, "max"),
  baseline_epochs=30.0,
  num_train=1257,
  techniques=("tuned",),
  target_technique="tuned",
)


def _drawn_text(monkeypatch, title: str) -> list[list[str]]:
  """Every text drawn into the saved figures whose title starts with ``title``: titles, axis labels, tick labels,
  legends, texts."""
  drawn: list[list[str]] = []
  real = Figure.savefig

  def spy(fig, *args, **kwargs):
    fig.canvas.draw()
    texts = [t.get_text() for t in fig.findobj(matplotlib.text.Text) if t.get_text()]
    if any(ax.get_title().startswith(title) for ax in fig.axes):
      drawn.append(texts)
    return real(fig, *args, **kwargs)

  monkeypatch.setattr(Figure, "savefig", spy)
  return drawn


NUMBER = re.compile(r"B_crit\s*=\s*[\d∞]")


def test_a_two_batch_fit_shows_no_number_in_text_or_figure(tmp_path, monkeypatch):
  trials = _digits_like_store(tmp_path)
  drawn = _drawn_text(monkeypatch, "Steps to reach")
  text = open(report.write_report(trials, str(tmp_path / "r"), SPEC)).read()
  steps = text.split("## Steps to target\n", 1)[1].split("\n## ", 1)[0]
  assert "B_crit not measured (only 2 batch sizes reached the target" in steps
  assert not NUMBER.search(steps) and "S_min =" not in steps
  assert "Time-optimal batch B*: not computed" in steps and "B* = √" not in steps
  assert len(drawn) == 1
  figure = "\n".join(drawn[0])
  assert "critical batch B_crit: not measured (only 2 batch sizes" in figure
  assert not NUMBER.search(figure) and "fit S(B)" not in figure
  # every trial left out of the fit, with its reason: the linear runs that reached the goal are named
  left = steps.split("Left out of the fit (", 1)[1]
  assert left.startswith("7 trials")
  for b in (64, 128, 256, 512, 1024):
    assert f"`linear-b{b}` ({b}, step" in left
  assert (
    "- not of analysis.target_technique = `tuned` (role `linear`), reached the goal: `linear-b64` (64, step" in left
  )
  assert "- reached the goal later than the best run at its batch: `tuned-slow-b1024` (1024, step" in left
  assert "`baseline` (32" in left


def test_three_batches_inside_the_range_are_a_measurement(tmp_path, monkeypatch):
  trials = _digits_like_store(tmp_path, tuned_batches=(128, 256, 512, 1024))
  drawn = _drawn_text(monkeypatch, "Steps to reach")
  text = open(report.write_report(trials, str(tmp_path / "r"), SPEC)).read()
  steps = text.split("## Steps to target\n", 1)[1].split("\n## ", 1)[0]
  b_crit = float(re.search(r"B_crit = ([\d.]+)", steps).group(1))
  assert 350 < b_crit < 450  # S(B) = 400·(1 + 400/B)
  assert "not measured" not in steps
  assert "critical batch B_crit = 4" in "\n".join(drawn[0])


def test_an_edge_b_crit_is_not_measured(tmp_path):
  """Perfect scaling over every batch (steps ∝ 1/B): the fit's B_crit is ∞, beyond the data."""
  con = st.open_store(tmp_path / "study.sqlite")
  for b in (128, 256, 512, 1024):
    _add(con, f"tuned-b{b}", b, _curve(b, 4e5 / b), role="technique", technique="tuned")
  csv_tables.export_csvs(con, "mnist", str(tmp_path / "csv"))
  trials = csv_tables.load_csvs(str(tmp_path / "csv"))
  text = open(report.write_report(trials, str(tmp_path / "r"), SPEC, figures=False)).read()
  assert "B_crit not measured (the fit puts it at or beyond the largest batch" in text
  assert not NUMBER.search(text.split("## Steps to target", 1)[1].split("## Predicted", 1)[0])


def test_reports_published_before_keep_their_numbers(tmp_path):
  """``fit_rule='any'`` (a manifest without the field, manifest.spec_from_json) prints the 2-batch fit as before."""
  trials = _digits_like_store(tmp_path)
  spec = dataclasses.replace(SPEC, fit_rule="any")
  text = open(report.write_report(trials, str(tmp_path / "r"), spec, figures=False)).read()
  assert "over 2 batch sizes (two points for two parameters" in text and "Left out of the fit" not in text
  from lamb_lars.study.publishing import manifest

  old = {k: v for k, v in manifest.spec_to_json(SPEC).items() if k not in ("fit_rule", "analysis_changes")}
  assert manifest.spec_from_json(old).fit_rule == "any"
