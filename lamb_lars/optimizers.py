"""Optimizer aliases (LARS, LAMB, layer-wise SGD / AdaGrad / RMSprop / Adam) and the ``config.optimizer`` glue.

Every alias is a short ``optax.chain`` over :mod:`lamb_lars.layerwise` and :mod:`lamb_lars.trust_ratio`, whose
docstrings hold the formulas. Masks default to excluding biases and BatchNorm / LayerNorm scale and offset from
both weight decay and trust ratios (:data:`lamb_lars.masks.DEFAULT_EXCLUDE`); pass ``True`` to apply everywhere.

Weight decay β: the layer-wise optimizers, LARS, LAMB and AdamW add it *decoupled*, βw next to the direction
(for LARS: to the gradient, which is the same thing). The "original" sgd / momentum / nesterov / adagrad / rmsprop /
adam add it as L2, βw into the gradient before the base optimizer.
"""
from __future__ import annotations

import math
from typing import Any, Optional

import ml_collections
import optax
from ml_collections import config_dict

from lamb_lars import layerwise as lw
from lamb_lars import masks, schedules
from lamb_lars import trust_ratio as tr

NAMES = ("sgd", "momentum", "nesterov", "adagrad", "rmsprop", "adam", "adamw", "lars", "lamb")
DEFAULT_MASK = masks.exclude_mask(masks.DEFAULT_EXCLUDE)


def lars(learning_rate: optax.ScalarOrSchedule, *, momentum: float = 0.9, nesterov: bool = False,
         weight_decay: float = 0.0, trust_coefficient: float = 0.001, eps: float = 0.0,
         denominator: str = "paper", ratio_bounds: tr.Bounds = None, phi_bounds: tr.Bounds = None,
         weight_decay_mask: Any = DEFAULT_MASK, adaptation_mask: Any = DEFAULT_MASK, zero_norm_ratio: float = 1.0,
         stacked_mask: Any = False, track_stats: bool = False) -> optax.GradientTransformation:
  """LARS (You, Gitman & Ginsburg 2017, "Large Batch Training of Convolutional Networks"; TF-TPU, flax.optim).

  denominator='paper':  r = η‖w‖ / (‖g‖ + β‖w‖ + ε)     (bounded by η/β)
  denominator='optax':  r = η‖w‖ / (‖g + βw‖ + ε)       (``optax.lars``; differs near g ≈ −βw)
  u = lr·r·(g + βw);  v ← m·v + u;  w ← w − v
  nesterov=True:  v ← m·v + u;  w ← w − (u + m·v)       (Sutskever et al. 2013 form, as ``optax.trace``)
  r = 1 where ‖w‖ or the gradient norm is 0; optional clip into ``ratio_bounds``; ``phi_bounds`` replaces ‖w‖ in
  the numerator by clip(‖w‖, lo, hi) as in LAMB.

  With denominator='optax' and both masks ``True`` this equals ``optax.lars(learning_rate, weight_decay,
  trust_coefficient=η, eps=ε, momentum=m, nesterov=...)`` bit for bit.
  """
  return optax.chain(
      tr.scale_by_trust_ratio(
          trust_coefficient, eps, denominator=denominator, weight_decay=weight_decay,
          weight_decay_mask=weight_decay_mask, adaptation_mask=adaptation_mask, ratio_bounds=ratio_bounds,
          phi_bounds=phi_bounds, zero_norm_ratio=zero_norm_ratio, stacked_mask=stacked_mask,
          track_stats=track_stats, learning_rate=learning_rate),
      optax.scale_by_learning_rate(learning_rate),
      optax.trace(decay=momentum, nesterov=nesterov))


