"""The cross-setting answer of the critical-batch-axes study (issue 42;
lamb_lars/configs/studies/critical_batch_axes.py): B_crit with its bootstrap interval per setting, CBS(t) brackets at
the pre-registered ε with an ε-sensitivity table, B_simple at the branch points, and one figure: B_crit against dataset
size and against model size.

Input: a root folder holding one published folder per study part (``study report --out=<root>/<part>``):
``<root>/<setting>`` (steps to target: runs.csv, evals.csv) and ``<root>/branch-<setting>`` (branching). A part
that is missing or has no replicated cells yet is reported as not run; nothing is guessed.

* Steps to target per seed: in each tuned cell, the replicates of the chosen configuration (the run their
  ``replicate_of`` names; the chosen trial itself only as a sensitivity, as in every report), each one point: the
  first evaluation whose test accuracy meets the target (``first_step``), or, if none does, a censored point
  S > the steps it ran (its step limit, or where it diverged).
* B_crit: S(B) = S_min·(1 + B_crit/B) fitted with the misses as lower bounds (scaling_fit.fit_points), the interval
  a percentile bootstrap over the seeds of each batch (scaling_fit.bootstrap). A fit that its own misses reject
  (every seed at a batch missed within a budget the fit says suffices: scaling_fit.censored_above) gives no
  measured B_crit (``measured_b_crit``); the table says so, and the largest batch that reached the target.
* The secondary targets (``secondary_section``): B_crit per setting and the two verdicts again at the config's
  pre-registered sensitivity targets (a common 98.0% bar, 97.5% for the MLP; each setting's bar − 0.3 pp).
* CBS(t): branching.trajectory on each branch's final validation loss, at the config's ε (relative) and at each
  ε of ``EPSILON_SENSITIVITY``.
* B_simple: the baseline run's ``noise_scale`` at the first evaluation at or after each branch point.
* The claims (``claims_section``): Golmant et al. 2018 and Zhang et al. 2024 judged agrees / differs /
  inconclusive from bootstrap intervals of the slopes of log B_crit along each axis and of the difference of the
  axes' log spreads (``axis_statistics``, ``verdicts``), under two readings of "data size": as run (the same
  examples at every N) and fixed epochs (the points re-censored at 60 passes over each N, ``fixed_epoch_points``).

Command: ``python -m lamb_lars.study.analysis.axes <root> [--out=<dir>]`` writes ``README.md`` and
``critical_batch_axes.png`` (default: into <root>); ``... <root> --check`` recomputes ``README.md`` from the parts'
CSVs and exits 1 naming each line that differs (a hand-edited number, or a part republished since).

Modules: this one is the report (its tables, ``README.md``, the command line) and keeps every public name; the
per-setting fits are in axes_fits.py, the verdict rule in axes_verdicts.py, CBS(t) and B_simple in axes_cbs.py,
the figure in axes_figure.py.
"""

from __future__ import annotations

import math
import os
import sys
from typing import Mapping, Optional, Sequence

from lamb_lars.configs.studies import critical_batch_axes as cba
from lamb_lars.study.analysis import branching as branching_lib, precision, scaling_fit
from lamb_lars.study.analysis.axes_cbs import b_simple_at, branch_losses, cbs_axis_comparison, cbs_tables
from lamb_lars.study.analysis.axes_figure import _draw_measured, figure, label_levels
from lamb_lars.study.analysis.axes_fits import (
  BAR_MINUS,
  COMMON_BAR,
  Points,
  SettingResult,
  _fmt,
  b_crit,
  first_step,
  measured_b_crit,
  primary_results,
  reach,
  reached_batches,
  secondary_results,
  seed_points,
  sensitivity_targets,
)
from lamb_lars.study.analysis.axes_verdicts import (
  FIXED_EPOCHS,
  GOLMANT,
  LENET_WIDTHS,
  LEVEL,
  MAX_UNBOUNDED,
  MIN_MEASURED,
  ZHANG,
  ClaimVerdict,
  Statistic,
  axis_statistics,
  claims_section,
  fixed_epoch_points,
  recensor,
  resampled_b_crit,
  unmeasured,
  verdicts,
)

