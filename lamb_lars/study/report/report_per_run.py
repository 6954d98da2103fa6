"""The per-run reading of Defs 2.1–2.2 (issue 59; the rule: docs/science.md, "Divergence and per-run verdicts").

You et al. 2020 write Def. 2.1 per run. Each seed of a configuration is judged on its own (a diverged or failed seed
does not meet the bar), and k of n seeds meeting it are tested with the one-sided exact binomial (sign) test
(verdict.sign_test). The table puts this reading beside the interval reading that the regimes table uses, and marks
where they differ.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from lamb_lars.study.analysis import regimes
from lamb_lars.study.analysis.reach import ReachEvidence
from lamb_lars.study.analysis.verdict import shown, sign_test
from lamb_lars.study.records import Baseline, Trial
from lamb_lars.study.report.markdown import table

_INTRO = (
  'Per-run reading (docs/science.md, "Divergence and per-run verdicts"): each seed is judged on its own, at any '
  "evaluation within ρ epochs (Def. 2.1: test accuracy ≥ 99.5%·A and validation loss ≤ 1.2·ξ at the same "
  "evaluation; Def. 2.2: test accuracy ≥ 99.5%·A). A diverged or failed seed does not meet the bar. With k of n "
  "seeds meeting it, a one-sided exact binomial (sign) test against ½ at 0.05 gives pass (P(X ≥ k) < 0.05), "
  "fail (P(X ≤ k) < 0.05) or inconclusive. n = 4 can decide nothing. The interval reading is the one in the "
  "table above."
)


def _same_words(old: str) -> str:
  """The interval reading in the per-run reading's words: its borderline is an inconclusive verdict."""
  return "inconclusive" if old == "borderline" else old


def _row(b: int, what: str, seeds: Sequence[Trial], meets, old: str) -> list:
  k = sum(1 for t in seeds if meets(t))
  bad = sum(1 for t in seeds if t.status in ("diverged", "failed"))
  s = sign_test(k, len(seeds))
  return [
    b,
    what,
    f"{k} of {len(seeds)}" + (f" ({bad} diverged or failed)" if bad else ""),
    f"{s.p:.2g}",
    s.verdict,
    shown(old),
    "yes" if s.verdict != _same_words(old) else "—",
  ]


def section(
  trials: Sequence[Trial],
  baseline: Baseline,
  lin: Mapping[int, Sequence[Trial]],
  d21v: Mapping[int, str],
  d22: Mapping[int, ReachEvidence],
  loss_key: str,
) -> list[str]:
  """Def. 2.1 per linear-scaling batch and Def. 2.2 per batch's chosen configuration, both readings side by side
  ([] when no verdict reads seeds). ``trials``: every trial the verdicts may read, replicate seeds included."""
  by_id = {t.run_id: t for t in trials}
  rows = []
  for b in sorted(d21v):
    if lin.get(b):
      rows.append(
        _row(
          b,
          "Def. 2.1, linear scaling",
          lin[b],
          lambda t: regimes.passes_large_batch(t, baseline, loss_key=loss_key),
          d21v[b],
        )
      )
  for b in sorted(d22):
    e = d22[b]
    seeds = [by_id[r] for r in e.seeds if r in by_id]
    if seeds:
      rows.append(
        _row(
          b,
          f"Def. 2.2, {e.technique} `{e.run_id}`",
          seeds,
          lambda t: regimes.reaches_accuracy(t, baseline),
          e.verdict.verdict,
        )
      )
  if not rows:
    return []
  head = ["batch", "verdict of", "seeds meeting the bar", "p (one-sided)", "per run", "interval reading", "differ"]
  return ["### Per-run verdicts", "", _INTRO, ""] + table(head, rows)
