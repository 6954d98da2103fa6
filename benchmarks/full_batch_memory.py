"""Peak memory (RSS) and step time of full-batch LeNet/MNIST (batch 60,000) with and without gradient accumulation.

  python -m benchmarks.full_batch_memory [--microbatches 1,10,60] [--steps 3]

Each configuration runs ``train.py`` in its own process (so peak RSS is its own) for a few full-batch steps on one
CPU device, with the training set fed from the host (``data_on_device=no``) so memory reflects the activations of
one (micro-)batch. Prints a table: micro-batches, micro-batch size, peak RSS, median step time, and ratios against
the unaccumulated run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_one(k: int, steps: int, data_dir: str) -> dict:
  workdir = tempfile.mkdtemp(prefix=f"fullbatch_k{k}_")
  cmd = [sys.executable, "-c", _CHILD, workdir, str(k), str(steps), data_dir]
  env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=1", "JAX_PLATFORMS": "cpu"}
  out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=True)
  return json.loads(out.stdout.strip().splitlines()[-1])


# The child measures its own peak RSS (ru_maxrss, KiB on Linux) after training.
_CHILD = r"""
import json, resource, sys, time
from lamb_lars.configs import mnist_lenet
from lamb_lars.train.trainer import train_and_evaluate
workdir, k, steps, data_dir = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
cfg = mnist_lenet.get_config()
cfg.batch_size, cfg.num_microbatches, cfg.num_train_steps = 60000, k, steps
cfg.steps_per_fetch, cfg.data_on_device, cfg.progress = 1, "no", False
cfg.eval_every_steps, cfg.checkpoint_every_epochs, cfg.eval_batch_size = steps, 0.0, 2000
cfg.optimizer.lr_scaling = "none"  # a memory/time benchmark: keep the LR of the batch-256 baseline
cfg.validation_split = 0
if data_dir:
  cfg.data_dir = data_dir
r = train_and_evaluate(cfg, workdir)
print(json.dumps({"k": k, "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "step_time": r["final"]["step_time"], "compile_time": r["final"]["compile_time"],
                  "train_loss": r["final"]["train_loss"], "status": r["status"]}))
"""


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--microbatches", default="1,10,60")
  ap.add_argument("--steps", type=int, default=2)
  ap.add_argument("--data_dir", default="")
  args = ap.parse_args()
  print(
    f"{'micro-batches':>13} {'micro-batch':>11} {'peak RSS MiB':>12} {'RSS ratio':>9} {'step s':>8} "
    f"{'time ratio':>10} {'train loss':>10}",
    flush=True,
  )
  base = None
  for k in args.microbatches.split(","):  # each row as soon as it is measured
    r = run_one(int(k), args.steps, args.data_dir)
    base = base or r
    print(
      f"{r['k']:>13} {60000 // r['k']:>11} {r['rss_mib']:>12.0f} {r['rss_mib'] / base['rss_mib']:>9.2f} "
      f"{r['step_time']:>8.2f} {r['step_time'] / base['step_time']:>10.2f} {r['train_loss']:>10.4f}",
      flush=True,
    )


if __name__ == "__main__":
  main()