# The report's names, wherever they live (the tests reach the figure's ``_draw_measured`` and ``branching_lib``
# through this module too).
__all__ = [
  "BAR_MINUS",
  "COMMON_BAR",
  "FIXED_EPOCHS",
  "GOLMANT",
  "LENET_WIDTHS",
  "LEVEL",
  "MAX_UNBOUNDED",
  "MIN_MEASURED",
  "README",
  "ZHANG",
  "ClaimVerdict",
  "Points",
  "SettingResult",
  "Statistic",
  "_draw_measured",
  "axis_spread",
  "axis_statistics",
  "b_crit",
  "b_simple_at",
  "branch_losses",
  "branching_lib",
  "cbs_axis_comparison",
  "cbs_tables",
  "check",
  "claims_section",
  "figure",
  "first_step",
  "fixed_epoch_points",
  "label_levels",
  "main",
  "markdown",
  "measured_b_crit",
  "parts_table",
  "reach",
  "reached_batches",
  "recensor",
  "report",
  "resampled_b_crit",
  "secondary_results",
  "secondary_section",
  "seed_points",
  "sensitivity_targets",
  "steps_table",
  "unmeasured",
  "verdicts",
]

README = "README.md"  # the cross-setting report, at the root of the parts (a composite folder: publishing/composite.py)


def _reach_text(points: Points) -> str:
  every, some = reach(points)
  return f"{_fmt_batch(every)} / {_fmt_batch(some)}"


def _fmt_chosen(b: Optional[tuple[float, bool]], iv: Optional[scaling_fit.Interval] = None) -> str:
  """A sensitivity fit's B_crit, in parentheses and marked when that fit is rejected too; with its 95% bootstrap
  interval where one was computed."""
  if b is None:
    return "—"
  if not b[1]:
    return f"({_fmt(b[0])}) not measured"
  return f"{_fmt(b[0])} {iv.text()}" if iv else _fmt(b[0])


def _fmt_batch(b: Optional[int]) -> str:
  return "none" if b is None else f"{b:,}"


def steps_table(results: Sequence[SettingResult]) -> str:
  """One row per setting. ``B_crit`` is the fit to every replicate seed (the last column adds each batch's chosen
  trial, a sensitivity: the search selected it, so it is not a fresh seed); where the fit is rejected (``fit
  rejected at``: every seed missed at budgets the fit says suffice) it is shown in parentheses and is not a
  measurement. ``reached (every / any seed)``: the largest batch where every seed, and where any seed, reached the
  target."""
  lines = [
    "| setting | axes | params | N | target | B_crit | 95% bootstrap | ∞ share | S_min | fit rejected at | "
    "reached (every / any seed) | seeds/batch | censored | B_crit with the chosen trials [95% bootstrap] | "
    "B_crit on the reached batches |",
    "|---|---|---:|---:|---:|---:|---|---:|---:|---|---|---|---:|---:|---:|",
  ]
  for r in results:
    s = cba.SETTINGS[r.name]
    seeds = ", ".join(f"{b}: {len(v)}" for b, v in sorted(r.points.items())) or "—"
    cens = sum(c for v in r.points.values() for _, c in v)
    params = cba.num_params(s["model"], s["width"])
    head = f"| {r.name} | {'+'.join(s['axes'])} | {params:,} | {s['n']:,} | {r.target:.1%}"
    reached = _reach_text(r.points) if r.points else "—"
    if r.fit is None:
      lines.append(
        f"{head} | {r.note} | | | | | {reached} | {seeds} | {cens} | "
        f"{_fmt_chosen(r.with_chosen, r.with_chosen_interval)} | {_fmt_chosen(r.restricted)} |"
      )
      continue
    iv = r.interval if r.measured else None  # a rejected fit's interval would be an interval of nothing measured
    ci = iv.text() if iv else "—"
    inf = f"{iv.infinite:.0%}" if iv else "—"
    est = _fmt(r.fit.b_crit) if r.measured else f"({_fmt(r.fit.b_crit)}) not measured"
    rej = ", ".join(f"{b:,}" for b in r.rejected) or "—"
    lines.append(
      f"{head} | {est} | {ci} | {inf} | {_fmt(r.fit.s_min)} | {rej} | {reached} | {seeds} | {cens} | "
      f"{_fmt_chosen(r.with_chosen, r.with_chosen_interval)} | {_fmt_chosen(r.restricted)} |"
    )
  return "\n".join(lines)


