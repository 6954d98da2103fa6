"""PNG figures for the study report (matplotlib's object API: no pyplot, no global backend switch).

Every function takes plain data, writes one PNG and returns its file name. Non-finite points are dropped.
"""
from __future__ import annotations

import math
import os
from typing import Mapping, Optional, Sequence

import numpy as np
from matplotlib.figure import Figure

from lamb_lars import io_utils
from lamb_lars.study.critical_batch import InverseLawFit, steps_model

_MAX_LEGEND = 16


def _finite(xs: Sequence[float], ys: Sequence[float], positive: bool = False) -> tuple[np.ndarray, np.ndarray]:
  x, y = np.asarray(xs, np.float64), np.asarray(ys, np.float64)
  keep = np.isfinite(x) & np.isfinite(y)
  if positive:
    keep &= (x > 0) & (y > 0)
  return x[keep], y[keep]


def _save(fig: Figure, out_dir: str, name: str) -> str:
  fig.tight_layout()
  io_utils.write_file_atomic(os.path.join(out_dir, name), lambda path: fig.savefig(path, dpi=110))
  return name


def _legend(ax, n: int) -> None:
  if 0 < n <= _MAX_LEGEND:
    ax.legend(fontsize=7)


def steps_vs_batch(out_dir: str, name: str, batches: Sequence[float], steps: Sequence[float],
                   fit: Optional[InverseLawFit] = None, ylabel: str = "steps to target") -> str:
  """Log-log steps-to-target with the fitted S(B) and the perfect-scaling line (slope −1 through the first point)."""
  fig = Figure(figsize=(6, 4.5))
  ax = fig.add_subplot()
  b, s = _finite(batches, steps, positive=True)
  ax.loglog(b, s, "o", label="measured (best trial)")
  if len(b):
    grid = np.geomspace(b.min() / 2, b.max() * 2, 200)
    ax.loglog(grid, s[0] * b[0] / grid, ":", color="gray", label="perfect scaling")
    if fit is not None:
      label = f"fit: S_min={fit.s_min:.3g}, B_crit={fit.b_crit:.3g}"
      ax.loglog(grid, steps_model(fit, grid), "-", label=label)
  ax.set_xlabel("batch size")
  ax.set_ylabel(ylabel)
  ax.grid(True, which="both", alpha=0.3)
  ax.legend(fontsize=8)
  return _save(fig, out_dir, name)


def accuracy_vs_batch(out_dir: str, name: str, series: Mapping[str, tuple[Sequence[float], Sequence[float]]],
                      ylabel: str = "final eval accuracy") -> str:
  """One line per optimizer: best final accuracy against batch size (log₂ axis)."""
  fig = Figure(figsize=(6, 4.5))
  ax = fig.add_subplot()
  for label, (b, a) in series.items():
    x, y = _finite(b, a, positive=True)
    ax.plot(x, y, "o-", label=label)
  ax.set_xscale("log", base=2)
  ax.set_xlabel("batch size")
  ax.set_ylabel(ylabel)
  ax.grid(True, alpha=0.3)
  _legend(ax, len(series))
  return _save(fig, out_dir, name)


def training_curves(out_dir: str, name: str, curves: Mapping[str, Sequence[Mapping]],
                    acc_key: str = "eval_accuracy", loss_key: str = "train_loss") -> str:
  """Accuracy against epoch (step if no epoch) and loss against step, one line per trial."""
  fig = Figure(figsize=(11, 4.2))
  ax_acc, ax_loss = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
  if len(curves) > 10:  # more lines than the default cycle has colours
    from matplotlib import colormaps
    colors = [colormaps["tab20"](i % 20) for i in range(len(curves))]
    ax_acc.set_prop_cycle(color=colors)
    ax_loss.set_prop_cycle(color=colors)
  for label, curve in curves.items():
    xkey = "epoch" if all(r.get("epoch") is not None for r in curve) else "step"
    x, y = _finite([r[xkey] for r in curve if r.get(acc_key) is not None],
                   [r[acc_key] for r in curve if r.get(acc_key) is not None])
    ax_acc.plot(x, y, label=label)
    ax_acc.set_xlabel(xkey)
    x, y = _finite([r["step"] for r in curve if r.get(loss_key) is not None],
                   [r[loss_key] for r in curve if r.get(loss_key) is not None], positive=True)
    ax_loss.plot(x, y, label=label)
  ax_acc.set_ylabel(acc_key)
  ax_loss.set_xlabel("step")
  ax_loss.set_ylabel(loss_key)
  ax_loss.set_yscale("log")
  for ax in (ax_acc, ax_loss):
    ax.grid(True, alpha=0.3)
  _legend(ax_acc, len(curves))
  return _save(fig, out_dir, name)


def series_plot(out_dir: str, name: str, series: Mapping[str, tuple[Sequence[float], Sequence[float]]],
                   xlabel: str, ylabel: str, hline: Optional[float] = None, hlabel: str = "",
                   logx: bool = True, logy: bool = True) -> str:
  """Several (x, y) series on log (or linear) axes, with an optional horizontal reference line."""
  fig = Figure(figsize=(6.5, 4.5))
  ax = fig.add_subplot()
  for label, (xs, ys) in series.items():
    x, y = _finite(xs, ys, positive=True)
    ax.plot(x, y, label=label)
  if hline is not None and math.isfinite(hline) and hline > 0:
    ax.axhline(hline, color="k", ls="--", label=hlabel)
  if logx:
    ax.set_xscale("log")
  if logy:
    ax.set_yscale("log")
  ax.set_xlabel(xlabel)
  ax.set_ylabel(ylabel)
  ax.grid(True, which="both", alpha=0.3)
  _legend(ax, len(series) + (hline is not None))
  return _save(fig, out_dir, name)
