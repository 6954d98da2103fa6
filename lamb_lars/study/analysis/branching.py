"""The critical batch size over training, measured by branching (Merrill et al. 2025, "Critical Batch Size
Revisited: A Simple Empirical Approach to Large-Batch Language Model Training", arXiv:2505.23971).

The measurement. A reference run trains at the base batch B0 and saves checkpoints. From the checkpoint at training
progress t, short *branches* restore its parameters and optimizer state and train on at batches k·B0 (k = 1, 2, 4,
…) for the same Δ examples, the LR following a scaling rule. The branch at k = 1 is the reference's own
continuation. A batch B "does not lose" at t when its branch ends within ε of that continuation's loss; the
critical batch CBS(t) is the largest batch that does not lose. Merrill et al. find CBS(t) near 0 at
initialisation, rising fast, then flat, and the gradient noise scale a poor proxy for it.

What this module computes, and the choices that are ours (named, not the paper's):

* Paired differences. Each branch seed s runs at every batch from the same checkpoint, so the comparison is
  paired: d_s(t, B) = L_s(t, B) − L_s(t, B0), with L the loss after Δ examples (validation or training loss: the
  study says which).
* A verdict per (t, B) from the interval of the d_s against ε (lamb_lars/study/analysis/verdict.py, ``mode='min'``):
  ``pass`` when the whole 95% interval is ≤ ε, ``fail`` when it is wholly > ε, else ``borderline``. A branch
  that blew up (its loss non-finite or ≥ ``BLOWUP`` = 1e10) loses, and a batch with such a branch is ``fail``
  whatever its other seeds do (issue 41: the t-interval rule called it borderline).
* ε is absolute (``relative=False``) or a fraction of the reference loss (``relative=True``).
* Monotone closure (our choice): CBS(t) counts a batch only when every smaller tested batch also passes, so a lucky
  large batch above a losing one does not raise it.
* The result is a bracket, not a point: ``low`` = the largest batch with every batch up to it ``pass``; ``high`` =
  the largest batch with none up to it ``fail``. When every tested batch passes, the critical batch is at least the
  largest tested (``censored``): the ladder was too short, which is a search-range artefact, not a finding.

Batch-size warmup (Merrill et al. §5; Smith et al. 2017 is the older form) turns a measured CBS(t) into a batch
schedule: start at B0 and, at each measured point, double the batch as long as the conservative CBS (``low``)
is at least twice it (:func:`warmup_schedule`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Mapping, Optional, Sequence

from lamb_lars.study.analysis import verdict as verdict_lib

BLOWUP = 1e10  # a branch loss at or above this (or non-finite) blew up: that batch fails at that point


def blew_up(loss: float) -> bool:
  """Whether a branch's loss is non-finite or ≥ ``BLOWUP``."""
  return not math.isfinite(loss) or loss >= BLOWUP


@dataclasses.dataclass(frozen=True)
class BranchLoss:
  """One branch's result: from the reference checkpoint at ``point`` (epochs of the reference), at ``batch_size``,
  with branch seed ``seed``, the loss after Δ examples (``nan`` or ``inf`` when the branch diverged)."""

  point: float
  batch_size: int
  seed: int
  loss: float


@dataclasses.dataclass(frozen=True)
class CriticalBatch:
  """CBS at one branch point: the bracket [low, high] and the per-batch verdicts it comes from."""

  point: float
  low: Optional[int]  # largest batch with every tested batch ≤ it passing; None: even the smallest k > 1 fails
  high: Optional[int]  # largest batch with no tested batch ≤ it failing
  censored: bool  # every tested batch passes: CBS ≥ the largest tested batch
  verdicts: Mapping[int, verdict_lib.Verdict]


def paired_differences(branches: Sequence[BranchLoss], point: float, base_batch: int) -> dict[int, list[float]]:
  """{batch: [L_s(B) − L_s(B0) per seed s present at both]} at one branch point (B0 itself excluded)."""
  at = [b for b in branches if b.point == point]
  ref = {b.seed: b.loss for b in at if b.batch_size == base_batch}
  if not ref:
    raise ValueError(f"no reference continuation (batch {base_batch}) at branch point {point}.")
  out: dict[int, list[float]] = {}
  for b in sorted(at, key=lambda b: (b.batch_size, b.seed)):
    if b.batch_size != base_batch and b.seed in ref:
      diff = math.inf if blew_up(b.loss) else b.loss - ref[b.seed]
      out.setdefault(b.batch_size, []).append(diff)
  return out


def critical_batch(
  branches: Sequence[BranchLoss],
  point: float,
  base_batch: int,
  epsilon: float,
  *,
  relative: bool = False,
  tolerance: Optional[float] = None,
) -> CriticalBatch:
  """CBS at ``point`` from its branches (see the module docstring).

  ``epsilon``: the loss a branch may lose, absolute, or a fraction of the mean reference loss when ``relative``.
  ``tolerance``: the single-seed half-width of the verdict (default ε/2: one seed within ε/2 of ε is borderline).
  """
  diffs = paired_differences(branches, point, base_batch)
  if relative:
    refs = [b.loss for b in branches if b.point == point and b.batch_size == base_batch]
    epsilon = epsilon * sum(refs) / len(refs)
  half = epsilon / 2 if tolerance is None else tolerance
  verdicts = {}
  for batch, d in sorted(diffs.items()):
    v = verdict_lib.threshold_verdict(d, epsilon, mode="min", tolerance=half)
    verdicts[batch] = dataclasses.replace(v, verdict=verdict_lib.FAIL) if any(math.isinf(x) for x in d) else v
  low = high = None
  still_pass, still_open = True, True
  for batch, v in verdicts.items():
    still_pass = still_pass and v.verdict == verdict_lib.PASS
    still_open = still_open and v.verdict != verdict_lib.FAIL
    low = batch if still_pass else low
    high = batch if still_open else high
  censored = bool(verdicts) and still_pass
  return CriticalBatch(point, low, high, censored, verdicts)


def trajectory(branches: Sequence[BranchLoss], base_batch: int, epsilon: float, **kwargs) -> list[CriticalBatch]:
  """CBS(t) at every branch point, in training order."""
  return [critical_batch(branches, p, base_batch, epsilon, **kwargs) for p in sorted({b.point for b in branches})]


def doubling_schedule(
  limits: Sequence[tuple[float, Optional[float]]], base_batch: int, max_batch: Optional[int] = None
) -> list[tuple[float, int]]:
  """[(from_epoch, batch), …] starting at (0, B0): at each (point, limit) in order, the batch doubles while twice
  it is ≤ the limit (None or non-finite: keep the batch) and ≤ ``max_batch``. It never shrinks: Merrill et al.'s
  CBS(t) rises and then plateaus, and a schedule that shrinks would undo the steps it saved."""
  schedule = [(0.0, base_batch)]
  batch = base_batch
  for point, limit in sorted(limits, key=lambda pl: pl[0]):
    grown = batch
    while (
      limit is not None
      and math.isfinite(limit)
      and 2 * grown <= limit
      and (max_batch is None or 2 * grown <= max_batch)
    ):
      grown *= 2
    if grown != batch:
      batch = grown
      schedule.append((float(point), batch))
  return schedule


def warmup_schedule(
  cbs: Sequence[CriticalBatch],
  base_batch: int,
  max_batch: Optional[int] = None,
) -> list[tuple[float, int]]:
  """A batch-size warmup from a measured CBS(t): :func:`doubling_schedule` on the conservative CBS (``low``; a
  point with no passing batch keeps the current one)."""
  return doubling_schedule([(c.point, c.low) for c in cbs], base_batch, max_batch)
