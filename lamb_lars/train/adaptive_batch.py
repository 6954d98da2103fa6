"""An adaptive batch size: the global batch follows the measured gradient noise scale (``config.batch_schedule =
"adaptive"``, keys ``config.adaptive_batch``).

Why. The critical batch grows during training (McCandlish et al. 2018, "An Empirical Model of Large-Batch
Training", arXiv:1812.06162; Merrill et al. 2025, "Critical Batch Size Revisited", arXiv:2505.23971). A run that
starts small and grows its batch as the noise scale grows wastes fewer examples early and fewer steps late: Pollux
(Qiao et al., OSDI 2021) and Gray et al. 2024 drive the batch from the noise scale; Merrill et al. from branched
measurements of the critical batch. The noise scale is a proxy for the critical batch (McCandlish: within about an
order of magnitude), so κ below is a calibration constant, not a law (docs/adaptive_batch.md).

The rule. At every decision point (each multiple of ``every_*`` of training, at the first step boundary at or after
it, in examples seen) with the batch B, the base batch B0 = ``config.batch_size`` and the signal
(value, lo, hi) = ``NoiseScaleTracker.estimate(kind)``:

  1. target   T = clip(κ(x)·B_noise, B_min, B_max)                     (no decision while B_noise is not finite > 0)
  2. snap     B' = the ladder size nearest to T in log₂ (a tie goes to the smaller size)
  3. keep B   unless |B' − B|/B ≥ min_change                            (a minimum change)
              and |log T − log B| ≥ |log T − log B'| + log(1 + margin)  (a dead band: T must be nearer to B' than
                                                                        to B by the factor 1 + margin, so a target
                                                                        near the midpoint of two sizes does not
                                                                        flip the batch back and forth; AdaptDL's
                                                                        users needed a ≈5% gain, adaptdl issue 27)
  4. grow_only: keep B when B' < B.

κ(x) is ``kappa``, or with ``kappa_schedule = "X1:k1,X2:k2,…"`` (the X_i in ``config.batch_schedule_unit``, like a
batch schedule's points) k_i from the i-th point on, x being the examples seen: a κ that follows training, e.g. the
ratio CBS(t) / B_simple(t) that branching measured (Merrill et al. 2025; ``python -m
lamb_lars.study.analysis.kappa_from_branching`` derives it from a published branching folder, docs/adaptive_batch.md).

The ladder is ``ladder`` when given, else every B0·2^k (k ∈ ℤ) in [B_min, B_max]; every size must split evenly over
the devices and micro-batches with ≥ 2 gradient samples per step (checked before compiling, with the rest of the
run's plan: :func:`lamb_lars.train.run_plan.make_plan`).

A change appends a stage of :mod:`lamb_lars.train.batch_schedule` that starts at the current step: the LR schedule
stays the base run's read at the examples seen, so warmup and decay, defined in examples, do not shift; the stage's
LR multiplier is rule(B'/B0) with rule ``lr_rule``: 'linear' (k; Goyal et al. 2017, for SGD, momentum and LARS),
'sqrt' (√k; for Adam-type optimizers and LAMB, Malladi et al. 2022, You et al. 2020), 'none' (1), or 'auto' (by
optimizer family, :data:`LR_RULE_BY_OPTIMIZER`). The signal ``signal``: 'simple' (B_simple = tr Σ/|G|²),
'precond' (the noise scale of the preconditioned step, tr(PΣPᵀ)/|PG|², Pollux's for Adam), or 'auto' (precond for
the adaptive-preconditioner families, simple otherwise; simple while precond is not yet measured).

Every decision, change or not, is a record (:func:`decide`): one row of ``RUN_DIR/batch_decisions.jsonl``, one log
line and TensorBoard scalars (``optim/adaptive_batch/...``). The stages and the records live in each checkpoint's
metadata (:meth:`Controller.state_dict`), so a resumed run rebuilds exactly the stages, the LR and the data order of
the uninterrupted one. The decision rows are not in ``metrics.jsonl``, whose rows studies read as evaluations.

The ``branch`` self-audit (``audit_points``, :mod:`lamb_lars.train.self_audit`): at the first decision at or after
each point, the run branches from its own state, measures the conservative critical batch, and from then on uses
κ' = CBS_low / B_noise in place of κ(x) (:meth:`Controller.kappa`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
import os
from typing import Any, Callable, Optional, Sequence

from lamb_lars.common import durations, io_utils
from lamb_lars.train import batch_schedule, self_audit

SIGNALS = ("auto", "simple", "precond")
LR_RULES = ("auto", "linear", "sqrt", "none")
DECISIONS_FILE = "batch_decisions.jsonl"  # in the run's workdir, beside metrics.jsonl
# The LR rule of each optimizer family (lamb_lars/optim/optimizers.py NAMES): linear for SGD-type updates (Goyal et
# al. 2017; LARS, You et al. 2017), √ for updates divided by a running second moment (Adam-type, LAMB).
LR_RULE_BY_OPTIMIZER = {
  "sgd": "linear",
  "momentum": "linear",
  "nesterov": "linear",
  "lars": "linear",
  "adam": "sqrt",
  "adamw": "sqrt",
  "lamb": "sqrt",
  "rmsprop": "sqrt",
  "adagrad": "sqrt",
}
PRECONDITIONED = frozenset(n for n, r in LR_RULE_BY_OPTIMIZER.items() if r == "sqrt")


@dataclasses.dataclass(frozen=True)
class Settings:
  """The controller's resolved settings (``config.adaptive_batch`` with the run's optimizer and ladder)."""

  base_batch: int
  ladder: tuple[int, ...]
  kappa: float = 1.0
  kappa_points: tuple[tuple[int, float], ...] = ()  # (from example X_i, κ_i), increasing X_i: κ(x) (kappa_at)
  signal: str = "simple"  # 'simple' | 'precond' | 'auto:simple' (precond, falling back to simple)
  min_batch: int = 1
  max_batch: int = 2**62
  min_change: float = 0.0
  margin: float = 0.0
  grow_only: bool = False
  lr_rule: str = "linear"
  audit: Any = None  # a self_audit.AuditSettings: branch from the run's own state and re-set κ (self_audit.py)


def lr_rule(rule: str, optimizer_name: str) -> str:
  """The LR rule: ``rule`` itself, or for 'auto' the one of ``optimizer_name``'s family."""
  if rule not in LR_RULES:
    raise ValueError(f"config.adaptive_batch.lr_rule={rule!r} is not one of {', '.join(map(repr, LR_RULES))}.")
  return LR_RULE_BY_OPTIMIZER.get(optimizer_name, "linear") if rule == "auto" else rule


