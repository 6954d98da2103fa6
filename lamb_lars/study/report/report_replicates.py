"""The report's sections on how far a study's numbers can be trusted (report layer: reads records only):

* **Search adequacy**, per searched cell: trials, full-budget trials (promoted ones counted), the chosen trial
  (on the validation split, selection.py), whether its LR is interior or at an edge, and the LR ranges searched
  (search_adequacy.py; extensions made by the runner, phases.py).
* **Replicates**, per cell with replicates: the chosen configuration's test accuracy over its fresh seeds as
  mean ± sd and a 95% t interval, each seed's value; for Table 3 cells, the comparison with the paper is the
  study reference's section (``table3_replicates_section``: lamb_lars/proj/you2020/table3.py; reference.py).
* **Steps to target per seed and B_crit**: at each target, steps to target of every replicate seed per batch (a
  miss censored at its budget), the censored S(B) fit with a bootstrap interval over seeds and the
  leave-one-batch-out values beside B_crit (scaling_fit.py); the headline target is the highest one every
  baseline seed reaches within half its budget (replicates.headline_target).
"""

from __future__ import annotations

import collections
from typing import Optional, Sequence

from lamb_lars.study.analysis import critical_batch, precision, replicates, scaling_fit, search_adequacy
from lamb_lars.study.analysis.precision import significant as sig
from lamb_lars.study.records import Target, Trial
from lamb_lars.study.analysis.selection import chosen_of_cell, finished_full
from lamb_lars.study.report import reference
from lamb_lars.study.report.markdown import fmt, pct, table

ACC = "eval_accuracy"


def _cells(trials: Sequence[Trial]) -> dict[str, list[Trial]]:
  out: dict[str, list[Trial]] = collections.OrderedDict()
  for t in sorted(trials, key=lambda t: (t.batch_size, t.cell, t.run_id)):
    out.setdefault(t.cell or t.run_id, []).append(t)
  return out


def adequacy_section(trials: Sequence[Trial], edge_fraction: float) -> list[str]:
  searched = {c: g for c, g in _cells(trials).items() if any(t.space for t in g if t.phase != "replicate")}
  if not searched:
    return []
  # A study with LR refinement (phases.py, search.refine_factor) also shows how close the chosen LR's nearest
  # tried neighbours are; studies without it keep their published table.
  refined = any(t.phase.startswith("refine") for g in searched.values() for t in g)
  rows = []
  for c, group in searched.items():
    a = search_adequacy.adequacy(c, group, chosen_of_cell(group), edge_fraction)
    ranges = ", ".join(f"[{lo:.3g}, {hi:.3g}]" for lo, hi in a.ranges) or "—"
    row = [
      c,
      a.num_trials,
      a.num_full_budget,
      sum(t.promoted for t in group),
      f"`{a.chosen}`" if a.chosen else "—",
      fmt(a.chosen_lr),
      a.where,
      ranges,
    ]
    if refined:
      own = [t for t in group if t.phase != "replicate"]
      below, above = (
        (None, None) if a.chosen_lr is None else search_adequacy.neighbours(a.chosen_lr, search_adequacy.tried_lrs(own))
      )
      row.append(" / ".join("—" if r is None else f"×{r:.2f}" for r in (below, above)))
    rows.append(row)
  note = (
    " Nearest tried LR: how far the nearest LR tried below and above the chosen one lies (a ratio; the "
    "runner's refinement tries η/r and η·r until both are within ×r)."
    if refined
    else ""
  )
  return [
    "## Search adequacy",
    "",
    "Per searched cell: trials (extensions included, replicates not), trials that ran the full budget or "
    "stopped at the target (promoted: pruned trials resumed to the full budget), the trial chosen on the "
    f"validation split, and whether its LR is interior (inside the inner {100 * (1 - 2 * edge_fraction):.0f}% "
    "of the log range searched, with worse trials on both sides) or at an edge." + note,
    "",
  ] + table(
    ["cell", "trials", "full budget", "promoted", "chosen (validation)", "LR", "best point", "LR ranges searched"]
    + (["nearest tried LR below / above"] if refined else []),
    rows,
  )


