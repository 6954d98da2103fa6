"""The Colab notebook runs top to bottom (smoke mode: synthetic data, two tiny runs) and shows its plots inline."""
from __future__ import annotations

import os

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOK = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "notebooks",
                        "mnist_batch_study.ipynb")


def test_notebook_executes_in_smoke_mode(tmp_path, monkeypatch):
  monkeypatch.setenv("LAMB_LARS_NOTEBOOK_SMOKE", "1")
  monkeypatch.setenv("LAMB_LARS_NOTEBOOK_WORKDIR", str(tmp_path / "study"))
  monkeypatch.delenv("XLA_FLAGS", raising=False)  # one CPU device per trainer (the suite's 8 fake ones are slow)
  nb = nbformat.read(NOTEBOOK, as_version=4)
  client = nbclient.NotebookClient(nb, timeout=240, kernel_name="python3",
                                   resources={"metadata": {"path": os.path.dirname(NOTEBOOK)}})
  client.execute()
  outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
  assert not [o for o in outputs if o.get("output_type") == "error"]
  images = [o for o in outputs if "image/png" in o.get("data", {})]
  assert len(images) >= 3  # steps-to-target, curves, and the report's PNGs
  text = "".join(o.get("text", "") for o in outputs)
  assert "SMOKE=True" in text and "done" in text
  assert (tmp_path / "study" / "report" / "README.md").exists()
