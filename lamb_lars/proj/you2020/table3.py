"""You et al. 2020 ("The Limit of the Batch Size") Table 3: test accuracy per optimizer at a large batch, for the
optimizer as is ('original'), with a layer-wise LR ('layer-wise', trust ratio ‖w‖/‖d‖) and with the ratio
bounded ('layer-wise + bound'), next to the baseline-batch column.

Verdict of one trial (accuracy = test accuracy, a fraction; definitions in docs/studies.md):

* **diverge**: a non-finite loss (the trainer stopped it: status ``diverged``), or a run that ends at chance level —
  its final test accuracy is ≤ ``records.chance_threshold(C)`` (32.5% for 10 classes): it never got off chance
  level, or fell back to it and stayed (seen at batch 8K: 36% after one epoch, then 11% with loss ln 10 for the
  remaining 29). A run the trainer stopped as dead (``stopped='dead'``: several evaluations in a row at chance
  level) is the same case.
* **unstable** (not diverged): the run ended more than ``drop_tol`` (1 point) below the best test accuracy it had
  reached: it learned, then lost it and did not recover. A run that dips and recovers to end at its best is
  not unstable, however deep the dip.
* **ok**: neither.
* **pruned**: stopped by the search at a rung (other trials of its cell were better); not a result.

A cell summarises the trials of one (optimizer, variant, batch) after a metaparameter search. Its chosen trial is
the 'ok' trial that ran its full budget with the best final *validation* accuracy (selection.py: choosing on the
test set would bias the cell upward); its accuracy is the mean final test accuracy of the chosen configuration's
replicates (fresh seeds, replicates.py) when it has any, else the chosen trial's own final test accuracy (a single
run, no interval). A cell with fixed settings (one trial, no search: replicates.fixed_settings) selected nothing:
its first run counts as one more seed, in the accuracy and in the verdict counts. A study without a validation
split selects on the test accuracy, and the cell says so (``selected_on``). If no trial is 'ok' and full-budget:
'unstable' if any trial was unstable, else 'diverge' if any diverged, else 'n/a'. Failed (crashed) and unfinished
trials are not results.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Iterable, Mapping, Optional, Sequence

from lamb_lars.proj.you2020 import paper as paper_numbers
from lamb_lars.study.report import plots
from lamb_lars.study.analysis import replicates as replicates_lib
from lamb_lars.study.report.markdown import pct, table
from lamb_lars.study.records import Trial, VARIANTS, chance_threshold, normalise_variant
from lamb_lars.study.analysis.selection import choose

COLUMN_NAMES = {"original": "original", "layerwise": "layer-wise", "layerwise_bound": "layer-wise + bound"}
OPTIMIZER_ORDER = ("sgd", "momentum", "nesterov", "adagrad", "rmsprop", "adam", "adamw", "lars", "lamb")
ACC = "eval_accuracy"
# ± 0.3 percentage points: Table 3 of You et al. 2020 prints one decimal, and runs of the same recipe differ by
# about that much (docs/studies: pairs of identical MNIST configurations differed by up to 0.32 pp).
PAPER_TOLERANCE = 0.003
LOSSES = ("train_loss", "eval_loss", "validation_loss")


@dataclasses.dataclass(frozen=True)
class Verdict:
  """One trial's verdict ('ok' | 'diverge' | 'unstable' | 'pruned'), final and best test accuracy, and why."""

  verdict: str
  final: Optional[float]
  best: Optional[float]
  reason: str = ""


@dataclasses.dataclass(frozen=True)
class Cell:
  """A table cell: verdict ('ok' | 'diverge' | 'unstable' | 'n/a'), accuracy of the best ok trial, counts."""

  verdict: str
  accuracy: Optional[float] = None
  run_id: Optional[str] = None
  num_trials: int = 0
  counts: Mapping[str, int] = dataclasses.field(default_factory=dict)
  selected_on: str = ""  # 'validation_accuracy' | 'eval_accuracy' (test)
  replicates: Optional[replicates_lib.Summary] = None  # test accuracy over the chosen trial's fresh seeds
  seed_verdicts: Mapping[str, int] = dataclasses.field(default_factory=dict)  # those seeds' trial verdicts

  def text(self, digits: int = 1) -> str:
    return f"{100 * self.accuracy:.{digits}f}" if self.verdict == "ok" else self.verdict


@dataclasses.dataclass(frozen=True)
class Table3:
  """Rows (optimizers) × columns; ``cells[(row, column)]``; the first column is the baseline batch when given."""

  batch_size: int
  baseline_batch: Optional[int]
  rows: tuple[str, ...]
  columns: tuple[str, ...]
  cells: Mapping[tuple[str, str], Cell]


