"""LeNet-5 training step, this project (JAX) against PyTorch on the same CPU, in one process (issue 7).

Both sides start from the same parameters (the JAX init, copied into torch), run float32 fwd+bwd+update on the same
batch, and are timed in alternation: each repeat times torch then every JAX variant, so load from other processes
hits all of them alike; ratios are per repeat, reported as medians. A one-step correctness guard first checks that
both sides give the same loss and parameters.

  python benchmarks/lenet_vs_pytorch.py                  # sgd+lamb, batch 256 and 8192, 2 threads
  python benchmarks/lenet_vs_pytorch.py --threads 1,2    # also single-threaded (one subprocess per setting)
  python benchmarks/lenet_vs_pytorch.py --quick          # smoke run

JAX variants (name: steps per compiled call K, micro-batch): k1 (K=1), k10 (K=10 via lax.scan), acc256 (K=1,
gradient accumulated over micro-batches of 256 inside the step), ref (the textbook Flax model, K=1).
PyTorch (`pip install -c constraints.txt torch`: 2.15.0) is a benchmark-only extra. ``time_pure_step`` is the reusable
piece for comparing train.py's epoch time with the bare step.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
from typing import Any, Callable

LAMB_LR, LAMB_WD = 0.01, 1e-4


@dataclasses.dataclass(frozen=True)
class StepConfig:
  """One JAX training-step setting."""

  batch_size: int = 256
  optimizer: str = "sgd"
  steps_per_call: int = 1  # K steps per compiled call (lax.scan), state donated
  microbatch: int = 0  # >0: accumulate gradients over micro-batches of this size inside the step
  model: str = "fast"  # "fast": lamb_lars LeNet5; "reference": textbook XLA conv/max-pool formulation
  batch_chunk: int | None = 256  # LeNet5's in-model chunking of large batches (None: off)
  seed: int = 0


VARIANTS = {
  "k1": dict(steps_per_call=1),
  "k10": dict(steps_per_call=10),
  "acc256": dict(microbatch=256),
  "ref": dict(model="reference"),
}


def make_jax_optimizer(name: str):
  """Optimizers by name: "sgd", "lamb" (optax.lamb) and "lamb-project" (lamb_lars.optim.optimizers.lamb with weight
  decay
  and trust ratio on every tensor, which equals optax.lamb). The torch side runs the same formula for both LAMBs."""
  import optax

  factories = {
    "sgd": lambda: optax.sgd(0.05, momentum=0.9),
    "lamb": lambda: optax.lamb(LAMB_LR, b1=0.9, b2=0.999, eps=1e-6, weight_decay=LAMB_WD),
    "lamb-project": lambda: __import__("lamb_lars.optim.optimizers", fromlist=["lamb"]).lamb(
      LAMB_LR, b1=0.9, b2=0.999, eps=1e-6, weight_decay=LAMB_WD, weight_decay_mask=True, adaptation_mask=True
    ),
  }
  return factories[name]()


def init_params(seed: int = 0):
  import jax
  import jax.numpy as jnp
  from lamb_lars.models.lenet import LeNet5

  return jax.jit(LeNet5().init)(jax.random.PRNGKey(seed), jnp.zeros((1, 28, 28, 1)))["params"]


def synthetic_batch(batch_size: int, seed: int = 0):
  """Standard-normal images (NHWC float32) and random labels, as numpy arrays."""
  import numpy as np

  rng = np.random.default_rng(seed)
  return rng.standard_normal((batch_size, 28, 28, 1)).astype(np.float32), rng.integers(0, 10, batch_size)


def make_jax_step(config: StepConfig) -> Callable:
  """jit((params, opt_state), x, y) → (new state, last loss), K steps per call, state donated."""
  import jax
  import jax.numpy as jnp
  import optax
  from lamb_lars.models.lenet import LeNet5, reference_forward

  if config.model == "reference":
    apply = lambda p, x: reference_forward({k: (v["kernel"], v["bias"]) for k, v in p.items()}, x)
  else:
    apply = lambda p, x: LeNet5(batch_chunk=config.batch_chunk).apply({"params": p}, x)
  tx = make_jax_optimizer(config.optimizer)
  loss_fn = lambda p, x, y: optax.softmax_cross_entropy_with_integer_labels(apply(p, x), y).mean()

  def grads(p, x, y):
    mb = config.microbatch
    if not mb or mb >= x.shape[0]:
      return jax.value_and_grad(loss_fn)(p, x, y)
    n = x.shape[0] // mb  # equal micro-batches: the mean of their mean losses is the batch's mean loss

    def body(acc, xy):
      return jax.tree.map(jnp.add, acc, jax.value_and_grad(loss_fn)(p, *xy)), None

    zero = (jnp.zeros((), jnp.float32), jax.tree.map(jnp.zeros_like, p))
    acc, _ = jax.lax.scan(body, zero, (x.reshape(n, mb, *x.shape[1:]), y.reshape(n, mb)))
    return jax.tree.map(lambda t: t / n, acc)

  def one_step(state, x, y):
    p, s = state
    loss, g = grads(p, x, y)
    updates, s = tx.update(g, s, p)
    return (optax.apply_updates(p, updates), s), loss

  def k_steps(state, x, y):
    if config.steps_per_call == 1:
      return one_step(state, x, y)
    state, losses = jax.lax.scan(lambda st, _: one_step(st, x, y), state, None, length=config.steps_per_call)
    return state, losses[-1]

  return jax.jit(k_steps, donate_argnums=0)


class JaxRunner:
  """Holds the state, batch and compiled step of one config; ``run(calls)`` returns elapsed seconds."""

  def __init__(self, config: StepConfig, params=None):
    import jax
    import jax.numpy as jnp

    self.config = config
    params = init_params(config.seed) if params is None else params
    self.state = (jax.tree.map(jnp.copy, params), make_jax_optimizer(config.optimizer).init(params))
    x, y = synthetic_batch(config.batch_size, config.seed)
    self.x, self.y = jax.device_put(x), jax.device_put(y)
    self.step = make_jax_step(config)
    t = time.perf_counter()
    self.state, loss = self.step(self.state, self.x, self.y)
    loss.block_until_ready()
    self.compile_seconds = time.perf_counter() - t

  @property
  def images_per_call(self) -> int:
    return self.config.batch_size * self.config.steps_per_call

  def run(self, calls: int) -> float:
    t = time.perf_counter()
    for _ in range(calls):
      self.state, loss = self.step(self.state, self.x, self.y)
    loss.block_until_ready()
    return time.perf_counter() - t


def time_pure_step(config: StepConfig, num_examples: int) -> dict[str, float]:
  """Seconds the bare jitted step takes for num_examples images (data already on device, compile excluded)."""
  runner = JaxRunner(config)
  calls = max(1, -(-num_examples // runner.images_per_call))
  seconds = runner.run(calls)
  examples = calls * runner.images_per_call
  return {
    "seconds": seconds,
    "examples": examples,
    "img_per_s": examples / seconds,
    "compile_seconds": runner.compile_seconds,
  }


# ----------------------------------------------------------------------------------------------------------------
# PyTorch side.


def torch_lenet(params) -> Any:
  """torch LeNet-5 with the given JAX parameters (HWIO → OIHW, [in,out] → [out,in], fc1 rows (h,w,c) → (c,h,w))."""
  import numpy as np
  import torch

  net = torch.nn.Sequential(
    torch.nn.Conv2d(1, 6, 5, padding=2),
    torch.nn.ReLU(),
    torch.nn.MaxPool2d(2),
    torch.nn.Conv2d(6, 16, 5),
    torch.nn.ReLU(),
    torch.nn.MaxPool2d(2),
    torch.nn.Flatten(),
    torch.nn.Linear(400, 120),
    torch.nn.ReLU(),
    torch.nn.Linear(120, 84),
    torch.nn.ReLU(),
    torch.nn.Linear(84, 10),
  )
  a = lambda t: np.array(t, np.float32)  # a writable copy
  fc1 = a(params["fc1"]["kernel"]).reshape(5, 5, 16, 120).transpose(3, 2, 0, 1).reshape(120, 400)
  weights = [
    a(params["conv1"]["kernel"]).transpose(3, 2, 0, 1),
    a(params["conv1"]["bias"]),
    a(params["conv2"]["kernel"]).transpose(3, 2, 0, 1),
    a(params["conv2"]["bias"]),
    fc1,
    a(params["fc1"]["bias"]),
    a(params["fc2"]["kernel"]).T,
    a(params["fc2"]["bias"]),
    a(params["fc3"]["kernel"]).T,
    a(params["fc3"]["bias"]),
  ]
  with torch.no_grad():
    for p, w in zip(net.parameters(), weights):
      p.copy_(torch.from_numpy(np.ascontiguousarray(w)))  # the copy above is writable
  return net


class TorchLamb:
  """LAMB by hand (You et al. 2019), as optax.lamb: d = m̂/(√v̂ + ε) + λw, w ← w − lr·(‖w‖/‖d‖)·d (ratio 1 if a
  norm is 0)."""

  def __init__(self, params, lr: float, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-6, wd: float = 0.0):
    import torch

    self.params, self.lr, self.b1, self.b2, self.eps, self.wd, self.t = list(params), lr, b1, b2, eps, wd, 0
    self.m = [torch.zeros_like(p) for p in self.params]
    self.v = [torch.zeros_like(p) for p in self.params]

  def zero_grad(self) -> None:
    for p in self.params:
      p.grad = None

  def step(self) -> None:
    import torch

    self.t += 1
    c1, c2 = 1 - self.b1**self.t, 1 - self.b2**self.t
    with torch.no_grad():
      for p, m, v in zip(self.params, self.m, self.v):
        m.mul_(self.b1).add_(p.grad, alpha=1 - self.b1)
        v.mul_(self.b2).addcmul_(p.grad, p.grad, value=1 - self.b2)
        d = (m / c1) / ((v / c2).sqrt() + self.eps) + self.wd * p
        wn, dn = p.norm(), d.norm()
        ratio = torch.where((wn > 0) & (dn > 0), wn / dn, torch.ones_like(wn))
        p.sub_(self.lr * ratio * d)


def torch_optimizer(name: str, net) -> Any:
  import torch

  if name == "sgd":
    return torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
  if name.startswith("lamb"):
    return TorchLamb(net.parameters(), LAMB_LR, wd=LAMB_WD)
  raise ValueError(f"no torch optimizer for {name!r}")


def torch_batch(x, y) -> tuple[Any, Any]:
  import torch

  return torch.from_numpy(x.transpose(0, 3, 1, 2).copy()), torch.from_numpy(y)


class TorchRunner:
  """The PyTorch step on a fixed batch; ``run(calls)`` returns elapsed seconds."""

  def __init__(self, optimizer: str, batch_size: int, params, seed: int = 0, warm_up: bool = True):
    self.net = torch_lenet(params)
    self.opt = torch_optimizer(optimizer, self.net)
    self.x, self.y = torch_batch(*synthetic_batch(batch_size, seed))
    self.images_per_call = batch_size
    if warm_up:
      self.run(1)

  def step(self) -> Any:
    import torch

    self.opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(self.net(self.x), self.y)
    loss.backward()
    self.opt.step()
    return loss

  def run(self, calls: int) -> float:
    t = time.perf_counter()
    for _ in range(calls):
      self.step()
    return time.perf_counter() - t


GUARD_TOLERANCE = 1e-3


def correctness_guard(optimizer: str, batch_size: int = 64) -> float:
  """One step on both sides from the same parameters and batch: the largest relative difference (max-abs over the
  tensor's max-abs) of the loss and of any parameter tensor afterwards.

  Expected: ~1e-6 for SGD; ~2e-5 for LAMB, whose first Adam step is ≈ sign(g), so gradient components within float
  noise of zero come out differently on the two sides. A wrong formula gives ≥ 1e-2.
  """
  import jax
  import jax.numpy as jnp
  import numpy as np

  params = init_params(0)
  x, y = synthetic_batch(batch_size, 1)
  state = (jax.tree.map(jnp.copy, params), make_jax_optimizer(optimizer).init(params))  # donated below
  (p_jax, _), loss_jax = make_jax_step(StepConfig(batch_size=batch_size, optimizer=optimizer))(
    state, jax.device_put(x), jax.device_put(y)
  )
  runner = TorchRunner(optimizer, batch_size, params, warm_up=False)
  runner.x, runner.y = torch_batch(x, y)
  loss_torch = runner.step().item()
  diffs = [abs(float(loss_jax) - loss_torch) / abs(loss_torch)]
  for pt, pj in zip(runner.net.parameters(), torch_lenet(p_jax).parameters()):
    a, b = pt.detach().numpy(), pj.detach().numpy()
    diffs.append(float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-12)))
  return max(diffs)


def interleaved(optimizer: str, batch_size: int, variants: list[str], repeats: int, min_seconds: float) -> list[dict]:
  """Times torch and each JAX variant in alternation; one row per variant with medians over repeats."""
  import numpy as np

  params = init_params(0)
  torch_runner = TorchRunner(optimizer, batch_size, params)
  jax_runners = {
    v: JaxRunner(StepConfig(batch_size=batch_size, optimizer=optimizer, **VARIANTS[v]), params) for v in variants
  }
  calls = {}  # calls per timed block, so each block lasts about min_seconds
  for name, r in [("torch", torch_runner), *jax_runners.items()]:
    per_call = r.run(1)
    calls[name] = max(1, int(min_seconds / max(per_call, 1e-6)))
  rates = {name: [] for name in calls}
  for _ in range(repeats):
    for name, r in [("torch", torch_runner), *jax_runners.items()]:
      rates[name].append(calls[name] * r.images_per_call / r.run(calls[name]))
  rows = []
  for v in variants:
    ratios = np.array(rates[v]) / np.array(rates["torch"])
    rows.append(
      {
        "optimizer": optimizer,
        "batch": batch_size,
        "variant": v,
        "torch_img_s": float(np.median(rates["torch"])),
        "jax_img_s": float(np.median(rates[v])),
        "ratio": float(np.median(ratios)),
        "ratio_min": float(ratios.min()),
        "ratio_max": float(ratios.max()),
        "compile_s": jax_runners[v].compile_seconds,
      }
    )
  return rows


def run_one_setting(args) -> list[dict]:
  """Everything for one thread count, in this process."""
  import torch

  torch.set_num_threads(args.threads_one)
  import jax

  print(
    f"# threads={args.threads_one} jax {jax.__version__} torch {torch.__version__} load {os.getloadavg()[0]:.1f}",
    flush=True,
  )
  for opt in args.optimizers:
    diff = correctness_guard(opt)
    print(f"# correctness guard {opt}: max relative difference after one step {diff:.2e}", flush=True)
    if diff > GUARD_TOLERANCE:
      raise SystemExit(f"correctness guard failed for {opt}: {diff:.2e} > {GUARD_TOLERANCE}")
  rows = []
  for opt in args.optimizers:
    for b in args.batches:
      # K=10 only matters where a call is short; micro-batches only where the batch is larger than one.
      variants = [v for v in args.variants if not (v == "acc256" and b <= 256) and not (v == "k10" and b > 1024)]
      rows += interleaved(opt, b, variants, args.repeats, args.min_seconds)
      for r in rows[-len(variants) :]:
        print(_fmt(r, args.threads_one), flush=True)
  print(f"# load after {os.getloadavg()[0]:.1f}", flush=True)
  return rows


def _fmt(r: dict, threads: int) -> str:
  return (
    f"{threads:>7} | {r['optimizer']:>4} | {r['batch']:>5} | {r['variant']:>6} | {r['torch_img_s']:>9.0f} | "
    f"{r['jax_img_s']:>9.0f} | {r['ratio']:>5.2f} ({r['ratio_min']:.2f}–{r['ratio_max']:.2f})"
  )


HEADER = "threads |  opt | batch | jax    | torch img/s | jax img/s | jax/torch median (range)"


def main(argv: list[str] | None = None) -> None:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--threads", default="2", help="comma-separated thread counts; each runs in its own process")
  p.add_argument("--batches", type=int, nargs="+", default=[256, 8192])
  p.add_argument("--optimizers", nargs="+", default=["sgd", "lamb"], choices=["sgd", "lamb", "lamb-project"])
  p.add_argument("--variants", nargs="+", default=["k1", "k10", "acc256"], choices=sorted(VARIANTS))
  p.add_argument("--repeats", type=int, default=7)
  p.add_argument("--min-seconds", type=float, default=1.0, help="length of one timed block")
  p.add_argument("--quick", action="store_true", help="smoke run: batch 256, sgd, 2 repeats of short blocks")
  p.add_argument(
    "--torch-passive-wait",
    action="store_true",
    help="OMP_WAIT_POLICY=PASSIVE for torch: fairer to torch on a loaded machine, where its spinning "
    "OpenMP threads collapse (use only there; on a quiet machine the default is faster)",
  )
  p.add_argument("--json", help="write the rows here")
  p.add_argument("--threads-one", type=int, help=argparse.SUPPRESS)
  args = p.parse_args(argv)
  if args.quick:
    args.batches, args.optimizers, args.repeats, args.min_seconds = [256], ["sgd"], 2, 0.2
  if args.threads_one is not None:  # child: one thread setting
    rows = run_one_setting(args)
    print("ROWS " + json.dumps(rows), flush=True)
    return
  all_rows = []
  for t in [int(s) for s in args.threads.split(",")]:
    env = dict(os.environ)
    if args.torch_passive_wait:
      env["OMP_WAIT_POLICY"] = "PASSIVE"
    if t == 1:  # one core for both frameworks; XLA also told to stay single-threaded
      env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false").strip()
    cmd = [
      sys.executable,
      os.path.abspath(__file__),
      "--threads-one",
      str(t),
      "--batches",
      *map(str, args.batches),
      "--optimizers",
      *args.optimizers,
      "--variants",
      *args.variants,
      "--repeats",
      str(args.repeats),
      "--min-seconds",
      str(args.min_seconds),
    ]
    if t == 1:
      cmd = ["taskset", "-c", "0"] + cmd
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    sys.stderr.write(out.stderr[-4000:] if out.returncode else "")
    for line in out.stdout.splitlines():
      if line.startswith("ROWS "):
        all_rows += [dict(r, threads=t) for r in json.loads(line[5:])]
      else:
        print(line, flush=True)
  print("\n" + HEADER)
  for r in all_rows:
    print(_fmt(r, r["threads"]))
  if args.json:
    with open(args.json, "w") as f:
      json.dump(all_rows, f, indent=1)


if __name__ == "__main__":
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  main()
