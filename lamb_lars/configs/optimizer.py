"""The ``config.optimizer`` subtree: every key with its default (data only; ``lamb_lars.optim.optimizer_config``
validates it).

Command:  python train.py --config=lamb_lars/configs/default.py --workdir=/tmp/run --config.optimizer.name=lars
(this file is not a run config: ``lamb_lars/configs/default.py`` includes it as ``config.optimizer``.)
Formulas: lamb_lars/optim/optimizers.py, lamb_lars/optim/schedules.py; durations: lamb_lars/common/durations.py
(epochs round up).
"""
import ml_collections
from ml_collections import config_dict

DEFAULT_EXCLUDE = r"(^|/)(bias|scale|offset)$"  # biases and norm scale/offset (= lamb_lars.optim.masks.DEFAULT_EXCLUDE)


def get_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.name = "momentum"                # sgd | momentum | nesterov | adagrad | rmsprop | adam | adamw | lars | lamb
  c.learning_rate = config_dict.placeholder(float)  # peak LR at base_batch_size; None: default_learning_rate[name],
                                     # so that --config.optimizer.name=lamb never runs at a momentum LR
  # The peak LR at base_batch_size of each optimizer when learning_rate is None (a run config sets its own).
  c.default_learning_rate = ml_collections.ConfigDict(dict(
      sgd=0.1, momentum=0.1, nesterov=0.1, lars=0.1, adagrad=0.01, rmsprop=0.001, adam=0.001, adamw=0.001,
      lamb=0.0005))
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
  c.lars_update = "velocity"         # lars: 'velocity' (v ← m·v + lr·r·(g+βw); w ← w − v) | 'tf' (the authors' TF
                                     # LARSOptimizer: v ← m·v + g; w ← w − lr·r·v, β only in the ratio, no masks;
                                     # lamb_lars/optim/tf_lars.py)
  c.phi_bounds = ()                  # LAMB φ(‖w‖) = clip(‖w‖, lo, hi); () = identity
  c.zero_norm_ratio = 1.0            # ratio where ‖w‖ or the direction norm is 0
  c.weight_decay_mask = DEFAULT_EXCLUDE  # regex of param paths EXCLUDED from weight decay ('' = none)
  c.adaptation_mask = DEFAULT_EXCLUDE    # regex of param paths EXCLUDED from trust ratios ('' = none)
  c.stacked_regex = ""               # regex of stacked (scanned) leaves: one ratio per slice of axis 0
  c.gradient_clip_norm = 0.0         # clip by global norm before everything; <= 0: off
  c.track_stats = False              # keep per-leaf trust-ratio statistics in the optimizer state
  c.lr_table = False                 # carry the LR schedule as a per-step table in the optimizer state, so trials
                                     # differing only in LR/warmup share a compiled step (lamb_lars/optim/lr_table.py)
  s = c.schedule = ml_collections.ConfigDict()
  s.warmup_steps = -1                # one of warmup_{steps,epochs,examples,percent}; negative = unset
  s.warmup_epochs = -1.0
  s.warmup_examples = -1
  s.warmup_percent = -1.0
  s.warmup_shape = "linear"          # 'linear' | 'cosine'
  s.allow_long_warmup = False        # a warmup longer than training is refused unless this is True
  s.warmup_init_factor = 0.0         # f0: lr(t) = η·(f0 + (1 − f0)·(t+1)/W) in warmup; first update η/W at f0 = 0
  s.decay = "cosine"                 # 'constant' | 'cosine' | 'poly' | 'step' | 'cyclical' | 'tf_poly' (the authors'
                                     # TF schedule: warmup from 0 over unrounded steps, poly decay at the global step)
  s.end_lr_factor = 0.0              # final (cosine, poly) or cycle-low (cyclical) LR, fraction of the peak
  s.end_lr = -1.0                    # 'tf_poly' only: absolute final LR (TF end_learning_rate); < 0: end_lr_factor·η
  s.poly_power = 2.0
  s.step_boundaries_epochs = ()      # 'step': epochs at which the LR is multiplied by step_factor
  s.step_factor = 0.1
  s.cycle_steps = -1                 # 'cyclical': one of cycle_{steps,epochs,examples,percent}
  s.cycle_epochs = -1.0
  s.cycle_examples = -1
  s.cycle_percent = -1.0
  s.cycle_shape = "triangular"       # 'triangular' | 'cosine'
  return c
