"""Step time, compile time and peak memory of one paper configuration under each micro-batch loop.

  python -m benchmarks.microbatch_loop [--config lars_b8192] [--loops host,unrolled] [--steps 3]
                                       [--batch_size 0] [--microbatch_size 0]

``config.microbatch_loop`` picks how a step accumulates its micro-batches' gradients (lamb_lars/train/train_step.py,
host_accumulation.py): ``scan`` (one compiled step, a rolled loop), ``unrolled`` (one compiled step, the loop
unrolled at trace time) or ``host`` (2 + k compiled calls from Python, one micro-batch's buffers alive at a time).
All three compute the same function (tests/test_host_accumulation.py); this measures what each costs on the
authors' CNN (lamb_lars/proj/you2020/configs/, model ``mnist_cnn``). Each loop runs ``train.py``'s trainer in its own
process, so the peak RSS is its own, for ``--steps`` steps after compilation; the table gives ratios against the first
loop. ``--batch_size`` / ``--microbatch_size`` (0: the config's own) shorten a measurement of a full-batch config.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The child measures its own peak RSS (ru_maxrss, KiB on Linux) after training.
_CHILD = r"""
import importlib, json, resource, sys
from lamb_lars.train.trainer import train_and_evaluate
workdir, name, loop, steps, batch, micro = sys.argv[1:7]
cfg = importlib.import_module(f"lamb_lars.proj.you2020.configs.{name}").get_config()
cfg.microbatch_loop, cfg.num_train_steps = loop, int(steps)
if int(batch):
  cfg.batch_size = int(batch)
if int(micro):
  cfg.microbatch_size = int(micro)
cfg.eval_every_steps, cfg.checkpoint_every_steps, cfg.checkpoint_every_epochs = int(steps), -1, 0.0
cfg.progress = False
cfg.optimizer.schedule.allow_long_warmup = True  # a few steps of a run whose warmup is longer
r = train_and_evaluate(cfg, workdir)
print(json.dumps({"loop": loop, "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "step_time": r["final"]["step_time"], "compile_time": r["final"]["compile_time"],
                  "batch": cfg.batch_size, "micro": cfg.microbatch_size, "status": r["status"]}))
"""


def run_one(name: str, loop: str, steps: int, batch: int, micro: int) -> dict:
  workdir = tempfile.mkdtemp(prefix=f"mbloop_{loop}_")
  cmd = [sys.executable, "-c", _CHILD, workdir, name, loop, str(steps), str(batch), str(micro)]
  out = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "JAX_PLATFORMS": "cpu"}, capture_output=True, text=True)
  if out.returncode:
    raise SystemExit(f"the {loop} loop failed:\n{out.stderr[-3000:]}")
  return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--config", default="lars_b8192", help="a module of lamb_lars/proj/you2020/configs/")
  ap.add_argument("--loops", default="host,unrolled")
  ap.add_argument("--steps", type=int, default=3)
  ap.add_argument("--batch_size", type=int, default=0)
  ap.add_argument("--microbatch_size", type=int, default=0)
  a = ap.parse_args()
  print(
    f"{'loop':>9} {'batch':>6} {'micro':>6} {'compile s':>9} {'step s':>7} {'img/s':>7} {'time ratio':>10} "
    f"{'peak RSS MiB':>12} {'RSS ratio':>9}",
    flush=True,
  )
  base = None
  for loop in a.loops.split(","):  # each row as soon as it is measured
    r = run_one(a.config, loop, a.steps, a.batch_size, a.microbatch_size)
    base = base or r
    print(
      f"{loop:>9} {r['batch']:>6} {r['micro']:>6} {r['compile_time']:>9.1f} {r['step_time']:>7.2f} "
      f"{r['batch'] / r['step_time']:>7.0f} {r['step_time'] / base['step_time']:>10.2f} {r['rss_mib']:>12.0f} "
      f"{r['rss_mib'] / base['rss_mib']:>9.2f}",
      flush=True,
    )


if __name__ == "__main__":
  main()
