"""Batch-size regimes of a workload (You et al. 2020, "The Limit of the Batch Size", Definitions 2.1–2.3).

A workload has a baseline: batch B0, ρ epochs, test accuracy A, validation loss ξ.

* Def. 2.1, large batch: with the LR scaled linearly (η·B/B0), a run reaches accuracy ≥ 0.995·A **and**
  validation loss ≤ 1.2·ξ within ρ epochs. B_L is the largest such batch.
* Def. 2.2, huge batch (B > B_H): no available technique reaches 0.995·A within ρ epochs.
* Def. 2.3, full batch: B_F = number of training examples.

Measured per trial: a trial *passes* the large-batch test if one of its evals at epoch ≤ ρ has both accuracy
≥ 0.995·A and loss ≤ 1.2·ξ (at the same eval); it *reaches* if one eval at epoch ≤ ρ has accuracy ≥ 0.995·A.
Trials that diverged count as tested and failed; failed (crashed) trials are no evidence; pending/running trials
count only once they pass. A batch size passes if any of its trials passes (a metaparameter search).

From the per-batch evidence (tested batch sizes B > B0 only; untested sizes are gaps, never guessed):
  B_L = the largest tested B such that every tested batch in (B0, B] passes the linear-scaling test; B0 itself
        when the first tested batch fails (the baseline passes trivially); None when nothing above B0 was tested.
        ``b_l_next_fail`` = the first failing tested batch above B_L (None: the upper edge was not found).
  B_H = the largest tested B where some technique reaches 0.995·A (B0 if none does); every tested batch above it
        fails, so B_H lies in [b_h, b_h_next_fail). ``b_h_next_fail`` None: no failure above, B_H ≥ b_h.
Non-monotone evidence (a pass above a failure) is listed in ``anomalies`` — usually a sign of too little tuning.

Labels per tested batch: 'small' (B < B0), 'baseline', 'large' (linear scaling passes), 'large+technique'
(linear fails or untested, some technique reaches), 'huge' (no technique reaches), 'not-large' (linear scaling
fails, nothing else tried), 'full' (B ≥ B_F).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterable, Mapping, Optional

from lamb_lars.study.store import Trial

ACC_FRACTION = 0.995
LOSS_FACTOR = 1.2
_EPS = 1e-9


@dataclasses.dataclass(frozen=True)
class Baseline:
  """The workload's baseline run: batch B0, accuracy A, validation loss ξ, budget ρ epochs, |train set|."""
  batch_size: int
  accuracy: float
  val_loss: float
  epochs: float
  num_train: int


@dataclasses.dataclass(frozen=True)
class Regimes:
  """B_L, B_H (with the first failing tested batch above each), B_F, per-batch labels and anomalies."""
  b_l: Optional[int]
  b_l_next_fail: Optional[int]
  b_h: Optional[int]
  b_h_next_fail: Optional[int]
  b_f: int
  labels: Mapping[int, str]
  anomalies: tuple[str, ...] = ()


def row_epoch(row: Mapping[str, Any], batch_size: int, num_train: int) -> float:
  """The eval row's epoch: ``epoch`` if logged, else ``examples``/N, else step·B/N."""
  if row.get("epoch") is not None:
    return float(row["epoch"])
  if row.get("examples") is not None:
    return float(row["examples"]) / num_train
  return float(row["step"]) * batch_size / num_train


def _within(curve, baseline: Baseline, batch_size: int):
  limit = baseline.epochs * (1 + _EPS)
  return [r for r in curve if row_epoch(r, batch_size, baseline.num_train) <= limit]


def passes_large_batch(trial: Trial, baseline: Baseline, *, acc_key: str = "eval_accuracy",
                       loss_key: str = "eval_loss", acc_fraction: float = ACC_FRACTION,
                       loss_factor: float = LOSS_FACTOR) -> bool:
  """Def. 2.1 for one trial: an eval within ρ epochs with acc ≥ 0.995·A and loss ≤ 1.2·ξ."""
  if trial.status in ("diverged", "failed"):
    return False
  for r in _within(trial.curve, baseline, trial.batch_size):
    acc, loss = r.get(acc_key), r.get(loss_key)
    if acc is not None and loss is not None and acc >= acc_fraction * baseline.accuracy \
        and loss <= loss_factor * baseline.val_loss:
      return True
  return False


def reaches_accuracy(trial: Trial, baseline: Baseline, *, acc_key: str = "eval_accuracy",
                     acc_fraction: float = ACC_FRACTION) -> bool:
  """Def. 2.2's test for one trial: an eval within ρ epochs with acc ≥ 0.995·A."""
  if trial.status in ("diverged", "failed"):
    return False
  return any(r.get(acc_key) is not None and r[acc_key] >= acc_fraction * baseline.accuracy
             for r in _within(trial.curve, baseline, trial.batch_size))


