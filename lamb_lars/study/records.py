"""The records every study analysis reads: one ``Trial`` per run, the goal of a steps-to-target study, the
baseline of a workload, the Table 3 variants, the trial statuses and the chance-level threshold.

This is the bottom layer of ``lamb_lars.study``: it imports nothing else from the study package. The analyses
(``steps_to_target``, ``critical_batch``, ``regimes``, ``table3``, ``report``) read records only; the running side
(``sweep``, ``search``, ``store``, ``runner``) writes them. Definitions and citations: docs/studies.md.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any, Mapping, Optional, Sequence

from lamb_lars.train.stopping import chance_threshold  # noqa: F401  (the trainer's dead-run rule uses the same threshold)

# How a trial ended. 'pruned' = stopped by the search at a rung because other trials of its cell were better
# (successive halving); 'diverged' = a non-finite loss, stopped because it never left chance level, or trained its
# budget without learning (result.json's not_learning: exploding_loss | chance_accuracy, lamb_lars/train/stopping.py).
STATUSES = ("pending", "running", "done", "diverged", "pruned", "failed")
FINISHED = ("done", "diverged", "pruned")  # a re-run of the study never starts these again

# What a trial is for in a study (docs/studies.md "Roles"):
#   baseline  the workload's one baseline recipe at B0 (You et al. 2020 Table 2): defines A and ξ
#   linear    the baseline recipe with η·B/B0 and nothing else changed: the test of Def. 2.1 (B_L)
#   technique a named technique (LR/warmup tuning, LARS, LAMB, …): evidence for Def. 2.2 (B_H)
#   table3    a Table 3 cell (optimizer × variant at one batch)
#   search    anything else (e.g. a plain metaparameter search)
#   warmup    an arm of a batch-size-warmup comparison, named in ``technique`` (analysis/batch_warmup.py)
#   branch    a short run from a checkpoint of the baseline (the reference) at another batch (Merrill et al. 2025;
#             lamb_lars/study/running/branches.py)
ROLES = ("baseline", "linear", "technique", "table3", "search", "warmup", "branch")

# You et al. 2020 Table 3 columns: the optimizer as is, with a layer-wise LR (trust ratio ‖w‖/‖d‖) and with that
# ratio bounded.
VARIANTS = ("original", "layerwise", "layerwise_bound")
_VARIANT_KEYS = {re.sub(r"[^a-z0-9]", "", v): v for v in VARIANTS}


def normalise_variant(variant: Optional[str]) -> str:
  """'layer-wise + bound', 'LayerwiseBound', 'layerwise_bound' → 'layerwise_bound'; '' / None → 'original'."""
  key = re.sub(r"[^a-z0-9]", "", (variant or "original").lower())
  if key not in _VARIANT_KEYS:
    raise ValueError(f"variant {variant!r} is not one of {VARIANTS}.")
  return _VARIANT_KEYS[key]


@dataclasses.dataclass(frozen=True)
class Trial:
  """One run as the analyses see it: what it was for, what was swept, how it ended, and its eval curve.

  ``curve``: eval rows sorted by step, each a dict with ``step, epoch, examples, wall_time`` and the logged
  metrics (``eval_accuracy``/``eval_loss`` on the test split, ``validation_loss``/``validation_accuracy`` on the
  held-out split when there is one, ``train_loss``, ``lr``, ``noise_scale``, …).
  ``budget_epochs``: the duration the trial was configured for (ρ for a full run).
  ``stopped``: why it ended before its budget: 'target', 'dead', 'nonfinite', 'pruned', or None.
  ``seed``: its ``config.seed`` (initialisation, data order and per-step randomness such as dropout).
  ``phase``: 'search' (the study's own trials), 'extend<k>' (the k-th automatic extension of its cell's LR range)
  or 'replicate' (the cell's chosen configuration re-run with a fresh seed); ``replicate_of``: the chosen trial a
  replicate repeats; ``promoted``: a pruned trial resumed to its full budget so that its cell has the minimum
  number of full-budget trials; ``space``: the search space its point was drawn from (phases.py).
  """

  run_id: str
  batch_size: int
  optimizer: str = ""
  variant: str = "original"
  role: str = "search"
  technique: str = ""
  cell: str = ""
  params: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  status: str = "done"
  stopped: Optional[str] = None
  budget_epochs: Optional[float] = None
  curve: Sequence[Mapping[str, Any]] = ()
  error: Optional[str] = None
  wall_time: Optional[float] = None
  seed: Optional[int] = None
  phase: str = "search"
  replicate_of: str = ""
  promoted: bool = False
  space: Mapping[str, Any] = dataclasses.field(default_factory=dict)

  def budget_steps(self) -> Optional[int]:
    """The steps of its full budget: ⌈budget_epochs × steps per epoch⌉ (the trainer's rounding, durations.py), the
    steps per epoch read from its last eval with both (epochs are logged to 6 decimals, hence the tolerance).
    None when it has no budget or no such eval."""
    rows = [r for r in self.curve if r.get("epoch") and r.get("step")]
    if not self.budget_epochs or not rows:
      return None
    exact = float(self.budget_epochs) * float(rows[-1]["step"]) / float(rows[-1]["epoch"])
    return int(math.ceil(exact * (1 - 1e-6)))

  def last(self, key: str) -> Optional[float]:
    """The metric at the last eval that logged it."""
    vals = [r[key] for r in self.curve if r.get(key) is not None]
    return float(vals[-1]) if vals else None

  def best(self, key: str, mode: str = "max") -> Optional[float]:
    """The best finite value of the metric over the curve."""
    vals = [float(r[key]) for r in self.curve if r.get(key) is not None and math.isfinite(float(r[key]))]
    if not vals:
      return None
    return max(vals) if mode == "max" else min(vals)

  @property
  def final_epoch(self) -> Optional[float]:
    return float(self.curve[-1]["epoch"]) if self.curve and self.curve[-1].get("epoch") is not None else None

  @property
  def ran_full_budget(self) -> bool:
    """Done, not stopped early, and its last eval at (or past) its budget."""
    if self.status != "done" or self.stopped:
      return False
    if self.budget_epochs is None or self.final_epoch is None:
      return self.status == "done"
    return self.final_epoch >= self.budget_epochs * (1 - 1e-6)


@dataclasses.dataclass(frozen=True)
class Target:
  """The goal of steps-to-target (Shallue et al. 2018): ``metric`` meets ``goal`` (≥ for 'max', ≤ for 'min')."""

  metric: str
  goal: float
  mode: str  # 'max' | 'min'; the study's analysis section gives all three (lamb_lars/configs/studies/common.py)


@dataclasses.dataclass(frozen=True)
class Baseline:
  """A workload's baseline (You et al. 2020 Table 2): batch B0, test accuracy A, validation loss ξ, budget ρ
  epochs, and the number of training examples N (the full batch B_F); A and ξ are means over its seeds when it
  was replicated."""

  batch_size: int
  accuracy: float
  val_loss: float
  epochs: float
  num_train: int
  run_id: str = ""
  seed_accuracies: tuple = ()  # each seed's A when the baseline was replicated (A is their mean)
  seed_val_losses: tuple = ()
  seeds_left_out: tuple = ()  # "<run id> (<status>)" of replicates that ended without a result (diverged, failed)


def select(trials: Sequence[Trial], **fields: Any) -> list[Trial]:
  """Trials whose attributes equal the given values, e.g. ``select(ts, role='linear', batch_size=8192)``."""
  return [t for t in trials if all(getattr(t, k) == v for k, v in fields.items())]