def replicates_section(trials: Sequence[Trial]) -> list[str]:
  reps = [t for t in trials if t.phase == "replicate"]
  if not reps:
    return [
      "## Replicates",
      "",
      "No replicates in this study: every number above is a single run (one seed) "
      "and carries no interval; run the study again with `--config.replicates.num_seeds=3`.",
      "",
    ]
  by_id = {t.run_id: t for t in trials}
  rows, any_fixed = [], False
  for chosen_id in sorted({t.replicate_of for t in reps}, key=lambda r: (by_id[r].batch_size if r in by_id else 0, r)):
    chosen = by_id.get(chosen_id)
    # its cell's trials; without a cell name nothing says the chosen trial was alone, so it is not pooled
    cell_trials = (
      [t for t in trials if t.cell == chosen.cell]
      if chosen is not None and chosen.cell
      else replicates.replicates_of(reps, chosen_id)
    )
    group = replicates.seeds_of(cell_trials, chosen_id)
    pooled = any(t.run_id == chosen_id and t.phase != "replicate" for t in group)
    any_fixed |= pooled
    s = replicates.accuracy_summary(group, ACC)
    seeds = ", ".join(f"{t.seed}: {pct(t.last(ACC))}" + ("" if t.status == "done" else f" ({t.status})") for t in group)
    own = (pct(chosen.last(ACC)) + (" (fixed settings: a seed)" if pooled else "")) if chosen else "—"
    rows.append([chosen.cell if chosen else "—", f"`{chosen_id}`", own, s.text(), seeds])
  fixed_note = (
    " In a cell with fixed settings (one trial, nothing searched) nothing was selected, so the chosen "
    "trial is one seed more and is counted among them."
    if any_fixed
    else ""
  )
  return [
    "## Replicates",
    "",
    "Each cell's chosen configuration re-run with fresh seeds (initialisation, data order, dropout). Test "
    "accuracy (%) over those seeds: mean ± sd [95% t interval] (n); the chosen trial itself is not among "
    "them (it was selected, so its own test accuracy is biased upward)." + fixed_note,
    "",
  ] + table(["cell", "chosen", "chosen's own test acc", "replicates: mean ± sd [95% CI]", "per seed"], rows)


def scaling_section(
  trials: Sequence[Trial],
  target: Optional[Target],
  targets: Sequence[float],
  target_technique: str,
  bootstrap_num: int = precision.NUM_RESAMPLES,
  fit_rule: str = "any",
) -> list[str]:
  """Steps to target per seed and the censored S(B) fits; ``fit_rule`` 'measured' (issue 62): a fit that does not
  measure B_crit (critical_batch.why_not_measured) shows "not measured (why)" and no number derived from it."""
  if target is None:
    return []
  goals = sorted(set(targets) | {target.goal})
  base = [t for t in trials if t.role == "baseline"]
  headline = replicates.headline_target(base, goals, target.metric, target.mode)
  reps = [t for t in trials if t.phase == "replicate" and (not target_technique or t.technique == target_technique)]
  lines = ["## Steps to target per seed and B_crit", ""]
  if not reps:
    return lines + ["No replicate seeds of the steps-to-target cells: no per-seed S(B), no censored fit.", ""]
  lines += [
    f"Targets {', '.join(f'{100 * g:.2f}%' for g in goals)} on `{target.metric}`. Headline target (the "
    "highest that every baseline seed reaches within half its budget): "
    + (f"{100 * headline:.2f}%." if headline is not None else "none of them."),
    "",
    "S(B) = S_min·(1 + B_crit/B) (McCandlish et al. 2018 eq. 2.11) fitted to every seed in log steps; a "
    "seed that missed the target is a lower bound at its budget (censored). Beside B_crit: a bootstrap "
    "interval over seeds (each batch's seeds resampled with replacement) and "
    f"B_crit refitted without each batch. {_resample_note(reps, target, goals[0])}; resamples left with reached "
    "points at fewer "
    "than two batch sizes cannot be fitted and are counted, and the interval is conditional on the rest. "
    + precision.rule_text(bootstrap_num),
    "",
  ]
  rows = [_scaling_row(reps, target, goal, goal == headline, bootstrap_num, fit_rule) for goal in goals]
  lines += table(
    ["target", "B_crit", "95% bootstrap", "S_min", "leave one batch out", "steps per seed (>: censored)"], rows
  )
  return (
    lines
    + _rejected_note(reps, target, goals, headline, fit_rule)
    + sensitivity_section(trials, target, goals, headline, target_technique, bootstrap_num, fit_rule)
  )


