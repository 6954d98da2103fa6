"""Everything about a run that can be decided — and rejected — before anything is compiled.

Each failure is a :class:`ConfigError` whose message is one sentence naming the config key and the fix. Every
duration (total, warmup, eval and checkpoint cadence) is turned into steps by :func:`lamb_lars.common.durations.steps`
(one precedence rule, round up). A chunk — the steps between two metric fetches of the host — runs as compiled calls
of ``steps_per_call`` optimizer steps each.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from lamb_lars.models import bn_groups
from lamb_lars.common import durations
from lamb_lars.train import adaptive_batch, batch_schedule
from lamb_lars import models
from lamb_lars.optim import preconditioner
from lamb_lars.errors import ConfigError  # the typed config error, re-exported here for the trainer's callers


_CHOICES = {
  "dataset": ("mnist", "cifar10", "imagenet2012", "synthetic"),
  "data_source": ("offline", "tfds"),
  "data_on_device": ("auto", "yes", "no"),
  "dataset_in_memory": ("auto", "yes", "no"),
  "dtype": ("float32", "bfloat16"),
  "parallelism": ("jit", "pmap"),
  "input_scaling": ("standardize", "unit"),
  "data_order": ("batches", "examples"),
  "microbatch_loop": ("scan", "unrolled", "host"),
}


@dataclasses.dataclass(frozen=True)
class DiagnosticsPlan:
  """Which per-device gradient diagnostics the train step computes (see :func:`diagnostics_plan`)."""

  noise_scale: bool = False  # B_simple from |G_small|² (per device) and |G_big|² (global)
  noise_scale_precond: bool = False  # the step measures |P·g|² (an adaptive optimizer; else B_precond = B_simple)
  noise_scale_per_example: bool = False  # B_simple, B_precond from per-example gradients at each evaluation
  signal_to_noise: bool = False  # E_d‖g∥‖ / E_d‖g⊥‖ over the per-device gradients


@dataclasses.dataclass(frozen=True)
class StagePlan(batch_schedule.Stage):
  """A stage of the batch schedule (:mod:`lamb_lars.train.batch_schedule`) with its own split and BN groups."""

  num_microbatches: int = 1
  per_device_batch: int = 0
  bn: bn_groups.BNPlan = None  # type: ignore[assignment]  # every plan sets it


@dataclasses.dataclass(frozen=True)
class RunPlan:
  num_devices: int
  batch_size: int
  num_microbatches: int
  per_device_batch: int  # per micro-batch
  num_train: int  # N training examples (after any validation hold-out)
  batches_per_epoch: int  # the data order: N // B whole batches per data epoch, each a fresh permutation
  total_steps: int  # durations (lamb_lars/common/durations.py) count an epoch as N / B steps, rounded up
  warmup_steps: int  # of the learning-rate schedule
  eval_every_steps: int
  checkpoint_every_steps: int
  steps_per_fetch: int  # optimizer steps between two metric fetches of the host (a chunk)
  steps_per_call: int  # optimizer steps in one compiled call (lax.scan, unrolled)
  bn: bn_groups.BNPlan
  diagnostics: DiagnosticsPlan = DiagnosticsPlan()
  stages: tuple = ()  # StagePlan per stage of config.batch_schedule; stage 0 is the fields above
  data_order: str = "batches"  # 'batches': per data epoch N // B whole batches; 'examples': one stream (feeders.py)
  data_start: int = 0  # the stream position of this run's first example (a branch continues its reference)
  base_total_steps: int = 0  # the run's length in steps of the base batch (the LR schedule's clock)
  branch: Any = None  # a branch's init_from.Reference (lamb_lars/train/init_from.py), else None
  base_warmup_steps: int = 0  # the LR warmup in steps of the base batch
  decide_every_steps: int = 0  # batch_schedule='adaptive': a decision every this many base-batch steps, else 0
  adaptive: Any = None  # batch_schedule='adaptive': the controller's adaptive_batch.Settings (with its ladder)

  def examples(self, step: int) -> int:
    """Examples this run has seen after ``step`` steps."""
    return batch_schedule.examples(self.stages, step)

  def epoch_of(self, step: int) -> float:
    """Epochs as examples seen / training examples."""
    return self.examples(step) / self.num_train

  def stage_at(self, step: int) -> StagePlan:
    """The stage of the update from ``step`` to ``step + 1``."""
    return self.stages[batch_schedule.index(self.stages, step)]

  def due(self, every_steps: int, step: int) -> bool:
    """Whether a periodic action every ``every_steps`` base-batch steps (0: only at the end) falls on ``step``: when
    the examples seen cross a multiple of ``every_steps · B0`` (for a fixed batch, ``step % every_steps == 0``)."""
    period = every_steps * self.batch_size
    return step == self.total_steps or (
      every_steps > 0 and step > 0 and self.examples(step) // period > self.examples(step - 1) // period
    )

  def next_boundary(self, step: int) -> int:
    """The next step at which the loop must return to the host: an eval, a checkpoint, a new stage, the end."""
    nxt = [self.total_steps] + [s.start_step for s in self.stages if s.start_step > step]
    for every in (self.eval_every_steps, self.checkpoint_every_steps, self.decide_every_steps):
      if every > 0:
        period = every * self.batch_size
        nxt.append(batch_schedule.step_reaching(self.stages, (self.examples(step) // period + 1) * period))
    return min(n for n in nxt if n > step)

  def chunk_size(self, step: int) -> int:
    return min(self.steps_per_fetch, self.next_boundary(step) - step)


def _check_choice(config: Any, key: str) -> None:
  value = config.get(key, "auto") if key == "dataset_in_memory" else config[key]  # a config from before the key
  if key == "dataset" and isinstance(value, str) and (value.startswith("tfds:") or ":" in value):
    return  # a researcher's dataset (lamb_lars/input_pipeline/user_data.py), checked when it is read
  if value not in _CHOICES[key]:
    raise ConfigError(f"config.{key}={value!r} is not one of {', '.join(map(repr, _CHOICES[key]))}.")


def bn_couples_devices(config: Any, plan: RunPlan) -> bool:
  """True when a device's forward pass reads other devices' examples: BN groups span devices and the model has BN."""
  return plan.bn.group_devices > 1 and config.model not in models.MODELS_WITHOUT_BN


def diagnostics_plan(config: Any, plan: RunPlan) -> DiagnosticsPlan:
  """Decides ``diagnostics.noise_scale`` and ``diagnostics.signal_to_noise`` for this plan; the trainer only reads it.

  The noise scale needs ≥ 2 gradient samples per step, each a mean over its own examples: B_small = one micro-batch
  of one device (B/(D·k)) against B_big = B (McCandlish et al. 2018 App. A.1). Devices or micro-batches both work,
  so one device with ``num_microbatches=2`` measures it without any collective. The signal-to-noise ratio (You et
  al. 2020 §6.1) compares per-device gradients and needs ≥ 2 devices. When BN groups span devices, a device's
  gradient also depends on the other devices' examples through the pooled statistics, so neither estimates
  gradient noise: a forced-on request is refused. ``noise_scale``: ``'auto'`` (on with ≥ 2 samples and BN groups
  within a device, else off), True (on, or ConfigError), False (off). ``signal_to_noise``: True or False (off on
  one device, as before).
  """
  diag = config.diagnostics
  ns, snr = diag.noise_scale, diag.signal_to_noise
  if not (isinstance(ns, bool) or ns == "auto"):
    raise ConfigError(f"config.diagnostics.noise_scale={ns!r} is not one of 'auto', True, False.")
  if not isinstance(snr, bool):
    raise ConfigError(f"config.diagnostics.signal_to_noise={snr!r} must be True or False.")
  coupled = bn_couples_devices(config, plan)
  for key, value in (("noise_scale", ns), ("signal_to_noise", snr)):
    if value is True and coupled:
      raise ConfigError(
        f"config.diagnostics.{key}=True needs per-device gradients, but BN groups span {plan.bn.group_devices} "
        f"devices (bn.group_devices / bn.examples_per_group / bn.ghost_batch_size), so each device's gradient "
        f"depends on other devices' examples; set diagnostics.{key}=False (or 'auto' for noise_scale) or keep "
        f"BN groups within a device."
      )
  samples = plan.num_devices * plan.num_microbatches
  if ns is True and samples < 2:
    raise ConfigError(
      "config.diagnostics.noise_scale=True needs at least 2 gradient samples per step (devices × "
      "num_microbatches: small- vs whole-batch gradients); set config.num_microbatches=2, or "
      "diagnostics.noise_scale to 'auto' or False."
    )
  _check_windows(diag)
  per_example = diag.noise_scale_per_example
  if not isinstance(per_example, bool):
    raise ConfigError(f"config.diagnostics.noise_scale_per_example={per_example!r} must be True or False.")
  if per_example and config.model not in models.MODELS_WITHOUT_BN:
    raise ConfigError(
      f"config.diagnostics.noise_scale_per_example=True needs per-example gradients, but model {config.model!r} has "
      f"batch norm, which couples the examples of a batch; set it to False or use a model without BN."
    )
  on = bool(ns) and samples > 1 and not coupled
  return DiagnosticsPlan(
    noise_scale=on,
    noise_scale_precond=on and preconditioner.from_config(config.optimizer) is not None,
    noise_scale_per_example=per_example,
    signal_to_noise=snr and plan.num_devices > 1,
  )


def _check_windows(diag: Any) -> None:
  for key, low in (("noise_scale_window_steps", 1), ("noise_scale_windows", 2)):
    value = diag[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
      raise ConfigError(f"config.diagnostics.{key}={value!r} must be an integer ≥ {low}.")


def num_microbatches(config: Any, num_devices: int, batch_size: int = 0) -> int:
  """``config.num_microbatches``, or, with ``config.microbatch_size`` = m > 0, the count that makes each micro-batch
  the largest divisor of the per-device batch that is ≤ m — refused when that divisor is m/2 or less (e.g. a
  per-device batch of 2 × a prime), since tiny micro-batches would be silently slow. ``batch_size``: a stage's
  batch (default ``config.batch_size``)."""
  k, m = int(config.num_microbatches), int(config.microbatch_size)
  if m <= 0:
    return k
  if k != 1:
    raise ConfigError(
      f"config.num_microbatches={k} and config.microbatch_size={m} both set the accumulation; "
      f"set one of them (the other to 1 or 0)."
    )
  b = int(batch_size or config.batch_size)
  if num_devices < 1 or b < 1 or b % num_devices:
    return 1  # make_plan's own checks say what is wrong
  per_device = b // num_devices
  if per_device <= m:
    return 1
  size = max(d for d in range(1, m + 1) if per_device % d == 0)
  if 2 * size <= m:
    raise ConfigError(
      f"config.microbatch_size={m}: no divisor of the per-device batch {per_device} lies in "
      f"({m // 2}, {m}]; choose another microbatch_size or set config.num_microbatches."
    )
  return per_device // size


def _batch_split(config: Any, b: int, what: str, *, num_train: int, num_devices: int) -> tuple[int, int]:
  """(micro-batches k, per-device micro-batch B/(D·k)) of the global batch ``b`` (named ``what`` in errors),
  checked against the data and devices."""
  if num_devices < 1:
    raise ConfigError(f"config.num_devices asks for {num_devices} devices; at least one is needed.")
  k = num_microbatches(config, num_devices, b)
  if b < 1:
    raise ConfigError(f"{what}={b} must be a positive number of examples.")
  if k < 1:
    raise ConfigError(f"config.num_microbatches={k} must be at least 1.")
  if b % (num_devices * k):
    raise ConfigError(
      f"{what}={b} is not divisible by {num_devices} devices × {k} micro-batches "
      f"(= {num_devices * k}); choose a multiple of {num_devices * k}."
    )
  if b > num_train:
    raise ConfigError(f"{what}={b} exceeds the {num_train} training examples (full batch is {num_train}).")
  return k, b // (num_devices * k)


def _stage_plan(
  config: Any, stage: batch_schedule.Stage, *, num_train: int, num_devices: int, what: str = ""
) -> StagePlan:
  """A stage with its split and BN groups, each checked (a stage that cannot be planned is one sentence)."""
  if not what:
    what = (
      "config.batch_size" if stage.start_step == 0 else f"config.batch_schedule's batch from step {stage.start_step}"
    )
  k, per_device = _batch_split(config, stage.batch_size, what, num_train=num_train, num_devices=num_devices)
  try:
    bn = bn_groups.plan_bn_groups(
      per_device_batch=per_device,
      num_devices=num_devices,
      mode=config.bn.mode,
      group_devices=int(config.bn.group_devices),
      examples_per_group=int(config.bn.examples_per_group),
      ghost_batch_size=int(config.bn.ghost_batch_size),
    )
  except ValueError as e:
    raise ConfigError(f"{what}={stage.batch_size}: {e}") from None
  return StagePlan(**dataclasses.asdict(stage), num_microbatches=k, per_device_batch=per_device, bn=bn)


def _steps(name: str, cfg: Any, **kw) -> int:
  """:func:`durations.steps` with its one-sentence ValueError typed as a ConfigError."""
  try:
    return durations.steps(name, cfg, **kw)
  except ValueError as e:
    raise ConfigError(str(e)) from None


def _stages(config: Any, total_examples: int, *, num_train: int, num_devices: int) -> tuple:
  """The batch schedule's stages (one without a schedule), each planned; the BN groups may not change."""
  if config.batch_schedule == "adaptive":
    return (
      _stage_plan(
        config, batch_schedule.Stage(0, 0, int(config.batch_size)), num_train=num_train, num_devices=num_devices
      ),
    )
  try:
    points = batch_schedule.parse(config.batch_schedule, config.batch_schedule_unit, num_train)
    raw = batch_schedule.stages(int(config.batch_size), points, total_examples, config.batch_schedule_lr)
  except ValueError as e:
    raise ConfigError(str(e)) from None
  if points and config.data_order != "examples":
    raise ConfigError(
      "config.batch_schedule needs config.data_order='examples' (the data order of a run whose "
      "batch changes is a function of the examples seen)."
    )
  out = tuple(_stage_plan(config, s, num_train=num_train, num_devices=num_devices) for s in raw)
  if len({s.bn.group_devices for s in out}) > 1:
    raise ConfigError(
      "config.batch_schedule changes how many devices a BN group spans between stages; set "
      "bn.group_devices (or bn.mode) so that every stage keeps the same device groups."
    )
  return out


