"""Crash-safe small files: whole-file writes that are atomic, and JSONL reads that survive a torn last line.

A writer writes to a temporary file in the same directory (unique per process and call, so concurrent writers never
share one) and renames it over the target: a reader, or a run killed mid-write, sees the old file or the new one,
never half of either. Appended JSONL rows can be cut short by a kill -9; :func:`read_jsonl` skips such a line, and
any other line that is not a JSON object, and says which.
"""
from __future__ import annotations

import json
import os
import uuid
from typing import Any, Callable, Optional


def _atomic(path: str, write: Callable[[str], None]) -> None:
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  base, ext = os.path.splitext(os.path.basename(path))
  tmp = os.path.join(directory, f".{base}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}{ext}")  # keeps the extension
  try:
    write(tmp)
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.remove(tmp)
    raise


def write_text_atomic(path: str, text: str) -> None:
  """Replaces ``path`` by ``text`` in one rename."""
  def write(tmp: str) -> None:
    with open(tmp, "w") as f:
      f.write(text)
  _atomic(path, write)


def write_json_atomic(path: str, obj: Any, *, indent: int = 1) -> None:
  """Replaces ``path`` by ``obj`` as JSON in one rename (numpy scalars and other numbers as floats)."""
  write_text_atomic(path, json.dumps(obj, indent=indent, default=float))


def write_file_atomic(path: str, write: Callable[[str], None]) -> None:
  """Calls ``write(tmp_path)`` (e.g. ``lambda p: np.save(p, x)``; the name keeps ``path``'s extension), then renames."""
  _atomic(path, write)


def read_json(path: str, default: Any = None) -> Any:
  """The JSON in ``path``, or ``default`` when the file does not exist."""
  if not os.path.exists(path):
    return default
  with open(path) as f:
    return json.load(f)


def read_jsonl(path: str, on_skip: Optional[Callable[[int, str], None]] = None) -> list[dict]:
  """The JSON-object rows of a JSONL file ([] if it does not exist). A line that is not a JSON object — a torn
  line (a writer killed mid-line), or anything else — is skipped, and ``on_skip(line_number, why)`` is told."""
  if not os.path.exists(path):
    return []
  rows = []
  with open(path, encoding="utf-8", errors="replace") as f:
    for n, line in enumerate(f, 1):
      if not line.strip():
        continue
      try:
        row = json.loads(line)
      except json.JSONDecodeError:
        row, why = None, "not valid JSON" + ("" if line.endswith("\n") else " (cut short)")
      else:
        why = f"a JSON {type(row).__name__}, not an object"
      if isinstance(row, dict):
        rows.append(row)
      elif on_skip is not None:
        on_skip(n, why)
  return rows


def append_jsonl(path: str, row: dict) -> None:
  """Appends one JSON row and flushes it."""
  with open(path, "a") as f:
    f.write(json.dumps(row) + "\n")
    f.flush()
