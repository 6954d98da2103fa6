"""Pieces shared by the study configs (plain data: this file imports only ml_collections), and the one source of
the defaults of every study setting: the runner reads a section a study leaves out from these factories
(lamb_lars/study/running/sections.py).

See lamb_lars/study/running/sweep.py for the sub-sweep fields, lamb_lars/study/running/search.py for ``search``,
lamb_lars/study/running/runner.py for ``runner`` and lamb_lars/study/publishing/publish.py for ``analysis``.
"""
from __future__ import annotations

from typing import Any, Optional

import ml_collections

# The Table 3 variants (You et al. 2020): optimizer keys of each column. Bound = ratio clipped to [0, 10].
VARIANT_KEYS = {
    "original": {},
    "layerwise": {"optimizer.layerwise": True},
    "layerwise_bound": {"optimizer.layerwise": True, "optimizer.ratio_bounds": (0.0, 10.0)},
}


def analysis(**overrides: Any) -> ml_collections.ConfigDict:
  """The report's settings: the target of steps-to-target (and ``targets``, further goals below it, each with its
  own S(B) fit; lamb_lars/study/report/report_replicates.py), ρ, N, the declared technique set, the published
  results beside ours (``reference``: the import path of a project's reference module,
  lamb_lars/study/report/reference.py; ``paper``: the workload key in its tables, '' = none), Table 3's batch, a
  title and notes; ``noninferiority_margin``: the pre-registered margin of a batch-size warmup arm's
  non-inferiority (accuracy fraction; 0.002 = 0.2 pp; lamb_lars/study/analysis/batch_warmup.py); ``best_fixed``:
  the warmup section also compares every arm with the best fixed batch (batch_warmup.best_fixed and aim; issue 60).
  Thresholds live here and are committed before the first trial (the manifest records that commit, issue 41)."""
  a = ml_collections.ConfigDict(dict(
      title="", notes="", paper="", reference="lamb_lars.proj.you2020.reference", target_metric="eval_accuracy",
      target_goal=0.99, target_mode="max",
      baseline_epochs=0.0, num_train=60000, techniques=(), target_technique="", table3_batch=0, targets=(),
      noninferiority_margin=0.002, best_fixed=False))
  a.update(overrides)
  return a


def branching(**overrides: Any) -> ml_collections.ConfigDict:
  """A branching study's settings (``python -m lamb_lars.study branch``; lamb_lars/study/running/branches.py): the
  branch points (epochs of the reference run; each branches from the reference's first checkpoint at or after it),
  Δ (the examples every branch trains; a multiple of every branch batch, so each sees exactly Δ), the LR rule
  ('linear' | 'sqrt' | 'none': η = multiplier·rule(B/B0)·η_ref(t), constant over the branch) and multiplier, and
  the analysis (lamb_lars/study/analysis/branching.py): ε, absolute or ``relative`` to the reference loss, on
  ``loss`` at the branch's end; ``epsilon_sensitivity``: the other ε values (same unit as ``epsilon``) the report
  shows CBS(t) at, beside the pre-registered ``epsilon``."""
  b = ml_collections.ConfigDict(dict(points_epochs=(), delta_examples=0, lr_rule="linear", lr_multiplier=1.0,
                                     epsilon=0.01, relative=False, loss="validation_loss",
                                     epsilon_sensitivity=()))
  b.update(overrides)
  return b


def search(**overrides: Any) -> ml_collections.ConfigDict:
  """The pruner of searched cells: ASHA on the validation accuracy, rungs at r, r·η, r·η² … epochs (the first
  after the longest warmup of the cell with ``rung_after_warmup``); and the
  adequacy rules of a cell's search (lamb_lars/study/running/phases.py): a best LR in the outer ``edge_fraction`` of its
  log range moves the range by its width on that side, at most ``max_extensions`` times; pruned trials are
  resumed to the full budget until a cell has ``min_full_budget`` full-budget trials; with ``refine_factor`` = r > 1,
  the chosen LR's nearest tried neighbours on each side must lie within ×r of it: a missing one is tried at η/r or
  η·r (the chosen trial's other searched values, never pruned), at most ``max_refinements`` rounds per cell
  (0 and 0: off, as every study before issue 41)."""
  s = ml_collections.ConfigDict(dict(metric="validation_accuracy", mode="max", min_epochs=2, reduction_factor=3,
                                     pruner="asha", rung_after_warmup=True, edge_fraction=0.1, max_extensions=2,
                                     min_full_budget=4, refine_factor=0.0, max_refinements=0))
  s.update(overrides)
  return s


def replicates(num_seeds: int = 3, roles: tuple = ("baseline", "linear", "technique", "table3", "search")
               ) -> ml_collections.ConfigDict:
  """After a cell's search, its chosen configuration (selected on the validation split) re-run with
  ``num_seeds`` fresh seeds (initialisation, data order, dropout), for the cells of these ``roles``
  (lamb_lars/study/running/phases.py, replicates.py). Raising ``num_seeds`` on a finished study runs only the new
  seeds."""
  return ml_collections.ConfigDict(dict(num_seeds=num_seeds, roles=tuple(roles)))


def runner(num_workers: int = 2, cpus_per_trial: int = 1, timeout_s: float = 0.0,
           env: Optional[dict] = None, resources: Optional[dict] = None,
           max_retries: int = 3, compilation_cache: bool = True) -> ml_collections.ConfigDict:
  """Trials at once, CPUs pinned per trial (0 = no pinning), per-trial time limit (0 = none), extra environment;
  for ``--executor=ray``: what one trial asks of a node (``CPU``, ``GPU``, ``TPU`` chips, any custom resource;
  0 = not asked; e.g. ``--config.runner.resources.GPU=8``) and how often Ray retries a trial whose worker or node
  died (it resumes from its checkpoint); whether trials share a persistent XLA compilation cache in the workdir
  (``jax_cache/<host>``)."""
  res = {"CPU": 1.0, "GPU": 0.0, "TPU": 0.0}  # floats: fractional GPUs are allowed
  res.update(resources or {})
  return ml_collections.ConfigDict(dict(num_workers=num_workers, cpus_per_trial=cpus_per_trial, retry_failed=True,
                                        timeout_s=timeout_s, env=env or {}, resources=res,
                                        max_retries=max_retries, compilation_cache=compilation_cache))
