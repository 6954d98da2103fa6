"""Host/device overlap of the training loop: the synchronous loop of ``--old`` (a commit) against this tree's.

  python benchmarks/loop_overlap.py [--old=fc1897d] [--steps=300] [--steps_per_fetch=10] [--repeats=2]

The same short run — LeNet-5 on synthetic 28×28 data, batch 256, host-fed (``data_on_device=no``: every batch
goes through the host pipeline), an evaluation every 100 steps, metrics fetched every ``--steps_per_fetch`` steps —
runs in child processes, alternating old and new ``--repeats`` times. The old tree is ``git archive`` of ``--old``
(its loop fetches each chunk's metrics before dispatching the next; ``steps_per_call`` was its fetch period).

Measured per run, from the start of one evaluation's successor chunk to the next evaluation (compilation and the
first window excluded): the loop's wall time per step, T_loop. In the new child, also the device's own time per
step, T_dev: the same compiled call run back to back on batches already on the device, with no host work between.
The device idles for ``1 − T_dev / T_loop`` of the loop's time. Printed: T_loop old and new, their ratio (> 1: the
new loop is faster), T_dev and the idle fraction of each loop. On CPU the "device" and the host share cores, so
the overlap gains little there; the idle fraction is what a GPU or TPU would waste.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = r"""
import json, sys, time
import jax, numpy as np
from lamb_lars.configs import default
from lamb_lars.train import evaluation, feeders, trainer
steps, fetch, new, workdir = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "new", sys.argv[4]
c = default.get_config()
c.dataset, c.batch_size, c.num_train_steps = "synthetic", 256, steps
c.eval_every_steps, c.checkpoint_every_epochs = 100, 0.0
c.synthetic.num_train, c.synthetic.num_eval = 60000, 512
c.data_on_device, c.progress, c.eval_batch_size = "no", False, 512
if new:
  c.steps_per_fetch = fetch
else:
  c.steps_per_call = fetch
marks, real_eval = [], evaluation.Evaluator.__call__
def evaluate(self, state):
  t0 = time.perf_counter(); out = real_eval(self, state); marks.append((t0, time.perf_counter())); return out
evaluation.Evaluator.__call__ = evaluate
captured, make = {}, feeders.make_feeder
def make_feeder(*a, **k):
  f = captured["feeder"] = make(*a, **k)
  if new:
    real = f.dispatch
    def dispatch(state, step, n, key):
      captured["state"], out = real(state, step, n, key); captured["key"] = key; return captured["state"], out
    f.dispatch = dispatch
  return f
feeders.make_feeder = make_feeder
trainer.train_and_evaluate(c, workdir)
# loop time: from the end of the first evaluation to the start of the last (compilation happened before the first)
loop_s = marks[-1][0] - marks[0][1] - sum(b - a for a, b in marks[1:-1])
out = {"t_loop": loop_s / (steps - 100)}
if new:
  f, n = captured["feeder"], 100
  batches = [next(f._stream) for _ in range(1)]
  args = f.strategy.put_batch(np.stack([b["image"] for b in batches]), np.stack([b["label"] for b in batches]),
                              captured["key"])
  state = captured["state"]
  state, m = f._call(1, state, *args); jax.block_until_ready(m)
  t0 = time.perf_counter()
  for _ in range(n):
    state, m = f._call(1, state, *args)
  jax.block_until_ready((state, m))
  out["t_dev"] = (time.perf_counter() - t0) / n
print("RESULT " + json.dumps(out))
"""


def run_child(tree: str, new: bool, steps: int, fetch: int) -> dict:
  env = dict(os.environ, PYTHONPATH=tree, JAX_PLATFORMS="cpu")
  with tempfile.TemporaryDirectory() as workdir:
    out = subprocess.run(
      [sys.executable, "-c", CHILD, str(steps), str(fetch), "new" if new else "old", workdir],
      cwd=tree,
      env=env,
      capture_output=True,
      text=True,
      check=True,
    )
  line = [l for l in out.stdout.splitlines() if l.startswith("RESULT ")][-1]
  return json.loads(line[len("RESULT ") :])


def old_tree(rev: str, dest: str) -> str:
  archive = subprocess.run(["git", "-C", _REPO, "archive", rev], capture_output=True, check=True).stdout
  subprocess.run(["tar", "-x", "-C", dest], input=archive, check=True)
  return dest


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--old", default="fc1897d")
  ap.add_argument("--steps", type=int, default=300)
  ap.add_argument("--steps_per_fetch", type=int, default=10)
  ap.add_argument("--repeats", type=int, default=2)
  a = ap.parse_args()
  with tempfile.TemporaryDirectory() as tmp:
    old = old_tree(a.old, tmp)
    runs: dict[str, list] = {"old": [], "new": []}
    t0 = time.time()
    for _ in range(a.repeats):
      runs["old"].append(run_child(old, False, a.steps, a.steps_per_fetch))
      runs["new"].append(run_child(_REPO, True, a.steps, a.steps_per_fetch))
  t_old = min(r["t_loop"] for r in runs["old"])
  t_new = min(r["t_loop"] for r in runs["new"])
  t_dev = min(r["t_dev"] for r in runs["new"])
  print(
    f"loop_overlap: {a.steps} steps, batch 256, LeNet-5, host-fed synthetic, fetch every {a.steps_per_fetch} "
    f"steps, best of {a.repeats} ({time.time() - t0:.0f} s, load {os.getloadavg()[0]:.1f})"
  )
  print(f"  T_loop per step   old {1e3 * t_old:.2f} ms   new {1e3 * t_new:.2f} ms   old/new {t_old / t_new:.3f}")
  print(f"  T_dev per step    {1e3 * t_dev:.2f} ms (same compiled call back to back, batches on the device)")
  print(f"  device idle       old {max(0.0, 1 - t_dev / t_old):.1%}   new {max(0.0, 1 - t_dev / t_new):.1%}")


if __name__ == "__main__":
  main()
