"""Batch-size regimes of a workload (You et al. 2020, "The Limit of the Batch Size", Definitions 2.1–2.3).

A workload has one baseline recipe at batch B0, run for ρ epochs: test accuracy A, validation loss ξ.

* Def. 2.1, large batch: for every B < B_L, *linear scaling* — the baseline recipe with the LR scaled to η·B/B0
  and nothing else changed — reaches test accuracy ≥ 0.995·A **and** validation loss ≤ 1.2·ξ within ρ epochs;
  a batch B ≥ B_L is *large*. So B_L is the **smallest** batch at which linear scaling fails: "for ImageNet,
  B_L = 2K, B_H = 64K" (Table 2 caption), and MNIST's large range [2K, 8K] means B_L = 2K. Measured, B_L is the
  smallest tested batch above B0 whose linear-scaling run fails; it is known only up to its bracket (the last
  passing tested batch below it, B_L itself], so the report prints both.
* Def. 2.2, huge batch: B > B_H is *huge*: no available technique reaches test accuracy ≥ 0.995·A within ρ
  epochs. LR and warmup tuning, LARS, LAMB, label smoothing … are techniques; linear scaling is not tuned. A
  batch is called huge here only when *every* technique of the study's declared technique set was run at that
  batch and failed. Large = [B_L, B_H], huge = (B_H, B_F].
* Def. 2.3, full batch: B_F = the number of training examples.

Pass / fail use each run's evals as they are. Next to them, ``linear_verdict`` and ``reach_verdict`` give the
verdict with its uncertainty (verdict.py): ``pass``, ``fail`` or ``borderline`` from the per-seed values of one
configuration (a 95% interval), or from one run and the single-run tolerance.

Which trials count (the caller tags them: ``Trial.role`` and ``Trial.technique``, see records.py):
* linear evidence at B: the ``role='linear'`` trials at B. Finished (done / diverged) trials count; a run still
  going counts only once it passes.
* technique evidence at B for technique X: the trials with ``technique == X`` at B. X reaches at B if one of
  them reaches 0.995·A within ρ epochs (pruned trials count with the evals they have); X fails at B when all
  its trials there are finished and none reached. Linear runs that pass count as reaching (they reach A too).

Labels per tested batch: 'small' (B < B0), 'baseline' (B0), 'linear scaling works' (its linear run passes; below
B_L unless listed as an anomaly), 'below B_L (linear scaling not run here)' (untested, below the last passing
tested batch: not large, with the techniques that reach there), 'in B_L's bracket, large or not: undetermined'
(untested, between the last passing and the first failing tested batch: the true B_L may lie on either side),
'above every tested linear batch, large or not: undetermined' (untested, above them all, none failing),
'large or not: undetermined (linear scaling not run)' (no linear run above B0 at all: B_L unknown),
'large with <techniques>' (B ≥ B_L, where linear scaling fails or was not run and these techniques reach), 'huge'
(every declared technique failed), 'large or huge: undetermined (no technique tried)' and 'large or huge:
undetermined (untried: …)' (B ≥ B_L, or B_L not found, where linear scaling fails and no declared technique was
run, or those run failed and the others were not: Defs 2.1–2.2 cannot tell large from huge there), 'large: below B_H
(…)' (the same, but below a batch that a technique reached: only
B > B_H is huge, Def. 2.2), 'untested' (nothing finished yet). A batch ≥ B_F is also marked full.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, Mapping, Optional, Sequence


from lamb_lars.common import durations
from lamb_lars.study.analysis import verdict as vd
from lamb_lars.study.records import Baseline, Trial

ACC_FRACTION = 0.995
LOSS_FACTOR = 1.2
TEST_ACC = "eval_accuracy"
VAL_LOSS = "validation_loss"
_EPS = 1e-9
_UNFINISHED = ("pending", "running")


@dataclasses.dataclass(frozen=True)
class Regimes:
  """B_L (the smallest tested batch above B0 where linear scaling fails; None if none fails) with the last passing
  tested batch below it, B_H with the first huge tested batch above it, B_F, a label per tested batch, anomalies."""

  b_l: Optional[int]
  b_l_last_pass: Optional[int]
  b_h: Optional[int]
  b_h_next_huge: Optional[int]
  b_f: int
  labels: Mapping[int, str]
  reached_by: Mapping[int, tuple[str, ...]] = dataclasses.field(default_factory=dict)
  anomalies: tuple[str, ...] = ()


def row_epoch(row: Mapping, batch_size: int, num_train: int) -> float:
  """The eval row's epoch: ``epoch`` if logged, else ``examples``/N, else step·B/N."""
  if row.get("epoch") is not None:
    return float(row["epoch"])
  if row.get("examples") is not None:
    return float(row["examples"]) / num_train
  return float(row["step"]) * batch_size / num_train


