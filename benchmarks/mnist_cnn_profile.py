"""Per-layer cost of the authors' MNIST CNN train step, JAX against PyTorch, in one process (scratch profile).

JAX: each layer's forward + backward jitted on its own (``block_until_ready``), medians of interleaved repeats;
PyTorch: ``torch.profiler`` over whole steps, self CPU time per op. Both sides on the same threads; the times are
wall-clock and CPU (process) time, so run it pinned (``taskset -c 0 ... --threads 1``) on a loaded machine.

  taskset -c 0 python benchmarks/mnist_cnn_profile.py --threads 1 --batch 256
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--batch", type=int, default=256)
  ap.add_argument("--repeats", type=int, default=7)
  ap.add_argument("--threads", type=int, default=1)
  a = ap.parse_args()
  import torch

  torch.set_num_threads(a.threads)
  import jax
  import jax.numpy as jnp
  import optax
  from lamb_lars.models import conv_wgrad, mnist_cnn
  import mnist_cnn_vs_pytorch as bench

  b = a.batch
  rng = np.random.default_rng(0)
  x = jnp.asarray(rng.random((b, 28, 28, 1), dtype=np.float32))
  y = jnp.asarray(rng.integers(0, 10, b))
  model = mnist_cnn.MnistCNN()
  p = model.init(jax.random.key(0), x[:1])["params"]
  k1, b1, k2, b2 = p["conv1"]["kernel"], p["conv1"]["bias"], p["conv2"]["kernel"], p["conv2"]["bias"]
  conv = lambda x, k: conv_wgrad.conv_general_dilated(x, k, (1, 1), "SAME", dimension_numbers=conv_wgrad.LAYOUT)
  block = lambda x, k, bb: jax.nn.relu(mnist_cnn.max_pool_2x2(conv(x, k) + bb))
  n1 = block(x, k1, b1)
  y2 = conv(n1, k2)
  dy2 = jnp.ones_like(y2)
  feats = block(n1, k2, b2).reshape(b, -1)

  def fwd_bwd(f, argnums):
    """jit of the VJP of sum(f(...)) w.r.t. argnums."""

    def run(*args):
      out, vjp = jax.vjp(
        lambda *d: f(*[d[argnums.index(i)] if i in argnums else args[i] for i in range(len(args))]),
        *[args[i] for i in argnums],
      )
      return vjp(jnp.ones_like(out))

    return jax.jit(run)

  def head(feats, w1, c1, w2, c2):
    h = jax.nn.relu(feats @ w1 + c1)
    h = jnp.where(jax.random.bernoulli(jax.random.key(0), 0.6, h.shape), h / 0.6, 0)
    return optax.softmax_cross_entropy_with_integer_labels(h @ w2 + c2, y).mean()

  step, init, tx = bench.make_jax_step("model", b, b)
  pp = init(jax.random.key(0))
  ss = tx.init(pp)
  upd = jax.jit(lambda g, s, p: optax.apply_updates(p, tx.update(g, s, p)[0]))
  pool = lambda y: jax.nn.relu(mnist_cnn.max_pool_2x2(y))
  jax_parts = {
    "conv1 block: conv+bias+pool+relu, fwd + weight grad": (fwd_bwd(block, [1, 2]), (x, k1, b1)),
    "conv2 block: conv+bias+pool+relu, fwd + both grads": (fwd_bwd(block, [0, 1, 2]), (n1, k2, b2)),
    "  of which conv2 forward": (jax.jit(conv), (n1, k2)),
    "  of which conv2 input grad (XLA)": (
      jax.jit(lambda x, k, d: jax.vjp(lambda x: conv(x, k), x)[1](d)[0]),
      (n1, k2, dy2),
    ),
    "  of which conv2 weight grad (conv_wgrad)": (
      jax.jit(lambda x, k, d: jax.vjp(lambda k: conv(x, k), k)[1](d)[0]),
      (n1, k2, dy2),
    ),
    "  of which pool+relu of conv2, fwd+bwd": (fwd_bwd(pool, [0]), (y2,)),
    "fc1+relu+dropout+fc2+loss, fwd+bwd": (
      fwd_bwd(head, [0, 1, 2, 3, 4]),
      (feats, p["fc1"]["kernel"], p["fc1"]["bias"], p["fc2"]["kernel"], p["fc2"]["bias"]),
    ),
    "optimizer update (momentum)": (upd, (p, tx.init(p), p)),
  }

  def time_jax(f, args):
    t0, c0 = time.perf_counter(), time.process_time()
    jax.block_until_ready(f(*args))
    return time.perf_counter() - t0, time.process_time() - c0

  def time_step(ps):
    p_, s_ = ps
    t0, c0 = time.perf_counter(), time.process_time()
    p_, s_, l = step(p_, s_, x, y, jax.random.key(1))
    l.block_until_ready()
    return (time.perf_counter() - t0, time.process_time() - c0), (p_, s_)

  # torch
  net = bench.torch_model(jax.device_get(p)).train()
  tstep = bench.make_torch_step(net, b, b)
  xt = torch.from_numpy(np.transpose(np.asarray(x), (0, 3, 1, 2)).copy())
  yt = torch.from_numpy(np.asarray(y).astype(np.int64))
  tstep(xt, yt)
  res = {k: [] for k in [*jax_parts, "JAX whole step", "torch whole step"]}
  state = (pp, ss)
  for f, args in jax_parts.values():
    time_jax(f, args)
  _, state = time_step(state)
  for _ in range(a.repeats):
    t0, c0 = time.perf_counter(), time.process_time()
    tstep(xt, yt)
    res["torch whole step"].append((time.perf_counter() - t0, time.process_time() - c0))
    for name, (f, args) in jax_parts.items():
      res[name].append(time_jax(f, args))
    r, state = time_step(state)
    res["JAX whole step"].append(r)
  from torch.profiler import ProfilerActivity, profile

  with profile(activities=[ProfilerActivity.CPU]) as prof:
    for _ in range(a.repeats):
      tstep(xt, yt)
  print(f"batch {b}, threads {a.threads}, load average {os.getloadavg()}; medians of {a.repeats}, ms (wall / CPU)")
  for k, v in res.items():
    w, c = statistics.median(t for t, _ in v), statistics.median(t for _, t in v)
    print(f"  {k:58s} {1e3 * w:8.1f} / {1e3 * c:8.1f}")
  print(f"torch.profiler, self CPU per step (ms), {a.repeats} steps:")
  for e in sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:18]:
    print(f"  {e.key:58s} {e.self_cpu_time_total / 1e3 / a.repeats:8.1f}  (x{e.count // a.repeats})")


if __name__ == "__main__":
  main()
