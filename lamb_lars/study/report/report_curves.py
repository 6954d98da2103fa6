"""The report's curve sections: accuracy vs batch size, training curves of one trial per batch, distance from
initialisation against log t (Hoffer et al. 2017; You et al. 2020 Figs 11–12) and per-layer trust ratios.
Report layer: reads records only.

Which trial stands for a group of trials (an optimizer at a batch size), ``select_on``:

* ``'validation'`` (the default of every report since 2026-11-26): the trial chosen on the validation split
  (selection.py), and as its number the mean final test accuracy of its replicate seeds when it has any, else its
  own. A group whose trials logged no validation metric falls back to the rule below, and the table marks it (†).
* ``'test'``: the trial with the highest final test accuracy, the rule of reports published before, which their
  manifests keep so that ``verify`` still recomputes them. It is biased upward: the maximum of k noisy test
  accuracies is selected along with its noise.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from lamb_lars.study.analysis import replicates
from lamb_lars.study.analysis.selection import choose
from lamb_lars.study.records import Trial
from lamb_lars.study.report import plots
from lamb_lars.study.report.markdown import pct, table

ACC_KEY = "eval_accuracy"


def final(t: Trial, key: str = ACC_KEY) -> Optional[float]:
  vals = [r[key] for r in sorted(t.curve, key=lambda r: r["step"]) if r.get(key) is not None]
  return float(vals[-1]) if vals else None


def representative(group: Sequence[Trial], select_on: str = "test") -> Optional[tuple[Trial, float, bool]]:
  """``(trial, final test accuracy, chosen on validation)`` standing for ``group`` (module docstring), or None
  when no trial of it finished with a test accuracy. The accuracy is the replicates' mean where they exist (with the
  chosen run itself when the group is one fixed-settings trial: replicates.seeds_of)."""
  if select_on == "validation":
    chosen = choose([t for t in group if t.phase != "replicate"])
    if chosen is not None:
      reps = replicates.seeds_of(group, chosen.run_id)  # its own run too when the group selected nothing
      s = replicates.accuracy_summary(reps) if reps else None
      value = s.mean if s is not None and s.n else final(chosen)
      if value is not None:
        return chosen, value, True
  done = [t for t in sorted(group, key=lambda t: t.run_id) if t.status == "done" and final(t) is not None]
  best = max(done, key=final, default=None)
  return (best, final(best), False) if best is not None else None


def best_per_batch(trials: Sequence[Trial], limit: int, select_on: str = "test") -> dict[int, Trial]:
  """One finished trial per batch size (at most ``limit`` sizes, spread out): the chosen one on validation, or the
  best final test accuracy (``select_on``, module docstring)."""
  best: dict[int, Trial] = {}
  if select_on == "validation":
    for b in sorted({t.batch_size for t in trials}):
      rep = representative([t for t in trials if t.batch_size == b], select_on)
      if rep is not None:
        best[b] = rep[0]
  for t in sorted(trials, key=lambda t: t.run_id):
    if t.batch_size in best and select_on == "validation":
      continue
    if t.status == "failed" or not t.curve:
      continue
    acc = final(t)
    cur = best.get(t.batch_size)
    if cur is None or (acc is not None and (final(cur) is None or acc > final(cur))):
      best[t.batch_size] = t
  keys = sorted(best)
  if len(keys) > limit:
    keys = [keys[i] for i in np.unique(np.linspace(0, len(keys) - 1, limit).round().astype(int))]
  return {b: best[b] for b in keys}


VARIANT_WORDS = {"original": "", "layerwise": "layer-wise", "layerwise_bound": "layer-wise + bound"}


def _label(t: Trial) -> str:
  return f"{t.optimizer or '?'} {VARIANT_WORDS.get(t.variant, t.variant)}".strip()


def accuracy_section(trials, out_dir: Optional[str], select_on: str = "test") -> list[str]:
  lines = ["## Accuracy vs batch size", ""]
  groups: dict[tuple[str, int], list[Trial]] = {}
  for t in trials:
    groups.setdefault((_label(t), t.batch_size), []).append(t)
  series: dict[str, dict[int, float]] = {}
  marked: set[tuple[str, int]] = set()
  for (label, b), group in sorted(groups.items()):
    rep = representative(group, select_on)
    if rep is not None:
      series.setdefault(label, {})[b] = rep[1]
      if select_on == "validation" and not rep[2]:
        marked.add((label, b))
  if not series:
    return []
  bs = sorted({b for s in series.values() for b in s})
  lines += table(
    ["optimizer"] + [f"{b:,}" for b in bs],
    [
      [k] + [pct(s.get(b)) + ("†" if (k, b) in marked else "") if b in s else pct(None) for b in bs]
      for k, s in sorted(series.items())
    ],
  )
  if select_on == "validation":
    lines += [
      "Each entry: the final test accuracy (%, last evaluation) of the trial chosen on the validation split "
      "among that optimizer's trials at that batch size, as the mean over its replicate seeds where it has "
      "them; † = no validation metric to choose on, so the highest final test accuracy (biased upward); "
      "— = none finished.",
      "",
    ]
    title = "Final test accuracy against batch size (chosen on validation)"
  else:
    lines += [
      "Each entry: the highest final test accuracy (%, at the last evaluation) among the finished trials of "
      "that optimizer and batch size; — = none finished.",
      "",
    ]
    title = "Best final test accuracy against batch size"
  name = plots.accuracy_vs_batch(
    out_dir,
    "accuracy_vs_batch.png",
    {k: (sorted(s), [s[b] for b in sorted(s)]) for k, s in sorted(series.items())},
    title=title,
  )
  return lines + [f"![accuracy vs batch]({name})", ""]


def points_section(trials: Sequence[Trial], points: Sequence[tuple], num_train: int, select_on: str) -> list[str]:
  """The paper's huge-batch numbers (paper.POINTS) beside this study's, one row per setting it ran."""
  if not points:
    return []
  rows = []
  for batch, opt, acc, what in points:
    batch = num_train if batch == "full" else batch
    group = [
      t
      for t in trials
      if t.batch_size == batch and opt in ("any", t.optimizer) and (select_on == "validation" or t.phase != "replicate")
    ]
    got = [t for t in group if t.status == "done" and t.last(ACC_KEY) is not None and t.phase != "replicate"]
    rep = representative(group, select_on)
    if rep is not None:
      mark = "†" if select_on == "validation" and not rep[2] else ""
      rows.append(
        [f"{opt} at {batch}", what, f"{pct(rep[1])}{mark} (`{rep[0].run_id}`, {len(got)} finished trials)", pct(acc, 1)]
      )
  if not rows:
    return []
  val = select_on == "validation"
  measured = (
    "the final test accuracy (last evaluation) of the trial chosen on the validation split among that "
    "optimizer's trials at that batch size, as the mean over its replicate seeds where it has them; † = no "
    "validation metric, so the highest final test accuracy (biased upward). The"
    if val
    else "the highest final test accuracy (last evaluation) among the finished trials of that optimizer and "
    "batch size; the"
  )
  return (
    ["## Huge-batch results next to the paper", ""]
    + table(["setting", "paper's recipe", f"measured: {'' if val else 'best '}final test acc (%)", "paper (%)"], rows)
    + [f"Measured = {measured} paper's settings this study did not run are not listed.", ""]
  )


def curves_section(
  trials, out_dir: Optional[str], limit: int, target: Optional[float] = None, select_on: str = "test"
) -> list[str]:
  lines = ["## Training curves", ""]
  best = best_per_batch(trials, limit, select_on)
  if not best:
    return []
  validation = select_on == "validation"
  name = plots.training_curves(
    out_dir,
    "training_curves.png",
    {f"batch {b:,} ({t.optimizer})": t.curve for b, t in best.items()},
    title="Training curves: the " + ("chosen" if validation else "best") + " trial per batch size",
    target=target,
  )
  what = (
    "the trial chosen on the validation split (the highest final test accuracy where no trial logged one)"
    if validation
    else "the trial with the highest final test accuracy (last evaluation)"
  )
  return lines + [
    f"Per batch size, {what}" + (f"; dashed: the target, {100 * target:.1f}%." if target is not None else "."),
    "",
    f"![training curves]({name})",
    "",
  ]


def series(t: Trial, key: str) -> tuple[list[float], list[float]]:
  rows = [r for r in sorted(t.curve, key=lambda r: r["step"]) if r.get(key) is not None]
  return [r["step"] for r in rows], [r[key] for r in rows]


def diffusion_section(trials, out_dir: Optional[str], limit: int) -> list[str]:
  lines = ["## Distance from initialisation", ""]
  have = [t for t in trials if any(r.get("dist_from_init") is not None for r in t.curve)]
  if not have:
    return []
  best = best_per_batch(have, limit)
  name = plots.series_plot(
    out_dir,
    "dist_from_init.png",
    {f"batch {b:,}": series(t, "dist_from_init") for b, t in best.items()},
    "training step t (log scale)",
    "distance from initialisation ‖w_t − w_0‖ (log scale)",
    title="Distance from initialisation (best trial per batch size)",
  )
  return lines + [
    "log ‖w_t − w_0‖ against log t (Hoffer et al. 2017; You et al. 2020 Figs 11–12).",
    "",
    f"![distance from init]({name})",
    "",
  ]


def trust_section(trials, out_dir: Optional[str]) -> list[str]:
  lines = ["## Trust ratios", ""]
  have = [t for t in trials if any(k.startswith("trust_ratio/") for r in t.curve for k in r)]
  if not have:
    return []
  t = max(have, key=lambda t: (t.batch_size, final(t) or -1.0, t.run_id))
  keys = sorted({k for r in t.curve for k in r if k.startswith("trust_ratio/")})
  name = plots.series_plot(
    out_dir,
    "trust_ratio.png",
    {k[len("trust_ratio/") :]: series(t, k) for k in keys},
    "training step",
    "trust ratio ‖w‖/‖update direction‖ (log scale)",
    logx=False,
    title=f"Per-layer trust ratios, batch {t.batch_size:,} ({t.optimizer})",
  )
  return lines + [
    f"Run `{t.run_id}` (batch {t.batch_size}, {t.optimizer} {t.variant}), {len(keys)} layers.",
    "",
    f"![trust ratio]({name})",
    "",
  ]
