"""Every command in the README's shell blocks runs as written in a fresh clone, after the README's own install
(issue 62: the fast-tier line failed with ``No module named pytest`` after ``scripts/demo.sh``).

Scope, so that it fits the suite's budget on a 2-core machine (1 min 47 s of CPU, 10 min of wall time on the
shared 2-core machine under heavy load, 2026-12-05; most of it collecting the suite twice, in one process each):

* The repository's committed HEAD is cloned into a temporary folder, and the README's fenced ``bash`` blocks are
  run there in order, each through ``bash -c`` with the clone's ``lamb_lars`` first on the path.
* Nothing is installed into the shared environment: ``python`` on PATH is a shim. ``python -m pip install`` only
  records the extras it names (``-e .[test,ray]``); ``python -m pytest``, ``ruff`` and ``mypy`` then fail with
  ``No module named …``, as in a fresh environment, unless ``pyproject.toml`` declares them in the base
  dependencies or an extra installed before. Every other ``python`` runs the real interpreter.
* Each command is shortened as the README says it may be (``SHORTEN``; a README command without an entry fails the
  test): ``scripts/demo.sh`` and ``train.py`` with ``--config.`` overrides to two steps; ``scripts/test.sh`` with
  pytest's ``--collect-only`` and ``-n 0`` (every test collected, none run), ruff run as written and mypy answering
  ``--version`` (a cold mypy run takes minutes here); ``study run`` with ``--dry_run``; ``study report`` on a
  workdir this test writes beside it: the study's saved config and four finished trials.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# README command (its first words) → what this test appends to shorten it, as the README says it may.
SHORTEN = {
  "bash scripts/demo.sh": " --config.num_train_steps=2 --config.eval_every_steps=2 --config.progress=False",
  'bash scripts/test.sh -m "not slow"': "",  # the shim makes pytest collect only
  "bash scripts/test.sh": "",
  "python train.py": " --config.num_train_steps=2 --config.eval_every_steps=2 --config.progress=False"
  " --config.optimizer.schedule.allow_long_warmup=True",
  "python -m lamb_lars.study run": " --dry_run",
  "python -m lamb_lars.study report": "",
}

SHIM = """#!{python}
import os, re, sys, tomllib
REAL, LOG = {python!r}, os.environ["README_SHIM_LOG"]
args = sys.argv[1:]
if args[:2] == ["-m", "pip"]:
  if "install" in args:
    for a in args:
      m = re.fullmatch(r"\\.\\[(.*)\\]", a)
      if m:
        open(LOG, "a").write("\\n".join(m.group(1).split(",")) + "\\n")
  sys.exit(0)
if args[:1] == ["-m"] and args[1] in ("pytest", "ruff", "mypy"):
  project = tomllib.load(open("pyproject.toml", "rb"))["project"]
  extras = open(LOG).read().split() if os.path.exists(LOG) else []
  reqs = project["dependencies"] + [r for e in extras for r in project["optional-dependencies"].get(e, ())]
  if args[1] not in {{re.match(r"[A-Za-z0-9_.-]+", r).group(0).lower() for r in reqs}}:
    print(f"{{REAL}}: No module named {{args[1]}}", file=sys.stderr)
    sys.exit(1)
  if args[1] == "mypy":
    args = ["-m", "mypy", "--version"]
  elif args[1] == "pytest":  # every test collected in this process (-n 0: xdist's options still parsed), none run
    args = [a if p != "-n" else "0" for p, a in zip([""] + args, args)]
    args += ["--collect-only", "-q", "-p", "no:cacheprovider"]
os.execv(REAL, [REAL] + args)
"""


def readme_commands(text: str) -> list[str]:
  """The commands of the README's fenced bash blocks: continuation lines joined, comments and blank lines left out."""
  out = []
  for block in re.findall(r"```bash\n(.*?)```", text, re.S):
    for line in re.sub(r"\\\s*\n\s*", " ", block).splitlines():
      line = line.strip()
      if line and not line.startswith("#"):
        out.append(line)
  return out


def _shortening(cmd: str) -> str:
  for prefix, extra in SHORTEN.items():
    if cmd == prefix or cmd.startswith(prefix + " "):
      return extra
  raise AssertionError(f"the README command {cmd!r} has no shortening in SHORTEN; add one (or '' to run it as is).")


