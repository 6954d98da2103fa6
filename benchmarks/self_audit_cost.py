"""The cost of the adaptive batch's ``branch`` self-audit: a controller run with one audit against the same run
without it, side by side.

  python benchmarks/self_audit_cost.py [--epochs=2] [--repeats=2] [--delta=16384] [--sizes=4] [--points=27500]

Both runs are the ``adaptive_audit`` arm of lamb_lars/configs/studies/mlp_adaptive_batch.py (the MLP 300-100 on
MNIST, batch 256 … 4096, 2 micro-batches, a decision every quarter epoch) shortened to ``--epochs``, in child
processes that alternate with and without the audit ``--repeats`` times. With: audits at ``--points`` (in examples;
by default one, at 0.5 epochs, the branching study's first point; the study's are 27500,110000,440000), Δ =
``--delta`` examples, ``--sizes`` ladder sizes above the batch.
Without: ``audit_points=''``, κ = 1. The two runs then take different batches after the audit, so the total wall
times are not a like-for-like comparison. The audit's own cost is the record's ``seconds``: the branches' wall time,
compilations and evaluations included. Printed: each child's wall time and audit seconds, the medians, and the
audits' seconds (summed over a run's audits) as a fraction of the run without them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = r"""
import json, os, sys, time
from lamb_lars.configs.studies import mlp_adaptive_batch as m
from lamb_lars.train import self_audit, trainer
epochs, points, workdir = float(sys.argv[1]), sys.argv[2], sys.argv[5]
delta, sizes = int(sys.argv[3]), int(sys.argv[4])
c = m.base_config()
arm = next(s for s in m.get_config().sweeps if s["name"] == "adaptive_audit")
c.update_from_flattened_dict(dict(arm["fixed"]))
c.num_epochs, c.checkpoint_every_epochs, c.progress = epochs, 0.0, False
c.adaptive_batch.audit_points = points
c.adaptive_batch.audit_delta_examples, c.adaptive_batch.audit_sizes = delta, sizes
start = time.perf_counter()
result = trainer.train_and_evaluate(c, workdir)
wall = time.perf_counter() - start
path = os.path.join(workdir, self_audit.AUDITS_FILE)
audits = [json.loads(l) for l in open(path)] if os.path.exists(path) else []
audits = [(a.get("seconds"), a.get("cbs_low")) for a in audits]
print(json.dumps({"wall": wall, "status": result["status"], "audits": audits}))
"""


def run_child(epochs: float, points: str, delta: int, sizes: int) -> dict:
  env = dict(os.environ, PYTHONPATH=_REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
  with tempfile.TemporaryDirectory() as workdir:
    out = subprocess.run(
      [sys.executable, "-c", CHILD, str(epochs), points, str(delta), str(sizes), workdir],
      env=env,
      capture_output=True,
      text=True,
      check=True,
    )
  return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--epochs", type=float, default=2.0)
  ap.add_argument("--repeats", type=int, default=2)
  ap.add_argument("--delta", type=int, default=16384)
  ap.add_argument("--sizes", type=int, default=4)
  ap.add_argument("--points", default="27500", help="audit_points, in examples")
  args = ap.parse_args()
  walls: dict[str, list[float]] = {"off": [], "on": []}
  seconds = []
  for r in range(args.repeats):
    for mode in ("off", "on"):
      out = run_child(args.epochs, args.points if mode == "on" else "", args.delta, args.sizes)
      walls[mode].append(out["wall"])
      if mode == "on":
        seconds.append(sum(s for s, _ in out["audits"] if s is not None))
      print(f"repeat {r} audit {mode:3s}: wall {out['wall']:.1f} s, {out['status']}, audits {out['audits']}")
  off, on, audit = statistics.median(walls["off"]), statistics.median(walls["on"]), statistics.median(seconds)
  print(f"median wall: without audits {off:.1f} s, with them {on:.1f} s; the audits' branches {audit:.1f} s")
  print(f"the audits' seconds / the run without them: {audit / off:.3f}")


if __name__ == "__main__":
  main()
