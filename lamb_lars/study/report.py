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
import math
import os
from typing import Any, Optional, Sequence

import numpy as np

from lamb_lars.study import critical_batch as cb
from lamb_lars.study import paper
from lamb_lars.study import plots
from lamb_lars.study import regimes as rg
from lamb_lars.study import table3 as t3
from lamb_lars.study.records import STATUSES, Baseline, Target, Trial
from lamb_lars.study.steps_to_target import reached_arrays, steps_to_target

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


def _fmt(x: Any, digits: int = 4) -> str:
  if x is None:
    return "—"
  if isinstance(x, float):
    return "∞" if math.isinf(x) else f"{x:.{digits}g}"
  return str(x)


def _table(head: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
  return (["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
          + ["| " + " | ".join(_fmt(c) for c in r) + " |" for r in rows] + [""])


def _final(t: Trial, key: str = ACC_KEY) -> Optional[float]:
  vals = [r[key] for r in sorted(t.curve, key=lambda r: r["step"]) if r.get(key) is not None]
  return float(vals[-1]) if vals else None


def _best_per_batch(trials: Sequence[Trial], limit: int) -> dict[int, Trial]:
  """The finished trial with the best final accuracy at each batch size (at most ``limit`` sizes, spread out)."""
  best: dict[int, Trial] = {}
  for t in sorted(trials, key=lambda t: t.run_id):
    if t.status == "failed" or not t.curve:
      continue
    acc = _final(t)
    cur = best.get(t.batch_size)
    if cur is None or (acc is not None and (_final(cur) is None or acc > _final(cur))):
      best[t.batch_size] = t
  keys = sorted(best)
  if len(keys) > limit:
    keys = [keys[i] for i in np.unique(np.linspace(0, len(keys) - 1, limit).round().astype(int))]
  return {b: best[b] for b in keys}


def _runs_section(trials: Sequence[Trial]) -> list[str]:
  lines = ["## Runs", ""]
  if not trials:
    return lines + ["No runs in the store.", ""]
  rows = []
  for b in sorted({t.batch_size for t in trials}):
    group = [t for t in trials if t.batch_size == b]
    rows.append([b] + [sum(t.status == s for t in group) for s in STATUSES])
  lines += _table(["batch"] + list(STATUSES), rows)
  failed = [t for t in trials if t.status == "failed"]
  lines += [f"- failed `{t.run_id}`: {(t.error or '').splitlines()[-1] if t.error else 'no error recorded'}"
            for t in failed[:20]]
  return lines + ([""] if failed else [])


def _step_times(trials: Sequence[Trial]) -> dict[int, float]:
  by_batch: dict[int, list[float]] = {}
  for t in trials:
    s = cb.seconds_per_step(t.curve) if t.status != "failed" else None
    if s is not None and s > 0:
      by_batch.setdefault(t.batch_size, []).append(s)
  return {b: float(np.median(v)) for b, v in sorted(by_batch.items())}


def _steps_section(trials, target: Optional[Target], out_dir: str) -> tuple[list[str], Optional[cb.InverseLawFit]]:
  lines = ["## Steps to target", ""]
  if target is None:
    return lines + ["No target given (`target=Target(metric, goal, mode)`): steps-to-target, the S(B) fit, "
                    "B* and the breakdown point are skipped.", ""], None
  res = steps_to_target(trials, target.metric, target.goal, target.mode)
  cmp = "≥" if target.mode == "max" else "≤"
  lines += [f"Goal: first eval with `{target.metric}` {cmp} {target.goal}; diverged and failed trials are "
            "infeasible (Shallue et al. 2018).", ""]
  if not res:
    return lines + ["No runs.", ""], None
  lines += _table(["batch", "steps", "epochs", "wall-clock s", "best run", "trials", "feasible", "reached"],
                  [[b, r.steps, r.epochs, r.wall_time, r.best_run_id and f"`{r.best_run_id}`", r.num_trials,
                    r.num_feasible, r.num_reached] for b, r in res.items()])
  bs, steps = reached_arrays(res)
  fit = None
  if len(set(bs)) >= 2:
    fit = cb.fit_inverse_law(bs, steps)
    lines += [f"Fit S(B) = S_min·(1 + B_crit/B) (least squares in log S): S_min = {_fmt(fit.s_min)}, "
              f"B_crit = {_fmt(fit.b_crit)}, E_min = S_min·B_crit = {_fmt(fit.e_min)} examples, "
              f"rms log residual {fit.rms_log_residual:.3f} over {fit.num_points} batch sizes.", ""]
  else:
    lines += ["Fewer than two batch sizes reached the goal: no S(B) fit.", ""]
  if bs:
    name = plots.steps_vs_batch(out_dir, "steps_to_target.png", bs, steps, fit)
    lines += [f"![steps to target]({name})", ""]
  times = _step_times(trials)
  if len(times) >= 2:
    stf = cb.fit_step_time(list(times), list(times.values()))
    lines += [f"Step time t(B) = γ + δ·B: γ = {stf.gamma:.4g} s, δ = {stf.delta:.4g} s/example "
              f"(median Δwall/Δstep per batch, first eval interval skipped)."]
    if fit is not None:
      lines += [f"Time-optimal batch B* = √(B_crit·γ/δ) = {_fmt(cb.optimal_batch(fit, stf))}."]
    lines += [""]
  else:
    lines += ["Step times at fewer than two batch sizes: no t(B) fit, no B*.", ""]
  by_time = steps_to_target(trials, target.metric, target.goal, target.mode, by="wall_time")
  point = cb.breakdown_point(list(by_time), [r.wall_time for r in by_time.values()])
  lines += ["Breakdown point (Golmant et al. 2018; smallest batch beyond which no larger batch reaches the goal "
            f"more than 5% faster in wall-clock): {_fmt(point) if point else 'not observed in the measured range'}.",
            ""]
  return lines, fit


def _accuracy_section(trials, out_dir: str) -> list[str]:
  lines = ["## Accuracy vs batch size", ""]
  series: dict[str, dict[int, float]] = {}
  for t in trials:
    acc = _final(t) if t.status == "done" else None
    if acc is None:
      continue
    v = t.variant
    label = (t.optimizer or "?") if v == "original" else f"{t.optimizer} ({t.variant})"
    cur = series.setdefault(label, {})
    cur[t.batch_size] = max(acc, cur.get(t.batch_size, -math.inf))
  if not series:
    return lines + [f"No finished run logged `{ACC_KEY}`.", ""]
  bs = sorted({b for s in series.values() for b in s})
  lines += _table(["optimizer"] + [str(b) for b in bs],
                  [[k] + [s.get(b) for b in bs] for k, s in sorted(series.items())])
  name = plots.accuracy_vs_batch(out_dir, "accuracy_vs_batch.png",
                                 {k: (sorted(s), [s[b] for b in sorted(s)]) for k, s in sorted(series.items())})
  return lines + ["Best final accuracy among finished runs.", "", f"![accuracy vs batch]({name})", ""]


def _curves_section(trials, out_dir: str, limit: int) -> list[str]:
  lines = ["## Training curves", ""]
  best = _best_per_batch(trials, limit)
  if not best:
    return lines + ["No run has eval rows.", ""]
  name = plots.training_curves(out_dir, "training_curves.png",
                               {f"B={b} ({t.optimizer})": t.curve for b, t in best.items()})
  return lines + ["The best run per batch size.", "", f"![training curves]({name})", ""]


def _series(t: Trial, key: str) -> tuple[list[float], list[float]]:
  rows = [r for r in sorted(t.curve, key=lambda r: r["step"]) if r.get(key) is not None]
  return [r["step"] for r in rows], [r[key] for r in rows]


def _diffusion_section(trials, out_dir: str, limit: int) -> list[str]:
  lines = ["## Distance from initialisation", ""]
  have = [t for t in trials if any(r.get("dist_from_init") is not None for r in t.curve)]
  if not have:
    return lines + ["No run logged `dist_from_init`.", ""]
  best = _best_per_batch(have, limit)
  name = plots.series_plot(out_dir, "dist_from_init.png",
                           {f"B={b}": _series(t, "dist_from_init") for b, t in best.items()},
                           "step t (log)", "‖w_t − w_0‖ (log)")
  return lines + ["log ‖w_t − w_0‖ against log t (Hoffer et al. 2017; You et al. 2020 Figs 11–12).", "",
                  f"![distance from init]({name})", ""]


def _trust_section(trials, out_dir: str) -> list[str]:
  lines = ["## Trust ratios", ""]
  have = [t for t in trials if any(k.startswith("trust_ratio/") for r in t.curve for k in r)]
  if not have:
    return lines + ["No run logged `trust_ratio/<layer>`.", ""]
  t = max(have, key=lambda t: (t.batch_size, _final(t) or -1.0, t.run_id))
  keys = sorted({k for r in t.curve for k in r if k.startswith("trust_ratio/")})
  name = plots.series_plot(out_dir, "trust_ratio.png", {k[len("trust_ratio/"):]: _series(t, k) for k in keys},
                           "step", "trust ratio (log)", logx=False)
  return lines + [f"Run `{t.run_id}` (batch {t.batch_size}, {t.optimizer} {t.variant}), {len(keys)} layers.", "",
                  f"![trust ratio]({name})", ""]


def _late_median(t: Trial, key: str) -> Optional[float]:
  _, v = _series(t, key)
  v = [x for x in v[len(v) // 2:] if x is not None and math.isfinite(x) and x > 0]
  return float(np.median(v)) if v else None


def _noise_section(trials, out_dir: str, fit: Optional[cb.InverseLawFit], limit: int) -> list[str]:
  lines = ["## Predicted vs fitted critical batch", ""]
  have = [t for t in trials if t.status != "failed" and _late_median(t, "noise_scale") is not None]
  if not have:
    return lines + ["No run logged `noise_scale` (B_simple = tr Σ/|G|², McCandlish et al. 2018).", ""]
  per_batch: dict[int, list[float]] = {}
  for t in have:
    per_batch.setdefault(t.batch_size, []).append(_late_median(t, "noise_scale"))
  predicted = float(np.median([x for v in per_batch.values() for x in v]))
  fitted = fit.b_crit if fit is not None else None
  lines += _table(["batch", "B_simple (median over runs of each run's second-half median)"],
                  [[b, float(np.median(v))] for b, v in sorted(per_batch.items())])
  lines += [f"Predicted B_crit ≈ B_simple = {_fmt(predicted)}; fitted B_crit = "
            f"{_fmt(fitted) if fitted is not None else 'no fit'}"
            + (f"; ratio predicted/fitted = {predicted / fitted:.3g}." if fitted and math.isfinite(fitted) else "."),
            ""]
  best = _best_per_batch(have, limit)
  name = plots.series_plot(out_dir, "noise_scale.png", {f"B={b}": _series(t, "noise_scale") for b, t in best.items()},
                           "step", "B_simple (log)", hline=fitted, hlabel="fitted B_crit", logx=False)
  return lines + [f"![noise scale]({name})", ""]


def _pct(x: Optional[float], digits: int = 2) -> str:
  return "—" if x is None or not math.isfinite(x) else f"{100 * x:.{digits}f}"


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
  lines += _table(["role", "technique"] + list(STATUSES), rows)
  failed = [t for t in trials if t.status == "failed"]
  lines += [f"- failed `{t.run_id}`: {(t.error or 'no error recorded').strip().splitlines()[-1]}" for t in failed[:20]]
  return lines + ([""] if failed else [])


def _baseline(trials: Sequence[Trial], spec: ReportSpec) -> tuple[Optional[Baseline], str]:
  if not any(t.role == "baseline" for t in trials):
    return None, "no baseline trial (role 'baseline') in this study"
  key = "validation_loss" if any(r.get("validation_loss") is not None for t in trials if t.role == "baseline"
                                 for r in t.curve) else "eval_loss"
  try:
    return rg.baseline_from_trials(trials, spec.num_train, spec.baseline_epochs, loss_key=key), key
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
  lines += _table(["quantity", "measured", "paper (You et al. 2020 Table 2)"],
                  [["A (test accuracy, %)", _pct(baseline.accuracy), _pct(ref.get("accuracy"), 1)],
                   ["ξ (validation loss)", f"{baseline.val_loss:.4f}", "—"]])
  return lines


def _regimes_section(trials: Sequence[Trial], baseline: Optional[Baseline], spec: ReportSpec) -> list[str]:
  lines = ["## Regimes", ""]
  if baseline is None:
    return lines + ["No baseline, so no regimes.", ""]
  r = rg.classify_trials(baseline, trials, spec.techniques, loss_key=(
      "validation_loss" if any(t.curve and t.curve[-1].get("validation_loss") is not None for t in trials)
      else "eval_loss"))
  lines += [f"Large batch (Def. 2.1): linear scaling of the baseline recipe reaches ≥ 99.5%·A = "
            f"{_pct(rg.ACC_FRACTION * baseline.accuracy)}% test accuracy and ≤ 1.2·ξ = "
            f"{rg.LOSS_FACTOR * baseline.val_loss:.4f} validation loss within ρ = {baseline.epochs:g} epochs. Huge "
            f"(Def. 2.2): every technique of the declared set {list(spec.techniques)} fails to reach 99.5%·A.", ""]
  ref = paper.TABLE2.get(spec.workload, {})
  lines += _table(["quantity", "measured", "paper"], [
      ["B_L", f"{_fmt(r.b_l)} (first failing linear batch: {_fmt(r.b_l_next_fail)})", _fmt(ref.get("b_l"))],
      ["B_H", f"{_fmt(r.b_h)} (first huge batch: {_fmt(r.b_h_next_huge)})", _fmt(ref.get("b_h"))],
      ["B_F", _fmt(r.b_f), _fmt(ref.get("b_f"))]])
  rows = []
  for b, label in r.labels.items():
    lin = [t for t in trials if t.role == "linear" and t.batch_size == b]
    lin_txt = ", ".join(f"`{t.run_id}` {t.status} {_pct(t.best(ACC_KEY))}%" for t in lin) or "not run"
    tech = []
    for name in spec.techniques:
      group = [t for t in trials if t.technique == name and t.batch_size == b]
      if group:
        best = max((t for t in group if t.best(ACC_KEY) is not None), key=lambda t: t.best(ACC_KEY), default=None)
        tech.append(f"{name}: {len(group)} trials, best {_pct(best.best(ACC_KEY)) if best else '—'}%"
                    + (f" (`{best.run_id}`)" if best else ""))
    rows.append([b, label, lin_txt, "; ".join(tech) or "—"])
  lines += _table(["batch", "regime", "linear scaling (best test acc)", "techniques (best test acc within ρ)"], rows)
  lines += [f"- anomaly: {a}" for a in r.anomalies]
  return lines + ([""] if r.anomalies else [])


def _points_section(trials: Sequence[Trial], spec: ReportSpec) -> list[str]:
  points = paper.POINTS.get(spec.workload, ())
  if not points:
    return []
  lines = ["## Huge-batch results next to the paper", ""]
  rows = []
  for batch, opt, acc, what in points:
    got = [t for t in trials if t.batch_size == batch and opt in ("any", t.optimizer)
           and t.status == "done" and t.last(ACC_KEY) is not None]
    best = max(got, key=lambda t: t.last(ACC_KEY), default=None)
    rows.append([f"{opt} at {batch}", what, (f"{_pct(best.last(ACC_KEY))} (`{best.run_id}`, {len(got)} finished "
                                             f"trials)") if best else "not run", _pct(acc, 1)])
  return lines + _table(["setting", "paper's recipe", "measured: best final test acc (%)", "paper (%)"], rows)


def _table3_section(trials: Sequence[Trial], spec: ReportSpec, baseline_batch: Optional[int]) -> list[str]:
  if not any(t.role == "table3" for t in trials):
    return []
  lines = ["## Table 3: optimizer × layer-wise variants", ""]
  batch = spec.table3_batch or max(t.batch_size for t in trials if t.role == "table3")
  b0 = baseline_batch or paper.TABLE2.get(spec.workload, {}).get("b0")
  table = t3.build_table3(trials, batch, baseline_batch=b0, num_classes=spec.num_classes)
  ref = paper.TABLE3 if spec.workload == "mnist_lenet" else None
  lines += [t3.render_markdown(table, ref), "Each cell: measured / paper. Measured = the best final test accuracy "
            "(%) over the cell's tuned trials that ran the full budget and are neither 'diverge' nor 'unstable'; "
            "when there is none, the cell's verdict (docs/studies.md).", ""]
  rows = []
  for opt in table.rows:
    for col in table.columns:
      c = table.cells[(opt, col)]
      if c.num_trials:
        rows.append([opt, col, c.text(2), c.run_id and f"`{c.run_id}`",
                     ", ".join(f"{k} {v}" for k, v in sorted(c.counts.items()))])
  lines += ["Trials per cell:", ""] + _table(["solver", "column", "cell", "best trial", "verdicts"], rows)
  return lines


def write_report(trials: Sequence[Trial], out_dir: str, spec: ReportSpec = ReportSpec()) -> str:
  """Writes ``out_dir/README.md`` and its PNG plots; returns the README path."""
  os.makedirs(out_dir, exist_ok=True)
  trials = list(trials)
  baseline, note = _baseline(trials, spec)
  target_trials = [t for t in trials if not spec.target_technique or t.technique == spec.target_technique]
  steps_lines, fit = _steps_section(target_trials, spec.target, out_dir)
  parts = [f"# {spec.title}", ""]
  parts += _settings_section(trials, spec) + _roles_section(trials)
  parts += _baseline_section(baseline, note, spec) + _regimes_section(trials, baseline, spec)
  parts += _points_section(trials, spec) + _table3_section(trials, spec, baseline.batch_size if baseline else None)
  parts += steps_lines + _noise_section(trials, out_dir, fit, spec.max_curves)
  parts += _accuracy_section(trials, out_dir) + _curves_section(trials, out_dir, spec.max_curves)
  parts += _diffusion_section(trials, out_dir, spec.max_curves) + _trust_section(trials, out_dir)
  path = os.path.join(out_dir, "README.md")
  with open(path, "w", encoding="utf-8") as f:
    f.write("\n".join(parts).rstrip() + "\n")
  return path