def lamb(learning_rate: optax.ScalarOrSchedule, *, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-6,
         eps_root: float = 0.0, weight_decay: float = 0.0, bias_correction: bool = True,
         phi_bounds: tr.Bounds = None, ratio_bounds: tr.Bounds = None, trust_coefficient: float = 1.0,
         trust_eps: float = 0.0, denominator: str = "optax", weight_decay_mask: Any = DEFAULT_MASK,
         adaptation_mask: Any = DEFAULT_MASK, zero_norm_ratio: float = 1.0, stacked_mask: Any = False,
         track_stats: bool = False) -> optax.GradientTransformation:
  """LAMB (You et al. 2019, "Large Batch Optimization for Deep Learning: Training BERT in 76 minutes").

  m ← b1·m + (1−b1)·g;  v ← b2·v + (1−b2)·g²;  m̂ = m/(1−b1ᵗ), v̂ = v/(1−b2ᵗ) (bias correction on by default)
  r = m̂ / (sqrt(v̂ + ε_root) + ε);  d = r + λw (decoupled weight decay, masked)
  w ← w − lr · φ(‖w‖)/‖d‖ · d,  φ(z) = clip(z, φ_lower, φ_upper) (identity by default); ratio 1 where a norm is 0.

  With the defaults and both masks ``True`` this equals ``optax.lamb(learning_rate, b1, b2, eps, eps_root,
  weight_decay)`` bit for bit.
  """
  base = lw.scale_by_adam(b1=b1, b2=b2, eps=eps, eps_root=eps_root, bias_correction=bias_correction)
  return lw.layerwise(
      base, learning_rate, trust_coefficient=trust_coefficient, eps=trust_eps, denominator=denominator,
      weight_decay=weight_decay, weight_decay_mask=weight_decay_mask, adaptation_mask=adaptation_mask,
      ratio_bounds=ratio_bounds, phi_bounds=phi_bounds, zero_norm_ratio=zero_norm_ratio,
      stacked_mask=stacked_mask, track_stats=track_stats)


def _layerwise_defaults(trust: dict[str, Any]) -> dict[str, Any]:
  trust.setdefault("weight_decay_mask", DEFAULT_MASK)
  trust.setdefault("adaptation_mask", DEFAULT_MASK)
  return trust


def layerwise_sgd(learning_rate: optax.ScalarOrSchedule, *, momentum: float = 0.0, nesterov: bool = False,
                  **trust: Any) -> optax.GradientTransformation:
  """Layer-wise SGD: d = g (momentum 0) or the (Nesterov) momentum buffer, then w ← w − lr·r·(d + βw).

  ``trust``: keyword arguments of :func:`lamb_lars.layerwise.layerwise` (trust_coefficient, eps, ratio_bounds, ...).
  """
  name = "sgd" if momentum == 0.0 else ("nesterov" if nesterov else "momentum")
  return lw.layerwise(lw.base_direction(name, momentum=momentum), learning_rate, **_layerwise_defaults(trust))


def layerwise_adagrad(learning_rate: optax.ScalarOrSchedule, *, initial_accumulator_value: float = 0.1,
                      eps: float = 1e-7, **trust: Any) -> optax.GradientTransformation:
  """Layer-wise AdaGrad: d = g / sqrt(G + ε), G ← G + g², then w ← w − lr·r·(d + βw)."""
  base = lw.base_direction("adagrad", initial_accumulator_value=initial_accumulator_value, eps=eps)
  return lw.layerwise(base, learning_rate, **_layerwise_defaults(trust))


def layerwise_rmsprop(learning_rate: optax.ScalarOrSchedule, *, decay: float = 0.9, eps: float = 1e-8,
                      **trust: Any) -> optax.GradientTransformation:
  """Layer-wise RMSprop: d = g / sqrt(ν + ε), ν ← ρν + (1−ρ)g², then w ← w − lr·r·(d + βw)."""
  base = lw.base_direction("rmsprop", rms_decay=decay, eps=eps)
  return lw.layerwise(base, learning_rate, **_layerwise_defaults(trust))


