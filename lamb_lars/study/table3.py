"""You et al. 2020 ("The Limit of the Batch Size") Table 3: test accuracy per optimizer at a large batch, for the
optimizer as is ('original'), with layer-wise LR ('layer-wise', trust ratio ‖w‖/‖d‖) and with the ratio bounded
('layer-wise + bound'), next to the baseline-batch accuracy.

Verdict of one trial (accuracy = ``metric``, a fraction in [0, 1]; "final" = its last eval; points = 0.01):

* **diverge**: status ``diverged`` (the trainer saw NaN/inf), or the final loss is not finite, or the final
  accuracy ≤ chance + ``chance_margin`` (chance = 1/num_classes; default margin 5 points: ≤ 15% on MNIST).
* **unstable** (not diverged): the final accuracy is more than ``drop_tol`` (default 1 point) below the best
  accuracy the trial reached, or accuracy fell by more than ``spike_tol`` (default 5 points) between two
  consecutive evals. Loss is not used: training loss legitimately rises mid-training at huge batch
  (the paper's Figure 4) and validation loss rises with over-confidence while accuracy holds.
* **ok**: neither.

A cell summarises its trials (a metaparameter search; ``failed`` runs and runs without evals are not results):
the best final accuracy among 'ok' trials, shown in percent; if no trial is ok, 'unstable' if any trial is
unstable, else 'diverge'; 'n/a' when there are no trials.
"""
from __future__ import annotations

import dataclasses
import math
import re
from typing import Iterable, Mapping, Optional, Sequence

from lamb_lars.study.store import Trial

# (column name, normalised variant name); a trial's variant is normalised by lower-casing and dropping
# everything but letters and digits, so 'layer-wise + bound', 'layerwise_bound' and 'LayerWise+Bound' agree.
COLUMNS = (("original", "original"), ("layer-wise", "layerwise"), ("layer-wise + bound", "layerwisebound"))
_ORIGINAL_ALIASES = ("", "none", "original", "base", "plain")
OPTIMIZER_ORDER = ("sgd", "momentum", "nesterov", "adagrad", "rmsprop", "adam", "adamw", "lars", "lamb")


@dataclasses.dataclass(frozen=True)
class Verdict:
  """One trial's verdict ('ok' | 'diverge' | 'unstable'), final and best accuracy, and why."""
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

  def text(self, digits: int = 1) -> str:
    return f"{100 * self.accuracy:.{digits}f}" if self.verdict == "ok" else self.verdict


@dataclasses.dataclass(frozen=True)
class Table3:
  """Rows (optimizers) × columns; ``cells[(row, column)]``; the first column is the baseline when given."""
  batch_size: int
  baseline_batch: Optional[int]
  rows: tuple[str, ...]
  columns: tuple[str, ...]
  cells: Mapping[tuple[str, str], Cell]


def normalise_variant(variant: str) -> str:
  v = re.sub(r"[^a-z0-9]", "", (variant or "").lower())
  return "original" if v in _ORIGINAL_ALIASES else v


def _finite(x) -> bool:
  return x is not None and math.isfinite(float(x))


def trial_verdict(trial: Trial, *, metric: str = "eval_accuracy", loss_key: str = "eval_loss",
                  num_classes: int = 10, chance_margin: float = 0.05, drop_tol: float = 0.01,
                  spike_tol: float = 0.05) -> Optional[Verdict]:
  """The trial's verdict (module docstring); None when it is no result (failed, or no evals and not diverged)."""
  curve = sorted(trial.curve, key=lambda r: r["step"])
  accs = [float(r[metric]) for r in curve if r.get(metric) is not None]
  final = accs[-1] if accs else None
  best = max((a for a in accs if math.isfinite(a)), default=None)
  if trial.status == "failed":
    return None
  if trial.status == "diverged":
    return Verdict("diverge", final, best, "run diverged")
  if not curve or final is None:
    return None
  last_loss = curve[-1].get(loss_key)
  if last_loss is not None and not _finite(last_loss):
    return Verdict("diverge", final, best, "final loss not finite")
  if not math.isfinite(final) or final <= 1.0 / num_classes + chance_margin:
    return Verdict("diverge", final, best, "final accuracy at chance")
  if best is not None and final < best - drop_tol:
    return Verdict("unstable", final, best, f"final {final:.4f} < best {best:.4f} − {drop_tol}")
  for a, b in zip(accs, accs[1:]):
    if a - b > spike_tol:
      return Verdict("unstable", final, best, f"accuracy fell from {a:.4f} to {b:.4f} between evals")
  return Verdict("ok", final, best)


