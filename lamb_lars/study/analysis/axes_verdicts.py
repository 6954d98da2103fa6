"""The verdict rule of the critical-batch-axes study (issue 42; the report is axes.py): Golmant et al. 2018 and
Zhang et al. 2024 judged agrees / differs / inconclusive from bootstrap intervals of the slopes of log B_crit along
each axis and of the difference of the axes' log spreads (``axis_statistics``, ``verdicts``), under two readings of
"data size": as run (the same examples at every N) and fixed epochs (the points re-censored at 60 passes over each N,
``fixed_epoch_points``); ``claims_section`` is the report's text of both.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import zlib
from typing import Mapping, Sequence

import numpy as np

from lamb_lars.configs.studies import critical_batch_axes as cba
from lamb_lars.study.analysis import precision, scaling_fit
from lamb_lars.study.analysis.axes_fits import Points, _raw_b_crit, measured_b_crit, reached_batches

# ---- the two claims, from the intervals ----
# The verdict rule (written into the code before any cross-setting result was computed; the per-part studies were
# running): every statistic is computed per bootstrap resample, each setting's seeds resampled per batch
# independently of the other settings (the settings share no trial), and the verdict reads its 95% percentile
# interval (nearest rank, as scaling_fit): an interval wholly on one side of 0 decides, one that straddles 0 is
# inconclusive. A resample where a setting has no fit is dropped (counted); a statistic that is not finite in more
# than ``MAX_UNBOUNDED`` of the kept resamples (a B_crit of ∞: perfect scaling up to the largest batch) is
# undecided, whatever its interval.
#
# Settings without a measured B_crit (added 2026-11-28, after the first part, data7500, was in and before any
# statistic had the settings it needs; the rule is the one the ladder folders apply since issue 41): a setting
# whose fit is rejected by its own censored points (``measured_b_crit``) has no B_crit to compare, so every
# statistic leaves it out and says so. A statistic is computed only when every setting on its axes has run and at
# least ``MIN_MEASURED`` of them (all three LeNet-5 widths for the width slope) have a measured B_crit; otherwise
# the verdicts that read it are inconclusive. A target that large batches do not reach on small data is reported
# (``reach``) as a finding of its own, not tuned away.
LEVEL = 0.95
MAX_UNBOUNDED = 0.025
MIN_MEASURED = 3
LENET_WIDTHS = ("lenet5_w0.5", "lenet5", "lenet5_w2")  # model size within one family (Zhang et al.'s reading)
FIXED_EPOCHS = cba.LIMIT_EXAMPLES / cba.FULL  # the fixed-epoch reading's step limit: 60 epochs of N


def recensor(points: Points, limit_examples: float) -> Points:
  """The points as if every trial had stopped at ``limit_examples`` examples: a seed that needed more steps than
  ``limit_examples``/B, or was censored beyond them, becomes a censored point at that limit."""
  out: Points = {}
  for b, pts in points.items():
    lim = float(limit_examples) / float(b)
    out[b] = [(lim, True) if s > lim else (s, c) for s, c in pts]
  return out


def fixed_epoch_points(points: Points, n: int, epochs: float = FIXED_EPOCHS) -> Points:
  """The fixed-epoch reading of "data size" (Golmant et al. train subsets for a fixed number of epochs): the
  step limit is ``epochs`` passes over the setting's own N examples, not the same number of examples at every N
  (as this study runs); the points re-censored there (``recensor``)."""
  return recensor(points, epochs * n)


def resampled_b_crit(
  points_by_setting: Mapping[str, Points], num: int = precision.NUM_RESAMPLES, seed: int = 0
) -> dict[str, np.ndarray]:
  """{setting: B_crit per resample, nan where that resample has no fit}: resample r draws each setting's seeds per
  batch with replacement (its own generator per setting, seeded by its name) and refits. A setting's draws depend
  only on its name and points, so the readings that give a setting the same points share its draws (computed once,
  ``_setting_draws``). Each statistic drops the resamples where one of its own settings has no fit (``_kept``), not
  those of settings it does not read."""
  return {
    k: _setting_draws(k, tuple((b, tuple(v[b])) for b in sorted(v)), num, seed).copy()
    for k, v in points_by_setting.items()
    if v
  }


@functools.lru_cache(maxsize=256)
def _setting_draws(name: str, points: tuple, num: int, seed: int) -> np.ndarray:
  """One setting's ``num`` resampled B_crit (``points``: ((batch, ((steps, censored), …)), …) in batch order)."""
  rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
  vals = np.full(num, np.nan)
  for r in range(num):
    bs, ys, cs = [], [], []
    for b, pts in points:
      for j in rng.integers(0, len(pts), len(pts)):
        bs.append(b)
        ys.append(pts[j][0])
        cs.append(pts[j][1])
    try:
      vals[r] = scaling_fit.fit(bs, ys, cs).b_crit
    except ValueError:
      pass
  vals.setflags(write=False)
  return vals