def _rejected_note(
  reps: Sequence[Trial], target: Target, goals: Sequence[float], headline, fit_rule: str = "any"
) -> list[str]:
  """The targets whose fit lies below batches where every seed missed (scaling_fit.censored_above), if any (a fit
  that does not measure B_crit under ``fit_rule`` predicts nothing here)."""
  found = []
  for goal in goals:
    pts = _points(reps, target.metric, goal, target.mode)
    try:
      f = scaling_fit.fit_points(pts)
    except ValueError:
      continue
    if _why_not(f, pts, fit_rule):
      continue
    above = scaling_fit.censored_above(f, pts)
    if above:
      name = f"{100 * goal:.2f}%" + (" (headline)" if goal == headline else "")
      fits = ", ".join(fmt(scaling_fit.predicted_steps(f, b)) for b in above)
      found.append(f"{name} at {', '.join(str(b) for b in above)} (fit {fits} steps)")
  if not found:
    return []
  return [
    "",
    "Censored above the fit: every seed missed the target within a budget larger than the steps the fit predicts, "
    f"so S(B) = S_min·(1 + B_crit/B) does not describe these batches and B_crit there is not a measurement: "
    f"{'; '.join(found)}.",
  ]


def distinct_resamples(k: int) -> int:
  """The distinct bootstrap resamples of k seeds (k draws with replacement, order ignored): C(2k − 1, k)."""
  return precision.distinct_resamples([k]) if k > 0 else 0


def _resample_note(reps: Sequence[Trial], target: Target, goal: float) -> str:
  """How rough the per-seed bootstrap is: a batch's k points, resampled k at a time with replacement, give
  C(2k − 1, k) distinct multisets; with few (k ≤ 5: at most 126) the percentile interval is coarse."""
  ks = sorted({len(v) for v in _points(reps, target.metric, goal, target.mode).values()}) or [0]
  k_txt = f"{ks[0]}" if ks[0] == ks[-1] else f"{ks[0]}–{ks[-1]}"
  if ks[-1] > 5:
    return f"Each batch has k = {k_txt} points to resample"
  n = [distinct_resamples(k) for k in (ks[0], ks[-1])]
  n_txt = f"{n[0]}" if n[0] == n[1] else f"{n[0]}–{n[1]}"
  return (
    f"With k = {k_txt} seeds a batch has only {n_txt} distinct resamples, so the percentile interval is rough and "
    "tends to be too narrow"
  )


def _why_not(f: scaling_fit.CensoredFit, pts: dict, fit_rule: str) -> Optional[str]:
  """Why the censored fit ``f`` of ``pts`` does not measure B_crit under ``fit_rule`` (None: it does, or 'any')."""
  if fit_rule != "measured":
    return None
  return critical_batch.why_not_measured(f.b_crit, list(scaling_fit.reached_only(pts)))


def _scaling_row(
  reps: Sequence[Trial], target: Target, goal: float, headline: bool, bootstrap_num: int, fit_rule: str = "any"
) -> list:
  """One target's row: the censored S(B) fit over every seed, its bootstrap interval, the leave-one-batch-out
  values and the steps of each seed (the fit's error in place of its numbers when it cannot be fitted)."""
  pts = _points(reps, target.metric, goal, target.mode)
  seeds = "; ".join(f"{b}: " + ", ".join(f"{'>' if c else ''}{y:g}" for y, c in v) for b, v in sorted(pts.items()))
  name = f"{100 * goal:.2f}%" + (" (headline)" if headline else "")
  try:
    f = scaling_fit.fit_points(pts)
  except ValueError as e:
    return [name, "—", "—", "—", str(e), seeds]
  why = _why_not(f, pts, fit_rule)
  if why:
    return [name, f"not measured ({why})", "—", "—", "—", seeds]
  ci = scaling_fit.bootstrap(pts, num=bootstrap_num)
  lobo = scaling_fit.leave_one_batch_out(pts)
  ci_txt = (
    "—"
    if ci is None
    else (
      ci.text()
      + (f", ∞ in {100 * ci.infinite:.0f}%" if ci.infinite else "")
      + (f"; {ci.failed} of {ci.num + ci.failed} resamples had no fit (left out)" if ci.failed else "")
    )
  )
  reached = list(scaling_fit.reached_only(pts))
  lobo_txt = lambda drop, v: (
    "not measured"
    if fit_rule == "measured"
    and v is not None
    and critical_batch.why_not_measured(v, [b for b in reached if b != drop])
    else sig(v)
  )
  return [
    name,
    sig(f.b_crit),
    ci_txt,
    sig(f.s_min),
    ", ".join(f"−{b}: {lobo_txt(b, v)}" for b, v in lobo.items()),
    seeds,
  ]