def _nonfinite_loss(trial: Trial) -> bool:
  return any(r.get(k) is not None and not math.isfinite(float(r[k])) for r in trial.curve for k in LOSSES)


def trial_verdict(trial: Trial, *, num_classes: int = 10, drop_tol: float = 0.01) -> Optional[Verdict]:
  """The trial's verdict (module docstring); None when it is no result (failed, or not finished)."""
  if trial.status in ("failed", "pending", "running"):
    return None
  final, best = trial.last(ACC), trial.best(ACC)
  if trial.status == "pruned":
    return Verdict("pruned", final, best, "stopped by the search")
  if trial.status == "diverged" and trial.stopped != "dead":
    return Verdict("diverge", final, best, trial.error or "non-finite loss")
  if _nonfinite_loss(trial):
    return Verdict("diverge", final, best, "non-finite loss")
  threshold = chance_threshold(num_classes)
  if final is None or not math.isfinite(final) or final <= threshold:
    shown = "no eval" if final is None else f"{100 * final:.2f}%"
    how = "never left chance level" if best is None or best <= threshold else "fell back to chance level"
    return Verdict("diverge", final, best, f"{how} (final {shown} ≤ {100 * threshold:.1f}%)")
  if final < best - drop_tol:
    return Verdict(
      "unstable",
      final,
      best,
      f"ended at {100 * (final or 0):.2f}%, {100 * (best - (final or 0)):.2f} points below its best {100 * best:.2f}%",
    )
  return Verdict("ok", final, best)


def cell(trials: Iterable[Trial], **verdict_kw) -> Cell:
  """Summarises the trials of one (optimizer, variant, batch) as one cell (module docstring)."""
  everything = list(trials)
  # A cell with fixed settings selected nothing, so each of its seeds is judged (replicates.fixed_settings).
  fixed = replicates_lib.fixed_settings(everything) is not None
  judged = [
    (t, v)
    for t in everything
    if (fixed or t.phase != "replicate") and (v := trial_verdict(t, **verdict_kw)) is not None
  ]
  counts: dict[str, int] = {}
  for _, v in judged:
    counts[v.verdict] = counts.get(v.verdict, 0) + 1
  ok = [(t, v) for t, v in judged if v.verdict == "ok" and t.ran_full_budget and t.phase != "replicate"]
  if ok:
    by_id = {t.run_id: v for t, v in ok}
    on = "validation_accuracy" if all(t.last("validation_accuracy") is not None for t, _ in ok) else ACC
    t = choose([t for t, _ in ok], on)
    seeds = replicates_lib.seeds_of(everything, t.run_id)
    summary = replicates_lib.accuracy_summary(seeds, ACC)
    acc = summary.mean if summary.n else by_id[t.run_id].final
    seed_verdicts: dict[str, int] = {}
    for v in (trial_verdict(r, **verdict_kw) for r in seeds):
      if v is not None:
        seed_verdicts[v.verdict] = seed_verdicts.get(v.verdict, 0) + 1
    return Cell("ok", acc, t.run_id, len(judged), counts, on, summary if summary.n else None, seed_verdicts)
  verdict = "unstable" if counts.get("unstable") else "diverge" if counts.get("diverge") else "n/a"
  return Cell(verdict, None, None, len(judged), counts)


def _order(names: Iterable[str]) -> tuple[str, ...]:
  rank = {n: i for i, n in enumerate(OPTIMIZER_ORDER)}
  return tuple(sorted(set(names), key=lambda n: (rank.get(n.lower(), len(rank)), n)))


def batch_label(batch: int) -> str:
  """8192 → '8K', 32768 → '32K', 256 → '256' (powers-of-two K as in the paper)."""
  return f"{batch // 1024}K" if batch >= 1024 and batch % 1024 == 0 else str(batch)


def study_table3(
  trials: Sequence[Trial], batch: Optional[int], baseline_batch: Optional[int], workload: str, num_classes: int
) -> tuple[int, Optional[int], Table3]:
  """(the Table 3 batch, its B0 column's batch or None, the table) of a study, as both report sections read it: at
  ``batch`` (else the largest
  ``role='table3'`` batch), with a B0 column at the baseline's batch, else the paper's B0 (so a Table 3 study
  without a 'baseline' trial still compares its B0 cells with the paper)."""
  batch = batch or max(t.batch_size for t in trials if t.role == "table3")
  b0 = baseline_batch or paper_numbers.TABLE2.get(workload, {}).get("b0")
  return batch, b0, build_table3(trials, batch, baseline_batch=b0, num_classes=num_classes)


