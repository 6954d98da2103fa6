"""Def. 2.2 at one batch from seeds, not from the best trial on test (You et al. 2020 Def. 2.2; issue 22).

Per declared technique and cell, the configuration the cell chose on the validation split
(selection.chosen_of_cell) is read with its replicate seeds; the strongest verdict wins. Where a regime label (one
reaching run suffices) and the verdict over seeds disagree, in either direction, ``disagreements`` says so.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

from lamb_lars.study.analysis import regimes, selection
from lamb_lars.study.records import Baseline, Trial


@dataclasses.dataclass(frozen=True)
class ReachEvidence:
  """Def. 2.2 at one batch: the technique with the strongest verdict, its chosen run and that run's seeds."""

  technique: str
  run_id: str
  verdict: regimes.vd.Verdict
  best_on_test: bool = False  # no chosen trial: the cell's best trial on the test set stands in (optimistic)
  seeds: tuple[str, ...] = ()  # the run ids the verdict read

  def text(self) -> str:
    return (
      f"{self.technique} `{self.run_id}`"
      + (" (best on test: nothing chosen)" if self.best_on_test else "")
      + f" {regimes.vd.shown_text(self.verdict)}"
    )

  def short(self) -> str:
    n = self.verdict.num_values
    how = "best on test, 1 run" if self.best_on_test else f"{n} seed{'s' if n > 1 else ''}"
    return f"{regimes.vd.shown(self.verdict.verdict)} ({self.technique}, {how})"


_STRENGTH = {"pass": 2, "borderline": 1, "fail": 0}
_NOT_EVIDENCE = ("pending", "running", "failed")  # a seed not yet run, or crashed, says nothing about the recipe


def seeds_of(reps: Sequence[Trial], t: Trial, *, selected: bool = False) -> list[Trial]:
  """The seeds a Def. 2.1/2.2 verdict reads: a trial and its replicates (fresh seeds of the same configuration).
  A ``selected`` trial (chosen among its cell's search on validation) is left out when it has replicates: its own
  test accuracy shares the luck that got it chosen (replicates.py); an unsearched one (a linear-scaling run)
  counts as one seed among them."""
  own = [r for r in reps if r.replicate_of == t.run_id and r.status not in _NOT_EVIDENCE]
  return own if (selected and own) else [t] + own


def reach_evidence(
  trials: Sequence[Trial],
  reps: Sequence[Trial],
  techniques: Sequence[str],
  batch: int,
  baseline: Baseline,
  reading: str = regimes.READING,
) -> Optional[ReachEvidence]:
  """Def. 2.2 at ``batch`` (verdict.py): per declared technique and cell, the configuration the cell chose on the
  validation split (selection.chosen_of_cell) with its replicate seeds; a cell without a chosen trial (none ran its
  full budget, or no validation split) is read from its trial with the best test accuracy, one run. A chosen
  configuration's verdict outranks any best-on-test one (selected on test, it is optimistic); then the strongest
  verdict wins (pass > borderline > fail), then the larger mean."""
  best = None
  for name in techniques:
    cells: dict[str, list[Trial]] = {}
    for t in trials:
      if t.technique == name and t.batch_size == batch:
        cells.setdefault(t.cell or t.run_id, []).append(t)
    for key, group in cells.items():
      pick = selection.chosen_of_cell(group + [r for r in reps if r.cell and r.cell == key])
      on_test = pick is None
      if on_test:
        pick = max(group, key=lambda t: regimes.best_accuracy_within_budget(t, baseline, reading=reading))
      seeds = seeds_of(reps, pick, selected=len(group) > 1)
      v = regimes.reach_verdict(seeds, baseline, reading=reading)
      rank = (not on_test, _STRENGTH[v.verdict], v.value)
      if best is None or rank > best[0]:
        best = (rank, ReachEvidence(name, pick.run_id, v, on_test, tuple(t.run_id for t in seeds)))
  return best[1] if best else None


def disagreements(r: regimes.Regimes, d21v: dict, d22: dict) -> list[str]:
  """Where a label (one passing or reaching run suffices) and the verdict over seeds disagree: the label then rests
  on a single run that the configuration's other seeds do not repeat."""
  out = []
  for b, label in r.labels.items():
    if label.startswith("linear scaling works") and d21v.get(b) == "fail":
      out.append(f"batch {b}: one linear-scaling run passes Def. 2.1 but its seeds fail it")
    techs = [n for n in r.reached_by.get(b, ()) if n != "linear"]
    if techs and b in d22 and d22[b].verdict.verdict == "fail":
      out.append(
        f"batch {b}: a trial of {', '.join(techs)} reaches 99.5%·A, but no technique's chosen configuration "
        f"does over its seeds (Def. 2.2 {d22[b].short()})" + ("; B_H rests on that trial" if b == r.b_h else "")
      )
    if not r.reached_by.get(b) and b in d22 and d22[b].verdict.verdict == "pass":
      out.append(
        f"batch {b}: no trial's own run reaches 99.5%·A, but {d22[b].technique}'s chosen configuration does "
        f"over its replicate seeds (Def. 2.2 {d22[b].short()}); the label reads the trials alone"
      )
  return out
