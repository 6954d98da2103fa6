"""Pre-registration of a study's thresholds (lamb_lars/study/publishing/preregistration.py; issue 41): the commit that
last changed the config file is recorded before the first trial, a dirty config refuses to start (one sentence,
exit 2) unless --allow_dirty, the record is kept on resume, and a config outside git is recorded as such."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from lamb_lars.study.publishing import preregistration as pr

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _git(repo, *args):
  return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def repo(tmp_path):
  r = tmp_path / "repo"
  r.mkdir()
  _git(r, "init", "-q")
  _git(r, "config", "user.email", "t@example.com")
  _git(r, "config", "user.name", "t")
  (r / "study.py").write_text("EPS = 0.1\n")
  (r / "other.py").write_text("x = 1\n")
  _git(r, "add", ".")
  _git(r, "commit", "-qm", "config")
  first = _git(r, "rev-parse", "HEAD")
  (r / "other.py").write_text("x = 2\n")  # a later commit that does not touch the config
  _git(r, "commit", "-qam", "other")
  return r, first


def test_the_commit_that_last_changed_the_config_is_recorded_and_kept(repo, tmp_path):
  r, first = repo
  work = str(tmp_path / "work")
  rec = pr.register(work, str(r / "study.py") + ":variant", overrides=["--config.x=1"])
  assert (rec["commit"], rec["dirty"], rec["config"], rec["overrides"]) == (
    first,
    False,
    "study.py:variant",
    ["--config.x=1"],
  )
  assert json.load(open(os.path.join(work, pr.FILE)))["commit"] == first
  (r / "study.py").write_text("EPS = 0.5\n")  # edited after the first trial: the record stays
  assert pr.register(work, str(r / "study.py"))["commit"] == first


def test_a_dirty_config_refuses_to_start_unless_allowed(repo, tmp_path):
  r, _ = repo
  (r / "study.py").write_text("EPS = 0.5\n")
  with pytest.raises(ValueError, match="uncommitted changes.*--allow_dirty"):
    pr.register(str(tmp_path / "w1"), str(r / "study.py"))
  assert not os.path.exists(tmp_path / "w1" / pr.FILE)
  rec = pr.register(str(tmp_path / "w2"), str(r / "study.py"), allow_dirty=True)
  assert rec["dirty"] and rec["allow_dirty"]
  (r / "new.py").write_text("EPS = 1\n")  # never committed
  with pytest.raises(ValueError, match="not committed"):
    pr.register(str(tmp_path / "w3"), str(r / "new.py"))


def test_a_config_outside_git_is_recorded_as_such(tmp_path):
  f = tmp_path / "loose.py"
  f.write_text("x = 1\n")
  rec = pr.register(str(tmp_path / "w"), str(f))
  assert rec["git"] is False and rec["commit"] is None


def test_the_cli_refuses_a_dirty_config_with_exit_status_2(repo, tmp_path):
  r, _ = repo
  smoke = open(os.path.join(REPO, "lamb_lars", "configs", "studies", "smoke.py")).read()
  (r / "smoke_copy.py").write_text(smoke)  # untracked in its checkout: not committed
  out = subprocess.run(
    [sys.executable, "-m", "lamb_lars.study", "run", f"--config={r / 'smoke_copy.py'}", f"--workdir={tmp_path / 'w'}"],
    cwd=REPO,
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert out.returncode == 2 and "--allow_dirty" in out.stderr and out.stderr.count("\n") == 1, out.stderr
