"""``study run --pack``: the tiny study of test_study_runner.py run packed (its searched cell of 4 as one pack,
pruned by ASHA; the baseline and the diverging LR as another; the failing trial alone) ends with the same statuses
and the same evaluation rows as run unpacked; ``--pack=auto`` packs nothing on a CPU."""

from __future__ import annotations

import collections

import pytest

from lamb_lars.study.running import pack_executor, runner, sweep

from test_study_runner import TINY_STUDY, _evals, _load_study


def test_pack_auto_is_off_on_cpu_and_bad_values_are_one_sentence(monkeypatch):
  monkeypatch.setenv("JAX_PLATFORMS", "cpu")
  assert pack_executor.resolve_pack("auto") == 1
  monkeypatch.setenv("JAX_PLATFORMS", "cuda")
  assert pack_executor.resolve_pack("auto") == pack_executor.AUTO_PACK
  assert pack_executor.resolve_pack("4") == 4
  with pytest.raises(ValueError, match="--pack="):
    pack_executor.resolve_pack("0")


def test_take_pack_groups_compatible_trials_in_order(tmp_path):
  path = tmp_path / "tiny_study.py"
  path.write_text(TINY_STUDY)
  specs = sweep.expand(_load_study(str(path)))
  todo, packs = collections.deque(specs), []
  while todo:
    packs.append(pack_executor.take_pack(todo, 3))
  sizes = sorted((len(p), p[0].batch_size, p[0].config.dataset) for p in packs)
  # base + hugelr (batch 32); the searched cell of 4 at batch 64 as 3 + 1; the cifar10 trial alone
  assert sizes == [(1, 32, "cifar10"), (1, 64, "synthetic"), (2, 32, "synthetic"), (3, 64, "synthetic")]
  order = [t.run_id for p in packs for t in p]
  assert sorted(order) == sorted(t.run_id for t in specs)
  assert packs[0][0].run_id == specs[0].run_id  # the first pending trial leads


@pytest.mark.slow
def test_a_packed_study_equals_the_unpacked_study(tmp_path):
  path = tmp_path / "tiny_study.py"
  path.write_text(TINY_STUDY)
  study = _load_study(str(path))
  unpacked, packed_ = str(tmp_path / "unpacked"), str(tmp_path / "packed")
  # One worker: ASHA's decision at a rung depends on which trials reported there first; with two workers that order
  # follows the machine's load (a loaded CI run once pruned a different trial), one after another it is the
  # submission order, the order in which the pack's slots report.
  runner.run_study(study, unpacked, poll_s=0.05, status_every_s=0, num_workers=1)
  runner.run_study(_load_study(str(path)), packed_, poll_s=0.05, status_every_s=0, pack=8)
  want, got = _evals(unpacked), _evals(packed_)
  assert {k: s for k, (s, _) in got.items()} == {k: s for k, (s, _) in want.items()}
  assert "pruned" in {s for s, _ in want.values()}
  for run_id, (_, rows) in want.items():  # a pruned trial's rows past its prune point are not in the store
    assert len(got[run_id][1]) == len(rows), run_id
    for g, w in zip(got[run_id][1], rows):
      for a, b in zip(g, w):
        assert a == b if b is None or isinstance(b, int) else a == pytest.approx(b, rel=1e-4, abs=1e-6), run_id


@pytest.mark.slow
def test_cli_bad_pack_is_one_sentence_exit_2_and_writes_nothing(tmp_path):
  import os
  import subprocess
  import sys

  repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  workdir = tmp_path / "study"
  proc = subprocess.run(
    [
      sys.executable,
      "-m",
      "lamb_lars.study",
      "run",
      f"--workdir={workdir}",
      "--config=lamb_lars/configs/studies/smoke.py",
      "--pack=0",
    ],
    cwd=repo,
    env={**os.environ, "PYTHONPATH": repo},
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert proc.returncode == 2 and "--pack='0' must be 'auto' or an integer" in proc.stderr
  assert len(proc.stderr.strip().splitlines()) == 1 and not workdir.exists()
