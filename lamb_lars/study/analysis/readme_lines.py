"""A composite report's README.md written and checked line by line against a recomputation (the ``report`` and
``check`` of calibration.py and small_batch_end.py; publishing/composite.py calls them)."""

from __future__ import annotations

import os

README = "README.md"


def write(root: str, text: str) -> str:
  """Writes ``text`` to ``<root>/README.md``; returns it."""
  with open(os.path.join(root, README), "w") as f:
    f.write(text)
  return text


def differences(root: str, text: str) -> list[str]:
  """The lines of ``<root>/README.md`` that differ from ``text``, the recomputation ([] = the same)."""
  with open(os.path.join(root, README)) as f:
    have = f.read().splitlines()
  want = text.splitlines()
  diff = [f"line {i + 1}: {a!r} (recomputed: {b!r})" for i, (a, b) in enumerate(zip(have, want)) if a != b]
  if len(have) != len(want):
    diff.append(f"has {len(have)} lines, the recomputation {len(want)}.")
  return diff