def _interval_text(ci: Optional[scaling_fit.Interval]) -> str:
  if ci is None:
    return "—"
  return (
    ci.text()
    + (f", ∞ in {100 * ci.infinite:.0f}%" if ci.infinite else "")
    + (f"; {ci.failed} of {ci.num + ci.failed} without a fit" if ci.failed else "")
  )


def _points(trials: Sequence[Trial], metric: str, goal: float, mode: str) -> dict[int, list[tuple[float, bool]]]:
  pts: dict[int, list[tuple[float, bool]]] = {}
  for s in replicates.steps_per_seed(trials, metric, goal, mode):
    pts.setdefault(s.batch_size, []).append((s.steps, s.censored))
  return pts


def _candidates(
  trials: Sequence[Trial], reps: Sequence[Trial], metric: str, goal: float, mode: str
) -> dict[tuple[int, str], list[scaling_fit.Candidate]]:
  """Per (batch, cell), the configurations its search could have chosen: the chosen one (rank −∞) with its
  replicate seeds, and every other candidate of selection.finished_full in its cell with its own single run, ranked
  by its best validation accuracy (the search's fallback order)."""
  out: dict[tuple[int, str], list[scaling_fit.Candidate]] = {}
  for chosen_id in sorted({r.replicate_of for r in reps}):
    seeds = [r for r in reps if r.replicate_of == chosen_id]
    b = seeds[0].batch_size
    pts = tuple((s.steps, s.censored) for s in replicates.steps_per_seed(seeds, metric, goal, mode))
    if not pts:
      continue
    chosen = next((t for t in trials if t.run_id == chosen_id), None)
    cands = [scaling_fit.Candidate(-float("inf"), pts)]
    for t in trials:
      if (
        chosen is not None
        and t.cell == chosen.cell
        and t.run_id != chosen_id
        and t.phase != "replicate"
        and finished_full(t)
      ):
        own = replicates.steps_per_seed([t], metric, goal, mode)
        val = t.best("validation_accuracy")
        if own and val is not None:
          cands.append(scaling_fit.Candidate(-float(val), ((own[0].steps, own[0].censored),)))
    out[(b, chosen.cell if chosen is not None and chosen.cell else chosen_id)] = cands
  return out


_SENSITIVITY_INTRO = (
  "Each target's B_crit refitted under the choices behind it: the interval over trials and seeds re-applies "
  "each batch's choice of configuration to its resampled candidates (the chosen configuration with its "
  "replicate seeds, every other full-budget trial of the cell with its one run, ranked by validation "
  "accuracy); 'reached seeds only' drops the seeds that missed the target (censored); 'baseline recipe at "
  "B0' puts the baseline's seeds in place of the tuned B0 cell. A statement about B_crit at a target holds "
  "only if it holds over its whole row group."
)


def sensitivity_section(
  trials: Sequence[Trial],
  target: Target,
  goals: Sequence[float],
  headline: Optional[float],
  target_technique: str,
  bootstrap_num: int = precision.NUM_RESAMPLES,
  fit_rule: str = "any",
) -> list[str]:
  """B_crit's sensitivity to the choices behind it (issue 41), per target: the published fit with its interval
  over seeds; the same fit with an interval over trials and seeds (the search's choice re-applied to resampled
  candidates, scaling_fit.bootstrap_trials_and_seeds); the fit without censored points (the seeds that missed the
  target); the baseline recipe's seeds at B0 in place of the tuned B0 cell; and the range of B_crit with one
  batch left out. A claim about B_crit holds only if it holds across the row group."""
  reps = [t for t in trials if t.phase == "replicate" and (not target_technique or t.technique == target_technique)]
  base = [t for t in trials if t.role == "baseline"]
  rows, spans = [], []
  for goal in goals:
    name = f"{100 * goal:.2f}%" + (" (headline)" if goal == headline else "")
    group, values = _sensitivity_rows(name, goal, trials, reps, base, target, bootstrap_num, fit_rule)
    rows += group
    spans.append(f"{name}: {sig(min(values))} … {sig(max(values))}" if values else f"{name}: not measured")
  if not rows:
    return []
  return (
    ["### B_crit sensitivity", "", _SENSITIVITY_INTRO, ""]
    + table(["target", "variant", "B_crit", "95% interval", "points"], rows)
    + ["B_crit over every variant, interval and left-out batch of the table: " + "; ".join(spans) + ".", ""]
  )


