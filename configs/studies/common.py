"""Pieces shared by the study configs: the analysis and runner sections, and sub-sweep builders."""
from __future__ import annotations

from typing import Any, Optional

import ml_collections

from lamb_lars.study import sweep

# You et al. 2020, Table 3 (MNIST / LeNet, batch 8K, 30 epochs): bs 256, 8K original, + layer-wise, + bound.
PAPER_TABLE3 = dict(
    sgd=("99.2", "diverge", "99.2", "99.2"),
    adagrad=("99.2", "98.3", "99.3", "99.3"),
    rmsprop=("99.2", "98.6", "diverge", "99.0"),
    adam=("99.3", "99.1", "unstable", "99.4"),
    lars=("99.3", "99.4", "n/a", "n/a"))


def analysis(**overrides: Any) -> ml_collections.ConfigDict:
  """The report's settings (see lamb_lars/study/study_report.py); ≤ 0 baseline values are measured."""
  a = ml_collections.ConfigDict(dict(
      title="", notes="", target_metric="eval_accuracy", target_goal=0.99, target_mode="max",
      baseline_batch=256, baseline_accuracy=-1.0, baseline_val_loss=-1.0, baseline_epochs=-1.0, num_train=60000,
      linear_select=("optimizer.lr_scaling=linear", "variant=original"), table3_batch=0))
  a.update(overrides)
  return a


def runner(num_workers: int = 1, timeout_s: float = 0.0, env: Optional[dict] = None,
           resources: Optional[dict] = None, max_retries: int = 3) -> ml_collections.ConfigDict:
  """Runner settings: parallel trials, per-run time limit (0 = none), extra child environment; for
  ``--executor=ray``: what one trial asks of a node (``CPU``, ``GPU``, ``TPU`` chips, any custom resource;
  0 = not asked) and how often Ray retries a trial whose worker or node died (it resumes from its checkpoint)."""
  res = {"CPU": 1.0, "GPU": 0.0, "TPU": 0.0}  # floats: fractional GPUs are allowed
  res.update(resources or {})
  return ml_collections.ConfigDict(dict(num_workers=num_workers, retry_failed=True, timeout_s=timeout_s,
                                        env=env or {}, resources=res, max_retries=max_retries))


def table3_sweeps(prefix: str, optimizer: str, batch: int, lr: float, variants=sweep.VARIANTS,
                  extra: Optional[dict] = None, grid: Optional[dict] = None) -> list[dict]:
  """One sub-sweep per Table 3 variant of ``optimizer`` at ``batch`` (LR η at B0, scaled by the base rule)."""
  out = []
  for v in variants:
    fixed = {"batch_size": batch, "optimizer.name": optimizer, "optimizer.learning_rate": lr, **(extra or {})}
    fixed.update(sweep.variant_overrides(v))
    out.append(dict(name=f"{prefix}-{optimizer}-{v}".replace("_", ""), variant=v, fixed=fixed,
                    grid=dict(grid or {})))
  return out
