"""Per-example cross-check of the gradient noise scale: per-example gradients by ``vmap``, small models only.

From n per-example gradients g_i (each the gradient of one example's loss) the unbiased estimates are

  ḡ = (1/n) Σ_i g_i,   tr Σ ≈ Σ_i |g_i − ḡ|² / (n − 1) = (Σ_i |g_i|² − n|ḡ|²) / (n − 1)   (sample covariance),
  |G|² ≈ |ḡ|² − tr Σ / n                                                   (E|ḡ|² = |G|² + tr Σ / n),

and B_simple = tr Σ / |G|² (McCandlish et al. 2018 §2.2). With a diagonal preconditioner P (an adaptive optimizer's,
:mod:`lamb_lars.optim.preconditioner`) the same formulas on P·g_i give tr(PΣPᵀ) and |PG|², so B_precond. This is
the direct estimator that the two-batch-size one of :mod:`lamb_lars.train.noise_scale` must agree with; it needs one
backward pass per example (``jax.vmap(jax.grad(...))``), hence small models only. Batch norm couples the examples
of a batch, so a model with BN has no per-example gradients: ``diagnostics.noise_scale_per_example`` is refused
for it (:func:`lamb_lars.train.run_plan.diagnostics_plan`).
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np

from lamb_lars import input_pipeline
from lamb_lars.optim import preconditioner as precond_lib
from lamb_lars.train import feeders, noise_scale, train_step as ts

CHUNK = 256  # examples per vmap call: bounds the memory of the per-example gradients to CHUNK × parameters


def per_example_grads(grad_one: Callable, params: Any, xs: Any, ys: Any, *extra: Any) -> Any:
  """``jax.vmap`` of ``grad_one(params, x, y, *extra)`` over the leading axis of xs, ys (and of each ``extra``):
  a pytree of per-example gradients, each leaf with a leading axis n."""
  return jax.vmap(grad_one, in_axes=(None, 0, 0) + (0,) * len(extra))(params, xs, ys, *extra)


def moment_sums(grads: Any, p: Optional[Any] = None) -> tuple[Any, Any]:
  """(Σ_i g_i, Σ_i |g_i|²) over the leading axis of per-example ``grads`` (of P·g_i when ``p`` is given)."""
  if p is not None:
    grads = jax.tree.map(lambda g, q: g * q[None], grads, p)
  return jax.tree.map(lambda g: jnp.sum(g, axis=0), grads), noise_scale.sq_norm(grads)


def unbiased(n: int, sum_g: Any, sum_sq: Any) -> tuple[float, float]:
  """(|G|², tr Σ) from n examples' Σ g_i and Σ |g_i|² (module docstring), in float64."""
  mean_sq = sum(float(np.sum(np.square(np.asarray(x, np.float64) / n))) for x in jax.tree.leaves(sum_g))
  trace = (float(sum_sq) - n * mean_sq) / (n - 1)
  return mean_sq - trace / n, trace


def b_ratio(g2: float, trace: float) -> float:
  return trace / g2 if g2 > 0 else float("nan")


class PerExample:
  """B_simple and B_precond from the per-example gradients of one training batch, at each evaluation: the batch of
  the step just taken (the run's own data order), preprocessed as for training, at the current weights; P from the
  optimizer state the next update will use. Gives ``noise_scale_per_example`` and
  ``noise_scale_precond_per_example`` (= the former when the optimizer has no preconditioner)."""

  def __init__(self, config: Any, plan: Any, model: Any, opts: ts.StepOptions):
    self.config, self.plan = config, plan
    self.pre = precond_lib.from_config(config.optimizer)
    self.gather = input_pipeline.train_gatherer(config)
    grad_fn = ts.make_grad_fn(model, opts)

    def grad_one(params, x, y, rng):
      return grad_fn(params, {}, x[None], y[None], rng)[1]

    def sums(params, opt_state, step, images, labels, key):
      x = input_pipeline.preprocess(
        images, labels, dataset=config.dataset, train=True, rng=key, scaling=config.input_scaling
      )
      grads = per_example_grads(grad_one, params, x, labels, jax.random.split(key, labels.shape[0]))
      out = moment_sums(grads)
      if self.pre is None:
        return out, out
      p, _ = precond_lib.diagonal(self.pre, opt_state, step)
      return out, moment_sums(grads, p)

    self.sums = jax.jit(sums)

  def __call__(self, state: Any) -> dict:
    step = int(jax.device_get(state.step))
    params, opt_state = jax.device_get((state.params, state.opt_state))
    idx = feeders.batch_indices(self.config.seed, max(step - 1, 0), self.plan)
    key = jax.random.fold_in(jax.random.PRNGKey(self.config.seed), step)
    totals: list = [None, None]
    for a in range(0, idx.size, CHUNK):
      images, labels = self.gather(idx[a : a + CHUNK])
      parts = jax.device_get(self.sums(params, opt_state, step, images, labels, jax.random.fold_in(key, a)))
      for j, (sg, ss) in enumerate(parts):
        sg = jax.tree.map(lambda x: np.asarray(x, np.float64), sg)
        prev = totals[j]
        totals[j] = (sg, float(ss)) if prev is None else (jax.tree.map(np.add, prev[0], sg), prev[1] + float(ss))
    (sg, ss), (sg_p, ss_p) = totals
    precond = b_ratio(*unbiased(idx.size, sg_p, ss_p)) if self.pre is None or step > 0 else float("nan")
    return {"noise_scale_per_example": b_ratio(*unbiased(idx.size, sg, ss)), "noise_scale_precond_per_example": precond}
