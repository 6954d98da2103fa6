"""The small-batch end of the to-target ladder (issue 59, the referee's point 3): B_crit with and without batches 64
and 128 (the rule is pre-registered in lamb_lars/configs/studies/mnist_batch_ladder.py, ``:to_target_small``; read
it first).

A re-analysis of two published folders, no new trial: docs/studies/mnist_batch_ladder_to_target (256 … 8192) and
docs/studies/mnist_batch_ladder_to_target_small (64, 128; the same recipe and search, trials stopping on the
validation accuracy). Per target, the steps to target of each replicate seed (axes_fits.seed_points: the first
evaluation whose ``metric`` meets the target; a seed that never does is a lower bound at the steps it ran), the
censored fit of S(B) = S_min·(1 + B_crit/B) (McCandlish et al. 2018 eq. 2.11; scaling_fit.fit_points) and a
percentile bootstrap over the seeds of each batch (``SMALL_BOOTSTRAP`` resamples, seed 0), once on 256 … 8192
("without") and once on 64 … 8192 ("with").

A fit measures B_crit when its own misses do not reject it (scaling_fit.censored_above) and B_crit lies strictly
inside the batches that reached the target (critical_batch.why_not_measured: the fit rule 'measured'). Verdict per
target: ``differs`` when the two 95% intervals do not overlap, ``agrees`` when each fit's B_crit lies inside the
other's interval, ``inconclusive`` otherwise or when either fit measures no B_crit.

The pre-registered reading is on the validation accuracy; the test accuracy is printed as a sensitivity. The
to-target folder's trials stopped on the test accuracy (99.0%), so a validation target not met when a trial stopped
is a lower bound at that step: those points are counted in the table ("stopped before").

Layout: a composite folder (publishing/composite.py) whose parts are the two folders, named relative to the root;
``report(root)`` writes README.md, ``check(root)`` lists its lines that differ from a recomputation.

Command: ``bash scripts/small_batch_end.sh``, which runs ``python -m lamb_lars.study.publishing.composite
docs/studies/mnist_batch_ladder_small_batch_end --report=lamb_lars.study.analysis.small_batch_end --parts=PARTS``,
PARTS being ``SOURCES`` joined by commas.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Optional, Sequence

from lamb_lars.configs.studies import mnist_batch_ladder as cfg
from lamb_lars.study.analysis import readme_lines
from lamb_lars.study.analysis import critical_batch, scaling_fit
from lamb_lars.study.analysis.precision import significant
from lamb_lars.study.analysis.axes_fits import Points, _read, seed_points

README = "README.md"
LADDER = "mnist_batch_ladder_to_target"
SMALL = "mnist_batch_ladder_to_target_small"
SOURCES = (f"../{LADDER}", f"../{SMALL}")
METRICS = (cfg.SMALL_TARGET_METRIC, "test_accuracy")  # the pre-registered reading first, then the sensitivity


@dataclasses.dataclass(frozen=True)
class Fit:
  """One S(B) fit: B_crit (None: no fit), why it is no measurement ('' = it is one), the bootstrap interval."""

  b_crit: Optional[float]
  why_not: str
  interval: Optional[scaling_fit.Interval]
  points: int
  censored: int
  literal_why: str = ""  # why not, under the pre-registration's wording of the rule (why_not_measured alone)

  @property
  def measured(self) -> bool:
    return self.b_crit is not None and not self.why_not


def fit(points: Points, num_bootstrap: int, seed: int = 0) -> Fit:
  """The censored fit of ``points`` under the fit rule 'measured', with its bootstrap interval over seeds.

  This report's rule also rejects a fit that its own misses contradict (scaling_fit.censored_above, as the axes and
  calibration studies do); the pre-registration names only critical_batch.why_not_measured, so ``literal_why``
  keeps that reading (printed as a sensitivity, ``literal``)."""
  n, nc = sum(len(v) for v in points.values()), sum(c for v in points.values() for _, c in v)
  try:
    f = scaling_fit.fit_points(points)
  except ValueError as e:
    return Fit(None, str(e), None, n, nc, str(e))
  rejected = scaling_fit.censored_above(f, points)
  edge = critical_batch.why_not_measured(f.b_crit, list(scaling_fit.reached_only(points))) or ""
  why = f"the fit's own misses reject it at {', '.join(str(b) for b in rejected)}" if rejected else edge
  return Fit(f.b_crit, why, scaling_fit.bootstrap(points, num=num_bootstrap, seed=seed), n, nc, edge)


def literal(f: Fit) -> Fit:
  """``f`` judged by the rule as the pre-registration words it (why_not_measured alone, no rejection by misses)."""
  return dataclasses.replace(f, why_not=f.literal_why)


def verdict(a: Fit, b: Fit) -> str:
  """The pre-registered comparison of two fits (module docstring)."""
  if not (a.measured and b.measured) or a.interval is None or b.interval is None:
    return "inconclusive"
  ia, ib = a.interval, b.interval
  if ia.hi < ib.lo or ib.hi < ia.lo:
    return "differs"
  inside = lambda x, i: i.lo <= x <= i.hi  # noqa: E731
  return "agrees" if inside(a.b_crit, ib) and inside(b.b_crit, ia) else "inconclusive"


def _stopped_before(folder: str, points: Points) -> int:
  """The censored points of ``folder``'s seeds whose run stopped at its own target (not at the step limit)."""
  runs = _read(os.path.join(folder, "runs.csv"))
  stopped = {(int(r["batch_size"]), float(r["steps"])) for r in runs if r.get("stopped") == "target"}
  return sum(1 for b, v in points.items() for s, c in v if c and (b, s) in stopped)


