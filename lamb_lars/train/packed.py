"""``train_pack(configs, workdirs)``: K trials trained as K slots of one vmapped program (issue 61; docs/studies.md,
"Packed trials").

Each slot is a trial as :func:`lamb_lars.train.trainer.train_and_evaluate` would run it, in its own workdir: its own
``config.json``, ``metrics.jsonl`` (one row per evaluation), TensorBoard events, checkpoints and ``result.json``.
The result differs from an unpacked trial's only by its ``packed`` field, ``{"size": K, "slot": i}``. The host side
of each slot is the unpacked loop's own :class:`lamb_lars.train.loop._Run` (its metrics window, stopping rules,
evaluation rows, checkpoints and result), so the records are the same by construction; the device side is
:func:`lamb_lars.train.packed_step.make_packed_chunk`.

The loop, one chunk at a time (no chunk is dispatched ahead: the host reads every chunk's metrics before the next):

* the live slots are those not stopped; the slots *moving* are the live ones at the smallest step (all of them,
  except after a resume from checkpoints at different steps, when the slots behind catch up first);
* a chunk of the moving slots' plan runs (the others are masked, ``active`` = False, and keep their state);
* each moving slot takes its metrics (non-finite check), and at an evaluation or checkpoint step is evaluated and
  saved exactly as unpacked; a slot that stops (target, dead, non-finite loss, end of budget) writes its
  ``result.json`` at once and is masked from then on.
* **Pruning.** Before each chunk the loop looks for ``<workdir>/stop_request`` (:data:`STOP_FILE`) in each live
  slot, written by the study driver when the search prunes that trial (:mod:`lamb_lars.study.running.pack_executor`);
  the slot then stops without a result, as a killed unpacked trial does, and the file is removed to say so.

Resume: each slot restores its own newest intact checkpoint. A kill between two slots' saves leaves them at
different steps; the slots behind catch up (the others masked) and the pack goes on in step, every slot bit-exact
with its uninterrupted run (tests/test_packed.py).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import os
import time
from typing import Any, Optional, Sequence

import jax
import numpy as np

from lamb_lars import input_pipeline
from lamb_lars.common import cli_errors, io_utils, run_files, workdir_lock
from lamb_lars.optim import lr_table
from lamb_lars.train import (
  checkpoint,
  evaluation,
  feeders,
  loop as loop_lib,
  mesh as mesh_lib,
  metric_writers,
  pack_compat,
  packed_step,
  parallel,
  run_identity,
  run_optimizer,
  run_plan,
  trainer,
  validate,
)

ConfigError = run_plan.ConfigError
STOP_FILE = "stop_request"  # the driver asks a packed slot to stop (pruned); the pack removes it when it has


class _NoBar:
  """A slot's progress 'bar': packs log one line per evaluation per slot, no bars."""

  step: Optional[int] = None

  def update(self, n: int, loss: float = 0.0) -> None:  # noqa: ARG002
    self.step = (self.step or 0) + n

  def close(self) -> None:
    pass


class _SlotView:
  """What slot ``index``'s :class:`loop._Run` sees of the pack as its feeder: the pack's compile time and its own
  slice of the stacked state (the canonical, checkpointed and evaluated form)."""

  def __init__(self, pack: "_Pack", index: int):
    self.pack, self.index = pack, index

  @property
  def compile_time(self) -> float:
    return self.pack.compile_time

  def to_canonical(self, state: Any) -> Any:
    return packed_step.slot(state, self.index)


@dataclasses.dataclass(eq=False)
class _Slot:
  """One trial of the pack: its config, plan, workdir, optimizer, checkpointer, writer and host run."""

  config: Any
  plan: run_plan.RunPlan
  workdir: str
  tx: Any
  lrs: np.ndarray
  tx_index: int = 0
  ckpt: Any = None
  writer: Any = None
  run: Any = None
  state: Any = None
  step_key: Any = None
  meta: dict = dataclasses.field(default_factory=dict)
  result: Optional[dict] = None
  pruned: bool = False
  w0: Any = None  # the initial parameters on the host, when diagnostics.dist_from_init


