"""The report's curve sections: accuracy vs batch size, training curves of the best trial per batch, distance from
initialisation against log t (Hoffer et al. 2017; You et al. 2020 Figs 11–12) and per-layer trust ratios.
Analysis layer: reads records only.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np

from lamb_lars.study.analysis import plots
from lamb_lars.study.analysis.markdown import pct, table
from lamb_lars.study.records import Trial

ACC_KEY = "eval_accuracy"


def final(t: Trial, key: str = ACC_KEY) -> Optional[float]:
  vals = [r[key] for r in sorted(t.curve, key=lambda r: r["step"]) if r.get(key) is not None]
  return float(vals[-1]) if vals else None


def best_per_batch(trials: Sequence[Trial], limit: int) -> dict[int, Trial]:
  """The finished trial with the best final accuracy at each batch size (at most ``limit`` sizes, spread out)."""
  best: dict[int, Trial] = {}
  for t in sorted(trials, key=lambda t: t.run_id):
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


def accuracy_section(trials, out_dir: str) -> list[str]:
  lines = ["## Accuracy vs batch size", ""]
  series: dict[str, dict[int, float]] = {}
  for t in trials:
    acc = final(t) if t.status == "done" else None
    if acc is None:
      continue
    label = f"{t.optimizer or '?'} {VARIANT_WORDS.get(t.variant, t.variant)}".strip()
    cur = series.setdefault(label, {})
    cur[t.batch_size] = max(acc, cur.get(t.batch_size, -math.inf))
  if not series:
    return []
  bs = sorted({b for s in series.values() for b in s})
  lines += table(["optimizer"] + [f"{b:,}" for b in bs],
                  [[k] + [pct(s.get(b)) for b in bs] for k, s in sorted(series.items())])
  lines += ["Each entry: the highest final test accuracy (%, at the last evaluation) among the finished trials of "
            "that optimizer and batch size; — = none finished.", ""]
  name = plots.accuracy_vs_batch(out_dir, "accuracy_vs_batch.png",
                                 {k: (sorted(s), [s[b] for b in sorted(s)]) for k, s in sorted(series.items())},
                                 title="Best final test accuracy against batch size")
  return lines + [f"![accuracy vs batch]({name})", ""]


def curves_section(trials, out_dir: str, limit: int, target: Optional[float] = None) -> list[str]:
  lines = ["## Training curves", ""]
  best = best_per_batch(trials, limit)
  if not best:
    return []
  name = plots.training_curves(out_dir, "training_curves.png",
                               {f"batch {b:,} ({t.optimizer})": t.curve for b, t in best.items()},
                               title="Training curves: the best trial per batch size", target=target)
  return lines + ["Per batch size, the trial with the highest final test accuracy (last evaluation)"
                  + (f"; dashed: the target, {100 * target:.1f}%." if target is not None else "."), "",
                  f"![training curves]({name})", ""]


def series(t: Trial, key: str) -> tuple[list[float], list[float]]:
  rows = [r for r in sorted(t.curve, key=lambda r: r["step"]) if r.get(key) is not None]
  return [r["step"] for r in rows], [r[key] for r in rows]


def diffusion_section(trials, out_dir: str, limit: int) -> list[str]:
  lines = ["## Distance from initialisation", ""]
  have = [t for t in trials if any(r.get("dist_from_init") is not None for r in t.curve)]
  if not have:
    return []
  best = best_per_batch(have, limit)
  name = plots.series_plot(out_dir, "dist_from_init.png",
                           {f"batch {b:,}": series(t, "dist_from_init") for b, t in best.items()},
                           "training step t (log scale)", "distance from initialisation ‖w_t − w_0‖ (log scale)",
                           title="Distance from initialisation (best trial per batch size)")
  return lines + ["log ‖w_t − w_0‖ against log t (Hoffer et al. 2017; You et al. 2020 Figs 11–12).", "",
                  f"![distance from init]({name})", ""]


def trust_section(trials, out_dir: str) -> list[str]:
  lines = ["## Trust ratios", ""]
  have = [t for t in trials if any(k.startswith("trust_ratio/") for r in t.curve for k in r)]
  if not have:
    return []
  t = max(have, key=lambda t: (t.batch_size, final(t) or -1.0, t.run_id))
  keys = sorted({k for r in t.curve for k in r if k.startswith("trust_ratio/")})
  name = plots.series_plot(out_dir, "trust_ratio.png", {k[len("trust_ratio/"):]: series(t, k) for k in keys},
                           "training step", "trust ratio ‖w‖/‖update direction‖ (log scale)", logx=False,
                           title=f"Per-layer trust ratios, batch {t.batch_size:,} ({t.optimizer})")
  return lines + [f"Run `{t.run_id}` (batch {t.batch_size}, {t.optimizer} {t.variant}), {len(keys)} layers.", "",
                  f"![trust ratio]({name})", ""]
