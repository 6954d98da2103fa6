"""The study report: ``out_dir/README.md`` with PNG plots, composed from the analysis sections and written once.

Input is records only (a list of ``records.Trial`` and a ``ReportSpec``); the publishing side (publish.py) loads them.
Sections: settings; runs; baseline; regimes (You et al. 2020 Defs 2.1–2.3) with the trials that decide them;
huge-batch points; the reference's own sections (You et al. 2020's Table 3; reference.py); steps to target
(Shallue et al. 2018) with the S(B) fit, t(B), B* and the Golmant et al. 2018 breakdown point; predicted (gradient
noise scale, McCandlish et al. 2018) vs fitted B_crit; accuracy vs batch; training curves; distance from init;
trust ratios. A branching study (trials of role ``branch``) gets the critical batch over training (Merrill et
al. 2025; report_branching.py) instead of the ladder's.
Every measured number stands next
to the paper's where the paper has one. A section whose data the study did not log is left out (the Trials section
says which); a section that has data but cannot conclude says why. Accuracies are in %, and every table says in its
caption which trial's number it shows ("best" is defined once per table). Definitions: docs/studies.md.
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Optional, Sequence

from lamb_lars.common import io_utils
from lamb_lars.study.analysis import batch_warmup, regimes, reach
from lamb_lars.study.analysis.baseline import baseline_from_trials
from lamb_lars.study.analysis.verdict import shown, shown_text
from lamb_lars.study.records import STATUSES, Baseline, Target, Trial
from lamb_lars.study.report import report_per_run
from lamb_lars.study.report import (
  reference,
  report_batch_warmup,
  report_branching,
  report_curves,
  report_replicates,
  report_scaling,
)
from lamb_lars.study.report.markdown import fmt, pct, table

ACC_KEY = "eval_accuracy"
_BRANCHING_SECTIONS = (
  "Critical batch over training",
  "Baseline and Regimes",
  "Predicted vs fitted critical batch",
  "Training curves",
  "Distance from initialisation",
  "Trust ratios",
)
_WARMUP_SECTIONS = ("Batch-size warmup",)  # a warmup study compares arms, not batch sizes


@dataclasses.dataclass(frozen=True)
class ReportSpec:
  """What the report needs besides the trials (from the study config's ``analysis`` section)."""

  title: str = "Batch-size study"
  notes: str = ""
  workload: str = ""  # key into the reference's tables ('mnist_lenet'), '' = none
  reference: str = ""  # import path of the published results beside ours (reference.py)
  target: Optional[Target] = None
  baseline_epochs: float = 0.0  # ρ
  num_train: int = 0  # N = B_F
  num_classes: int = 10
  techniques: tuple[str, ...] = ()  # the declared technique set of Def. 2.2
  target_technique: str = ""  # steps to target over this technique's trials ('' = all trials)
  table3_batch: int = 0
  settings: tuple[str, ...] = ()  # markdown lines: machine, date, commands, wall time
  max_curves: int = 8
  targets: tuple[float, ...] = ()  # further steps-to-target goals (report_replicates.py)
  edge_fraction: float = 0.1  # the search's edge rule (search_adequacy.py)
  branch_epsilon: float = 0.0  # a branching study's ε, absolute or relative (report_branching.py)
  branch_relative: bool = False
  branch_loss: str = "validation_loss"
  # Which trial stands for an optimizer at a batch size in the accuracy, curves and huge-batch sections:
  # 'validation' (chosen on the validation split, replicate mean) or 'test' (the highest final test accuracy, the
  # rule of reports published before 2026-11-26; report_curves.py).
  select_on: str = "validation"
  # Pre-registered thresholds (issue 41; the study config's analysis / branching sections): the batch-size warmup's
  # non-inferiority margin (a fraction of accuracy), and the other ε values a branching report shows CBS(t) at.
  noninferiority_margin: float = 0.002
  # The batch-warmup section's comparison with the best fixed batch (issue 60's aim; ``analysis.best_fixed`` of a
  # study config that pre-registers it, e.g. mnist_batch_warmup.py:best_fixed; absent: off, as published before).
  best_fixed: bool = False
  branch_epsilons: tuple[float, ...] = ()
  # How a B_crit fit that measures nothing is shown (issue 62): 'measured' prints a fit over fewer than three batch
  # sizes, or whose B_crit sits at the edge of them, as "not measured (why)", in text and figure, derives nothing
  # from it and lists every trial the fit leaves out; 'any' (reports published before) prints every fit's numbers.
  fit_rule: str = "measured"
  # How this report's analysis settings differ from the ones registered when the study's first trial started
  # (publish.analysis_changes), one "key: registered → now" each; shown in the report's first lines.
  analysis_changes: tuple[str, ...] = ()


def _settings_section(trials: Sequence[Trial], spec: ReportSpec) -> list[str]:
  lines = []
  if spec.notes:
    lines += [spec.notes.strip(), ""]
  lines += list(spec.settings)
  walls = [t.wall_time for t in trials if t.wall_time]
  if walls:
    lines += [f"- training time summed over trials: {sum(walls) / 60:.1f} min"]
  return ["## Settings", ""] + lines + [""] if lines else []


def _changed_analysis_lines(spec: ReportSpec) -> list[str]:
  """The report's first lines when its analysis differs from the study's registered one (none when it does not)."""
  if not spec.analysis_changes:
    return []
  return [
    "**This report's analysis differs from the one registered when the study's first trial started** (the study "
    "config's `analysis` section, recorded in the workdir's preregistration.json): "
    + "; ".join(spec.analysis_changes)
    + ".",
    "",
  ]


def _roles_section(trials: Sequence[Trial], omitted: Sequence[str] = ()) -> list[str]:
  lines = ["## Trials", ""]
  if not trials:
    return lines + ["No trials in the store.", ""]
  keys = sorted({(t.role, t.technique) for t in trials})
  rows = []
  for role, tech in keys:
    group = [t for t in trials if (t.role, t.technique) == (role, tech)]
    rows.append([role, tech or "—"] + [sum(t.status == s for t in group) for s in STATUSES])
  lines += table(["role", "technique"] + list(STATUSES), rows)
  failed = [t for t in trials if t.status == "failed"]
  lines += [f"- failed `{t.run_id}`: {(t.error or 'no error recorded').strip().splitlines()[-1]}" for t in failed[:20]]
  lines += [f"- left out: {o}" for o in omitted]
  return lines + ([""] if failed or omitted else [])


def _baseline(trials: Sequence[Trial], spec: ReportSpec, reps: Sequence[Trial] = ()) -> tuple[Optional[Baseline], str]:
  if not any(t.role == "baseline" for t in trials):
    return None, "no baseline trial (role 'baseline') in this study"
  key = (
    "validation_loss"
    if any(r.get("validation_loss") is not None for t in trials if t.role == "baseline" for r in t.curve)
    else "eval_loss"
  )
  try:
    return baseline_from_trials(trials, spec.num_train, spec.baseline_epochs, loss_key=key, replicates=reps), key
  except ValueError as e:
    return None, str(e)


def _baseline_section(baseline: Optional[Baseline], note: str, spec: ReportSpec) -> list[str]:
  lines = ["## Baseline", ""]
  if baseline is None:
    return lines + [f"No baseline: {note}.", ""]
  ref = reference.table2(spec)
  k = len(baseline.seed_accuracies)
  lines += [
    f"One recipe at B0 = {baseline.batch_size}, ρ = {baseline.epochs:g} epochs, N = {baseline.num_train} "
    f"training examples (run `{baseline.run_id}`). A is its test accuracy and ξ its loss on the held-out "
    f"split (`{note}`) at its last eval within ρ epochs (You et al. 2020 Def. 2.1)"
    + (f"; both are means over its {k} seeds (the run and its replicates)." if k > 1 else ".")
    + (
      f" Left out of them, as they ended without a result: {', '.join(baseline.seeds_left_out)}; a recipe "
      "that diverges in some seeds is itself less reliable than A suggests."
      if baseline.seeds_left_out
      else ""
    ),
    "",
  ]
  seeds = lambda vals, f: " (seeds: " + ", ".join(f(v) for v in vals) + ")" if k > 1 else ""
  lines += table(
    ["quantity", "measured", "paper (You et al. 2020 Table 2)"],
    [
      [
        "A (test accuracy, %)",
        pct(baseline.accuracy) + seeds(baseline.seed_accuracies, pct),
        pct(ref.get("accuracy"), 1),
      ],
      ["ξ (validation loss)", f"{baseline.val_loss:.4f}" + seeds(baseline.seed_val_losses, lambda v: f"{v:.4f}"), "—"],
    ],
  )
  return lines


_REGIMES_BEST_NOTE = (
  "Best = the highest test accuracy at any evaluation of a trial (Def. 2.1 asks whether a run reaches "
  "99.5%·A within ρ epochs), and for a technique the trial with the highest such value. The regime "
  "label reads every trial: one reaching run of a technique is evidence that it reaches (Def. 2.2). The "
  "Def. 2.2 verdict reads, per technique, the configuration its cell chose on the validation split with "
  "all its seeds (replicates), so that the best of many trials on the test set does not decide it; the "
  "technique with the strongest verdict is shown."
)


def _regimes_verdict_note() -> str:
  """How B_L is bracketed and how a Def. 2.1/2.2 verdict is read (the reading of docs/studies.md, Regimes)."""
  return (
    f"Measured B_L is the smallest tested batch above B0 whose linear-scaling run fails Def. 2.1; the true "
    "B_L lies in (last pass, first fail]. Verdicts: `pass` / `fail` when the interval (95% over seeds, or "
    f"one run ± {100 * regimes.vd.ACC_TOLERANCE:g} pp accuracy / ± {100 * regimes.vd.LOSS_TOLERANCE:g}% "
    f"loss) is on one side of the threshold, `{regimes.vd.INCONCLUSIVE}` when it straddles it (the margin "
    "is smaller than the interval's half-width). Defs 2.1–2.2 are read at any evaluation within ρ epochs: "
    "a run meets them when some evaluation does, and contributes its best such evaluation to a verdict "
    "(docs/studies.md, Regimes)."
  )


def _regimes_section(
  trials: Sequence[Trial], baseline: Optional[Baseline], spec: ReportSpec, reps: Sequence[Trial] = ()
) -> list[str]:
  """Def. 2.1–2.3 with their brackets; a verdict reads every seed of a configuration (its replicates too)."""
  lines = ["## Regimes", ""]
  if baseline is None:
    return lines + ["No baseline, so no regimes.", ""]
  loss_key = (
    "validation_loss"
    if any(t.curve and t.curve[-1].get("validation_loss") is not None for t in trials)
    else "eval_loss"
  )
  r = regimes.classify_trials(baseline, trials, spec.techniques, loss_key=loss_key)
  lines += _regimes_definitions(baseline, spec)
  ref = reference.table2(spec)
  rule = lambda b, name: [
    s
    for t in trials
    if t.role == "linear" and t.batch_size == b and regimes.scaling_rule(t) == name
    for s in reach.seeds_of(reps, t)
  ]
  lin, sqrt = {b: rule(b, "linear") for b in r.labels}, {b: rule(b, "sqrt") for b in r.labels}
  d21 = {b: regimes.linear_verdict(ts, baseline, loss_key=loss_key) for b, ts in lin.items() if ts}
  d21v = {b: v.verdict for b, v in d21.items()}
  sqrt_v = {b: regimes.linear_verdict(ts, baseline, loss_key=loss_key).verdict for b, ts in sqrt.items() if ts}
  d22 = {b: v for b in r.labels if (v := reach.reach_evidence(trials, reps, spec.techniques, b, baseline))}
  lines += _brackets_table(r, baseline, d21, d22, ref)
  if sqrt_v:  # the paper's Optimization 0 (§3.1) takes linear or square-root scaling, whichever is better
    lines += _sqrt_scaling_note(trials, baseline, loss_key)
  lines += [_regimes_verdict_note(), ""]
  lines += _regimes_table(trials, spec, r, lin, d21v, sqrt_v, d22)
  lines += [_REGIMES_BEST_NOTE, ""]
  lines += report_per_run.section(list(trials) + list(reps), baseline, lin, d21v, d22, loss_key)
  lines += _other_reading(
    own_trials=trials, reps=reps, baseline=baseline, spec=spec, loss_key=loss_key, r=r, lin=lin, d21v=d21v, d22=d22
  )
  cautions = reach.disagreements(r, d21v, d22)
  lines += [f"- anomaly: {a}" for a in r.anomalies] + [f"- caution: {c}" for c in cautions]
  return lines + ([""] if r.anomalies or cautions else [])


def _regimes_definitions(baseline: Baseline, spec: ReportSpec) -> list[str]:
  """Defs 2.1–2.2 with this baseline's thresholds filled in."""
  return [
    f"Large batch (Def. 2.1): linear scaling of the baseline recipe reaches ≥ 99.5%·A = "
    f"{pct(regimes.ACC_FRACTION * baseline.accuracy)}% test accuracy and ≤ 1.2·ξ = "
    f"{regimes.LOSS_FACTOR * baseline.val_loss:.4f} validation loss within ρ = {baseline.epochs:g} epochs for "
    "every B < B_L; B ≥ B_L is large. Huge (Def. 2.2, B > B_H): every technique of the declared set "
    f"{list(spec.techniques)} fails to reach 99.5%·A. Large = [B_L, B_H], huge = (B_H, B_F] (You et al. "
    "2020 Table 2).",
    "",
  ]


def _brackets_table(r: regimes.Regimes, baseline: Baseline, d21: dict, d22: dict, ref: dict) -> list[str]:
  """B_L, B_H and B_F with the tested batches that bracket them, their verdicts, and the paper's values."""
  ev = lambda b: (
    f"{b}: Def. 2.1 {shown(d21[b].verdict)} (acc {shown_text(d21[b].accuracy)}; loss {shown_text(d21[b].loss)})"
    if b in d21
    else f"{b} (B0)"
    if b == baseline.batch_size
    else f"{b}: no linear run"
  )
  return table(
    ["quantity", "measured", "bracket and evidence", "paper"],
    [
      [
        "B_L",
        fmt(r.b_l) if r.b_l is not None else f"> {fmt(r.b_l_last_pass)} (no tested batch fails)",
        f"last pass {ev(r.b_l_last_pass)}; first fail " + (ev(r.b_l) if r.b_l is not None else "none"),
        fmt(ref.get("b_l")),
      ],
      [
        "B_H",
        fmt(r.b_h),
        "Def. 2.2 at B_H: "
        + (d22[r.b_h].text() if r.b_h in d22 else "—")
        + f"; first huge batch above: {fmt(r.b_h_next_huge)}"
        + (f", Def. 2.2 there: {d22[r.b_h_next_huge].text()}" if r.b_h_next_huge in d22 else ""),
        fmt(ref.get("b_h")),
      ],
      ["B_F", fmt(r.b_f), "—", fmt(ref.get("b_f"))],
    ],
  )


def _sqrt_scaling_note(trials: Sequence[Trial], baseline: Baseline, loss_key: str) -> list[str]:
  """Where square-root scaling first fails Def. 2.1's test (the alternative of the paper's Optimization 0)."""
  fail, last = regimes.first_failure(
    regimes.linear_evidence(trials, baseline, rule="sqrt", loss_key=loss_key), baseline.batch_size
  )
  return [
    f"Square-root scaling (η·√(B/B0), the alternative of the paper's Optimization 0, §3.1) under the same "
    f"test: first failing tested batch {fmt(fail)}, last passing below it {fmt(last)}. B_L above is "
    "linear scaling's (Def. 2.1).",
    "",
  ]


def _regimes_table(
  trials: Sequence[Trial], spec: ReportSpec, r: regimes.Regimes, lin: dict, d21v: dict, sqrt_v: dict, d22: dict
) -> list[str]:
  """Per tested batch: its regime, the linear-scaling runs with their Def. 2.1 verdict (and square-root scaling's,
  when run), the techniques' trials and the Def. 2.2 reach."""
  rows = [
    [
      b,
      label,
      ", ".join(f"`{t.run_id}` {t.status} {pct(t.best(ACC_KEY))}%" for t in lin[b]) or "not run",
      shown(d21v.get(b, "—")),
    ]
    + ([shown(sqrt_v.get(b, "—"))] if sqrt_v else [])
    + [_techniques_cell(trials, spec.techniques, b), d22[b].short() if b in d22 else "—"]
    for b, label in r.labels.items()
  ]
  return table(
    ["batch", "regime", "linear scaling (best test acc)", "Def. 2.1"]
    + (["√ scaling, same test"] if sqrt_v else [])
    + ["techniques (best test acc within ρ)", "Def. 2.2 reach (chosen, its seeds)"],
    rows,
  )


def _other_reading(*, own_trials, reps, baseline, spec, loss_key, r, lin, d21v, d22) -> list[str]:
  """The regimes under the other reading of Defs 2.1–2.2 (the values at each run's last evaluation within ρ
  epochs, final accuracy), one sensitivity line: B_L, B_H and every verdict that changes."""
  other = next(x for x in regimes.READINGS if x != regimes.READING)
  ro = regimes.classify_trials(baseline, own_trials, spec.techniques, loss_key=loss_key, reading=other)
  changed = []
  for b, ts in lin.items():
    if ts and b in d21v:
      v = regimes.linear_verdict(ts, baseline, loss_key=loss_key, reading=other).verdict
      if v != d21v[b]:
        changed.append(f"{b}: Def. 2.1 {shown(d21v[b])} → {shown(v)}")
  for b, ev in d22.items():
    e = reach.reach_evidence(own_trials, reps, spec.techniques, b, baseline, reading=other)
    if e is not None and (e.verdict.verdict, e.technique) != (ev.verdict.verdict, ev.technique):
      changed.append(
        f"{b}: Def. 2.2 {ev.short()} → {e.short()} ({e.verdict.value * 100:.2f} "
        f"[{e.verdict.low * 100:.2f}, {e.verdict.high * 100:.2f}])"
        if math.isfinite(e.verdict.value)
        else f"{b}: Def. 2.2 {ev.short()} → {e.short()}"
      )
  return [
    f"Sensitivity to the reading: at each run's last evaluation within ρ epochs (final accuracy) instead, "
    f"B_L = {fmt(ro.b_l)} (here {fmt(r.b_l)}) and B_H = {fmt(ro.b_h)} (here {fmt(r.b_h)}); "
    + ("verdicts that change: " + "; ".join(changed) if changed else "no verdict changes")
    + ".",
    "",
  ]


def _techniques_cell(trials: Sequence[Trial], techniques: Sequence[str], batch: int) -> str:
  """Per technique of the declared set at ``batch``: its trial count and best test accuracy (and which run)."""
  tech = []
  for name in techniques:
    group = [t for t in trials if t.technique == name and t.batch_size == batch]
    if group:
      best = max((t for t in group if t.best(ACC_KEY) is not None), key=lambda t: t.best(ACC_KEY), default=None)
      tech.append(
        f"{name}: {len(group)} trials, best {pct(best.best(ACC_KEY)) if best else '—'}%"
        + (f" (`{best.run_id}`)" if best else "")
      )
  return "; ".join(tech) or "—"


def write_report(
  trials: Sequence[Trial], out_dir: str, spec: ReportSpec = ReportSpec(), *, figures: bool = True
) -> str:
  """Writes ``out_dir/README.md`` and, with ``figures``, its PNG plots; returns the README path."""
  io_utils.makedirs(out_dir)
  fig_dir = out_dir if figures else None  # where the sections' plots go (None: named, not drawn)
  everything = list(trials)  # the Trials table counts the branches; CBS(t) reads them; no other section does
  trials = [t for t in everything if t.role != "branch"]
  # The single-run sections read the study's own trials; the regimes' Def. 2.1/2.2 verdicts read each
  # configuration with its replicates (fresh seeds), which report_replicates also summarises with intervals.
  own = [t for t in trials if t.phase != "replicate"]
  reps = [t for t in trials if t.phase == "replicate"]
  baseline, note = _baseline(own, spec, reps)
  target_trials = [t for t in own if not spec.target_technique or t.technique == spec.target_technique]
  steps_lines, fit = report_scaling.steps_section(
    target_trials,
    spec.target,
    fig_dir,
    fit_rule=spec.fit_rule,
    left_out=[t for t in own if t not in target_trials],
    technique=spec.target_technique,
  )
  sections = _regime_sections(
    everything, trials, own, reps, baseline, note, spec, fig_dir
  ) + _scaling_and_curve_sections(trials, spec, fig_dir, steps_lines, fit)
  if spec.branch_epsilon > 0:  # a branching study: a reference and its branches, no ladder to fit or replicate
    sections = [s for s in sections if s[0] in _BRANCHING_SECTIONS]
  elif trials and all(t.role == batch_warmup.ROLE for t in trials):
    sections = [s for s in sections if s[0] in _WARMUP_SECTIONS]
  omitted = [f"{name}: {why}" for name, why, lines in sections if not lines and why and trials]
  parts = [f"# {spec.title}", ""] + _changed_analysis_lines(spec)
  parts += _settings_section(everything, spec) + _roles_section(everything, omitted)
  for _, _, lines in sections:
    parts += lines
  path = os.path.join(out_dir, "README.md")
  io_utils.write_text_atomic(path, "\n".join(parts).rstrip() + "\n")
  return path


# A report section: its heading, why it is left out when it has no lines ('': left out silently), its lines.
_Section = tuple[str, str, list[str]]


def _regime_sections(
  everything: Sequence[Trial],
  trials: Sequence[Trial],
  own: Sequence[Trial],
  reps: Sequence[Trial],
  baseline: Optional[Baseline],
  note: str,
  spec: ReportSpec,
  fig_dir: Optional[str],
) -> list[_Section]:
  """The sections up to the replicates, in report order: CBS(t), baseline and regimes, the huge-batch points, the
  reference's Table 3, and the replicates with search adequacy."""
  b0 = baseline.batch_size if baseline else None
  return [
    (
      "Critical batch over training",
      "",
      report_branching.section(
        everything,
        fig_dir,
        num_train=spec.num_train,
        epsilon=spec.branch_epsilon,
        relative=spec.branch_relative,
        loss_key=spec.branch_loss,
        other_epsilons=spec.branch_epsilons,
      )
      if spec.branch_epsilon > 0
      else [],
    ),
    (
      "Baseline and Regimes",
      "no baseline trial (role `baseline`), which You et al. 2020 Defs 2.1–2.3 need",
      []
      if baseline is None and not any(t.role == "baseline" for t in trials)
      else _baseline_section(baseline, note, spec)
      + ([] if spec.branch_epsilon > 0 else _regimes_section(own, baseline, spec, reps)),
    ),
    (
      "Huge-batch results next to the paper",
      "",
      report_curves.points_section(trials, reference.points(spec), spec.num_train, spec.select_on),
    ),
    ("Table 3", "", reference.section(spec, "table3_section", trials, spec, b0, fig_dir)),
    ("Replicates and search adequacy", "", report_replicates.sections(trials, spec, b0)),
  ]


def _scaling_and_curve_sections(
  trials: Sequence[Trial],
  spec: ReportSpec,
  fig_dir: Optional[str],
  steps_lines: list[str],
  fit: report_scaling.StepsFit,
) -> list[_Section]:
  """The sections from steps to target on, in report order: steps to target (computed by the caller, whose S(B) fit
  ``fit`` the noise section compares with), the noise scale, accuracy, curves, distance, trust ratios and the
  batch-size warmup."""
  goal = spec.target.goal if spec.target and spec.target.metric == ACC_KEY else None
  return [
    (
      "Steps to target",
      f"no trial of technique `{spec.target_technique}`" if spec.target_technique else "",
      steps_lines,
    ),
    (
      "Predicted vs fitted critical batch",
      "no run logged `noise_scale` (McCandlish et al. 2018)",
      report_scaling.noise_section(trials, fig_dir, fit.fit, spec.max_curves, fit.why),
    ),
    (
      "Accuracy vs batch size",
      "no finished run logged `eval_accuracy`",
      report_curves.accuracy_section(trials, fig_dir, spec.select_on),
    ),
    (
      "Training curves",
      "no run has evaluations",
      report_curves.curves_section(trials, fig_dir, spec.max_curves, target=goal, select_on=spec.select_on),
    ),
    (
      "Distance from initialisation",
      "no run logged `dist_from_init`",
      report_curves.diffusion_section(trials, fig_dir, spec.max_curves),
    ),
    ("Trust ratios", "no run logged `trust_ratio/<layer>`", report_curves.trust_section(trials, fig_dir)),
    (
      "Batch-size warmup",
      "",
      report_batch_warmup.section(trials, fig_dir, spec.noninferiority_margin, spec.best_fixed),
    ),
  ]