def budget_epochs(epochs: float, batch_size: int, num_train: int) -> float:
  """The epochs a run of ρ = ``epochs`` at batch B actually trains: ⌈ρ·N/B⌉ steps (durations.to_steps, the rule
  the trainer uses) of B/N epochs each, e.g. 30.0125 at B = 4096, N = 55,000. An eval at the run's last step is
  within its ρ-epoch budget."""
  return durations.to_steps(epochs, "epochs", num_train=num_train, batch_size=batch_size) * batch_size / num_train


def rows_within(curve: Sequence[Mapping], batch_size: int, epochs: float, num_train: int) -> list[Mapping]:
  """The eval rows of a run at ``batch_size`` within its ρ-epoch budget (``budget_epochs``)."""
  limit = budget_epochs(epochs, batch_size, num_train) * (1 + _EPS)
  return [r for r in curve if row_epoch(r, batch_size, num_train) <= limit]


def _within_budget(trial: Trial, baseline: Baseline) -> list[Mapping]:
  return rows_within(trial.curve, int(trial.batch_size), baseline.epochs, baseline.num_train)


# How Defs 2.1 and 2.2 are read (docs/studies.md "Regimes"; issue 41), applied by every function below:
# 'any': a run meets a definition when some single evaluation within its ρ-epoch budget meets its bars (the
# paper's "reaches … within ρ epochs"); the value a run contributes to a verdict over seeds is that of its best
# such evaluation (Def. 2.1: the most accurate eval that meets the loss bar, else the most accurate; Def. 2.2: the
# best test accuracy). 'final': the values at the run's last evaluation within the budget (final accuracy), the
# other reading, which the report prints as a sensitivity line.
READINGS = ("any", "final")
READING = "any"


def def_values(
  trial: Trial,
  baseline: Baseline,
  *,
  definition: str,
  reading: str = READING,
  acc_key: str = TEST_ACC,
  loss_key: str = VAL_LOSS,
) -> tuple[float, float]:
  """(test accuracy, validation loss) that decide Def. ``definition`` ('2.1' or '2.2') for one run under
  ``reading`` (``READINGS``): the evaluation within ρ epochs that the reading picks. A diverged or failed run, or one
  without such an eval, gives (−inf, +inf): it reaches nothing. Def. 2.2 needs no loss (+inf when none logged)."""
  if reading not in READINGS or definition not in ("2.1", "2.2"):
    raise ValueError(
      f"reading must be one of {READINGS} and definition '2.1' or '2.2'; got {reading!r}, {definition!r}."
    )
  need = (acc_key, loss_key) if definition == "2.1" else (acc_key,)
  rows = [
    r for r in _within_budget(trial, baseline) if all(r.get(k) is not None and r[k] == r[k] for k in need)
  ]  # a NaN eval is no value
  if trial.status in ("diverged", "failed") or not rows:
    return -float("inf"), float("inf")
  if reading == "final":
    pick = max(rows, key=lambda r: r["step"])
  elif definition == "2.1":
    ok = [r for r in rows if r[loss_key] <= LOSS_FACTOR * baseline.val_loss]
    pick = max(ok or rows, key=lambda r: r[acc_key])
  else:
    pick = max(rows, key=lambda r: r[acc_key])
  loss = pick.get(loss_key)
  return float(pick[acc_key]), float(loss) if loss is not None else float("inf")


