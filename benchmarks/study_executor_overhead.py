"""Per-trial overhead of the Ray executor against the local process pool, on identical tiny trials.

  python benchmarks/study_executor_overhead.py [--trials=6] [--repeats=2] [--ray_address=HOST:PORT]

The same tiny study (LeNet-5 on synthetic data, a few steps; one trial per seed, so every trial costs the same)
runs through ``runner.run_study`` one trial at a time, with local child processes and as Ray tasks on a
one-node, one-CPU localhost cluster started here (or the cluster at ``--ray_address``). Each mode runs in a fresh
workdir, ``--repeats`` times, alternating; the table has the best wall time per trial of each mode, the overhead
of Ray per trial and the ratio. The cluster's start and the driver's connection + workdir probe are one-off costs,
printed apart (not in the per-trial numbers). A warm-up trial fills the JAX compilation cache first, so neither mode
pays for compilation.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [_REPO, os.path.join(_REPO, "tests")]  # tests/ray_testing.py: the localhost Ray cluster harness

import ray_testing  # noqa: E402
from lamb_lars.configs.studies import smoke  # noqa: E402
from lamb_lars.study.running import ray_executor, runner  # noqa: E402


def tiny_study(trials: int, cache: str):
  c = smoke.get_config()
  c.base.num_epochs = 0.1875  # 3 steps at batch 32
  c.base.eval_every_epochs = 0.0625
  c.base.checkpoint_every_epochs = 0.0625
  c.sweeps = (dict(name="same", fixed={"batch_size": 32}, grid={"seed": tuple(range(trials))}),)
  c.analysis.techniques = ()
  c.analysis.target_technique = ""
  c.runner.env = {
    "JAX_COMPILATION_CACHE_DIR": cache,
    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
    "JAX_PLATFORMS": "cpu",
    "XLA_FLAGS": "--xla_force_host_platform_device_count=1 --xla_cpu_multi_thread_eigen=false",
  }
  return c


def timed_study(study, workdir: str, executor=None) -> float:
  """Wall seconds of ``run_study``, less the executor's one-off workdir probe (timed apart)."""
  shutil.rmtree(workdir, ignore_errors=True)
  probe = [0.0]
  if executor is not None:
    check = executor.check_workdir

    def timed_check(path):
      t = time.perf_counter()
      check(path)
      probe[0] = time.perf_counter() - t

    executor.check_workdir = timed_check
  t0 = time.perf_counter()
  counts = runner.run_study(study, workdir, num_workers=1, executor=executor, log=lambda s: None, poll_s=0.1)
  wall = time.perf_counter() - t0 - probe[0]
  assert counts["done"] == len(study.sweeps[0]["grid"]["seed"]), counts
  timed_study.last_probe = probe[0]
  return wall


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--trials", type=int, default=6)
  ap.add_argument("--repeats", type=int, default=2)
  ap.add_argument("--ray_address", default=None, help="an existing cluster (default: start a 1-CPU one here)")
  args = ap.parse_args()
  os.environ.pop("XLA_FLAGS", None)
  tmp = tempfile.mkdtemp(prefix="executor_overhead_")
  cache = os.path.join(tempfile.gettempdir(), "lamb_lars_study_test_jax_cache")
  study = tiny_study(args.trials, cache)
  cluster = None
  try:
    warm = tiny_study(1, cache)
    timed_study(warm, os.path.join(tmp, "warmup"))
    t0 = time.perf_counter()
    if args.ray_address is None:
      cluster = ray_testing.LocalRayCluster(nodes=({"num_cpus": 1},), env={"PYTHONPATH": _REPO}).start()
    t_cluster = time.perf_counter() - t0
    walls, connects, probes = {"local": [], "ray": []}, [], []
    for r in range(args.repeats):
      walls["local"].append(timed_study(study, os.path.join(tmp, f"local{r}")))
      t0 = time.perf_counter()  # run_study closes its executor (and the connection): a new one per study
      ex = ray_executor.RayExecutor({"CPU": 1}, address=args.ray_address or cluster.address)
      connects.append(time.perf_counter() - t0)
      walls["ray"].append(timed_study(study, os.path.join(tmp, f"ray{r}"), ex))
      probes.append(timed_study.last_probe)
  finally:
    if cluster is not None:
      cluster.stop()
    shutil.rmtree(tmp, ignore_errors=True)
  n = args.trials
  local, ray = min(walls["local"]) / n, min(walls["ray"]) / n
  print(
    f"{n} identical tiny trials (LeNet-5, synthetic, 3 steps), one at a time; best of {args.repeats}; "
    f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs"
  )
  print(f"{'executor':<9} {'s/trial':>8} {'runs (s/trial)':<28} {'overhead s/trial':>17} {'ratio':>6}")
  for name, per in (("local", local), ("ray", ray)):
    runs = " ".join(f"{w / n:.2f}" for w in walls[name])
    over = "—" if name == "local" else f"{per - local:+.2f}"
    print(f"{name:<9} {per:>8.2f} {runs:<28} {over:>17} {per / local:>6.2f}")
  print(
    f"one-off per study: connect {min(connects):.1f} s, workdir probe on every node {min(probes):.1f} s; "
    f"start a 1-node cluster {t_cluster:.1f} s"
  )


if __name__ == "__main__":
  main()