def signal_kind(signal: str, optimizer_name: str) -> str:
  """'simple', 'precond', or 'auto:simple' (precond with simple as the fallback) for 'auto' on a preconditioned
  optimizer."""
  if signal not in SIGNALS:
    raise ValueError(f"config.adaptive_batch.signal={signal!r} is not one of {', '.join(map(repr, SIGNALS))}.")
  if signal == "auto":
    return "auto:simple" if optimizer_name in PRECONDITIONED else "simple"
  return signal


def power_ladder(base: int, lo: int, hi: int, multiple: int = 1) -> tuple[int, ...]:
  """Every base·2^k (k ∈ ℤ, an integer) in [lo, hi] that is a multiple of ``multiple``, ascending."""
  out, b = [], base
  while b % 2 == 0 and b // 2 >= max(lo, 1):
    b //= 2
  while b <= hi:
    if b >= lo and b % multiple == 0:
      out.append(b)
    b *= 2
  return tuple(out)


def snap(target: float, ladder: Sequence[int]) -> int:
  """The ladder size nearest to ``target`` in log₂ (a tie goes to the smaller)."""
  return min(sorted(ladder), key=lambda b: abs(math.log2(b) - math.log2(target)))


def lr_multiplier(rule: str, batch: int, base_batch: int) -> float:
  """rule(B/B0): k, √k or 1 (the stage multipliers of :mod:`lamb_lars.train.batch_schedule`)."""
  return float(batch_schedule.LR_RULES[rule](batch / base_batch))


