"""What made a result: the code's commit, the machine, and file and config hashes (a leaf module: imports nothing
from the study).

Both study layers record these: the running side in the workdir's ``commands.txt`` (study/running/workdir.py) and
a snapshot's ``snapshot.json`` (study/running/snapshot.py), the publishing side in published folders
(study/publishing/publish.py) and their manifests (manifest.py), whose hashes ``verify`` (provenance.py) recomputes.
It lives in common/ because both sides need it and neither may import the other's package for it.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import time
from typing import Optional, Sequence

from lamb_lars.common import io_utils

# The checkout lamb_lars runs from: lamb_lars/common/ is two folders below it.
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))


def sha256(path: str) -> str:
  """sha256 of the file at ``path`` (a local path or an object-store URL, through io_utils)."""
  if io_utils.is_remote(path):
    data = io_utils.read_bytes(path)
    if data is None:
      raise FileNotFoundError(f"{path} does not exist")
    return hashlib.sha256(data).hexdigest()
  h = hashlib.sha256()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      h.update(block)
  return h.hexdigest()


def config_sha256(config_json: str) -> str:
  """sha256 of a study config's JSON with sorted keys (so the hash does not depend on key order)."""
  return hashlib.sha256(json.dumps(json.loads(config_json), sort_keys=True).encode()).hexdigest()


def code_state(repo: str = REPO, paths: Sequence[str] = ()) -> dict:
  """``{"commit": HEAD or None, "dirty": bool or None}`` of the git checkout holding this code; with ``paths``,
  "dirty" reads only changes under those paths (e.g. ``("lamb_lars",)``: the code, not the docs it writes)."""

  def git(*args):
    return subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True, timeout=30, check=True).stdout

  try:
    changes = git("status", "--porcelain", "--", *paths)
    return {"commit": git("rev-parse", "HEAD").strip(), "dirty": bool(changes.strip())}
  except (OSError, subprocess.SubprocessError):
    return {"commit": None, "dirty": None}


def cpu_model() -> str:
  """The CPU's model name (/proc/cpuinfo's first ``model name``; else the platform's, else 'unknown CPU')."""
  try:
    with open("/proc/cpuinfo", encoding="utf-8") as f:
      for line in f:
        if line.startswith("model name"):
          return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return platform.processor() or "unknown CPU"


def machine() -> dict:
  """Platform, CPU count and model, Python version."""
  return {
    "platform": platform.platform(),
    "cpu_count": os.cpu_count(),
    "cpu_model": cpu_model(),
    "python": platform.python_version(),
  }


def iso(t: Optional[float]) -> Optional[str]:
  """Seconds since the epoch as UTC ISO 8601 (None stays None)."""
  return None if t is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(float(t)))