def evidence(trials: Iterable[Trial], test: Callable[[Trial], bool]) -> dict[int, bool]:
  """``{batch: passed}`` over the batch sizes with evidence (see module docstring for which trials count)."""
  out: dict[int, bool] = {}
  for t in trials:
    if t.status == "failed":
      continue
    ok = test(t)
    if ok or t.status in ("done", "diverged"):
      out[int(t.batch_size)] = out.get(int(t.batch_size), False) or ok
  return out


def _edge(tested: Mapping[int, bool], b0: int, contiguous: bool) -> tuple[Optional[int], Optional[int]]:
  """(edge, first failing tested batch above it) over batches > b0; contiguous: stop at the first failure."""
  above = sorted(b for b in tested if b > b0)
  if not above:
    return None, None
  if contiguous:
    edge = b0
    for b in above:
      if not tested[b]:
        return edge, b
      edge = b
    return edge, None
  passing = [b for b in above if tested[b]]
  edge = passing[-1] if passing else b0
  fails = [b for b in above if b > edge and not tested[b]]
  return edge, (fails[0] if fails else None)


def _label(b: int, baseline: Baseline, linear_ok: Mapping[int, bool], any_ok: Mapping[int, bool]) -> str:
  if b >= baseline.num_train:
    return "full"
  if b == baseline.batch_size:
    return "baseline"
  if b < baseline.batch_size:
    return "small"
  if linear_ok.get(b):
    return "large"
  if any_ok.get(b):
    return "large+technique"
  if b in any_ok:
    return "huge"
  return "not-large"


def classify(baseline: Baseline, linear_ok: Mapping[int, bool], any_ok: Mapping[int, bool]) -> Regimes:
  """Regimes from per-batch evidence: ``linear_ok`` (Def. 2.1 test of linear-LR-scaled runs) and ``any_ok``
  (some technique reaches 0.995·A); a linear pass counts as a technique reaching."""
  any_ok = dict(any_ok)
  for b, ok in linear_ok.items():
    if ok:
      any_ok[b] = True
  b0 = baseline.batch_size
  b_l, b_l_next = _edge(linear_ok, b0, contiguous=True)
  b_h, b_h_next = _edge(any_ok, b0, contiguous=False)
  anomalies = []
  if b_l_next is not None:
    anomalies += [f"batch {b}: linear scaling passes above the first failure at {b_l_next}"
                  for b in sorted(linear_ok) if b > b_l_next and linear_ok[b]]
  if b_h is not None:
    anomalies += [f"batch {b}: no technique reached 0.995·A, but batch {b_h} did"
                  for b in sorted(any_ok) if b0 < b < b_h and not any_ok[b]]
  labels = {b: _label(b, baseline, linear_ok, any_ok) for b in sorted(set(linear_ok) | set(any_ok))}
  return Regimes(b_l=b_l, b_l_next_fail=b_l_next, b_h=b_h, b_h_next_fail=b_h_next, b_f=baseline.num_train,
                 labels=labels, anomalies=tuple(anomalies))


def classify_trials(baseline: Baseline, linear_trials: Iterable[Trial], all_trials: Iterable[Trial], *,
                    acc_key: str = "eval_accuracy", loss_key: str = "eval_loss",
                    acc_fraction: float = ACC_FRACTION, loss_factor: float = LOSS_FACTOR) -> Regimes:
  """Regimes from trials: ``linear_trials`` are the runs with LR = η·B/B0 (the caller selects them), and
  ``all_trials`` every run with any technique (warmup, LARS/LAMB, label smoothing, …)."""
  linear_ok = evidence(linear_trials, lambda t: passes_large_batch(
      t, baseline, acc_key=acc_key, loss_key=loss_key, acc_fraction=acc_fraction, loss_factor=loss_factor))
  any_ok = evidence(all_trials, lambda t: reaches_accuracy(t, baseline, acc_key=acc_key,
                                                           acc_fraction=acc_fraction))
  return classify(baseline, linear_ok, any_ok)


def baseline_from_trial(trial: Trial, num_train: int, *, epochs: Optional[float] = None,
                        acc_key: str = "eval_accuracy", loss_key: str = "eval_loss") -> Baseline:
  """A baseline from a finished run: A and ξ from its last eval at epoch ≤ ρ (ρ defaults to that eval's epoch)."""
  rows = sorted(trial.curve, key=lambda r: r["step"])
  if epochs is not None:
    rows = [r for r in rows if row_epoch(r, trial.batch_size, num_train) <= epochs * (1 + _EPS)]
  rows = [r for r in rows if r.get(acc_key) is not None and r.get(loss_key) is not None]
  if not rows:
    raise ValueError(f"run {trial.run_id} has no eval with {acc_key} and {loss_key}")
  last = rows[-1]
  rho = epochs if epochs is not None else row_epoch(last, trial.batch_size, num_train)
  return Baseline(batch_size=int(trial.batch_size), accuracy=float(last[acc_key]), val_loss=float(last[loss_key]),
                  epochs=float(rho), num_train=int(num_train))