class _Pack:
  """The compiled packed chunk, its inputs on the devices, and its compile time."""

  def __init__(self, config, plan, mesh, model, opts, txs):
    ds = config.dataset
    preprocess = lambda im, lab, rng: input_pipeline.preprocess(
      im, lab, dataset=ds, train=True, rng=rng, scaling=config.input_scaling
    )
    self.plan, self.mesh = plan, mesh
    self.fn = packed_step.make_packed_chunk(model, txs, opts, preprocess, mesh)
    self.data = mesh_lib.put_replicated(mesh, input_pipeline.load_arrays(config, "train"))
    self._compiled: dict = {}
    self.compile_time = 0.0

  def call(self, states, idx: np.ndarray, keys, tx_index, active: np.ndarray):
    """Runs ``idx.shape[1]`` steps of every active slot; (new states, metrics ``[S, k]`` on the host)."""
    args = (
      states,
      *self.data,
      mesh_lib.put_global_batch(self.mesh, idx, batch_axis=2),
      keys,
      tx_index,
      mesh_lib.put_replicated(self.mesh, active),
    )
    size = idx.shape[1]
    compiled = self._compiled.get(size)
    if compiled is None:
      t0 = time.perf_counter()
      compiled = self._compiled[size] = self.fn.lower(*args).compile()
      self.compile_time += time.perf_counter() - t0
    states, metrics = compiled(*args)
    return states, {k: np.asarray(v) for k, v in jax.device_get(metrics).items()}


def _slot_log(workdir: str):
  name = os.path.basename(os.path.normpath(workdir))
  return lambda msg: trainer._log(f"[{name}] {msg}")  # noqa: SLF001  (the trainer's one log line writer)


def check_compatible(configs: Sequence[Any], plans: Sequence[run_plan.RunPlan]) -> None:
  """ConfigError (one sentence) unless ``configs`` can be slots of one program (:mod:`lamb_lars.train.pack_compat`)."""
  for i, c in enumerate(configs):
    why = pack_compat.unpackable(c)
    if why:
      raise ConfigError(f"trial {i} of the pack cannot be packed ({why}); run it unpacked (--pack=1).")
    if pack_compat.pack_key(c) != pack_compat.pack_key(configs[0]):
      raise ConfigError(
        f"trial {i} of the pack differs from trial 0 outside the per-slot keys (seed, stop, optimizer numbers); "
        f"pack only trials with the same model, batch size, data and durations."
      )
  same = lambda p: dataclasses.replace(p, warmup_steps=0)
  if any(same(p) != same(plans[0]) for p in plans):
    raise ConfigError("the trials of a pack must have the same run plan (steps, evaluations, checkpoints, devices).")


def train_pack(
  configs: Sequence[Any], workdirs: Sequence[str], hparams: Optional[Sequence[Optional[dict]]] = None
) -> list[dict]:
  """Trains ``configs[i]`` in ``workdirs[i]`` as slot i of one packed program; resumes each slot from its own
  checkpoints; returns each slot's result record (a slot pruned by the driver: ``{"status": "pruned"}``, with no
  ``result.json``). Everything checkable is checked first, as by ``train_and_evaluate``."""
  if len(configs) != len(workdirs) or not configs:
    raise ConfigError("a pack needs one workdir per trial config, and at least one trial.")
  devices = jax.devices()[: configs[0].num_devices or None]
  info = validate.dataset_info(configs[0])
  plans = [validate.validate(c, devices, info) for c in configs]
  check_compatible(configs, plans)
  hparams = list(hparams or [None] * len(configs))
  results: list[Optional[dict]] = [None] * len(configs)
  with contextlib.ExitStack() as locks:
    todo = []
    for i, (c, wdir) in enumerate(zip(configs, workdirs)):
      io_utils.makedirs(wdir)
      locks.enter_context(workdir_lock.hold(wdir))
      run_identity.check(c, wdir)
      results[i] = trainer.recorded_result(wdir)
      if results[i] is None:
        run_identity.record(c, wdir)
        todo.append(i)
    if todo:
      input_pipeline.prepare(configs[0])
      out = _train(
        [configs[i] for i in todo],
        [workdirs[i] for i in todo],
        info,
        devices,
        [plans[i] for i in todo],
        [hparams[i] for i in todo],
      )
      for i, r in zip(todo, out):
        results[i] = r
  return [r if r is not None else {"status": "pruned"} for r in results]


