"""κ(t) for the adaptive batch controller from a measured CBS(t) (issue 60): the ratio of the critical batch that
branching measured to the reference run's B_simple at each branch point.

The calibration (docs/studies/critical_batch_calibration) found no constant κ = CBS / B_simple: early in training
CBS(t) is up to tens of times B_simple(t), late it is within 2×. A branching study (Merrill et al. 2025,
arXiv:2505.23971; ``python -m lamb_lars.study branch``) measures CBS(t) at chosen points; this module turns its
published folder into ``config.adaptive_batch.kappa_schedule``: at each branch point x_i (examples of the reference
run), κ_i = CBS_low(x_i) / B_simple(x_i), the conservative end of the CBS bracket (lamb_lars/study/analysis/
branching.py, at ``epsilon``, relative to the reference loss) over the reference's noise scale at its first
evaluation at or after x_i (axes_cbs.b_simple_at). A point without a lower end (no batch above B0 passes) or without
a finite B_simple gives no entry. The first entry starts at 0, so κ before the first point is κ_1.

The result is a measurement of one workload at one recipe and LR rule: a κ schedule carries over only to runs of that
workload whose noise scale follows the reference's (docs/adaptive_batch.md).

Command: ``python -m lamb_lars.study.analysis.kappa_from_branching FOLDER [--epsilon=0.2] [--b0=256]`` prints the
points and the config flag.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from typing import Optional, Sequence

from lamb_lars.study.analysis import branching as branching_lib
from lamb_lars.study.analysis.axes_cbs import b_simple_at, branch_losses


@dataclasses.dataclass(frozen=True)
class KappaPoint:
  examples: int
  cbs_low: Optional[int]
  b_simple: Optional[float]

  @property
  def kappa(self) -> Optional[float]:
    if self.cbs_low is None or self.b_simple is None or not (math.isfinite(self.b_simple) and self.b_simple > 0):
      return None
    return self.cbs_low / self.b_simple


def points(folder: str, b0: int, epsilon: float) -> list[KappaPoint]:
  """Per branch point of a published branching folder: its CBS lower end at ``epsilon`` and B_simple there."""
  traj = branching_lib.trajectory(branch_losses(folder), b0, epsilon, relative=True)
  noise = b_simple_at(folder, [c.point for c in traj])
  return [KappaPoint(int(c.point), c.low, noise[c.point]) for c in traj]


def schedule(pts: Sequence[KappaPoint]) -> str:
  """``kappa_schedule`` in examples (``batch_schedule_unit='examples'``): "0:κ_1,x_2:κ_2,…" over the points with a
  κ, the first from 0; '' when none has one."""
  usable = [p for p in pts if p.kappa is not None]
  return ",".join(f"{0 if i == 0 else p.examples}:{p.kappa:.4g}" for i, p in enumerate(usable))


def main(argv: Sequence[str]) -> int:
  args = [a for a in argv if not a.startswith("--")]
  opts = dict(a[2:].split("=", 1) for a in argv if a.startswith("--") and "=" in a)
  if len(args) != 1:
    print(
      "usage: python -m lamb_lars.study.analysis.kappa_from_branching FOLDER [--epsilon=0.2] [--b0=256] (FOLDER: a "
      "published branching folder, e.g. docs/studies/mnist_branching_sqrt_prereg)",
      file=sys.stderr,
    )
    return 2
  pts = points(args[0], int(opts.get("b0", 256)), float(opts.get("epsilon", 0.2)))
  for p in pts:
    k = f"{p.kappa:.4g}" if p.kappa is not None else "— (no lower end or no B_simple)"
    print(f"examples {p.examples:>9,}: CBS low {p.cbs_low}, B_simple {p.b_simple}, κ {k}")
  spec = schedule(pts)
  print(
    f'--config.batch_schedule_unit=examples --config.adaptive_batch.kappa_schedule="{spec}"'
    if spec
    else "no point has both a CBS lower end and a finite B_simple: no κ schedule."
  )
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
