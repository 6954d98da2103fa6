"""The paper's MNIST CNN (TensorFlow's official model, lamb_lars/models/mnist_cnn.py): JAX against PyTorch, one run.

Both sides train the same network (conv 32@5×5 → pool → conv 64@5×5 → pool → dense 1024 → dropout 0.4 → dense 10)
from the same parameters (the JAX init, copied into torch) with momentum SGD, float32, on the same random batch. They
are timed in alternation — each repeat times torch, then every JAX variant — so load from other processes hits all
alike; the printed ratio is the median over repeats of JAX img/s ÷ PyTorch img/s. A one-step guard first checks that
both sides give the same logits (dropout off for the guard).

  /work/venv-torch215/bin/python benchmarks/mnist_cnn_vs_pytorch.py     # batch 256, and 8192 in micro-batches
  python benchmarks/mnist_cnn_vs_pytorch.py --batches 256 --repeats 3 --images 1280
  python benchmarks/mnist_cnn_vs_pytorch.py --quick            # smoke run

Needs jax and torch in one interpreter: a venv made with ``--system-site-packages`` (jax from the system) and
``pip install -c constraints.txt torch`` (constraints.txt pins the PyTorch compared against, the ``bench`` extra).

JAX variants: ``model`` (lamb_lars' MnistCNN: XLA's convolutions, their weight gradients from conv_wgrad.py, the
pool as the maximum of four strided slices) and ``xla_pool`` (the same with ``nn.max_pool``).
A batch above ``--micro`` is accumulated over micro-batches of ``--micro`` on both sides (JAX: ``lax.scan`` inside
the step, unrolled ``--unroll`` times (0 = fully, as configs/paper do up to 8K); torch: backward per micro-batch).

Throughput is also printed as GFLOP/s of the network's training FLOPs (direct convolutions: forward 27.8 MFLOP per
image, backward twice that less conv1's input gradient: 82.0 MFLOP per image; elementwise ops not counted) and as a
percentage of the CPU's float32 peak, cores × GHz × FLOP per cycle per core (32 on Zen 4 and other CPUs with two
256-bit FMA pipes, AVX-512 included, since Zen 4 runs a 512-bit FMA as two 256-bit halves; ``--flops_per_cycle``),
at the nominal clock of /proc/cpuinfo (``--ghz`` to override). Boost clocks make the true peak higher: on the
2-core Zen 4 VM (2.60 GHz nominal), conv2's forward convolution ran at 97.5 GFLOP/s on one core (CPU time), so that
core ran at ≥ 3.05 GHz. A torch 2048² float32 matmul, timed once, gives the GEMM rate reached at the moment.
Threads: both sides use all cores unless ``--threads`` is given (torch.set_num_threads; XLA via its intra-op flag).
``--cpu_devices 2`` runs JAX instead as two single-threaded CPU devices, the step data-parallel over them (what
two single-threaded processes at once gained in docs/BENCHMARKS.md §18, within one step).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import numpy as np

LR, MOMENTUM = 0.01, 0.9
# Training FLOPs per image (direct convolutions): forward conv1, conv2, fc1, fc2; backward = 2 × forward − conv1's dx.
FWD_FLOPS = (2 * 28 * 28 * 25 * 1 * 32, 2 * 14 * 14 * 25 * 32 * 64, 2 * 3136 * 1024, 2 * 1024 * 10)
TRAIN_FLOPS = 3 * sum(FWD_FLOPS) - FWD_FLOPS[0]


def jax_model(variant: str):
  import flax.linen as nn
  from lamb_lars.models import mnist_cnn

  if variant == "model":
    return mnist_cnn.MnistCNN()

  class XlaPool(mnist_cnn.MnistCNN):
    @nn.compact
    def __call__(self, x, train=False):
      pool = lambda z: nn.max_pool(z, (2, 2), (2, 2), padding="SAME")
      init = nn.initializers.glorot_uniform()
      x = pool(nn.relu(nn.Conv(32, (5, 5), padding="SAME", kernel_init=init, name="conv1")(x)))
      x = pool(nn.relu(nn.Conv(64, (5, 5), padding="SAME", kernel_init=init, name="conv2")(x)))
      x = nn.relu(nn.Dense(1024, kernel_init=init, name="fc1")(x.reshape((x.shape[0], -1))))
      x = nn.Dropout(self.dropout_rate, deterministic=not train)(x)
      return nn.Dense(self.num_classes, kernel_init=init, name="fc2")(x)

  return XlaPool()


def make_jax_step(variant: str, batch: int, micro: int, unroll: int = 0):
  """jit(params, opt_state, x, y, key) → (params, opt_state, loss): one momentum-SGD step, micro-batched.

  With several JAX CPU devices (``--cpu_devices``), the step is data-parallel over them (``shard_map``: each device
  takes batch / devices images, micro-batched the same way, and the gradients are averaged with ``pmean``)."""
  import jax
  import optax
  from jax.sharding import PartitionSpec as P

  model, tx = jax_model(variant), optax.sgd(LR, MOMENTUM)
  n_dev = jax.device_count()
  k = max(batch // (micro * n_dev), 1)

  def loss_fn(p, x, y, key):
    logits = model.apply({"params": p}, x, train=True, rngs={"dropout": key})
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

  grad_fn = jax.value_and_grad(loss_fn)

  def step(p, s, x, y, key):
    if n_dev > 1:
      key = jax.random.fold_in(key, jax.lax.axis_index("d"))
    if k == 1:
      loss, g = grad_fn(p, x, y, key)
    else:
      xs, ys = x.reshape((k, -1) + x.shape[1:]), y.reshape((k, -1))
      keys = jax.random.split(key, k)

      def body(acc, xyk):
        l, g = grad_fn(p, *xyk)
        return jax.tree.map(lambda a, b: a + b / k, acc, g), l

      g, losses = jax.lax.scan(body, jax.tree.map(jax.numpy.zeros_like, p), (xs, ys, keys), unroll=unroll or k)
      loss = losses.mean()
    if n_dev > 1:
      g, loss = jax.lax.pmean((g, loss), "d")
    u, s = tx.update(g, s, p)
    return optax.apply_updates(p, u), s, loss

  if n_dev > 1:
    mesh = jax.make_mesh((n_dev,), ("d",))
    # check_vma=False: the replicated kernels meet device-varying activations inside conv_wgrad's custom VJP
    step = jax.shard_map(
      step, mesh=mesh, in_specs=(P(), P(), P("d"), P("d"), P()), out_specs=(P(), P(), P()), check_vma=False
    )
  init = jax.jit(lambda key: model.init(key, jax.numpy.zeros((1, 28, 28, 1)))["params"])
  return jax.jit(step, donate_argnums=(0, 1)), init, tx


def torch_model(params):
  """The same network in torch (NCHW), with the JAX parameters copied in (HWIO → OIHW; NHWC flatten order)."""
  import torch
  from torch import nn

  class Net(nn.Module):
    def __init__(self):
      super().__init__()
      self.conv1, self.conv2 = nn.Conv2d(1, 32, 5, padding=2), nn.Conv2d(32, 64, 5, padding=2)
      self.fc1, self.fc2, self.drop = nn.Linear(3136, 1024), nn.Linear(1024, 10), nn.Dropout(0.4)

    def forward(self, x):
      x = torch.max_pool2d(torch.relu(self.conv1(x)), 2)
      x = torch.max_pool2d(torch.relu(self.conv2(x)), 2)
      x = x.permute(0, 2, 3, 1).reshape(x.shape[0], -1)  # NHWC flatten, as the JAX model
      return self.fc2(self.drop(torch.relu(self.fc1(x))))

  net = Net()
  t = lambda a: torch.from_numpy(np.array(a, np.float32))
  with torch.no_grad():
    for name in ("conv1", "conv2"):
      getattr(net, name).weight.copy_(t(np.transpose(params[name]["kernel"], (3, 2, 0, 1))))
      getattr(net, name).bias.copy_(t(params[name]["bias"]))
    for name in ("fc1", "fc2"):
      getattr(net, name).weight.copy_(t(np.asarray(params[name]["kernel"]).T))
      getattr(net, name).bias.copy_(t(params[name]["bias"]))
  return net


def make_torch_step(net, batch: int, micro: int):
  import torch

  opt = torch.optim.SGD(net.parameters(), lr=LR, momentum=MOMENTUM)
  k = max(batch // micro, 1)

  def step(x, y):
    opt.zero_grad(set_to_none=True)
    total = 0.0
    for xs, ys in zip(x.chunk(k), y.chunk(k)):
      loss = torch.nn.functional.cross_entropy(net(xs), ys) / k
      loss.backward()
      total += float(loss.detach())
    opt.step()
    return total

  return step


def run(batches, micro: int, images: int, repeats: int, variants, unroll: int = 0, peak: float = 0.0) -> list[dict]:
  """Each repeat times max(1, images // batch) steps per side; returns one row of medians per batch."""
  import jax
  import torch

  rng = np.random.default_rng(0)
  rows = []
  for batch in batches:
    steps = max(1, images // batch)
    x = rng.random((batch, 28, 28, 1), dtype=np.float32)
    y = rng.integers(0, 10, batch)
    xt, yt = torch.from_numpy(np.transpose(x, (0, 3, 1, 2)).copy()), torch.from_numpy(y)
    if jax.device_count() > 1:  # the batch split over the CPU devices, as the data-parallel step takes it
      from jax.sharding import NamedSharding, PartitionSpec

      split = NamedSharding(jax.make_mesh((jax.device_count(),), ("d",)), PartitionSpec("d"))
      x, y = jax.device_put(x, split), jax.device_put(y, split)
    jax_steps = {}
    for v in variants:
      step, init, tx = make_jax_step(v, batch, micro, unroll)
      p = init(jax.random.key(0))
      host_params = jax.device_get(p)
      s = tx.init(p)
      p, s, loss = step(p, s, x, y, jax.random.key(1))  # compile
      loss.block_until_ready()
      jax_steps[v] = [step, p, s]
    net = torch_model(host_params)
    net.train()
    tstep = make_torch_step(net, batch, micro)
    tstep(xt, yt)  # warm-up
    times = {"torch": [], **{v: [] for v in variants}}
    for _ in range(repeats):
      t0 = time.perf_counter()
      for _ in range(steps):
        tstep(xt, yt)
      times["torch"].append(time.perf_counter() - t0)
      for v in variants:
        step, p, s = jax_steps[v]
        t0 = time.perf_counter()
        for i in range(steps):
          p, s, loss = step(p, s, x, y, jax.random.key(i))
        loss.block_until_ready()
        times[v].append(time.perf_counter() - t0)
        jax_steps[v][1:] = [p, s]
    torch_ips = [steps * batch / t for t in times["torch"]]
    gflops = lambda ips: ips * TRAIN_FLOPS / 1e9
    row = {"batch": batch, "micro": min(micro, batch), "torch_img_s": statistics.median(torch_ips)}
    row["torch_gflop_s"] = gflops(row["torch_img_s"])
    for v in variants:
      ips = [steps * batch / t for t in times[v]]
      row[f"{v}_img_s"] = statistics.median(ips)
      row[f"{v}_gflop_s"] = gflops(row[f"{v}_img_s"])
      row[f"{v}_vs_torch"] = statistics.median(a / b for a, b in zip(ips, torch_ips))
    if peak:
      row.update({f"{n}_pct_peak": 100 * row[f"{n}_gflop_s"] / peak for n in ["torch", *variants]})
    rows.append(row)
    print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}), flush=True)
    for n in ["torch", *variants]:
      ratio = "" if n == "torch" else f"   {n} ÷ torch {row[f'{n}_vs_torch']:.2f}×"
      pct = f"  {row[f'{n}_pct_peak']:5.1f}% of peak" if peak else ""
      print(
        f"  batch {batch:>6} (micro {row['micro']}): {n:>9} {row[f'{n}_img_s']:8.1f} img/s "
        f"{row[f'{n}_gflop_s']:6.1f} GFLOP/s{pct}{ratio}",
        flush=True,
      )
  return rows


