"""The calibration of the in-run noise scale against the measured critical batch (issue 60; the rule and the sources
are pre-registered in lamb_lars/configs/studies/critical_batch_calibration.py, read it first).

A re-analysis of published folders, no new trial: per setting, κ = B_crit / B_noise, where B_crit is the setting's
censored S(B) fit with its bootstrap interval (axes_fits.b_crit on the replicate seeds, as the source's own report
computes it) and B_noise the geometric mean over the setting's baseline runs of B_simple (McCandlish et al. 2018
App. A.1; ``noise_scale`` in evals.csv) at each run's first evaluation that meets the target, with a Student-t
interval on the log values. Over training, CBS(t) brackets from branching (Merrill et al. 2025; branching.py) divided
by the reference run's B_simple at each branch point. Each judged "within 2×" by the config's rule.

Layout: a composite folder (publishing/composite.py) whose parts are the source folders, named relative to the root
(``../critical_batch_axes/mlp``); ``report(root)`` writes README.md, ``check(root)`` lists its lines that differ from
a recomputation.

Command: ``bash scripts/critical_batch_calibration.sh``, which runs ``python -m lamb_lars.study.publishing.composite
docs/studies/critical_batch_calibration --report=lamb_lars.study.analysis.calibration --parts=<every source,
comma-separated>`` (``SOURCES`` below).
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Optional, Sequence

from lamb_lars.configs.studies import critical_batch_calibration as cfg
from lamb_lars.study.analysis import precision, readme_lines
from lamb_lars.study.analysis import branching as branching_lib
from lamb_lars.study.analysis.axes_cbs import b_simple_at, branch_losses
from lamb_lars.study.analysis.axes_fits import _float, _read, b_crit, first_step, seed_points

README = "README.md"
AGREES, DIFFERS, INCONCLUSIVE = "agrees", "differs", "inconclusive"
# Every source folder, relative to the root docs/studies/critical_batch_calibration (the composite's parts).
SOURCES = sorted(
  {"../" + f for f, *_ in cfg.STEPS.values()}
  | {"../" + f for f, *_ in cfg.SECONDARY.values()}
  | {"../" + f for f, _ in cfg.BRANCHES.values()}
)


def log_interval(values: Sequence[float], level: float = cfg.LEVEL) -> tuple[float, float, float]:
  """(geometric mean, lo, hi): exp(m ± t·s/√n) over the logs, t the Student quantile at ``level`` with n − 1
  degrees of freedom; lo = hi = NaN for fewer than two values. Raises ValueError for no value or one ≤ 0."""
  from scipy import stats

  if not values or min(values) <= 0:
    raise ValueError(f"the geometric mean needs positive values; got {list(values)}.")
  logs = [math.log(v) for v in values]
  n, m = len(logs), sum(logs) / len(logs)
  if n < 2:
    return math.exp(m), math.nan, math.nan
  s = math.sqrt(sum((x - m) ** 2 for x in logs) / (n - 1))
  half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * s / math.sqrt(n)
  return math.exp(m), math.exp(m - half), math.exp(m + half)


def within(lo: float, hi: float, factor: float = cfg.FACTOR) -> str:
  """The verdict of an interval [lo, hi] against [1/factor, factor]: inside agrees, disjoint differs."""
  if math.isnan(lo) or math.isnan(hi):
    return INCONCLUSIVE
  if 1 / factor <= lo and hi <= factor:
    return AGREES
  if hi < 1 / factor or lo > factor:
    return DIFFERS
  return INCONCLUSIVE


def combined(verdicts: Sequence[str]) -> str:
  """Across settings or points: agrees when every one agrees, differs when any differs, else inconclusive (and
  inconclusive when there is none)."""
  if verdicts and all(v == AGREES for v in verdicts):
    return AGREES
  return DIFFERS if DIFFERS in verdicts else INCONCLUSIVE


def b_noise_at_target(folder: str, goal: float) -> tuple[list[float], int]:
  """([B_simple of each baseline run at its first evaluation meeting ``goal``], runs that never met it or have no
  finite noise scale there)."""
  curves: dict[str, list[dict]] = {}
  for row in _read(os.path.join(folder, "evals.csv")):
    curves.setdefault(row["run_id"], []).append(row)
  values, missed = [], 0
  for r in _read(os.path.join(folder, "runs.csv")):
    if r["role"] != "baseline":
      continue
    curve = curves.get(r["run_id"], [])
    step = first_step(curve, goal)
    at = [_float(e.get("noise_scale", "")) for e in curve if step is not None and _float(e["step"]) == step]
    if at and math.isfinite(at[0]) and at[0] > 0:
      values.append(at[0])
    else:
      missed += 1
  return values, missed


@dataclasses.dataclass(frozen=True)
class SettingRow:
  name: str
  target: float
  b_crit: Optional[tuple[float, float, float]]  # (value, lo, hi); None: not measured
  note: str  # why B_crit is not measured
  b_noise: Optional[tuple[float, float, float]]
  seeds: int
  missed: int

  @property
  def kappa(self) -> Optional[tuple[float, float, float]]:
    if self.b_crit is None or self.b_noise is None:
      return None
    (c, clo, chi), (n, nlo, nhi) = self.b_crit, self.b_noise
    return c / n, clo / nhi, chi / nlo

  @property
  def verdict(self) -> str:
    k = self.kappa
    return "not measured" if k is None else within(k[1], k[2])


def setting_row(name: str, folder: str, goal: float, num_bootstrap: int = cfg.NUM_BOOTSTRAP) -> SettingRow:
  res = b_crit(name, seed_points(folder, goal), goal, num_bootstrap=num_bootstrap)
  measured = res.fit is not None and not res.rejected and res.interval is not None and math.isfinite(res.interval.hi)
  note = res.note or (f"the fit is rejected at {list(res.rejected)} by its own misses" if res.rejected else "")
  values, missed = b_noise_at_target(folder, goal)
  return SettingRow(
    name,
    goal,
    (res.fit.b_crit, res.interval.lo, res.interval.hi) if measured else None,  # type: ignore[union-attr]
    note or ("" if measured else "no finite interval"),
    log_interval(values) if values else None,
    len(values),
    missed,
  )


@dataclasses.dataclass(frozen=True)
class PointRow:
  setting: str
  epochs: float
  bracket: str
  b_noise: Optional[float]
  ratio: Optional[tuple[float, float]]

  @property
  def verdict(self) -> str:
    return "not measured" if self.ratio is None else within(*self.ratio)


def point_rows(name: str, folder: str, b0: int, epsilon: float = cfg.EPSILON, full: int = 55000) -> list[PointRow]:
  """CBS(t) / B_noise(t) at every branch point of one branching folder (points in epochs of ``full`` examples)."""
  traj = branching_lib.trajectory(branch_losses(folder), b0, epsilon, relative=True)
  noise = b_simple_at(folder, [c.point for c in traj])
  out = []
  for c in traj:
    lo = c.low if c.low is not None else 0.0
    # the bracket's upper end: ∞ when every tested batch passes; the smallest tested batch when even it fails
    # (CBS below it; the config's "(0, hi/B]"); NaN when no batch was tested
    smallest = min(c.verdicts) if c.verdicts else math.nan
    hi = math.inf if c.censored else (c.high if c.high is not None else smallest)
    low = str(c.low) if c.low is not None else "<" + str(min(c.verdicts)) if c.verdicts else "—"
    bracket = f"≥ {c.low:,}" if c.censored else f"[{low}, {c.high if c.high is not None else '—'}]"
    bn = noise[c.point]
    ratio = (lo / bn, hi / bn) if bn and not math.isnan(hi) else None
    out.append(PointRow(name, c.point / full, bracket, bn, ratio))
  return out


def _n(x: Optional[float]) -> str:
  """B_crit, B_noise, κ and their interval ends to 2 significant figures (precision.significant)."""
  return precision.significant(x)


def _iv(t: Optional[tuple[float, float, float]]) -> str:
  return "—" if t is None else f"{_n(t[0])} [{_n(t[1])}, {_n(t[2])}]"


def settings_table(rows: Sequence[SettingRow]) -> list[str]:
  out = [
    "| setting | target | B_crit [95% bootstrap] | B_noise at the target, geometric mean [95% t] | seeds (missed) | "
    "κ = B_crit / B_noise [interval] | within 2× |",
    "|---|---|---|---|---|---|---|",
  ]
  for r in rows:
    crit = _iv(r.b_crit) if r.b_crit is not None else f"not measured ({r.note})"
    out.append(
      f"| {r.name} | {100 * r.target:.2f}% | {crit} | {_iv(r.b_noise)} | {r.seeds} ({r.missed}) | {_iv(r.kappa)} "
      f"| {r.verdict} |"
    )
  return out


def points_table(rows: Sequence[PointRow]) -> list[str]:
  out = [
    "| setting | epochs (of 55K) | CBS bracket | B_noise(t) | CBS / B_noise | within 2× |",
    "|---|---|---|---|---|---|",
  ]
  for r in rows:
    ratio = "—" if r.ratio is None else f"[{_n(r.ratio[0])}, {_n(r.ratio[1])}]"
    out.append(f"| {r.setting} | {r.epochs:.3g} | {r.bracket} | {_n(r.b_noise)} | {ratio} | {r.verdict} |")
  return out


def markdown(studies: str, num_bootstrap: int = cfg.NUM_BOOTSTRAP) -> str:
  """The README, from the source folders under ``studies`` (docs/studies)."""
  rows = [setting_row(n, os.path.join(studies, f), g, num_bootstrap) for n, (f, g, _) in cfg.STEPS.items()]
  extra = [setting_row(n, os.path.join(studies, f), g, num_bootstrap) for n, (f, g, _) in cfg.SECONDARY.items()]
  points = [p for n, (f, b0) in cfg.BRANCHES.items() for p in point_rows(n, os.path.join(studies, f), b0)]
  judged = [r.verdict for r in rows if r.kappa is not None]
  over = [p.verdict for p in points if p.ratio is not None]
  count = lambda vs: ", ".join(f"{vs.count(v)} {v}" for v in (AGREES, DIFFERS, INCONCLUSIVE))  # noqa: E731
  axes = []
  for axis in ("data", "model"):
    members = [r for r in rows if axis in cfg.STEPS[r.name][2]]
    axes.append(f"| {axis} | " + "; ".join(f"{r.name}: {_iv(r.kappa)}" for r in members if r.kappa) + " |")
  lines = [
    "# The noise scale against the measured critical batch (calibration, issue 60)",
    "",
    "A re-analysis of published folders, no new trial; the rule was pre-registered in "
    "`lamb_lars/configs/studies/critical_batch_calibration.py` before any κ was computed. B_crit: each setting's "
    "censored S(B) fit over its replicate seeds (a bootstrap interval). B_noise: B_simple "
    "(McCandlish et al. 2018 App. A.1, `noise_scale`) of the setting's baseline runs at batch 256, at each run's "
    "first evaluation meeting the target; geometric mean with a 95% Student-t interval on the logs. κ's interval "
    "divides the ends of the two intervals crosswise (conservative). " + precision.rule_text(num_bootstrap),
    "",
    "## The pre-registered question",
    "",
    f"Is the measured critical batch within {cfg.FACTOR:g}× of the in-run estimate, across settings and over "
    "training? (agrees: the interval inside [0.5, 2]; differs: wholly outside; else inconclusive)",
    "",
    f"- **Across settings: {combined(judged)}** ({len(judged)} settings with a measured B_crit: {count(judged)}).",
    f"- **Over training: {combined(over)}** ({len(over)} branch points with a CBS bracket: {count(over)}).",
    "",
    "## κ per setting, at its pre-registered primary target",
    "",
    *settings_table(rows),
    "",
    "## Post hoc (not in the verdict)",
    "",
    *settings_table(extra),
    "",
    f"## Over training: CBS(t) at ε = {cfg.EPSILON:g} (relative) / B_noise(t) of the reference run",
    "",
    *points_table(points),
    "",
    "## κ along the axes (described, not tested)",
    "",
    "| axis | κ of the settings with a measured B_crit |",
    "|---|---|",
    *axes,
    "",
    "## Sources",
    "",
    *[f"- [{s[3:]}]({s}/README.md)" for s in SOURCES],
    "",
  ]
  return "\n".join(lines)


def report(root: str, num_bootstrap: int = cfg.NUM_BOOTSTRAP) -> str:
  """Writes ``<root>/README.md`` (the sources: ``<root>/..``); returns its text."""
  return readme_lines.write(root, markdown(os.path.join(root, ".."), num_bootstrap))


def check(root: str, num_bootstrap: int = cfg.NUM_BOOTSTRAP) -> list[str]:
  """The README's lines that differ from a recomputation from the sources' CSVs ([] = the same)."""
  return readme_lines.differences(root, markdown(os.path.join(root, ".."), num_bootstrap))