def layerwise_adam(learning_rate: optax.ScalarOrSchedule, *, b1: float = 0.9, b2: float = 0.999,
                   eps: float = 1e-8, eps_root: float = 0.0, bias_correction: bool = True,
                   **trust: Any) -> optax.GradientTransformation:
  """Layer-wise Adam: d = m̂/(sqrt(v̂ + ε_root) + ε), then w ← w − lr·r·(d + βw); with φ = id this is LAMB."""
  base = lw.scale_by_adam(b1=b1, b2=b2, eps=eps, eps_root=eps_root, bias_correction=bias_correction)
  return lw.layerwise(base, learning_rate, **_layerwise_defaults(trust))


def original(name: str, learning_rate: optax.ScalarOrSchedule, *, weight_decay: float = 0.0,
             weight_decay_mask: Any = DEFAULT_MASK, **base_kwargs: Any) -> optax.GradientTransformation:
  """The "original" solver ``name`` without trust ratio: w ← w − lr·base(g + βw) (L2 weight decay, masked).

  'adamw' is Adam with decoupled weight decay (Loshchilov & Hutter 2019): w ← w − lr·(m̂/(sqrt(v̂)+ε) + βw).
  ``base_kwargs`` go to :func:`lamb_lars.layerwise.base_direction`.
  """
  if name == "adamw":
    base = lw.base_direction("adam", **base_kwargs)
    return optax.chain(base, optax.add_decayed_weights(weight_decay, weight_decay_mask),
                       optax.scale_by_learning_rate(learning_rate))
  parts = [optax.add_decayed_weights(weight_decay, weight_decay_mask)] if weight_decay else []
  parts += [lw.base_direction(name, **base_kwargs), optax.scale_by_learning_rate(learning_rate)]
  return optax.chain(*parts)


# ----------------------------------------------------------------------------------------------- config glue


def default_config() -> ml_collections.ConfigDict:
  """The ``config.optimizer`` subtree with every key and its default; every key can be overridden when locked."""
  c = ml_collections.ConfigDict()
  c.name = "momentum"                # one of NAMES
  c.learning_rate = 0.1              # peak LR at base_batch_size
  c.lr_scaling = "linear"            # 'none' | 'linear' (η0·B/B0) | 'sqrt' (η0·sqrt(B/B0))
  c.base_batch_size = 256            # B0
  c.momentum = 0.9                   # momentum / nesterov / lars (and layer-wise sgd-family)
  c.nesterov = False                 # Nesterov form for 'momentum' and 'lars'
  c.b1 = 0.9                         # adam / adamw / lamb
  c.b2 = 0.999
  c.eps = config_dict.placeholder(float)  # adaptive eps; None: adam 1e-8, lamb 1e-6, adagrad 1e-7, rmsprop 1e-8
  c.eps_root = 0.0
  c.bias_correction = True           # adam-family bias correction (LAMB: on by default)
  c.rms_decay = 0.9                  # rmsprop ρ
  c.initial_accumulator_value = 0.1  # adagrad G₀
  c.weight_decay = 0.0               # β (L2 for original solvers, decoupled for layer-wise / lars / lamb / adamw)
  c.layerwise = False                # Table 3 "+ layer-wise": trust ratio on the base direction
  c.ratio_bounds = ()                # "+ bound ratio": (r_min, r_max); () = unbounded; either may be None
  c.trust_coefficient = config_dict.placeholder(float)  # η; None: 0.001 for lars, 1.0 otherwise
  c.trust_eps = 0.0                  # ε in the ratio's denominator
  c.denominator = config_dict.placeholder(str)  # 'paper' | 'optax'; None: 'paper' for lars, 'optax' otherwise
  c.phi_bounds = ()                  # LAMB φ(‖w‖) = clip(‖w‖, lo, hi); () = identity
  c.zero_norm_ratio = 1.0            # ratio where ‖w‖ or the direction norm is 0
  c.weight_decay_mask = masks.DEFAULT_EXCLUDE  # regex of param paths EXCLUDED from weight decay ('' = none)
  c.adaptation_mask = masks.DEFAULT_EXCLUDE    # regex of param paths EXCLUDED from trust ratios ('' = none)
  c.stacked_regex = ""               # regex of stacked (scanned) leaves: one ratio per slice of axis 0
  c.gradient_clip_norm = 0.0         # clip by global norm before everything; <= 0: off
  c.track_stats = False              # keep per-leaf trust-ratio statistics in the optimizer state
  s = c.schedule = ml_collections.ConfigDict()
  s.warmup_steps = -1                # one of warmup_{steps,epochs,examples,percent}; negative = unset
  s.warmup_epochs = -1.0
  s.warmup_examples = -1
  s.warmup_percent = -1.0
  s.warmup_shape = "linear"          # 'linear' | 'cosine'
  s.warmup_init_factor = 0.0         # LR at step 0, as a fraction of the peak
  s.decay = "cosine"                 # 'constant' | 'cosine' | 'poly' | 'step' | 'cyclical'
  s.end_lr_factor = 0.0              # final (cosine, poly) or cycle-low (cyclical) LR, fraction of the peak
  s.poly_power = 2.0
  s.step_boundaries_epochs = ()      # 'step': epochs at which the LR is multiplied by step_factor
  s.step_factor = 0.1
  s.cycle_steps = -1                 # 'cyclical': one of cycle_{steps,epochs,examples,percent}
  s.cycle_epochs = -1.0
  s.cycle_examples = -1
  s.cycle_percent = -1.0
  s.cycle_shape = "triangular"       # 'triangular' | 'cosine'
  return c


