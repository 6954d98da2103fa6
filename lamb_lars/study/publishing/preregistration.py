"""Pre-registration of a study's thresholds (issue 41): the study config holds them (targets, ε of branching,
non-inferiority margins, …), and the config file must be committed before the first trial.

At a study's first ``run`` / ``branch`` command (no ``preregistration.json`` in the workdir yet) the driver reads,
from the git checkout holding the config file, the commit at which that file was last changed
(``git log -1 -- FILE``) and whether it has uncommitted changes; a dirty (or never committed) config in a git
checkout stops the study with one sentence unless ``--allow_dirty`` is given (then the record says so). A config
outside any git checkout (a test's temporary file) cannot be pre-registered: the record says so (``commit``:
None, ``git``: False) and the study runs. ``--config.*`` overrides on the command line are recorded too. The
record is written once and kept on resume, so it names the state of the thresholds when the first trial started;
``publish`` copies it into the manifest (``preregistration``).

The record also holds the study's ``analysis`` section as it was then (issue 62): the settings a report is computed
with (target, target_technique, techniques, …). A report whose analysis differs from it (the config edited after
the trials ran, then re-reported) says so in its first lines (``analysis_changes``), and its manifest records the
analysis it used.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from typing import Any, Mapping, Optional, Sequence

from lamb_lars.common import io_utils

FILE = "preregistration.json"


def _git(repo: str, *args: str) -> str:
  return subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True, timeout=30, check=True).stdout


def config_state(config_path: str) -> dict:
  """``{"config": path relative to its checkout, "commit": the commit that last changed it (None: never
  committed or no git), "dirty": uncommitted changes (None: unknown)}`` of a study config file."""
  path = os.path.abspath(config_path.split(":", 1)[0])
  repo = os.path.dirname(path)
  try:
    top = _git(repo, "rev-parse", "--show-toplevel").strip()
    rel = os.path.relpath(path, top)
    commit = _git(top, "log", "-1", "--format=%H", "--", rel).strip() or None
    dirty = bool(_git(top, "status", "--porcelain", "--", rel).strip())
  except (OSError, subprocess.SubprocessError):
    return {"config": config_path, "commit": None, "dirty": None, "git": False}
  return {
    "config": rel + (":" + config_path.split(":", 1)[1] if ":" in config_path else ""),
    "commit": commit,
    "dirty": dirty,
    "git": True,
  }


def load(workdir: str) -> Optional[dict]:
  """The workdir's pre-registration record, or None (a study started before issue 41, or not started)."""
  text = io_utils.read_text(os.path.join(workdir, FILE))
  return json.loads(text) if text else None


def _plain(value: Any) -> Any:
  """JSON's form of a config value (tuples as lists), so that a registered and a current section compare equal."""
  return json.loads(json.dumps(value, sort_keys=True, default=str))


def analysis_changes(record: Optional[Mapping], analysis: Mapping) -> tuple[str, ...]:
  """``analysis.KEY: registered → now`` for each key of ``analysis`` that differs from the registered one (none
  when the record holds no analysis: a study started before issue 62)."""
  registered = (record or {}).get("analysis")
  if registered is None:
    return ()
  now = _plain(dict(analysis))
  text = lambda v: json.dumps(v, ensure_ascii=False)
  return tuple(
    f"`analysis.{k}`: {text(registered.get(k))} → {text(now.get(k))}"
    for k in sorted(set(registered) | set(now))
    if registered.get(k) != now.get(k)
  )


def register(
  workdir: str,
  config_path: Optional[str],
  allow_dirty: bool = False,
  overrides: Sequence[str] = (),
  analysis: Optional[Mapping] = None,
) -> dict:
  """The workdir's record: the existing one (a resumed study), else the config file's state now, written. Raises
  ValueError (one sentence) when the config has uncommitted changes or was never committed and ``allow_dirty`` is
  off."""
  old = load(workdir)
  if old is not None:
    return old
  from lamb_lars.study.running import workdir as wd

  if os.path.exists(wd.store_path(workdir)) or io_utils.exists(os.path.join(workdir, wd.STORE_FILE)):
    # trials ran before records were kept: the state now says nothing about the first trial's
    record = {
      "config": config_path,
      "commit": None,
      "dirty": None,
      "git": None,
      "allow_dirty": bool(allow_dirty),
      "overrides": list(overrides),
      "started_before_record": True,
      "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    io_utils.write_text_atomic(os.path.join(workdir, FILE), json.dumps(record, indent=1, sort_keys=True) + "\n")
    return record
  state = config_state(config_path) if config_path else {"config": None, "commit": None, "dirty": None, "git": False}
  if state["git"] and (state["dirty"] or state["commit"] is None) and not allow_dirty:
    raise ValueError(
      f"the study config {state['config']} has uncommitted changes (or is not committed): commit it "
      "before the first trial, so that its thresholds are pre-registered, or pass --allow_dirty."
    )
  record = {
    **state,
    "allow_dirty": bool(allow_dirty),
    "overrides": list(overrides),
    "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    **({"analysis": _plain(dict(analysis))} if analysis is not None else {}),
  }
  io_utils.makedirs(workdir)
  io_utils.write_text_atomic(os.path.join(workdir, FILE), json.dumps(record, indent=1, sort_keys=True) + "\n")
  return record
