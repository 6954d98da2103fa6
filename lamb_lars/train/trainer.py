"""``train_and_evaluate(config, workdir)``: the training loop (flax examples style), resumable and study-friendly.

Data flows config → input pipeline → compiled K-step train call → metrics. Per evaluation one JSON row goes to
``<workdir>/metrics.jsonl`` (step, epoch, examples, lr, train_loss, eval_loss, eval_accuracy, [validation_loss,
validation_accuracy], wall_time, ...) and to TensorBoard; the end state goes to ``<workdir>/result.json``:
``{status: done | diverged, stopped: null | target | dead | nonfinite, not_learning: null | exploding_loss |
chance_accuracy, step, total_steps, final, error, train_time}`` (a run that trained its budget without learning is
``diverged``, :func:`lamb_lars.train.stopping.not_learning`). Re-running the same command resumes from the newest
checkpoint; a finished run returns its recorded result. The parts: :mod:`~lamb_lars.train.loop` (chunks
dispatched one ahead, metrics fetched one chunk late), :mod:`~lamb_lars.train.feeders` (data placement, prefetch),
:mod:`~lamb_lars.train.parallel` (jit or pmap), :mod:`~lamb_lars.train.evaluation`,
:mod:`~lamb_lars.train.stopping`, :mod:`~lamb_lars.train.checkpoint`.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from typing import Any, Optional

import jax
import jax.numpy as jnp
import ml_collections

from lamb_lars import input_pipeline
from lamb_lars.models import bn_groups, create_model
from lamb_lars.train import (
  checkpoint,
  evaluation,
  feeders,
  init_from,
  mesh as mesh_lib,
  metric_writers,
  parallel,
  per_example,
  progress,
  run_identity,
  run_optimizer,
  run_plan,
  validate,
)
from lamb_lars.common import io_utils, run_files, workdir_lock
from lamb_lars.optim import lr_table, preconditioner
from lamb_lars.train import loop as loop_lib, train_step as ts

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


def _log(msg: str) -> None:
  if jax.process_index() == 0:
    from tqdm import tqdm

    tqdm.write(msg, file=sys.stdout)  # progress and notes on stdout: stderr holds only what went wrong


def recorded_result(workdir: str) -> Optional[dict]:
  """The result of a run that already finished in ``workdir`` (done or diverged), else None."""
  path = os.path.join(workdir, run_files.RESULT_FILE)
  result = io_utils.read_json_object(
    path,
    error=run_plan.ConfigError,
    damaged="is damaged (not valid JSON)",
    remedy="move it away to resume the run from its checkpoints",
  )
  if result and result.get("status") in ("done", "diverged"):
    _log(f"{workdir} already finished ({result['status']} at step {result.get('step')}); nothing to do.")
    return result
  return None


def build_model(config: ml_collections.ConfigDict, plan: run_plan.RunPlan, strategy: Any, stage: int = 0):
  """The model with its BN layers wired to the groups of the plan's stage ``stage`` over the strategy's axes."""
  bn = plan.stages[stage].bn
  norm = functools.partial(
    bn_groups.GroupBatchNorm,
    momentum=config.bn.momentum,
    epsilon=config.bn.epsilon,
    ghost_batch_size=bn.ghost_batch_size,
    **strategy.bn_axes(plan.num_devices, bn.group_devices),
  )
  return create_model(
    config.model,
    num_classes=config.num_classes,
    dtype=DTYPES[config.dtype],
    norm=norm,
    zero_init_last_bn=config.zero_init_last_bn,
    width=config.model_width,
    depth=config.model_depth,
    hidden=tuple(config.mlp_hidden),
  )


def step_options(config: ml_collections.ConfigDict, plan: run_plan.RunPlan, stage: int = 0) -> ts.StepOptions:
  noise = config.diagnostics.noise_injection
  return ts.StepOptions(
    num_classes=config.num_classes,
    num_microbatches=plan.stages[stage].num_microbatches,
    microbatch_loop=config.microbatch_loop,
    label_smoothing=config.label_smoothing,
    signal_to_noise=plan.diagnostics.signal_to_noise,
    activation_noise=noise.activations,
    weight_noise=noise.weights,
    gradient_noise=noise.gradients,
    label_noise=noise.labels,
    preconditioner=preconditioner.from_config(config.optimizer) if plan.diagnostics.noise_scale_precond else None,
  )


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


def restore(ckpt: checkpoint.Checkpointer, state, workdir: str, plan: run_plan.RunPlan) -> tuple[Any, dict]:
  """The newest checkpoint's state and metadata; without one, ``state`` (or a branch's reference state,
  :mod:`lamb_lars.train.init_from`) and empty metadata."""
  ckpt.quarantine_unlisted(log=_log)
  if ckpt.latest_step() is None:
    if plan.branch is None:
      return state, {}
    _log(
      f"Branching from {plan.branch.workdir} at its step {plan.branch.step} (example {plan.data_start}), "
      f"LR {plan.branch.lr if plan.branch.lr is not None else 'from config.optimizer'}."
    )
    return init_from.restore_into(state, plan.branch), {}
  state, meta = ckpt.restore_newest_intact(state, log=_log)
  _log(f"Resumed from step {int(state.step)} in {workdir}.")
  return state, meta


def progress_bar(config, plan: run_plan.RunPlan, step: int) -> progress.Progress:
  """A bar on a terminal or in a notebook, else a line every minute (lamb_lars/train/progress.py)."""
  batches = "→".join(str(s.batch_size) for s in plan.stages)
  _log(
    f"Training {config.model} on {config.dataset}: batch {batches} on {plan.num_devices} device(s) "
    f"× {plan.num_microbatches} micro-batch(es), {plan.total_steps} steps ({plan.epoch_of(1) ** -1:.2f}/epoch), "
    f"BN group {plan.bn.group_devices} device(s) × ghost {plan.bn.ghost_batch_size}."
  )
  return progress.Progress(
    total=plan.total_steps,
    initial=step,
    batch_size=plan.batch_size,
    epoch_of=plan.epoch_of,
    every_s=progress.every_s(),
    enabled=jax.process_index() == 0 and config.progress,
  )


def make_replan(config: ml_collections.ConfigDict, parts: loop_lib.Parts, stage_parts, current: list):
  """``replan(stages)``: the run from now on with the batch schedule ``stages`` (an adaptive batch's decision,
  :mod:`lamb_lars.train.adaptive_batch`): the plan re-counted, the optimizer's LR schedule on the new stages (the
  state keeps its structure: the schedule is a function of the update count), the host LR table, and the feeder's
  compiled calls."""

  def replan(stages) -> None:
    plan = run_plan.with_stages(config, parts.plan, stages)
    tx, lr_fn = run_optimizer.create_optimizer(config, plan)
    current[0] = plan
    stage_parts.cache_clear()
    parts.plan, parts.lrs = plan, lr_table.tabulate(lr_fn, plan.total_steps)
    feeders.replan(parts.feeder, plan, stage_parts, tx)

  return replan


def train_and_evaluate(
  config: ml_collections.ConfigDict, workdir: str, hparams: Optional[dict[str, Any]] = None
) -> dict:
  """Trains and evaluates ``config`` in ``workdir``; resumes if a checkpoint is there. Returns the result record.

  Everything checkable is checked first (:func:`lamb_lars.train.validate.validate`, the validator studies use too):
  a bad config raises a one-sentence ConfigError before anything compiles. The workdir is locked while it runs
  (:mod:`lamb_lars.common.workdir_lock`) and belongs to the config it was started with
  (:mod:`lamb_lars.train.run_identity`). ``hparams``: what TensorBoard's HParams dashboard shows for this run (a
  study passes the keys it varies); default ``metric_writers.HPARAM_KEYS`` of ``config``."""
  mesh_lib.initialize_distributed(config)
  devices = jax.devices()[: config.num_devices or None]
  info = validate.dataset_info(config)
  plan = validate.validate(config, devices, info)
  io_utils.makedirs(workdir)
  lock = workdir_lock.hold(workdir) if jax.process_index() == 0 else contextlib.nullcontext()  # one writer per run
  with lock:
    run_identity.check(config, workdir)
    if (done := recorded_result(workdir)) is not None:
      return done
    if jax.process_index() == 0:
      run_identity.record(config, workdir)
    input_pipeline.prepare(config)
    return _train(config, workdir, info, devices, plan, hparams)


def _build_parts(
  config: ml_collections.ConfigDict,
  workdir: str,
  info: input_pipeline.DatasetInfo,
  devices: list,
  plan: run_plan.RunPlan,
) -> tuple[loop_lib.Parts, Any]:
  """The loop's parts (optimizer, LR table, mesh, model per batch stage, evaluator, feeder, replanner) and the
  freshly initialised train state."""
  tx, lr_fn = run_optimizer.create_optimizer(config, plan, plan.branch.lr if plan.branch else None)
  lrs = lr_table.tabulate(lr_fn, plan.total_steps)  # the LR of every update, on the host: logged per step
  mesh = mesh_lib.make_mesh(plan.bn.group_devices, devices)
  strategy = parallel.make(config, mesh)
  current = [plan]  # the plan now: an adaptive batch replans the run (make_replan)
  stage_parts = functools.lru_cache()(
    lambda i: (build_model(config, current[0], strategy, i), step_options(config, current[0], i))
  )
  model, opts = stage_parts(0)
  state, step_key = create_train_state(
    model, tx, mesh, info.image_shape, config.seed, lrs if config.optimizer.lr_table else None
  )
  w0 = jax.device_get(state.params) if config.diagnostics.dist_from_init else None
  parts = loop_lib.Parts(
    config=config,
    plan=plan,
    lrs=lrs,
    step_key=step_key,
    log=_log,
    evaluate=evaluation.Evaluator(
      config,
      mesh,
      model,
      opts,
      w0,
      per_example.PerExample(config, plan, model, opts) if plan.diagnostics.noise_scale_per_example else None,
    ),
    feeder=feeders.make_feeder(config, plan, strategy, info, stage_parts, tx),
    workdir=workdir if jax.process_index() == 0 else None,
  )
  parts.replan = make_replan(config, parts, stage_parts, current)
  return parts, state


def _train(
  config: ml_collections.ConfigDict,
  workdir: str,
  info: input_pipeline.DatasetInfo,
  devices: list,
  plan: run_plan.RunPlan,
  hparams: Optional[dict[str, Any]],
) -> dict:
  """Builds the run's parts, resumes, runs the loop; the checkpointer and the writer are closed on every exit."""
  parts, state = _build_parts(config, workdir, info, devices, plan)
  ckpt, writer, bar, status = checkpoint.Checkpointer(workdir, keep=config.keep_checkpoints), None, None, None
  try:
    state, meta = restore(ckpt, state, workdir, plan)
    step = int(jax.device_get(state.step))
    writer = metric_writers.MetricWriter(
      workdir,
      enabled=jax.process_index() == 0,
      resume_step=step,
      log=_log,
      hparams=hparams or metric_writers.config_hparams(config),
      saved_rows=meta.get("rows"),
    )
    bar = progress_bar(config, plan, step)
    result = loop_lib.run(parts, state, step, meta, ckpt, writer, bar)
    status = result["status"]
  except KeyboardInterrupt as e:  # SIGINT (or SIGTERM, train.py): the step reached, for the one line train.py prints
    e.step, e.checkpoint = (bar.step if bar is not None else None), ckpt.latest_step()  # type: ignore[attr-defined]
    raise
  finally:
    if bar is not None:
      bar.close()
    ckpt.close()
    if writer is not None:
      writer.close(status)
  if jax.process_index() == 0:
    io_utils.write_json_atomic(os.path.join(workdir, run_files.RESULT_FILE), result)
  return result
