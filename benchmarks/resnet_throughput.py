"""Training throughput of the model zoo on synthetic data: images/s, step time, model FLOPs and MFU.

One jitted train step = forward + backward + momentum-SGD update (optax) + BN running-statistics update, with the
train state donated. The batch is sharded over all local devices (data parallel via ``jax.jit`` + ``NamedSharding``;
BN statistics are then global over the whole batch — XLA inserts the all-reduce); on one device it is plain jit.
Data: one random batch placed on device once, so input-pipeline cost is excluded.

Model FLOPs per image are reported two ways: XLA's ``compiled.cost_analysis()['flops']`` (per device, scaled to
the global batch) and an analytic count, 2 × MACs of every conv and dense layer (shapes from ``jax.eval_shape``)
× 3 for forward + backward. ResNet-50 at 224²: 4.1 GMAC forward ⇒ ≈ 24.6 GFLOP/img training (docs/science.md §5).
MFU = analytic FLOPs/img × img/s / (``--peak_tflops`` × 1e12). ``cpu_ms`` is this process's CPU time per step (all
threads): on a shared CPU, wall time inflates with contention but CPU time much less, so step_ms ≥ cpu_ms / cores.

CPU (small sizes):
  python benchmarks/resnet_throughput.py --model resnet50 --image_size 32 --batch_size 32 \
      --dtype float32,bfloat16 --steps 10 --warmup 2
GPU (H100 dense bf16 peak 989 TFLOP/s; largest batch that fits is the last row without OOM):
  python benchmarks/resnet_throughput.py --model resnet50 --image_size 224 --batch_size 128,256,512,1024 \
      --dtype bfloat16 --steps 20 --warmup 5 --peak_tflops 989
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from typing import Any, Dict, NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.traverse_util import flatten_dict
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from lamb_lars.models import create_model

# Cheap compile for the one-off init (its speed does not matter); the train step gets full optimisation.
_FAST_COMPILE = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}


class TrainState(NamedTuple):
  params: Any
  batch_stats: Any
  opt_state: Any


def analytic_train_flops(model: Any, image_size: int, channels: int = 3) -> float:
  """3 × 2 × (MACs of all conv and dense layers) for one image; BN, ReLU, pooling and the update are ignored."""
  x = jax.ShapeDtypeStruct((1, image_size, image_size, channels), jnp.float32)
  variables = jax.eval_shape(functools.partial(model.init, train=False), jax.random.PRNGKey(0), x)
  _, state = jax.eval_shape(functools.partial(model.apply, train=False, capture_intermediates=True), variables, x)
  outs = {k[:-1]: v[0].shape for k, v in flatten_dict(state["intermediates"]).items()}
  macs = 0
  for path, kernel in flatten_dict(variables["params"]).items():
    if path[-1] != "kernel":
      continue
    out = outs[path[:-1]]
    if kernel.ndim == 4:  # conv: every output element is a kh·kw·cin dot product
      macs += int(np.prod(out)) * int(np.prod(kernel.shape[:3]))
    elif kernel.ndim == 2:  # dense
      macs += int(np.prod(out)) * kernel.shape[0]
  return 3.0 * 2.0 * macs


def make_train_step(model: Any, tx: optax.GradientTransformation):
  """Pure train step: (state, images, labels) → (state, loss)."""

  def loss_fn(params, batch_stats, images, labels):
    logits, new = model.apply(
      {"params": params, "batch_stats": batch_stats}, images, train=True, mutable=["batch_stats"]
    )
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean(), new["batch_stats"]

  def step(state: TrainState, images: jnp.ndarray, labels: jnp.ndarray):
    (loss, batch_stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(
      state.params, state.batch_stats, images, labels
    )
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    return TrainState(optax.apply_updates(state.params, updates), batch_stats, opt_state), loss

  return step


def run_one(
  name: str,
  image_size: int,
  batch_size: int,
  dtype: str,
  steps: int,
  warmup: int,
  num_classes: int,
  peak_tflops: Optional[float],
  seed: int = 0,
) -> Dict[str, Any]:
  """Benchmark one configuration; returns a row for the table."""
  devices = jax.devices()
  n_dev = len(devices)
  if batch_size % n_dev:
    raise ValueError(f"batch {batch_size} is not divisible by {n_dev} devices")
  mesh = Mesh(np.array(devices), ("data",))
  replicated, sharded = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
  model = create_model(name, num_classes=num_classes, dtype=jnp.dtype(dtype))
  tx = optax.sgd(0.1, momentum=0.9)
  row: Dict[str, Any] = dict(model=name, image=image_size, batch=batch_size, dtype=dtype, devices=n_dev)

  kx, ky, kp = jax.random.split(jax.random.PRNGKey(seed), 3)
  images = jax.device_put(jax.random.normal(kx, (batch_size, image_size, image_size, 3), jnp.float32), sharded)
  labels = jax.device_put(jax.random.randint(ky, (batch_size,), 0, num_classes), sharded)

  def init(rng):
    v = model.init(rng, jnp.zeros((1, image_size, image_size, 3), jnp.float32), train=False)
    return TrainState(v["params"], v["batch_stats"], tx.init(v["params"]))

  state = jax.jit(init, out_shardings=replicated).lower(kp).compile(compiler_options=_FAST_COMPILE)(kp)
  step = jax.jit(
    make_train_step(model, tx),
    in_shardings=(replicated, sharded, sharded),
    out_shardings=(replicated, replicated),
    donate_argnums=(0,),
  )
  t0 = time.perf_counter()
  try:
    compiled = step.lower(state, images, labels).compile()
    row["compile_s"] = time.perf_counter() - t0
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    row["xla_gflop_img"] = float(cost.get("flops", float("nan"))) * n_dev / batch_size / 1e9
    times, cpu_times = [], []
    for i in range(warmup + steps):
      t, c = time.perf_counter(), time.process_time()
      state, loss = compiled(state, images, labels)
      loss.block_until_ready()
      if i >= warmup:
        times.append(time.perf_counter() - t)
        cpu_times.append(time.process_time() - c)
  except Exception as e:  # pylint: disable=broad-except
    if "RESOURCE_EXHAUSTED" in str(e) or "out of memory" in str(e).lower():
      row["status"] = "OOM"
      return row
    raise
  if not np.isfinite(float(loss)):
    raise FloatingPointError(f"non-finite loss {float(loss)}")
  step_s = statistics.median(times)
  row.update(
    step_ms=1e3 * step_s,
    cpu_ms=1e3 * statistics.median(cpu_times),
    img_s=batch_size / step_s,
    status="ok",
    gflop_img=analytic_train_flops(model, image_size) / 1e9,
  )
  if peak_tflops:
    row["mfu"] = row["gflop_img"] * 1e9 * row["img_s"] / (peak_tflops * 1e12)
  return row


def format_table(rows: Sequence[Dict[str, Any]]) -> str:
  """Markdown table of benchmark rows."""
  cols = [
    "model",
    "image",
    "batch",
    "dtype",
    "devices",
    "compile_s",
    "step_ms",
    "cpu_ms",
    "img_s",
    "gflop_img",
    "xla_gflop_img",
    "mfu",
    "status",
  ]
  cols = [c for c in cols if any(c in r for r in rows)]
  fmt = {
    "compile_s": "{:.1f}",
    "step_ms": "{:.1f}",
    "cpu_ms": "{:.0f}",
    "img_s": "{:.1f}",
    "gflop_img": "{:.3f}",
    "xla_gflop_img": "{:.3f}",
    "mfu": "{:.1%}",
  }
  lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
  for r in rows:
    lines.append("| " + " | ".join(fmt.get(c, "{}").format(r[c]) if c in r else "" for c in cols) + " |")
  return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--model", default="resnet50", help="a lamb_lars.models name, e.g. resnet50, resnet18_cifar")
  p.add_argument("--image_size", type=int, default=32)
  p.add_argument("--batch_size", default="32", help="comma-separated list, e.g. 128,256,512")
  p.add_argument("--dtype", default="float32", help="compute dtype(s): float32, bfloat16 (comma-separated)")
  p.add_argument("--steps", type=int, default=10, help="timed steps (median reported)")
  p.add_argument("--warmup", type=int, default=2, help="untimed steps after compilation")
  p.add_argument("--num_classes", type=int, default=None, help="default 10 for *_cifar models, else 1000")
  p.add_argument("--peak_tflops", type=float, default=None, help="device peak for MFU (all devices together)")
  a = p.parse_args(argv)
  num_classes = a.num_classes or (10 if a.model.endswith("_cifar") else 1000)
  rows = []
  print(
    f"# {jax.devices()[0].device_kind} × {jax.device_count()} ({jax.default_backend()}), jax {jax.__version__}",
    file=sys.stderr,
  )
  for dtype in a.dtype.split(","):
    for batch in (int(b) for b in a.batch_size.split(",")):
      rows.append(run_one(a.model, a.image_size, batch, dtype, a.steps, a.warmup, num_classes, a.peak_tflops))
      print(format_table(rows[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
  print(format_table(rows))


if __name__ == "__main__":
  main()
