"""A real multi-node Ray cluster on localhost, for the tests and the executor benchmark.

``LocalRayCluster`` runs ``ray start --head`` and one ``ray start --address=...`` per extra node, each with its own
CPUs and custom resources, all under one private ``--temp-dir``. ``kill_node(i)`` SIGKILLs node i's raylet and
everything under it (its workers and their trainers), as a crashed machine would. ``stop()`` kills exactly the
processes of this cluster (those whose command line names its temp dir, and their descendants), never another
user's Ray: ``ray stop`` would end every Ray cluster on the machine.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Mapping, Optional, Sequence

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Notice a dead node within ~2 s (defaults: ~15-30 s).
FAST_HEALTH_CHECKS = {
  "RAY_health_check_initial_delay_ms": "0",
  "RAY_health_check_period_ms": "500",
  "RAY_health_check_timeout_ms": "1000",
  "RAY_health_check_failure_threshold": "3",
}
# Ray starts its workers at nice 15 (its ``worker_niceness``), and a trial's trainer inherits it: beside the suite's
# other xdist workers (nice 0) the Ray trials then ran only on what those left, and the Ray tests, one xdist group,
# became the suite's longest path (the study test 985 s in a loaded suite, 2026-12-03; docs/BENCHMARKS.md §6).
# At 0 they compete as the local executor's trials do.
WORKER_NICENESS = {"RAY_worker_niceness": "0"}


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _ray_cli() -> list[str]:
  return [sys.executable, "-c", "import sys; from ray.scripts.scripts import main; sys.exit(main())"]


def can_hide_paths() -> bool:
  """Whether this process may start a node in its own mount namespace (``unshare -m``, needs root)."""
  if not shutil.which("unshare") or os.geteuid() != 0:
    return False
  out = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"], capture_output=True)
  return out.returncode == 0


class LocalRayCluster:
  """``nodes[0]`` is the head; each node is ``{'num_cpus': int, 'resources': {name: amount}, 'hide': path}``.

  ``hide``: the node runs in its own mount namespace with an empty tmpfs over ``path`` (an existing directory),
  so its workers do not see what the driver writes there: a workdir that is not shared (``can_hide_paths()``).
  """

  def __init__(
    self,
    nodes: Sequence[Mapping] = ({"num_cpus": 1}, {"num_cpus": 1, "resources": {"node2": 1}}),
    env: Optional[Mapping[str, str]] = None,
    object_store_mb: int = 80,
  ):
    self.nodes = [dict(n) for n in nodes]
    self._fresh_addresses()
    self.env = dict(os.environ)
    self.env["PYTHONPATH"] = os.pathsep.join(p for p in (_REPO_ROOT, self.env.get("PYTHONPATH", "")) if p)
    self.env.pop("RAY_ADDRESS", None)
    self.env.update(FAST_HEALTH_CHECKS)
    self.env.update(WORKER_NICENESS)
    self.env.update(env or {})
    self.object_store_mb = object_store_mb

  def _fresh_addresses(self) -> None:
    self.temp_dir = tempfile.mkdtemp(prefix="rl", dir="/tmp")  # short: Ray's unix socket paths have a length limit
    self.port = free_port()
    self.node_ports = [free_port() for _ in self.nodes]
    self.address = f"127.0.0.1:{self.port}"

  def _start_node(self, i: int) -> None:
    n = self.nodes[i]
    cmd = _ray_cli() + [
      "start",
      f"--num-cpus={int(n.get('num_cpus', 1))}",
      f"--temp-dir={self.temp_dir}",
      f"--node-manager-port={self.node_ports[i]}",
      "--disable-usage-stats",
      f"--object-store-memory={self.object_store_mb * 2**20}",
    ]
    if n.get("resources"):
      cmd.append(f"--resources={json.dumps(dict(n['resources']))}")
    if i == 0:
      cmd += ["--head", f"--port={self.port}", "--node-ip-address=127.0.0.1", "--include-dashboard=false"]
    else:
      cmd += [f"--address={self.address}", "--node-ip-address=127.0.0.1"]
    if n.get("hide"):
      cmd = [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        'mount -t tmpfs none "$0" && exec "$@"',
        n["hide"],
      ] + cmd
    out = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=180)
    if out.returncode != 0:
      raise RuntimeError(f"ray start (node {i}) failed:\n{out.stdout}\n{out.stderr}")

  def start(self, attempts: int = 2) -> "LocalRayCluster":
    """Starts every node; a start that fails (on a loaded 2-core machine a node can miss Ray's deadline for reaching
    the head: "Failed to get node info ... Deadline Exceeded") is stopped and tried again on fresh ports."""
    for attempt in range(1, attempts + 1):
      try:
        for i in range(len(self.nodes)):
          self._start_node(i)
        return self
      except Exception:
        self.stop()
        if attempt == attempts:
          raise
        self._fresh_addresses()
      except BaseException:
        self.stop()
        raise
    return self

  def restart_node(self, i: int) -> None:
    self._start_node(i)

  def _procs(self):
    import psutil  # noqa: PLC0415  (a Ray dependency)

    roots = []
    for p in psutil.process_iter(["cmdline"]):
      try:
        if any(self.temp_dir in a for a in (p.info["cmdline"] or [])):
          roots.append(p)
      except (psutil.NoSuchProcess, psutil.AccessDenied):
        pass
    return roots

  @staticmethod
  def _kill_tree(roots) -> int:
    import psutil  # noqa: PLC0415

    procs = {}
    for r in roots:
      try:
        procs[r.pid] = r
        procs.update({c.pid: c for c in r.children(recursive=True)})
      except psutil.NoSuchProcess:
        pass
    for p in procs.values():
      try:
        p.send_signal(signal.SIGKILL)
      except psutil.NoSuchProcess:
        pass
    psutil.wait_procs(list(procs.values()), timeout=10)
    return len(procs)

  def kill_node(self, i: int) -> int:
    """SIGKILLs node ``i``'s raylet and all its descendants (workers, trainers); returns how many processes."""
    assert i > 0, "the head holds the cluster's state"
    flag = f"--node_manager_port={self.node_ports[i]}"
    return self._kill_tree([p for p in self._procs() if flag in (p.info["cmdline"] or [])])

  def stop(self) -> None:
    for _ in range(3):  # a process may spawn while we kill its siblings
      if not self._kill_tree(self._procs()):
        break
      time.sleep(0.2)
    shutil.rmtree(self.temp_dir, ignore_errors=True)

  def __enter__(self) -> "LocalRayCluster":
    return self.start()

  def __exit__(self, *exc) -> None:
    self.stop()
