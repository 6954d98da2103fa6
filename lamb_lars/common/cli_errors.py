"""One sentence and exit status 2 for every mistake a user can make on the command line (train.py and the study CLI).

A mistake is anything the user can fix by changing the command, the config or the workdir: a misspelled config
key, a config file that is missing, does not parse or has no ``get_config``, a value out of bounds, a workdir that
is a file, read-only, full or in use, a damaged record in it. Each becomes ``error: <one sentence>`` on stderr and
exit status 2. Everything else is a bug and keeps its traceback; ``--verbose`` keeps it for mistakes too.
"""

from __future__ import annotations

import contextlib
import errno
import re
import sqlite3
import sys
from typing import Callable, Iterator, Optional

from lamb_lars.errors import UserError

VERBOSE_FLAG = "--verbose"


def _did_you_mean(text: str) -> Optional[str]:
  """ml_collections' ``'key'\\nDid you mean "x" instead of "key"?`` as one sentence."""
  m = re.search(r"Did you mean \"([^\"]+)\" instead of \"([^\"]+)\"", text)
  if m:
    return f"the config has no key {m.group(2)!r}; did you mean {m.group(1)!r}?"
  return None


def sentence(exc: BaseException, *, value_errors: bool = True) -> Optional[str]:
  """The one-sentence message for a user's mistake, or None for a bug (which keeps its traceback). With
  ``value_errors=False`` only a UserError counts (a ConfigError among ValueErrors: inside training another is a
  bug)."""
  from absl import flags

  text = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
  if isinstance(exc, (KeyError, AttributeError)) and (hint := _did_you_mean(text)):
    return hint
  if isinstance(exc, (KeyError, AttributeError)) and (m := re.fullmatch(r"[\"']*'([\w.]+)'[\"']*", text.strip())):
    return f"the config has no key {m.group(1)!r}."  # ml_collections: an override of a key no config defines
  if _full_disk(exc, text):
    where = f" {exc.filename}" if isinstance(exc, OSError) and exc.filename else ""
    return f"cannot write{where}: No space left on device; free some space and re-run the same command to resume."
  if isinstance(exc, flags.Error) and "Flag --config must have a value other than None" in text:
    return "the config file's get_config() returned None; it must return the ConfigDict."
  if isinstance(exc, AttributeError) and "has no attribute 'get_config'" in text:
    return "the config file defines no get_config() function."
  if "Failed loading config file" in text:  # ml_collections: a --config file that does not exist or fails to import
    return f"the config file could not be loaded ({text.strip().splitlines()[-1].strip()})."
  if isinstance(exc, SyntaxError):
    return f"the config file {exc.filename} does not parse (line {exc.lineno}: {exc.msg})."
  if isinstance(exc, flags.Error):
    return text.strip().splitlines()[0].rstrip(".") + "."
  # A UserError (ConfigError, DatasetNotFoundError, WorkdirLocked, CheckpointError: lamb_lars/errors.py) is a mistake;
  # so is any other ValueError outside training.
  mistakes = (ValueError, UserError) if value_errors else (UserError,)
  if isinstance(exc, mistakes) and not isinstance(exc, UnicodeError):
    return " ".join(text.split())  # ConfigError and other ValueErrors: already one sentence
  if isinstance(exc, sqlite3.DatabaseError):
    return f"the study store cannot be read ({text}); restore study.sqlite from a copy or use a new --workdir."
  if isinstance(exc, OSError) and (exc.filename or exc.errno in (errno.ENOSPC, errno.EROFS)):
    where = f" {exc.filename}" if exc.filename else ""
    reason = exc.strerror or text
    return f"cannot write{where}: {reason}; give a writable directory with free space."
  return None


def _full_disk(exc: BaseException, text: str) -> bool:
  """A full disk, as the OS (ENOSPC) or orbax / TensorStore (``RESOURCE_EXHAUSTED``) reports it."""
  return (
    (isinstance(exc, OSError) and exc.errno == errno.ENOSPC)
    or "RESOURCE_EXHAUSTED" in text
    or "No space left on device" in text
  )


def verbose(argv: Optional[list] = None) -> bool:
  return any(
    a == VERBOSE_FLAG or a.startswith(VERBOSE_FLAG + "=") and a.split("=", 1)[1].lower() in ("1", "true")
    for a in (sys.argv if argv is None else argv)
  )


def exit_on_mistake(exc: BaseException, *, value_errors: bool = True) -> None:
  """Prints the one sentence and exits 2 when ``exc`` is a user's mistake (and --verbose is off); else returns."""
  msg = sentence(exc, value_errors=value_errors)
  if msg is None or verbose():
    return
  print(f"error: {msg}", file=sys.stderr)
  sys.exit(2)