def passes_large_batch(
  trial: Trial, baseline: Baseline, *, acc_key: str = TEST_ACC, loss_key: str = VAL_LOSS, reading: str = READING
) -> bool:
  """Def. 2.1 for one trial under ``reading``: test acc ≥ 0.995·A and validation loss ≤ 1.2·ξ at the same eval
  within ρ epochs (some eval: 'any'; the last: 'final')."""
  acc, loss = def_values(trial, baseline, definition="2.1", reading=reading, acc_key=acc_key, loss_key=loss_key)
  return acc >= ACC_FRACTION * baseline.accuracy and loss <= LOSS_FACTOR * baseline.val_loss


def reaches_accuracy(trial: Trial, baseline: Baseline, *, acc_key: str = TEST_ACC, reading: str = READING) -> bool:
  """Def. 2.2's test for one trial under ``reading``: test acc ≥ 0.995·A within ρ epochs."""
  return def_values(trial, baseline, definition="2.2", reading=reading, acc_key=acc_key)[0] >= (
    ACC_FRACTION * baseline.accuracy
  )


@dataclasses.dataclass(frozen=True)
class LinearVerdict:
  """Def. 2.1 with its uncertainty: the accuracy and the loss verdicts, and both combined (verdict.combine)."""

  verdict: str
  accuracy: vd.Verdict
  loss: vd.Verdict


def def21_values(
  trial: Trial, baseline: Baseline, *, acc_key: str = TEST_ACC, loss_key: str = VAL_LOSS, reading: str = READING
) -> tuple[float, float]:
  """(test accuracy, validation loss) of the eval within ρ epochs that decides Def. 2.1 for one run
  (``def_values``): under 'any', the most accurate eval that meets the loss bar 1.2·ξ, else the most accurate eval."""
  return def_values(trial, baseline, definition="2.1", reading=reading, acc_key=acc_key, loss_key=loss_key)


def best_accuracy_within_budget(
  trial: Trial, baseline: Baseline, *, acc_key: str = TEST_ACC, reading: str = READING
) -> float:
  """Def. 2.2's value for one run (``def_values``): under 'any', its best test accuracy within ρ epochs (−inf:
  diverged, failed or none)."""
  return def_values(trial, baseline, definition="2.2", reading=reading, acc_key=acc_key)[0]


def linear_verdict(
  seeds: Sequence[Trial],
  baseline: Baseline,
  *,
  acc_tolerance: float = vd.ACC_TOLERANCE,
  loss_tolerance: float = vd.LOSS_TOLERANCE,
  acc_key: str = TEST_ACC,
  loss_key: str = VAL_LOSS,
  reading: str = READING,
) -> LinearVerdict:
  """Def. 2.1 at one batch from the runs of one configuration (its seeds): pass / fail / borderline.

  Per seed, ``def_values`` under ``reading``; the accuracy values against 0.995·A and the loss values against 1.2·ξ,
  each by ``verdict.threshold_verdict`` (a 95% interval over ≥ 2 seeds, else the single-run tolerance); fail if
  either fails, pass if both pass, else borderline (shown as ``verdict.shown``: inconclusive, add seeds)."""
  vals = [def21_values(t, baseline, acc_key=acc_key, loss_key=loss_key, reading=reading) for t in seeds]
  acc = vd.threshold_verdict([a for a, _ in vals], ACC_FRACTION * baseline.accuracy, tolerance=acc_tolerance)
  loss = vd.threshold_verdict(
    [l for _, l in vals], LOSS_FACTOR * baseline.val_loss, mode="min", tolerance=loss_tolerance, relative=True
  )
  return LinearVerdict(vd.combine(acc.verdict, loss.verdict), acc, loss)


