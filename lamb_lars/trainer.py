"""``train_and_evaluate(config, workdir)``: the training loop (flax examples style), resumable and study-friendly.

Data flows config → input pipeline → compiled K-step train call → metrics. Per evaluation one JSON row goes to
``<workdir>/metrics.jsonl`` (step, epoch, examples, wall_time, train_loss, eval_loss, eval_accuracy, lr, ...) and to
TensorBoard; the end state goes to ``<workdir>/result.json`` with status ``done`` or ``diverged``. Re-running the same
command resumes from the newest checkpoint; a finished run returns its recorded result.
"""
from __future__ import annotations

import functools
import json
import os
import sys
import time
from typing import Any, Optional

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

import input_pipeline
from lamb_lars import bn_groups, checkpoint, mesh as mesh_lib, metric_writers, noise_scale, optimizers, run_plan
from lamb_lars import train_step as ts
from lamb_lars.models import create_model

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


def _log(msg: str) -> None:
  if jax.process_index() == 0:
    from tqdm import tqdm
    tqdm.write(msg, file=sys.stderr)


def _write_json(path: str, obj: dict) -> None:
  tmp = path + ".tmp"
  with open(tmp, "w") as f:
    json.dump(obj, f, indent=1, default=float)
  os.replace(tmp, path)


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


class _Loop:
  """Owns the compiled functions and the placement of state and data for one parallelism style."""

  def __init__(self, config, plan, model, tx, mesh, info):
    self.config, self.plan, self.mesh = config, plan, mesh
    diag = config.diagnostics
    noise = diag.noise_injection
    opts = ts.StepOptions(num_classes=config.num_classes, num_microbatches=plan.num_microbatches,
                          label_smoothing=config.label_smoothing,
                          signal_to_noise=plan.diagnostics.signal_to_noise,
                          activation_noise=noise.activations, weight_noise=noise.weights,
                          gradient_noise=noise.gradients, label_noise=noise.labels)
    ds = config.dataset
    train_pre = lambda im, lab, rng: input_pipeline.preprocess(im, lab, dataset=ds, train=True, rng=rng)
    eval_pre = lambda im, lab, rng: input_pipeline.preprocess(im, lab, dataset=ds, train=False, rng=rng)
    self.pmap = config.parallelism == "pmap"
    want = config.data_on_device
    self.resident = (not self.pmap) and (want == "yes" or (want == "auto" and info.in_memory))
    if self.pmap:
      self._make = lambda: ts.make_pmap_train_chunk(model, tx, opts, train_pre)
    else:
      self._make = lambda: ts.make_train_chunk(model, tx, opts, train_pre, mesh, resident=self.resident)
    self._fn = None
    self._eval = ts.make_eval_step(model, opts, eval_pre)
    self.local_devices = [d for d in mesh.devices.flat if d.process_index == jax.process_index()]
    self.n_train = info.num_train
    self._stream, self._stream_step = None, -1
    if self.resident:
      images, labels = input_pipeline.load_arrays(config, "train")
      self.n_train = len(labels)
      self.data = mesh_lib.put_replicated(mesh, (images, labels))

  # The canonical state is replicated over the mesh; under pmap a stacked copy (leading device axis) trains.
  def place(self, state):
    return jax.device_put(state, mesh_lib.replicated(self.mesh))

  def to_training(self, state):
    if not self.pmap:
      return state
    d = len(self.local_devices)
    return jax.tree.map(lambda x: np.broadcast_to(np.asarray(x), (d,) + x.shape), jax.device_get(state))

  def to_canonical(self, state):
    return self.place(jax.tree.map(lambda x: x[0], state)) if self.pmap else state

  def run_chunk(self, state, step: int, k: int, key):
    """Runs optimizer steps ``step .. step+k-1``; returns the new state and per-step metrics (host numpy).

    Calls of ``scan_steps`` steps each are dispatched asynchronously; the host waits once, for the metrics.
    """
    cfg, plan = self.config, self.plan
    if self._fn is None:
      self._fn = self._make()
    pi, pc = jax.process_index(), jax.process_count()
    if self.resident:
      idx = np.stack([_batch_indices(cfg.seed, s, plan, self.n_train) for s in range(step, step + k)])
      idx = idx.reshape(k, pc, -1)[:, pi]
    else:
      if self._stream is None or self._stream_step != step:
        self._stream = input_pipeline.train_stream(cfg, start_step=step, global_batch_size=plan.batch_size,
                                                   process_index=pi, process_count=pc)
      self._stream_step = step + k
    outs = []
    n = max(1, int(cfg.scan_steps))
    for a in range(0, k, n):
      size = min(n, k - a)
      if self.resident:
        batch = (mesh_lib.put_global_batch(self.mesh, idx[a:a + size], batch_axis=1),)
        state, metrics = self._fn(state, *self.data, *batch, key)
      else:
        batches = [next(self._stream) for _ in range(size)]
        images = np.stack([b["image"] for b in batches])
        labels = np.stack([b["label"] for b in batches])
        if self.pmap:
          d = len(self.local_devices)
          images = np.moveaxis(images.reshape((size, d, -1) + images.shape[2:]), 1, 0)
          labels = np.moveaxis(labels.reshape(size, d, -1), 1, 0)
          state, metrics = self._fn(state, images, labels, np.broadcast_to(np.asarray(key), (d,) + key.shape))
          metrics = jax.tree.map(lambda x: x[0], metrics)
        else:
          put = functools.partial(mesh_lib.put_global_batch, self.mesh, batch_axis=1)
          state, metrics = self._fn(state, put(images), put(labels), key)
      outs.append(metrics)
    outs = jax.device_get(outs)
    return state, {key_: np.concatenate([np.asarray(o[key_]) for o in outs]) for key_ in outs[0]}

  def evaluate(self, state) -> dict:
    cfg = self.config
    totals = None
    for batch in input_pipeline.eval_batches(cfg, batch_size=cfg.eval_batch_size, process_index=jax.process_index(),
                                             process_count=jax.process_count()):
      arrays = mesh_lib.put_global_batch(self.mesh, (batch["image"], batch["label"], batch["mask"]))
      out = self._eval(state.params, state.batch_stats, *arrays)
      totals = out if totals is None else totals + out
    loss_sum, correct, count = np.asarray(jax.device_get(totals), np.float64)
    return {"eval_loss": loss_sum / count, "eval_accuracy": correct / count, "eval_examples": int(count)}


