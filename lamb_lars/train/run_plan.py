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
from lamb_lars import models
from lamb_lars.errors import ConfigError  # the typed config error, re-exported here for the trainer's callers


_CHOICES = {
    "dataset": ("mnist", "cifar10", "imagenet2012", "synthetic"),
    "data_source": ("offline", "tfds"),
    "data_on_device": ("auto", "yes", "no"),
    "dtype": ("float32", "bfloat16"),
    "parallelism": ("jit", "pmap"),
    "input_scaling": ("standardize", "unit"),
}


@dataclasses.dataclass(frozen=True)
class DiagnosticsPlan:
  """Which per-device gradient diagnostics the train step computes (see :func:`diagnostics_plan`)."""
  noise_scale: bool = False       # B_simple from |G_small|² (per device) and |G_big|² (global)
  signal_to_noise: bool = False   # E_d‖g∥‖ / E_d‖g⊥‖ over the per-device gradients


@dataclasses.dataclass(frozen=True)
class RunPlan:
  num_devices: int
  batch_size: int
  num_microbatches: int
  per_device_batch: int        # per micro-batch
  num_train: int               # N training examples (after any validation hold-out)
  batches_per_epoch: int       # the data order: N // B whole batches per data epoch, each a fresh permutation
  total_steps: int             # durations (lamb_lars/common/durations.py) count an epoch as N / B steps, rounded up
  warmup_steps: int            # of the learning-rate schedule
  eval_every_steps: int
  checkpoint_every_steps: int
  steps_per_fetch: int         # optimizer steps between two metric fetches of the host (a chunk)
  steps_per_call: int          # optimizer steps in one compiled call (lax.scan, unrolled)
  bn: bn_groups.BNPlan
  diagnostics: DiagnosticsPlan = DiagnosticsPlan()

  def epoch_of(self, step: int) -> float:
    """Epochs as examples seen / training examples."""
    return step * self.batch_size / self.num_train

  def next_boundary(self, step: int) -> int:
    """The next step at which the loop must return to the host: an eval, a checkpoint, the end."""
    nxt = [self.total_steps]
    for every in (self.eval_every_steps, self.checkpoint_every_steps):
      if every > 0:
        nxt.append((step // every + 1) * every)
    return min(n for n in nxt if n > step)

  def chunk_size(self, step: int) -> int:
    return min(self.steps_per_fetch, self.next_boundary(step) - step)


def _check_choice(config: Any, key: str) -> None:
  value = config[key]
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
          f"BN groups within a device.")
  samples = plan.num_devices * plan.num_microbatches
  if ns is True and samples < 2:
    raise ConfigError("config.diagnostics.noise_scale=True needs at least 2 gradient samples per step (devices × "
                      "num_microbatches: small- vs whole-batch gradients); set config.num_microbatches=2, or "
                      "diagnostics.noise_scale to 'auto' or False.")
  return DiagnosticsPlan(noise_scale=bool(ns) and samples > 1 and not coupled,
                         signal_to_noise=snr and plan.num_devices > 1)


def num_microbatches(config: Any, num_devices: int) -> int:
  """``config.num_microbatches``, or, with ``config.microbatch_size`` = m > 0, the count that makes each micro-batch
  the largest divisor of the per-device batch that is ≤ m — refused when that divisor is m/2 or less (e.g. a
  per-device batch of 2 × a prime), since tiny micro-batches would be silently slow."""
  k, m = int(config.num_microbatches), int(config.microbatch_size)
  if m <= 0:
    return k
  if k != 1:
    raise ConfigError(f"config.num_microbatches={k} and config.microbatch_size={m} both set the accumulation; "
                      f"set one of them (the other to 1 or 0).")
  b = int(config.batch_size)
  if num_devices < 1 or b < 1 or b % num_devices:
    return 1  # make_plan's own checks say what is wrong
  per_device = b // num_devices
  if per_device <= m:
    return 1
  size = max(d for d in range(1, m + 1) if per_device % d == 0)
  if 2 * size <= m:
    raise ConfigError(f"config.microbatch_size={m}: no divisor of the per-device batch {per_device} lies in "
                      f"({m // 2}, {m}]; choose another microbatch_size or set config.num_microbatches.")
  return per_device // size


def _batch_split(config: Any, *, num_train: int, num_devices: int) -> tuple[int, int, int]:
  """(global batch B, micro-batches k, per-device micro-batch B/(D·k)), checked against the data and devices."""
  if num_devices < 1:
    raise ConfigError(f"config.num_devices asks for {num_devices} devices; at least one is needed.")
  b, k = int(config.batch_size), num_microbatches(config, num_devices)
  if b < 1:
    raise ConfigError(f"config.batch_size={b} must be a positive number of examples.")
  if k < 1:
    raise ConfigError(f"config.num_microbatches={k} must be at least 1.")
  if b % (num_devices * k):
    raise ConfigError(f"config.batch_size={b} is not divisible by {num_devices} devices × {k} micro-batches "
                      f"(= {num_devices * k}); choose a multiple of {num_devices * k}.")
  if b > num_train:
    raise ConfigError(f"config.batch_size={b} exceeds the {num_train} training examples (full batch is "
                      f"{num_train}).")
  if config.eval_batch_size < 1 or config.eval_batch_size % num_devices:
    raise ConfigError(f"config.eval_batch_size={config.eval_batch_size} must be a positive multiple of the "
                      f"{num_devices} devices.")
  return b, k, b // (num_devices * k)


def _steps(name: str, cfg: Any, **kw) -> int:
  """:func:`durations.steps` with its one-sentence ValueError typed as a ConfigError."""
  try:
    return durations.steps(name, cfg, **kw)
  except ValueError as e:
    raise ConfigError(str(e)) from None


def make_plan(config: Any, *, num_train: int, num_devices: int) -> RunPlan:
  """Validates ``config`` against the data and the devices and derives the step counts and BN grouping."""
  for key in _CHOICES:
    _check_choice(config, key)
  b, k, per_device = _batch_split(config, num_train=num_train, num_devices=num_devices)
  if not 0.0 <= config.label_smoothing < 1.0:
    raise ConfigError(f"config.label_smoothing={config.label_smoothing} must be in [0, 1).")
  try:
    bn = bn_groups.plan_bn_groups(per_device_batch=per_device, num_devices=num_devices, mode=config.bn.mode,
                                  group_devices=int(config.bn.group_devices),
                                  examples_per_group=int(config.bn.examples_per_group),
                                  ghost_batch_size=int(config.bn.ghost_batch_size))
  except ValueError as e:
    raise ConfigError(str(e)) from None
  kw = dict(num_train=num_train, batch_size=b)
  total = _steps("total", config, **kw)
  kw["total_steps"] = total
  plan = RunPlan(num_devices=num_devices, batch_size=b, num_microbatches=k, per_device_batch=per_device,
                 num_train=num_train, batches_per_epoch=num_train // b, total_steps=total,
                 warmup_steps=_steps("warmup", config.optimizer.schedule, default=0, **kw),
                 eval_every_steps=_steps("eval_every", config, default=0, **kw),
                 checkpoint_every_steps=_steps("checkpoint_every", config, default=0, **kw),
                 steps_per_fetch=steps_per_fetch(config, num_train // b), steps_per_call=steps_per_call(config),
                 bn=bn)
  return dataclasses.replace(plan, diagnostics=diagnostics_plan(config, plan))


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