def axis_spread(results: Sequence[SettingResult], axis: str) -> str:
  """How far B_crit moves along an axis: max/min of the point estimates and whether any two intervals are disjoint."""
  rs = [
    r
    for r in results
    if axis in cba.SETTINGS[r.name]["axes"] and r.measured and r.interval and 0 < r.fit.b_crit < math.inf
  ]
  left = [
    r.name for r in results if axis in cba.SETTINGS[r.name]["axes"] and r.points and r.name not in {x.name for x in rs}
  ]
  out_note = f" (without a measured, finite B_crit, left out: {', '.join(left)})" if left else ""
  if len(rs) < 2:
    return f"{axis} axis: fewer than two settings with a measured, finite B_crit; no comparison{out_note}."
  est = [r.fit.b_crit for r in rs]
  disjoint = [
    (a.name, b.name)
    for i, a in enumerate(rs)
    for b in rs[i + 1 :]
    if a.interval.hi < b.interval.lo or b.interval.hi < a.interval.lo
  ]
  verdict = (
    f"intervals disjoint for {', '.join(f'{a} vs {b}' for a, b in disjoint)}"
    if disjoint
    else "every pair of intervals overlaps (no change shown)"
  )
  span = precision.significant(max(est) / min(est))
  return f"{axis} axis: B_crit spans {span}× over {len(rs)} settings; {verdict}{out_note}."


def secondary_section(
  root: str,
  num_bootstrap: int = precision.NUM_RESAMPLES,
  computed: Optional[Mapping[str, Mapping[str, Optional[SettingResult]]]] = None,
) -> str:
  """B_crit per setting at each secondary target (:func:`secondary_results`, or ``computed``), and the two claims'
  verdicts at each target (as run; a setting without a measured B_crit left out, as in the first row above). A
  verdict that changes with the target is not robust to it."""
  computed = computed if computed is not None else secondary_results(root, num_bootstrap)
  pts: dict[str, dict[str, Points]] = {reading: {} for reading in computed}
  rows = []
  for name in cba.SETTINGS:
    cells = []
    for reading, goal in sensitivity_targets(name).items():
      r = computed[reading][name]
      pts[reading][name] = r.points if r is not None else {}
      if r is None:
        cells.append(f"{goal:.1%}: not run")
      elif r.fit is None:
        cells.append(f"{goal:.1%}: {r.note}")
      elif not r.measured:
        rej = ", ".join(f"{b:,}" for b in r.rejected)
        cells.append(f"{goal:.1%}: ({_fmt(r.fit.b_crit)}) not measured, the fit rejected at {rej}")
      else:
        cells.append(f"{goal:.1%}: {_fmt(r.fit.b_crit)} {r.interval.text()}")
    rows.append(f"| {name} | {cba.SETTINGS[name]['target']:.1%} | {cells[0]} | {cells[1]} |")
  lines = [
    "### Sensitivity: the pre-registered secondary targets",
    "",
    "B_crit and its 95% bootstrap interval over the same replicate seeds at each secondary target of the config "
    "(lamb_lars/configs/studies/critical_batch_axes.py, `secondary_targets`): the first evaluation at or above "
    "it. The LR of each batch was chosen for the primary target. The targets were pre-registered with the config "
    "(before any trial); this section, which reads them with the first row's rule (as run, a setting without a "
    "measured B_crit left out), was added on 2026-12-02, when 12 of the 16 parts were in.",
    "",
    f"| setting | primary target | {COMMON_BAR} | {BAR_MINUS} |",
    "|---|---:|---|---|",
    *rows,
    "",
    "| target | Golmant et al. | Zhang et al. | without a measured B_crit (left out) |",
    "|---|---|---|---|",
  ]
  for reading, by_setting in pts.items():
    left = unmeasured(by_setting)
    stats, _ = axis_statistics(by_setting, num_bootstrap, 0, exclude=sorted(left))
    vs = verdicts(stats)
    lines.append(f"| {reading} | {vs[0].verdict} | {vs[1].verdict} | {', '.join(sorted(left)) or '—'} |")
  return "\n".join(lines)


