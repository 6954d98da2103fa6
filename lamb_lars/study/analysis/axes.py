"""The cross-setting answer of the critical-batch-axes study (issue 42;
lamb_lars/configs/studies/critical_batch_axes.py): B_crit with its bootstrap interval per setting, CBS(t) brackets at
the pre-registered ε with an ε-sensitivity table, B_simple at the branch points, and one figure: B_crit against dataset
size and against model size.

Input: a root folder holding one published folder per study part (``study report --out=<root>/<part>``):
``<root>/<setting>`` (steps to target: runs.csv, evals.csv) and ``<root>/branch-<setting>`` (branching). A part
that is missing or has no replicated cells yet is reported as not run; nothing is guessed.

* Steps to target per seed: in each tuned cell, the replicates of the chosen configuration (the run their
  ``replicate_of`` names; the chosen trial itself only as a sensitivity, as in every report), each one point: the
  first evaluation whose test accuracy meets the target (``first_step``), or, if none does, a censored point
  S > the steps it ran (its step limit, or where it diverged).
* B_crit: S(B) = S_min·(1 + B_crit/B) fitted with the misses as lower bounds (scaling_fit.fit_points), the interval
  a percentile bootstrap over the seeds of each batch (scaling_fit.bootstrap). A fit that its own misses reject
  (every seed at a batch missed within a budget the fit says suffices: scaling_fit.censored_above) gives no
  measured B_crit (``measured_b_crit``); the table says so, and the largest batch that reached the target.
* The secondary targets (``secondary_section``): B_crit per setting and the two verdicts again at the config's
  pre-registered sensitivity targets (a common 98.0% bar, 97.5% for the MLP; each setting's bar − 0.3 pp).
* CBS(t): branching.trajectory on each branch's final validation loss, at the config's ε (relative) and at each
  ε of ``EPSILON_SENSITIVITY``.
* B_simple: the baseline run's ``noise_scale`` at the first evaluation at or after each branch point.
* The claims (``claims_section``): Golmant et al. 2018 and Zhang et al. 2024 judged agrees / differs /
  inconclusive from bootstrap intervals of the slopes of log B_crit along each axis and of the difference of the
  axes' log spreads (``axis_statistics``, ``verdicts``), under two readings of "data size": as run (the same
  examples at every N) and fixed epochs (the points re-censored at 60 passes over each N, ``fixed_epoch_points``).

Command: ``python -m lamb_lars.study.analysis.axes <root> [--out=<dir>]`` writes ``README.md`` and
``critical_batch_axes.png`` (default: into <root>); ``... <root> --check`` recomputes ``README.md`` from the parts'
CSVs and exits 1 naming each line that differs (a hand-edited number, or a part republished since).
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import json
import math
import os
import sys
import zlib
from typing import Mapping, Optional, Sequence

import numpy as np

from lamb_lars.configs.studies import critical_batch_axes as cba
from lamb_lars.study.analysis import branching as branching_lib
from lamb_lars.study.analysis import scaling_fit

README = "README.md"  # the cross-setting report, at the root of the parts (a composite folder: publishing/composite.py)

Points = dict  # {batch: [(steps, censored), ...]}


def _read(path: str) -> list[dict]:
  with open(path, newline="") as f:
    return list(csv.DictReader(f))


def _float(x: str) -> float:
  try:
    return float(x)
  except (TypeError, ValueError):
    return math.nan


def first_step(curve: Sequence[Mapping[str, str]], goal: float, metric: str = "test_accuracy") -> Optional[int]:
  """The step of the first evaluation (in step order) whose ``metric`` ≥ ``goal``; None when none does."""
  for row in sorted(curve, key=lambda r: _float(r["step"])):
    if _float(row.get(metric, "")) >= goal:
      return int(_float(row["step"]))
  return None


def seed_points(folder: str, goal: float, sweep: str = "tuned", with_chosen: bool = False) -> Points:
  """{batch: [(steps, censored)]} over the replicate seeds of the chosen configuration in each ``sweep`` cell.

  The chosen trial itself is left out, as in every report (report_replicates.py): the search selected it on
  validation accuracy, so its steps to a test-accuracy target are biased low. ``with_chosen=True`` adds it (the
  config's first wording: "the chosen trial and 3 replicates"), printed beside as a sensitivity."""
  runs = _read(os.path.join(folder, "runs.csv"))
  curves: dict[str, list[dict]] = {}
  for row in _read(os.path.join(folder, "evals.csv")):
    curves.setdefault(row["run_id"], []).append(row)
  chosen = {r["replicate_of"] for r in runs if r.get("phase") == "replicate" and r["cell"].startswith(sweep + "-b")}
  points: Points = {}
  for r in runs:
    if not r["cell"].startswith(sweep + "-b"):
      continue
    if r.get("replicate_of") not in chosen and not (with_chosen and r["run_id"] in chosen):
      continue
    hit = first_step(curves.get(r["run_id"], []), goal)
    pt = (float(hit), False) if hit is not None else (max(1.0, _float(r["steps"])), True)
    points.setdefault(int(r["batch_size"]), []).append(pt)
  return points


@dataclasses.dataclass(frozen=True)
class SettingResult:
  """One setting's B_crit: the fit on every seed and the bootstrap interval (None: not run or not fittable)."""

  name: str
  target: float
  points: Points
  fit: Optional[scaling_fit.CensoredFit]
  interval: Optional[scaling_fit.Interval]
  note: str = ""
  rejected: tuple[int, ...] = ()  # batches whose misses the fit cannot explain (scaling_fit.censored_above)
  with_chosen: Optional[tuple[float, bool]] = None  # (B_crit, measured) with each batch's chosen trial added
  restricted: Optional[tuple[float, bool]] = None  # (B_crit, measured) on the batches some seed reached

  @property
  def measured(self) -> bool:
    """Whether the fit's B_crit is a measurement: fitted, and no batch's misses lie above the fitted S(B)."""
    return self.fit is not None and not self.rejected


def measured_b_crit(points: Points) -> tuple[Optional[float], tuple[int, ...]]:
  """(B_crit, rejected batches) of the fit to ``points``: B_crit is None when there is no fit or when the fit is
  rejected (``scaling_fit.censored_above``: at those batches every seed missed the target at budgets the fit says
  suffice, so S(B) = S_min(1 + B_crit/B) does not describe the setting and its B_crit is not a measurement)."""
  try:
    fit = scaling_fit.fit_points(points)
  except ValueError:
    return None, ()
  rejected = tuple(scaling_fit.censored_above(fit, points))
  return (None if rejected else fit.b_crit), rejected


def _raw_b_crit(points: Points) -> Optional[float]:
  """The fit's B_crit whether or not its misses reject it (None: no fit)."""
  try:
    return scaling_fit.fit_points(points).b_crit
  except ValueError:
    return None


def reached_batches(points: Points) -> Points:
  """The points without the batches where every seed missed the target: S(B) restricted to the batch range where
  the target is reached at all (a sensitivity, fixed 2026-11-28 before parts data30000 … were in)."""
  return {b: v for b, v in points.items() if any(not c for _, c in v)}


def _variant(points: Points) -> Optional[tuple[float, bool]]:
  """(B_crit, measured) of a sensitivity fit, None when there is none."""
  raw = _raw_b_crit(points)
  return None if raw is None else (raw, measured_b_crit(points)[0] is not None)


def reach(points: Points) -> tuple[Optional[int], Optional[int]]:
  """(the largest batch where every seed reached the target, the largest where any seed did); None: no batch."""
  every = [b for b, v in points.items() if v and not any(c for _, c in v)]
  some = [b for b, v in points.items() if any(not c for _, c in v)]
  return (max(every) if every else None), (max(some) if some else None)


def b_crit(name: str, points: Points, target: float, num_bootstrap: int = 1000, seed: int = 0) -> SettingResult:
  """The fit and the bootstrap interval of one setting, or a note why there is none; ``rejected`` names the
  batches where the fit is rejected by its own censored points (then B_crit is reported, not used)."""
  if not points:
    return SettingResult(name, target, points, None, None, "not run")
  try:
    fit = scaling_fit.fit_points(points)
  except ValueError as e:
    return SettingResult(name, target, points, None, None, f"no fit: {e}")
  return SettingResult(
    name,
    target,
    points,
    fit,
    scaling_fit.bootstrap(points, num=num_bootstrap, seed=seed),
    rejected=tuple(scaling_fit.censored_above(fit, points)),
  )


def branch_losses(folder: str) -> list[branching_lib.BranchLoss]:
  """The branches of a published branching folder: point (examples of the reference), batch, seed, final loss."""
  out = []
  for r in _read(os.path.join(folder, "runs.csv")):
    if r["role"] != "branch":
      continue
    ov = json.loads(r["overrides"] or "{}")
    loss = _float(r["final_validation_loss"])
    if r["status"] == "diverged" or not math.isfinite(loss):
      loss = math.inf
    out.append(branching_lib.BranchLoss(float(ov["init_from_examples"]), int(r["batch_size"]), int(r["seed"]), loss))
  return out


def _bracket(c: branching_lib.CriticalBatch) -> str:
  lo = "<" + str(min(c.verdicts)) if c.low is None and c.verdicts else str(c.low)
  if c.censored:
    return f"≥ {c.low:,}"
  return f"[{lo}, {c.high if c.high is not None else '—'}]"


def b_simple_at(folder: str, examples: Sequence[float]) -> dict[float, Optional[float]]:
  """The baseline's noise scale at the first evaluation at or after each number of examples."""
  runs = _read(os.path.join(folder, "runs.csv"))
  base = [r["run_id"] for r in runs if r["role"] == "baseline" and r.get("phase", "search") != "replicate"]
  rows = sorted(
    (r for r in _read(os.path.join(folder, "evals.csv")) if base and r["run_id"] == base[0]),
    key=lambda r: _float(r["examples"]),
  )
  out: dict[float, Optional[float]] = {}
  for x in examples:
    vals = [_float(r.get("noise_scale", "")) for r in rows if _float(r["examples"]) >= x]
    out[x] = vals[0] if vals and math.isfinite(vals[0]) else None
  return out


def _fmt(x: Optional[float]) -> str:
  if x is None or (isinstance(x, float) and math.isnan(x)):
    return "—"
  return "∞" if math.isinf(x) else f"{x:,.0f}"


def _reach_text(points: Points) -> str:
  every, some = reach(points)
  return f"{_fmt_batch(every)} / {_fmt_batch(some)}"


def _fmt_chosen(b: Optional[tuple[float, bool]]) -> str:
  """The with-chosen-trials B_crit, in parentheses and marked when that fit is rejected too."""
  if b is None:
    return "—"
  return _fmt(b[0]) if b[1] else f"({_fmt(b[0])}) not measured"


def _fmt_batch(b: Optional[int]) -> str:
  return "none" if b is None else f"{b:,}"


def steps_table(results: Sequence[SettingResult]) -> str:
  """One row per setting. ``B_crit`` is the fit to every replicate seed (the last column adds each batch's chosen
  trial, a sensitivity: the search selected it, so it is not a fresh seed); where the fit is rejected (``fit
  rejected at``: every seed missed at budgets the fit says suffice) it is shown in parentheses and is not a
  measurement. ``reached (every / any seed)``: the largest batch where every seed, and where any seed, reached the
  target."""
  lines = [
    "| setting | axes | params | N | target | B_crit | 95% bootstrap | ∞ share | S_min | fit rejected at | "
    "reached (every / any seed) | seeds/batch | censored | B_crit with the chosen trials | "
    "B_crit on the reached batches |",
    "|---|---|---:|---:|---:|---:|---|---:|---:|---|---|---|---:|---:|---:|",
  ]
  for r in results:
    s = cba.SETTINGS[r.name]
    seeds = ", ".join(f"{b}: {len(v)}" for b, v in sorted(r.points.items())) or "—"
    cens = sum(c for v in r.points.values() for _, c in v)
    params = cba.num_params(s["model"], s["width"])
    head = f"| {r.name} | {'+'.join(s['axes'])} | {params:,} | {s['n']:,} | {r.target:.1%}"
    reached = _reach_text(r.points) if r.points else "—"
    if r.fit is None:
      lines.append(
        f"{head} | {r.note} | | | | | {reached} | {seeds} | {cens} | {_fmt_chosen(r.with_chosen)} | "
        f"{_fmt_chosen(r.restricted)} |"
      )
      continue
    iv = r.interval if r.measured else None  # a rejected fit's interval would be an interval of nothing measured
    ci = f"[{_fmt(iv.lo)}, {_fmt(iv.hi)}]" if iv else "—"
    inf = f"{iv.infinite:.0%}" if iv else "—"
    est = _fmt(r.fit.b_crit) if r.measured else f"({_fmt(r.fit.b_crit)}) not measured"
    rej = ", ".join(f"{b:,}" for b in r.rejected) or "—"
    lines.append(
      f"{head} | {est} | {ci} | {inf} | {_fmt(r.fit.s_min)} | {rej} | {reached} | {seeds} | {cens} | "
      f"{_fmt_chosen(r.with_chosen)} | {_fmt_chosen(r.restricted)} |"
    )
  return "\n".join(lines)


def axis_spread(results: Sequence[SettingResult], axis: str) -> str:
  """How far B_crit moves along an axis: max/min of the point estimates and whether any two intervals are disjoint."""
  rs = [
    r
    for r in results
    if axis in cba.SETTINGS[r.name]["axes"] and r.measured and r.interval and 0 < r.fit.b_crit < math.inf
  ]
  left = [
    r.name for r in results if axis in cba.SETTINGS[r.name]["axes"] and r.points and r.name not in {x.name for x in rs}
  ]
  out_note = f" (without a measured, finite B_crit, left out: {', '.join(left)})" if left else ""
  if len(rs) < 2:
    return f"{axis} axis: fewer than two settings with a measured, finite B_crit; no comparison{out_note}."
  est = [r.fit.b_crit for r in rs]
  disjoint = [
    (a.name, b.name)
    for i, a in enumerate(rs)
    for b in rs[i + 1 :]
    if a.interval.hi < b.interval.lo or b.interval.hi < a.interval.lo
  ]
  verdict = (
    f"intervals disjoint for {', '.join(f'{a} vs {b}' for a, b in disjoint)}"
    if disjoint
    else "every pair of intervals overlaps (no change shown)"
  )
  return f"{axis} axis: B_crit spans {max(est) / min(est):.2f}× over {len(rs)} settings; {verdict}{out_note}."


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


def resampled_b_crit(points_by_setting: Mapping[str, Points], num: int = 1000, seed: int = 0) -> dict[str, np.ndarray]:
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
    return f"{self.name} = {self.value:+.2f} [{self.lo:+.2f}, {self.hi:+.2f}]{unb}{drop}"


def _statistic(name: str, value: float, draws: np.ndarray, dropped: int = 0) -> Statistic:
  fin = np.sort(draws[np.isfinite(draws)])
  if draws.size == 0:
    return Statistic(name, value, math.nan, math.nan, 1.0, 0, dropped)
  unbounded = float(np.mean(~np.isfinite(draws)))
  a = (1.0 - LEVEL) / 2.0
  v = np.sort(np.where(np.isfinite(draws), draws, np.inf))  # ±∞ and nan sort to the top end: conservative
  lo, hi = (scaling_fit._order_stat(v, a), scaling_fit._order_stat(v, 1.0 - a)) if fin.size else (math.nan,) * 2
  return Statistic(name, value, lo, hi, unbounded, int(draws.size), dropped)


def axis_statistics(
  points_by_setting: Mapping[str, Points],
  num: int = 1000,
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


def claims_section(points_by_setting: Mapping[str, Points], num: int = 1000, seed: int = 0) -> str:
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


# ---- the pre-registered secondary targets (a sensitivity of every B_crit and verdict) ----
COMMON_BAR = "the common bar (98.0%; MLP 97.5%)"
BAR_MINUS = "each setting's bar − 0.3 pp"


def sensitivity_targets(name: str) -> dict[str, float]:
  """{reading: target} of a setting's pre-registered secondary targets (``cba.secondary_targets``, the config's
  docstring: a common bar of 98.0% for every LeNet-5/CNN setting and 97.5% for the MLP, and the setting's bar − 0.3
  pp). Where the common bar is the setting's own bar (data7500's 98.0%), that reading is its primary target."""
  s = cba.SETTINGS[name]
  common = min(0.975 if s["model"] == "mlp" else 0.980, s["target"])
  minus = round(s["target"] - 0.003, 4)
  if {t for t in (common, minus) if t < s["target"] - 1e-9} != set(cba.secondary_targets(name)):
    raise ValueError(f"{name}: the secondary targets {cba.secondary_targets(name)} are not the config's rule.")
  return {COMMON_BAR: common, BAR_MINUS: minus}


def secondary_results(root: str, num_bootstrap: int = 1000) -> dict[str, dict[str, Optional[SettingResult]]]:
  """{reading: {setting: B_crit at that secondary target (None: the part is not in)}}, for every setting in the
  config's order; each the fit to the replicate seeds' first evaluation at or above the target (a trial stops at its
  primary target, which is higher, so a lower target is observed on the way)."""
  out: dict[str, dict[str, Optional[SettingResult]]] = {COMMON_BAR: {}, BAR_MINUS: {}}
  for name in cba.SETTINGS:
    folder = os.path.join(root, name)
    here = os.path.exists(os.path.join(folder, "runs.csv"))
    for reading, goal in sensitivity_targets(name).items():
      out[reading][name] = b_crit(name, seed_points(folder, goal), goal, num_bootstrap=num_bootstrap) if here else None
  return out


def secondary_section(
  root: str, num_bootstrap: int = 1000, computed: Optional[Mapping[str, Mapping[str, Optional[SettingResult]]]] = None
) -> str:
  """B_crit per setting at each secondary target (:func:`secondary_results`, or ``computed``), and the two claims'
  verdicts at each target (as run; a setting without a measured B_crit left out, as in the first row above). A
  verdict that changes with the target is not robust to it."""
  computed = computed if computed is not None else secondary_results(root, num_bootstrap)
  pts: dict[str, dict[str, Points]] = {reading: {} for reading in computed}
  rows = []
  for name in cba.SETTINGS:
    cells = []
    for reading, goal in sensitivity_targets(name).items():
      r = computed[reading][name]
      pts[reading][name] = r.points if r is not None else {}
      if r is None:
        cells.append(f"{goal:.1%}: not run")
      elif r.fit is None:
        cells.append(f"{goal:.1%}: {r.note}")
      elif not r.measured:
        rej = ", ".join(f"{b:,}" for b in r.rejected)
        cells.append(f"{goal:.1%}: ({_fmt(r.fit.b_crit)}) not measured, the fit rejected at {rej}")
      else:
        cells.append(f"{goal:.1%}: {_fmt(r.fit.b_crit)} [{_fmt(r.interval.lo)}, {_fmt(r.interval.hi)}]")
    rows.append(f"| {name} | {cba.SETTINGS[name]['target']:.1%} | {cells[0]} | {cells[1]} |")
  lines = [
    "### Sensitivity: the pre-registered secondary targets",
    "",
    "B_crit and its 95% bootstrap interval over the same replicate seeds at each secondary target of the config "
    "(lamb_lars/configs/studies/critical_batch_axes.py, `secondary_targets`): the first evaluation at or above "
    "it. The LR of each batch was chosen for the primary target. The targets were pre-registered with the config "
    "(before any trial); this section, which reads them with the first row's rule (as run, a setting without a "
    "measured B_crit left out), was added on 2026-12-02, when 12 of the 16 parts were in.",
    "",
    f"| setting | primary target | {COMMON_BAR} | {BAR_MINUS} |",
    "|---|---:|---|---|",
    *rows,
    "",
    "| target | Golmant et al. | Zhang et al. | without a measured B_crit (left out) |",
    "|---|---|---|---|",
  ]
  for reading, by_setting in pts.items():
    left = unmeasured(by_setting)
    stats, _ = axis_statistics(by_setting, num_bootstrap, 0, exclude=sorted(left))
    vs = verdicts(stats)
    lines.append(f"| {reading} | {vs[0].verdict} | {vs[1].verdict} | {', '.join(sorted(left)) or '—'} |")
  return "\n".join(lines)


def cbs_tables(root: str, epsilons: Sequence[float] = cba.EPSILON_SENSITIVITY) -> str:
  """CBS brackets per setting and point at the pre-registered ε, then the ε-sensitivity table, and B_simple."""
  pre, sens, simple = [], [], []
  for name in cba.SETTINGS:
    folder = os.path.join(root, f"branch-{name}")
    if not os.path.exists(os.path.join(folder, "runs.csv")):
      pre.append(f"| {name} | not run |")
      continue
    bl = branch_losses(folder)
    if not bl:
      pre.append(f"| {name} | no branches |")
      continue
    traj = {e: branching_lib.trajectory(bl, cba.B0, e, relative=True) for e in sorted(set(epsilons) | {cba.EPSILON})}
    pts = [c.point for c in traj[cba.EPSILON]]
    pre.append(
      f"| {name} | " + " | ".join(f"{p / cba.FULL:.3g}: {_bracket(c)}" for p, c in zip(pts, traj[cba.EPSILON])) + " |"
    )
    for e in sorted(traj):
      sens.append(
        f"| {name} | {e:g}{' (pre-registered)' if e == cba.EPSILON else ''} | "
        + " | ".join(_bracket(c) for c in traj[e])
        + " |"
      )
    steps_folder = os.path.join(root, name)
    if os.path.exists(os.path.join(steps_folder, "evals.csv")):
      bs = b_simple_at(steps_folder, pts)
      simple.append(f"| {name} | " + " | ".join(f"{p / cba.FULL:.3g}: {_fmt(bs[p])}" for p in pts) + " |")
  head = "| setting | CBS bracket per point (epochs of 55K: [low, high]) |\n|---|---|"
  out = [
    f"### CBS(t) at the pre-registered ε = {cba.EPSILON:g} (relative)",
    "",
    head,
    *pre,
    "",
    "### ε sensitivity (brackets at each point, in order)",
    "",
    "| setting | ε | brackets |",
    "|---|---|---|",
    *sens,
  ]
  if simple:
    out += ["", "### B_simple (baseline run) at the branch points", "", "| setting | B_simple |", "|---|---|", *simple]
  return "\n".join(out)


def _separated(a: branching_lib.CriticalBatch, b: branching_lib.CriticalBatch) -> bool:
  """Whether CBS at ``a`` lies below CBS at ``b``: some batch ≤ b's low (every batch of b up to it passes) is above
  a's high (a fails at the next tested batch after its high)."""
  return not a.censored and a.high is not None and b.low is not None and a.high < b.low


def cbs_axis_comparison(root: str, epsilon: float = cba.EPSILON) -> str:
  """CBS at matched points of training (the same examples seen), per axis: the settings whose brackets are
  separated (one's CBS below another's) at each branch point, at the pre-registered ε — the CBS counterpart of the
  B_crit spread along each axis."""
  traj: dict[str, list[branching_lib.CriticalBatch]] = {}
  for name in cba.SETTINGS:
    folder = os.path.join(root, f"branch-{name}")
    if os.path.exists(os.path.join(folder, "runs.csv")):
      bl = branch_losses(folder)
      if bl:
        traj[name] = branching_lib.trajectory(bl, cba.B0, epsilon, relative=True)
  lines = [
    f"### CBS(t) along each axis at matched points (ε = {epsilon:g}, pre-registered)",
    "",
    "| point (epochs of 55K) | axis | brackets | separated (lower < higher) |",
    "|---|---|---|---|",
  ]
  any_row = False
  for i, p in enumerate(cba.POINTS_EXAMPLES):
    for axis in ("data", "model"):
      names = [k for k in cba.SETTINGS if axis in cba.SETTINGS[k]["axes"] and k in traj and len(traj[k]) > i]
      if len(names) < 2:
        continue
      any_row = True
      cs = {k: traj[k][i] for k in names}
      pairs = [f"{a} < {b}" for a in names for b in names if a != b and _separated(cs[a], cs[b])]
      lines.append(
        f"| {p / cba.FULL:.3g} | {axis} | "
        + "; ".join(f"{k}: {_bracket(c)}" for k, c in cs.items())
        + f" | {', '.join(pairs) if pairs else 'none: no change shown'} |"
      )
  if not any_row:
    return "\n".join(lines[:2] + ["Fewer than two settings of an axis have branching results yet."])
  return "\n".join(lines)


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


def _results(root: str, num_bootstrap: int) -> list[SettingResult]:
  results = []
  for name, s in cba.SETTINGS.items():
    folder = os.path.join(root, name)
    if not os.path.exists(os.path.join(folder, "runs.csv")):
      results.append(b_crit(name, {}, s["target"]))
      continue
    res = b_crit(name, seed_points(folder, s["target"]), s["target"], num_bootstrap=num_bootstrap)
    results.append(
      dataclasses.replace(
        res,
        with_chosen=_variant(seed_points(folder, s["target"], with_chosen=True)),
        restricted=_variant(reached_batches(res.points)),
      )
    )
  return results


def parts_table(root: str) -> str:
  """The parts (one published folder each, linked) and whether each is in: the settings in the config's order."""
  lines = ["| setting | steps to target | branching |", "|---|---|---|"]
  for name in cba.SETTINGS:
    cells = []
    for part in (name, f"branch-{name}"):
      here = os.path.exists(os.path.join(root, part, "runs.csv"))
      cells.append(f"[{part}]({part}/README.md)" if here else "not run")
    lines.append(f"| {name} | {cells[0]} | {cells[1]} |")
  return "\n".join(lines)


def markdown(
  root: str,
  results: Sequence[SettingResult],
  num_bootstrap: int = 1000,
  secondary: Optional[Mapping[str, Mapping[str, Optional[SettingResult]]]] = None,
) -> str:
  """The text of ``README.md``, computed from the parts' CSVs alone (fixed bootstrap seeds: reproducible);
  ``secondary``: :func:`secondary_results`, when the caller has it."""
  return "\n".join(
    [
      "# Critical batch: data axis against model axis",
      "",
      parts_table(root),
      "",
      f"Targets and ε pre-registered in lamb_lars/configs/studies/critical_batch_axes.py; step limit "
      f"{cba.LIMIT_EXAMPLES:,} examples (a miss is a censored point).",
      "",
      steps_table(results),
      "",
      "- " + axis_spread(results, "data"),
      "- " + axis_spread(results, "model"),
      "",
      claims_section({r.name: r.points for r in results}, num=num_bootstrap),
      "",
      secondary_section(root, num_bootstrap, secondary),
      "",
      cbs_tables(root),
      "",
      cbs_axis_comparison(root),
      "",
      "![B_crit against data and model size](critical_batch_axes.png)",
      "",
    ]
  )


def report(root: str, out: Optional[str] = None, num_bootstrap: int = 1000) -> str:
  """Writes ``README.md`` and ``critical_batch_axes.png`` into ``out`` (default ``root``); returns the markdown."""
  out = out or root
  os.makedirs(out, exist_ok=True)
  results = _results(root, num_bootstrap)
  secondary = secondary_results(root, num_bootstrap)
  figure(results, os.path.join(out, "critical_batch_axes.png"), secondary[COMMON_BAR])
  text = markdown(root, results, num_bootstrap, secondary)
  with open(os.path.join(out, README), "w") as f:
    f.write(text)
  return text


def check(root: str, num_bootstrap: int = 1000) -> list[str]:
  """The lines of ``<root>/README.md`` that differ from a recomputation from the parts' CSVs (empty: it holds), so a
  hand-edited number or a part republished after the cross-setting report fails (issue 41's claims that cannot go
  stale, for this report)."""
  path = os.path.join(root, README)
  if not os.path.exists(path):
    return [f"{path} does not exist"]
  with open(path) as f:
    have = f.read().splitlines()
  want = markdown(root, _results(root, num_bootstrap), num_bootstrap).splitlines()
  diff = [f"line {k + 1}: {a!r} ≠ recomputed {b!r}" for k, (a, b) in enumerate(zip(have, want)) if a != b]
  if len(have) != len(want):
    diff.append(f"{len(have)} lines, recomputed {len(want)}")
  return diff


def main(argv: Sequence[str]) -> int:
  """``<root> [--out=<dir>]`` writes the report; ``<root> --check`` exits 1 when ``<root>/README.md`` is not what the
  parts' CSVs give."""
  args = [a for a in argv if not a.startswith("--out=") and a != "--check"]
  outs = [a[len("--out=") :] for a in argv if a.startswith("--out=")]
  if len(args) != 1 or not os.path.isdir(args[0]) or ("--check" in argv and outs):
    print(
      "error: give one existing folder holding the published parts (<root>/<setting>, <root>/branch-<setting>), "
      "e.g. python -m lamb_lars.study.analysis.axes docs/studies/critical_batch_axes [--out=DIR | --check].",
      file=sys.stderr,
    )
    return 2
  if "--check" in argv:
    diff = check(args[0])
    for d in diff:
      print(f"{args[0]}/README.md: {d}", file=sys.stderr)
    print(f"{args[0]}/README.md: " + ("verified" if not diff else f"{len(diff)} mismatches"))
    return 1 if diff else 0
  print(report(args[0], outs[0] if outs else None))
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
