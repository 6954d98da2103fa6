"""The run's optimizer: ``config.optimizer`` on the run's clock.

A fixed-batch run reads its LR schedule at its update count. A run with a batch schedule reads the base run's
schedule (at ``batch_size``) at the examples seen, times the stage's LR multiplier
(:func:`lamb_lars.train.batch_schedule.reschedule`). A branch (:mod:`lamb_lars.train.init_from`) trains at one
constant LR. Either way the optimizer's state has the same structure (the schedule is a function of the count in
every case), so a branch can take over its reference's optimizer state as it is.
"""

from __future__ import annotations

from typing import Any, Optional

import ml_collections

from lamb_lars.optim import optimizer_config
from lamb_lars.train import batch_schedule, run_plan


def create_optimizer(config: ml_collections.ConfigDict, plan: run_plan.RunPlan, constant_lr: Optional[float] = None):
  """(transformation, LR schedule of the run's update count); trust-ratio statistics are kept when the diagnostics
  log them. ``constant_lr``: a branch's LR, replacing the schedule."""
  opt = config.optimizer.copy_and_resolve_references()
  opt.track_stats = bool(opt.track_stats or config.diagnostics.trust_ratios)
  if constant_lr is not None:
    wrap: Any = lambda base: lambda count: constant_lr + 0.0 * count
  elif len(plan.stages) > 1 or plan.decide_every_steps > 0:  # a batch schedule, fixed or adaptive
    wrap = batch_schedule.reschedule(plan.stages, plan.batch_size)
  else:
    wrap = None
  return optimizer_config.create_optimizer(
    opt,
    total_steps=plan.base_total_steps,
    num_train=plan.num_train,
    batch_size=plan.batch_size,
    reschedule=wrap,
    run_steps=plan.total_steps,
  )
