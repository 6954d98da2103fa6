"""Provenance beyond the code (issue 62): the manifest hashes the arrays a researcher's loader returns, so ``verify``
fails when a data file the loader reads is regenerated; and the analysis settings a report used are recorded, with
the report's first lines saying when they differ from the ones registered at the study's first trial."""

from __future__ import annotations

import json
import os
import sys

import ml_collections
import numpy as np

from lamb_lars.study.publishing import preregistration, provenance, publish
from lamb_lars.study.publishing import manifest as manifest_lib
from lamb_lars.study.running import sections
from lamb_lars.study.running import store as st
from lamb_lars.study.running import workdir as wd
from test_provenance import _curve

LOADER = """
import os
import numpy as np

def load():
  d = np.load(os.path.join(os.path.dirname(__file__), "digits62.npz"))
  return {"train": (d["x"][:48], d["y"][:48]), "test": (d["x"][48:], d["y"][48:])}
"""


def _write_npz(folder, seed: int) -> None:
  rng = np.random.default_rng(seed)
  np.savez(folder / "digits62.npz", x=rng.integers(0, 256, (64, 8, 8, 1), dtype=np.uint8), y=rng.integers(0, 3, 64))


def _workdir(tmp_path, analysis_now: dict, registered: dict | None = None) -> str:
  """A study on ``data62:load`` (an .npz beside it) with four finished trials; ``registered``: the analysis
  section recorded in preregistration.json at its first trial (None: a study started before issue 62)."""
  work = tmp_path / "work"
  study = ml_collections.ConfigDict(
    dict(
      name="tiny",
      base=dict(model="lenet5", dataset="data62:load", num_classes=3, num_epochs=30.0, eval_every_epochs=1.0),
      search=dict(metric="validation_accuracy"),
      runner=dict(num_workers=1),
      analysis=dict(title="Tiny", num_train=48, baseline_epochs=30.0, target_goal=0.9, **analysis_now),
    )
  )
  wd.save_study_config(study, str(work), command="python -m lamb_lars.study run --config=tiny.py --workdir=w")
  if registered is not None:
    then = {**study.analysis.to_dict(), **registered}
    analysis = sections.section(ml_collections.ConfigDict({**study.to_dict(), "analysis": then}), "analysis")
    preregistration.register(str(work), None, analysis=analysis)
  con = st.open_store(wd.store_path(str(work)))
  for rid, b, acc, role, tech in [
    ("baseline", 16, 0.99, "baseline", ""),
    ("linear-32", 32, 0.99, "linear", ""),
    ("tuned-32", 32, 0.99, "technique", "tuned"),
  ]:
    st.upsert_run(con, rid, study="tiny", batch_size=b, role=role, technique=tech, cell=rid, budget_epochs=30.0)
    st.add_evals(con, rid, _curve(b, acc))
    st.set_status(con, rid, "running")
    st.set_status(con, rid, "done")
  con.close()
  return str(work)


def _user_data(tmp_path, monkeypatch) -> None:
  (tmp_path / "data62.py").write_text(LOADER)
  _write_npz(tmp_path, seed=0)
  monkeypatch.syspath_prepend(str(tmp_path))
  monkeypatch.chdir(tmp_path)
  monkeypatch.delitem(sys.modules, "data62", raising=False)  # another test's data62.py, in its own tmp_path


def test_verify_fails_when_the_data_a_loader_reads_change(tmp_path, monkeypatch):
  _user_data(tmp_path, monkeypatch)
  work, out = _workdir(tmp_path, {"techniques": ["tuned"]}), str(tmp_path / "out")
  publish.publish(work, out)
  m = json.load(open(os.path.join(out, "manifest.json")))
  assert (
    m["data"]["data62:load"]["splits"] == {"test": 16, "train": 48} and len(m["data"]["data62:load"]["sha256"]) == 64
  )
  assert provenance.verify(out) == []
  _write_npz(tmp_path, seed=1)  # the loader's .py is unchanged: only its data file is regenerated
  problems = provenance.verify(out)
  assert len(problems) == 1, problems
  assert problems[0].startswith("the data 'data62:load' returns have sha256 ")
  assert problems[0].endswith(": they changed since the study was reported.")
  # a manifest written before the data were hashed (no "data") is checked on the loader's source only
  del m["data"]
  manifest_lib.write_manifest(out, m)
  assert provenance.verify(out) == []


def test_a_loader_that_fails_at_verify_is_one_sentence(tmp_path, monkeypatch):
  _user_data(tmp_path, monkeypatch)
  work, out = _workdir(tmp_path, {}), str(tmp_path / "out")
  publish.publish(work, out)
  os.remove(tmp_path / "digits62.npz")
  (problem,) = provenance.verify(out)
  assert problem.startswith("the data of 'data62:load' cannot be loaded here (FileNotFoundError: ")


def test_a_report_whose_analysis_differs_from_the_registered_one_says_so_first(tmp_path, monkeypatch):
  _user_data(tmp_path, monkeypatch)
  registered = {"techniques": ["tuned"], "target_technique": "tuned"}
  work = _workdir(tmp_path, {"techniques": ["tuned"], "target_technique": ""}, registered)
  out = str(tmp_path / "out")
  text = open(publish.publish(work, out)).read()
  first = text.split("\n## ", 1)[0]
  assert "This report's analysis differs from the one registered when the study's first trial started" in first
  assert first.endswith('preregistration.json): `analysis.target_technique`: "tuned" → "".\n')
  m = json.load(open(os.path.join(out, "manifest.json")))
  assert m["analysis"]["target_technique"] == "" and m["preregistration"]["analysis"]["target_technique"] == "tuned"
  assert provenance.verify(out) == []
  # the same analysis as registered: nothing to say
  same = _workdir(tmp_path / "b", {"techniques": ["tuned"], "target_technique": "tuned"}, registered)
  assert "differs from the one registered" not in open(publish.publish(same, str(tmp_path / "out2"))).read()


def test_the_first_run_registers_the_analysis(tmp_path):
  record = preregistration.register(str(tmp_path / "w"), None, analysis={"target_technique": "tuned", "targets": ()})
  assert record["analysis"] == {"target_technique": "tuned", "targets": []}
  assert preregistration.analysis_changes(record, {"target_technique": "tuned", "targets": ()}) == ()
  assert preregistration.analysis_changes({"commit": None}, {"target_technique": ""}) == ()  # before issue 62


def test_the_settings_name_a_loaders_own_validation_split(tmp_path, monkeypatch):
  _user_data(tmp_path, monkeypatch)
  work = _workdir(tmp_path, {})
  assert "validation split 0" in open(publish.publish(work, str(tmp_path / "a"))).read()
  (tmp_path / "data62.py").write_text(
    LOADER.replace(
      '"test": (d["x"][48:], d["y"][48:])',
      '"validation": (d["x"][48:56], d["y"][48:56]), "test": (d["x"][56:], d["y"][56:])',
    )
  )
  monkeypatch.delitem(sys.modules, "data62", raising=False)
  text = open(publish.publish(work, str(tmp_path / "b"))).read()
  assert "(48 training examples, its own validation split of 8 examples)" in text
