"""The in-step cost of the noise-scale estimate, in one process: the compiled training chunk with it on against off.

  python benchmarks/noise_scale_step_cost.py [--optimizer=lamb] [--steps=10] [--calls=60]

``benchmarks/noise_scale_cost.py`` times whole runs in child processes, so load between runs moves its numbers by
±10%, more than the cost it looks for (docs/BENCHMARKS.md §33). This script removes what varies between runs. It
builds the trainer's own compiled K-step chunk (``feeders.chunk_maker``: LeNet-5, batch 256 in ``--microbatches``
micro-batches, one device, host-fed, the optimizer ``--optimizer``) twice: with ``diagnostics.noise_scale`` off and on
(on: the step also forms |P·g|² per micro-batch, the preconditioned norms; ``grad_sq_norm_small``, the B_simple input,
is in both). It then calls the two chunks alternately on the same batch, ``--calls`` times each, and times every
call to completion. Printed:

* XLA's own count of each program's floating-point operations and bytes accessed (``compiled.cost_analysis()``), and
  their ratio on/off: a deterministic measure of the work added;
* per step, the minimum and the median over calls of each program, the median of the paired ratios on/off (call i
  of "on" against call i of "off"), and their 5th–95th percentiles;
* the estimate's cost as a fraction of a step: the median paired ratio − 1, plus the host-side update
  (``NoiseScaleTracker.update``, timed here over 2,000 steps), divided by the step time off.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np


def config(on: bool, optimizer: str, microbatches: int):
  from lamb_lars.configs import mnist_lenet

  c = mnist_lenet.get_config()
  c.dataset, c.batch_size, c.num_train_steps, c.num_devices = "synthetic", 256, 1000, 1
  c.num_microbatches = microbatches
  c.synthetic.num_train, c.synthetic.num_eval, c.eval_batch_size = 60000, 512, 512
  c.optimizer.name, c.diagnostics.noise_scale = optimizer, on
  return c


def build(on: bool, optimizer: str, microbatches: int):
  """(compiled chunk, its initial state, the step key, the cost analysis, whether |P·g|² is in the step)."""
  import jax

  from lamb_lars.train import feeders, parallel, run_optimizer, trainer, validate
  from lamb_lars.train import mesh as mesh_lib

  c = config(on, optimizer, microbatches)
  devices = jax.devices()[:1]
  plan = validate.validate(c, devices)
  tx, _ = run_optimizer.create_optimizer(c, plan, None)
  mesh = mesh_lib.make_mesh(plan.bn.group_devices, devices)
  strategy = parallel.make(c, mesh)
  model, opts = trainer.build_model(c, plan, strategy, 0), trainer.step_options(c, plan, 0)
  chunk = feeders.chunk_maker(c, strategy, lambda i: (model, opts), tx)(0, False)
  state, key = trainer.create_train_state(model, tx, mesh, (28, 28, 1), c.seed)
  return chunk, state, key, opts.preconditioner is not None


def cost(compiled) -> dict:
  ca = compiled.cost_analysis()
  ca = ca[0] if isinstance(ca, (list, tuple)) else ca
  return {k: float(ca.get(k, float("nan"))) for k in ("flops", "bytes accessed")}


def host_update_seconds(steps: int = 2000, chunk: int = 10) -> float:
  """Seconds per step of the host-side tracker update (``train_metrics.NoiseScaleTracker.update``) with both kinds
  (B_simple and B_precond), fed chunks of ``chunk`` steps as the training loop feeds it."""
  from lamb_lars.train import train_metrics

  t = train_metrics.NoiseScaleTracker(decay=0.99, enabled=True, preconditioned=True)
  rng = np.random.default_rng(0)
  keys = ("grad_sq_norm_small", "grad_norm", "grad_sq_norm_small_precond", "grad_sq_norm_precond")
  chunks = [{k: rng.uniform(1.0, 2.0, size=chunk) for k in keys} for _ in range(steps // chunk)]
  start = time.perf_counter()
  for m in chunks:
    t.update(m, 256, 2)
  return (time.perf_counter() - start) / (len(chunks) * chunk)


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--optimizer", default="lamb")
  ap.add_argument("--microbatches", type=int, default=2)
  ap.add_argument("--steps", type=int, default=10, help="steps per compiled call (K)")
  ap.add_argument("--calls", type=int, default=60, help="timed calls of each program, alternating")
  a = ap.parse_args()
  import jax

  rng = np.random.default_rng(0)
  images = rng.integers(0, 256, size=(a.steps, 256, 28, 28, 1), dtype=np.uint8)
  labels = rng.integers(0, 10, size=(a.steps, 256), dtype=np.int32)
  progs = {}
  for mode in ("off", "on"):
    chunk, state, key, precond = build(mode == "on", a.optimizer, a.microbatches)
    images_d, labels_d = jax.device_put(images), jax.device_put(labels)
    compiled = chunk.lower(state, images_d, labels_d, key).compile()
    progs[mode] = dict(
      f=compiled, state=state, key=key, args=(images_d, labels_d), cost=cost(compiled), t=[], precond=precond
    )
  for mode in ("off", "on"):  # warm both
    p = progs[mode]
    for _ in range(3):
      p["state"], m = p["f"](p["state"], *p["args"], p["key"])
      jax.block_until_ready(m)
  for i in range(a.calls):
    for mode in ("off", "on") if i % 2 == 0 else ("on", "off"):
      p = progs[mode]
      start = time.perf_counter()
      p["state"], m = p["f"](p["state"], *p["args"], p["key"])
      jax.block_until_ready((p["state"], m))
      p["t"].append((time.perf_counter() - start) / a.steps)
  off, on = progs["off"], progs["on"]
  ratios = sorted(b / c for b, c in zip(on["t"], off["t"]))
  q = lambda v, f: v[min(len(v) - 1, int(f * len(v)))]  # noqa: E731
  host = host_update_seconds()
  for mode in ("off", "on"):
    p = progs[mode]
    print(
      f"{mode:>3}: |P·g|² in the step {p['precond']}; XLA flops {p['cost']['flops']:.4g}, bytes "
      f"{p['cost']['bytes accessed']:.4g}; per step min {1e3 * min(p['t']):.3f} ms, median "
      f"{1e3 * statistics.median(p['t']):.3f} ms ({a.calls} calls of {a.steps} steps)"
    )
  med = statistics.median(ratios)
  print(
    f"on/off: flops ×{on['cost']['flops'] / off['cost']['flops']:.4f}, bytes ×"
    f"{on['cost']['bytes accessed'] / off['cost']['bytes accessed']:.4f}; time per step: min ×"
    f"{min(on['t']) / min(off['t']):.4f}, paired median ×{med:.4f} [5–95%: {q(ratios, 0.05):.4f}, "
    f"{q(ratios, 0.95):.4f}]"
  )
  step_off = statistics.median(off["t"])
  print(
    f"host update {1e6 * host:.1f} µs/step; the estimate's cost = (paired median − 1) + host / step = "
    f"{100 * (med - 1 + host / step_off):+.2f}% of a step ({a.optimizer}, batch 256 in {a.microbatches} "
    "micro-batches)"
  )


if __name__ == "__main__":
  main()