def _sensitivity_rows(
  name: str,
  goal: float,
  trials: Sequence[Trial],
  reps: Sequence[Trial],
  base: Sequence[Trial],
  target: Target,
  bootstrap_num: int,
  fit_rule: str = "any",
) -> tuple[list[list], list[float]]:
  """One target's row group of the sensitivity table (row label ``name``), and every B_crit and interval end in it
  (its span)."""
  b0 = base[0].batch_size if base else None
  pts = _points(reps, target.metric, goal, target.mode)
  fits = [_variant_row(name, "tuned B0, censored as bounds; interval over seeds", pts, bootstrap_num, None, fit_rule)]
  cands = _candidates(trials, reps, target.metric, goal, target.mode)
  if cands and any(len(c) > 1 for c in cands.values()):
    fits.append(
      _variant_row(
        name,
        "same fit; interval over trials and seeds",
        pts,
        bootstrap_num,
        scaling_fit.bootstrap_trials_and_seeds(cands, num=bootstrap_num),
        fit_rule,
      )
    )
  fits.append(
    _variant_row(
      name, "reached seeds only (censored left out)", scaling_fit.reached_only(pts), bootstrap_num, None, fit_rule
    )
  )
  if b0 is not None and b0 in pts and base:
    swapped = dict(pts)
    swapped[b0] = [(s.steps, s.censored) for s in replicates.steps_per_seed(base, target.metric, goal, target.mode)]
    if swapped[b0]:
      fits.append(
        _variant_row(
          name, f"baseline recipe at B0 = {b0} instead of the tuned cell", swapped, bootstrap_num, None, fit_rule
        )
      )
  rows, values = [row for row, _ in fits], [v for _, vs in fits for v in vs]
  lobo = _leave_one_batch_out(pts, fit_rule)
  if lobo:
    rows.append(
      [
        name,
        "leave one batch out (range over the batches)",
        f"{sig(min(lobo))} … {sig(max(lobo))}",
        "—",
        f"{len(lobo)} refits",
      ]
    )
    values += lobo
  return rows, values


def _leave_one_batch_out(pts: dict, fit_rule: str) -> list[float]:
  """B_crit refitted without each batch in turn; under ``fit_rule='measured'`` a refit that would read "not
  measured" (too few reached batches, or at an edge) is left out."""
  try:
    refits = scaling_fit.leave_one_batch_out(pts)
  except ValueError:
    return []
  return [
    v
    for drop, v in refits.items()
    if v is not None
    and not (
      fit_rule == "measured"
      and critical_batch.why_not_measured(v, [b for b in scaling_fit.reached_only(pts) if b != drop])
    )
  ]


def _variant_row(
  name: str,
  label: str,
  p: dict,
  bootstrap_num: int,
  interval: Optional[scaling_fit.Interval] = None,
  fit_rule: str = "any",
) -> tuple[list, list[float]]:
  """One row of the sensitivity table: the fit of ``p`` with ``interval`` (default: over seeds); and its B_crit and
  interval ends, which join its target's span (none when ``p`` cannot be fitted)."""
  try:
    f = scaling_fit.fit_points(p)
  except ValueError as e:
    return [name, label, "—", "—", str(e)], []
  n, nc = sum(len(v) for v in p.values()), sum(c for v in p.values() for _, c in v)
  why = _why_not(f, p, fit_rule)
  if why:
    return [name, label, f"not measured ({why})", "—", f"{n} ({nc} censored)"], []
  ci = interval if interval is not None else scaling_fit.bootstrap(p, num=bootstrap_num)
  row = [name, label, sig(f.b_crit), _interval_text(ci), f"{n} ({nc} censored)"]
  return row, [f.b_crit] + ([ci.lo, ci.hi] if ci is not None else [])


def sections(trials: Sequence[Trial], spec, baseline_batch: Optional[int]) -> list[str]:
  """Every section of this module, in report order."""
  trials = list(trials)
  out = adequacy_section(trials, spec.edge_fraction) + replicates_section(trials)
  if any(t.role == "table3" for t in trials):  # the paper's cells against their replicates: the reference's section
    out += reference.section(
      spec, "table3_replicates_section", trials, spec.table3_batch, baseline_batch, spec.num_classes, spec.workload
    )
  target_trials = [t for t in trials if not spec.target_technique or t.technique == spec.target_technique]
  ids = {t.run_id for t in target_trials}  # with no target technique the baseline is among them already
  return out + scaling_section(
    target_trials + [t for t in trials if t.role == "baseline" and t.run_id not in ids],
    spec.target,
    spec.targets,
    spec.target_technique,
    fit_rule=spec.fit_rule,
  )