def _kept(draws: Mapping[str, np.ndarray], names: Sequence[str]) -> np.ndarray:
  """The resamples where every one of ``names`` has a fit (a boolean mask)."""
  return np.all([~np.isnan(draws[k]) for k in names], axis=0)


def _slope(x: Sequence[float], y: np.ndarray) -> np.ndarray:
  """OLS slope of log y on log x per resample (rows of ``y``: settings); ∞ B_crit gives a non-finite slope."""
  lx = np.log(np.asarray(x, np.float64))
  lx = lx - lx.mean()
  with np.errstate(invalid="ignore", divide="ignore"):
    ly = np.log(y)
    return (lx[:, None] * (ly - ly.mean(axis=0))).sum(axis=0) / (lx**2).sum()


def _log_spread(y: np.ndarray) -> np.ndarray:
  """The standard deviation (ddof 1) of log B_crit over the settings per resample (rows: settings): unlike the
  range max/min, it does not grow with the number of settings on an axis (5 models, 4 dataset sizes)."""
  with np.errstate(invalid="ignore", divide="ignore"):
    ly = np.log(y)
    return np.sqrt(((ly - ly.mean(axis=0)) ** 2).sum(axis=0) / (y.shape[0] - 1))


@dataclasses.dataclass(frozen=True)
class Statistic:
  """A statistic's point value (on the fits to every seed), its percentile interval over resamples, the share of
  resamples where it is not finite, and the sign its interval decides (+1, −1, or 0: straddles 0 or unbounded)."""

  name: str
  value: float
  lo: float
  hi: float
  unbounded: float
  num: int
  dropped: int = 0  # resamples left out: one of the statistic's settings had no fit there

  @property
  def sign(self) -> int:
    if self.num == 0 or self.unbounded > MAX_UNBOUNDED or not (math.isfinite(self.lo) and math.isfinite(self.hi)):
      return 0
    return 1 if self.lo > 0 else -1 if self.hi < 0 else 0

  def text(self) -> str:
    if self.num == 0:
      return f"{self.name}: no resample"
    unb = f"; not finite in {self.unbounded:.0%} of resamples" if self.unbounded else ""
    drop = f"; {self.dropped} resamples without a fit left out" if self.dropped else ""
    iv = precision.interval_text(self.lo, self.hi, sign=True)
    return f"{self.name} = {precision.significant(self.value, sign=True)} {iv}{unb}{drop}"


def _statistic(name: str, value: float, draws: np.ndarray, dropped: int = 0) -> Statistic:
  fin = np.sort(draws[np.isfinite(draws)])
  if draws.size == 0:
    return Statistic(name, value, math.nan, math.nan, 1.0, 0, dropped)
  unbounded = float(np.mean(~np.isfinite(draws)))
  a = (1.0 - LEVEL) / 2.0
  v = np.sort(np.where(np.isfinite(draws), draws, np.inf))  # ±∞ and nan sort to the top end: conservative
  w = np.ones_like(v)
  lo, hi = (precision.quantile(v, w, a), precision.quantile(v, w, 1.0 - a)) if fin.size else (math.nan,) * 2
  return Statistic(name, value, lo, hi, unbounded, int(draws.size), dropped)