def _batch_indices(seed: int, step: int, plan: run_plan.RunPlan, n_train: int) -> np.ndarray:
  epoch, pos = divmod(step, plan.steps_per_epoch)
  perm = _cached_permutation(seed, epoch, n_train)
  return perm[pos * plan.batch_size:(pos + 1) * plan.batch_size].astype(np.int32)


@functools.lru_cache(maxsize=2)
def _cached_permutation(seed: int, epoch: int, n: int) -> np.ndarray:
  return input_pipeline.epoch_permutation(seed, epoch, n)


def _eval_row(loop: _Loop, state, step: int, plan, lr_fn, train_stats: dict, timing: dict, w0, config) -> dict:
  row = {"epoch": round(plan.epoch_of(step), 6), "examples": step * plan.batch_size,
         "lr": float(lr_fn(max(step - 1, 0))), **train_stats, **timing}
  row.update(loop.evaluate(state))
  diag = config.diagnostics
  if diag.dist_from_init:
    params = jax.device_get(state.params)
    sq = jax.tree.map(lambda w, w0_: float(np.sum((np.asarray(w, np.float64) - w0_) ** 2)), params, w0)
    flat = {"/".join(str(getattr(k, "key", k)) for k in path): v
            for path, v in jax.tree_util.tree_leaves_with_path(sq)}
    row["dist_from_init"] = float(np.sqrt(sum(flat.values())))
    row.update({f"dist_from_init/{k}": float(np.sqrt(v)) for k, v in flat.items()})
  if diag.trust_ratios:
    from lamb_lars import trust_ratio
    stats = jax.device_get(trust_ratio.trust_ratio_stats(jax.tree.map(lambda x: x, state.opt_state)))
    row.update({f"trust_ratio/{k}": float(np.asarray(v)) for k, v in stats.items()})
  return row


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> dict:
  """Trains and evaluates ``config`` in ``workdir``; resumes if a checkpoint is there. Returns the result record."""
  mesh_lib.initialize_distributed(config)
  info = input_pipeline.get_info(config)
  devices = jax.devices()[: config.num_devices or None]
  try:  # everything checkable is checked before anything compiles
    if config.num_devices > len(jax.devices()):
      raise ValueError(f"config.num_devices={config.num_devices} but only {len(jax.devices())} devices exist.")
    plan = run_plan.make_plan(config, num_train=info.num_train, num_devices=len(devices))
    optimizers.validate_config(config.optimizer)
  except ValueError as e:
    raise run_plan.ConfigError(str(e)) from None
  is_main = jax.process_index() == 0
  os.makedirs(workdir, exist_ok=True)
  result_path = os.path.join(workdir, "result.json")
  if os.path.exists(result_path):
    with open(result_path) as f:
      result = json.load(f)
    if result.get("status") in ("done", "diverged"):
      _log(f"{workdir} already finished ({result['status']} at step {result.get('step')}); nothing to do.")
      return result
  if is_main:
    with open(os.path.join(workdir, "config.json"), "w") as f:
      f.write(config.to_json_best_effort(indent=1))
  input_pipeline.prepare(config)

  opt_config = config.optimizer.copy_and_resolve_references()
  opt_config.track_stats = bool(opt_config.track_stats or config.diagnostics.trust_ratios)
  tx, lr_fn = optimizers.create_optimizer(opt_config, total_steps=plan.total_steps,
                                          steps_per_epoch=plan.epoch_length, batch_size=plan.batch_size)
  mesh = mesh_lib.make_mesh(plan.bn.group_devices, devices)
  model = build_model(config, plan)
  loop = _Loop(config, plan, model, tx, mesh, info)
  rng = jax.random.PRNGKey(config.seed)
  init_rng, step_key = jax.random.split(rng)
  state = jax.jit(lambda r: ts.init_state(model, tx, r, info.image_shape),
                  out_shardings=mesh_lib.replicated(mesh))(init_rng)
  w0 = jax.device_get(state.params) if config.diagnostics.dist_from_init else None

  ckpt = checkpoint.Checkpointer(workdir, keep=config.keep_checkpoints)
  meta = {"train_time": 0.0, "noise_scale": None}
  if ckpt.latest_step() is not None:
    state, meta = ckpt.restore(state)
    _log(f"Resumed from step {int(state.step)} in {workdir}.")
  step = int(jax.device_get(state.step))
  writer = metric_writers.MetricWriter(workdir, enabled=is_main, resume_step=step)
  ns_decay = config.diagnostics.noise_scale_ema
  ns = noise_scale.NoiseScaleState(*meta["noise_scale"]) if meta.get("noise_scale") else \
      noise_scale.NoiseScaleState(0.0, 0.0, 0)
  b_small, b_big = plan.batch_size / plan.num_devices, plan.batch_size
  track_ns = plan.diagnostics.noise_scale

  from tqdm import tqdm
  bar = tqdm(total=plan.total_steps, initial=step, unit="step", dynamic_ncols=True, file=sys.stderr,
             disable=not (is_main and config.progress) or None)
  _log(f"Training {config.model} on {config.dataset}: batch {plan.batch_size} on {plan.num_devices} device(s) "
       f"× {plan.num_microbatches} micro-batch(es), {plan.total_steps} steps ({plan.steps_per_epoch}/epoch), "
       f"BN group {plan.bn.group_devices} device(s) × ghost {plan.bn.ghost_batch_size}.")
  train_state = loop.to_training(state)
  status, error, last_row = "done", None, None
  window = {"loss": [], "acc": [], "gn": [], "snr": [], "time": 0.0, "examples": 0}
  train_time = float(meta.get("train_time", 0.0))
  compile_time = 0.0
  seen_k = set()
  while step < plan.total_steps:
    k = plan.chunk_size(step)
    t0 = time.perf_counter()
    train_state, m = loop.run_chunk(train_state, step, k, step_key)
    dt = time.perf_counter() - t0
    if not seen_k:  # the first call compiles: keep it out of the throughput
      seen_k.add(k)
      compile_time += dt
    else:
      window["time"] += dt
      window["examples"] += k * plan.batch_size
    train_time += dt
    losses = np.asarray(m["train_loss"], np.float64)
    bad = np.flatnonzero(~np.isfinite(losses))
    if bad.size:
      status, error = "diverged", f"non-finite training loss at step {step + int(bad[0]) + 1}"
      step += int(bad[0]) + 1
      _log(f"Diverged: {error}.")
      if config.stop_on_divergence:
        break
    step += k
    bar.update(k)
    window["loss"].extend(losses.tolist())
    window["acc"].extend(np.asarray(m["train_accuracy"]).tolist())
    window["gn"].extend(np.asarray(m["grad_norm"]).tolist())
    if "signal_to_noise" in m:
      window["snr"].extend(np.asarray(m["signal_to_noise"]).tolist())
    if track_ns:
      for small_sq, big_sq in zip(np.asarray(m["grad_sq_norm_local"], np.float64),
                                  np.asarray(m["grad_norm"], np.float64) ** 2):
        ns = noise_scale.update(ns, small_sq, big_sq, b_small, b_big, ns_decay)
    bar.set_postfix(loss=f"{losses[-1]:.4f}")
    for j in range(k):  # per-step scalars (already on the host): loss, lr, global and per-device gradient norms
      s = step - k + j + 1
      writer.write_scalars(s, {"step/train_loss": losses[j], "step/lr": float(lr_fn(s - 1)),
                               "step/grad_norm": float(m["grad_norm"][j]),
                               "step/grad_norm_per_device_rms": float(np.sqrt(m["grad_sq_norm_local"][j]))})
    at_eval = (plan.eval_every_steps and step % plan.eval_every_steps == 0) or step == plan.total_steps
    at_ckpt = (plan.checkpoint_every_steps and step % plan.checkpoint_every_steps == 0) or step == plan.total_steps
    if at_eval:
      timing = {"wall_time": train_time, "compile_time": compile_time,
                "examples_per_sec": window["examples"] / window["time"] if window["time"] else float("nan"),
                "step_time": window["time"] / (window["examples"] / plan.batch_size) if window["examples"] else float("nan")}
      stats = {"train_loss": float(np.mean(window["loss"])), "train_accuracy": float(np.mean(window["acc"])),
               "grad_norm": float(np.mean(window["gn"]))}
      if track_ns:
        stats["noise_scale"] = float(noise_scale.b_simple(ns))
      if window["snr"]:
        stats["signal_to_noise"] = float(np.mean(window["snr"]))
      last_row = _eval_row(loop, loop.to_canonical(train_state), step, plan, lr_fn, stats, timing, w0, config)
      writer.write_scalars(step, last_row, jsonl=True)
      _log(f"step {step:>6} epoch {last_row['epoch']:6.2f}  train_loss {last_row['train_loss']:.4f}  "
           f"eval_loss {last_row['eval_loss']:.4f}  eval_acc {100 * last_row['eval_accuracy']:.2f}%  "
           f"{last_row['examples_per_sec']:,.0f} ex/s")
      window = {"loss": [], "acc": [], "gn": [], "snr": [], "time": 0.0, "examples": 0}
    if at_ckpt and plan.checkpoint_every_steps > 0:
      meta = {"train_time": train_time, "noise_scale": [float(ns.g2), float(ns.trace), int(ns.count)]}
      ckpt.save(step, loop.to_canonical(train_state), meta)
  bar.close()
  ckpt.close()
  writer.close()
  result = {"status": status, "step": step, "total_steps": plan.total_steps, "final": last_row, "error": error,
            "train_time": train_time}
  if is_main:
    _write_json(result_path, result)
  return result
