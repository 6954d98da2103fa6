"""``train_and_evaluate(config, workdir)``: the training loop (flax examples style), resumable and study-friendly.

Data flows config → input pipeline → compiled K-step train call → metrics. Per evaluation one JSON row goes to
``<workdir>/metrics.jsonl`` (step, epoch, examples, lr, train_loss, eval_loss, eval_accuracy, [validation_loss,
validation_accuracy], wall_time, ...) and to TensorBoard; the end state goes to ``<workdir>/result.json``:
``{status: done | diverged, stopped: null | target | dead | nonfinite, step, total_steps, final, error,
train_time}``. Re-running the same command resumes from the newest checkpoint; a finished run returns its
recorded result. The parts: :mod:`~lamb_lars.train.feeders` (data placement), :mod:`~lamb_lars.train.evaluation`,
:mod:`~lamb_lars.train.train_metrics`, :mod:`~lamb_lars.train.stopping`, :mod:`~lamb_lars.train.checkpoint`.
"""
from __future__ import annotations

import contextlib
import functools
import os
import sys
import time
from typing import Any, Optional

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from lamb_lars import input_pipeline
from lamb_lars.models import bn_groups
from lamb_lars.train import (checkpoint, evaluation, feeders, mesh as mesh_lib, metric_writers, progress, run_identity, run_plan, stopping, train_metrics, validate)
from lamb_lars.common import io_utils, run_files, workdir_lock
from lamb_lars.optim import lr_table, optimizer_config
from lamb_lars.train import train_step as ts
from lamb_lars.models import create_model

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


def _log(msg: str) -> None:
  if jax.process_index() == 0:
    from tqdm import tqdm
    tqdm.write(msg, file=sys.stderr)


def make_plan(config: ml_collections.ConfigDict, info: input_pipeline.DatasetInfo, devices: list) -> run_plan.RunPlan:
  """Everything checkable, checked before anything compiles (:mod:`lamb_lars.train.validate`, the validator studies use
  too); a bad config raises a one-sentence ConfigError."""
  if config.num_devices > len(jax.devices()):
    raise run_plan.ConfigError(f"config.num_devices={config.num_devices} but only {len(jax.devices())} devices exist.")
  return validate.check(config, info, len(devices))


def get_info(config: ml_collections.ConfigDict) -> input_pipeline.DatasetInfo:
  """The dataset's sizes and shapes; a bad data setting (unknown dataset, validation_split) is a ConfigError."""
  try:
    return input_pipeline.get_info(config)
  except input_pipeline.DatasetNotFoundError:
    raise
  except ValueError as e:
    raise run_plan.ConfigError(str(e)) from None


def recorded_result(workdir: str) -> Optional[dict]:
  """The result of a run that already finished in ``workdir`` (done or diverged), else None."""
  path = os.path.join(workdir, run_files.RESULT_FILE)
  try:
    result = io_utils.read_json(path)
  except (ValueError, UnicodeDecodeError):
    raise run_plan.ConfigError(f"{path} is damaged (not valid JSON); move it away to resume the run from its "
                               f"checkpoints.") from None
  if result and result.get("status") in ("done", "diverged"):
    _log(f"{workdir} already finished ({result['status']} at step {result.get('step')}); nothing to do.")
    return result
  return None


def build_model(config: ml_collections.ConfigDict, plan: run_plan.RunPlan):
  """The model with its BN layers wired to the plan's groups, for the chosen parallelism."""
  g = plan.bn.group_devices
  if config.parallelism == "pmap":
    axis_kw = dict(group_axis_name="batch" if g > 1 else None,
                   group_axis_index_groups=bn_groups.axis_index_groups(plan.num_devices, g),
                   stats_axis_name="batch")
  else:
    axis_kw = dict(group_axis_name=mesh_lib.BN_AXIS if g > 1 else None,
                   stats_axis_name="group" if g > 1 else mesh_lib.DATA_AXES)
  norm = functools.partial(bn_groups.GroupBatchNorm, momentum=config.bn.momentum, epsilon=config.bn.epsilon,
                           ghost_batch_size=plan.bn.ghost_batch_size, **axis_kw)
  return create_model(config.model, num_classes=config.num_classes, dtype=DTYPES[config.dtype], norm=norm,
                      zero_init_last_bn=config.zero_init_last_bn)


