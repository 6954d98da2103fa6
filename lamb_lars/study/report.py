"""The study report: ``out_dir/README.md`` with PNG plots, from a results store or a list of trials.

Sections: runs; steps to target (Shallue et al. 2018) with the S(B) = S_min(1 + B_crit/B) fit, the step-time fit,
B* and the Golmant et al. 2018 breakdown point; accuracy vs batch per optimizer; training curves; distance from
init vs log t (Hoffer et al. 2017); trust ratio per layer over time; predicted B_crit (gradient noise scale,
McCandlish et al. 2018) vs fitted B_crit; regimes (You et al. 2020 Defs 2.1–2.3); Table 3 (You et al. 2020).
A section without the data it needs says so instead of failing. Definitions: docs/studies.md.
"""
from __future__ import annotations

import dataclasses
import math
import os
import sqlite3
from typing import Any, Callable, Mapping, Optional, Sequence, Union

import numpy as np

from lamb_lars.study import critical_batch as cb
from lamb_lars.study import plots
from lamb_lars.study import regimes as rg
from lamb_lars.study import store as st
from lamb_lars.study import table3 as t3
from lamb_lars.study.steps_to_target import reached_arrays, steps_to_target

ACC_KEY = "eval_accuracy"


@dataclasses.dataclass(frozen=True)
class Target:
  """The goal of steps-to-target: ``metric`` meets ``goal`` (≥ for mode 'max', ≤ for 'min')."""
  metric: str = ACC_KEY
  goal: float = 0.99
  mode: str = "max"


def as_target(target: Union[None, Target, Mapping[str, Any], Sequence[Any]]) -> Optional[Target]:
  """A Target from a Target, a dict of its fields, or a tuple (metric, goal[, mode])."""
  if target is None or isinstance(target, Target):
    return target
  if isinstance(target, Mapping):
    return Target(**target)
  return Target(*target)


Source = Union[str, os.PathLike, sqlite3.Connection, Sequence[st.Trial]]


def load_trials(source: Source, study: Optional[str] = None) -> list[st.Trial]:
  """Trials from a store path, an open store, or a list of trials (returned as is)."""
  if isinstance(source, (str, os.PathLike)):
    con = st.open_store(source)
    try:
      return st.trials(con, study=study)
    finally:
      con.close()
  if isinstance(source, sqlite3.Connection):
    return st.trials(source, study=study)
  return list(source)


def _fmt(x: Any, digits: int = 4) -> str:
  if x is None:
    return "—"
  if isinstance(x, float):
    return "∞" if math.isinf(x) else f"{x:.{digits}g}"
  return str(x)