def _bad(key: str, allowed: str, value: Any) -> ValueError:
  return ValueError(f"config.optimizer.{key} must be {allowed}; got {value!r}.")


def _check_pair(cfg: Any, key: str) -> None:
  v = cfg[key]
  ok = v is None or (isinstance(v, (tuple, list)) and (
      len(v) == 0 or (len(v) == 2 and all(b is None or isinstance(b, (int, float)) for b in v))))
  if ok and v and None not in v:
    ok = 0 <= v[0] <= v[1]
  if not ok:
    raise _bad(key, "() or a pair '(lower,upper)' with 0 <= lower <= upper (either may be None)", v)


def validate_config(cfg: Any) -> None:
  """Raises ValueError naming the first bad key of ``config.optimizer`` and its allowed values."""
  if cfg.name not in NAMES:
    raise _bad("name", f"one of {NAMES}", cfg.name)
  if cfg.lr_scaling not in schedules.SCALING_RULES:
    raise _bad("lr_scaling", f"one of {schedules.SCALING_RULES}", cfg.lr_scaling)
  for key in ("learning_rate", "base_batch_size"):
    if not cfg[key] > 0:
      raise _bad(key, "> 0", cfg[key])
  for key in ("momentum", "b1", "b2", "rms_decay"):
    if not 0.0 <= cfg[key] < 1.0:
      raise _bad(key, "in [0, 1)", cfg[key])
  for key in ("weight_decay", "trust_eps", "zero_norm_ratio", "eps_root", "initial_accumulator_value"):
    if not cfg[key] >= 0:
      raise _bad(key, ">= 0", cfg[key])
  if cfg.eps is not None and not cfg.eps >= 0:
    raise _bad("eps", "None or >= 0", cfg.eps)
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
  s = cfg.schedule
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
  if s.decay == "step" and not (s.step_boundaries_epochs and all(
      isinstance(b, (int, float)) and b >= 0 for b in s.step_boundaries_epochs)):
    raise _bad("schedule.step_boundaries_epochs", "a non-empty tuple of epochs >= 0 when decay='step'",
               s.step_boundaries_epochs)
  if s.decay == "cyclical" and not any(s[f"cycle_{u}"] > 0 for u in ("steps", "epochs", "examples", "percent")):
    raise _bad("schedule.cycle_steps", "> 0 (or cycle_epochs / cycle_examples / cycle_percent) when "
               "decay='cyclical'", s.cycle_steps)