def axis_statistics(
  points_by_setting: Mapping[str, Points],
  num: int = precision.NUM_RESAMPLES,
  seed: int = 0,
  exclude: Sequence[str] = (),
  include_rejected: bool = False,
) -> tuple[dict[str, Statistic], int]:
  """The statistics the verdicts read, each with its bootstrap interval (``resampled_b_crit``):

  * ``data slope``: d log B_crit / d log N over the data axis (LeNet-5 on N = 7.5K … 55K);
  * ``model slope (LeNet-5 widths)``: d log B_crit / d log(parameters) over LeNet-5 at widths 0.5, 1, 2;
  * ``data − |model| slope``: the first minus the absolute second (> 0: B_crit follows the data more);
  * ``model − data log spread``: the sd of log B_crit over the model axis (every family) minus the same over the
    data axis (> 0: B_crit moves more across models than across dataset sizes).

  Each statistic reads only the settings with a measured B_crit (``measured_b_crit``) that are not in ``exclude``
  (claims_section excludes a setting not measured in either reading of "data size"), and is left out unless every
  setting on its axes has run and ``MIN_MEASURED`` of them (all three widths for the width slope) are usable.
  ``include_rejected``: a rejected fit's B_crit is used as if measured (the sensitivity row). Returns ({name:
  Statistic}, the resamples any statistic left out)."""
  ran = {k for k, v in points_by_setting.items() if v}
  fits = {}
  for k in sorted(ran - set(exclude)):
    bc = _raw_b_crit(points_by_setting[k]) if include_rejected else measured_b_crit(points_by_setting[k])[0]
    if bc is not None:
      fits[k] = bc
  draws = resampled_b_crit({k: v for k, v in points_by_setting.items() if k in fits}, num, seed)
  params = {k: cba.num_params(cba.SETTINGS[k]["model"], cba.SETTINGS[k]["width"]) for k in cba.SETTINGS}

  def usable(names: Sequence[str], need: int) -> list[str]:
    """The usable settings among ``names`` when all have run and at least ``need`` are usable, else []."""
    measured = [k for k in names if k in fits]
    return measured if all(k in ran for k in names) and len(measured) >= need else []

  data = usable([k for k in cba.SETTINGS if "data" in cba.SETTINGS[k]["axes"]], MIN_MEASURED)
  model = usable([k for k in cba.SETTINGS if "model" in cba.SETTINGS[k]["axes"]], MIN_MEASURED)
  widths = usable(LENET_WIDTHS, len(LENET_WIDTHS))
  xd, xm = [cba.SETTINGS[k]["n"] for k in data], [params[k] for k in widths]
  out: dict[str, Statistic] = {}
  dropped = np.zeros(num, bool)

  def add(key: str, label: str, names: Sequence[str], fn) -> None:
    """``fn(source)`` on the point fits and on the resamples where every one of ``names`` has a fit."""
    keep = _kept(draws, names)
    dropped[~keep] = True
    sub = {k: v[keep] for k, v in draws.items()}
    out[key] = _statistic(label, float(fn(fits)[0]), fn(sub), int((~keep).sum()))

  def stack(names, source):
    return np.array([np.atleast_1d(source[k]) for k in names], np.float64)

  if data:
    add("data slope", "data slope", data, lambda src: _slope(xd, stack(data, src)))
  if widths:
    add("model slope", "model slope (LeNet-5 widths)", widths, lambda src: _slope(xm, stack(widths, src)))
  if data and widths:
    add(
      "data - |model| slope",
      "data − |model| slope",
      data + widths,
      lambda src: _slope(xd, stack(data, src)) - np.abs(_slope(xm, stack(widths, src))),
    )
  if data and model:
    add(
      "spread",
      "model − data log spread",
      sorted(set(data) | set(model)),
      lambda src: _log_spread(stack(model, src)) - _log_spread(stack(data, src)),
    )
  return out, int(dropped.sum())