def guard() -> float:
  """Loss of one batch on both sides from the same parameters, dropout off; returns |difference|."""
  import jax
  import torch
  from lamb_lars.models import mnist_cnn

  model = mnist_cnn.MnistCNN()
  x = np.random.default_rng(1).random((64, 28, 28, 1), dtype=np.float32)
  params = jax.device_get(model.init(jax.random.key(0), x[:1])["params"])
  jax_logits = np.asarray(model.apply({"params": params}, x, train=False))
  net = torch_model(params).eval()
  with torch.no_grad():
    torch_logits = net(torch.from_numpy(np.transpose(x, (0, 3, 1, 2)).copy())).numpy()
  return float(np.abs(jax_logits - torch_logits).max())


def nominal_ghz() -> float:
  """The CPU's clock from /proc/cpuinfo (the first ``cpu MHz``; under a hypervisor this is the nominal clock)."""
  try:
    with open("/proc/cpuinfo") as f:
      return next(float(line.split(":")[1]) for line in f if line.startswith("cpu MHz")) / 1e3
  except (OSError, StopIteration, ValueError):
    return 0.0


def gemm_gflops(n: int = 2048, reps: int = 5) -> float:
  """Median GFLOP/s of a torch n×n float32 matmul: what the GEMM library reaches on this machine now."""
  import torch

  a, b = torch.rand(n, n), torch.rand(n, n)
  a @ b
  times = []
  for _ in range(reps):
    t0 = time.perf_counter()
    a @ b
    times.append(time.perf_counter() - t0)
  return 2 * n**3 / statistics.median(times) / 1e9