@dataclasses.dataclass(frozen=True)
class Row:
  metric: str
  goal: float
  without: Fit
  with_small: Fit
  small_points: Points
  stopped_before: int

  @property
  def verdict(self) -> str:
    return verdict(self.without, self.with_small)

  @property
  def literal_verdict(self) -> str:
    return verdict(literal(self.without), literal(self.with_small))


def rows(studies: str, num_bootstrap: int = cfg.SMALL_BOOTSTRAP) -> list[Row]:
  """One row per (metric, target): the fits without and with the small batches. ``studies``: the folder holding
  both sources."""
  ladder, small = os.path.join(studies, LADDER), os.path.join(studies, SMALL)
  out = []
  for metric in METRICS:
    for goal in sorted(set(cfg.TO_TARGET_TARGETS) | {cfg.TO_TARGET_GOAL}):
      base = seed_points(ladder, goal, metric=metric)
      extra = seed_points(small, goal, metric=metric)
      both = {**base, **extra}
      out.append(
        Row(
          metric,
          goal,
          fit(base, num_bootstrap),
          fit(both, num_bootstrap),
          extra,
          _stopped_before(ladder, base),
        )
      )
  return out


def _fit_text(f: Fit) -> str:
  if f.b_crit is None:
    return f"no fit ({f.why_not})"
  if f.why_not:
    return f"not measured ({f.why_not}; fitted {significant(f.b_crit)})"
  return significant(f.b_crit)


def _interval_text(f: Fit) -> str:
  i = f.interval
  if i is None or not f.measured:
    return "—"
  return f"[{significant(i.lo)}, {significant(i.hi)}] ({i.num} fits, {i.failed} failed)"


def _small_text(points: Points) -> str:
  return "; ".join(
    f"{b}: " + ", ".join(("> " if c else "") + f"{s:g}" for s, c in sorted(v)) for b, v in sorted(points.items())
  )


def table(rs: Sequence[Row]) -> list[str]:
  head = [
    "metric",
    "target",
    "B_crit without 64, 128",
    "95% interval",
    "B_crit with 64, 128",
    "95% interval",
    "verdict",
    "steps per seed at 64; 128 (>: censored)",
    "censored without (stopped before)",
  ]
  lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
  for r in rs:
    cells = [
      f"`{r.metric}`",
      f"{100 * r.goal:.1f}%",
      _fit_text(r.without),
      _interval_text(r.without),
      _fit_text(r.with_small),
      _interval_text(r.with_small),
      f"**{r.verdict}**",
      _small_text(r.small_points) or "—",
      f"{r.without.censored} of {r.without.points} ({r.stopped_before})",
    ]
    lines.append("| " + " | ".join(cells) + " |")
  return lines + [""]


def literal_table(rs: Sequence[Row]) -> list[str]:
  """The rows whose fits the two wordings of the rule judge differently, under the pre-registration's wording."""
  changed = [
    r for r in rs if (r.without.why_not, r.with_small.why_not) != (r.without.literal_why, r.with_small.literal_why)
  ]
  if not changed:
    return ["No fit is rejected by its own misses: both wordings of the rule give the table above.", ""]
  head = [
    "metric",
    "target",
    "B_crit without 64, 128",
    "95% interval",
    "B_crit with 64, 128",
    "95% interval",
    "verdict",
  ]
  lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
  for r in changed:
    a, b = literal(r.without), literal(r.with_small)
    cells = [
      f"`{r.metric}`",
      f"{100 * r.goal:.1f}%",
      _fit_text(a),
      _interval_text(a),
      _fit_text(b),
      _interval_text(b),
      f"**{r.literal_verdict}**",
    ]
    lines.append("| " + " | ".join(cells) + " |")
  return lines + [""]


