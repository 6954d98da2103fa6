"""Time one optimizer update (``tx.update`` + ``optax.apply_updates``, jitted, params and state donated) on a
ResNet-50 v1.5-sized parameter tree (161 leaves, 25,557,032 float32 parameters), relative to momentum SGD and to
optax's own ``lars`` / ``lamb``.

  python benchmarks/optimizer_update.py                    # ~2 min on a 2-core CPU
  python benchmarks/optimizer_update.py --repeats 21 --iters 10

Repeats are interleaved (every optimizer once per round), so machine load hits all optimizers alike; the table shows
the median and the minimum over rounds of the mean time per update within a round.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from lamb_lars.optim import optimizers as O  # noqa: E402


def resnet50_shapes() -> dict[str, tuple[int, ...]]:
  """Param shapes of ResNet-50 v1.5 (flax examples/imagenet naming): 161 leaves, 25,557,032 parameters."""
  shapes: dict[str, tuple[int, ...]] = {
    "conv_init/kernel": (7, 7, 3, 64),
    "bn_init/scale": (64,),
    "bn_init/bias": (64,),
  }
  cin, block = 64, 0
  for stage, (blocks, f) in enumerate(zip([3, 4, 6, 3], [64, 128, 256, 512])):
    for b in range(blocks):
      p = f"BottleneckResNetBlock_{block}"
      shapes[f"{p}/Conv_0/kernel"] = (1, 1, cin, f)
      shapes[f"{p}/Conv_1/kernel"] = (3, 3, f, f)  # v1.5: the stride sits on the 3x3 conv
      shapes[f"{p}/Conv_2/kernel"] = (1, 1, f, 4 * f)
      for i, c in enumerate((f, f, 4 * f)):
        shapes[f"{p}/BatchNorm_{i}/scale"] = (c,)
        shapes[f"{p}/BatchNorm_{i}/bias"] = (c,)
      if b == 0:
        shapes[f"{p}/conv_proj/kernel"] = (1, 1, cin, 4 * f)
        shapes[f"{p}/norm_proj/scale"] = (4 * f,)
        shapes[f"{p}/norm_proj/bias"] = (4 * f,)
      cin, block = 4 * f, block + 1
  shapes["Dense_0/kernel"] = (2048, 1000)
  shapes["Dense_0/bias"] = (1000,)
  return shapes


def nest(flat: dict) -> dict:
  out: dict = {}
  for path, v in flat.items():
    node = out
    *heads, last = path.split("/")
    for h in heads:
      node = node.setdefault(h, {})
    node[last] = v
  return out


def optimizers(lr: float = 0.1, wd: float = 1e-4) -> dict[str, optax.GradientTransformation]:
  """The contenders. 'optax form' rows use all-True masks, as optax does by default."""
  return {
    "momentum SGD (optax.sgd)": optax.sgd(lr, momentum=0.9),
    "LARS paper (ours)": O.lars(lr, weight_decay=wd),
    "LARS optax form (ours)": O.lars(
      lr, weight_decay=wd, denominator="optax", weight_decay_mask=True, adaptation_mask=True
    ),
    "optax.lars": optax.lars(lr, weight_decay=wd),
    "LAMB (ours)": O.lamb(lr, weight_decay=wd),
    "LAMB optax form (ours)": O.lamb(lr, weight_decay=wd, weight_decay_mask=True, adaptation_mask=True),
    "optax.lamb": optax.lamb(lr, weight_decay=wd),
    "layer-wise Adam + bounds (ours)": O.layerwise_adam(lr, weight_decay=wd, ratio_bounds=(0.01, 10.0)),
    "Adam (optax.adam)": optax.adam(lr),
  }


def make_step(tx: optax.GradientTransformation) -> Callable:
  def step(params, state, grads):
    updates, state = tx.update(grads, state, params)
    return optax.apply_updates(params, updates), state

  return jax.jit(step, donate_argnums=(0, 1))


def main(argv: list[str] | None = None) -> dict[str, np.ndarray]:
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--repeats", type=int, default=11, help="interleaved rounds")
  ap.add_argument("--iters", type=int, default=5, help="updates per optimizer per round")
  ap.add_argument("--only", default="", help="comma-separated substrings of optimizer names to run")
  args = ap.parse_args(argv)

  shapes = resnet50_shapes()
  rng = np.random.default_rng(0)
  host_params = {k: (rng.standard_normal(s) * 0.05).astype(np.float32) for k, s in shapes.items()}
  grads = nest({k: jnp.asarray((rng.standard_normal(s) * 1e-3).astype(np.float32)) for k, s in shapes.items()})
  n = sum(int(np.prod(s)) for s in shapes.values())
  print(
    f"ResNet-50 v1.5 tree: {len(shapes)} leaves, {n:,} params; jax {jax.__version__}, optax {optax.__version__},"
    f" {jax.devices()[0].platform} x{os.cpu_count()} cores"
  )

  txs = {k: v for k, v in optimizers().items() if not args.only or any(s.strip() in k for s in args.only.split(","))}
  runs = {}
  for name, tx in txs.items():
    params = nest({k: jnp.asarray(v) for k, v in host_params.items()})
    step = make_step(tx)
    state = tx.init(params)
    params, state = step(params, state, grads)  # compile + warm up
    jax.block_until_ready(params)
    runs[name] = [step, params, state]

  times = {name: [] for name in runs}
  for _ in range(args.repeats):
    for name, run in runs.items():
      step, params, state = run
      t0 = time.perf_counter()
      for _ in range(args.iters):
        params, state = step(params, state, grads)
      jax.block_until_ready(params)
      times[name].append((time.perf_counter() - t0) / args.iters * 1e3)
      run[1], run[2] = params, state

  med = {k: float(np.median(v)) for k, v in times.items()}
  mn = {k: float(np.min(v)) for k, v in times.items()}
  base, adam = "momentum SGD (optax.sgd)", "Adam (optax.adam)"
  ref_for = lambda k: "optax.lars" if "LARS" in k else ("optax.lamb" if "LAMB" in k else None)
  ratio = lambda k, o: f"{med[k] / med[o]:.2f}x" if o in med and o != k else "-"
  print(
    f"\n{'optimizer':34s} {'median ms':>10s} {'min ms':>8s} {'/ SGD-m':>8s} {'/ optax':>8s} {'/ Adam':>8s}"
    "   (ratios of medians)"
  )
  for k in runs:
    vs_adam = ratio(k, adam) if ("LAMB" in k or "Adam" in k) else "-"
    print(f"{k:34s} {med[k]:10.1f} {mn[k]:8.1f} {ratio(k, base):>8s} {ratio(k, ref_for(k)):>8s} {vs_adam:>8s}")
  return {k: np.asarray(v) for k, v in times.items()}


if __name__ == "__main__":
  main()
