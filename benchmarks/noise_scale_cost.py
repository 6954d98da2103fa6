"""The cost of the in-run noise-scale estimate: training steps with it on against off, side by side.

  python benchmarks/noise_scale_cost.py [--optimizer=lamb] [--steps=300] [--repeats=3] [--microbatches=2]

The normal trainer (``train_and_evaluate``) runs LeNet-5 on synthetic 28×28 data at batch 256 on one device, split
into ``--microbatches`` micro-batches (the two-batch estimator's small batch is one micro-batch), in child processes
that alternate off and on ``--repeats`` times. Off: ``diagnostics.noise_scale=False``; on: ``True`` (B_simple and,
for an adaptive ``--optimizer``, the preconditioned norms |P·g|² in the step, plus the host-side EMAs and windows).
Both compute ``grad_sq_norm_small`` (the train step always has). Measured: the run's ``step_time`` of its last
evaluation window (the second half of the run: compilation and the first window excluded, so only warm steps count).
Printed: each child's step time, the medians, and on/off − 1 (the estimate's cost as a fraction of a step).
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
import json, sys
from lamb_lars.configs import mnist_lenet
from lamb_lars.train import trainer
steps, on, opt, k, workdir = int(sys.argv[1]), sys.argv[2] == "on", sys.argv[3], int(sys.argv[4]), sys.argv[5]
c = mnist_lenet.get_config()
c.dataset, c.batch_size, c.num_train_steps, c.num_devices, c.num_microbatches = "synthetic", 256, steps, 1, k
c.eval_every_steps, c.checkpoint_every_epochs, c.progress = steps // 2, 0.0, False
c.synthetic.num_train, c.synthetic.num_eval, c.eval_batch_size = 60000, 512, 512
c.optimizer.name, c.diagnostics.noise_scale = opt, on
result = trainer.train_and_evaluate(c, workdir)
rows = [json.loads(l) for l in open(workdir + "/metrics.jsonl")]
print(json.dumps({"step_time": rows[-1]["step_time"], "noise_scale_precond": rows[-1].get("noise_scale_precond")}))
"""


def run_child(steps: int, mode: str, optimizer: str, microbatches: int) -> dict:
  env = dict(os.environ, PYTHONPATH=_REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
  with tempfile.TemporaryDirectory() as workdir:
    out = subprocess.run(
      [sys.executable, "-c", CHILD, str(steps), mode, optimizer, str(microbatches), workdir],
      env=env,
      capture_output=True,
      text=True,
      check=True,
    )
  return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--optimizer", default="lamb")
  ap.add_argument("--steps", type=int, default=300)
  ap.add_argument("--repeats", type=int, default=3)
  ap.add_argument("--microbatches", type=int, default=2)
  args = ap.parse_args()
  times: dict = {"off": [], "on": []}
  for r in range(args.repeats):
    for mode in ("off", "on") if r % 2 == 0 else ("on", "off"):
      out = run_child(args.steps, mode, args.optimizer, args.microbatches)
      times[mode].append(out["step_time"])
      print(f"repeat {r} {mode:>3}: {1e3 * out['step_time']:.2f} ms/step", flush=True)
  off, on = statistics.median(times["off"]), statistics.median(times["on"])
  print(
    f"{args.optimizer}, batch 256 in {args.microbatches} micro-batches, {args.steps} steps: median off "
    f"{1e3 * off:.2f} ms/step, on {1e3 * on:.2f} ms/step, cost on/off − 1 = {100 * (on / off - 1):+.1f}%"
  )


if __name__ == "__main__":
  main()
