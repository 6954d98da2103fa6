"""Exact evaluation of the canonical train state on the test split and, with a hold-out, the validation split.

Each split is walked in padded, masked batches (``input_pipeline.eval_batches``), so every example counts exactly
once. One evaluation gives ``eval_loss``, ``eval_accuracy``, ``eval_examples`` on the test split and, when
``config.validation_split`` > 0, ``validation_loss``, ``validation_accuracy``, ``validation_examples`` on the
hold-out: You et al. 2020 (Def. 2.1) report test accuracy and tune on validation loss (MNIST 55K/5K/10K).
Optional diagnostics at each evaluation: distance from the initial weights, per-layer trust-ratio statistics and the
per-example noise scales (:mod:`lamb_lars.train.per_example`).
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import jax
import numpy as np

from lamb_lars import input_pipeline
from lamb_lars.train import mesh as mesh_lib
from lamb_lars.train import train_step as ts
from lamb_lars.optim import trust_ratio

PREFIX = {"test": "eval", "validation": "validation"}


class Evaluator:
  """Evaluates a train state on every split the config asks for; the eval step compiles on first use."""

  def __init__(
    self,
    config: Any,
    mesh: Any,
    model,
    opts: ts.StepOptions,
    initial_params: Optional[Any] = None,
    per_example: Optional[Callable[[Any], dict]] = None,
  ):
    ds = config.dataset
    preprocess = lambda im, lab, rng: input_pipeline.preprocess(
      im, lab, dataset=ds, train=False, rng=rng, scaling=config.input_scaling
    )
    self.config, self.mesh = config, mesh
    self.step = ts.make_eval_step(model, opts, preprocess)
    self.splits = ("test", "validation") if input_pipeline.has_validation(config) else ("test",)
    self.w0 = initial_params  # host copy, only when config.diagnostics.dist_from_init
    self.per_example = per_example  # per_example.PerExample, only when config.diagnostics.noise_scale_per_example
    self.in_flight = mesh_lib.InFlight(mesh.devices.flat)  # bounded dispatch (mesh.max_in_flight)

  def evaluate_split(self, state, split: str) -> dict:
    cfg, totals = self.config, None
    for batch in input_pipeline.eval_batches(
      cfg,
      batch_size=cfg.eval_batch_size,
      split=split,
      process_index=jax.process_index(),
      process_count=jax.process_count(),
    ):
      arrays = mesh_lib.put_global_batch(self.mesh, (batch["image"], batch["label"], batch["mask"]))
      self.in_flight.wait_for_room()
      out = self.step(state.params, state.batch_stats, *arrays)
      self.in_flight.add(out)
      totals = out if totals is None else totals + out
    loss_sum, correct, count = np.asarray(jax.device_get(totals), np.float64)
    p = PREFIX[split]
    return {f"{p}_loss": loss_sum / count, f"{p}_accuracy": correct / count, f"{p}_examples": int(count)}

  def __call__(self, state) -> dict:
    """Metrics of every split plus the diagnostics the config turns on."""
    row = {}
    for split in self.splits:
      row.update(self.evaluate_split(state, split))
    diag = self.config.diagnostics
    if diag.dist_from_init:
      row.update(dist_from_init(jax.device_get(state.params), self.w0))
    if diag.trust_ratios:
      stats = jax.device_get(trust_ratio.trust_ratio_stats(state.opt_state))
      row.update({f"trust_ratio/{k}": float(np.asarray(v)) for k, v in stats.items()})
    if self.per_example is not None:
      row.update(self.per_example(state))
    return row


def dist_from_init(params: Any, w0: Any) -> dict:
  """‖w − w0‖ in total (``dist_from_init``) and per layer (``dist_from_init/<path>``), in float64."""
  sq = jax.tree.map(lambda w, w0_: float(np.sum((np.asarray(w, np.float64) - w0_) ** 2)), params, w0)
  flat = {"/".join(str(getattr(k, "key", k)) for k in path): v for path, v in jax.tree_util.tree_leaves_with_path(sq)}
  return {
    "dist_from_init": float(np.sqrt(sum(flat.values()))),
    **{f"dist_from_init/{k}": float(np.sqrt(v)) for k, v in flat.items()},
  }