def read_signal(kind: str, estimate: Callable[[str], tuple[float, float, float]]) -> tuple[str, float, float, float]:
  """(the kind read, value, lo, hi); 'auto:simple' reads precond, else simple while precond is not finite > 0."""
  if kind == "auto:simple":
    value, lo, hi = estimate("precond")
    if math.isfinite(value) and value > 0:
      return "precond", float(value), float(lo), float(hi)
    kind = "simple"
  value, lo, hi = estimate(kind)
  return kind, float(value), float(lo), float(hi)


def kappa_at(s: Settings, examples: int) -> float:
  """κ after ``examples`` examples: the κ_i of the last ``kappa_points`` entry at or before it, else ``kappa``."""
  out = s.kappa
  for start, k in s.kappa_points:
    if examples >= start:
      out = k
  return out


def parse_kappa_schedule(spec: str, unit: str, num_train: int) -> tuple[tuple[int, float], ...]:
  """``"X1:k1,X2:k2"`` → ((X_i in examples, κ_i), …); ValueError (one sentence) for a malformed entry."""
  if unit not in batch_schedule.UNITS:
    raise ValueError(f"config.batch_schedule_unit={unit!r} is not one of {', '.join(map(repr, batch_schedule.UNITS))}.")
  out = []
  for entry in (e.strip() for e in str(spec).split(",") if e.strip()):
    point, sep, kappa = entry.partition(":")
    try:
      x, k = float(point), float(kappa)
    except ValueError:
      x, k = -1.0, 0.0
    if not sep or not (math.isfinite(x) and x >= 0 and math.isfinite(k) and k > 0):
      raise ValueError(
        f"config.adaptive_batch.kappa_schedule entry {entry!r} is not FROM:KAPPA with FROM ≥ 0 ({unit}) and KAPPA a "
        f"finite number > 0, e.g. '0:40,1:8,2:2'."
      )
    out.append((durations.to_steps(x, unit, num_train=num_train, batch_size=1) if x > 0 else 0, k))
  if any(b[0] <= a[0] for a, b in zip(out, out[1:])):
    raise ValueError(f"config.adaptive_batch.kappa_schedule={spec!r}: the points must increase.")
  return tuple(out)


def decide(
  batch: int, value: float, s: Settings, examples: int = 0, kappa: Optional[float] = None
) -> tuple[int, float, str]:
  """(the next batch, the target T, the reason) at batch ``batch`` with noise scale ``value`` after ``examples``
  examples (module docstring); ``kappa``: κ in place of ``kappa_at(s, examples)`` (a self-audit's, self_audit.py).

  Reasons: 'no_estimate' (value not finite > 0), 'hold' (B' = B), 'below_min_change', 'dead_band', 'grow_only'
  (the batch stays), 'grow', 'shrink' (it changes)."""
  if not (math.isfinite(value) and value > 0):
    return batch, float("nan"), "no_estimate"
  k = kappa_at(s, examples) if kappa is None else kappa
  target = min(max(k * value, float(s.min_batch)), float(s.max_batch))
  new = snap(target, s.ladder)
  if new == batch:
    return batch, target, "hold"
  if abs(new - batch) / batch < s.min_change:
    return batch, target, "below_min_change"
  far, near = abs(math.log(target / batch)), abs(math.log(target / new))
  if far < near + math.log1p(s.margin):
    return batch, target, "dead_band"
  if s.grow_only and new < batch:
    return batch, target, "grow_only"
  return new, target, "grow" if new > batch else "shrink"


