"""The training loop proper: chunks of steps dispatched one ahead, metrics fetched one chunk late.

The device runs chunk N+1 while the host fetches chunk N's metrics, checks them for non-finite losses, writes
them (TensorBoard, progress) and builds the next chunk's batches (the overlap of flax's and big_vision's loops,
which fetch metrics one step late). Nothing is dispatched past an evaluation, a checkpoint or the end
(``RunPlan.next_boundary``): the state there is evaluated and saved before the next chunk reads it, so a target
reached at step N stops the run at step N, and a resumed run stops exactly where an uninterrupted one does. A
non-finite loss found in chunk N ends the run at its first bad step; the chunk already dispatched after it is
dropped unread.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import time
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from lamb_lars.common import cli_errors, io_utils
from lamb_lars.optim import lr_table
from lamb_lars.train import adaptive_batch, batch_schedule, run_identity, run_plan, self_audit, stopping, train_metrics


# train.py's SIGINT/SIGTERM handler (request_stop below) appends the signal here while the loop runs
# (RUNNING); the loop then stops between chunks, raising KeyboardInterrupt (cli_errors.Terminated for SIGTERM).
STOP_REQUEST: list = []
RUNNING: list = []


def request_stop(signum, frame) -> None:  # noqa: ARG001  (a signal handler's signature)
  """train.py's SIGINT and SIGTERM handler: the training loop stops at its next chunk boundary (never inside a
  checkpoint save, whose orbax threads would log a traceback); a second signal stops at once."""
  if STOP_REQUEST or not RUNNING:
    raise cli_errors.Terminated() if signum == 15 else KeyboardInterrupt()
  STOP_REQUEST.append(signum)


@dataclasses.dataclass
class Parts:
  """What the loop runs with: the config and plan, the host LR table, the step key, the evaluator and feeder."""

  config: ml_collections.ConfigDict
  plan: run_plan.RunPlan
  lrs: np.ndarray
  step_key: Any
  log: Callable[[str], None]
  evaluate: Any
  feeder: Any
  workdir: Optional[str] = None  # process 0's workdir (batch_decisions.jsonl), else None
  replan: Optional[Callable[[Any], None]] = None  # an adaptive batch's new stages → the run's plan and parts


def at_boundary(step: int, plan: run_plan.RunPlan) -> bool:
  """Whether the host must read the state after ``step``: an evaluation, a checkpoint, a batch decision or the end."""
  return any(
    plan.due(every, step) for every in (plan.eval_every_steps, plan.checkpoint_every_steps, decide_every(plan))
  )


def decide_every(plan: run_plan.RunPlan) -> int:
  """The adaptive batch's decision cadence in base-batch steps; -1 (never due) without one."""
  return plan.decide_every_steps if plan.decide_every_steps > 0 else -1


def log_eval(log: Callable[[str], None], row: dict, step: int) -> None:
  val = f"  val_loss {row['validation_loss']:.4f}" if "validation_loss" in row else ""
  if "validation_accuracy" in row:  # what a study's search prunes on
    val += f"  val_acc {100 * row['validation_accuracy']:.2f}%"
  log(
    f"step {step:>6} epoch {row['epoch']:6.2f}  train_loss {row['train_loss']:.4f}  eval_loss {row['eval_loss']:.4f}"
    f"  eval_acc {100 * row['eval_accuracy']:.2f}%{val}  {row['examples_per_sec']:,.0f} ex/s"
  )