def reach_verdict(
  seeds: Sequence[Trial],
  baseline: Baseline,
  *,
  acc_tolerance: float = vd.ACC_TOLERANCE,
  acc_key: str = TEST_ACC,
  reading: str = READING,
) -> vd.Verdict:
  """Def. 2.2's test at one batch from the runs of one configuration (its seeds): does it reach 0.995·A within ρ
  epochs — pass / fail / borderline (``verdict.threshold_verdict`` over the per-seed ``def_values``)."""
  return vd.threshold_verdict(
    [best_accuracy_within_budget(t, baseline, acc_key=acc_key, reading=reading) for t in seeds],
    ACC_FRACTION * baseline.accuracy,
    tolerance=acc_tolerance,
  )


def _verdict(trials: Sequence[Trial], ok) -> Optional[bool]:
  """True if a trial passes; False if every counted trial is finished and none passes; None = no evidence."""
  counted = [t for t in trials if t.status != "failed"]
  if any(ok(t) for t in counted):
    return True
  if counted and all(t.status not in _UNFINISHED for t in counted):
    return False
  return None


def scaling_rule(trial: Trial) -> str:
  """The LR scaling rule of a ``role='linear'`` trial: 'linear' (η·B/B0, Def. 2.1) or 'sqrt' (η·√(B/B0))."""
  return str(trial.params.get("lr_scaling") or "linear")


def linear_evidence(trials: Iterable[Trial], baseline: Baseline, *, rule: str = "linear", **kw) -> dict[int, bool]:
  """``{batch: passes Def. 2.1}`` from the ``role='linear'`` trials whose scaling rule is ``rule``: 'linear' is
  Def. 2.1 itself; 'sqrt' is the square-root rule the paper's "Optimization 0" (§3.1) takes when it is better,
  reported beside it and never used for B_L."""
  by_batch: dict[int, list[Trial]] = {}
  for t in trials:
    if t.role == "linear" and scaling_rule(t) == rule:
      by_batch.setdefault(int(t.batch_size), []).append(t)
  out = {b: _verdict(ts, lambda t: passes_large_batch(t, baseline, **kw)) for b, ts in by_batch.items()}
  return {b: v for b, v in sorted(out.items()) if v is not None}


def technique_evidence(
  trials: Iterable[Trial],
  baseline: Baseline,
  techniques: Sequence[str],
  *,
  acc_key: str = TEST_ACC,
  reading: str = READING,
) -> dict[int, dict[str, bool]]:
  """``{batch: {technique: reaches 0.995·A}}`` for the declared techniques (others are ignored)."""
  groups: dict[tuple[int, str], list[Trial]] = {}
  for t in trials:
    if t.technique in techniques:
      groups.setdefault((int(t.batch_size), t.technique), []).append(t)
  out: dict[int, dict[str, bool]] = {}
  for (b, name), ts in sorted(groups.items()):
    v = _verdict(ts, lambda t: reaches_accuracy(t, baseline, acc_key=acc_key, reading=reading))
    if v is not None:
      out.setdefault(b, {})[name] = v
  return out


def _label(
  b: int,
  baseline: Baseline,
  linear: Mapping[int, bool],
  tech: Mapping[str, bool],
  techniques: Sequence[str],
  b_l: Optional[int] = None,
  last_pass: Optional[int] = None,
) -> str:
  if b == baseline.batch_size:
    return "baseline"
  if b < baseline.batch_size:
    return "small"
  if linear.get(b):
    return "linear scaling works"
  reached = sorted(name for name, ok in tech.items() if ok)
  by = f"; reached by {', '.join(reached)}" if reached else ""
  if b not in linear:
    # Def. 2.1 untested: below the last passing tested batch it is below B_L; between that and the first failing
    # one the true B_L may lie on either side of it; above every tested batch (no failure) nothing is known.
    if last_pass is not None and b < last_pass:
      return "below B_L (linear scaling not run here)" + by
    if b_l is not None and b < b_l:
      return "in B_L's bracket, large or not: undetermined (linear scaling not run here)" + by
    if b_l is None and any(x > baseline.batch_size for x in linear):
      return "above every tested linear batch, large or not: undetermined (linear scaling not run here)" + by
    if b_l is None:  # Def. 2.1 tested nowhere above B0: B_L is unknown, so no batch is known to be large
      return "large or not: undetermined (linear scaling not run)" + by
  if reached:
    return "large with " + ", ".join(reached) + ("" if b in linear else " (linear scaling not run)")
  tried = [name for name in techniques if name in tech]
  if not tried:
    return "large or huge: undetermined (no technique tried)" if b in linear else "untested"
  untried = [name for name in techniques if name not in tech]
  if untried:
    return "large or huge: undetermined (untried: " + ", ".join(untried) + ")"
  return "huge"


