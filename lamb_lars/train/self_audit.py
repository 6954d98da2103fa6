"""The adaptive batch's ``branch`` self-audit: the run pauses, measures its own critical batch by branching from its
current state, and re-sets κ from it (``config.adaptive_batch.audit_*``; issue 60).

Why. κ = CBS / B_noise is not a constant of training: on LeNet-5 / MNIST, CBS(t) measured by branching was tens of
times B_simple(t) early and within 2× late (docs/studies/critical_batch_calibration). A κ schedule from a separate
branching study (lamb_lars/study/analysis/kappa_from_branching.py) carries over only to runs whose noise scale
follows the reference's. The self-audit measures the ratio on the run itself, at the points the user names, the way
Merrill et al. 2025 ("Critical Batch Size Revisited", arXiv:2505.23971, §3) measure CBS(t): branches from one
state, each trained on the same Δ examples at a larger batch, compared with the run's own continuation.

The audit. At the first batch decision at or after each point X_i of ``audit_points`` (in
``config.batch_schedule_unit``), with the run at batch B after x examples:

1. Branch sizes: B itself (the continuation) and the next ``audit_sizes`` sizes of the controller's ladder above B.
2. Δ' = the smallest multiple of every branch size that is ≥ ``audit_delta_examples`` (:func:`delta`), so that each
   branch sees exactly the same Δ' examples: the next Δ' of the run's example stream, the same for every branch
   (a paired comparison).
3. Each branch starts from a copy of the run's state (parameters, BN statistics, optimizer state) and trains Δ'/B_j
   steps at B_j, with the LR the controller would give that batch: the run's schedule read at the examples seen,
   times rule(B_j/B0) (``lr_rule``). Ours, named: Merrill et al. hold each branch's LR constant at the reference's
   scaled LR; over a short Δ' the two differ by the schedule's change across Δ'.
4. L_j = the branch's ``audit_loss`` after Δ' examples (default ``validation_loss``: the controller is set on the
   validation split, never on the test split unless asked); a branch whose training loss turns non-finite, or whose
   loss is non-finite or ≥ 1e10, blew up: d_j = ∞.
5. d_j = L_j − L_B and ε = ``audit_epsilon`` · L_B (relative, as the branching studies'). One run is one replicate,
   so each verdict is the branching analysis's single-value form (lamb_lars/study/analysis/verdict.py, tolerance
   ε/2, lamb_lars/study/analysis/branching.py): ``pass`` when d_j + ε/2 ≤ ε, ``fail`` when d_j − ε/2 > ε, else
   ``borderline``. The bracket with monotone closure, as there: ``low`` = the largest size with every size up to it
   passing (B when none above B passes), ``high`` = the largest with none up to it failing; ``censored`` when
   every size passes (CBS ≥ the largest tested).
6. κ' = low / B_noise(x), the controller's signal now (``signal``). From this audit on (until the next), the
   controller's target is κ'·B_noise: at this decision, the measured conservative critical batch. No finite
   B_noise yet: κ stays (the record says so).

An audit is skipped, κ staying as it was, when no ladder size lies above B or when Δ' would run past the end of
training: a row with ``skipped`` (the reason) and ``kappa_after`` None.

The run then goes on from the state it had before the audit: the branches change nothing but κ. Every audit is a row
of ``RUN_DIR/batch_audits.jsonl`` (the losses, verdicts, bracket and κ, and ``seconds``: the branches' wall time,
compilations included), a log line and TensorBoard scalars (``optim/adaptive_batch/audit_*``), and part of the
controller's checkpointed state, so a resumed run neither repeats an audit it has recorded nor loses one (a run
killed inside an audit re-runs it from the checkpoint before, on the same data: the same result, timing aside).
Cost: (1 + audit_sizes) × Δ' examples of training and as many evaluations per audit, and a compilation per branch
size (benchmarks/self_audit_cost.py measures it against the run's own training).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any, Mapping, Optional, Sequence

from lamb_lars.common import durations

AUDITS_FILE = "batch_audits.jsonl"  # in the run's workdir, beside batch_decisions.jsonl
LOSSES = ("validation_loss", "eval_loss")
BLOWUP = 1e10  # as lamb_lars/study/analysis/branching.py: a loss at or above it blew up
PASS, FAIL, BORDERLINE = "pass", "fail", "borderline"


@dataclasses.dataclass(frozen=True)
class AuditSettings:
  """``config.adaptive_batch.audit_*`` resolved: the points in examples, the branch sizes above B, Δ, ε, the loss."""

  points: tuple[int, ...]
  sizes: int = 3
  delta_examples: int = 0
  epsilon: float = 0.2
  loss: str = "validation_loss"


def settings(cfg: Any, *, unit: str, num_train: int) -> Optional[AuditSettings]:
  """The audit settings of ``config.adaptive_batch`` (None without ``audit_points``); ValueError (one sentence) for
  a value that cannot be right."""
  spec = str(cfg.get("audit_points", "") or "")
  if not spec.strip():
    return None
  points = []
  for entry in (e.strip() for e in spec.split(",") if e.strip()):
    try:
      x = float(entry)
    except ValueError:
      x = -1.0
    if not (math.isfinite(x) and x > 0):
      raise ValueError(
        f"config.adaptive_batch.audit_points entry {entry!r} is not a positive number ({unit}), such as '1,4'."
      )
    points.append(durations.to_steps(x, unit, num_train=num_train, batch_size=1))
  if any(b <= a for a, b in zip(points, points[1:])):
    raise ValueError(f"config.adaptive_batch.audit_points={spec!r}: the points must increase.")
  sizes, delta, eps = cfg.get("audit_sizes", 3), cfg.get("audit_delta_examples", 0), cfg.get("audit_epsilon", 0.2)
  whole = lambda v: isinstance(v, numbers.Integral) and not isinstance(v, bool)
  if not (whole(sizes) and int(sizes) >= 1):
    raise ValueError(f"config.adaptive_batch.audit_sizes={sizes!r} must be an integer ≥ 1.")
  if not (whole(delta) and int(delta) >= 1):
    raise ValueError(
      f"config.adaptive_batch.audit_delta_examples={delta!r} must be a positive integer: the examples each "
      "audit branch trains on."
    )
  if not (isinstance(eps, numbers.Real) and not isinstance(eps, bool) and math.isfinite(eps) and float(eps) > 0):
    raise ValueError(f"config.adaptive_batch.audit_epsilon={eps!r} must be a finite number > 0.")
  loss = cfg.get("audit_loss", "validation_loss")
  if loss not in LOSSES:
    raise ValueError(f"config.adaptive_batch.audit_loss={loss!r} is not one of {', '.join(map(repr, LOSSES))}.")
  return AuditSettings(tuple(points), int(sizes), int(delta), float(eps), loss)


def due(points: Sequence[int], audits: Sequence[Mapping], examples: int) -> bool:
  """Whether a decision after ``examples`` examples audits: a point lies after the last audit and at or before it."""
  last = audits[-1]["examples"] if audits else -1
  return any(last < p <= examples for p in points)


def branch_sizes(ladder: Sequence[int], batch: int, n: int) -> tuple[int, ...]:
  """(B, then the next ``n`` ladder sizes above B)."""
  return (batch, *sorted(b for b in ladder if b > batch)[:n])


def delta(requested: int, sizes: Sequence[int]) -> int:
  """Δ': the smallest multiple of every size in ``sizes`` that is ≥ ``requested``."""
  step = math.lcm(*sizes)
  return -(-requested // step) * step


def blew_up(loss: float) -> bool:
  return not math.isfinite(loss) or loss >= BLOWUP


def single_verdict(d: float, epsilon: float) -> str:
  """One paired difference against ε with the single-value tolerance ε/2 (module docstring, step 5)."""
  half = epsilon / 2
  if d + half <= epsilon:
    return PASS
  return FAIL if d - half > epsilon else BORDERLINE


def critical(losses: Mapping[int, float], batch: int, epsilon: float) -> dict:
  """The bracket at one audit from {size: loss after Δ'} (``batch`` the continuation): ``eps`` (absolute),
  ``diffs``, ``verdicts``, ``low``, ``high``, ``censored`` (module docstring, step 5). A continuation that blew up
  makes no bracket (every entry None)."""
  ref = losses[batch]
  if blew_up(ref):
    return {"eps": None, "diffs": {}, "verdicts": {}, "low": None, "high": None, "censored": False}
  eps = epsilon * ref
  diffs = {b: (math.inf if blew_up(x) else x - ref) for b, x in sorted(losses.items()) if b != batch}
  verdicts = {b: single_verdict(d, eps) for b, d in diffs.items()}
  low = high = batch
  still_pass = still_open = True
  for b, v in verdicts.items():
    still_pass = still_pass and v == PASS
    still_open = still_open and v != FAIL
    low = b if still_pass else low
    high = b if still_open else high
  return {
    "eps": eps,
    "diffs": diffs,
    "verdicts": verdicts,
    "low": low,
    "high": high,
    "censored": bool(verdicts) and still_pass,
  }


def record(
  *,
  step: int,
  examples: int,
  batch: int,
  delta_examples: int,
  loss: str,
  losses: Mapping[int, float],
  epsilon: float,
  signal: str,
  estimate: float,
  kappa_before: float,
) -> dict:
  """The audit's record (JSON-safe: sizes as text keys, non-finite numbers as text): the losses, the bracket and
  κ' = low / estimate (None, κ unchanged, when the estimate is not finite > 0 or there is no bracket)."""
  c = critical(losses, batch, epsilon)
  ok = c["low"] is not None and math.isfinite(estimate) and estimate > 0
  num = lambda v: v if v is None or math.isfinite(v) else str(v)
  return {
    "event": "batch_audit",
    "step": int(step),
    "examples": int(examples),
    "batch": int(batch),
    "delta_examples": int(delta_examples),
    "loss": loss,
    "losses": {str(b): num(float(x)) for b, x in sorted(losses.items())},
    "epsilon": num(c["eps"]),
    "diffs": {str(b): num(float(d)) for b, d in c["diffs"].items()},
    "verdicts": {str(b): v for b, v in c["verdicts"].items()},
    "cbs_low": c["low"],
    "cbs_high": c["high"],
    "censored": c["censored"],
    "signal": signal,
    "estimate": num(float(estimate)),
    "kappa_before": float(kappa_before),
    "kappa_after": (c["low"] / estimate) if ok else None,
  }


def describe(r: Mapping) -> str:
  """The log line of an audit record."""
  sizes = ", ".join(f"{b}: {v}" for b, v in r["verdicts"].items()) or "none"
  if r["kappa_after"] is None:
    why = "no finite noise scale yet" if r["cbs_low"] is not None else "the continuation blew up"
    end = f"κ stays {r['kappa_before']:g} ({why})"
  else:
    end = f"κ {r['kappa_before']:g} → {r['kappa_after']:.4g}"
  bracket = f"CBS [{r['cbs_low']}, {r['cbs_high']}]{' (censored)' if r['censored'] else ''}"
  return (
    f"Batch audit at step {r['step']} ({r['examples']:,} examples, batch {r['batch']}, Δ {r['delta_examples']:,}): "
    f"{sizes}; {bracket}, B_{r['signal']} {_number(r['estimate'])}; {end}."
  )


def _number(v: Any) -> str:
  return f"{v:,.1f}" if isinstance(v, float) else str(v)
