"""The published results a study report puts beside its measurements, from the study's *reference module*.

The generic report imports no paper. A study config names its reference by import path
(``analysis.reference``, e.g. ``lamb_lars.proj.you2020.reference``; lamb_lars/configs/studies/common.py) and its
workload key in it (``analysis.paper``, e.g. ``'mnist_lenet'``); the manifest records both in its ``report_spec``,
so ``verify`` recomputes a README with the same reference. A reference module may define:

* ``TABLE2``: ``{workload: dict(b0, epochs, accuracy, large, b_l, b_h, b_f)}``, the baseline and the regimes;
* ``POINTS``: ``{workload: ((batch or 'full', optimizer or 'any', accuracy, what), ...)}``, single results;
* section functions the report calls by name (``section``), e.g. ``table3_section`` for the trials of role
  ``table3``; a name the module lacks gives no section.

A project keeps its reference in its own folder (``lamb_lars/proj/<name>/``, big_vision style); nothing under
lamb_lars/ outside proj/ imports a project.
"""

from __future__ import annotations

import functools
import importlib
from types import ModuleType
from typing import Any, Optional


@functools.lru_cache(maxsize=None)
def _module(path: str) -> ModuleType:
  try:
    return importlib.import_module(path)
  except ImportError as e:
    raise ValueError(f"the report's reference module {path!r} cannot be imported ({e}).") from None


def load(spec: Any) -> Optional[ModuleType]:
  """The module ``spec.reference`` names (None: the study names none, so no published numbers)."""
  return _module(spec.reference) if getattr(spec, "reference", "") else None


def table2(spec: Any) -> dict:
  """The reference's Table 2 row of ``spec.workload`` ({}: none)."""
  return getattr(load(spec), "TABLE2", {}).get(spec.workload, {})


def points(spec: Any) -> tuple:
  """The reference's single results for ``spec.workload`` (empty: none)."""
  return tuple(getattr(load(spec), "POINTS", {}).get(spec.workload, ()))


def section(spec: Any, name: str, *args: Any, **kwargs: Any) -> list[str]:
  """The markdown lines of the reference's section function ``name`` called with ``args`` ([]: it has none)."""
  fn = getattr(load(spec), name, None)
  return list(fn(*args, **kwargs)) if fn is not None else []