def first_failure(evidence: Mapping[int, bool], b0: int) -> tuple[Optional[int], Optional[int]]:
  """(the smallest tested batch above B0 that fails, the largest passing tested batch below it — B0 when none):
  B_L and its bracket (Def. 2.1). (None, largest pass) when none fails; (None, None) when nothing above B0."""
  above = sorted(b for b in evidence if b > b0)
  fail = next((b for b in above if not evidence[b]), None)
  below = [b for b in above if evidence[b] and (fail is None or b < fail)]
  return fail, (max(below) if below else (b0 if above else None))


def classify(
  baseline: Baseline, linear: Mapping[int, bool], tech: Mapping[int, Mapping[str, bool]], techniques: Sequence[str]
) -> Regimes:
  """Regimes from per-batch evidence (see the module docstring)."""
  b0 = baseline.batch_size
  above = sorted(b for b in linear if b > b0)
  b_l, b_l_last_pass = first_failure(linear, b0)
  batches = sorted(set(linear) | set(tech))
  labels = {b: _label(b, baseline, linear, tech.get(b, {}), techniques, b_l, b_l_last_pass) for b in batches}
  reached_by = {
    b: tuple(sorted(n for n, ok in tech.get(b, {}).items() if ok)) + (("linear",) if linear.get(b) else ())
    for b in batches
  }
  reaching = [b for b in batches if b > b0 and reached_by[b]]
  b_h = max(reaching) if reaching else (b0 if any(b > b0 for b in batches) else None)
  for b in batches:  # Def. 2.2: only B > B_H is huge, so an undetermined batch below a reached one is large
    if b_h is not None and b < b_h and labels[b].startswith("large or huge: undetermined"):
      labels[b] = "large: below B_H" + labels[b][len("large or huge: undetermined") :]
  huge = [b for b in batches if labels[b] == "huge"]
  b_h_next = min((b for b in huge if b_h is not None and b > b_h), default=None)
  anomalies = [
    f"batch {b}: linear scaling passes above B_L = {b_l} (its first failure)"
    for b in above
    if b_l is not None and b > b_l and linear[b]
  ]
  anomalies += [
    f"batch {b} is huge (every technique failed) but batch {b_h} above it was reached"
    for b in huge
    if b_h is not None and b < b_h
  ]
  for b in batches:
    if b >= baseline.num_train:
      labels[b] += " (full batch)"
  return Regimes(
    b_l=b_l,
    b_l_last_pass=b_l_last_pass,
    b_h=b_h,
    b_h_next_huge=b_h_next,
    b_f=baseline.num_train,
    labels=labels,
    reached_by=reached_by,
    anomalies=tuple(anomalies),
  )


def classify_trials(
  baseline: Baseline,
  trials: Sequence[Trial],
  techniques: Sequence[str],
  *,
  acc_key: str = TEST_ACC,
  loss_key: str = VAL_LOSS,
  reading: str = READING,
) -> Regimes:
  """Regimes of a study from its tagged trials and its declared technique set, Defs 2.1–2.2 read as ``reading``."""
  return classify(
    baseline,
    linear_evidence(trials, baseline, acc_key=acc_key, loss_key=loss_key, reading=reading),
    technique_evidence(trials, baseline, techniques, acc_key=acc_key, reading=reading),
    techniques,
  )
