"""The figure of the critical-batch-axes study (issue 42; the report is axes.py): B_crit with its bootstrap interval
against dataset size and against model size, at each setting's primary target and at the common secondary bar; a
setting without a measured B_crit is marked on the panel's floor.
"""

from __future__ import annotations

import math
from typing import Mapping, Optional, Sequence

from lamb_lars.configs.studies import critical_batch_axes as cba
from lamb_lars.study.analysis.axes_fits import COMMON_BAR, SettingResult


def _axis_x(name: str, axis: str) -> float:
  """A setting's place on an axis: its training examples N (data) or its parameters (model)."""
  s = cba.SETTINGS[name]
  return float(s["n"] if axis == "data" else cba.num_params(s["model"], s["width"]))


def _draw_measured(ax, results: Sequence[SettingResult], axis: str, shift: float, style: dict, label: str) -> None:
  """Each measured, finite B_crit of ``results`` on ``axis`` with its interval, at x × ``shift``; an interval open
  upwards (bootstrap resamples with B_crit = ∞) is drawn to 10× the estimate and ends in an arrow head."""
  rows = [
    r
    for r in results
    if r is not None and axis in cba.SETTINGS[r.name]["axes"] and r.measured and 0 < r.fit.b_crit < math.inf
  ]
  if not rows:
    return
  xs = [_axis_x(r.name, axis) * shift for r in rows]
  ys = [r.fit.b_crit for r in rows]
  tops = [r.interval.hi if r.interval and math.isfinite(r.interval.hi) else r.fit.b_crit * 10 for r in rows]
  bottoms = [r.interval.lo if r.interval and r.interval.lo > 0 else r.fit.b_crit / 10 for r in rows]
  ax.errorbar(
    xs,
    ys,
    yerr=[[y - b for y, b in zip(ys, bottoms)], [t - y for y, t in zip(ys, tops)]],
    capsize=4,
    label=label,
    **style,
  )
  open_top = [(x, t) for x, t, r in zip(xs, tops, rows) if not (r.interval and math.isfinite(r.interval.hi))]
  if open_top:
    ax.plot(*zip(*open_top), "^", color=style.get("color", "C0"))


def label_levels(xs: Sequence[float], min_ratio: float = 1.6) -> list[int]:
  """The text row (0 = lowest) of each label at log-axis positions ``xs`` (ascending), so that two labels whose x
  differ by less than the factor ``min_ratio`` never share a row: each takes the lowest row whose last label lies
  at least that factor to its left.

  Args:
    xs: the labels' x positions, ascending, all > 0.
    min_ratio: how far apart (as a ratio of x) two labels must be to share a row.

  Returns:
    One row index per position.
  """
  last: list[float] = []  # the x of the newest label in each row
  levels = []
  for x in xs:
    level = next((i for i, prev in enumerate(last) if x / prev >= min_ratio), len(last))
    if level == len(last):
      last.append(x)
    last[level] = x
    levels.append(level)
  return levels


def figure(
  results: Sequence[SettingResult], path: str, common: Optional[Mapping[str, Optional[SettingResult]]] = None
) -> str:
  """B_crit with its interval against dataset size (left) and parameters (right), log axes, shared y: at each
  setting's primary target (filled circles) and, when ``common`` is given, at the pre-registered common bar (98.0%;
  MLP 97.5%; open squares, drawn a little to the right). A setting whose primary-target fit is not a measurement (a
  rejected fit, or none) is marked by a cross on the panel's floor at its x, with its name; one not run is left out.
  The x ticks read in thousands (10K, 20K, 50K, …)."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  from matplotlib import ticker, transforms

  fig, axes = plt.subplots(1, 2, figsize=(9.5, 4.0), sharey=True)
  for ax, axis, xlabel in (
    (axes[0], "data", "training examples N (LeNet-5)"),
    (axes[1], "model", "parameters (55K examples)"),
  ):
    _draw_measured(ax, results, axis, 1.0, dict(fmt="o", color="C0"), "primary target")
    if common is not None:
      _draw_measured(ax, list(common.values()), axis, 1.12, dict(fmt="s", color="C1", mfc="none"), COMMON_BAR)
    floor = transforms.blended_transform_factory(ax.transData, ax.transAxes)
    unmeasured = []
    for r in results:
      if axis not in cba.SETTINGS[r.name]["axes"] or r.note == "not run":
        continue
      x = _axis_x(r.name, axis)
      if r.measured and 0 < r.fit.b_crit < math.inf:
        ax.annotate(r.name, (x, r.fit.b_crit), textcoords="offset points", xytext=(-4, 4), fontsize=7, ha="right")
      else:
        unmeasured.append((x, r.name))
    unmeasured.sort()
    for (x, name), level in zip(unmeasured, label_levels([x for x, _ in unmeasured])):
      ax.plot([x], [0.04], "x", color="C3", transform=floor, clip_on=False)
      ax.text(
        x,
        0.08 + 0.14 * level,
        f"{name}\nnot measured\nat its target",
        transform=floor,
        fontsize=6,
        ha="center",
        color="C3",
      )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.xaxis.set_major_locator(ticker.LogLocator(subs=(1.0, 2.0, 5.0)))  # 10K, 20K, 50K, …: a short log axis
    ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v / 1000:g}K"))
    ax.xaxis.set_minor_formatter(ticker.NullFormatter())
    ax.margins(x=0.12)
    ax.set_xlabel(xlabel)
    ax.grid(True, which="both", alpha=0.3)
  axes[0].set_ylabel("B_crit (95% bootstrap over seeds)")
  legend = {}  # one entry per series, from whichever panel drew it
  for ax in axes:
    for handle, label in zip(*ax.get_legend_handles_labels()):
      legend.setdefault(label, handle)
  if legend:
    axes[1].legend(list(legend.values()), list(legend), fontsize=7, loc="upper left")
  fig.suptitle("Critical batch along the data axis and the model axis (MNIST)")
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)
  return path
