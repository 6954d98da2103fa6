"""PNG figures for the study report (matplotlib's object API: no pyplot, no global backend switch).

Every function takes plain data, writes one PNG and returns its file name. Non-finite points are dropped.
Paper-ready by construction: a title, axis labels in words with units (accuracy in %), log axes with plain-number
labels on major ticks only, legends in words, and a colour + marker (+ line style) per series that never repeats
within a figure (``series_styles``).
"""

from __future__ import annotations

import math
import os
import textwrap
from typing import Mapping, Optional, Sequence

import numpy as np
from matplotlib import colormaps, ticker
from matplotlib.figure import Figure

from lamb_lars.common import io_utils
from lamb_lars.study.analysis.critical_batch import InverseLawFit, steps_model

_MAX_LEGEND = 16
_COLORS = [colormaps["tab10"](i) for i in range(10)]
_MARKERS = ("o", "s", "^", "D", "v", "P", "X")  # 7 markers: coprime with the 10 colours
_LINESTYLES = ("-", "--", ":", "-.")


def series_styles(labels: Sequence[str]) -> dict[str, dict]:
  """A distinct (colour, marker, line style) per label, never repeated within the figure.

  Labels ``"<group> <variant>[: note]"`` (e.g. ``"adam layer-wise + bound: 99.0%"``) with several groups and
  several variants get a colour per group and a marker + line style per variant, so the same variant looks the
  same across groups (You et al. 2020 Table 3: optimizer × variant). Otherwise series i gets colour i mod 10 and
  marker i mod 7: distinct pairs for up to 70 series.
  """
  keys = [label.split(":")[0].strip() for label in labels]
  groups = list(dict.fromkeys(k.split(" ", 1)[0] for k in keys))
  variants = list(dict.fromkeys(k.split(" ", 1)[1] if " " in k else "" for k in keys))
  pairs = {(k.split(" ", 1)[0], k.split(" ", 1)[1] if " " in k else "") for k in keys}
  grouped = (
    1 < len(groups) <= len(_COLORS)
    and len(variants) > 1
    and len(pairs) == len(labels)
    and len(variants) <= len(_MARKERS) * len(_LINESTYLES)
  )
  out = {}
  for i, (label, key) in enumerate(zip(labels, keys)):
    if grouped:
      g, v = key.split(" ", 1)[0], key.split(" ", 1)[1] if " " in key else ""
      j = variants.index(v)
      out[label] = dict(
        color=_COLORS[groups.index(g)], marker=_MARKERS[j % len(_MARKERS)], linestyle=_LINESTYLES[j % len(_LINESTYLES)]
      )  # (marker, style) distinct for j < 28
    else:
      out[label] = dict(
        color=_COLORS[i % len(_COLORS)],
        marker=_MARKERS[i % len(_MARKERS)],
        linestyle=_LINESTYLES[(i // 70) % len(_LINESTYLES)],
      )
  return out


def _finite(xs: Sequence[float], ys: Sequence[float], positive: bool = False) -> tuple[np.ndarray, np.ndarray]:
  x, y = np.asarray(xs, np.float64), np.asarray(ys, np.float64)
  keep = np.isfinite(x) & np.isfinite(y)
  if positive:
    keep &= (x > 0) & (y > 0)
  return x[keep], y[keep]


def _plain_number(v: float, _pos=None) -> str:
  """Tick label: 256, 8192, 0.5, 1e-05 → plain text, no exponents for everyday magnitudes."""
  if v <= 0 or not math.isfinite(v):
    return ""
  if 1e-3 <= v < 1e6:  # whole numbers with separators; others with the digits that tell 1.5, 2 and 2.5 apart
    return f"{v:,.0f}" if v >= 1 and abs(v - round(v)) < 1e-9 * v else f"{v:.3g}"
  return f"{v:.0e}"


def _log_axis(axis, base: int = 10) -> None:
  """Major ticks at 1-2-5 (base 10) or powers of two, labelled as plain numbers; minor ticks unlabelled."""
  subs = (1.0, 2.0, 5.0) if base == 10 else (1.0,)
  axis.set_major_locator(ticker.LogLocator(base=base, subs=subs, numticks=12))
  axis.set_major_formatter(ticker.FuncFormatter(_plain_number))
  axis.set_minor_formatter(ticker.NullFormatter())


def _save(fig: Figure, out_dir: Optional[str], name: str) -> str:
  """Writes the figure to ``out_dir/name`` and returns ``name``; with ``out_dir=None`` only returns ``name`` (the
  report's text without its figures, as ``verify`` recomputes it)."""
  if out_dir is None:
    return name
  fig.tight_layout()
  io_utils.write_file_atomic(os.path.join(out_dir, name), lambda path: fig.savefig(path, dpi=110))
  return name


def _legend(ax, n: int, **kw) -> None:
  if 0 < n <= _MAX_LEGEND:
    ax.legend(fontsize=7, **kw)


def steps_vs_batch(
  out_dir: Optional[str],
  name: str,
  batches: Sequence[float],
  steps: Sequence[float],
  fit: Optional[InverseLawFit] = None,
  ylabel: str = "training steps to reach the target",
  *,
  title: str = "Steps to target against batch size",
  target: str = "",
  not_measured: str = "",
) -> str:
  """Log-log steps-to-target with the fitted S(B) and the perfect-scaling line (slope −1 through the first point).
  ``target`` (e.g. ``"99.0% test accuracy"``) is drawn into the title and the y label. ``not_measured``: why the
  fit does not measure B_crit (critical_batch.why_not_measured); then no curve and no number of it are drawn, and
  the legend says "critical batch B_crit: not measured (why)"."""
  fig = Figure(figsize=(6.5, 4.6))
  ax = fig.add_subplot()
  b, s = _finite(batches, steps, positive=True)
  ax.loglog(b, s, "o", color=_COLORS[0], label="measured: fewest steps of any trial")
  if len(b):
    grid = np.geomspace(b.min() / 2, b.max() * 2, 200)
    ax.loglog(grid, s[0] * b[0] / grid, ":", color="gray", label="perfect scaling (steps ∝ 1/batch)")
    if fit is not None:
      b_crit = "∞" if math.isinf(fit.b_crit) else f"{fit.b_crit:,.0f}"
      label = (
        f"fit S(B) = S_min·(1 + B_crit/B): S_min = {fit.s_min:,.0f} steps, critical batch B_crit = {b_crit} examples"
      )
      ax.loglog(grid, steps_model(fit, grid), "-", color=_COLORS[1], label=label)
    if not_measured:
      text = textwrap.fill(f"critical batch B_crit: not measured ({not_measured})", 70)
      ax.plot([], [], " ", label=text)
  ax.set_xscale("log", base=2)
  _log_axis(ax.xaxis, base=2)
  _log_axis(ax.yaxis)
  ax.set_xlabel("batch size (examples)")
  ax.set_ylabel(f"training steps to reach {target}" if target else ylabel)
  ax.set_title(f"Steps to reach {target} against batch size" if target else title, fontsize=10)
  ax.grid(True, which="both", alpha=0.3)
  ax.legend(fontsize=7)
  return _save(fig, out_dir, name)


def accuracy_vs_batch(
  out_dir: Optional[str],
  name: str,
  series: Mapping[str, tuple[Sequence[float], Sequence[float]]],
  ylabel: str = "final test accuracy (%)",
  *,
  title: str = "Final test accuracy against batch size",
) -> str:
  """One line per optimizer: accuracy (a fraction, drawn in %) against batch size (log₂ axis)."""
  fig = Figure(figsize=(6.5, 4.6))
  ax = fig.add_subplot()
  styles = series_styles(list(series))
  for label, (b, a) in series.items():
    x, y = _finite(b, a, positive=True)
    ax.plot(x, 100 * y, label=label, markersize=5, **styles[label])
  ax.set_xscale("log", base=2)
  _log_axis(ax.xaxis, base=2)
  ax.set_xlabel("batch size (examples)")
  ax.set_ylabel(ylabel)
  ax.set_title(title, fontsize=10)
  ax.grid(True, alpha=0.3)
  _legend(ax, len(series), loc="best", ncol=2 if len(series) > 8 else 1)
  return _save(fig, out_dir, name)


_WORDS = {
  "eval_accuracy": "test accuracy (%)",
  "validation_accuracy": "validation accuracy (%)",
  "train_loss": "training loss (log scale)",
  "eval_loss": "test loss (log scale)",
  "validation_loss": "validation loss (log scale)",
}


def training_curves(
  out_dir: Optional[str],
  name: str,
  curves: Mapping[str, Sequence[Mapping]],
  acc_key: str = "eval_accuracy",
  loss_key: str = "train_loss",
  *,
  title: str = "Training curves",
  target: Optional[float] = None,
) -> str:
  """Accuracy (%) against epoch (step if no epoch) and loss against step, one line per trial; ``target`` (a
  fraction of ``acc_key``) is drawn as a dashed line on the accuracy panel."""
  fig = Figure(figsize=(11, 4.4))
  ax_acc, ax_loss = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
  styles = series_styles(list(curves))
  xkey = "step"
  for label, curve in curves.items():
    xkey = "epoch" if all(r.get("epoch") is not None for r in curve) else "step"
    style = dict(styles[label], markersize=4, markevery=0.1)
    x, y = _finite(
      [r[xkey] for r in curve if r.get(acc_key) is not None], [r[acc_key] for r in curve if r.get(acc_key) is not None]
    )
    ax_acc.plot(x, 100 * y, label=label, **style)
    x, y = _finite(
      [r["step"] for r in curve if r.get(loss_key) is not None],
      [r[loss_key] for r in curve if r.get(loss_key) is not None],
      positive=True,
    )
    ax_loss.plot(x, y, label=label, **style)
  if target is not None and math.isfinite(target):
    ax_acc.axhline(100 * target, color="k", ls="--", lw=1, label=f"target {100 * target:.1f}%")
  ax_acc.set_xlabel(xkey)
  ax_acc.set_ylabel(_WORDS.get(acc_key, acc_key))
  ax_loss.set_xlabel("training step")
  ax_loss.set_ylabel(_WORDS.get(loss_key, loss_key))
  ax_loss.set_yscale("log")
  _log_axis(ax_loss.yaxis)
  for ax in (ax_acc, ax_loss):
    ax.grid(True, alpha=0.3)
  fig.suptitle(title, fontsize=10)
  _legend(ax_acc, len(curves) + (target is not None))
  return _save(fig, out_dir, name)


def series_plot(
  out_dir: Optional[str],
  name: str,
  series: Mapping[str, tuple[Sequence[float], Sequence[float]]],
  xlabel: str,
  ylabel: str,
  hline: Optional[float] = None,
  hlabel: str = "",
  logx: bool = True,
  logy: bool = True,
  *,
  title: str = "",
) -> str:
  """Several (x, y) series on log (or linear) axes, with an optional horizontal reference line."""
  fig = Figure(figsize=(6.5, 4.6))
  ax = fig.add_subplot()
  styles = series_styles(list(series))
  for label, (xs, ys) in series.items():
    x, y = _finite(xs, ys, positive=True)
    ax.plot(x, y, label=label, markersize=3, markevery=0.1, **styles[label])
  if hline is not None and math.isfinite(hline) and hline > 0:
    ax.axhline(hline, color="k", ls="--", label=hlabel)
  if logx:
    ax.set_xscale("log")
    _log_axis(ax.xaxis)
  if logy:
    ax.set_yscale("log")
    _log_axis(ax.yaxis)
  ax.set_xlabel(xlabel)
  ax.set_ylabel(ylabel)
  if title:
    ax.set_title(title, fontsize=10)
  ax.grid(True, which="both", alpha=0.3)
  _legend(ax, len(series) + (hline is not None))
  return _save(fig, out_dir, name)


def cbs_trajectory(
  out_dir: Optional[str], name: str, cbs: Sequence, base_batch: int, b_simple: Sequence[Optional[float]]
) -> str:
  """CBS(t) as brackets [low, high] (a point with no passing batch is drawn at B0; a censored one with an upward
  triangle: CBS ≥ its top) and B_simple(t) against the branch point in epochs, log y (``cbs``: CriticalBatch)."""
  fig = Figure(figsize=(6.5, 4.6))
  ax = fig.add_subplot()
  x = np.asarray([c.point for c in cbs], np.float64)
  lo = np.asarray([c.low or base_batch for c in cbs], np.float64)
  hi = np.asarray([c.high or base_batch for c in cbs], np.float64)
  ax.errorbar(
    x,
    lo,
    yerr=[np.zeros_like(lo), hi - lo],
    fmt="o",
    color=_COLORS[0],
    capsize=4,
    label="CBS(t) by branching: bracket [low, high]",
  )
  up = [c.censored for c in cbs]
  if any(up):
    ax.plot(x[up], hi[up], "^", color=_COLORS[0], markersize=8, label="censored: CBS ≥ largest tested batch")
  bx, by = _finite(x, [np.nan if v is None else v for v in b_simple], positive=True)
  if len(bx):
    ax.plot(bx, by, "s--", color=_COLORS[1], label="B_simple(t), gradient noise scale of the reference")
  ax.set_yscale("log", base=2)
  _log_axis(ax.yaxis, base=2)
  ax.set_xscale("log")
  _log_axis(ax.xaxis)
  ax.set_xlabel("branch point: training progress of the reference (epochs)")
  ax.set_ylabel("batch size (examples)")
  ax.set_title("Critical batch over training (Merrill et al. 2025) and B_simple", fontsize=10)
  ax.grid(True, which="both", alpha=0.3)
  ax.legend(fontsize=7)
  return _save(fig, out_dir, name)
