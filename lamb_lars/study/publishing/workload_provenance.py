"""The provenance of a researcher's workload: sha256 of the modules a study's import paths name (docs/workloads.md).

A study whose ``model`` or ``dataset`` is an import path ``pkg.module:Name`` runs code that is not ours, so our
commit alone does not say what ran. Its manifest (``provenance.py``) records, per import path, the file that defines
it and that file's sha256; ``study verify`` recomputes the hash and says in one sentence when the workload changed
since the study was reported, or cannot be imported where verify runs.
"""

from __future__ import annotations

import json
import os
from typing import Any, Mapping, Optional

from lamb_lars.common import import_path


def import_paths(tree: Any, key: str = "") -> set[str]:
  """The import paths (``pkg.module:Name``) a study config names as ``model`` or ``dataset``, anywhere in it."""
  if isinstance(tree, Mapping):
    return set().union(*(import_paths(v, str(k)) for k, v in tree.items()))
  if isinstance(tree, (list, tuple)):
    return set().union(*(import_paths(v, key) for v in tree))
  return {tree} if key in ("model", "dataset") and import_path.is_import_path(tree) else set()


def sources(config_json: Optional[str]) -> dict:
  """``{import path: {"file": path, "sha256": hex}}`` of the user modules a study config names (empty: none)."""
  out = {}
  for path in sorted(import_paths(json.loads(config_json) if config_json else {})):
    file = import_path.source_file(path)
    rel = os.path.relpath(file)
    out[path] = {"file": file if rel.startswith("..") else rel, "sha256": import_path.source_sha256(path)}
  return out


def problems(recorded: Mapping) -> list[str]:
  """One sentence per user module whose source differs from the manifest's sha256, or cannot be found."""
  out = []
  for path, rec in sorted(recorded.items()):
    try:
      now = import_path.source_sha256(path)
    except (ValueError, OSError) as e:
      out.append(
        f"the workload {path!r} cannot be read here ({e}), so its sha256 cannot be checked; run verify "
        f"where it imports."
      )
      continue
    if now != rec.get("sha256"):
      out.append(
        f"the workload {path!r} ({rec.get('file')}) has sha256 {now[:12]}…, the manifest says "
        f"{str(rec.get('sha256'))[:12]}…: it changed since the study was reported."
      )
  return out
