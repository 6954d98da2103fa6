"""The diagonal preconditioner P of an adaptive optimizer, read from its state: what the step multiplies g by.

For the preconditioned gradient noise scale (:mod:`lamb_lars.train.noise_scale`), P is the elementwise factor the
base direction applies to the gradient, from the optimizer state *before* the update (the statistics of the steps
so far, not of the gradient being measured, so that P is fixed given the past and the two-batch estimator stays
unbiased). With the state after t updates (formulas of :mod:`lamb_lars.optim.base_directions`):

  adam / adamw / lamb   P = 1 / (sqrt(v̂_t + ε_root) + ε),   v̂_t = v_t / (1 − b2ᵗ)  (v_t without bias correction)
  rmsprop               P = 1 / sqrt(ν_t + ε)
  adagrad               P = 1 / sqrt(G_t + ε) where G_t > 0, else 0
  sgd / momentum / nesterov / lars   P = I (no preconditioner: :func:`from_config` returns None)

Before the first update (t = 0) no squared-gradient statistics exist (Adam's v̂ is 0/0; RMSprop's and AdaGrad's
P is a constant times I, set by ε or G₀ rather than by the gradients), so P is marked invalid there.

What P leaves out, by choice: momentum (Adam's m̂ averages gradients over steps; P acts on this step's g), weight
decay (βw is deterministic: no noise, and not part of the loss gradient G), gradient clipping, and LAMB's / the
layer-wise optimizers' trust ratio. The trust ratio is a per-layer scalar step size, r = φ(‖w‖)/‖u‖, computed from
this step's update, so it depends on the very gradient being measured; P is the elementwise Adam (RMSprop,
AdaGrad) preconditioner only, and a layer-wise optimizer gets its base optimizer's P.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import jax
import jax.numpy as jnp
import optax

KINDS = ("adam", "rmsprop", "adagrad")
_STATE_TYPES = {"adam": optax.ScaleByAdamState, "rmsprop": optax.ScaleByRmsState, "adagrad": optax.ScaleByRssState}
_ADAM_NAMES = ("adam", "adamw", "lamb")
_LAMB_EPS = 1e-6  # lamb's own ε (lamb_lars.optim.optimizers.lamb) when config.optimizer.eps is None
_DEFAULT_EPS = {"adam": 1e-8, "rmsprop": 1e-8, "adagrad": 1e-7}  # base_directions.DEFAULT_EPS


@dataclasses.dataclass(frozen=True)
class Preconditioner:
  """Which diagonal preconditioner, with the settings its formula needs (a hashable, static value)."""

  kind: str  # one of KINDS
  eps: float
  eps_root: float = 0.0
  b2: float = 0.999
  bias_correction: bool = True


def from_config(cfg: Any) -> Optional[Preconditioner]:
  """The preconditioner of ``config.optimizer`` ``cfg``; None for the non-adaptive ones (P = I)."""
  name = cfg.name
  if name in _ADAM_NAMES:
    eps = cfg.eps if cfg.eps is not None else (_LAMB_EPS if name == "lamb" else _DEFAULT_EPS["adam"])
    return Preconditioner("adam", float(eps), float(cfg.eps_root), float(cfg.b2), bool(cfg.bias_correction))
  if name in ("rmsprop", "adagrad"):
    return Preconditioner(name, float(cfg.eps if cfg.eps is not None else _DEFAULT_EPS[name]))
  return None


def _find(opt_state: Any, kind: str) -> Any:
  state_type = _STATE_TYPES[kind]
  is_state = lambda x: isinstance(x, state_type)
  found = [s for s in jax.tree.leaves(opt_state, is_leaf=is_state) if is_state(s)]
  if len(found) != 1:
    raise ValueError(f"expected one {state_type.__name__} in the optimizer state for P ({kind}); found {len(found)}.")
  return found[0]


def diagonal(pre: Preconditioner, opt_state: Any, step: Any) -> tuple[Any, Any]:
  """(P as a pytree shaped like the parameters, whether P is defined): from the optimizer state before the update.

  ``step``: the number of updates the state has taken (used where the state keeps no count of its own).
  """
  state = _find(opt_state, pre.kind)
  f32 = lambda x: x.astype(jnp.promote_types(x.dtype, jnp.float32))
  if pre.kind == "adam":
    count = state.count
    corr = 1.0 - jnp.power(jnp.float32(pre.b2), count.astype(jnp.float32)) if pre.bias_correction else 1.0
    safe = jnp.where(count > 0, corr, 1.0)
    p = jax.tree.map(lambda v: 1.0 / (jnp.sqrt(f32(v) / safe + pre.eps_root) + pre.eps), state.nu)
    return p, count > 0
  if pre.kind == "rmsprop":
    return jax.tree.map(lambda v: jax.lax.rsqrt(f32(v) + pre.eps), state.nu), jnp.asarray(step) > 0
  p = jax.tree.map(lambda s: jnp.where(s > 0, jax.lax.rsqrt(f32(s) + pre.eps), 0.0), state.sum_of_squares)
  return p, jnp.asarray(step) > 0


def apply(p: Any, tree: Any) -> Any:
  """P ⊙ g, leaf by leaf (in float32 or wider)."""
  return jax.tree.map(lambda a, b: a * b.astype(jnp.promote_types(b.dtype, jnp.float32)), p, tree)