def describe(r: dict) -> str:
  """The log line of a decision record."""
  est = "no estimate yet" if r["reason"] == "no_estimate" else f"B_{r['signal']} {r['estimate']:,.1f}"
  if r["reason"] == "no_estimate":
    return f"Batch decision at step {r['step']} ({r['examples']:,} examples): {est}; batch stays {r['from']}."
  band = "" if math.isnan(r["lo"]) else f" [{r['lo']:,.1f}, {r['hi']:,.1f}]"
  move = f"{r['from']} → {r['to']}, LR ×{r['lr_multiplier']:.4g}" if r["to"] != r["from"] else f"stays {r['from']}"
  return (
    f"Batch decision at step {r['step']} ({r['examples']:,} examples): {est}{band}, κ {r['kappa']:g} → target "
    f"{r['target']:,.1f}; batch {move} ({r['reason']})."
  )


class Controller:
  """The run's decisions and stages (host-side state, checkpointed). ``decide`` returns a record and, when the batch
  changes, the new stage list (the caller replans the run with it)."""

  def __init__(self, settings: Settings, stages: Sequence[batch_schedule.Stage]):
    self.settings = settings
    self.stages: list[batch_schedule.Stage] = [_raw(s) for s in stages]
    self.records: list[dict] = []
    self.audits: list[dict] = []  # the self-audits so far (self_audit.py), in order

  def kappa(self, examples: int) -> float:
    """κ after ``examples``: the latest self-audit's κ at or before it, else the configured κ(x) (kappa_at)."""
    done = [a for a in self.audits if a["examples"] <= examples and a.get("kappa_after") is not None]
    return float(done[-1]["kappa_after"]) if done else kappa_at(self.settings, examples)

  def decide(self, step: int, examples: int, estimate: Callable[[str], tuple[float, float, float]]) -> dict:
    """The decision at ``step`` (after ``examples`` examples); appends a stage when the batch changes."""
    s, batch = self.settings, self.stages[-1].batch_size
    kind, value, lo, hi = read_signal(s.signal, estimate)
    kappa = self.kappa(examples)
    new, target, reason = decide(batch, value, s, examples, kappa)
    mult = lr_multiplier(s.lr_rule, new, s.base_batch)
    if new != batch:
      self.stages.append(batch_schedule.Stage(step, examples, new, mult))
    record = {
      "event": "batch_decision",
      "step": int(step),
      "examples": int(examples),
      "signal": kind,
      "estimate": value,
      "lo": lo,
      "hi": hi,
      "kappa": kappa,
      "target": target,
      "from": batch,
      "to": new,
      "lr_multiplier": mult,
      "reason": reason,
    }
    self.records.append(_plain(record))  # JSON-safe, as checkpoint metadata and the decision file keep it
    return record

  def state_dict(self) -> dict:
    """JSON-exact: the stages as [start_step, start_example, batch, lr_multiplier], every record and self-audit so
    far (NaN as the text 'nan')."""
    return {
      "stages": [list(dataclasses.astuple(s)) for s in self.stages],
      "decisions": list(self.records),
      "audits": list(self.audits),
    }

  def load_state_dict(self, saved: Optional[dict]) -> None:
    if saved:
      self.stages = [batch_schedule.Stage(int(a), int(b), int(c), float(d)) for a, b, c, d in saved["stages"]]
      self.records = [dict(r) for r in saved["decisions"]]
      self.audits = [dict(r) for r in saved.get("audits", ())]  # a checkpoint from before self-audits has none


def _number(cfg: Any, key: str, *, least: float, strict: bool) -> float:
  value = cfg[key]
  ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
  if not ok or (value <= least if strict else value < least):
    raise ValueError(
      f"config.adaptive_batch.{key}={value!r} must be a finite number {'>' if strict else '≥'} {least:g}."
    )
  return float(value)