def test_readme_commands_are_parsed():
  cmds = readme_commands(open(os.path.join(REPO, "README.md"), encoding="utf-8").read())
  assert cmds[:3] == ["bash scripts/demo.sh", "bash scripts/test.sh", 'bash scripts/test.sh -m "not slow"']
  assert any(c.startswith("python train.py ") and "--config.optimizer.name=lamb" in c for c in cmds)
  for c in cmds:
    _shortening(c)


def _fake_study_workdir(clone: str, report_cmd: str) -> None:
  """The workdir the README's report command names, with the study's config saved and four finished trials (the
  study itself takes hours)."""
  workdir = os.path.join(clone, re.search(r"--workdir=(\S+)", report_cmd).group(1))
  script = f"""
import importlib.util, sys
from lamb_lars.study.running import store as st, workdir as wd
spec = importlib.util.spec_from_file_location("c", "lamb_lars/configs/studies/mnist_table3.py")
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
study = m.get_config("republish")
wd.save_study_config(study, {workdir!r}, command="python -m lamb_lars.study run")
con = st.open_store(wd.store_path({workdir!r}))
for i, (b, tech) in enumerate([(256, ""), (8192, "lamb"), (8192, "lars"), (256, "momentum")]):
  rid = f"t{{i}}"
  st.upsert_run(con, rid, study=study.name, batch_size=b, role="table3", technique=tech, cell=rid, budget_epochs=30.0)
  st.add_evals(con, rid, [dict(step=10 * (k + 1), epoch=float(k + 1), eval_accuracy=0.9 + 0.02 * k,
                               eval_loss=0.3 / (k + 1), validation_accuracy=0.9, wall_time=float(k)) for k in range(4)])
  st.set_status(con, rid, "running"); st.set_status(con, rid, "done")
con.close()
"""
  subprocess.run([sys.executable, "-c", script], cwd=clone, env={**os.environ, "PYTHONPATH": clone}, check=True)


@pytest.mark.slow
@pytest.mark.e2e
def test_every_readme_command_runs_as_written_in_a_fresh_clone(tmp_path):
  clone = str(tmp_path / "clone")
  subprocess.run(["git", "clone", "-q", REPO, clone], check=True, timeout=120)
  bin_dir = tmp_path / "bin"
  bin_dir.mkdir()
  (bin_dir / "python").write_text(SHIM.format(python=sys.executable))
  os.chmod(bin_dir / "python", 0o755)
  env = {
    **os.environ,
    "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
    "PYTHONPATH": clone,
    "README_SHIM_LOG": str(tmp_path / "extras.txt"),
    "WORKDIR": str(tmp_path / "demo"),
  }
  for cmd in readme_commands(open(os.path.join(clone, "README.md"), encoding="utf-8").read()):
    if cmd.startswith("python -m lamb_lars.study report"):
      _fake_study_workdir(clone, cmd)
    full = cmd + _shortening(cmd)
    out = subprocess.run(["bash", "-c", full], cwd=clone, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, f"{full}\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}"


def test_the_shim_refuses_pytest_when_only_the_package_is_installed(tmp_path):
  """The issue's failure: after demo.sh (the package alone), ``python -m pytest`` is not there."""
  bin_dir = tmp_path / "bin"
  bin_dir.mkdir()
  (bin_dir / "python").write_text(SHIM.format(python=sys.executable))
  os.chmod(bin_dir / "python", 0o755)
  env = {**os.environ, "README_SHIM_LOG": str(tmp_path / "extras.txt")}
  run = lambda *a: subprocess.run([str(bin_dir / "python"), *a], cwd=REPO, env=env, capture_output=True, text=True)
  assert run("-m", "pip", "install", "-e", ".").returncode == 0
  out = run("-m", "pytest", "--version")
  assert out.returncode == 1 and "No module named pytest" in out.stderr
  assert run("-m", "pip", "install", "-e", ".[test,ray]").returncode == 0
  assert run("-m", "mypy").returncode == 0
  assert open(tmp_path / "extras.txt").read().split() == ["test", "ray"]