def flags_parser(argv: list) -> list:
  """``app.run(..., flags_parser=flags_parser)``: absl's parsing, with config-file and override mistakes as one
  sentence (absl would print a 55-line traceback whose last line holds the hint)."""
  from absl import app, flags

  try:
    with _quiet_absl(argv):
      return flags.FLAGS(argv)
  except SystemExit as e:  # absl prints --help and exits 1; asking for help is not a failure
    if e.code == 1 and any(a in ("--help", "-h", "-?", "--helpshort", "--helpfull") for a in argv[1:]):
      sys.exit(0)
    raise
  except app.UsageError:
    raise
  except Exception as e:  # noqa: BLE001  (a config file's own exceptions: syntax, no get_config, bad key)
    exit_on_mistake(e)
    _config_file_raised(e, argv)
    raise


@contextlib.contextmanager
def _quiet_absl(argv: Optional[list] = None) -> Iterator[None]:
  """absl warnings off while the command line and its config file load (ml_collections warns, e.g. of a
  ``get_config()`` that returned None, before the sentence that says so; absl adds "Logging before flag parsing");
  ``--verbose`` keeps them."""
  import logging

  logger = logging.getLogger("absl")
  level = logger.level
  if not verbose(argv):
    logger.setLevel(logging.ERROR)
  try:
    yield
  finally:
    logger.setLevel(level)


def _config_file_raised(exc: BaseException, argv: list) -> None:
  """Anything else raised while the --config file loads is that file's error: one sentence, exit 2."""
  if verbose(argv):
    return
  path = next((a.split("=", 1)[1] for a in argv if a.startswith("--config=")), "given with --config")
  text = " ".join(str(exc).split()) or "no message"
  print(f"error: the config file {path} raised {type(exc).__name__}: {text.rstrip('.')}.", file=sys.stderr)
  sys.exit(2)


def load_config(get: Callable[[], object], path: Optional[str]):
  """The parsed ``--config`` value; a config file that cannot be loaded is one sentence."""
  import os

  if path is not None and not os.path.isfile(path.split(":")[0]):
    print(f"error: the config file {path.split(':')[0]} does not exist.", file=sys.stderr)
    sys.exit(2)
  try:
    with _quiet_absl():
      config = get()
  except Exception as e:  # noqa: BLE001
    exit_on_mistake(e)
    _config_file_raised(e, [f"--config={path}"] if path else [])
    raise
  return config


class Terminated(KeyboardInterrupt):
  """SIGTERM, raised where the program is (as Ctrl-C raises KeyboardInterrupt), so the run stops the same way."""


def exit_interrupted(exc: KeyboardInterrupt) -> None:
  """``interrupted at step N; re-run the same command to resume.`` on stderr; exit 130 (SIGINT) or 143 (SIGTERM)."""
  step, ckpt = getattr(exc, "step", None), getattr(exc, "checkpoint", None)
  where = f" at step {step}" if step is not None else ""
  since = f" from its checkpoint at step {ckpt}" if ckpt is not None else ""
  print(f"interrupted{where}; re-run the same command to resume{since}.", file=sys.stderr)
  sys.exit(128 + (15 if isinstance(exc, Terminated) else 2))


# What tells the Google Cloud libraries where gs:// is and who the user is (a missing one costs ~95 s of retries).
GCS_ENV = ("GOOGLE_APPLICATION_CREDENTIALS", "STORAGE_EMULATOR_HOST", "TENSORSTORE_GCS_HTTP_URL", "GCE_METADATA_HOST")


def _gce_metadata_server(timeout: float = 1.0) -> bool:
  """Whether a GCE/TPU VM's metadata server answers (it gives the VM's service-account credentials)."""
  import urllib.request

  req = urllib.request.Request("http://169.254.169.254/computeMetadata/v1/", headers={"Metadata-Flavor": "Google"})
  try:
    with urllib.request.urlopen(req, timeout=timeout) as r:
      return r.headers.get("Metadata-Flavor") == "Google"
  except Exception:  # noqa: BLE001  (no server, a proxy's refusal, a timeout: no metadata credentials)
    return False


def check_gcs_access(workdir: Optional[str]) -> None:
  """A ``gs://`` workdir with no credentials and no emulator: one sentence naming the variables, exit 2, at once.

  Credentials are any of: ``GOOGLE_APPLICATION_CREDENTIALS``, gcloud's application-default file, a GCE/TPU VM's
  metadata server; an emulator is ``STORAGE_EMULATOR_HOST`` with ``TENSORSTORE_GCS_HTTP_URL`` (tests/gcs_emulator.py).
  """
  import os

  if not (workdir or "").startswith("gs://") or verbose():
    return
  adc = os.path.join(
    os.environ.get("CLOUDSDK_CONFIG") or os.path.expanduser("~/.config/gcloud"), "application_default_credentials.json"
  )
  if any(os.environ.get(k) for k in GCS_ENV) or os.path.isfile(adc) or _gce_metadata_server():
    return
  print(
    f"error: --workdir={workdir} needs Google Cloud credentials or an emulator, and none is set: set "
    f"GOOGLE_APPLICATION_CREDENTIALS (or run gcloud auth application-default login), or for an emulator "
    f"STORAGE_EMULATOR_HOST and TENSORSTORE_GCS_HTTP_URL.",
    file=sys.stderr,
  )
  sys.exit(2)
