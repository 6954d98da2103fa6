"""The settings sections of a study config — ``search``, ``runner``, ``replicates``, ``analysis``, ``branching`` —
completed from
their one source of defaults, the factories of ``lamb_lars/configs/studies/common.py``. The code keeps no defaults of
its own: a section a study leaves out, or a key a section leaves out (a study config saved before the key existed),
reads as ``common.<section>()`` gives it.
"""

from __future__ import annotations

from typing import Any

import ml_collections

from lamb_lars.configs.studies import common

FACTORIES = {
  "search": common.search,
  "runner": common.runner,
  "replicates": common.replicates,
  "analysis": common.analysis,
  "branching": common.branching,
}


def _plain(obj: Any) -> Any:
  return obj.to_dict() if isinstance(obj, ml_collections.ConfigDict) else obj


def section(study: ml_collections.ConfigDict, name: str) -> dict[str, Any]:
  """``study.<name>`` over ``common.<name>()``, as a plain dict; an unknown key is a one-sentence ValueError."""
  defaults = _plain(FACTORIES[name]())
  given = dict(_plain(study.get(name)) or {})
  unknown = set(given) - set(defaults)
  if unknown:
    raise ValueError(f"study.{name} has unknown keys {sorted(unknown)}; allowed: {sorted(defaults)}.")
  return {**defaults, **given}
