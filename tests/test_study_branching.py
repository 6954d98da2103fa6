"""Branching studies (lamb_lars/study/running/branches.py, python -m lamb_lars.study branch): every mistake is one
sentence before anything runs; the "Critical batch over training" section recomputes from the CSVs (verify); and,
end to end on the tiny ``:smoke`` study, the reference trains once, the runner killed mid-way and restarted ends
with every branch recorded exactly once, and a branch starts from the reference checkpoint's exact parameters."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from lamb_lars.configs import default
from lamb_lars.configs.studies import mnist_branching, smoke
from lamb_lars.study.publishing import csv_tables, provenance, publish
from lamb_lars.study.report import report_branching
from lamb_lars.study.running import branches, store as st
from lamb_lars.study.running import workdir as wd

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMOKE = "lamb_lars/configs/studies/mnist_branching.py:smoke"
HAS_INIT_FROM = "init_from_dir" in default.get_config()  # the trainer side of issue 26


def _smoke(**branching):
  c = mnist_branching.get_config("smoke")
  c.branching.update(branching)
  return c


@pytest.mark.parametrize(
  "change, message",
  [
    (dict(lr_rule="cubic"), "branching.lr_rule='cubic' is not one of"),
    (dict(points_epochs=(0.25, 5.0)), "branch point 5 epochs is past the reference's end"),
    (dict(points_epochs=(0.5, 0.45)), "falls on the same reference checkpoint"),
    (dict(delta_examples=100), "must be a positive multiple of every branch batch"),
    (dict(epsilon=0.0), "epsilon > 0"),
    (dict(num_train=512), r"analysis.num_train=512, but the reference trains on 384 examples"),
  ],
)
def test_bad_branching_settings_are_one_sentence(change, message):
  c = _smoke(**{k: v for k, v in change.items() if k != "num_train"})
  c.analysis.update({k: v for k, v in change.items() if k == "num_train"})
  with pytest.raises(ValueError, match=message) as e:
    branches.prepare(c)
  assert "\n" not in str(e.value)


def test_bad_sub_sweeps_are_one_sentence():
  c = _smoke()
  ref, branch = (dict(s) for s in c.sweeps)
  kept = branches.with_sweeps(c, [{**ref, "fixed": {**ref["fixed"], "keep_checkpoints": 3}}, branch])
  with pytest.raises(ValueError, match=r"keeps only its newest 3 checkpoints.*set keep_checkpoints ≥ 8"):
    branches.prepare(kept)
  no_b0 = branches.with_sweeps(c, [ref, {**branch, "grid": {"batch_size": (64,), "seed": (1,)}}])
  with pytest.raises(ValueError, match="holds the reference's batch 32"):
    branches.prepare(no_b0)
  with pytest.raises(ValueError, match="exactly one reference sub-sweep"):
    branches.prepare(smoke.get_config())


def test_mnist_branching_points_sit_on_reference_checkpoints():
  """0.25 … 8 epochs at B0 = 256 on 55K: the checkpoints every 54 steps at or after each point."""
  c = mnist_branching.get_config()
  ref, examples = branches.prepare(c)
  assert ref.batch_size == 256 and examples == [54 * 256 * 2**k for k in range(6)]
  sweeps = branches.branch_sweeps(c, "/abs/ref", examples)
  assert sweeps[0]["fixed"]["init_from_dir"] == "/abs/ref" and sweeps[0]["fixed"]["data_order"] == "examples"
  grid = sweeps[0]["grid"]
  assert list(grid) == ["init_from_examples", "batch_size", "seed"]
  assert len(grid["init_from_examples"]) * len(grid["batch_size"]) * len(grid["seed"]) == 126
  assert all(65536 % b == 0 for b in grid["batch_size"])


@pytest.mark.slow
def test_cli_refuses_before_anything_runs(tmp_path):
  work = tmp_path / "w"
  base = [sys.executable, "-m", "lamb_lars.study"]
  bad = subprocess.run(
    base + ["branch", f"--config={SMOKE}", f"--workdir={work}", "--config.branching.lr_rule=cubic"],
    cwd=REPO,
    capture_output=True,
    text=True,
    timeout=120,
  )
  assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0, bad.stderr
  assert bad.stderr.startswith("error: branching.lr_rule='cubic' is not one of")
  wrong = subprocess.run(
    base + ["run", f"--config={SMOKE}", f"--workdir={work}"], cwd=REPO, capture_output=True, text=True, timeout=120
  )
  assert wrong.returncode == 2 and "python -m lamb_lars.study branch" in wrong.stderr, wrong.stderr
  assert not os.path.exists(work / "study.sqlite")


# --- the report section, from CSVs alone ---------------------------------------------------------------------

N = 1000
REF_LOSS = {(0.1, 1): 0.50, (0.1, 2): 0.52, (0.2, 1): 0.30, (0.2, 2): 0.31}
DIFF = {(0.1, 64): 0.001, (0.1, 128): 0.2, (0.2, 64): 0.0, (0.2, 128): 0.002}  # 0.1: CBS 64; 0.2: ≥ 128


def _branching_workdir(tmp_path) -> str:
  work = str(tmp_path / "work")
  study = mnist_branching.get_config("smoke")
  study.analysis.num_train = N
  wd.save_study_config(study, work, command="python -m lamb_lars.study branch --config=x --workdir=w")
  con = st.open_store(wd.store_path(work))
  st.upsert_run(con, "reference", study=study.name, batch_size=32, role="baseline", budget_epochs=1.0, seed=0)
  st.add_evals(
    con,
    "reference",
    [
      {"step": s, "epoch": s * 32 / N, "examples": s * 32, "validation_loss": 1 / s, "noise_scale": 10.0 * s}
      for s in (1, 3, 6)
    ],
  )
  for (p, seed), loss in REF_LOSS.items():
    for b in (32, 64, 128):
      rid = f"branch-at{int(p * N)}-b{b}-seed{seed}"
      st.upsert_run(
        con,
        rid,
        study=study.name,
        batch_size=b,
        role="branch",
        seed=seed,
        params={
          "init_from_examples": int(p * N),
          "learning_rate": 0.05,
          "num_epochs": 0.128,
          "init_from_lr_rule": "linear",
          "init_from_lr_multiplier": 1.0,
        },
      )
      st.add_evals(con, rid, [{"step": 4, "validation_loss": loss + DIFF.get((p, b), 0.0) + 0.0001 * seed}])
  for r in st.runs(con):
    st.set_status(con, r["run_id"], "running")
    st.set_status(con, r["run_id"], "done")
  con.close()
  return work


def test_cbs_section_recomputes_from_the_csvs(tmp_path):
  work, out = _branching_workdir(tmp_path), str(tmp_path / "out")
  readme = publish.publish(work, out, command="python -m lamb_lars.study report --workdir=w --out=o")
  assert provenance.verify(out) == []
  text = open(readme, encoding="utf-8").read()
  section = provenance.sections(text)["## Critical batch over training"]
  assert "arXiv:2505.23971" in section and "McCandlish et al. 2018" in section
  assert "Δ = 128 examples (0.128 epochs) at the constant LR 1·B/B0·η_ref(t)" in section
  assert "| 0.1 | [64, 64] | no | 30 |" in section  # B_simple at 100 examples: the eval at step 3 (96)
  assert "| 0.2 | [128, 128] | yes | 60 |" in section
  assert '`batch_schedule="100:64,200:128"`' in section
  assert os.path.exists(os.path.join(out, "critical_batch_over_training.png"))
  runs = csv_tables.load_csvs(out)
  found, missing = report_branching.branch_losses(runs, N, "validation_loss")
  assert len(found) == 12 and missing == 0 and {b.point for b in found} == {0.1, 0.2}


# --- end to end (needs the trainer's init_from_* keys) -----------------------------------------------------------


def _statuses(workdir):
  con = st.open_store(wd.store_path(workdir))
  try:
    return {r["run_id"]: r["status"] for r in st.runs(con)}, con.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
  finally:
    con.close()


def _done_branches(workdir):
  runs = os.path.join(workdir, "runs")
  return [
    d
    for d in (os.listdir(runs) if os.path.isdir(runs) else ())
    if d.startswith("branch-") and os.path.exists(os.path.join(runs, d, "result.json"))
  ]


def _params(run_dir: str, step: int):
  import orbax.checkpoint as ocp

  state = ocp.StandardCheckpointer().restore(os.path.join(run_dir, "checkpoints", str(step), "state"))
  return state["params"]


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.skipif(not HAS_INIT_FROM, reason="the trainer has no init_from_* keys yet (issue 26, trainer side)")
def test_branching_end_to_end_resumes_and_records_each_branch_once(tmp_path):
  work = str(tmp_path / "study")
  # Every trial runs a few steps, so the runner and its trials compile without XLA's optimisation passes (they cost
  # more than they save here: 104 CPU-s against 155, 2026-12-03); every comparison is between trials compiled alike.
  env = {**{k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}, "JAX_DISABLE_MOST_OPTIMIZATIONS": "1"}
  cmd = [sys.executable, "-m", "lamb_lars.study", "branch", f"--config={SMOKE}", f"--workdir={work}"]
  proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  deadline = time.monotonic() + 300
  while proc.poll() is None and not _done_branches(work) and time.monotonic() < deadline:
    time.sleep(0.05)
  assert proc.poll() is None, "the study ended before the runner could be killed:\n" + proc.stdout.read()
  os.kill(proc.pid, signal.SIGKILL)  # mid-way through the branches
  proc.wait()
  proc.stdout.close()
  out = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
  assert out.returncode == 0, out.stdout + out.stderr
  statuses, rows = _statuses(work)
  ref = [r for r in statuses if r.startswith("reference-")]
  assert len(ref) == 1 and rows == 1 + 8 and set(statuses.values()) == {"done"}, statuses
  assert "0 to run" in out.stdout.splitlines()[0] or "1 already finished" in out.stdout
  # each branch evaluated once, at its end; the same command again runs nothing
  con = st.open_store(wd.store_path(work))
  assert all(len(st.evals(con, rid)) == 1 for rid in statuses if rid.startswith("branch-"))
  con.close()
  again = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
  assert again.returncode == 0 and again.stdout.count("0 to run") == 2, again.stdout + again.stderr
  _check_branch_starts_from_reference(work, ref[0], tmp_path)
  rep = publish.publish(work, str(tmp_path / "report"))
  assert "## Critical batch over training" in open(rep, encoding="utf-8").read()
  assert provenance.verify(str(tmp_path / "report")) == []
  _check_snapshot_resumes(work, cmd, env, ref[0], tmp_path)


def _rerun(cmd, env):
  out = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
  assert out.returncode == 0, out.stdout + out.stderr
  return out.stdout


def _check_snapshot_resumes(work: str, cmd, env, ref_id: str, tmp_path) -> None:
  """A snapshot of a branching study keeps the reference's checkpoints at the branch points and no others; put
  back at the study's path, a branch that was still to run trains from them to the same eval rows; and with them
  gone altogether, the finished branches are not checked against them again (only trials that will run are)."""
  from lamb_lars.study.running import snapshot as snap

  con = st.open_store(wd.store_path(work))
  rows = st.runs(con)
  victim = sorted(r["run_id"] for r in rows if r["role"] == "branch")[-1]
  before = [(e["step"], e["validation_loss"]) for e in st.evals(con, victim)]
  con.close()
  points = {r["config"]["init_from_examples"] for r in rows if r["role"] == "branch"}
  assert points and all(p % 32 == 0 for p in points)  # the reference trains at a constant batch of 32
  want = sorted(p // 32 for p in points)
  ckpt = lambda w: sorted(int(d) for d in os.listdir(os.path.join(w, "runs", ref_id, "checkpoints")) if d.isdigit())
  assert set(ckpt(work)) > set(want)  # the reference kept more than the branch points
  record = snap.snapshot(work, str(tmp_path / "snap"))
  assert record["kept_branch_points"] == {ref_id: want} and record["missing_branch_points"] == []
  assert ckpt(str(tmp_path / "snap")) == want
  assert not any(
    os.path.exists(os.path.join(tmp_path, "snap", "runs", r["run_id"], "checkpoints"))
    for r in rows
    if r["run_id"] != ref_id
  )
  # the snapshot at the study's own path, one branch as if it had been running when the snapshot was taken
  os.rename(work, work + ".orig")
  shutil.copytree(tmp_path / "snap", work)
  shutil.rmtree(wd.run_dir(work, victim))
  con = st.open_store(wd.store_path(work))
  st.set_status(con, victim, "pending")
  st.delete_evals_after(con, victim, -1)
  con.close()
  assert "1 to run" in _rerun(cmd, env)
  statuses, _ = _statuses(work)
  con = st.open_store(wd.store_path(work))
  after = [(e["step"], e["validation_loss"]) for e in st.evals(con, victim)]
  con.close()
  assert set(statuses.values()) == {"done"} and after == before
  # no checkpoint at all: every branch has ended, so none is checked against the reference's checkpoints
  shutil.rmtree(os.path.join(work, "runs", ref_id, "checkpoints"))
  assert _rerun(cmd, env).count("0 to run") == 2


def _check_branch_starts_from_reference(work: str, ref_id: str, tmp_path) -> None:
  """A branch at LR 0 (multiplier 0) ends with exactly the parameters of the reference checkpoint it restored."""
  from lamb_lars.study.running import run_one
  from lamb_lars.train.trainer import train_and_evaluate

  branch = sorted(d for d in os.listdir(os.path.join(work, "runs")) if d.startswith("branch-at192-b32-"))[0]
  config = run_one.load_trial_config(wd.run_dir(work, branch))
  config.init_from_lr_multiplier = 0.0
  frozen = str(tmp_path / "frozen")
  train_and_evaluate(config, frozen)
  after = _params(frozen, max(int(d) for d in os.listdir(os.path.join(frozen, "checkpoints")) if d.isdigit()))
  before = _params(wd.run_dir(work, ref_id), 192 // 32)
  leaves = lambda tree: [np.asarray(x) for x in __import__("jax").tree_util.tree_leaves(tree)]
  assert len(leaves(after)) == len(leaves(before)) > 0
  assert all(np.array_equal(a, b) for a, b in zip(leaves(after), leaves(before)))
  moved = _params(wd.run_dir(work, branch), 128 // 32)  # the real branch (LR > 0, Δ = 128 examples) did move
  assert not all(np.array_equal(a, b) for a, b in zip(leaves(moved), leaves(before)))
  assert json.loads(open(os.path.join(wd.run_dir(work, branch), "result.json")).read())["status"] == "done"
