"""Start a run from another run's checkpoint: the *branches* of Merrill et al. 2025 ("Critical Batch Size
Revisited: A Simple Empirical Approach to Large-Batch Language Model Training", arXiv:2505.23971, §3).

A branch takes the reference run in ``config.init_from_dir`` at its checkpoint ``init_from_{steps,examples,epochs}``
(a duration of the *reference*, converted with its batch by :mod:`lamb_lars.common.durations`; the checkpoint must
exist) and trains on from there at its own batch B:

* **State.** Its parameters, BN statistics and optimizer state are the reference's, exactly (restored into this
  run's state, whose structure must match: same model, same optimizer). The optimizer state is taken as it is,
  step counts included: momentum buffers are averages of past gradients, valid whatever the next batch is. Adam's
  second moment is kept too, although it estimates E[g²] at the reference's batch, whose noise part shrinks ∝ 1/B
  at a larger batch: it overstates it by up to the noise share and fades with time constant 1/(1−β₂) steps. We keep
  it rather than reset it (a reset with the count kept would divide by a near-zero moment; with the count reset, the
  bias correction would restart on warm moments). The branch's own step count starts at 0.
* **Data.** It continues the reference's position in the example stream (``data_order='examples'``: a step takes
  the next B examples) with its own ``seed``, so branches with different seeds are replicates from one checkpoint.
* **LR** (``init_from_lr_rule``). 'linear', 'sqrt' or 'none': one constant LR m·rule(B/B_ref)·η_ref(t), where
  η_ref(t) is the LR the reference would use for its next update, B_ref its batch there and m
  ``init_from_lr_multiplier`` (the proposal of Merrill et al.: the reference's LR, scaled to the branch's batch).
  '': the run's own ``config.optimizer`` schedule from its step 0 (a fine-tune).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Any, Optional

import ml_collections

from lamb_lars import input_pipeline
from lamb_lars.common import durations, io_utils, run_files
from lamb_lars.errors import ConfigError
from lamb_lars.train import batch_schedule, checkpoint, run_identity, run_optimizer, run_plan

LR_RULES = ("linear", "sqrt", "none", "")


@dataclasses.dataclass
class Reference:
  """Where a branch starts: the reference's workdir and checkpoint step, its batch there, the stream position of
  the branch's first example, and (computed when first asked: validating a study's trials starts no JAX backend in
  the runner) the reference's LR there and the branch's."""

  workdir: str
  step: int
  batch_size: int
  data_start: int
  rule: str
  multiplier: float
  branch_batch: int
  ref_config: Any = dataclasses.field(repr=False, default=None)
  ref_plan: Any = dataclasses.field(repr=False, default=None)

  @functools.cached_property
  def lr_ref(self) -> float:
    """η_ref(t): the LR of the reference's update from its step t."""
    return float(run_optimizer.create_optimizer(self.ref_config, self.ref_plan)[1](self.step))

  @functools.cached_property
  def lr(self) -> Optional[float]:
    """The branch's constant LR m·rule(B/B_ref)·η_ref(t); None: the run's own schedule."""
    if not self.rule:
      return None
    return self.multiplier * self.lr_ref * batch_schedule.LR_RULES[self.rule](self.branch_batch / self.batch_size)


def _reference_plan(workdir: str, num_devices: int) -> tuple[ml_collections.ConfigDict, run_plan.RunPlan]:
  recorded = run_identity.recorded_config(workdir)
  if recorded is None:
    raise ConfigError(
      f"config.init_from_dir={workdir!r} holds no run of this trainer (no "
      f"{run_files.CONFIG_FILE}); train the reference there first."
    )
  ref = ml_collections.ConfigDict(recorded)
  if ref.get("init_from_dir"):
    raise ConfigError(f"config.init_from_dir={workdir!r} is itself a branch; branch from the reference run.")
  info = input_pipeline.get_info(ref)
  return ref, run_plan.make_plan(ref, num_train=info.num_train, num_devices=max(1, ref.num_devices or num_devices))


def _checkpoint_step(config: Any, workdir: str, ref_plan: run_plan.RunPlan) -> int:
  try:
    base = durations.steps(
      "init_from",
      config,
      num_train=ref_plan.num_train,
      batch_size=ref_plan.batch_size,
      total_steps=ref_plan.base_total_steps,
    )
  except ValueError as e:
    raise ConfigError(str(e)) from None
  step = batch_schedule.step_reaching(ref_plan.stages, base * ref_plan.batch_size)
  folder = os.path.join(workdir, run_files.CHECKPOINT_DIR)
  if not io_utils.exists(os.path.join(folder, str(step))):
    have = sorted(int(n) for n in io_utils.listdir(folder) if n.isdigit())
    raise ConfigError(
      f"config.init_from_* asks for the reference's step {step}, but {folder} holds checkpoints at "
      f"steps {have or 'none'}; branch from one of those (the reference must checkpoint there)."
    )
  return step


def resolve(config: Any, num_devices: int) -> Optional[Reference]:
  """The branch's :class:`Reference`, or None without ``config.init_from_dir``; one-sentence ConfigError when the
  reference, its checkpoint or the settings do not allow a branch (checked before anything compiles)."""
  workdir = config.init_from_dir
  if not workdir:
    return None
  rule = config.init_from_lr_rule
  if rule not in LR_RULES:
    raise ConfigError(f"config.init_from_lr_rule={rule!r} is not one of 'linear', 'sqrt', 'none', ''.")
  if config.data_order != "examples":
    raise ConfigError(
      "config.init_from_dir needs config.data_order='examples' (a branch continues the "
      "reference's position in the example stream)."
    )
  if config.optimizer.lr_table:
    raise ConfigError(
      "config.init_from_dir with config.optimizer.lr_table=True is not supported (the table in "
      "the reference's optimizer state has the reference's length); set lr_table=False."
    )
  ref_cfg, ref_plan = _reference_plan(workdir, num_devices)
  step = _checkpoint_step(config, workdir, ref_plan)
  return Reference(
    workdir,
    step,
    ref_plan.stage_at(step).batch_size,
    ref_plan.examples(step),
    rule,
    float(config.init_from_lr_multiplier),
    int(config.batch_size),
    ref_cfg,
    ref_plan,
  )


def restore_into(state: Any, ref: Reference) -> Any:
  """``state`` with the reference's parameters, BN statistics and optimizer state at ``ref.step``; step 0."""
  try:
    restored = checkpoint.read_state(ref.workdir, ref.step, state)
  except Exception as e:  # noqa: BLE001  (orbax reports a structure mismatch in many ways)
    raise ConfigError(
      f"the reference's checkpoint {ref.workdir} step {ref.step} does not fit this run's model and "
      f"optimizer ({checkpoint.first_line(e)}); a branch keeps the reference's model and "
      f"optimizer."
    ) from None
  return state.replace(params=restored.params, batch_stats=restored.batch_stats, opt_state=restored.opt_state)
