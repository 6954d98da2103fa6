"""Reaching a Ray cluster and sizing trials for it: connect with one-sentence errors (Ray missing, nothing
listening, not a Ray cluster, a hung ``ray.init``), map ``study.runner.resources`` to Ray task options, and count
how many trials the alive nodes hold at once (refusing a request no node can hold). Used by ray_executor.py.
"""

from __future__ import annotations

import contextlib
import logging
import math
import signal
import socket
import threading
from typing import Any, Mapping, Optional

DEFAULT_RESOURCES = {"CPU": 1.0}


def import_ray():
  """The ``ray`` module, or a one-sentence ValueError when it is not installed."""
  try:
    import ray  # noqa: PLC0415
  except ImportError:
    raise ValueError("--executor=ray needs Ray: pip install -e .[ray]") from None
  return ray


def first_line(e: BaseException) -> str:
  text = str(e).strip()
  return text.splitlines()[0].rstrip(".") if text else type(e).__name__


def connect(address: Optional[str] = None, *, timeout_s: float = 5.0, init_timeout_s: float = 120.0):
  """Connects this process to a Ray cluster and returns the ``ray`` module.

  ``address``: ``HOST:PORT`` of the head's GCS (``ray start --head --port=PORT``), ``auto`` (the cluster this
  machine belongs to, or ``$RAY_ADDRESS``), ``ray://HOST:10001`` (Ray Client), or empty: ``$RAY_ADDRESS`` or the
  local cluster if one runs, else a new single-node Ray for this process (the CLI's default is ``auto``). Failures are
  one-sentence ValueErrors,
  within ``timeout_s`` for an address where nothing or something else listens, ``init_timeout_s`` otherwise.
  """
  ray = import_ray()
  if ray.is_initialized():
    return ray
  addr = (address or "").strip()
  if addr and addr != "auto" and "://" not in addr:
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit():
      raise ValueError(f"--ray_address={addr} is not HOST:PORT (e.g. 10.0.0.2:6379), auto or ray://HOST:PORT.")
    try:
      socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as e:
      raise ValueError(
        f"cannot reach the Ray cluster at {addr} ({e.strerror or e}): start it with "
        f"`ray start --head --port={port}` or fix --ray_address."
      ) from None
    if not _speaks_grpc(addr, timeout_s):  # ray.init would retry for ever against, say, an SSH port
      raise ValueError(
        f"{addr} answers but is not a Ray cluster's GCS: give the head's --port "
        "(`ray start --head --port=PORT`, default 6379)."
      )
  try:
    with _alarm(max(init_timeout_s, 1.0)):
      ray.init(
        address=addr or None,
        log_to_driver=False,
        logging_level=logging.WARNING,
        namespace="lamb_lars",
        include_dashboard=False if not addr else None,
        configure_logging=True,
      )
  except _InitTimeout:
    raise ValueError(
      f"the Ray cluster at {addr or 'auto'} did not accept this driver within {init_timeout_s:.0f} s."
    ) from None
  except (ConnectionError, RuntimeError, TimeoutError, ValueError) as e:
    raise ValueError(f"cannot connect to a Ray cluster at {addr or 'auto'}: {first_line(e)}.") from None
  return ray


def _speaks_grpc(addr: str, timeout_s: float) -> bool:
  """Whether ``addr`` completes a gRPC (HTTP/2) handshake, as a Ray GCS does."""
  try:
    import grpc  # noqa: PLC0415  (a Ray dependency)
  except ImportError:
    return True
  channel = grpc.insecure_channel(addr)
  try:
    grpc.channel_ready_future(channel).result(timeout=timeout_s)
    return True
  except grpc.FutureTimeoutError:
    return False
  finally:
    channel.close()


class _InitTimeout(Exception):
  pass


@contextlib.contextmanager
def _alarm(seconds: float):
  """Raises _InitTimeout in the main thread after ``seconds`` (no-op elsewhere: signals need the main thread)."""
  if threading.current_thread() is not threading.main_thread():
    yield
    return

  def _raise(signum, frame):
    raise _InitTimeout()

  old = signal.signal(signal.SIGALRM, _raise)
  signal.setitimer(signal.ITIMER_REAL, seconds)
  try:
    yield
  finally:
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, old)


def normalize_resources(resources: Optional[Mapping[str, Any]]) -> dict[str, float]:
  """``study.runner.resources`` as ``{name: amount}`` (CPU defaults to 1; zero amounts dropped)."""
  out = dict(DEFAULT_RESOURCES)
  for k, v in dict(resources or {}).items():
    try:
      amount = float(v)
    except (TypeError, ValueError):
      raise ValueError(f"study.runner.resources[{k!r}] = {v!r} is not a number.") from None
    if not math.isfinite(amount) or amount < 0:
      raise ValueError(f"study.runner.resources[{k!r}] = {v!r} must be a finite number ≥ 0.")
    out[str(k)] = amount
  return {k: v for k, v in out.items() if v > 0}


def task_options(resources: Mapping[str, float]) -> dict[str, Any]:
  """``ray.remote`` options for one trial: ``num_cpus``, ``num_gpus``, custom ``resources`` (e.g. ``TPU``)."""
  res = dict(resources)
  opts: dict[str, Any] = {"num_cpus": res.pop("CPU", 0.0), "num_gpus": res.pop("GPU", 0.0)}
  if res:
    opts["resources"] = res
  return opts


def _fmt(res: Mapping[str, float]) -> str:
  return ", ".join(f"{k} {v:g}" for k, v in sorted(res.items())) or "nothing"


def slots_for(nodes: list[Mapping[str, Any]], resources: Mapping[str, float]) -> int:
  """Trials the alive ``nodes`` (``ray.nodes()`` rows) hold at once; a ValueError when no node holds one."""
  alive = [n for n in nodes if n.get("Alive")]
  if not alive:
    raise ValueError("the Ray cluster has no alive node.")
  total = 0
  for n in alive:
    have = n.get("Resources") or {}
    fits = [math.floor(have.get(k, 0.0) / v + 1e-9) for k, v in resources.items()]
    total += min(fits) if fits else int(have.get("CPU", 1) or 1)
  if total == 0:
    best = max(
      alive, key=lambda n: sum(min(1.0, (n.get("Resources") or {}).get(k, 0.0) / v) for k, v in resources.items())
    )
    have = {k: (best.get("Resources") or {}).get(k, 0.0) for k in resources}
    raise ValueError(
      f"no node of the Ray cluster can run a trial that asks for {_fmt(resources)} (the closest "
      f"node has {_fmt(have)}): change study.runner.resources or add such nodes."
    )
  return total
