"""``python -m lamb_lars.study snapshot``: bad destinations and folders that are not a study are one sentence. The
end-to-end check (a study killed mid-way, snapshotted without its checkpoints and resumed from a copy, ends with the
same eval rows as the same study resumed in its own workdir from its checkpoints) shares the killed study of
tests/test_study_runner.py::test_study_survives_sigkill_of_a_trial_and_of_the_runner."""

from __future__ import annotations

import pytest

from lamb_lars.study.running import snapshot as snap
from lamb_lars.study.running import store as st
from lamb_lars.study.running import workdir as wd


@pytest.mark.parametrize("out", ["inside", "remote"])
def test_snapshot_refuses_bad_destinations_in_one_sentence(tmp_path, out):
  workdir = tmp_path / "study"
  workdir.mkdir()
  st.open_store(str(workdir / wd.STORE_FILE)).close()
  dest = str(workdir / "snap") if out == "inside" else "gs://bucket/snap"
  with pytest.raises(ValueError, match="inside the study workdir|object-store"):
    snap.snapshot(str(workdir), dest)


def test_snapshot_of_a_folder_that_is_not_a_study(tmp_path):
  with pytest.raises(ValueError, match="not a study workdir"):
    snap.snapshot(str(tmp_path), str(tmp_path.parent / "snap"))