def make_plan(config: Any, *, num_train: int, num_devices: int) -> RunPlan:
  """Validates ``config`` against the data and the devices and derives the step counts, stages and BN grouping.

  Durations are counted in steps of the base batch B0 = ``config.batch_size`` (:mod:`lamb_lars.common.durations`);
  with a batch schedule they end where the examples seen reach ``steps · B0``. A branch's ``data_start`` and
  ``branch`` are set by :func:`lamb_lars.train.validate.validate` (:mod:`lamb_lars.train.init_from`)."""
  for key in _CHOICES:
    _check_choice(config, key)
  if config.microbatch_loop == "host" and config.parallelism == "pmap":
    raise ConfigError(
      "config.microbatch_loop='host' drives the micro-batches of the jit-compiled step; use "
      "parallelism='jit', or microbatch_loop='unrolled' with pmap."
    )
  if not 0.0 <= config.label_smoothing < 1.0:
    raise ConfigError(f"config.label_smoothing={config.label_smoothing} must be in [0, 1).")
  if config.eval_batch_size < 1 or config.eval_batch_size % num_devices:
    raise ConfigError(
      f"config.eval_batch_size={config.eval_batch_size} must be a positive multiple of the {num_devices} devices."
    )
  b = int(config.batch_size)
  _batch_split(config, b, "config.batch_size", num_train=num_train, num_devices=num_devices)
  kw = dict(num_train=num_train, batch_size=b)
  base_total = _steps("total", config, **kw)
  kw["total_steps"] = base_total
  base_warmup = _steps("warmup", config.optimizer.schedule, default=0, **kw)
  stages = _stages(config, base_total * b, num_train=num_train, num_devices=num_devices)
  at = lambda steps: batch_schedule.step_reaching(stages, steps * b)  # base-batch steps → this run's steps
  s0 = stages[0]
  plan = RunPlan(
    num_devices=num_devices,
    batch_size=b,
    num_microbatches=s0.num_microbatches,
    per_device_batch=s0.per_device_batch,
    num_train=num_train,
    batches_per_epoch=num_train // b,
    total_steps=at(base_total),
    warmup_steps=at(base_warmup),
    eval_every_steps=_steps("eval_every", config, default=0, **kw),
    checkpoint_every_steps=_steps("checkpoint_every", config, default=0, **kw),
    steps_per_fetch=steps_per_fetch(config, num_train // b),
    steps_per_call=steps_per_call(config),
    bn=s0.bn,
    stages=stages,
    data_order=config.data_order,
    base_total_steps=base_total,
    base_warmup_steps=base_warmup,
  )
  plan = dataclasses.replace(plan, diagnostics=diagnostics_plan(config, plan))
  return adaptive_plan(config, plan) if config.batch_schedule == "adaptive" else plan


def adaptive_plan(config: Any, plan: RunPlan) -> RunPlan:
  """``batch_schedule='adaptive'`` checked before compiling: the noise scale is measured, the data order follows the
  examples seen, the LR is a schedule (no LR table, no branch), and every ladder size can be planned with ≥ 2
  gradient samples per step. The plan gains the decision cadence and the controller's settings."""
  if config.data_order != "examples":
    raise ConfigError(
      "config.batch_schedule='adaptive' needs config.data_order='examples' (the data order of a run whose batch "
      "changes is a function of the examples seen)."
    )
  if not plan.diagnostics.noise_scale:
    raise ConfigError(
      f"config.batch_schedule='adaptive' follows the gradient noise scale, which this run cannot measure "
      f"({plan.num_devices} device(s) × {plan.num_microbatches} micro-batch(es), diagnostics.noise_scale="
      f"{config.diagnostics.noise_scale!r}); use ≥ 2 gradient samples per step (num_microbatches=2, say), "
      f"diagnostics.noise_scale='auto' and BN groups within a device."
    )
  if config.optimizer.lr_table or config.init_from_dir:
    key = "optimizer.lr_table=True" if config.optimizer.lr_table else "init_from_dir (a branch)"
    raise ConfigError(f"config.batch_schedule='adaptive' cannot be combined with config.{key}; turn one off.")
  b = plan.batch_size
  try:
    s = adaptive_batch.settings(
      config.adaptive_batch,
      optimizer_name=config.optimizer.name,
      base_batch=b,
      num_train=plan.num_train,
      multiple=plan.num_devices * (1 if int(config.microbatch_size) > 0 else int(config.num_microbatches)),
      unit=config.batch_schedule_unit,
    )
  except ValueError as e:
    raise ConfigError(str(e)) from None
  for size in s.ladder:
    what = f"config.adaptive_batch.ladder size {size}"
    stage = _stage_plan(
      config,
      batch_schedule.Stage(1, 0, size),
      num_train=plan.num_train,
      num_devices=plan.num_devices,
      what="a size of config.adaptive_batch.ladder",
    )
    if plan.num_devices * stage.num_microbatches < 2:
      raise ConfigError(f"{what} has a single gradient sample per step, so no noise scale; raise it or drop it.")
    if stage.bn.group_devices != plan.bn.group_devices:
      raise ConfigError(
        f"{what} changes how many devices a BN group spans; set bn.group_devices (or bn.mode) so that every "
        f"size keeps the same device groups."
      )
  end = plan.examples(plan.total_steps)
  if s.audit is not None and s.audit.points[-1] >= end:
    raise ConfigError(
      f"config.adaptive_batch.audit_points={config.adaptive_batch.audit_points!r} (in "
      f"{config.batch_schedule_unit}) reaches {s.audit.points[-1]:,} examples, and the run ends at {end:,}; "
      "name points inside the run."
    )
  if durations.given(config.adaptive_batch, "every") is None:
    raise ConfigError(
      "config.batch_schedule='adaptive' decides every config.adaptive_batch.every_steps, every_examples or "
      "every_epochs; set one of them to a positive duration."
    )
  every = _steps("every", config.adaptive_batch, num_train=plan.num_train, batch_size=b)
  return dataclasses.replace(plan, decide_every_steps=every, adaptive=s)


def with_stages(config: Any, plan: RunPlan, stages: Any) -> RunPlan:
  """``plan`` with the batch schedule ``stages`` (:class:`~lamb_lars.train.batch_schedule.Stage`, e.g. an adaptive
  run's, :mod:`lamb_lars.train.adaptive_batch`): each planned, the total and warmup re-counted in examples."""
  raw = (batch_schedule.Stage(s.start_step, s.start_example, s.batch_size, s.lr_multiplier) for s in stages)
  planned = tuple(_stage_plan(config, s, num_train=plan.num_train, num_devices=plan.num_devices) for s in raw)
  at = lambda steps: batch_schedule.step_reaching(planned, steps * plan.batch_size)
  return dataclasses.replace(
    plan, stages=planned, total_steps=at(plan.base_total_steps), warmup_steps=at(plan.base_warmup_steps)
  )


def steps_per_call(config: Any) -> int:
  """``config.steps_per_call``: optimizer steps unrolled into one compiled call, ≥ 1."""
  n = config.steps_per_call
  if isinstance(n, bool) or not isinstance(n, int) or n < 1:
    raise ConfigError(f"config.steps_per_call={n!r} must be an integer ≥ 1 (optimizer steps per compiled call).")
  return n


def steps_per_fetch(config: Any, batches_per_epoch: int) -> int:
  """``config.steps_per_fetch``, or for 0 (auto) up to an epoch, at most 50: long enough to amortise a fetch, short
  enough for a live progress bar."""
  n = config.steps_per_fetch
  if isinstance(n, bool) or not isinstance(n, int) or n < 0:
    raise ConfigError(f"config.steps_per_fetch={n!r} must be an integer ≥ 0 (0 = automatic).")
  return n or max(1, min(batches_per_epoch, 50))