class _Run:
  """One run's host-side state: metrics window, noise scale, stopping rules, the outcome so far."""

  def __init__(self, parts: Parts, step: int, meta: dict, writer: Any, bar: Any):
    c, p = parts.config, parts.plan
    self.parts, self.step, self.writer, self.bar = parts, step, writer, bar
    d = c.diagnostics
    self.noise = train_metrics.NoiseScaleTracker(
      decay=d.noise_scale_ema,
      enabled=p.diagnostics.noise_scale,
      window_steps=d.noise_scale_window_steps,
      windows=d.noise_scale_windows,
      preconditioned=p.diagnostics.noise_scale_precond,
    )
    self.noise.load_state_dict(meta.get("noise_scale"))
    self.audits: Any = None  # the self-audit log (batch_audits.jsonl), with audit_points
    self.controller, self.decisions = self._controller(meta.get("adaptive_batch"))
    self.rules = self._rules(meta.get("stopping"))
    self.window = train_metrics.MetricsWindow(meta.get("train_time", 0.0))
    self.window.load_state_dict(meta.get("train_window"))
    self.stop: Optional[stopping.Stop] = None
    self.error: Optional[str] = None
    rows = meta.get("rows") or []  # the last eval row so far is the result's final row, resumed or not
    self.last_row: Optional[dict] = {k: v for k, v in rows[-1].items() if k != "step"} if rows else None
    self.mark, self.compiled = time.perf_counter(), parts.feeder.compile_time

  def _controller(self, saved: Optional[dict]) -> tuple[Any, Any]:
    """The adaptive batch's controller and decision log, with the stages of the checkpoint resumed from."""
    p = self.parts.plan
    if p.adaptive is None:
      return None, None
    controller = adaptive_batch.Controller(p.adaptive, p.stages)
    controller.load_state_dict(saved)
    if len(controller.stages) > 1:
      self._replan(controller.stages)
      self.bar.retarget(self.parts.plan.total_steps, self.parts.plan.epoch_of)
    if p.adaptive.audit is not None:
      self.audits = adaptive_batch.DecisionLog(self.parts.workdir, controller.audits, self_audit.AUDITS_FILE)
    return controller, adaptive_batch.DecisionLog(self.parts.workdir, controller.records)

  def _replan(self, stages: list) -> None:
    assert self.parts.replan is not None, "an adaptive plan runs with Parts.replan"
    self.parts.replan(stages)

  def _rules(self, saved: Optional[dict]) -> stopping.StopRules:
    p = self.parts.plan
    rules = stopping.StopRules(
      self.parts.config, total_steps=p.total_steps, warmup_steps=p.warmup_steps, epoch_of=p.epoch_of
    )
    rules.load_state_dict(saved)
    return rules

  def audit(self, step: int, train_state: Any) -> None:
    """The ``branch`` self-audit at ``step`` (lamb_lars/train/self_audit.py): branches from a copy of
    ``train_state`` at the ladder sizes above the batch, κ re-set from their bracket; the run's plan is restored."""
    p, c = self.parts.plan, self.controller
    s, a = c.settings, c.settings.audit
    examples, stages = p.examples(step), list(c.stages)
    batch = stages[-1].batch_size
    sizes = self_audit.branch_sizes(s.ladder, batch, a.sizes)
    delta = self_audit.delta(a.delta_examples, sizes)
    skip = None
    if len(sizes) == 1:
      skip = f"no ladder size lies above batch {batch:,}"
    elif examples + delta > p.examples(p.total_steps):
      skip = f"its {delta:,} examples run past the end"
    if skip:
      self.parts.log(f"Batch audit at step {step}: {skip}; not audited, κ stays.")
      c.audits.append({"event": "batch_audit", "step": step, "examples": examples, "skipped": skip})
      c.audits[-1]["kappa_after"] = None
      self.audits.append(c.audits[-1])
      return
    losses, start = {}, time.perf_counter()
    for b in sizes:
      mult = adaptive_batch.lr_multiplier(s.lr_rule, b, s.base_batch)
      self._replan(stages if b == batch else [*stages, batch_schedule.Stage(step, examples, b, mult)])
      losses[b] = self._branch(train_state, step, delta // b, a.loss)
    self._replan(stages)
    self.compiled = self.parts.feeder.compile_time  # the branches' compilations are not the run's
    kind, value, _, _ = adaptive_batch.read_signal(s.signal, self.noise.estimate)
    record = self_audit.record(
      step=step,
      examples=examples,
      batch=batch,
      delta_examples=delta,
      loss=a.loss,
      losses=losses,
      epsilon=a.epsilon,
      signal=kind,
      estimate=value,
      kappa_before=c.kappa(examples),
    )
    # the branches' wall time, compilations included: the one field in which a resumed run's record may differ
    record["seconds"] = round(time.perf_counter() - start, 3)
    c.audits.append(record)
    self.audits.append(record)
    self.parts.log(f"{self_audit.describe(record).rstrip('.')}; {record['seconds']:.1f} s.")
    scalars = {
      "audit_cbs_low": record["cbs_low"],
      "audit_kappa": record["kappa_after"],
      "audit_seconds": record["seconds"],
    }
    self.writer.write_scalars(step, {f"adaptive_batch/{k}": v for k, v in scalars.items() if v is not None})

  def _branch(self, train_state: Any, step: int, n: int, loss: str) -> float:
    """One audit branch: ``n`` steps of the current plan from a copy of ``train_state`` (the call donates its
    input), then the evaluation's ``loss``; inf when a training loss turned non-finite."""
    feeder = self.parts.feeder
    state = jax.tree_util.tree_map(lambda x: jnp.copy(x) if isinstance(x, jax.Array) else x, train_state)
    t = step
    while t < step + n:
      k = min(self.parts.plan.steps_per_fetch, step + n - t)
      state, out = feeder.dispatch(state, t, k, self.parts.step_key)
      if stopping.first_nonfinite(feeder.fetch(out)["train_loss"]) is not None:
        return math.inf
      t += k
    return float(self.parts.evaluate(feeder.to_canonical(state))[loss])

  def decide(self, step: int) -> None:
    """The adaptive batch's decision at ``step``: a record (log line, batch_decisions.jsonl, TensorBoard) and, when
    the batch changes, the run replanned from ``step`` on."""
    p = self.parts.plan
    record = self.controller.decide(step, p.examples(step), self.noise.estimate)
    self.parts.log(adaptive_batch.describe(record))
    self.decisions.append(record)
    self.writer.write_scalars(
      step, {f"adaptive_batch/{k}": record[k] for k in ("estimate", "target", "to", "lr_multiplier")}
    )
    if record["to"] != record["from"]:
      self._replan(self.controller.stages)
      self.rules = self._rules(self.rules.state_dict())
      self.bar.retarget(self.parts.plan.total_steps, self.parts.plan.epoch_of)

  def time_chunk(self, first: int, k: int) -> None:
    """Wall time since the last chunk was fetched, less the compilation in it (timed on its own)."""
    now, compiled = time.perf_counter(), self.parts.feeder.compile_time
    self.window.add_compile(compiled - self.compiled)
    self.window.add_time(now - self.mark - (compiled - self.compiled), k, self.parts.plan.stage_at(first).batch_size)
    self.mark, self.compiled = now, compiled

  def take(self, first: int, m: dict) -> None:
    """A fetched chunk's metrics: the non-finite check, the window, TensorBoard, progress."""
    k = len(m["train_loss"])
    bad = stopping.first_nonfinite(m["train_loss"])
    if bad is not None and self.error is None:
      self.error = f"non-finite training loss at step {first + bad + 1}"
      self.parts.log(f"Diverged: {self.error}.")
      if self.parts.config.stop_on_divergence:
        self.step, self.stop = first + bad + 1, stopping.Stop("nonfinite", "diverged", self.error)
        return
    self.window.add(m)
    stage = self.parts.plan.stage_at(first)
    self.noise.update(m, stage.batch_size, self.parts.plan.num_devices * stage.num_microbatches)
    lrs = lr_table.lookup(self.parts.lrs, np.arange(first, first + k))
    for s, scalars in train_metrics.step_scalars(first + 1, m, lrs):
      self.writer.write_scalars(s, scalars)
    self.step = first + k
    self.bar.update(k, loss=float(m["train_loss"][-1]))

  def at_boundary(self, train_state: Any, ckpt: Any) -> None:
    """Evaluation and checkpoint due at ``self.step`` (the loop dispatched nothing past it)."""
    p, step, feeder = self.parts.plan, self.step, self.parts.feeder
    if self.controller is not None and p.due(decide_every(p), step) and step < p.total_steps:
      a = self.controller.settings.audit
      if a is not None and self_audit.due(a.points, self.controller.audits, p.examples(step)):
        self.audit(step, train_state)
      self.decide(step)  # first: the evaluation row and the checkpoint at this step see the decision
      p = self.parts.plan
    if p.due(p.eval_every_steps, step):
      row = {
        "epoch": round(p.epoch_of(step), 6),
        "examples": p.examples(step),
        "batch_size": p.stage_at(max(step - 1, 0)).batch_size,
        "lr": float(lr_table.lookup(self.parts.lrs, max(step - 1, 0))),
        **self.window.summary(),
        **self.noise.value(),
      }
      row.update(self.parts.evaluate(feeder.to_canonical(train_state)))
      self.writer.write_scalars(step, row, jsonl=True)
      log_eval(self.parts.log, row, step)
      self.last_row, self.stop = row, self.rules.check(step, row)
    if p.checkpoint_every_steps > 0 and p.due(p.checkpoint_every_steps, step):
      meta = {
        "train_time": self.window.train_time,
        "noise_scale": self.noise.state_dict(),
        "stopping": self.rules.state_dict(),
        "train_window": self.window.state_dict(),
        "rows": list(self.writer.rows),
        "config": run_identity.config_record(self.parts.config),
      }
      if self.controller is not None:
        meta["adaptive_batch"] = self.controller.state_dict()
      ckpt.save(step, feeder.to_canonical(train_state), meta)
    self.mark = time.perf_counter()  # evaluation and checkpointing are not training time

  def final_row(self, train_state: Any) -> None:
    """A run that had nothing left to train (its result.json lost after the last checkpoint) still ends with its
    final row: the one ``metrics.jsonl`` holds for this step, else a fresh evaluation of the state (written there)."""
    p, step = self.parts.plan, self.step
    row = {
      "epoch": round(p.epoch_of(step), 6),
      "examples": p.examples(step),
      "batch_size": p.stage_at(max(step - 1, 0)).batch_size,
      "lr": float(lr_table.lookup(self.parts.lrs, max(step - 1, 0))),
    }
    row.update(self.parts.evaluate(self.parts.feeder.to_canonical(train_state)))  # on every process (collective)
    recorded = (
      [r for r in io_utils.read_jsonl(self.writer.path) if r.get("step") == step] if self.writer.enabled else []
    )
    if recorded:
      row = {k: v for k, v in recorded[-1].items() if k != "step"}
    else:
      self.writer.write_scalars(step, row, jsonl=True)
    self.last_row = row

  def result(self) -> dict:
    stop, c = self.stop, self.parts.config
    status, error = (stop.status, stop.error) if stop else ("diverged" if self.error else "done", self.error)
    if stop and stop.stopped != "nonfinite":
      self.parts.log(f"Stopped at step {self.step}: {stop.stopped}" + (f" ({stop.error})." if stop.error else "."))
    judged = (
      None
      if status != "done" or stop
      else stopping.not_learning(
        self.last_row,
        int(c.num_classes),
        self.parts.plan.epoch_of(self.step),
        float(c.stop.dead_accuracy),
        random_labels=c.dataset == "synthetic",
      )
    )
    if judged:
      status, error = "diverged", judged[1]
      self.parts.log(f"{error[0].upper()}{error[1:]} ({judged[0]}).")
    return {
      "status": status,
      "stopped": stop.stopped if stop else None,
      "not_learning": judged and judged[0],
      "step": self.step,
      "total_steps": self.parts.plan.total_steps,
      "final": self.last_row,
      "error": error,
      "train_time": self.window.train_time,
    }


def run(parts: Parts, state: Any, step: int, meta: dict, ckpt: Any, writer: Any, bar: Any) -> dict:
  """Trains from ``state`` at ``step`` to the plan's end or a stop; the result record (module docstring)."""
  RUNNING.append(True)
  try:
    return _run(parts, state, step, meta, ckpt, writer, bar)
  finally:
    RUNNING.clear()


def _run(parts: Parts, state: Any, step: int, meta: dict, ckpt: Any, writer: Any, bar: Any) -> dict:
  run_, feeder = _Run(parts, step, meta, writer, bar), parts.feeder
  pending: collections.deque = collections.deque()
  train_state, ahead = feeder.to_training(state), step
  while run_.stop is None:
    plan = parts.plan  # an adaptive batch replans the run at its decisions
    if STOP_REQUEST:
      raise cli_errors.Terminated() if STOP_REQUEST[0] == 15 else KeyboardInterrupt()
    if ahead < plan.total_steps and not (pending and at_boundary(ahead, plan)):
      k = plan.chunk_size(ahead)
      train_state, out = feeder.dispatch(train_state, ahead, k, parts.step_key)
      pending.append((ahead, out))
      ahead += k
      if len(pending) < 2 and not at_boundary(ahead, plan):
        continue  # one more chunk in flight before this one's metrics are fetched
    if not pending:
      break
    first, out = pending.popleft()
    metrics = feeder.fetch(out)
    run_.time_chunk(first, len(metrics["train_loss"]))
    run_.take(first, metrics)
    if run_.stop is None and at_boundary(run_.step, plan):
      run_.at_boundary(train_state, ckpt)
  if run_.last_row is None and run_.stop is None and step == parts.plan.total_steps:
    run_.final_row(train_state)
  return run_.result()
