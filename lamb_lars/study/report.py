"""The study report: ``out_dir/README.md`` with PNG plots, composed from the analysis sections and written once.

Input is records only (a list of ``records.Trial`` and a ``ReportSpec``); the running side (publish.py) loads them.
Sections: settings; runs; baseline; regimes (You et al. 2020 Defs 2.1–2.3) with the trials that decide them;
huge-batch points; Table 3 (You et al. 2020); steps to target (Shallue et al. 2018) with the S(B) fit, t(B), B*
and the Golmant et al. 2018 breakdown point; predicted (gradient noise scale, McCandlish et al. 2018) vs fitted
B_crit; accuracy vs batch; training curves; distance from init; trust ratios. Every measured number stands next
to the paper's where the paper has one. A section without the data it needs says so. Definitions:
docs/studies.md.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Optional, Sequence

from lamb_lars import io_utils
from lamb_lars.study import paper, plots, regimes, report_curves, report_scaling, table3
from lamb_lars.study.markdown import fmt, pct, table
from lamb_lars.study.records import STATUSES, Baseline, Target, Trial

ACC_KEY = "eval_accuracy"


@dataclasses.dataclass(frozen=True)
class ReportSpec:
  """What the report needs besides the trials (from the study config's ``analysis`` section)."""
  title: str = "Batch-size study"
  notes: str = ""
  workload: str = ""                      # key into paper.py ('mnist_lenet'), '' = no paper comparison
  target: Optional[Target] = None
  baseline_epochs: float = 0.0            # ρ
  num_train: int = 0                      # N = B_F
  num_classes: int = 10
  techniques: tuple[str, ...] = ()        # the declared technique set of Def. 2.2
  target_technique: str = ""              # steps to target over this technique's trials ('' = all trials)
  table3_batch: int = 0
  settings: tuple[str, ...] = ()          # markdown lines: machine, date, commands, wall time
  max_curves: int = 8


def _settings_section(trials: Sequence[Trial], spec: ReportSpec) -> list[str]:
  lines = ["## Settings", ""]
  if spec.notes:
    lines += [spec.notes.strip(), ""]
  lines += list(spec.settings)
  walls = [t.wall_time for t in trials if t.wall_time]
  if walls:
    lines += [f"- training time summed over trials: {sum(walls) / 60:.1f} min"]
  return lines + [""]


def _roles_section(trials: Sequence[Trial]) -> list[str]:
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
  return lines + ([""] if failed else [])


def _baseline(trials: Sequence[Trial], spec: ReportSpec) -> tuple[Optional[Baseline], str]:
  if not any(t.role == "baseline" for t in trials):
    return None, "no baseline trial (role 'baseline') in this study"
  key = "validation_loss" if any(r.get("validation_loss") is not None for t in trials if t.role == "baseline"
                                 for r in t.curve) else "eval_loss"
  try:
    return regimes.baseline_from_trials(trials, spec.num_train, spec.baseline_epochs, loss_key=key), key
  except ValueError as e:
    return None, str(e)


def _baseline_section(baseline: Optional[Baseline], note: str, spec: ReportSpec) -> list[str]:
  lines = ["## Baseline", ""]
  if baseline is None:
    return lines + [f"No baseline: {note}.", ""]
  ref = paper.TABLE2.get(spec.workload, {})
  lines += [f"One recipe at B0 = {baseline.batch_size}, ρ = {baseline.epochs:g} epochs, N = {baseline.num_train} "
            f"training examples (run `{baseline.run_id}`). A is its test accuracy and ξ its loss on the held-out "
            f"split (`{note}`) at its last eval within ρ epochs (You et al. 2020 Def. 2.1).", ""]
  lines += table(["quantity", "measured", "paper (You et al. 2020 Table 2)"],
                  [["A (test accuracy, %)", pct(baseline.accuracy), pct(ref.get("accuracy"), 1)],
                   ["ξ (validation loss)", f"{baseline.val_loss:.4f}", "—"]])
  return lines


def _regimes_section(trials: Sequence[Trial], baseline: Optional[Baseline], spec: ReportSpec) -> list[str]:
  lines = ["## Regimes", ""]
  if baseline is None:
    return lines + ["No baseline, so no regimes.", ""]
  r = regimes.classify_trials(baseline, trials, spec.techniques, loss_key=(
      "validation_loss" if any(t.curve and t.curve[-1].get("validation_loss") is not None for t in trials)
      else "eval_loss"))
  lines += [f"Large batch (Def. 2.1): linear scaling of the baseline recipe reaches ≥ 99.5%·A = "
            f"{pct(regimes.ACC_FRACTION * baseline.accuracy)}% test accuracy and ≤ 1.2·ξ = "
            f"{regimes.LOSS_FACTOR * baseline.val_loss:.4f} validation loss within ρ = {baseline.epochs:g} epochs. Huge "
            f"(Def. 2.2): every technique of the declared set {list(spec.techniques)} fails to reach 99.5%·A.", ""]
  ref = paper.TABLE2.get(spec.workload, {})
  lines += table(["quantity", "measured", "paper"], [
      ["B_L", f"{fmt(r.b_l)} (first failing linear batch: {fmt(r.b_l_next_fail)})", fmt(ref.get("b_l"))],
      ["B_H", f"{fmt(r.b_h)} (first huge batch: {fmt(r.b_h_next_huge)})", fmt(ref.get("b_h"))],
      ["B_F", fmt(r.b_f), fmt(ref.get("b_f"))]])
  rows = []
  for b, label in r.labels.items():
    lin = [t for t in trials if t.role == "linear" and t.batch_size == b]
    lin_txt = ", ".join(f"`{t.run_id}` {t.status} {pct(t.best(ACC_KEY))}%" for t in lin) or "not run"
    tech = []
    for name in spec.techniques:
      group = [t for t in trials if t.technique == name and t.batch_size == b]
      if group:
        best = max((t for t in group if t.best(ACC_KEY) is not None), key=lambda t: t.best(ACC_KEY), default=None)
        tech.append(f"{name}: {len(group)} trials, best {pct(best.best(ACC_KEY)) if best else '—'}%"
                    + (f" (`{best.run_id}`)" if best else ""))
    rows.append([b, label, lin_txt, "; ".join(tech) or "—"])
  lines += table(["batch", "regime", "linear scaling (best test acc)", "techniques (best test acc within ρ)"], rows)
  lines += [f"- anomaly: {a}" for a in r.anomalies]
  return lines + ([""] if r.anomalies else [])


def _points_section(trials: Sequence[Trial], spec: ReportSpec) -> list[str]:
  points = paper.POINTS.get(spec.workload, ())
  if not points:
    return []
  lines = ["## Huge-batch results next to the paper", ""]
  rows = []
  for batch, opt, acc, what in points:
    batch = spec.num_train if batch == "full" else batch
    got = [t for t in trials if t.batch_size == batch and opt in ("any", t.optimizer)
           and t.status == "done" and t.last(ACC_KEY) is not None]
    best = max(got, key=lambda t: t.last(ACC_KEY), default=None)
    rows.append([f"{opt} at {batch}", what, (f"{pct(best.last(ACC_KEY))} (`{best.run_id}`, {len(got)} finished "
                                             f"trials)") if best else "not run", pct(acc, 1)])
  return lines + table(["setting", "paper's recipe", "measured: best final test acc (%)", "paper (%)"], rows)


def _table3_section(trials: Sequence[Trial], spec: ReportSpec, baseline_batch: Optional[int],
                    out_dir: str) -> list[str]:
  if not any(t.role == "table3" for t in trials):
    return []
  lines = ["## Table 3: optimizer × layer-wise variants", ""]
  batch = spec.table3_batch or max(t.batch_size for t in trials if t.role == "table3")
  b0 = baseline_batch or paper.TABLE2.get(spec.workload, {}).get("b0")
  cells = table3.build_table3(trials, batch, baseline_batch=b0, num_classes=spec.num_classes)
  ref = paper.TABLE3 if spec.workload == "mnist_lenet" else None
  lines += [table3.render_markdown(cells, ref), "Each cell: measured / paper. Measured = the best final test accuracy "
            "(%) over the cell's tuned trials that ran the full budget and are neither 'diverge' nor 'unstable'; "
            "when there is none, the cell's verdict (docs/studies.md).", ""]
  rows = []
  for opt in cells.rows:
    for col in cells.columns:
      c = cells.cells[(opt, col)]
      if c.num_trials:
        rows.append([opt, col, c.text(2), c.run_id and f"`{c.run_id}`",
                     ", ".join(f"{k} {v}" for k, v in sorted(c.counts.items()))])
  lines += ["Trials per cell:", ""] + table(["solver", "column", "cell", "best trial", "verdicts"], rows)
  curves = _table3_curves(trials, cells, batch)
  if curves:
    name = plots.training_curves(out_dir, "table3_curves.png", curves)
    lines += [f"The trial shown per cell at batch {batch}: the cell's chosen trial, or (no trial ok) the full-budget "
              "trial with the best accuracy it ever reached.", "", f"![Table 3 curves]({name})", ""]
  return lines


def _table3_curves(trials: Sequence[Trial], cells: table3.Table3, batch: int) -> dict[str, Sequence]:
  """{'<solver> <column>': eval curve} of one trial per large-batch cell (the evidence behind each cell)."""
  by_id = {t.run_id: t for t in trials}
  out = {}
  for opt in cells.rows:
    for col in cells.columns[-3:]:
      c = cells.cells[(opt, col)]
      pick = by_id.get(c.run_id) if c.run_id else None
      if pick is None:
        group = [t for t in trials if t.role == "table3" and t.optimizer == opt and t.batch_size == batch
                 and table3.COLUMN_NAMES[t.variant] in col and t.status in ("done", "diverged")
                 and t.best(ACC_KEY) is not None]
        pick = max(group, key=lambda t: t.best(ACC_KEY), default=None)
      if pick is not None:
        out[f"{opt} {col.split(' ', 1)[1]} ({c.text()})"] = pick.curve
  return out


def write_report(trials: Sequence[Trial], out_dir: str, spec: ReportSpec = ReportSpec()) -> str:
  """Writes ``out_dir/README.md`` and its PNG plots; returns the README path."""
  io_utils.makedirs(out_dir)
  trials = list(trials)
  baseline, note = _baseline(trials, spec)
  target_trials = [t for t in trials if not spec.target_technique or t.technique == spec.target_technique]
  steps_lines, fit = report_scaling.steps_section(target_trials, spec.target, out_dir)
  parts = [f"# {spec.title}", ""]
  parts += _settings_section(trials, spec) + _roles_section(trials)
  parts += _baseline_section(baseline, note, spec) + _regimes_section(trials, baseline, spec)
  parts += _points_section(trials, spec) + _table3_section(trials, spec, baseline.batch_size if baseline else None, out_dir)
  parts += steps_lines + report_scaling.noise_section(trials, out_dir, fit, spec.max_curves)
  parts += report_curves.accuracy_section(trials, out_dir) + report_curves.curves_section(trials, out_dir, spec.max_curves)
  parts += report_curves.diffusion_section(trials, out_dir, spec.max_curves) + report_curves.trust_section(trials, out_dir)
  path = os.path.join(out_dir, "README.md")
  io_utils.write_text_atomic(path, "\n".join(parts).rstrip() + "\n")
  return path
