"""``config.optimizer`` → an optax transformation and its LR schedule: the config glue, kept apart from the aliases.

One downward path: the config is validated (:func:`validate_config`, one sentence per bad key), its trust-ratio keys
become one :class:`~lamb_lars.optim.trust_ratio.TrustRatio` (:func:`trust_from_config`), and that value goes to the
alias in :mod:`lamb_lars.optim.optimizers` that the config names. The keys and their defaults are
``lamb_lars/configs/optimizer.py``.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Optional, cast

import optax

from lamb_lars.errors import ConfigError
from lamb_lars.optim import base_directions as lw
from lamb_lars.optim import lr_table, masks, optimizers, schedules, tf_lars
from lamb_lars.optim import trust_ratio as tr

NAMES = optimizers.NAMES


def _bad(key: str, allowed: str, value: Any) -> ConfigError:
  return ConfigError(f"config.optimizer.{key} must be {allowed}; got {value!r}.")


def _check_pair(cfg: Any, key: str) -> None:
  v = cfg[key]
  ok = v is None or (
    isinstance(v, (tuple, list))
    and (len(v) == 0 or (len(v) == 2 and all(b is None or isinstance(b, (int, float)) for b in v)))
  )
  if ok and v and None not in v:
    ok = 0 <= v[0] <= v[1]
  if not ok:
    raise _bad(key, "() or a pair '(lower,upper)' with 0 <= lower <= upper (either may be None)", v)


def learning_rate(cfg: Any) -> Any:
  """The peak LR at ``base_batch_size``: ``cfg.learning_rate``, or when it is None the optimizer's own default
  ``cfg.default_learning_rate[cfg.name]`` (``lamb_lars/configs/optimizer.py``), so a changed ``name`` brings its own
  LR."""
  if cfg["learning_rate"] is not None:
    return cfg["learning_rate"]
  table = cfg.get("default_learning_rate") or {}
  return table[cfg["name"]] if cfg["name"] in table else None


def validate_config(cfg: Any) -> None:
  """Raises :class:`~lamb_lars.errors.ConfigError` naming the first bad key of ``config.optimizer`` and its allowed
  values (the solver and its numbers, the trust ratio, ``lars_update``, then ``schedule``)."""
  _check_solver(cfg)
  _check_trust(cfg)
  _check_lars_update(cfg)
  _check_schedule(cfg.schedule)


def _check_solver(cfg: Any) -> None:
  if cfg.name not in NAMES:
    raise _bad("name", f"one of {NAMES}", cfg.name)
  if cfg.lr_scaling not in schedules.SCALING_RULES:
    raise _bad("lr_scaling", f"one of {schedules.SCALING_RULES}", cfg.lr_scaling)
  for key, value in (("learning_rate", learning_rate(cfg)), ("base_batch_size", cfg.base_batch_size)):
    if value is None or not value > 0:
      raise _bad(key, "> 0", value)
  for key in ("momentum", "b1", "b2", "rms_decay"):
    if not 0.0 <= cfg[key] < 1.0:
      raise _bad(key, "in [0, 1)", cfg[key])
  for key in ("weight_decay", "trust_eps", "zero_norm_ratio", "eps_root", "initial_accumulator_value"):
    if not cfg[key] >= 0:
      raise _bad(key, ">= 0", cfg[key])
  if cfg.eps is not None and not cfg.eps >= 0:
    raise _bad("eps", "None or >= 0", cfg.eps)


def _check_trust(cfg: Any) -> None:
  if cfg.trust_coefficient is not None and not cfg.trust_coefficient > 0:
    raise _bad("trust_coefficient", "None or > 0", cfg.trust_coefficient)
  if cfg.denominator not in (None,) + tr.DENOMINATORS:
    raise _bad("denominator", f"None or one of {tr.DENOMINATORS}", cfg.denominator)
  _check_pair(cfg, "ratio_bounds")
  _check_pair(cfg, "phi_bounds")
  if cfg.layerwise and cfg.name in ("lars", "lamb"):
    raise _bad("layerwise", "False for lars and lamb, which are layer-wise already", cfg.layerwise)
  adaptive = cfg.layerwise or cfg.name in ("lars", "lamb")
  if not adaptive:
    for key in ("ratio_bounds", "phi_bounds"):
      if cfg[key]:
        raise _bad(key, "() unless layerwise=True or name is lars or lamb", cfg[key])
  for key in ("weight_decay_mask", "adaptation_mask", "stacked_regex"):
    try:
      masks.compile_patterns(cfg[key])
    except ValueError:
      raise _bad(key, "a valid Python regular expression ('' for none)", cfg[key]) from None


def _check_lars_update(cfg: Any) -> None:
  if cfg.lars_update not in ("velocity", "tf"):
    raise _bad("lars_update", "'velocity' or 'tf'", cfg.lars_update)
  if cfg.lars_update != "tf":
    return
  if cfg.name != "lars":
    raise _bad("lars_update", "'velocity' unless name='lars'", cfg.lars_update)
  ignored = [
    k
    for k in (
      "nesterov",
      "ratio_bounds",
      "phi_bounds",
      "weight_decay_mask",
      "adaptation_mask",
      "stacked_regex",
      "track_stats",
    )
    if cfg[k]
  ]
  if cfg.denominator not in (None, "paper"):
    ignored.append("denominator")
  if ignored:
    raise _bad(
      "lars_update",
      f"'velocity' when {', '.join(ignored)} is set (the authors' TF LARS applies the "
      "paper-denominator ratio to every variable; set those keys to their empty values)",
      "tf",
    )


def _check_schedule(s: Any) -> None:
  if s.decay not in schedules.DECAYS:
    raise _bad("schedule.decay", f"one of {schedules.DECAYS}", s.decay)
  if s.warmup_shape not in schedules.WARMUP_SHAPES:
    raise _bad("schedule.warmup_shape", f"one of {schedules.WARMUP_SHAPES}", s.warmup_shape)
  if s.cycle_shape not in schedules.CYCLE_SHAPES:
    raise _bad("schedule.cycle_shape", f"one of {schedules.CYCLE_SHAPES}", s.cycle_shape)
  for key in ("end_lr_factor", "warmup_init_factor"):
    if not 0.0 <= s[key] <= 1.0:
      raise _bad(f"schedule.{key}", "in [0, 1]", s[key])
  if not s.poly_power > 0:
    raise _bad("schedule.poly_power", "> 0", s.poly_power)
  if not 0.0 < s.step_factor <= 1.0:
    raise _bad("schedule.step_factor", "in (0, 1]", s.step_factor)
  if s.decay == "step" and not (
    s.step_boundaries_epochs and all(isinstance(b, (int, float)) and b >= 0 for b in s.step_boundaries_epochs)
  ):
    raise _bad(
      "schedule.step_boundaries_epochs", "a non-empty tuple of epochs >= 0 when decay='step'", s.step_boundaries_epochs
    )
  if s.decay == "tf_poly" and (s.warmup_shape != "linear" or s.warmup_init_factor != 0.0):
    raise _bad(
      "schedule.warmup_shape",
      "'linear' with warmup_init_factor=0 when decay='tf_poly' (its warmup is TensorFlow's η·t/W)",
      (s.warmup_shape, s.warmup_init_factor),
    )
  if s.decay != "tf_poly" and s.end_lr >= 0:
    raise _bad("schedule.end_lr", "< 0 (unset) unless decay='tf_poly'; other decays take end_lr_factor", s.end_lr)
  if s.decay == "cyclical" and not any(s[f"cycle_{u}"] > 0 for u in ("steps", "epochs", "examples", "percent")):
    raise _bad(
      "schedule.cycle_steps",
      "> 0 (or cycle_epochs / cycle_examples / cycle_percent) when decay='cyclical'",
      s.cycle_steps,
    )


def _pair(v: Any) -> Optional[tuple]:
  return tuple(v) if v else None


def trust_from_config(cfg: Any) -> tr.TrustRatio:
  """The trust-ratio settings of ``cfg``; where ``trust_coefficient`` or ``denominator`` is None, the named alias's
  own (:data:`~lamb_lars.optim.optimizers.LARS_TRUST`: η = 0.001, 'paper'; otherwise η = 1, 'optax')."""
  alias = optimizers.LARS_TRUST if cfg.name == "lars" else optimizers.LAYERWISE_TRUST
  tc = cfg.trust_coefficient
  return tr.TrustRatio(
    trust_coefficient=alias.trust_coefficient if tc is None else tc,
    eps=cfg.trust_eps,
    denominator=cfg.denominator or alias.denominator,
    weight_decay=cfg.weight_decay,
    weight_decay_mask=masks.exclude_mask(cfg.weight_decay_mask),
    adaptation_mask=masks.exclude_mask(cfg.adaptation_mask),
    ratio_bounds=_pair(cfg.ratio_bounds),
    phi_bounds=_pair(cfg.phi_bounds),
    zero_norm_ratio=cfg.zero_norm_ratio,
    stacked_mask=masks.include_mask(cfg.stacked_regex),
    track_stats=cfg.track_stats,
  )


def optimizer_from_config(cfg: Any, learning_rate: optax.ScalarOrSchedule) -> optax.GradientTransformation:
  """The transformation named by ``cfg`` (``config.optimizer``), with the given learning rate or schedule."""
  trust = trust_from_config(cfg)
  if cfg.name == "lars" and cfg.lars_update == "tf":
    return tf_lars.tf_lars(
      learning_rate,
      momentum=cfg.momentum,
      weight_decay=cfg.weight_decay,
      trust_coefficient=trust.trust_coefficient,
      eps=cfg.trust_eps,
    )
  if cfg.name == "lars":
    return optimizers.lars(learning_rate, momentum=cfg.momentum, nesterov=cfg.nesterov, trust=trust)
  if cfg.name == "lamb":
    eps = {} if cfg.eps is None else {"eps": cfg.eps}  # None: lamb's own ε
    return optimizers.lamb(
      learning_rate,
      b1=cfg.b1,
      b2=cfg.b2,
      eps_root=cfg.eps_root,
      bias_correction=cfg.bias_correction,
      trust=trust,
      **eps,
    )
  base_name = "adam" if cfg.name == "adamw" else cfg.name
  if base_name == "momentum" and cfg.nesterov:
    base_name = "nesterov"
  base_kwargs = dict(
    momentum=cfg.momentum,
    b1=cfg.b1,
    b2=cfg.b2,
    eps=cfg.eps,
    eps_root=cfg.eps_root,
    initial_accumulator_value=cfg.initial_accumulator_value,
    rms_decay=cfg.rms_decay,
    bias_correction=cfg.bias_correction,
  )
  if cfg.layerwise:
    return lw.layerwise(lw.base_direction(base_name, **base_kwargs), learning_rate, trust)
  name = "adamw" if cfg.name == "adamw" else base_name
  return optimizers.original(
    name, learning_rate, weight_decay=cfg.weight_decay, weight_decay_mask=trust.weight_decay_mask, **base_kwargs
  )


def create_optimizer(
  cfg: Any,
  *,
  total_steps: int,
  num_train: int,
  batch_size: int,
  reschedule: Optional[Callable[[optax.Schedule], optax.Schedule]] = None,
  run_steps: Optional[int] = None,
) -> tuple[optax.GradientTransformation, optax.Schedule]:
  """Builds the transformation (incl. scaled LR schedule) and returns it with the LR schedule for logging.

  peak = scale_learning_rate(learning_rate, batch_size, base_batch_size, lr_scaling); the schedule is
  :func:`lamb_lars.optim.schedules.create_schedule` of ``cfg.schedule`` (durations: :mod:`lamb_lars.common.durations`);
  gradient clipping by global norm comes first. With ``cfg.lr_table`` the schedule is tabulated over the
  ``total_steps`` updates and carried in the state (:mod:`lamb_lars.optim.lr_table`), so the compiled update does not
  depend on the LR values. ``reschedule`` maps the schedule onto the run's update count when the two differ (a
  batch schedule or a branch, :mod:`lamb_lars.train.run_optimizer`); the run then has ``run_steps`` updates.
  """
  validate_config(cfg)
  peak = schedules.scale_learning_rate(learning_rate(cfg), batch_size, cfg.base_batch_size, cfg.lr_scaling)
  schedule = schedules.create_schedule(
    cfg.schedule, peak, total_steps=total_steps, num_train=num_train, batch_size=batch_size
  )
  if reschedule is not None:
    schedule, total_steps = reschedule(schedule), cast(int, run_steps)

  def make_tx(lr: optax.ScalarOrSchedule) -> optax.GradientTransformation:
    tx = optimizer_from_config(cfg, lr)
    if cfg.gradient_clip_norm > 0 and math.isfinite(cfg.gradient_clip_norm):
      tx = optax.chain(optax.clip_by_global_norm(cfg.gradient_clip_norm), tx)
    return tx

  if cfg.lr_table:
    return lr_table.with_lr_table(make_tx, lr_table.tabulate(schedule, total_steps)), schedule
  return make_tx(schedule), schedule