def settings(
  cfg: Any, *, optimizer_name: str, base_batch: int, num_train: int, multiple: int, unit: str = "epochs"
) -> Settings:
  """``config.adaptive_batch`` resolved and checked: ValueError (one sentence) for a value that cannot be right.
  ``unit``: ``config.batch_schedule_unit``, the unit of ``kappa_schedule``'s points.

  ``multiple``: devices × micro-batches (the power ladder keeps its multiples; each size is checked again with the
  run's plan). ``min_batch`` 0: no lower bound; ``max_batch`` 0: the training set."""
  kappa = _number(cfg, "kappa", least=0.0, strict=True)
  points = parse_kappa_schedule(cfg.get("kappa_schedule", ""), unit, num_train)
  min_change = _number(cfg, "min_change", least=0.0, strict=False)
  margin = _number(cfg, "margin", least=0.0, strict=False)
  lo, hi = (int(_number(cfg, k, least=0.0, strict=False)) for k in ("min_batch", "max_batch"))
  hi = hi or num_train
  if lo > hi:
    raise ValueError(f"config.adaptive_batch.min_batch={lo} is larger than max_batch={hi}.")
  given = tuple(cfg.ladder)
  if given:
    if not all(isinstance(b, numbers.Integral) and not isinstance(b, bool) and int(b) >= 1 for b in given):
      raise ValueError(f"config.adaptive_batch.ladder={given!r} must be a tuple of positive integers (or empty).")
    outside = [int(b) for b in given if not lo <= int(b) <= hi]
    if outside:
      raise ValueError(
        f"config.adaptive_batch.ladder size {outside[0]} lies outside [min_batch, max_batch] = [{lo}, {hi}]."
      )
    ladder = tuple(sorted(set(int(b) for b in given)))
  else:
    ladder = power_ladder(base_batch, lo, hi, multiple)
  if not ladder:
    raise ValueError(
      f"config.adaptive_batch: no size batch_size·2^k in [min_batch, max_batch] = [{lo}, {hi}] is a multiple of "
      f"{multiple} (devices × micro-batches); widen the bounds or give adaptive_batch.ladder."
    )
  if not isinstance(cfg.grow_only, bool):
    raise ValueError(f"config.adaptive_batch.grow_only={cfg.grow_only!r} must be True or False.")
  return Settings(
    base_batch=base_batch,
    ladder=ladder,
    kappa=kappa,
    kappa_points=points,
    signal=signal_kind(cfg.signal, optimizer_name),
    min_batch=lo,
    max_batch=hi,
    min_change=min_change,
    margin=margin,
    grow_only=cfg.grow_only,
    lr_rule=lr_rule(cfg.lr_rule, optimizer_name),
    audit=self_audit.settings(cfg, unit=unit, num_train=num_train),
  )


def _raw(stage: Any) -> batch_schedule.Stage:
  return batch_schedule.Stage(stage.start_step, stage.start_example, stage.batch_size, stage.lr_multiplier)


class DecisionLog:
  """``RUN_DIR/batch_decisions.jsonl`` (or ``name``): one JSON row per decision (process 0 writes it). Started over
  from the records of the checkpoint a run resumes from, so a resumed run's file equals the uninterrupted run's."""

  def __init__(self, workdir: Optional[str], records: Sequence[dict], name: str = DECISIONS_FILE):
    self.path = os.path.join(workdir, name) if workdir else None
    if self.path:
      io_utils.write_text_atomic(self.path, "".join(json.dumps(r) + "\n" for r in records))

  def append(self, record: dict) -> None:
    if self.path:
      io_utils.append_jsonl(self.path, _plain(record))


def _plain(record: dict) -> dict:
  """JSON has no NaN: non-finite floats as text, as metrics.jsonl writes them."""
  return {k: (str(v) if isinstance(v, float) and not math.isfinite(v) else v) for k, v in record.items()}