def summary(rs: Sequence[Row], metric: str, wording: str = "report") -> str:
  """The pre-registered statement over ``metric``'s targets: a verdict holds only where every target that both
  fits measure gives it. ``wording``: 'report' (this report's rule) or 'literal' (the pre-registration's words)."""
  pick = (lambda f: f) if wording == "report" else literal
  judged = [r for r in rs if r.metric == metric and pick(r.without).measured and pick(r.with_small).measured]
  verdicts = sorted({r.verdict if wording == "report" else r.literal_verdict for r in judged})
  if not judged:
    return f"On `{metric}` no target gives a measured B_crit both with and without 64 and 128: inconclusive."
  word = verdicts[0] if len(verdicts) == 1 else "inconclusive (the targets disagree: " + ", ".join(verdicts) + ")"
  targets = ", ".join(f"{100 * r.goal:.1f}%" for r in judged)
  return (
    f"On `{metric}`, at the {len(judged)} target(s) where both fits measure B_crit ({targets}), B_crit with 64 and "
    f"128 against B_crit without them: **{word}**."
  )


def markdown(studies: str, num_bootstrap: int = cfg.SMALL_BOOTSTRAP) -> str:
  rs = rows(studies, num_bootstrap)
  lines = [
    "# MNIST / LeNet-5: B_crit with and without the small-batch end (64, 128)",
    "",
    "A re-analysis of two published folders (no new trial; the rule is pre-registered in "
    "`lamb_lars/configs/studies/mnist_batch_ladder.py`, `:to_target_small`, and computed by "
    "`lamb_lars/study/analysis/small_batch_end.py`): the steps to target of every replicate seed of tuned momentum at "
    "256 … 8192 (to-target ladder) and at 64 and 128 (the small-batch part), each fitted to S(B) = S_min·(1 + "
    "B_crit/B) (McCandlish et al. 2018 eq. 2.11) with the misses as lower bounds, without and with 64 and 128. "
    f"Intervals: percentile bootstrap over the seeds of each batch, {num_bootstrap} resamples (seed 0), quoted to 2 "
    "significant figures. Fit rule 'measured': a fit rejected by its own misses, or whose B_crit is not inside the "
    "batches that reached the target, measures no B_crit.",
    "",
    "Verdict per target: **differs** when the two 95% intervals do not overlap, **agrees** when each B_crit lies "
    "inside the other's interval, **inconclusive** otherwise or when either fit measures no B_crit. The "
    f"pre-registered reading is on `{cfg.SMALL_TARGET_METRIC}`; `test_accuracy` is a sensitivity. The to-target "
    "ladder's trials stopped at 99.0% test accuracy, so a validation target a seed had not met by then is a lower "
    "bound at that step (counted as 'stopped before').",
    "",
    *table(rs),
    summary(rs, METRICS[0]),
    "",
    "Sensitivity: " + summary(rs, METRICS[1]),
    "",
    "Sensitivity to the wording of the fit rule. The pre-registration names only `critical_batch.why_not_measured` "
    "(B_crit inside the batches that reached the target); this report also rejects a fit that its own misses "
    "contradict (`scaling_fit.censored_above`), as the axes and calibration studies do. Under the pre-registration's "
    "wording, the rows it changes:",
    "",
    *literal_table(rs),
    summary(rs, METRICS[0], "literal"),
    "",
    "Sensitivity: " + summary(rs, METRICS[1], "literal"),
    "",
    "Sources:",
    "",
    *[f"- [{s[3:]}]({s}/README.md)" for s in SOURCES],
    "",
  ]
  return "\n".join(lines)


def report(root: str, num_bootstrap: int = cfg.SMALL_BOOTSTRAP) -> str:
  """Writes ``<root>/README.md`` (the sources: ``<root>/..``); returns its text."""
  return readme_lines.write(root, markdown(os.path.join(root, ".."), num_bootstrap))


def check(root: str, num_bootstrap: int = cfg.SMALL_BOOTSTRAP) -> list[str]:
  """The README's lines that differ from a recomputation from the sources' CSVs ([] = the same)."""
  return readme_lines.differences(root, markdown(os.path.join(root, ".."), num_bootstrap))
