"""Library noise kept to the run's log file, so a failing command ends in our one sentence alone on stderr.

When a save fails (a full disk) or a damaged checkpoint is read, orbax and TensorStore report it from their own
threads: an ERROR log record with a traceback from each of several background threads (108–381 lines in all), and
tracebacks Python prints from callbacks on those threads ("Event loop is closed"). The failure itself also reaches
the main thread, where the command line turns it into one sentence (:mod:`lamb_lars.common.cli_errors`). So, in a
command that has not asked for ``--verbose``:

* a log record that carries a traceback, or that comes from a thread other than the main one, goes to the log file;
* whatever another thread writes to ``sys.stderr`` (an exception in a thread, a callback's traceback) goes there too;
* so does an exception Python can only report as "Exception ignored in" (``sys.unraisablehook``: orbax's reading
  coroutine collected with its error when a damaged checkpoint is read, on whichever thread collects it).

The main thread's own lines (our sentence, a bug's traceback, warnings) stay on stderr. The log file is
``<workdir>/log.txt`` (``run_files.LOG_FILE``, the file a study trial's output goes to), appended to; where it
cannot be written (the disk is full) the noise is dropped: the sentence already says what happened.
"""

from __future__ import annotations

import logging
import sys
import threading
from typing import Optional, TextIO


class _LogFile:
  """Appends text to ``path``, opened on first use; gives up quietly when it cannot be written."""

  def __init__(self, path: str):
    self.path, self._broken = path, False
    self._file: Optional[TextIO] = None
    self._lock = threading.Lock()

  def write(self, text: str) -> None:
    with self._lock:
      if self._broken:
        return
      try:
        if self._file is None:
          self._file = open(self.path, "a", encoding="utf-8")
        self._file.write(text)
        self._file.flush()
      except (OSError, ValueError):
        self._broken = True


def _from_main_thread() -> bool:
  return threading.current_thread() is threading.main_thread()


class _ThreadedStderr:
  """``sys.stderr`` for the main thread; the log file for every other thread."""

  def __init__(self, stream: TextIO, log: _LogFile):
    self._stream, self._log = stream, log

  def write(self, text: str) -> int:
    if _from_main_thread():
      return self._stream.write(text)
    self._log.write(text)
    return len(text)

  def __getattr__(self, name: str):  # flush, fileno, isatty, encoding ...: the real stream's
    return getattr(self._stream, name)


class _ToLogFile(logging.Filter):
  """Keeps a record off the console (into the log file) when it carries a traceback or comes from another thread."""

  def __init__(self, log: _LogFile):
    super().__init__()
    self._log = log

  def filter(self, record: logging.LogRecord) -> bool:
    if record.exc_info is None and record.thread == threading.main_thread().ident:
      return True
    self._log.write(logging.Formatter("%(levelname)s %(asctime)s %(threadName)s %(name)s] %(message)s").format(record))
    self._log.write("\n")
    return False


_INSTALLED: Optional[_LogFile] = None


def _unraisable_text(u) -> str:
  """What Python's default hook would print for an unraisable exception ``u`` (sys.UnraisableHookArgs)."""
  import traceback

  head = f"{u.err_msg or 'Exception ignored in'}: {u.object!r}\n"
  return head + "".join(traceback.format_exception(u.exc_type, u.exc_value, u.exc_traceback))


def keep_to_log_file(path: str) -> None:
  """Sends the library noise of this process (module docstring) to ``path`` from now on; once per process."""
  global _INSTALLED
  if _INSTALLED is not None:
    return
  _INSTALLED = log = _LogFile(path)
  sys.stderr = _ThreadedStderr(sys.stderr, log)  # type: ignore[assignment]
  sys.unraisablehook = lambda u: log.write(_unraisable_text(u))
  keep = _ToLogFile(log)
  logging.getLogger("absl").addFilter(keep)  # absl's logger: orbax, tfds
  for handler in logging.getLogger().handlers:  # what any other library's logger propagates to (absl's handler)
    handler.addFilter(keep)
