"""One-command accelerator check: environment, ResNet-50 throughput + MFU, MNIST-model step time vs batch, one
faithful paper run, and the GPU test subset — in at most ~8 minutes on one GPU (docs/device_check.md).

  bash benchmarks/device_check.sh                      # on the accelerator machine; writes ./device_check_out/
  bash benchmarks/device_check.sh --cpu-dry-run        # every stage at tiny sizes on CPU (≈ 2 min; the test suite)

Writes ``<out>/device_check.json`` (rewritten after every stage, so a killed run keeps what finished) and
``<out>/device_check.md``. ``<out>`` is ``--out``, else ``$OUT`` when set, else ``./device_check_out``.

Stages (run in this order; each is a subprocess with its own time limit, so a crash, OOM or hang in one is
recorded as that stage's failure and the others still run; when the global ``--budget_s`` runs out, the stages
left are recorded as ``skipped``):
  env        jax/jaxlib versions, devices, platform, device kind, the peak TFLOP/s used for MFU, XLA flags in use;
             on GPU it also checks that each flag of ``GPU_XLA_FLAGS`` parses in this jaxlib (unknown ones dropped).
  resnet50   ResNet-50 v1.5 training throughput on synthetic uint8 224² images in bf16 at per-device batches
             128, 256 (and 512 if time allows): the product's own model (``trainer.build_model``), optimizer (the
             config's momentum SGD + WD), and compiled train step (``strategy.train_chunk``), built from
             ``lamb_lars/configs/imagenet_resnet50.py``. img/s; MFU from the analytic FLOPs, and from XLA's
             cost analysis where it counts the convolutions (on GPU they are cuDNN calls it does not count);
             with ``--profile``, a trace of the largest batch summed by kernel category (trace_summary.py).
  step_time  steady-state step time of LeNet-5 and the authors' CNN (mnist_cnn), float32, full batch (no
             micro-batches), at batches 256 … 60,000 (the product's train step on a device-resident batch).
  gpu_tests  ``pytest -m gpu`` over the test files that mark tests ``gpu`` (on CPU they skip; the stage then checks
             that they are collected).
  faithful   ``python train.py --config=lamb_lars/proj/you2020/configs/lars_b8192.py`` in a subprocess: wall time, train
             time, final test accuracy (the authors' log: 99.35%).

The XLA GPU flags are set only for GPU stages (a CPU jaxlib does not know them and aborts on them).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from typing import Any, Dict, List, Optional, Sequence

from benchmarks import trace_summary

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The XLA flags that matter for a one-GPU convnet step, each with why (values as set; checked to exist in the env
# stage, docs: docs.jax.dev gpu_performance_tips, NVIDIA JAX-Toolbox GPU performance):
GPU_XLA_FLAGS = {
  # Schedules independent work (and, on several GPUs, the gradient all-reduce) to overlap; JAX-Toolbox default.
  "--xla_gpu_enable_latency_hiding_scheduler": "true",
  # GEMMs through cuBLAS rather than Triton-generated kernels (JAX-Toolbox's setting for convnets/LLMs; ResNet's
  # convolutions go to cuDNN either way, this only touches the classifier's dense layer and fused dots).
  "--xla_gpu_enable_triton_gemm": "false",
  # Autotune every cuDNN/cuBLAS algorithm choice at compile time (4 = the most thorough, XLA's default; named
  # so that a run with a lowered level is visible).
  "--xla_gpu_autotune_level": "4",
}

# Dense bf16 peak TFLOP/s per chip by device kind (NVIDIA/Google datasheets, without sparsity). First match wins.
PEAK_BF16_TFLOPS = (
  ("H100 PCIe", 756.0),
  ("H100 NVL", 835.0),
  ("H100", 989.0),
  ("H200", 989.0),
  ("H800", 989.0),
  ("GH200", 989.0),
  ("B200", 2250.0),
  ("A100", 312.0),
  ("L40S", 362.0),
  ("L4", 121.0),
  ("A10G", 70.0),
  ("V100", 125.0),
  ("TPU v3", 123.0),
  ("TPU v4", 275.0),
  ("TPU v5 lite", 197.0),
  ("TPU v5e", 197.0),
  ("TPU v5p", 459.0),
  ("TPU v6", 918.0),
)

# Memory bandwidth per chip (TB/s, datasheets) for the roofline bound max(FLOPs / peak, bytes / bandwidth).
HBM_TBPS = (
  ("H100 PCIe", 2.0),
  ("H100 NVL", 3.9),
  ("H100", 3.35),
  ("H200", 4.8),
  ("H800", 3.35),
  ("GH200", 4.0),
  ("B200", 8.0),
  ("A100", 2.0),
  ("L40S", 0.864),
  ("L4", 0.3),
  ("A10G", 0.6),
  ("V100", 0.9),
)

STAGES = ("env", "resnet50", "step_time", "gpu_tests", "faithful")
OPT_IN = ("study",)  # run only when named: --stages=study (issue 61: packed against unpacked trials)
FULL = dict(
  budget_s=450.0,
  resnet_batches=(128, 256, 512),
  resnet_image=224,
  resnet_steps=20,
  cnn_batches=(256, 1024, 4096, 8192, 16384, 32768, 60000),
  cnn_min_time_s=1.0,
  faithful_args=(),
  compile_options=None,
  study=dict(dataset="mnist", trials=64, batch_size=1024, epochs=1.0, pack=64),
)
# Tiny sizes for the CPU dry run: ResNet-50 itself (all 50 layers, real widths) at 32², batch 2; LeNet/CNN at 8, 16;
# the faithful run shortened to 3 steps of 256 (micro-batches of 128) with one evaluation; cheap compiles (the dry
# run checks that every stage works, not its speed; most XLA passes are off as well, set in main()). The budget
# leaves room for a loaded 2-core CPU (≈ 75 s of CPU).
DRY = dict(
  budget_s=420.0,
  resnet_batches=(2,),
  resnet_image=32,
  resnet_steps=2,
  cnn_batches=(8, 16),
  cnn_min_time_s=0.0,
  faithful_args=(
    "--config.num_train_steps=3",
    "--config.batch_size=256",
    "--config.microbatch_size=128",
    "--config.eval_every_steps=3",
    "--config.checkpoint_every_steps=3",
    "--config.optimizer.schedule.warmup_epochs=0.005",
  ),
  compile_options={"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True},
  study=dict(dataset="synthetic", trials=3, batch_size=32, epochs=1.0, pack=3),
)
# Least time a stage needs to be worth starting (s, full run); the dry run scales these by 0.2.
MIN_STAGE_S = {"study": 60, "env": 10, "resnet50": 60, "step_time": 40, "gpu_tests": 20, "faithful": 45}


def peak_tflops(device_kind: str, table: Sequence[tuple] = PEAK_BF16_TFLOPS) -> Optional[float]:
  """Dense bf16 peak of one chip of ``device_kind`` (TFLOP/s; with ``table=HBM_TBPS`` its memory bandwidth in
  TB/s), None when unknown (a CPU, say)."""
  for name, peak in table:
    if name.lower() in device_kind.lower():
      return peak
  return None


# ----------------------------------------------------------------------------------------------------- workers
# Each worker runs in its own process (``--worker=NAME``) and writes its result dict to ``--result`` as it goes.


def _write(path: str, obj: Dict[str, Any]) -> None:
  tmp = path + ".tmp"
  with open(tmp, "w") as f:
    json.dump(obj, f, indent=1, default=str)
  os.replace(tmp, path)


def worker_env(p: Dict[str, Any], out: Dict[str, Any], result: str) -> None:
  import jax  # pylint: disable=import-outside-toplevel
  import jaxlib  # pylint: disable=import-outside-toplevel

  devs = jax.devices()
  kind = devs[0].device_kind
  out.update(
    jax=jax.__version__,
    jaxlib=jaxlib.__version__,
    python=platform.python_version(),
    host=platform.node(),
    host_cpus=os.cpu_count(),
    platform=jax.default_backend(),
    device_kind=kind,
    devices=[str(d) for d in devs],
    device_count=len(devs),
    xla_flags=os.environ.get("XLA_FLAGS", ""),
    jax_platforms=os.environ.get("JAX_PLATFORMS", ""),
  )
  peak = p.get("peak_tflops") or peak_tflops(kind)
  out["peak_bf16_tflops"] = peak
  out["hbm_tb_s"] = peak_tflops(kind, HBM_TBPS)
  out["peak_source"] = "--peak_tflops" if p.get("peak_tflops") else ("datasheet table" if peak else "unknown")
  try:
    stats = devs[0].memory_stats() or {}
    out["device_memory_gib"] = round(stats.get("bytes_limit", 0) / 2**30, 2) or None
  except Exception:  # pylint: disable=broad-except
    out["device_memory_gib"] = None
  _write(result, out)


def _product_step(config: Any, batch: int, seed: int = 0, compile_options: Optional[Dict[str, Any]] = None):
  """The product's compiled train step for ``config`` on one device, exactly as ``trainer._train`` builds it
  (model with its BN wiring, optimizer from config, step options, jit + shard_map chunk of one step), and one
  synthetic uint8 batch already on the device. Returns (compiled, state, args, model)."""
  import jax  # pylint: disable=import-outside-toplevel
  import numpy as np  # pylint: disable=import-outside-toplevel
  from lamb_lars import input_pipeline  # pylint: disable=import-outside-toplevel
  from lamb_lars.train import mesh as mesh_lib, parallel, run_optimizer, trainer, validate  # pylint: disable=import-outside-toplevel

  devices = jax.devices()[:1]
  info = validate.dataset_info(config)
  plan = validate.validate(config, devices, info)
  tx, _ = run_optimizer.create_optimizer(config, plan)
  mesh = mesh_lib.make_mesh(plan.bn.group_devices, devices)
  strategy = parallel.make(config, mesh)
  model = trainer.build_model(config, plan, strategy)
  opts = trainer.step_options(config, plan)
  state, key = trainer.create_train_state(model, tx, mesh, info.image_shape, seed)
  preprocess = lambda im, lab, rng: input_pipeline.preprocess(
    im, lab, dataset=config.dataset, train=True, rng=rng, scaling=config.input_scaling
  )
  fn = strategy.train_chunk(model, tx, opts, preprocess, resident=False)
  rng = np.random.default_rng(seed)
  images = rng.integers(0, 256, (1, batch) + tuple(info.image_shape), dtype=np.uint8)
  labels = rng.integers(0, config.num_classes, (1, batch), dtype=np.int32)
  args = strategy.put_batch(images, labels, key)
  t0 = time.perf_counter()
  compiled = fn.lower(state, *args).compile(compiler_options=compile_options)
  return compiled, state, args, time.perf_counter() - t0


def _flops(compiled: Any) -> tuple:
  cost = compiled.cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else (cost or {})
  return float(cost.get("flops", float("nan"))), float(cost.get("bytes accessed", float("nan")))


def _time_steps(compiled: Any, state: Any, args: tuple, warmup: int, steps: int, min_time_s: float = 0.0):
  """(seconds per step in steady state, steps timed, last loss, state): ``warmup`` untimed calls, then calls dispatched
  back to back (as the trainer does) until ``steps`` calls and ``min_time_s`` have passed, blocked once at the end."""
  import jax  # pylint: disable=import-outside-toplevel

  for _ in range(warmup):
    state, metrics = compiled(state, *args)
    jax.block_until_ready(metrics)
  n, t0 = 0, time.perf_counter()
  while n < steps or time.perf_counter() - t0 < min_time_s:
    state, metrics = compiled(state, *args)
    n += 1
    if n % 10 == 0:
      jax.block_until_ready(metrics)
  jax.block_until_ready(metrics)
  dt = (time.perf_counter() - t0) / n
  return dt, n, float(jax.device_get(metrics["train_loss"])[-1]), state


def _profile(compiled: Any, state: Any, args: tuple, out_dir: str) -> str:
  """A ``jax.profiler`` trace of 3 steps, packed into one file ``<out>/resnet50_trace.tar.gz`` (open the
  ``.xplane.pb`` inside with TensorBoard's profile plugin or xprof); returns its path."""
  import tarfile  # pylint: disable=import-outside-toplevel
  import jax  # pylint: disable=import-outside-toplevel

  tmp = tempfile.mkdtemp(prefix="device_check_trace_")
  with jax.profiler.trace(tmp):
    for _ in range(3):
      state, metrics = compiled(state, *args)
    jax.block_until_ready(metrics)
  path = os.path.join(out_dir, "resnet50_trace.tar.gz")
  with tarfile.open(path, "w:gz") as tar:
    tar.add(tmp, arcname="resnet50_trace")
  shutil.rmtree(tmp, ignore_errors=True)
  return path


def _is_oom(e: Exception) -> bool:
  s = str(e)
  return "RESOURCE_EXHAUSTED" in s or "out of memory" in s.lower()


def worker_resnet50(p: Dict[str, Any], out: Dict[str, Any], result: str) -> None:
  import jax  # pylint: disable=import-outside-toplevel
  from lamb_lars.configs import imagenet_resnet50  # pylint: disable=import-outside-toplevel
  from lamb_lars.models import create_model  # pylint: disable=import-outside-toplevel
  from benchmarks.resnet_throughput import analytic_train_flops  # pylint: disable=import-outside-toplevel

  size, peak = p["resnet_image"], p.get("peak")
  out.update(
    model="resnet50 v1.5 (lamb_lars.models, lamb_lars/configs/imagenet_resnet50.py recipe)",
    dtype="bfloat16",
    image=size,
    data="synthetic uint8, on device (input pipeline excluded)",
    peak_bf16_tflops=peak,
    analytic_gflop_img=analytic_train_flops(create_model("resnet50", num_classes=1000), size) / 1e9,
    rows=[],
  )
  _write(result, out)
  deadline = time.time() + p["time_left_s"]
  for batch in p["resnet_batches"]:
    if out["rows"] and time.time() + 2.5 * out["rows"][-1]["compile_s"] > deadline:
      out["rows"].append(dict(batch=batch, status="skipped (time)"))
      continue
    config = imagenet_resnet50.get_config(batch)
    config.dataset = "synthetic"
    config.synthetic.image_shape = (size, size, 3)
    config.synthetic.num_classes = 1000
    config.synthetic.num_train = batch
    config.synthetic.num_eval = batch
    config.image_size = size
    config.num_train_steps = 100
    config.num_devices = 1
    row: Dict[str, Any] = dict(batch=batch)
    try:
      compiled, state, args, compile_s = _product_step(config, batch, compile_options=p["compile_options"])
      flops, nbytes = _flops(compiled)
      dt, n, loss, state = _time_steps(compiled, state, args, warmup=3, steps=p["resnet_steps"])
      row.update(
        status="ok",
        compile_s=compile_s,
        step_ms=1e3 * dt,
        steps_timed=n,
        img_s=batch / dt,
        xla_gflop_step=flops / 1e9,
        xla_gflop_img=flops / batch / 1e9,
        xla_gbytes_step=nbytes / 1e9,
        loss=loss,
        finite=bool(loss == loss and abs(loss) < 1e30),
      )
      # On GPU the convolutions are cuDNN custom calls, whose FLOPs and bytes XLA's cost analysis does not count
      # (the H200 check of 2026-11-28: 0.40 of 24.5 GFLOP/img); then only the analytic MFU means anything.
      counted = flops >= 0.5 * out["analytic_gflop_img"] * 1e9 * batch
      if not counted:
        out["xla_cost_note"] = (
          f"XLA's cost analysis counts {flops / batch / 1e9:.2f} of the {out['analytic_gflop_img']:.2f} analytic "
          "GFLOP/img: the convolutions are library (cuDNN) calls it does not count, so MFU (XLA) and the roofline "
          "are left out; MFU (analytic) is the figure."
        )
      if peak:
        row["mfu_analytic"] = out["analytic_gflop_img"] * 1e9 * batch / dt / (peak * 1e12)
      if peak and counted:
        row["mfu_xla"] = flops / dt / (peak * 1e12)
        if p.get("hbm"):  # roofline: the step can take no less than its FLOPs at peak or its bytes at bandwidth
          row["roofline_ms"] = 1e3 * max(flops / (peak * 1e12), nbytes / (p["hbm"] * 1e12))
          row["bound"] = "memory" if nbytes / (p["hbm"] * 1e12) > flops / (peak * 1e12) else "compute"
      if p.get("profile") and batch == p["resnet_batches"][-1]:
        try:
          row["profile"] = _profile(compiled, state, args, p["out"])
          events = trace_summary.device_events(trace_summary.load(row["profile"]))
          if events:  # a CPU trace has no device events
            out["profile_summary"] = trace_summary.summarize(events, steps=3)
        except Exception as e:  # pylint: disable=broad-except
          row["profile_error"] = f"{type(e).__name__}: {str(e)[:300]}"
      del state, args, compiled
    except Exception as e:  # pylint: disable=broad-except
      row.update(status="OOM" if _is_oom(e) else "error", error=f"{type(e).__name__}: {str(e)[:300]}")
    out["rows"].append(row)
    _write(result, out)
    jax.clear_caches()
  ok = [r for r in out["rows"] if r.get("status") == "ok"]
  if not ok:
    raise RuntimeError("no ResNet-50 batch ran: " + "; ".join(r.get("error", r["status"]) for r in out["rows"]))
  best = max(ok, key=lambda r: r["img_s"])
  out.update(best_img_s=best["img_s"], best_batch=best["batch"], target_img_s=5000, meets_target=best["img_s"] >= 5000)


def worker_step_time(p: Dict[str, Any], out: Dict[str, Any], result: str) -> None:
  import jax  # pylint: disable=import-outside-toplevel
  from lamb_lars.configs import mnist_lenet  # pylint: disable=import-outside-toplevel
  from lamb_lars.proj.you2020.configs import lars_b8192  # pylint: disable=import-outside-toplevel

  out.update(dtype="float32", data="synthetic uint8 28×28×1 on device", micro_batches=1, rows=[])
  deadline = time.time() + p["time_left_s"]
  for name, get_config in (("lenet5", mnist_lenet.get_config), ("mnist_cnn", lars_b8192.get_config)):
    for batch in p["cnn_batches"]:
      row: Dict[str, Any] = dict(model=name, batch=batch)
      # A compile takes longer with the batch on GPU (cuDNN autotuning runs each candidate at the full batch: the
      # CNN's 10 s at 8K, 39 s at 32K on an H200), so the next one is predicted from the last, scaled by the batch.
      last = next((r for r in reversed(out["rows"]) if r.get("model") == name and r.get("compile_s")), None)
      predicted = 0.0 if last is None else last["compile_s"] * max(1.0, batch / last["batch"])
      if time.time() + 1.5 * predicted > deadline - 5:
        row["status"] = "skipped (time)"
        out["rows"].append(row)
        continue
      config = get_config()
      config.dataset = "synthetic"
      config.synthetic.image_shape = (28, 28, 1)
      config.synthetic.num_classes = 10
      config.synthetic.num_train = batch
      config.synthetic.num_eval = 16
      config.batch_size = batch
      config.num_train_steps = 100
      config.microbatch_size = 0
      config.num_microbatches = 1
      config.num_devices = 1
      try:
        compiled, state, args, compile_s = _product_step(config, batch, compile_options=p["compile_options"])
        flops, _ = _flops(compiled)
        dt, n, loss, state = _time_steps(compiled, state, args, warmup=2, steps=3, min_time_s=p["cnn_min_time_s"])
        row.update(
          status="ok",
          compile_s=compile_s,
          step_ms=1e3 * dt,
          steps_timed=n,
          img_s=batch / dt,
          xla_gflop_step=flops / 1e9,
          tflop_s=flops / dt / 1e12,
          loss=loss,
        )
        del state, args, compiled
      except Exception as e:  # pylint: disable=broad-except
        row.update(status="OOM" if _is_oom(e) else "error", error=f"{type(e).__name__}: {str(e)[:300]}")
      out["rows"].append(row)
      _write(result, out)
      jax.clear_caches()
  if not any(r.get("status") == "ok" for r in out["rows"]):
    raise RuntimeError("no step-time row ran")


WORKERS = {"env": worker_env, "resnet50": worker_resnet50, "step_time": worker_step_time}


def run_worker(name: str, params_json: str, result: str) -> int:
  p = json.loads(params_json)
  out: Dict[str, Any] = {}
  try:
    WORKERS[name](p, out, result)
    out["status"] = "ok"
    rc = 0
  except Exception as e:  # pylint: disable=broad-except
    out.update(status="error", error=f"{type(e).__name__}: {e}", traceback=traceback.format_exc()[-3000:])
    rc = 1
  _write(result, out)
  return rc


# -------------------------------------------------------------------------------------------------- orchestrator


def _env(platform_name: Optional[str], flags: Sequence[str]) -> Dict[str, str]:
  """The environment of a stage's subprocess: this tree first on PYTHONPATH; the GPU flags only on GPU."""
  env = dict(os.environ)
  env["PYTHONPATH"] = REPO + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
  env["PYTHONUNBUFFERED"] = "1"
  env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  if platform_name == "gpu":
    base = env.get("XLA_FLAGS", "")
    env["XLA_FLAGS"] = " ".join([base] + list(flags)).strip()
  return env


def _run(cmd: List[str], env: Dict[str, str], timeout: float, log_path: str) -> tuple:
  """(returncode or 'timeout', seconds); stdout+stderr go to ``log_path``."""
  t0 = time.perf_counter()
  with open(log_path, "w") as log:
    proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
      rc: Any = proc.wait(timeout=max(timeout, 1.0))
    except subprocess.TimeoutExpired:
      os.killpg(proc.pid, 9)  # the stage's own process group: the worker and anything it started
      proc.wait()
      rc = "timeout"
  return rc, time.perf_counter() - t0


def _tail(path: str, n: int = 1500) -> str:
  try:
    with open(path, errors="replace") as f:
      return f.read()[-n:]
  except OSError:
    return ""


def check_flags(env: Dict[str, str], flags: Sequence[str], log_dir: str) -> tuple:
  """(flags this jaxlib accepts, rejected ones): all at once, else one by one."""
  probe = [sys.executable, "-c", "import jax, jax.numpy as jnp; jnp.zeros(1).block_until_ready()"]

  def ok(fl):
    e = dict(env)
    e["XLA_FLAGS"] = " ".join([env.get("XLA_FLAGS", "")] + list(fl)).strip()
    return _run(probe, e, 120, os.path.join(log_dir, ".flag_probe.log"))[0] == 0

  try:
    if ok(flags):
      return list(flags), []
    good = [f for f in flags if ok([f])]
    return good, [f for f in flags if f not in good]
  finally:
    if os.path.exists(os.path.join(log_dir, ".flag_probe.log")):
      os.remove(os.path.join(log_dir, ".flag_probe.log"))


def stage_worker(name: str, a: Any, ctx: Dict[str, Any], timeout: float) -> Dict[str, Any]:
  result = os.path.join(a.out, f".{name}.json")
  if os.path.exists(result):
    os.remove(result)
  params = dict(
    ctx["sizes"],
    peak=ctx.get("peak"),
    hbm=ctx.get("hbm"),
    peak_tflops=a.peak_tflops,
    time_left_s=timeout - 15,
    profile=a.profile,
    out=a.out,
  )
  cmd = [
    sys.executable,
    os.path.abspath(__file__),
    f"--worker={name}",
    f"--params={json.dumps(params)}",
    f"--result={result}",
  ]
  log = os.path.join(a.out, f"{name}.log")
  rc, secs = _run(cmd, _env(ctx.get("platform"), ctx.get("flags", [])), timeout, log)
  try:
    with open(result) as f:
      out = json.load(f)
  except (OSError, ValueError):
    out = {}
  if rc == "timeout":
    out.update(status="timeout", error=f"killed after {timeout:.0f} s (rows finished before are kept)")
  elif rc != 0 and out.get("status") != "error":
    out.update(status="error", error=f"exit status {rc}: {_tail(log, 600)}")
  if os.path.exists(result):
    os.remove(result)
  return out


def stage_env(a: Any, ctx: Dict[str, Any], timeout: float) -> Dict[str, Any]:
  out = stage_worker("env", a, ctx, timeout)
  ctx["platform"] = out.get("platform")
  ctx["peak"] = out.get("peak_bf16_tflops")
  ctx["hbm"] = out.get("hbm_tb_s")
  if ctx["platform"] == "gpu":
    wanted = [f"{k}={v}" for k, v in GPU_XLA_FLAGS.items()]
    good, bad = check_flags(_env(None, []), wanted, a.out)
    ctx["flags"] = good
    out.update(gpu_xla_flags=good, gpu_xla_flags_rejected=bad)
  else:
    ctx["flags"] = []
    out.update(gpu_xla_flags=[], gpu_xla_flags_note=f"not set: platform {ctx['platform']!r} (GPU-only flags)")
  return out


def stage_gpu_tests(a: Any, ctx: Dict[str, Any], timeout: float) -> Dict[str, Any]:
  env = _env(ctx.get("platform"), ctx.get("flags", []))
  # tests/conftest.py defaults to 8 fake CPU devices; on a GPU machine the gpu tests must see the GPU.
  if ctx.get("platform") == "gpu":
    env["JAX_PLATFORMS"] = ""
    env.setdefault("XLA_FLAGS", "")
  # Only the files that mark tests gpu are collected (collecting all of tests/ takes ~30 s on a 2-core CPU).
  files = sorted(
    os.path.join("tests", f)
    for f in os.listdir(os.path.join(REPO, "tests"))
    if f.startswith("test_")
    and f.endswith(".py")
    and "mark.gpu" in open(os.path.join(REPO, "tests", f), encoding="utf-8").read()
  )
  cmd = [
    sys.executable,
    "-m",
    "pytest",
    "-m",
    "gpu",
    "-q",
    "-p",
    "no:cacheprovider",
    "-p",
    "no:xdist",
    "-rs",
    *(files or ["tests/"]),
  ]
  log = os.path.join(a.out, "gpu_tests.log")
  rc, _ = _run(cmd, env, timeout, log)
  text = _tail(log, 4000)
  counts = {k: int(v) for v, k in re.findall(r"(\d+) (passed|failed|skipped|deselected|errors?)", text)}
  out: Dict[str, Any] = dict(command=" ".join(cmd[1:]), counts=counts, tail=text[-800:])
  if rc == "timeout":
    out.update(status="timeout", error=f"killed after {timeout:.0f} s")
  elif rc != 0 or counts.get("failed") or counts.get("error") or counts.get("errors"):
    out.update(status="error", error=f"pytest exit status {rc}")
  elif not (counts.get("passed") or counts.get("skipped")):
    out.update(status="error", error="no gpu-marked test was collected")
  elif ctx.get("platform") == "gpu" and not counts.get("passed"):
    out.update(status="error", error="on a GPU every gpu test skipped")
  else:
    out["status"] = "ok"
  return out


def stage_faithful(a: Any, ctx: Dict[str, Any], timeout: float) -> Dict[str, Any]:
  # A fresh workdir outside <out> (a finished one would only return its recorded result; and the device tool brings
  # back at most 8 files from $OUT): its result.json and last metrics row are copied into the report.
  workdir = os.path.join(tempfile.mkdtemp(prefix="device_check_"), "faithful_lars_b8192")
  cmd = [
    sys.executable,
    "train.py",
    "--config=lamb_lars/proj/you2020/configs/lars_b8192.py",
    f"--workdir={workdir}",
    "--config.seed=0",
    "--config.progress=False",
    *ctx["sizes"]["faithful_args"],
  ]
  rc, secs = _run(cmd, _env(ctx.get("platform"), ctx.get("flags", [])), timeout, os.path.join(a.out, "faithful.log"))
  out: Dict[str, Any] = dict(command=" ".join(cmd[1:]), wall_s=secs, paper_accuracy=0.9935)
  try:
    with open(os.path.join(workdir, "result.json")) as f:
      res = json.load(f)
  except (OSError, ValueError):
    res = {}
  final = res.get("final") or {}
  out.update(
    result_status=res.get("status"),
    steps=res.get("step"),
    train_time_s=res.get("train_time"),
    compile_time_s=final.get("compile_time"),
    eval_accuracy=final.get("eval_accuracy"),
    eval_loss=final.get("eval_loss"),
  )
  if rc == "timeout":
    out.update(status="timeout", error=f"killed after {timeout:.0f} s")
  elif rc != 0 or res.get("status") != "done":
    out.update(status="error", error=f"exit status {rc}: {_tail(os.path.join(a.out, 'faithful.log'), 600)}")
  else:
    out["status"] = "ok"
  out["result"] = res
  shutil.rmtree(os.path.dirname(workdir), ignore_errors=True)
  return out


# A fixed MNIST study for --stages=study: LeNet-5 at one batch size, ``trials`` learning rates (log-spaced over two
# decades, one seed each), ``epochs`` each, evaluations every epoch; the same study run unpacked and packed.
STUDY_WORKER = """
import json, sys, time
from lamb_lars.configs import mnist_lenet
from lamb_lars.study.running import runner
import ml_collections
p = json.loads(sys.argv[1])
base = mnist_lenet.get_config()
base.dataset, base.progress, base.batch_size, base.num_epochs = p["dataset"], False, p["batch_size"], p["epochs"]
base.eval_every_epochs = base.checkpoint_every_epochs = p["epochs"]
base.optimizer.lr_table = True
base.diagnostics.noise_scale = False
if p["dataset"] == "synthetic":
  base.synthetic.num_train, base.synthetic.num_eval, base.eval_batch_size = 256, 64, 64
n = p["trials"]
lrs = tuple(round(0.01 * 100 ** (i / max(n - 1, 1)), 6) for i in range(n))
from lamb_lars.configs.studies import common
study = ml_collections.ConfigDict(dict(name="device_study", base=base,
  sweeps=(dict(name="lr", role="search", grid={"optimizer.learning_rate": lrs}),)))
study.search = common.search(pruner="none", max_extensions=0, min_full_budget=0)  # exactly the trials above
study.replicates = common.replicates(num_seeds=0)
t0 = time.perf_counter()
counts = runner.run_study(study, p["workdir"], pack=p["pack"], poll_s=0.05, status_every_s=0, log=lambda s: None)
print(json.dumps(dict(wall_s=time.perf_counter() - t0, counts=counts)))
"""


def _gpu_utilisation(stop: threading.Event, samples: List[float]) -> None:
  """Samples ``nvidia-smi``'s GPU utilisation (%) once a second until ``stop`` (nothing without nvidia-smi)."""
  while not stop.is_set():
    try:
      out = subprocess.run(
        ["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
      ).stdout
      samples.extend(float(x) for x in out.split() if x.strip())
    except (OSError, ValueError, subprocess.TimeoutExpired):
      return
    stop.wait(1.0)


def _study_run(a: Any, ctx: Dict[str, Any], pack: int, timeout: float) -> Dict[str, Any]:
  """One run of the fixed study with ``pack`` trials per process: trials/hour, compile time, GPU utilisation."""
  params = dict(ctx["sizes"]["study"], pack=pack, workdir=tempfile.mkdtemp(prefix=f"device_study_pack{pack}_"))
  samples: List[float] = []
  stop = threading.Event()
  watcher = threading.Thread(target=_gpu_utilisation, args=(stop, samples), daemon=True)
  if shutil.which("nvidia-smi"):
    watcher.start()
  log = os.path.join(a.out, f"study_pack{pack}.log")
  cmd = [sys.executable, "-c", STUDY_WORKER, json.dumps(params)]
  rc, secs = _run(cmd, _env(ctx.get("platform"), ctx.get("flags", [])), timeout, log)
  stop.set()
  compile_s = []
  runs = os.path.join(params["workdir"], "runs")
  for rid in sorted(os.listdir(runs)) if os.path.isdir(runs) else []:
    try:
      with open(os.path.join(runs, rid, "result.json")) as f:
        compile_s.append(float((json.load(f).get("final") or {}).get("compile_time") or 0.0))
    except (OSError, ValueError):
      pass
  done = len(compile_s)
  out: Dict[str, Any] = dict(
    pack=pack,
    trials=params["trials"],
    finished=done,
    wall_s=secs,
    trials_per_hour=3600.0 * done / secs if secs else None,
    compile_s_per_process=(sum(compile_s) / done) if done else None,
    gpu_util_mean=(sum(samples) / len(samples)) if samples else None,
    status="ok" if rc == 0 and done == params["trials"] else "error",
  )
  if out["status"] != "ok":
    out["error"] = f"exit status {rc}, {done}/{params['trials']} trials: {_tail(log, 600)}"
  shutil.rmtree(params["workdir"], ignore_errors=True)
  return out


def stage_study(a: Any, ctx: Dict[str, Any], timeout: float) -> Dict[str, Any]:
  """The fixed study unpacked (``--pack=1``) and packed (``--pack=K``) in one call; trials/hour for each."""
  k = int(ctx["sizes"]["study"]["pack"])
  rows = []
  for pack in (1, k):
    rows.append(_study_run(a, ctx, pack, timeout / 2))
  bad = [r for r in rows if r["status"] != "ok"]
  out: Dict[str, Any] = dict(rows=rows, study=ctx["sizes"]["study"], status="error" if bad else "ok")
  try:  # what docs/BENCHMARKS.md records beside the numbers: the commit and the load
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False)
    out["commit"] = head.stdout.strip() or None
  except OSError:
    out["commit"] = None
  out["load_1min"] = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
  if bad:
    out["error"] = bad[0]["error"]
  if not bad and rows[0]["trials_per_hour"]:
    out["speedup"] = rows[1]["trials_per_hour"] / rows[0]["trials_per_hour"]
  return out


STAGE_FNS = {
  "study": lambda a, c, t: stage_study(a, c, t),
  "env": stage_env,
  "resnet50": lambda a, c, t: stage_worker("resnet50", a, c, t),
  "step_time": lambda a, c, t: stage_worker("step_time", a, c, t),
  "gpu_tests": stage_gpu_tests,
  "faithful": stage_faithful,
}
STAGE_CAP_S = {"study": 400, "env": 90, "resnet50": 240, "step_time": 200, "gpu_tests": 120, "faithful": 240}


def _fmt(v: Any, spec: str = "{:.1f}") -> str:
  if v is None:
    return ""
  if isinstance(v, float):
    return spec.format(v)
  return str(v)


def markdown(report: Dict[str, Any]) -> str:
  """The summary: one table per stage."""
  st, lines = report["stages"], []
  env = st.get("env", {})
  lines += [
    f"# Device check — {report['date']}",
    "",
    f"Command: `{report['command']}`  ",
    f"Device: {env.get('device_kind')} × {env.get('device_count')} "
    f"({env.get('platform')}), jax {env.get('jax')}, host CPUs {env.get('host_cpus')}  ",
    f"XLA flags: `{' '.join(env.get('gpu_xla_flags') or []) or env.get('gpu_xla_flags_note', '')}`  ",
    f"Peak for MFU: {env.get('peak_bf16_tflops')} TFLOP/s bf16 dense ({env.get('peak_source')}); memory "
    f"bandwidth for the roofline: {env.get('hbm_tb_s')} TB/s  ",
    f"Total: {report['total_s']:.0f} s of budget {report['budget_s']:.0f} s",
    "",
    "| stage | status | seconds | note |",
    "|---|---|---|---|",
  ]
  for name in [n for n in STAGES + OPT_IN if n in st]:
    s = st[name]
    lines.append(
      f"| {name} | {s.get('status', '')} | {_fmt(s.get('seconds'), '{:.0f}')} | "
      f"{str(s.get('error', ''))[:120].replace('|', '/').replace(chr(10), ' ')} |"
    )
  r = st.get("resnet50", {})
  if r.get("rows"):
    lines += [
      "",
      f"## ResNet-50 v1.5 training, bf16, {r.get('image')}², synthetic (the product's train step)",
      "",
      "| batch | step ms | img/s | XLA GFLOP/img | XLA GB/step | MFU (XLA) | MFU (analytic) | roofline ms "
      "(bound) | compile s | status |",
      "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in r["rows"]:
      lines.append(
        f"| {row['batch']} | {_fmt(row.get('step_ms'))} | {_fmt(row.get('img_s'), '{:.0f}')} | "
        f"{_fmt(row.get('xla_gflop_img'), '{:.2f}')} | {_fmt(row.get('xla_gbytes_step'), '{:.1f}')} | "
        f"{_fmt(row.get('mfu_xla'), '{:.1%}')} | {_fmt(row.get('mfu_analytic'), '{:.1%}')} | "
        f"{_fmt(row.get('roofline_ms'))} {('(' + row['bound'] + ')') if row.get('bound') else ''} | "
        f"{_fmt(row.get('compile_s'))} | {row.get('status')} |"
      )
    lines.append(
      f"\nAnalytic: {r.get('analytic_gflop_img', 0):.2f} GFLOP/img (3 × 2 × conv/dense MACs). "
      f"Aim: ≥ 5,000 img/s on one H100."
    )
    if r.get("xla_cost_note"):
      lines.append(f"\n{r['xla_cost_note']}")
    if r.get("profile_summary"):
      lines += [
        "",
        "### Where the largest batch's device time goes (3 traced steps; benchmarks/trace_summary.py)",
        "",
        trace_summary.markdown(r["profile_summary"]),
      ]
  s = st.get("step_time", {})
  if s.get("rows"):
    lines += [
      "",
      "## Step time vs batch, float32, full batch (the product's train step, batch on device)",
      "",
      "| model | batch | step ms | img/s | TFLOP/s (XLA) | compile s | status |",
      "|---|---|---|---|---|---|---|",
    ]
    for row in s["rows"]:
      lines.append(
        f"| {row['model']} | {row['batch']} | {_fmt(row.get('step_ms'), '{:.2f}')} | "
        f"{_fmt(row.get('img_s'), '{:.0f}')} | {_fmt(row.get('tflop_s'), '{:.2f}')} | "
        f"{_fmt(row.get('compile_s'))} | {row.get('status')} |"
      )
  f = st.get("faithful", {})
  if f.get("command"):
    acc = f.get("eval_accuracy")
    lines += [
      "",
      "## Faithful run",
      "",
      f"`{f['command']}`: status {f.get('status')}, wall {_fmt(f.get('wall_s'))} s, "
      f"train {_fmt(f.get('train_time_s'))} s, compile {_fmt(f.get('compile_time_s'))} s, "
      f"{f.get('steps')} steps, test accuracy {acc if acc is None else f'{100 * acc:.2f}%'} "
      f"(authors' log: 99.35%).",
    ]
  y = st.get("study", {})
  if y.get("rows"):
    lines += [
      "",
      f"## A fixed study, unpacked and packed: {y.get('study')}",
      "",
      "| pack | trials | wall s | trials/hour | compile s / process | GPU util % | status |",
      "|---|---|---|---|---|---|---|",
    ]
    for row in y["rows"]:
      lines.append(
        f"| {row['pack']} | {row['finished']}/{row['trials']} | {_fmt(row.get('wall_s'))} | "
        f"{_fmt(row.get('trials_per_hour'), '{:.0f}')} | {_fmt(row.get('compile_s_per_process'))} | "
        f"{_fmt(row.get('gpu_util_mean'), '{:.0f}')} | {row.get('status')} |"
      )
    lines.append(
      f"\nAim: ≥ 1,500 LeNet-5 trials/hour on one H100/H200; packed/unpacked {_fmt(y.get('speedup'), '{:.2f}')}×."
    )
  g = st.get("gpu_tests", {})
  if g.get("command"):
    lines += ["", "## GPU tests", "", f"`{g['command']}`: {g.get('counts')}"]
  return "\n".join(lines) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--cpu-dry-run", action="store_true", help="every stage at tiny sizes (CPU, about 2 minutes)")
  p.add_argument("--out", default=None, help="output folder (default $OUT, else ./device_check_out)")
  p.add_argument("--budget_s", type=float, default=None, help="global time budget (default 450; dry run 420)")
  p.add_argument("--stages", default=",".join(STAGES), help=f"comma-separated subset of {','.join(STAGES + OPT_IN)}")
  p.add_argument("--peak_tflops", type=float, default=None, help="override the device's bf16 peak for MFU")
  p.add_argument(
    "--profile",
    action="store_true",
    help="also trace 3 ResNet-50 steps at the largest batch into <out>/resnet50_trace.tar.gz",
  )
  p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
  p.add_argument("--params", default=None, help=argparse.SUPPRESS)
  p.add_argument("--result", default=None, help=argparse.SUPPRESS)
  a = p.parse_args(argv)
  if a.worker:
    return run_worker(a.worker, a.params, a.result)
  stages = [s.strip() for s in a.stages.split(",") if s.strip()]
  unknown = [s for s in stages if s not in STAGES + OPT_IN]
  if unknown:
    print(
      f"device_check: unknown stage(s) {', '.join(unknown)}; choose from {', '.join(STAGES + OPT_IN)}.",
      file=sys.stderr,
    )
    return 2
  if "env" not in stages:
    stages.insert(0, "env")  # every other stage needs the platform it finds
  if a.peak_tflops is not None and not a.peak_tflops > 0:
    print("device_check: --peak_tflops must be a positive number of TFLOP/s.", file=sys.stderr)
    return 2
  sizes = dict(DRY if a.cpu_dry_run else FULL)
  budget = float(a.budget_s or sizes.pop("budget_s"))
  sizes.pop("budget_s", None)
  a.out = os.path.abspath(a.out or os.environ.get("OUT") or "device_check_out")
  os.makedirs(a.out, exist_ok=True)
  if a.cpu_dry_run:
    os.environ["JAX_PLATFORMS"] = "cpu"
    # Most of XLA's passes off in every stage's process (flax's test setting): the dry run checks that each stage
    # works, not its speed, and compiling ResNet-50 and the MNIST models is most of its time (95 s → 78 s here).
    os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")
  report: Dict[str, Any] = dict(
    date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    command="bash benchmarks/device_check.sh " + " ".join(sys.argv[1:]),
    dry_run=a.cpu_dry_run,
    budget_s=budget,
    stages={},
  )
  ctx: Dict[str, Any] = dict(sizes=sizes)
  t_start = time.perf_counter()
  scale = 0.2 if a.cpu_dry_run else 1.0
  for name in STAGES + OPT_IN:
    if name not in stages:
      continue
    left = budget - (time.perf_counter() - t_start)
    if left < MIN_STAGE_S[name] * scale:
      report["stages"][name] = dict(status="skipped", error=f"budget: {left:.0f} s left")
    else:
      t0 = time.perf_counter()
      print(f"[device_check] {name} (≤ {min(left, STAGE_CAP_S[name]):.0f} s) ...", file=sys.stderr, flush=True)
      try:
        res = STAGE_FNS[name](a, ctx, min(left, STAGE_CAP_S[name]))
      except Exception as e:  # pylint: disable=broad-except
        res = dict(status="error", error=f"{type(e).__name__}: {e}", traceback=traceback.format_exc()[-2000:])
      res["seconds"] = time.perf_counter() - t0
      report["stages"][name] = res
      print(f"[device_check] {name}: {res.get('status')} in {res['seconds']:.0f} s", file=sys.stderr, flush=True)
    report["total_s"] = time.perf_counter() - t_start
    _write(os.path.join(a.out, "device_check.json"), report)
  report["total_s"] = time.perf_counter() - t_start
  _write(os.path.join(a.out, "device_check.json"), report)
  md = markdown(report)
  with open(os.path.join(a.out, "device_check.md"), "w") as f:
    f.write(md)
  print(md)
  failed = [n for n, s in report["stages"].items() if s.get("status") != "ok"]
  print(f"[device_check] wrote {a.out}/device_check.json and .md; not ok: {failed or 'none'}", file=sys.stderr)
  return 1 if failed else 0


if __name__ == "__main__":
  sys.exit(main())