@dataclasses.dataclass(frozen=True)
class ClaimVerdict:
  paper: str
  claim: str
  verdict: str  # 'agrees' | 'differs' | 'inconclusive'
  reason: str


GOLMANT = ("Golmant et al. 2018", "B_crit depends more on the model (architecture) than on the dataset size")
ZHANG = ("Zhang et al. 2024", "B_crit grows with the data size and hardly with the model size")


def verdicts(stats: Mapping[str, Statistic]) -> list[ClaimVerdict]:
  """Golmant et al.: agrees when the model − data log spread's interval lies above 0, differs when below,
  inconclusive otherwise. Zhang et al.: agrees when the data slope's interval lies above 0 and the data − |model|
  slope's above 0; differs when the data slope's lies below 0 or the data − |model| slope's below 0; inconclusive
  otherwise. Each reason quotes the intervals it read."""
  out = []
  sp = stats.get("spread")
  if sp is None:
    out.append(
      ClaimVerdict(
        *GOLMANT,
        "inconclusive",
        f"a data-axis or model-axis setting has not run, or fewer than {MIN_MEASURED} on an axis have a measured "
        "B_crit.",
      )
    )
  else:
    v = {1: "agrees", -1: "differs", 0: "inconclusive"}[sp.sign]
    why = {
      1: "B_crit moves more across the models than across the dataset sizes",
      -1: "B_crit moves more across the dataset sizes than across the models",
      0: "the interval includes 0 or is unbounded: the two spreads are not told apart",
    }[sp.sign]
    out.append(ClaimVerdict(*GOLMANT, v, f"{why} ({sp.text()}, natural-log units)."))
  ds, gap = stats.get("data slope"), stats.get("data - |model| slope")
  if ds is not None and ds.sign == -1 and gap is None:  # falling with N refutes the claim whatever the widths say
    out.append(ClaimVerdict(*ZHANG, "differs", f"B_crit falls with N ({ds.text()}; slope of log B_crit on log N)."))
  elif ds is None or gap is None:
    out.append(
      ClaimVerdict(
        *ZHANG,
        "inconclusive",
        f"a data-axis or LeNet-5-width setting has not run, or fewer than {MIN_MEASURED} data-axis settings or "
        "not all three widths have a measured B_crit.",
      )
    )
  else:
    if ds.sign == 1 and gap.sign == 1:
      v, why = "agrees", "B_crit grows with N, and faster than with LeNet-5's parameters"
    elif ds.sign == -1 or gap.sign == -1:
      v = "differs"
      why = "B_crit falls with N" if ds.sign == -1 else "B_crit changes more with LeNet-5's parameters than with N"
    else:
      v = "inconclusive"
      why = "an interval includes 0 or is unbounded"
    out.append(
      ClaimVerdict(
        *ZHANG, v, f"{why} ({ds.text()}; {gap.text()}; slopes of log B_crit on log N and on log parameters)."
      )
    )
  return out


def unmeasured(points_by_setting: Mapping[str, Points]) -> dict[str, str]:
  """{setting: why it has no measured B_crit} over the settings that ran: its fit is rejected by its own misses, or
  there is no fit (the target reached at fewer than two batches)."""
  out = {}
  for k, v in points_by_setting.items():
    if not v:
      continue
    bc, rejected = measured_b_crit(v)
    if rejected:
      out[k] = f"the fit rejected at batch {', '.join(f'{b:,}' for b in rejected)}"
    elif bc is None:
      out[k] = "no fit (the target reached at fewer than two batches)"
  return out


