"""examples/digits end to end, from a folder outside the repository: a researcher's model and loader (copied there
under another name) train through train.py, run a tiny ladder study and a tiny branching study, are reported and
verified, and nothing under lamb_lars/ names them (issue 40's "done when")."""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "digits")
NAMES = ("mydigits_workload", "DigitsCNN", "load_digits", "examples/digits", "examples.digits")


def test_nothing_under_lamb_lars_names_the_example():
  hits = []
  for folder, _, files in os.walk(os.path.join(ROOT, "lamb_lars"), followlinks=False):
    for name in files:
      if name.endswith((".py", ".md", ".txt", ".json")):
        text = open(os.path.join(folder, name), encoding="utf-8", errors="replace").read()
        hits += [f"{name}: {n}" for n in NAMES if n in text]
  assert not hits, hits


def test_the_loader_splits_deterministically():
  pytest.importorskip("sklearn")
  sys.path.insert(0, ROOT)
  try:
    from examples.digits import workload
  finally:
    sys.path.remove(ROOT)
  a, b = workload.load(), workload.load()
  sizes = [len(a[s][1]) for s in ("train", "validation", "test")]
  assert sizes == [1257, 180, 360] and a["num_classes"] == 10
  for s in ("train", "validation", "test"):
    assert a[s][0].dtype.name == "uint8" and a[s][0].shape[1:] == (8, 8, 1) and (a[s][0] == b[s][0]).all()
  assert a["train"][0].max() == 255  # 16 → 255


def _run(args, cwd, env, timeout=900):
  proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
  assert proc.returncode == 0, f"{args}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
  return proc.stdout


@pytest.mark.slow
def test_digits_train_ladder_branch_report_verify(tmp_path):
  pytest.importorskip("sklearn")
  work = tmp_path / "project"
  work.mkdir()
  shutil.copy(os.path.join(EXAMPLE, "workload.py"), work / "mydigits_workload.py")  # the researcher's own file
  for name in ("config.py", "ladder.py"):
    shutil.copy(os.path.join(EXAMPLE, name), work / name)
  # A researcher's CPU has one device: without the suite's 8 fake ones (which only slow a tiny model down).
  env = {**{k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}, "PYTHONPATH": ROOT}
  py, wl = sys.executable, "mydigits_workload"
  model, data = f"{wl}:DigitsCNN", f"{wl}:load"

  _run(
    [
      py,
      os.path.join(ROOT, "train.py"),
      "--config=config.py",
      "--workdir=run",
      f"--config.model={model}",
      f"--config.dataset={data}",
      "--config.num_epochs=2",
      "--config.progress=False",
    ],
    work,
    env,
  )
  result = json.load(open(work / "run" / "result.json"))
  assert result["status"] == "done" and result["final"]["eval_accuracy"] > 0.5
  rows = [json.loads(line) for line in open(work / "run" / "metrics.jsonl")]
  assert rows[-1]["validation_examples"] == 180 and rows[-1]["eval_examples"] == 360

  study = [py, "-m", "lamb_lars.study"]
  over = [f"--config.base.model={model}", f"--config.base.dataset={data}"]
  _run(study + ["run", "--config=ladder.py:tiny", "--workdir=ladder"] + over, work, env)
  _run(study + ["report", "--workdir=ladder", "--out=ladder_report"], work, env)
  manifest = json.load(open(work / "ladder_report" / "manifest.json"))
  assert set(manifest["workload"]) == {model, data}
  assert manifest["workload"][model]["file"] == "mydigits_workload.py"
  assert "verified" in _run(study + ["verify", "ladder_report"], work, env)
  readme = open(work / "ladder_report" / "README.md").read()
  assert re.search(r"\b256\b", readme) and "linear" in readme

  _run(study + ["branch", "--config=ladder.py:branching_tiny", "--workdir=branching"] + over, work, env)
  _run(study + ["report", "--workdir=branching", "--out=branching_report"], work, env)
  assert "verified" in _run(study + ["verify", "branching_report"], work, env)

  with open(work / "mydigits_workload.py", "a") as f:  # the workload changes after the study: verify says so
    f.write("\n# edited\n")
  proc = subprocess.run(
    study + ["verify", "ladder_report"], cwd=work, env=env, capture_output=True, text=True, timeout=300
  )
  assert proc.returncode == 1 and "changed since the study was reported" in proc.stdout