def step_options(config: ml_collections.ConfigDict, plan: run_plan.RunPlan) -> ts.StepOptions:
  noise = config.diagnostics.noise_injection
  return ts.StepOptions(num_classes=config.num_classes, num_microbatches=plan.num_microbatches,
                        unroll_microbatches=config.unroll_microbatches,
                        label_smoothing=config.label_smoothing,
                        signal_to_noise=plan.diagnostics.signal_to_noise,
                        activation_noise=noise.activations, weight_noise=noise.weights,
                        gradient_noise=noise.gradients, label_noise=noise.labels)


def create_optimizer(config: ml_collections.ConfigDict, plan: run_plan.RunPlan):
  """(transformation, LR schedule); trust-ratio statistics are kept when the diagnostics log them."""
  opt = config.optimizer.copy_and_resolve_references()
  opt.track_stats = bool(opt.track_stats or config.diagnostics.trust_ratios)
  return optimizer_config.create_optimizer(opt, total_steps=plan.total_steps, num_train=plan.num_train,
                                           batch_size=plan.batch_size)


def create_train_state(model, tx, mesh, image_shape: tuple, seed: int, table=None):
  """(initial state replicated over the mesh, the key the train steps fold their step number into).

  An LR table (``config.optimizer.lr_table``) enters the jitted init as an argument, so that the init program does
  not depend on the learning rates either (:mod:`lamb_lars.optim.lr_table`).
  """
  init_rng, step_key = jax.random.split(jax.random.PRNGKey(seed))

  def init(rng, table):
    state = ts.init_state(model, tx, rng, image_shape)
    return state if table is None else state.replace(opt_state=lr_table.set_lr_table(state.opt_state, table))

  state = jax.jit(init, out_shardings=mesh_lib.replicated(mesh))(init_rng, table)
  return state, step_key


def restore(ckpt: checkpoint.Checkpointer, state, workdir: str) -> tuple[Any, dict]:
  """The newest checkpoint's state and metadata, or ``state`` and empty metadata when there is none."""
  if ckpt.latest_step() is None:
    return state, {}
  state, meta = ckpt.restore_newest_intact(state, log=_log)
  _log(f"Resumed from step {int(state.step)} in {workdir}.")
  return state, meta


def due(every: int, step: int, plan: run_plan.RunPlan) -> bool:
  """Whether a periodic action with period ``every`` (0 = only at the end) falls on ``step``."""
  return (every > 0 and step % every == 0) or step == plan.total_steps


def log_eval(row: dict, step: int) -> None:
  val = f"  val_loss {row['validation_loss']:.4f}" if "validation_loss" in row else ""
  _log(f"step {step:>6} epoch {row['epoch']:6.2f}  train_loss {row['train_loss']:.4f}  eval_loss {row['eval_loss']:.4f}"
       f"  eval_acc {100 * row['eval_accuracy']:.2f}%{val}  {row['examples_per_sec']:,.0f} ex/s")


def progress_bar(config, plan: run_plan.RunPlan, step: int) -> progress.Progress:
  """A bar on a terminal or in a notebook, else a line every minute (lamb_lars/train/progress.py)."""
  _log(f"Training {config.model} on {config.dataset}: batch {plan.batch_size} on {plan.num_devices} device(s) "
       f"× {plan.num_microbatches} micro-batch(es), {plan.total_steps} steps ({plan.epoch_of(1) ** -1:.2f}/epoch), "
       f"BN group {plan.bn.group_devices} device(s) × ghost {plan.bn.ghost_batch_size}.")
  return progress.Progress(total=plan.total_steps, initial=step, batch_size=plan.batch_size, epoch_of=plan.epoch_of,
                           every_s=progress.every_s(), enabled=jax.process_index() == 0 and config.progress)


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str,
                       hparams: Optional[dict[str, Any]] = None) -> dict:
  """Trains and evaluates ``config`` in ``workdir``; resumes if a checkpoint is there. Returns the result record.

  The workdir is locked while it runs (:mod:`lamb_lars.common.workdir_lock`) and belongs to the config it was started
  with (:mod:`lamb_lars.train.run_identity`). ``hparams``: what TensorBoard's HParams dashboard shows for this run (a
  study passes the keys it varies); default ``metric_writers.HPARAM_KEYS`` of ``config``."""
  mesh_lib.initialize_distributed(config)
  info = get_info(config)
  devices = jax.devices()[: config.num_devices or None]
  plan = make_plan(config, info, devices)
  io_utils.makedirs(workdir)
  lock = workdir_lock.hold(workdir) if jax.process_index() == 0 else contextlib.nullcontext()  # one writer per run
  with lock:
    return _train_locked(config, workdir, info, devices, plan, hparams)