def _pair(v: Any) -> Optional[tuple]:
  return tuple(v) if v else None


def optimizer_from_config(cfg: Any, learning_rate: optax.ScalarOrSchedule) -> optax.GradientTransformation:
  """The transformation named by ``cfg`` (``config.optimizer``), with the given learning rate or schedule."""
  wd_mask = masks.exclude_mask(cfg.weight_decay_mask)
  trust = dict(
      weight_decay=cfg.weight_decay, weight_decay_mask=wd_mask,
      adaptation_mask=masks.exclude_mask(cfg.adaptation_mask), ratio_bounds=_pair(cfg.ratio_bounds),
      zero_norm_ratio=cfg.zero_norm_ratio, stacked_mask=masks.include_mask(cfg.stacked_regex),
      track_stats=cfg.track_stats, denominator=cfg.denominator or ("paper" if cfg.name == "lars" else "optax"))
  tc = cfg.trust_coefficient
  if cfg.name == "lars":
    return lars(learning_rate, momentum=cfg.momentum, nesterov=cfg.nesterov, eps=cfg.trust_eps,
                phi_bounds=_pair(cfg.phi_bounds), trust_coefficient=0.001 if tc is None else tc, **trust)
  if cfg.name == "lamb":
    return lamb(learning_rate, b1=cfg.b1, b2=cfg.b2, eps=1e-6 if cfg.eps is None else cfg.eps,
                eps_root=cfg.eps_root, bias_correction=cfg.bias_correction, phi_bounds=_pair(cfg.phi_bounds),
                trust_coefficient=1.0 if tc is None else tc, trust_eps=cfg.trust_eps, **trust)
  base_name = "adam" if cfg.name == "adamw" else cfg.name
  if base_name == "momentum" and cfg.nesterov:
    base_name = "nesterov"
  base_kwargs = dict(momentum=cfg.momentum, b1=cfg.b1, b2=cfg.b2, eps=cfg.eps, eps_root=cfg.eps_root,
                     initial_accumulator_value=cfg.initial_accumulator_value, rms_decay=cfg.rms_decay,
                     bias_correction=cfg.bias_correction)
  if cfg.layerwise:
    return lw.layerwise(lw.base_direction(base_name, **base_kwargs), learning_rate, phi_bounds=_pair(cfg.phi_bounds),
                        trust_coefficient=1.0 if tc is None else tc, eps=cfg.trust_eps, **trust)
  name = "adamw" if cfg.name == "adamw" else base_name
  return original(name, learning_rate, weight_decay=cfg.weight_decay, weight_decay_mask=wd_mask, **base_kwargs)


def create_optimizer(cfg: Any, *, total_steps: int, steps_per_epoch: float, batch_size: int
                     ) -> tuple[optax.GradientTransformation, optax.Schedule]:
  """Builds the transformation (incl. scaled LR schedule) and returns it with the LR schedule for logging.

  peak = scale_learning_rate(learning_rate, batch_size, base_batch_size, lr_scaling); the schedule is
  :func:`lamb_lars.schedules.create_schedule` of ``cfg.schedule``; gradient clipping by global norm comes first.
  """
  validate_config(cfg)
  peak = schedules.scale_learning_rate(cfg.learning_rate, batch_size, cfg.base_batch_size, cfg.lr_scaling)
  schedule = schedules.create_schedule(cfg.schedule, peak, total_steps=total_steps,
                                       steps_per_epoch=steps_per_epoch, batch_size=batch_size)
  tx = optimizer_from_config(cfg, schedule)
  if cfg.gradient_clip_norm > 0 and math.isfinite(cfg.gradient_clip_norm):
    tx = optax.chain(optax.clip_by_global_norm(cfg.gradient_clip_norm), tx)
  return tx, schedule