def _table(head: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
  return (["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
          + ["| " + " | ".join(_fmt(c) for c in r) + " |" for r in rows] + [""])


def _final(t: st.Trial, key: str = ACC_KEY) -> Optional[float]:
  vals = [r[key] for r in sorted(t.curve, key=lambda r: r["step"]) if r.get(key) is not None]
  return float(vals[-1]) if vals else None


def _best_per_batch(trials: Sequence[st.Trial], limit: int) -> dict[int, st.Trial]:
  """The finished trial with the best final accuracy at each batch size (at most ``limit`` sizes, spread out)."""
  best: dict[int, st.Trial] = {}
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


def _runs_section(trials: Sequence[st.Trial]) -> list[str]:
  lines = ["## Runs", ""]
  if not trials:
    return lines + ["No runs in the store.", ""]
  rows = []
  for b in sorted({t.batch_size for t in trials}):
    group = [t for t in trials if t.batch_size == b]
    rows.append([b] + [sum(t.status == s for t in group) for s in st.STATUSES])
  lines += _table(["batch"] + list(st.STATUSES), rows)
  failed = [t for t in trials if t.status == "failed"]
  lines += [f"- failed `{t.run_id}`: {(t.error or '').splitlines()[-1] if t.error else 'no error recorded'}"
            for t in failed[:20]]
  return lines + ([""] if failed else [])


def _step_times(trials: Sequence[st.Trial]) -> dict[int, float]:
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
    v = t3.normalise_variant(t.variant)
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


def _series(t: st.Trial, key: str) -> tuple[list[float], list[float]]:
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


def _late_median(t: st.Trial, key: str) -> Optional[float]:
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


def _is_linear(t: st.Trial) -> bool:
  return "linear" in (t.params.get("lr_scaling"), t.config.get("lr_scaling"))


def _regimes_section(trials, baseline: Optional[rg.Baseline],
                     linear_scaled: Optional[Callable[[st.Trial], bool]]) -> list[str]:
  lines = ["## Regimes", ""]
  if baseline is None:
    return lines + ["No baseline given (`baseline=Baseline(...)`): regimes skipped.", ""]
  pred = linear_scaled or _is_linear
  linear = [t for t in trials if pred(t)]
  lines += [f"Baseline: B0 = {baseline.batch_size}, A = {baseline.accuracy:.4f}, ξ = {baseline.val_loss:.4f}, "
            f"ρ = {baseline.epochs:g} epochs, N = {baseline.num_train}. Large: ≥ 99.5%·A and ≤ 1.2·ξ within ρ "
            "epochs with linear LR scaling; huge: no technique reaches 99.5%·A (You et al. 2020 Defs 2.1–2.3).", ""]
  if not linear:
    lines += ["No linear-LR-scaled runs identified (pass `linear_scaled=`; by default runs whose params or config "
              "have `lr_scaling: linear`), so B_L is unknown.", ""]
  r = rg.classify_trials(baseline, linear, trials)
  lines += [f"- B_L = {_fmt(r.b_l)} (first failing tested batch above: {_fmt(r.b_l_next_fail)})",
            f"- B_H = {_fmt(r.b_h)} (first failing tested batch above: {_fmt(r.b_h_next_fail)})",
            f"- B_F = {r.b_f}", ""]
  if r.labels:
    lines += _table(["batch", "regime"], [[b, lab] for b, lab in r.labels.items()])
  lines += [f"- anomaly: {a}" for a in r.anomalies]
  return lines + ([""] if r.anomalies else [])


def _table3_section(trials, batch: Optional[int], baseline_batch: Optional[int]) -> list[str]:
  lines = ["## Table 3: optimizer × layer-wise variants", ""]
  if batch is None:
    multi = [b for b in {t.batch_size for t in trials}
             if len({t3.normalise_variant(t.variant) for t in trials if t.batch_size == b}) >= 2]
    batch = max(multi) if multi else None
  if batch is None:
    return lines + ["No batch size has runs of more than one variant.", ""]
  table = t3.build_table3(trials, batch, baseline_batch=baseline_batch)
  if not table.rows:
    return lines + [f"No runs at batch {batch}.", ""]
  return lines + [t3.render_markdown(table), "Cells: best final accuracy (%) of the non-diverged, stable runs; "
                  "'diverge' and 'unstable' as defined in docs/studies.md.", ""]


def write_report(source: Source, out_dir: Union[str, os.PathLike], *, target: Any = None,
                 baseline: Optional[rg.Baseline] = None,
                 linear_scaled: Optional[Callable[[st.Trial], bool]] = None, table3_batch: Optional[int] = None,
                 study: Optional[str] = None, title: str = "Batch-size study", max_curves: int = 8) -> str:
  """Writes ``out_dir/README.md`` and its PNG plots; returns the README path.

  ``target``: a ``Target``, dict or (metric, goal[, mode]); ``baseline``: enables the regimes section (and Table 3's
  baseline column); ``linear_scaled``: which trials used LR = η·B/B0 (default: ``lr_scaling == 'linear'`` in params
  or config); ``table3_batch``: Table 3's batch (default: the largest batch with runs of several variants).
  """
  out_dir = os.fspath(out_dir)
  os.makedirs(out_dir, exist_ok=True)
  trials = load_trials(source, study)
  steps_lines, fit = _steps_section(trials, as_target(target), out_dir)
  parts = [f"# {title}", "", f"{len(trials)} runs" + (f" of study `{study}`" if study else "") + ".", ""]
  parts += _runs_section(trials) + steps_lines + _accuracy_section(trials, out_dir)
  parts += _curves_section(trials, out_dir, max_curves) + _diffusion_section(trials, out_dir, max_curves)
  parts += _trust_section(trials, out_dir) + _noise_section(trials, out_dir, fit, max_curves)
  parts += _regimes_section(trials, baseline, linear_scaled)
  parts += _table3_section(trials, table3_batch, baseline.batch_size if baseline else None)
  path = os.path.join(out_dir, "README.md")
  with open(path, "w", encoding="utf-8") as f:
    f.write("\n".join(parts).rstrip() + "\n")
  return path