def build_table3(
  trials: Sequence[Trial],
  batch_size: int,
  *,
  baseline_batch: Optional[int] = None,
  optimizers: Optional[Sequence[str]] = None,
  **verdict_kw,
) -> Table3:
  """Table 3 at ``batch_size`` from the ``role='table3'`` trials; with ``baseline_batch``, a first column
  'bs B0' from the 'original' trials at B0."""
  trials = [t for t in trials if t.role == "table3"]
  rows = tuple(optimizers) if optimizers is not None else _order(t.optimizer for t in trials)
  columns: list[tuple[str, int, str]] = []
  if baseline_batch is not None:
    columns.append((f"bs {baseline_batch}", baseline_batch, "original"))
  columns += [(f"{batch_label(batch_size)} {COLUMN_NAMES[v]}", batch_size, v) for v in VARIANTS]
  cells = {}
  for name, batch, variant in columns:
    for opt in rows:
      group = [
        t for t in trials if t.optimizer == opt and t.batch_size == batch and normalise_variant(t.variant) == variant
      ]
      cells[(opt, name)] = cell(group, **verdict_kw)
  return Table3(
    batch_size=batch_size, baseline_batch=baseline_batch, rows=rows, columns=tuple(c[0] for c in columns), cells=cells
  )


def render_markdown(table: Table3, paper: Optional[Mapping[str, Sequence[str]]] = None, digits: int = 1) -> str:
  """The table as markdown (accuracy in %, verdicts verbatim); with ``paper``, each cell reads 'ours / paper'."""
  lines = ["| solver | " + " | ".join(table.columns) + " |", "|---" * (len(table.columns) + 1) + "|"]
  for opt in table.rows:
    cells = [table.cells[(opt, c)].text(digits) for c in table.columns]
    if paper is not None:
      ref = list(paper.get(opt, ())) + ["—"] * len(cells)
      cells = [f"{c} / {r}" for c, r in zip(cells, ref)]
    lines.append(f"| {opt} | " + " | ".join(cells) + " |")
  return "\n".join(lines) + "\n"


# --- the study report's sections (reference.py names them; lamb_lars/study/report/reference.py calls them)


def table3_section(
  trials: Sequence[Trial], spec: Any, baseline_batch: Optional[int], out_dir: Optional[str]
) -> list[str]:
  """The generic report's "Table 3" section (``spec``: its ReportSpec): the table, each cell against the paper, the
  trials per cell, and the curves of one trial per large-batch cell (``out_dir`` None: named, not drawn)."""
  if not any(t.role == "table3" for t in trials):
    return []
  lines = ["## Table 3: optimizer × layer-wise variants", ""]
  batch, _, cells = study_table3(trials, spec.table3_batch, baseline_batch, spec.workload, spec.num_classes)
  ref = paper_numbers.TABLE3 if spec.workload == "mnist_lenet" else None
  lines += [
    render_markdown(cells, ref),
    "Each cell: measured / paper. Measured = the mean final test accuracy "
    "(%) of the replicates of the cell's chosen trial (the full-budget trial, neither 'diverge' nor "
    "'unstable', with the best final validation accuracy), or that trial's own when it has no replicates "
    "(a single run); when there is none, the cell's verdict (docs/studies.md).",
    "",
  ]
  rows = []
  for opt in cells.rows:
    for col in cells.columns:
      c = cells.cells[(opt, col)]
      if c.num_trials:
        rows.append(
          [
            opt,
            col,
            c.text(2),
            c.run_id and f"`{c.run_id}`",
            ", ".join(f"{k} {v}" for k, v in sorted(c.counts.items())),
          ]
        )
  lines += ["Trials per cell:", ""] + table(["solver", "column", "cell", "best trial", "verdicts"], rows)
  curves = _curves(trials, cells, batch)
  if curves:
    name = plots.training_curves(
      out_dir, "table3_curves.png", curves, title=f"Table 3 at batch {batch:,}: one trial per optimizer × variant"
    )
    lines += [
      f"The trial shown per cell at batch {batch}: the cell's chosen trial, or (no trial ok) the full-budget "
      "trial with the best accuracy it ever reached.",
      "",
      f"![Table 3 curves]({name})",
      "",
    ]
  return lines


