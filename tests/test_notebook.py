"""The Colab notebook runs top to bottom (smoke mode: synthetic data, two tiny runs, and two of a model defined in a
cell) from a fresh clone outside any checkout, as Colab runs it, and its setup and Part 1 also from the repository
root and from notebooks/. It shows its plots inline, and neither its fresh outputs nor its committed ones show a
machine path, a pip warning, a tqdm warning or a raw fit repr."""

from __future__ import annotations

import os
import re

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOK = os.path.join(ROOT, "notebooks", "mnist_batch_study.ipynb")
# What a clean output never shows: where this machine keeps the checkout or home, and the warnings seen before.
_UNWANTED = re.compile(
  r"/work/|/home/|/root/|/Users/|Running pip as the 'root' user|TqdmWarning|IProgress not "
  r"found|InverseLawFit\(|Traceback"
)


def _text(nb) -> str:
  out = []
  for cell in nb.cells:
    for o in cell.get("outputs", []) if cell.cell_type == "code" else []:
      out.append(o.get("text", ""))
      out.append(str(o.get("data", {}).get("text/plain", "")))
      out.append(str(o.get("data", {}).get("text/markdown", "")))
      out += o.get("traceback", [])
  return "".join(out)


def test_committed_outputs_are_clean():
  nb = nbformat.read(NOTEBOOK, as_version=4)
  assert not _UNWANTED.findall(_text(nb))
  assert "SMOKE=False" in _text(nb), "the committed outputs are from the full (non-smoke) run"


def _part1(nb):
  """The setup cells and Part 1 (the published studies from their CSVs): the cells before Part 2's first code cell."""
  part2 = next(i for i, c in enumerate(nb.cells) if c.cell_type == "markdown" and c.source.startswith("## Part 2"))
  return nb.cells[:part2]


@pytest.mark.slow
@pytest.mark.parametrize("folder,shown", [("", "."), ("notebooks", "..")])
def test_setup_and_part1_execute_from_the_repo_root_and_from_notebooks(folder, shown):
  """From the repository root and from notebooks/ (a local Jupyter) the setup cell finds the checkout and Part 1
  shows the published figures. Parts 2 and 3 do not depend on the notebook's folder once the checkout is found (the
  setup cell changes into it); the full run below covers them, from a fresh clone outside any checkout."""
  nb = nbformat.read(NOTEBOOK, as_version=4)
  nb.cells = _part1(nb)
  path = os.path.join(ROOT, folder) if folder else ROOT
  client = nbclient.NotebookClient(nb, timeout=240, kernel_name="python3", resources={"metadata": {"path": path}})
  client.execute()
  outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
  assert not [o for o in outputs if o.get("output_type") == "error"], _text(nb)[-3000:]
  text = _text(nb)
  assert f"lamb_lars checkout: {shown} (relative to this notebook's folder)" in text
  assert len([o for o in outputs if "image/png" in o.get("data", {})]) >= 3
  assert not _UNWANTED.findall(text) and ROOT not in text


def test_find_checkout_walks_up_or_finds_a_clone(tmp_path):
  """The setup cell's search: the checkout at or above the folder, else a clone named lamb_lars in it, else None."""
  nb = nbformat.read(NOTEBOOK, as_version=4)
  src = nb.cells[2].source
  ns: dict = {}
  exec(src[: src.index("ROOT = find_checkout()")], ns)  # noqa: S102  (the notebook's own function definition)
  find = ns["find_checkout"]
  assert find(os.path.join(ROOT, "notebooks")) == ROOT and find(ROOT) == ROOT
  (tmp_path / "lamb_lars").mkdir()  # a folder named like the package but no checkout: not a match
  assert find(str(tmp_path)) is None
  (tmp_path / "lamb_lars" / "setup.py").write_text("")
  assert find(str(tmp_path)) == str(tmp_path / "lamb_lars")


@pytest.mark.slow
@pytest.mark.e2e
def test_notebook_executes_from_outside_the_repository_as_instructed(tmp_path, monkeypatch):
  """Colab as the Setup cell instructs: a fresh working folder (Colab's /content) outside any checkout, the clone
  made and entered by the cell the notebook gives (a local ``git clone`` of this repository stands in for
  REPO_URL), then every cell; no PYTHONPATH points at this checkout, so the trials import what the clone gives."""
  import subprocess

  content = tmp_path / "content"
  content.mkdir()
  setup = nbformat.read(NOTEBOOK, as_version=4).cells[1].source
  lines = re.search(r"```\n(.*?)```", setup, re.S).group(1).strip().splitlines()
  magics = []
  for line in lines:
    m = re.fullmatch(r"!git clone REPO_URL (\S+)", line.strip())
    if m:
      subprocess.run(["git", "clone", "-q", ROOT, str(content / m.group(1))], check=True, timeout=120)
    else:
      magics.append(line)
  monkeypatch.setenv("LAMB_LARS_NOTEBOOK_SMOKE", "1")
  monkeypatch.setenv("LAMB_LARS_NOTEBOOK_WORKDIR", str(tmp_path / "study"))
  monkeypatch.delenv("XLA_FLAGS", raising=False)
  monkeypatch.delenv("PYTHONPATH", raising=False)
  # The smoke trials run a few steps, so XLA's optimisation passes cost more than they save: without them the test
  # took 59 CPU-s against 85 (2026-12-03). What it checks (paths, cells, outputs, reports) does not depend on them.
  monkeypatch.setenv("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")
  nb = nbformat.read(NOTEBOOK, as_version=4)
  nb.cells.insert(0, nbformat.v4.new_code_cell("\n".join(magics)))
  client = nbclient.NotebookClient(
    nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(content)}}
  )
  client.execute()
  outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
  assert not [o for o in outputs if o.get("output_type") == "error"], _text(nb)[-3000:]
  images = [o for o in outputs if "image/png" in o.get("data", {})]
  assert len(images) >= 3  # steps-to-target, curves, and the report's PNGs
  text = _text(nb)
  assert "SMOKE=True" in text and "done" in text
  assert "failed" not in text.split("counts")[-1][:200]
  assert not _UNWANTED.findall(text.replace(str(tmp_path), "TMP")) and ROOT not in text
  assert (tmp_path / "study" / "report" / "README.md").exists()
  # Part 3: the model a cell defines (written to my_workload.py) trained in both trials, reported with its hash
  own = tmp_path / "study_own_model"
  assert (own / "workload" / "my_workload.py").exists() and (own / "report" / "README.md").exists()
  assert "my_workload:TinyNet: my_workload.py, sha256" in text and "'done': 2" in text