def _train_locked(config: ml_collections.ConfigDict, workdir: str, info: input_pipeline.DatasetInfo, devices: list,
                  plan: run_plan.RunPlan, hparams: Optional[dict[str, Any]] = None) -> dict:
  run_identity.check(config, workdir)
  if (done := recorded_result(workdir)) is not None:
    return done
  is_main = jax.process_index() == 0
  if is_main:
    run_identity.record(config, workdir)
  input_pipeline.prepare(config)

  tx, lr_fn = create_optimizer(config, plan)
  lrs = lr_table.tabulate(lr_fn, plan.total_steps)  # the LR of every update, on the host: logged per step
  table = lrs if config.optimizer.lr_table else None
  mesh = mesh_lib.make_mesh(plan.bn.group_devices, devices)
  model, opts = build_model(config, plan), step_options(config, plan)
  state, step_key = create_train_state(model, tx, mesh, info.image_shape, config.seed, table)
  w0 = jax.device_get(state.params) if config.diagnostics.dist_from_init else None
  evaluate = evaluation.Evaluator(config, mesh, model, opts, w0)
  feeder = feeders.make_feeder(config, plan, mesh, info, model, tx, opts)
  ckpt = checkpoint.Checkpointer(workdir, keep=config.keep_checkpoints)
  state, meta = restore(ckpt, state, workdir)
  noise = train_metrics.NoiseScaleTracker(batch_size=plan.batch_size, num_devices=plan.num_devices,
                                          num_microbatches=plan.num_microbatches, decay=config.diagnostics.noise_scale_ema,
                                          enabled=plan.diagnostics.noise_scale)
  noise.load_state_dict(meta.get("noise_scale"))
  rules = stopping.StopRules(config, total_steps=plan.total_steps, warmup_steps=plan.warmup_steps,
                             epoch_of=plan.epoch_of)
  rules.load_state_dict(meta.get("stopping"))
  window = train_metrics.MetricsWindow(plan.batch_size, meta.get("train_time", 0.0))
  step = int(jax.device_get(state.step))
  writer = metric_writers.MetricWriter(workdir, enabled=is_main, resume_step=step, log=_log,
                                       hparams=hparams or metric_writers.config_hparams(config))
  bar = progress_bar(config, plan, step)

  train_state, stop, error, last_row = feeder.to_training(state), None, None, None
  while step < plan.total_steps and stop is None:
    k = plan.chunk_size(step)
    t0 = time.perf_counter()
    train_state, m = feeder.run_chunk(train_state, step, k, step_key)
    window.add_time(time.perf_counter() - t0, k)
    bad = stopping.first_nonfinite(m["train_loss"])
    if bad is not None and error is None:
      error = f"non-finite training loss at step {step + bad + 1}"
      _log(f"Diverged: {error}.")
      if config.stop_on_divergence:
        step, stop = step + bad + 1, stopping.Stop("nonfinite", "diverged", error)
        break
    window.add(m)
    noise.update(m)
    for s, scalars in train_metrics.step_scalars(step + 1, m, lr_table.lookup(lrs, np.arange(step, step + k))):
      writer.write_scalars(s, scalars)
    step += k
    bar.update(k, loss=float(m["train_loss"][-1]))
    if due(plan.eval_every_steps, step, plan):
      last_row = {"epoch": round(plan.epoch_of(step), 6), "examples": step * plan.batch_size,
                  "lr": float(lr_table.lookup(lrs, max(step - 1, 0))), **window.summary(), **noise.value()}
      last_row.update(evaluate(feeder.to_canonical(train_state)))
      writer.write_scalars(step, last_row, jsonl=True)
      log_eval(last_row, step)
      stop = rules.check(step, last_row)
    if plan.checkpoint_every_steps > 0 and due(plan.checkpoint_every_steps, step, plan):
      meta = {"train_time": window.train_time, "noise_scale": noise.state_dict(), "stopping": rules.state_dict()}
      ckpt.save(step, feeder.to_canonical(train_state), meta)
  bar.close()
  ckpt.close()
  status = stop.status if stop else ("diverged" if error else "done")
  writer.close(status)
  result = {"status": status, "stopped": stop.stopped if stop else None, "step": step,
            "total_steps": plan.total_steps, "final": last_row, "error": stop.error if stop else error,
            "train_time": window.train_time}
  if stop and stop.stopped != "nonfinite":
    _log(f"Stopped at step {step}: {stop.stopped}" + (f" ({stop.error})." if stop.error else "."))
  if is_main:
    io_utils.write_json_atomic(os.path.join(workdir, run_files.RESULT_FILE), result)
  return result
