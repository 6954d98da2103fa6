"""The baseline of a batch-size study: its test accuracy A and validation loss ξ, the references of You et al. 2020
Defs 2.1–2.2 (regimes.py), read from the one ``role='baseline'`` trial and its replicate seeds."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from lamb_lars.study.analysis.regimes import TEST_ACC, VAL_LOSS, rows_within
from lamb_lars.study.records import Baseline, Trial


def baseline_from_trials(
  trials: Sequence[Trial],
  num_train: int,
  epochs: float,
  *,
  acc_key: str = TEST_ACC,
  loss_key: str = VAL_LOSS,
  replicates: Sequence[Trial] = (),
) -> Baseline:
  """The baseline from the study's one ``role='baseline'`` trial: A = its test accuracy and ξ its validation
    loss at its last eval within ρ epochs. With replicates of it (fresh seeds, ``replicate_of`` = its run id), A and
    ξ are the means over all its seeds that finished (status done; the replicates that diverged or failed are listed in
  ``seeds_left_out``, and the report names them): one seed's A carries its seed noise (sd ≈ 0.1 pp on MNIST) into
    every Def. 2.1/2.2 threshold. Raises ValueError with one sentence when that is not possible."""
  base = [t for t in trials if t.role == "baseline" and t.phase != "replicate"]
  if len(base) != 1:
    raise ValueError(f"a study needs exactly one baseline trial (role 'baseline'); found {len(base)}.")
  t = base[0]
  if t.status != "done":
    raise ValueError(f"the baseline run {t.run_id} is {t.status}, not done.")
  mine = [r for r in replicates if r.replicate_of == t.run_id]
  seeds = [t] + [r for r in mine if r.status == "done"]
  left_out = tuple(f"{r.run_id} ({r.status})" for r in mine if r.status in ("diverged", "failed"))
  values = []
  for s in seeds:
    rows = [
      r
      for r in rows_within(s.curve, int(s.batch_size), epochs, num_train)
      if r.get(acc_key) is not None and r.get(loss_key) is not None
    ]
    if rows:
      values.append((float(rows[-1][acc_key]), float(rows[-1][loss_key])))
    elif s is t:
      raise ValueError(
        f"the baseline run {t.run_id} has no eval with {acc_key} and {loss_key} within {epochs:g} epochs."
      )
  accs, losses = zip(*values)
  return Baseline(
    batch_size=int(t.batch_size),
    accuracy=float(np.mean(accs)),
    val_loss=float(np.mean(losses)),
    epochs=float(epochs),
    num_train=int(num_train),
    run_id=t.run_id,
    seed_accuracies=tuple(accs),
    seed_val_losses=tuple(losses),
    seeds_left_out=left_out,
  )