def cell(trials: Iterable[Trial], **verdict_kw) -> Cell:
  """Summarises the trials of one (optimizer, variant, batch) as one cell."""
  judged = [(t, v) for t in trials if (v := trial_verdict(t, **verdict_kw)) is not None]
  counts: dict[str, int] = {}
  for _, v in judged:
    counts[v.verdict] = counts.get(v.verdict, 0) + 1
  ok = [(t, v) for t, v in judged if v.verdict == "ok"]
  if ok:
    t, v = min(ok, key=lambda tv: (-tv[1].final, tv[0].run_id))  # ties: smaller run_id
    return Cell("ok", v.final, t.run_id, len(judged), counts)
  if not judged:
    return Cell("n/a")
  verdict = "unstable" if counts.get("unstable") else "diverge"
  return Cell(verdict, None, None, len(judged), counts)


def _order(names: Iterable[str]) -> tuple[str, ...]:
  rank = {n: i for i, n in enumerate(OPTIMIZER_ORDER)}
  return tuple(sorted(set(names), key=lambda n: (rank.get(n.lower(), len(rank)), n)))


def batch_label(batch: int) -> str:
  """8192 → '8K', 32768 → '32K', 256 → '256' (powers-of-two K as in the paper)."""
  return f"{batch // 1024}K" if batch >= 1024 and batch % 1024 == 0 else str(batch)


def build_table3(trials: Sequence[Trial], batch_size: int, *, baseline_batch: Optional[int] = None,
                 optimizers: Optional[Sequence[str]] = None,
                 columns: Sequence[tuple[str, str]] = COLUMNS, **verdict_kw) -> Table3:
  """Table 3 at ``batch_size``; with ``baseline_batch``, a first column 'bs B0' from its 'original' trials."""
  rows = tuple(optimizers) if optimizers is not None else _order(t.optimizer for t in trials)
  cols, cells = [], {}
  if baseline_batch is not None:
    name = f"bs {baseline_batch}"
    cols.append(name)
    for opt in rows:
      cells[(opt, name)] = cell([t for t in trials if t.optimizer == opt and t.batch_size == baseline_batch
                                 and normalise_variant(t.variant) == "original"], **verdict_kw)
  for name, key in columns:
    cols.append(name)
    for opt in rows:
      cells[(opt, name)] = cell([t for t in trials if t.optimizer == opt and t.batch_size == batch_size
                                 and normalise_variant(t.variant) == normalise_variant(key)], **verdict_kw)
  return Table3(batch_size=batch_size, baseline_batch=baseline_batch, rows=rows, columns=tuple(cols),
                cells=cells)


def render_markdown(table: Table3, digits: int = 1) -> str:
  """The table as markdown; accuracy in %, 'diverge' / 'unstable' / 'n/a' verbatim."""
  k = batch_label(table.batch_size)
  heads = [c if c.startswith("bs ") else f"{k} {c}" for c in table.columns]
  lines = ["| solver | " + " | ".join(heads) + " |", "|---" * (len(heads) + 1) + "|"]
  for opt in table.rows:
    lines.append(f"| {opt} | " + " | ".join(table.cells[(opt, c)].text(digits) for c in table.columns) + " |")
  return "\n".join(lines) + "\n"