def _curves(trials: Sequence[Trial], cells: Table3, batch: int) -> dict[str, Sequence]:
  """{'<solver> <column>': eval curve} of one trial per large-batch cell (the evidence behind each cell)."""
  by_id = {t.run_id: t for t in trials}
  out = {}
  for opt in cells.rows:
    for col in cells.columns[-3:]:
      c = cells.cells[(opt, col)]
      pick = by_id.get(c.run_id) if c.run_id else None
      if pick is None:
        group = [
          t
          for t in trials
          if t.role == "table3"
          and t.optimizer == opt
          and t.batch_size == batch
          and COLUMN_NAMES[t.variant] == col.split(" ", 1)[1]
          and t.status in ("done", "diverged")
          and t.best(ACC) is not None
        ]
        pick = max(group, key=lambda t: t.best(ACC), default=None)
      if pick is not None:  # a cell's verdict ('diverge') is not the shown trial's status ('done'): both are named
        shown = "" if c.verdict == "ok" else f" (shown: a {pick.status} trial)"
        out[f"{opt} {col.split(' ', 1)[1]}: {c.text() + '%' if c.verdict == 'ok' else c.text()}{shown}"] = pick.curve
  return out


# A paper cell that is a label ("diverge", "unstable": the optimizer does not train stably at that batch) against
# ours. Pre-registered 2026-11-28 for issue 41's ':robust' study, before its first trial (the republish's momentum 8K
# original "differs (trains)" was a judgement call): the cell agrees when its search found no full-budget
# configuration that trains ('ok'), or when a fresh seed of its chosen configuration diverges or is unstable; it
# differs ('trains') when every fresh seed, at least ``MIN_LABEL_SEEDS``, trains; otherwise it is inconclusive.
LABELS = ("diverge", "unstable")
MIN_LABEL_SEEDS = 3


def label_agreement(c: Cell) -> str:
  """A cell against a paper label (the rule above), with the counts it read."""
  if c.verdict in LABELS:
    return f"agrees (no configuration of the search trains: {c.verdict})"
  if c.verdict != "ok":
    return "—"
  n = sum(c.seed_verdicts.values())
  bad = sum(v for k, v in c.seed_verdicts.items() if k in LABELS)
  if bad:
    return f"agrees ({bad} of {n} fresh seeds of the chosen configuration diverge or are unstable)"
  if n >= MIN_LABEL_SEEDS:
    return f"differs (trains: {n} of {n} fresh seeds of the chosen configuration)"
  return f"inconclusive ({n} fresh seeds, fewer than {MIN_LABEL_SEEDS})"


def _paper_label(opt: str, col_index: int) -> Optional[str]:
  ref = paper_numbers.TABLE3.get(opt)
  return ref[col_index] if ref and col_index < len(ref) and ref[col_index] in LABELS else None


def _paper_value(opt: str, col_index: int) -> Optional[float]:
  ref = paper_numbers.TABLE3.get(opt)
  if not ref or col_index >= len(ref):
    return None
  try:
    return float(ref[col_index]) / 100.0
  except ValueError:
    return None


def table3_replicates_section(
  trials: Sequence[Trial], batch: Optional[int], baseline_batch: Optional[int], num_classes: int, workload: str
) -> list[str]:
  """The "Table 3 cells against the paper" subsection of the replicates section: each replicated cell's 95% interval
  against the paper's value ± ``PAPER_TOLERANCE`` (agrees / differs / inconclusive)."""
  if workload != "mnist_lenet" or not any(t.role == "table3" and t.phase == "replicate" for t in trials):
    return []
  _, b0, cells = study_table3(trials, batch, baseline_batch, workload, num_classes)  # as table3_section
  rows = []
  for opt in cells.rows:
    for i, col in enumerate(cells.columns):
      c = cells.cells[(opt, col)]
      ref = _paper_value(opt, i if b0 else i + 1)
      label = _paper_label(opt, i if b0 else i + 1)
      if label is not None and c.num_trials:
        rows.append([opt, col, c.replicates.text() if c.replicates else c.verdict, label, label_agreement(c)])
        continue
      if c.replicates is None:
        continue
      rows.append(
        [
          opt,
          col,
          c.replicates.text(),
          pct(ref, 1),
          replicates_lib.agreement(c.replicates, ref, PAPER_TOLERANCE) if ref is not None else "—",
        ]
      )
  if not rows:
    return []
  return [
    "### Table 3 cells against the paper",
    "",
    f"A cell agrees when its 95% interval lies inside the paper's value ± {100 * PAPER_TOLERANCE:.1f} pp, "
    "differs when it lies wholly outside, and is inconclusive otherwise. Against a paper label (diverge, "
    "unstable: no stable training at that batch), a cell agrees when its search found no configuration that "
    "trains or a fresh seed of its chosen configuration diverges or is unstable, differs (trains) when every "
    f"fresh seed, at least {MIN_LABEL_SEEDS}, trains, and is inconclusive otherwise (pre-registered "
    "2026-11-28, before the robust study).",
    "",
  ] + table(["solver", "column", "replicates (%)", "paper (%)", "verdict"], rows)