def _claims_intro() -> list[str]:
  """The heading, the verdict rule and the table head of ``claims_section``."""
  return [
    "### The two claims, from the intervals",
    "",
    "Per bootstrap resample (each setting's seeds resampled per batch, independently across settings), the "
    "slope of log B_crit on log N over the data axis, on log parameters over LeNet-5's widths, and the log "
    "spread (sd of log B_crit) over each axis; 95% percentile intervals. An interval wholly above or below 0 "
    "decides; one that includes 0, or a statistic not finite in more than "
    f"{MAX_UNBOUNDED:.1%} of resamples, is inconclusive. More seeds per batch, or more settings on an axis, "
    "narrow the intervals of an inconclusive verdict. A setting without a measured B_crit (its S(B) fit "
    "rejected by its own misses, or no fit) is left out of both readings; this rule was fixed on 2026-11-28, "
    "after the first part (data7500) was in and before any statistic had its settings. The third row keeps the "
    "rejected fits as if they were measurements; the fourth fits each setting on the batches where some seed "
    "reached the target (a batch where every seed missed says S(B) does not hold there; fixed 2026-11-28, before "
    "the parts from data30000 on were in). A verdict that differs in them is not robust to the rule.",
    "",
    "| reading of data size | statistics | Golmant et al. | Zhang et al. |",
    "|---|---|---|---|",
  ]


def claims_section(points_by_setting: Mapping[str, Points], num: int = precision.NUM_RESAMPLES, seed: int = 0) -> str:
  """The verdicts under both readings of "data size": as run (the same step limit in examples at every N) and
  fixed epochs (the limit re-censored at ``FIXED_EPOCHS`` passes over each N), over the same settings: one without
  a measured B_crit in either reading is left out of both (re-censoring can hide the misses that reject a fit).
  Two sensitivity rows: the rejected fits' B_crit kept as if measured, and each fit on the batches where some seed
  reached the target (``reached_batches``)."""
  fixed = {k: fixed_epoch_points(v, cba.SETTINGS[k]["n"]) if v else v for k, v in points_by_setting.items()}
  as_run_label = f"as run: the same examples at every N (step limit {cba.LIMIT_EXAMPLES:,} examples)"
  fixed_label = f"fixed epochs: the step limit {FIXED_EPOCHS:g} epochs of each N (re-censored)"
  why = {label: unmeasured(pts) for label, pts in ((as_run_label, points_by_setting), (fixed_label, fixed))}
  excluded = sorted(set(why[as_run_label]) | set(why[fixed_label]))
  no_fit = sorted(k for k, w in why[as_run_label].items() if w.startswith("no fit"))
  readings = (
    (as_run_label, dict(points_by_setting), dict(exclude=excluded)),
    (fixed_label, fixed, dict(exclude=excluded)),
    (
      "as run, rejected fits kept as if measured (sensitivity)",
      dict(points_by_setting),
      dict(exclude=no_fit, include_rejected=True),
    ),
    (
      "as run, each fit on the batches where some seed reached the target (sensitivity)",
      {k: reached_batches(v) for k, v in points_by_setting.items()},
      {},
    ),
  )
  lines = _claims_intro()
  reasons = []
  for label, pts, kw in readings:
    stats, _ = axis_statistics(pts, num, seed, **kw)
    vs = verdicts(stats)
    text = "; ".join(s.text() for s in stats.values()) or "—"
    lines.append(f"| {label} | {text} | {vs[0].verdict} | {vs[1].verdict} |")
    reasons += [f"- {label}: **{v.paper}** ({v.claim}): {v.verdict}: {v.reason}" for v in vs]
  for label, w in why.items():
    if w:
      reasons.append(
        f"- Without a measured B_crit, {label.split(':')[0]}: " + "; ".join(f"{k}: {r}" for k, r in w.items()) + "."
      )
  if excluded:
    reasons.append(f"- Left out of the first two rows: {', '.join(excluded)}.")
  lines += [
    "",
    *reasons,
    "",
    "Which reading each paper uses: Zhang et al. scale the number of training tokens, each seen once, so "
    "their data size is also their training length; Golmant et al. train subsets for a fixed number of "
    "epochs, so a larger subset also trains longer. This study holds the training length fixed in examples "
    "at every N (the step limit and the baseline's length), which separates the dataset size from the "
    "training length; the fixed-epoch row re-censors the same runs at "
    f"{FIXED_EPOCHS:g} passes over each N, the nearer reading to Golmant et al.'s (the branching points are "
    "matched in examples only: CBS(t) has no fixed-epoch reading in this data).",
  ]
  return "\n".join(lines)
