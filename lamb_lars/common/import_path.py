"""Import paths ``pkg.module:Name`` in a config: a researcher's model or dataset loader that lives outside lamb_lars.

``config.model`` and ``config.dataset`` take, beside the built-in names, an import path: a dotted module name, a
colon and an attribute (``my_project.nets:WideMLP``). The module is imported as ``import my_project.nets`` would
import it (``sys.path``: ``PYTHONPATH``, installed packages), and, when that fails, from the current directory too,
so that a workload beside the command you run (``python train.py`` or ``python -m lamb_lars.study`` from its
folder) is found without setting ``PYTHONPATH``. The contract of what the path names: docs/workloads.md.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import re
import sys
from typing import Any

from lamb_lars.errors import ConfigError

_PATTERN = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*$")


def is_import_path(value: Any) -> bool:
  """Whether ``value`` has the form ``pkg.module:Name`` (``tfds:NAME`` is a dataset name, not an import path)."""
  return isinstance(value, str) and ":" in value and not value.startswith("tfds:")


def _import(module: str) -> Any:
  try:
    return importlib.import_module(module)
  except ModuleNotFoundError as e:
    if e.name is None or not module.startswith(e.name) or os.getcwd() in sys.path:
      raise
  sys.path.append(os.getcwd())  # a workload beside the command: found as it would be by `python -m`
  return importlib.import_module(module)


def resolve(path: str, key: str) -> Any:
  """The object ``path`` (``pkg.module:Name``) names; a ConfigError in one sentence naming ``config.<key>`` when the
  path is malformed, the module cannot be imported or has no such attribute."""
  if not _PATTERN.match(path):
    raise ConfigError(f"config.{key}={path!r} is not an import path of the form 'package.module:Name'.")
  module_name, attr = path.split(":")
  try:
    obj: Any = _import(module_name)
  except ModuleNotFoundError as e:
    raise ConfigError(
      f"config.{key}={path!r}: module {module_name!r} cannot be imported (no module named "
      f"{e.name!r}); put its folder on PYTHONPATH or run from the folder that holds it."
    ) from None
  except Exception as e:  # noqa: BLE001  (the user's module raised while importing)
    raise ConfigError(
      f"config.{key}={path!r}: importing {module_name!r} failed ({type(e).__name__}: {' '.join(str(e).split())})."
    ) from None
  for part in attr.split("."):
    if not hasattr(obj, part):
      raise ConfigError(f"config.{key}={path!r}: module {module_name!r} has no attribute {attr!r}.")
    obj = getattr(obj, part)
  return obj


def source_file(path: str) -> str:
  """The file that defines the module of import path ``path`` (resolved as :func:`resolve` does)."""
  module = sys.modules.get(path.split(":")[0])
  if module is None:
    resolve(path, "import_path")
    module = sys.modules[path.split(":")[0]]
  file = getattr(module, "__file__", None)
  if not file:
    raise ConfigError(f"the module of {path!r} has no source file to hash.")
  return os.path.realpath(file)


def source_sha256(path: str) -> str:
  """sha256 of the source file of import path ``path``: the workload's provenance beside our commit."""
  with open(source_file(path), "rb") as f:
    return hashlib.sha256(f.read()).hexdigest()