def parts_table(root: str) -> str:
  """The parts (one published folder each, linked) and whether each is in: the settings in the config's order."""
  lines = ["| setting | steps to target | branching |", "|---|---|---|"]
  for name in cba.SETTINGS:
    cells = []
    for part in (name, f"branch-{name}"):
      here = os.path.exists(os.path.join(root, part, "runs.csv"))
      cells.append(f"[{part}]({part}/README.md)" if here else "not run")
    lines.append(f"| {name} | {cells[0]} | {cells[1]} |")
  return "\n".join(lines)


def markdown(
  root: str,
  results: Sequence[SettingResult],
  num_bootstrap: int = precision.NUM_RESAMPLES,
  secondary: Optional[Mapping[str, Mapping[str, Optional[SettingResult]]]] = None,
) -> str:
  """The text of ``README.md``, computed from the parts' CSVs alone (fixed bootstrap seeds: reproducible);
  ``secondary``: :func:`secondary_results`, when the caller has it."""
  return "\n".join(
    [
      "# Critical batch: data axis against model axis",
      "",
      parts_table(root),
      "",
      f"Targets and ε pre-registered in lamb_lars/configs/studies/critical_batch_axes.py; step limit "
      f"{cba.LIMIT_EXAMPLES:,} examples (a miss is a censored point).",
      "",
      precision.rule_text(num_bootstrap),
      "",
      steps_table(results),
      "",
      "- " + axis_spread(results, "data"),
      "- " + axis_spread(results, "model"),
      "",
      claims_section({r.name: r.points for r in results}, num=num_bootstrap),
      "",
      secondary_section(root, num_bootstrap, secondary),
      "",
      cbs_tables(root),
      "",
      cbs_axis_comparison(root),
      "",
      "![B_crit against data and model size](critical_batch_axes.png)",
      "",
    ]
  )


def report(root: str, out: Optional[str] = None, num_bootstrap: int = precision.NUM_RESAMPLES) -> str:
  """Writes ``README.md`` and ``critical_batch_axes.png`` into ``out`` (default ``root``); returns the markdown."""
  out = out or root
  os.makedirs(out, exist_ok=True)
  results = primary_results(root, num_bootstrap)
  secondary = secondary_results(root, num_bootstrap)
  figure(results, os.path.join(out, "critical_batch_axes.png"), secondary[COMMON_BAR])
  text = markdown(root, results, num_bootstrap, secondary)
  with open(os.path.join(out, README), "w") as f:
    f.write(text)
  return text


def check(root: str, num_bootstrap: int = precision.NUM_RESAMPLES) -> list[str]:
  """The lines of ``<root>/README.md`` that differ from a recomputation from the parts' CSVs (empty: it holds), so a
  hand-edited number or a part republished after the cross-setting report fails (issue 41's claims that cannot go
  stale, for this report)."""
  path = os.path.join(root, README)
  if not os.path.exists(path):
    return [f"{path} does not exist"]
  with open(path) as f:
    have = f.read().splitlines()
  want = markdown(root, primary_results(root, num_bootstrap), num_bootstrap).splitlines()
  diff = [f"line {k + 1}: {a!r} ≠ recomputed {b!r}" for k, (a, b) in enumerate(zip(have, want)) if a != b]
  if len(have) != len(want):
    diff.append(f"{len(have)} lines, recomputed {len(want)}")
  return diff


def main(argv: Sequence[str]) -> int:
  """``<root> [--out=<dir>]`` writes the report; ``<root> --check`` exits 1 when ``<root>/README.md`` is not what the
  parts' CSVs give."""
  args = [a for a in argv if not a.startswith("--out=") and a != "--check"]
  outs = [a[len("--out=") :] for a in argv if a.startswith("--out=")]
  if len(args) != 1 or not os.path.isdir(args[0]) or ("--check" in argv and outs):
    print(
      "error: give one existing folder holding the published parts (<root>/<setting>, <root>/branch-<setting>), "
      "e.g. python -m lamb_lars.study.analysis.axes docs/studies/critical_batch_axes [--out=DIR | --check].",
      file=sys.stderr,
    )
    return 2
  if "--check" in argv:
    diff = check(args[0])
    for d in diff:
      print(f"{args[0]}/README.md: {d}", file=sys.stderr)
    print(f"{args[0]}/README.md: " + ("verified" if not diff else f"{len(diff)} mismatches"))
    return 1 if diff else 0
  print(report(args[0], outs[0] if outs else None))
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