def _init_slots(configs, workdirs, plans, mesh, model, info) -> list[_Slot]:
  """Each slot's optimizer (one transformation per distinct :func:`pack_compat.optimizer_key`), initial state and
  step key, as the unpacked trainer makes them."""
  slots: list[_Slot] = []
  keys: dict[str, int] = {}
  for c, wdir, plan in zip(configs, workdirs, plans):
    tx, lr_fn = run_optimizer.create_optimizer(c, plan)
    s = _Slot(c, plan, wdir, tx, lr_table.tabulate(lr_fn, plan.total_steps))
    s.tx_index = keys.setdefault(pack_compat.optimizer_key(c), len(keys))
    s.state, s.step_key = trainer.create_train_state(
      model, tx, mesh, info.image_shape, c.seed, s.lrs if c.optimizer.lr_table else None
    )
    if c.diagnostics.dist_from_init:
      s.w0 = jax.device_get(s.state.params)
    slots.append(s)
  packed_step.check_same_structure([s.state for s in slots], "train states (parameters and optimizer state)")
  return slots


def _train(configs, workdirs, info, devices, plans, hparams) -> list[dict]:
  config, plan = configs[0], plans[0]
  mesh = mesh_lib.make_mesh(plan.bn.group_devices, devices)
  strategy = parallel.make(config, mesh)
  model, opts = trainer.build_model(config, plan, strategy), trainer.step_options(config, plan)
  slots = _init_slots(configs, workdirs, plans, mesh, model, info)
  txs = {s.tx_index: s.tx for s in slots}
  pack = _Pack(config, plan, mesh, model, opts, [txs[i] for i in range(len(txs))])
  evaluator = evaluation.Evaluator(config, mesh, model, opts)
  try:
    for i, s in enumerate(slots):
      _open_slot(s, i, pack, evaluator, hparams[i], len(slots))
    _loop(pack, slots)
  finally:
    for s in slots:
      _close_slot(s, None)
  return [s.result if s.result is not None else {"status": "pruned"} for s in slots]


def _open_slot(s: _Slot, index: int, pack: _Pack, evaluator, hparams, size: int) -> None:
  """Restores the slot's newest checkpoint and builds its host run (:class:`loop._Run`)."""
  s.ckpt = checkpoint.Checkpointer(s.workdir, keep=s.config.keep_checkpoints)
  s.state, s.meta = trainer.restore(s.ckpt, s.state, s.workdir, s.plan)
  step = int(jax.device_get(s.state.step))
  log = _slot_log(s.workdir)
  s.writer = metric_writers.MetricWriter(
    s.workdir,
    enabled=True,
    resume_step=step,
    log=log,
    hparams=hparams or metric_writers.config_hparams(s.config),
    saved_rows=s.meta.get("rows"),
  )
  slot_eval = evaluator
  if s.w0 is not None:  # the evaluator's one compiled step, with this slot's initial weights
    slot_eval = copy.copy(evaluator)
    slot_eval.w0 = s.w0
  parts = loop_lib.Parts(
    config=s.config,
    plan=s.plan,
    lrs=s.lrs,
    step_key=s.step_key,
    log=log,
    evaluate=slot_eval,
    feeder=_SlotView(pack, index),
  )
  s.run = loop_lib._Run(parts, step, s.meta, s.writer, _NoBar())  # noqa: SLF001  (the unpacked loop's host run)
  s.run.packed = {"size": size, "slot": index}
  s.run.start_step = step


