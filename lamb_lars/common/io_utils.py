"""Run-dir files on any filesystem: crash-safe whole-file writes, JSONL reads that survive a torn last line, and the
few path operations the trainer and the study need, for local paths and for object-store URLs (``gs://…``,
``s3://…``: anything :mod:`etils.epath` opens, which is also how orbax reaches them).

Local files: a writer writes to a temporary file in the same directory (unique per process and call, so concurrent
writers never share one) and renames it over the target, so a reader, or a run killed mid-write, sees the old file
or the new one, never half of either. Appended JSONL rows can be cut short by a kill -9; :func:`read_jsonl` skips
such a line, and any other line that is not a JSON object, and says which.

Object stores: one object upload is already atomic (a reader sees the old generation or the new one), so a whole
file is written in one upload, with no rename (a GCS rename is a copy plus a delete). They have no append:
:func:`append_jsonl` and :func:`append_text` read the object, add the text and upload it again, which is correct for
one writer per file (the trainer of a run dir, the study driver of a workdir). Locks are local only: see
:func:`local_path`.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import uuid
from typing import Any, Callable, Iterable, Optional

# Where object-store workdirs keep their machine-local parts (lock files, the study's SQLite store, trial logs
# while they are written, the XLA compilation cache). Overridable for tests and for machines with a fast disk.
LOCAL_ROOT_ENV = "LAMB_LARS_LOCAL_ROOT"


def is_remote(path: str | os.PathLike) -> bool:
  """Whether ``path`` is a URL (``gs://bucket/run``) rather than a local path."""
  return "://" in os.fspath(path)


def _epath(path: str | os.PathLike):
  from etils import epath  # imported lazily: local-only users never load fsspec

  return epath.Path(os.fspath(path))


def _fresh(path: str) -> None:
  """Drops fsspec's cached listings of ``path``'s folder: another process (a trial, the driver) may have written
  it since this process last looked, and a stale listing reads as "missing"."""
  try:
    from etils.epath import backend  # the fsspec filesystem etils.epath itself uses (cached per process)

    fs = backend.fsspec_backend.fs(path)
    fs.invalidate_cache(path)
  except Exception:  # noqa: BLE001  (TensorFlow's gfile backend, or a filesystem without a cache)
    pass


def abspath(path: str) -> str:
  """``os.path.abspath`` for local paths; a URL is already absolute (abspath would make ``./gs:/bucket``)."""
  return path if is_remote(path) else os.path.abspath(path)


def local_path(path: str, name: str = "") -> str:
  """A machine-local path standing for ``path``: ``path`` itself when it is local, else a folder under
  ``$LAMB_LARS_LOCAL_ROOT`` (default ``<tmp>/lamb_lars-<uid>``) named by a hash of the URL, plus ``name``.

  What cannot live on an object store goes there: ``flock`` lock files (object stores have no locks, so a lock on
  a ``gs://`` run dir excludes processes on this machine only; across machines the study driver, one per workdir,
  runs each trial once; a cross-machine lock would be a lease object created with ``ifGenerationMatch=0`` and
  renewed by its holder), SQLite files, and logs that a child process writes while it runs."""
  if not is_remote(path):
    return os.path.join(path, name) if name else path
  default = os.path.join(tempfile.gettempdir(), f"lamb_lars-{os.getuid() if hasattr(os, 'getuid') else 'user'}")
  root = os.environ.get(LOCAL_ROOT_ENV) or default
  tag = hashlib.sha1(path.rstrip("/").encode()).hexdigest()[:16]
  folder = os.path.join(root, f"{os.path.basename(path.rstrip('/'))}-{tag}")
  os.makedirs(folder, exist_ok=True)
  return os.path.join(folder, name) if name else folder


def makedirs(path: str) -> None:
  if is_remote(path):
    _epath(path).mkdir(parents=True, exist_ok=True)  # object stores have no folders: nothing to create
  else:
    os.makedirs(path, exist_ok=True)


def move_tree(src: str, dst: str) -> None:
  """Moves folder ``src`` to ``dst`` (which must not exist). Locally one rename; on an object store, which has no
  folders to rename, each object is copied to its new name and then deleted, so a move cut short leaves every
  object in one place or the other, never lost."""
  if not is_remote(src):
    os.makedirs(os.path.dirname(dst.rstrip("/")) or ".", exist_ok=True)
    os.rename(src, dst)
    return
  _fresh(src)
  root = _epath(src)
  files, folders = [], [root]
  while folders:  # gs:// has no recursive glob: walk one level at a time
    for p in folders.pop().iterdir():
      (folders if p.is_dir() else files).append(p)
  for f in files:
    target = _epath(dst) / str(f.relative_to(root))
    target.write_bytes(f.read_bytes())
  for f in files:
    f.unlink()
  try:
    root.rmtree()
  except FileNotFoundError:  # no folder objects left: nothing to remove
    pass


def exists(path: str) -> bool:
  if is_remote(path):
    _fresh(path)
    return _epath(path).exists()
  return os.path.exists(path)


def remove(path: str) -> None:
  """Deletes ``path`` if it exists."""
  if is_remote(path):
    _fresh(path)
    p = _epath(path)
    if p.exists():
      p.unlink()
  elif os.path.exists(path):
    os.remove(path)


def listdir(path: str) -> list[str]:
  """The names in folder ``path`` ([] when there is none)."""
  if is_remote(path):
    _fresh(path + "/")
    p = _epath(path)
    return sorted(c.name for c in p.iterdir()) if p.exists() else []
  return sorted(os.listdir(path)) if os.path.isdir(path) else []


def read_bytes(path: str, default: Any = None) -> Any:
  """The bytes of ``path``, or ``default`` when it does not exist."""
  if is_remote(path):
    _fresh(path)
    try:
      return _epath(path).read_bytes()
    except FileNotFoundError:
      return default
  try:
    with open(path, "rb") as f:
      return f.read()
  except FileNotFoundError:
    return default


def write_bytes_atomic(path: str, data: bytes) -> None:
  """Replaces ``path`` by ``data`` in one rename (one upload on an object store)."""

  def write(tmp: str) -> None:
    with open(tmp, "wb") as f:
      f.write(data)

  _atomic(path, write)


def read_text(path: str, default: Any = None, errors: str = "strict") -> Any:
  """The text of ``path``, or ``default`` when it does not exist."""
  if is_remote(path):
    _fresh(path)
    try:
      return _epath(path).read_bytes().decode("utf-8", errors=errors)
    except FileNotFoundError:
      return default
  try:
    with open(path, encoding="utf-8", errors=errors) as f:
      return f.read()
  except FileNotFoundError:
    return default


def _atomic(path: str, write: Callable[[str], None]) -> None:
  if is_remote(path):  # one upload is atomic: write locally, then upload once
    with tempfile.TemporaryDirectory() as tmpdir:
      tmp = os.path.join(tmpdir, os.path.basename(path))
      write(tmp)
      with open(tmp, "rb") as f:
        data = f.read()
    _epath(path).write_bytes(data)
    return
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
  """Replaces ``path`` by ``text`` in one rename (one upload on an object store)."""

  def write(tmp: str) -> None:
    with open(tmp, "w", encoding="utf-8") as f:
      f.write(text)

  _atomic(path, write)


def write_json_atomic(path: str, obj: Any, *, indent: int = 1) -> None:
  """Replaces ``path`` by ``obj`` as JSON in one rename (numpy scalars and other numbers as floats)."""
  write_text_atomic(path, json.dumps(obj, indent=indent, default=float))


def write_file_atomic(path: str, write: Callable[[str], None]) -> None:
  """Calls ``write(tmp_path)`` (e.g. ``lambda p: np.save(p, x)``; the name keeps ``path``'s extension), then renames
  (or uploads)."""
  _atomic(path, write)


def read_json(path: str, default: Any = None) -> Any:
  """The JSON in ``path``, or ``default`` when the file does not exist."""
  text = read_text(path)
  return default if text is None else json.loads(text)


def read_json_object(path: str, *, error: type = ValueError, damaged: str, remedy: str) -> Optional[dict]:
  """The JSON object in ``path``, or None when the file does not exist. Invalid JSON, or JSON that is not an object,
  raises ``error`` in one sentence: ``"{path} {damaged}; {remedy}."`` (or "does not hold … object")."""
  try:
    value = read_json(path)
  except (ValueError, UnicodeDecodeError):
    raise error(f"{path} {damaged}; {remedy}.") from None
  if value is not None and not isinstance(value, dict):
    raise error(f"{path} does not hold a JSON object; {remedy}.")
  return value


def parse_jsonl(lines: Iterable[str], on_skip: Optional[Callable[[int, str], None]] = None) -> list[dict]:
  """The JSON-object rows of ``lines``; any other line is skipped and ``on_skip(line_number, why)`` is told."""
  rows = []
  for n, line in enumerate(lines, 1):
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


def read_jsonl(path: str, on_skip: Optional[Callable[[int, str], None]] = None) -> list[dict]:
  """The JSON-object rows of a JSONL file ([] if it does not exist). A line that is not a JSON object — a torn
  line (a writer killed mid-line), or anything else — is skipped, and ``on_skip(line_number, why)`` is told."""
  if is_remote(path):
    return parse_jsonl((read_text(path, errors="replace") or "").splitlines(keepends=True), on_skip)
  if not os.path.exists(path):
    return []
  with open(path, encoding="utf-8", errors="replace") as f:
    return parse_jsonl(f, on_skip)


def append_text(path: str, text: str) -> None:
  """Appends ``text`` and flushes it (on an object store: read, add, upload; one writer per file)."""
  if is_remote(path):
    write_text_atomic(path, (read_text(path) or "") + text)
    return
  with open(path, "a", encoding="utf-8") as f:
    f.write(text)
    f.flush()


def append_jsonl(path: str, row: dict) -> None:
  """Appends one JSON row and flushes it."""
  append_text(path, json.dumps(row) + "\n")
