"""The provenance of a researcher's workload: sha256 of the modules a study's import paths name (docs/workloads.md).

A study whose ``model`` or ``dataset`` is an import path ``pkg.module:Name`` runs code that is not ours, so our
commit alone does not say what ran. Its manifest (``provenance.py``) records, per import path, the file that defines
it and that file's sha256; ``study verify`` recomputes the hash and says in one sentence when the workload changed
since the study was reported, or cannot be imported where verify runs.

The loader's source does not say which data it returns: a loader that reads an ``.npz`` gives other arrays when the
file is regenerated (issue 62). So the manifest also records, per dataset import path, the sha256 of the arrays the
loader returns (``data``: each split's dtype, shape and bytes, in split order, and the class count) with each split's
size; ``verify`` calls the loader again and fails when they differ. A manifest written before has no ``data`` and
is checked on the source only.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any, Mapping, Optional

import numpy as np

from lamb_lars.common import import_path


def import_paths(tree: Any, key: str = "", names: tuple[str, ...] = ("model", "dataset")) -> set[str]:
  """The import paths (``pkg.module:Name``) a study config names as one of ``names``, anywhere in it."""
  if isinstance(tree, Mapping):
    return set().union(*(import_paths(v, str(k), names) for k, v in tree.items()))
  if isinstance(tree, (list, tuple)):
    return set().union(*(import_paths(v, key, names) for v in tree))
  return {tree} if key in names and import_path.is_import_path(tree) else set()


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


def data_sha256(path: str) -> tuple[str, dict[str, int]]:
  """The sha256 of the arrays the loader ``path`` returns (module docstring) and each split's number of examples."""
  from lamb_lars.input_pipeline import user_data

  data = user_data.loader_data(path)
  h = hashlib.sha256()
  for split in sorted(data["splits"]):
    for a in data["splits"][split]:
      h.update(f"{split}:{a.dtype.str}:{a.shape};".encode())
      h.update(np.ascontiguousarray(a).tobytes())
  h.update(f"num_classes:{data['num_classes']}".encode())
  return h.hexdigest(), {s: int(len(lab)) for s, (_, lab) in sorted(data["splits"].items())}


def data_sources(config_json: Optional[str]) -> dict:
  """``{dataset import path: {"sha256": hex, "splits": {split: n}}}`` of the loaders a study config names."""
  out = {}
  for path in sorted(import_paths(json.loads(config_json) if config_json else {}, names=("dataset",))):
    digest, splits = data_sha256(path)
    out[path] = {"sha256": digest, "splits": splits}
  return out


def data_problems(recorded: Mapping) -> list[str]:
  """One sentence per loader whose arrays differ from the manifest's sha256, or cannot be loaded here."""
  out = []
  for path, rec in sorted(recorded.items()):
    try:
      now, splits = data_sha256(path)
    except Exception as e:  # a user's loader: whatever it raises, verify says so in one sentence
      e = e.__cause__ or e  # the loader's own error, not the wrapper that names the config key
      out.append(
        f"the data of {path!r} cannot be loaded here ({type(e).__name__}: {e}), so their sha256 cannot be checked."
      )
      continue
    if now != rec.get("sha256"):
      sizes = "" if splits == rec.get("splits") else f" (splits {splits}, the manifest's {rec.get('splits')})"
      out.append(
        f"the data {path!r} returns have sha256 {now[:12]}…, the manifest says {str(rec.get('sha256'))[:12]}…"
        f"{sizes}: they changed since the study was reported."
      )
  return out