def _close_slot(s: _Slot, result: Optional[dict]) -> None:
  """Closes the slot's checkpointer and writer; with ``result``, writes its ``result.json``."""
  if s.ckpt is not None:
    s.ckpt.close()
    s.ckpt = None
  if s.writer is not None:
    s.writer.close(result["status"] if result else None)
    s.writer = None
  if result is not None:
    s.result = result
    io_utils.write_json_atomic(os.path.join(s.workdir, run_files.RESULT_FILE), result)


def _finish(s: _Slot, state: Any) -> None:
  """The slot's result, once it has stopped or trained its budget."""
  run = s.run
  if run.last_row is None and run.stop is None and run.start_step == s.plan.total_steps:
    run.final_row(state)
  _close_slot(s, {**run.result(), "packed": run.packed})


def _prune_requested(s: _Slot) -> bool:
  path = os.path.join(s.workdir, STOP_FILE)
  if not io_utils.exists(path):
    return False
  s.run.parts.log(f"Stopped at step {s.run.step}: the search pruned this trial.")
  s.pruned = True
  _close_slot(s, None)
  io_utils.remove(path)
  return True


def _indices(s: _Slot, step: int, k: int) -> np.ndarray:
  return feeders._step_indices(s.config.seed, step, k, s.plan)  # noqa: SLF001  (the one data order)


def _loop(pack: _Pack, slots: list[_Slot]) -> None:
  states = jax.device_put(packed_step.stack([s.state for s in slots]), mesh_lib.replicated(pack.mesh))
  for s in slots:
    s.state = None  # the stacked copy is the state now
  keys = mesh_lib.put_replicated(pack.mesh, np.stack([np.asarray(jax.device_get(s.step_key)) for s in slots]))
  tx_index = mesh_lib.put_replicated(pack.mesh, np.array([s.tx_index for s in slots], np.int32))
  loop_lib.RUNNING.append(True)
  try:
    while True:
      if loop_lib.STOP_REQUEST:
        raise cli_errors.Terminated() if loop_lib.STOP_REQUEST[0] == 15 else KeyboardInterrupt()
      for s in slots:
        if s.result is None and not s.pruned and s.run.stop is None and s.run.step >= s.plan.total_steps:
          _finish(s, states)
      live = [s for s in slots if s.result is None and not s.pruned and not _prune_requested(s)]
      if not live:
        return
      step = min(s.run.step for s in live)
      moving = [s for s in live if s.run.step == step]
      states = _chunk(pack, slots, moving, states, keys, tx_index, step)
  finally:
    loop_lib.RUNNING.clear()


def _chunk(pack: _Pack, slots: list[_Slot], moving: list[_Slot], states, keys, tx_index, step: int):
  """One chunk of the moving slots from ``step``: dispatched in calls of ``steps_per_call``, then each moving slot's
  host work (metrics, evaluation, checkpoint, stop)."""
  plan = pack.plan
  k = plan.chunk_size(step)
  active = np.array([s in moving for s in slots])
  idx = np.stack([_indices(s, step, k) if s in moving else _indices(moving[0], step, k) for s in slots])
  parts = []
  for a, size in feeders._pieces(k, plan.steps_per_call):  # noqa: SLF001
    states, m = pack.call(states, idx[:, a : a + size], keys, tx_index, active)
    parts.append(m)
  metrics = {key: np.concatenate([p[key] for p in parts], axis=1) for key in parts[0]}
  for s in moving:
    i = slots.index(s)
    s.run.time_chunk(step, k)
    s.run.take(step, {key: v[i] for key, v in metrics.items()})
    if s.run.stop is None and loop_lib.at_boundary(s.run.step, plan):
      s.run.at_boundary(states, s.ckpt)
    if s.run.stop is not None:
      _finish(s, states)
  return states