def main():
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--batches", default="256,8192")
  ap.add_argument("--micro", type=int, default=256)
  ap.add_argument("--unroll", type=int, default=0, help="lax.scan unroll of the micro-batch loop; 0 = fully")
  ap.add_argument("--images", type=int, default=2560, help="images per timed repeat and side (≥ 1 step)")
  ap.add_argument("--repeats", type=int, default=5)
  ap.add_argument("--variants", default="model")
  ap.add_argument("--threads", type=int, default=0)
  ap.add_argument(
    "--cpu_devices",
    type=int,
    default=1,
    help="JAX CPU devices, each single-threaded, the step data-parallel over them (XLA_FLAGS)",
  )
  ap.add_argument("--ghz", type=float, default=0.0, help="clock for the peak; 0 = /proc/cpuinfo's")
  ap.add_argument("--flops_per_cycle", type=int, default=32, help="float32 FLOP per cycle per core (Zen 4: 32)")
  ap.add_argument("--quick", action="store_true")
  a = ap.parse_args()
  if a.threads:
    import torch

    torch.set_num_threads(a.threads)
    os.environ["XLA_FLAGS"] = (
      os.environ.get("XLA_FLAGS", "") + f" --xla_cpu_multi_thread_eigen=true intra_op_parallelism_threads={a.threads}"
    )
  if a.cpu_devices > 1:
    os.environ["XLA_FLAGS"] = (
      os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count="
      f"{a.cpu_devices} --xla_cpu_multi_thread_eigen=false"
    )
  if a.quick:
    a.batches, a.images, a.repeats = "64", 128, 1
  import jax
  import torch

  cores = a.threads or len(os.sched_getaffinity(0))
  ghz = a.ghz or nominal_ghz()
  peak = cores * ghz * a.flops_per_cycle
  print(
    f"jax {jax.__version__} ({jax.device_count()} CPU devices), torch {torch.__version__} "
    f"({torch.get_num_threads()} threads); "
    f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}"
  )
  print(
    f"peak = {cores} cores × {ghz:.2f} GHz × {a.flops_per_cycle} FLOP/cycle = {peak:.1f} GFLOP/s float32; "
    f"training FLOPs {TRAIN_FLOPS / 1e6:.2f} M per image; torch 2048² matmul now: {gemm_gflops():.1f} GFLOP/s"
  )
  diff = guard()
  print(f"guard: max |logit difference| JAX vs torch = {diff:.2e}")
  if diff > 1e-3:
    raise SystemExit("the two models differ; not timing them")
  print(f"load average before timing: {os.getloadavg()}")
  run([int(b) for b in a.batches.split(",")], a.micro, a.images, a.repeats, a.variants.split(","), a.unroll, peak)
  print(f"load average after timing: {os.getloadavg()}")


if __name__ == "__main__":
  main()
