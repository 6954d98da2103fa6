"""The comparison of our runs with the authors' logs (lamb_lars/proj/you2020/paper_logs.py,
lamb_lars/proj/you2020/authors_logs.py), on fabricated run dirs; its manifest and `study verify`."""

from __future__ import annotations

import csv
import json
import math
import os

import numpy as np
import pytest

import subprocess
from unittest import mock
import sys

from lamb_lars.common import code_state
from lamb_lars.proj.you2020 import authors_logs, paper, paper_logs
from lamb_lars.study.publishing import manifest as manifest_lib
from lamb_lars.study.publishing import provenance


def _result(path, acc, status="done"):
  os.makedirs(path, exist_ok=True)
  with open(os.path.join(path, "result.json"), "w") as f:
    json.dump({"status": status, "step": 35, "final": {"eval_accuracy": acc}, "train_time": 1.0}, f)


def test_authors_table_is_consistent():
  assert set(paper.AUTHORS) == {
    "momentum_b1024",
    "lars_b8192",
    "lamb_b1024",
    "momentum_b60000",
    "lars_b60000",
    "lamb_b60000",
  }
  assert len(paper.AUTHORS["momentum_b1024"].runs) == 6 and len(paper.AUTHORS["lamb_b1024"].runs) == 5
  assert math.isclose(paper.AUTHORS["lars_b60000"].mean, 0.9727)
  assert paper.LARS_FULL_BATCH_SLICE[22.0] == paper.AUTHORS["lars_b60000"].mean


def test_report_verdicts_follow_the_interval(tmp_path):
  w = str(tmp_path / "w")
  # lars_b8192 (theirs 99.35, ±0.3): three seeds tightly around 99.30 → agrees
  for seed, acc in enumerate((0.9929, 0.9930, 0.9931)):
    _result(paper_logs.run_dir(w, "lars_b8192", seed), acc)
  # momentum_b60000 (theirs 92.44, ±1.0): three seeds tightly around 97.0 → differs
  for seed, acc in enumerate((0.9699, 0.9700, 0.9701)):
    _result(paper_logs.run_dir(w, "momentum_b60000", seed), acc)
  # lamb_b60000: one seed → inconclusive (no interval); lars_b60000: one seed diverged → inconclusive
  _result(paper_logs.run_dir(w, "lamb_b60000", 0), 0.988)
  _result(paper_logs.run_dir(w, "lars_b60000", 0), 0.97)
  _result(paper_logs.run_dir(w, "lars_b60000", 1), None, status="diverged")
  _result(paper_logs.run_dir(w, "lars_b60000", 0, learning_rate=22.0), 0.95)
  out = str(tmp_path / "out")
  paper_logs.write_report(w, out, "test")
  with open(os.path.join(out, "runs.csv")) as f:
    rows = {r["config"]: r for r in authors_logs.comparison(list(csv.DictReader(f)))}
  assert rows["lars_b8192"]["verdict"] == "agrees"
  assert rows["momentum_b60000"]["verdict"] == "differs"
  assert rows["lamb_b60000"]["verdict"] == "inconclusive"
  assert rows["lars_b60000"]["verdict"] == "inconclusive"
  assert rows["lamb_b1024"]["verdict"] == "not run"
  # mean and 95% t interval from numpy: t_{0.975,2} = 4.3027
  x = np.array([0.9929, 0.9930, 0.9931])
  half = 4.302653 * x.std(ddof=1) / math.sqrt(3)
  s = rows["lars_b8192"]["summary"]
  assert math.isclose(s.mean, x.mean()) and math.isclose(s.hi - s.mean, half, rel_tol=1e-6)
  assert math.isclose(rows["lars_b8192"]["diff"], x.mean() - 0.9935)
  with open(os.path.join(out, "runs.csv")) as f:
    runs = list(csv.DictReader(f))
  assert len(runs) == 3 + 3 + 1 + 2 + 1  # the slice run is a row too, with its LR
  assert [r["learning_rate"] for r in runs if r["learning_rate"]] == ["22"]
  readme = open(os.path.join(out, "README.md")).read()
  assert "| 22 | 97.27 | 95.00, 97.00, — |" in readme  # the slice run at 22 and lars_b60000's own seeds (LR 22)
  assert readme.count("| differs |") == 1 and readme.count("| agrees |") == 1


@pytest.mark.slow
def test_published_folder_verifies_and_a_changed_number_is_caught(tmp_path):
  w, out = str(tmp_path / "w"), str(tmp_path / "out")
  for seed, acc in enumerate((0.9929, 0.9931)):
    _result(paper_logs.run_dir(w, "lars_b8192", seed), acc)
  paper_logs.write_report(w, out, "python -m lamb_lars.proj.you2020.paper_logs report")
  assert provenance.verify(out) == []
  cli = subprocess.run([sys.executable, "-m", "lamb_lars.study", "verify", out], capture_output=True, text=True)
  assert cli.returncode == 0, cli.stdout + cli.stderr
  # a hand edit of one accuracy, with the hash updated to hide it: the recomputed README disagrees
  runs = os.path.join(out, "runs.csv")
  text = open(runs).read().replace("0.992900", "0.995000")
  open(runs, "w").write(text)
  m = json.load(open(os.path.join(out, "manifest.json")))
  m["files"]["runs.csv"] = code_state.sha256(runs)
  manifest_lib.write_manifest(out, m)
  assert provenance.verify(out) == ["README.md differs from the one recomputed from runs.csv."]
  # without the hash update, the hash mismatch is named first
  open(runs, "w").write(text.replace("0.995000", "0.996000"))
  assert "runs.csv has sha256" in provenance.verify(out)[0]


@pytest.mark.slow
@pytest.mark.e2e
def test_run_with_two_workers_runs_two_at_once_each_pinned_and_single_threaded(tmp_path, monkeypatch):
  """``--workers=2``: two runs overlap in time, each pinned to its own CPU with one XLA intra-op thread; finished
  runs are skipped on a re-run."""
  import os
  import sys

  if not hasattr(os, "sched_setaffinity") or (os.cpu_count() or 1) < 2:
    import pytest

    pytest.skip("needs CPU pinning and 2 CPUs")
  probe = (
    "import json, os, sys, time; out = sys.argv[1]; t0 = time.time(); time.sleep(1.5); "
    "json.dump({'cpus': sorted(os.sched_getaffinity(0)), 'xla': os.environ.get('XLA_FLAGS', ''), "
    "'span': [t0, time.time()]}, open(os.path.join(out, 'probe.json'), 'w')); "
    "json.dump({'status': 'done', 'step': 1, 'final': {}}, open(os.path.join(out, 'result.json'), 'w'))"
  )
  monkeypatch.setattr(paper_logs, "_command", lambda name, seed, out, lr: [sys.executable, "-c", probe, out])
  w = str(tmp_path / "w")
  assert paper_logs.run(w, ["lars_b8192"], [0, 1], workers=2) == 0
  probes = [json.load(open(os.path.join(paper_logs.run_dir(w, "lars_b8192", s), "probe.json"))) for s in (0, 1)]
  share = len(os.sched_getaffinity(0)) // 2
  assert sorted(len(p["cpus"]) for p in probes) == [share] * 2
  assert not set(probes[0]["cpus"]) & set(probes[1]["cpus"])
  assert set(probes[0]["cpus"] + probes[1]["cpus"]) <= os.sched_getaffinity(0)
  assert all(f"intra_op_parallelism_threads={share}" in p["xla"] for p in probes)
  (a0, a1), (b0, b1) = probes[0]["span"], probes[1]["span"]
  assert a0 < b1 and b0 < a1  # they overlapped
  os.remove(os.path.join(paper_logs.run_dir(w, "lars_b8192", 0), "probe.json"))
  assert paper_logs.run(w, ["lars_b8192"], [0, 1], workers=2) == 0  # both finished: nothing runs again
  assert not os.path.exists(os.path.join(paper_logs.run_dir(w, "lars_b8192", 0), "probe.json"))


def test_run_records_its_command_and_commit(tmp_path, monkeypatch):
  """``run`` appends its own command line, with the commit of the code that runs it, to WORKDIR/commands.txt (the
  manifest's ``run_commands``), so no record of how the runs were launched is written by hand."""
  import os

  monkeypatch.setattr(paper_logs, "run", lambda *a, **k: 0)
  monkeypatch.delenv("XLA_FLAGS", raising=False)
  w = str(tmp_path / "w")
  argv = ["run", f"--workdir={w}", "--configs=lars_b8192", "--seeds=3"]
  assert paper_logs.main(argv) == 0 and paper_logs.main(argv) == 0
  lines = open(os.path.join(w, "commands.txt")).read().splitlines()
  commit = code_state.code_state()["commit"]
  assert len(lines) == 2 and all(
    f"  python -m lamb_lars.proj.you2020.paper_logs {' '.join(argv)}   # commit {commit}" in ln for ln in lines
  )


@pytest.mark.slow
@pytest.mark.e2e
def test_a_run_killed_by_the_oom_killer_is_reported_and_counted(tmp_path, monkeypatch, capsys):
  """A child killed by SIGKILL (what the out-of-memory killer sends) is counted as failed and named in one line
  with the likely cause, instead of vanishing from the log while the queue moves on."""
  import sys

  monkeypatch.setattr(
    paper_logs,
    "_command",
    lambda name, seed, out, lr: [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"],
  )
  assert paper_logs.run(str(tmp_path / "w"), ["lars_b60000"], [0], workers=1) == 1
  out = capsys.readouterr().out
  assert "lars_b60000 lr as logged seed 0 FAILED: killed by SIGKILL" in out and "out-of-memory" in out


def test_run_records_its_cpus_and_xla_flags_when_placed(tmp_path, monkeypatch):
  """A run launched under taskset with XLA_FLAGS (two queues side by side, one per core) says so in its line."""
  import os

  if not hasattr(os, "sched_setaffinity") or (os.cpu_count() or 1) < 2:
    import pytest

    pytest.skip("needs CPU pinning and 2 CPUs")
  monkeypatch.setattr(paper_logs, "run", lambda *a, **k: 0)
  monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")
  before = os.sched_getaffinity(0)
  os.sched_setaffinity(0, {0})
  try:
    paper_logs.main(["run", f"--workdir={tmp_path}", "--configs=lars_b8192", "--seeds=0"])
  finally:
    os.sched_setaffinity(0, before)
  line = open(os.path.join(tmp_path, "commands.txt")).read()
  assert line.rstrip().endswith("; CPUs [0]; XLA_FLAGS='--xla_cpu_multi_thread_eigen=false'")


@pytest.mark.slow
@pytest.mark.e2e
def test_two_runs_that_do_not_fit_in_memory_together_never_overlap(tmp_path, monkeypatch):
  """With two workers and a 20 GB budget, two full-batch runs (≈ 14 GB each, as estimated) never run at once, while
  a small run takes the other slot beside each; nothing is skipped. Two full-batch runs at once were killed by the
  out-of-memory killer on the 24 GiB machine (docs/BENCHMARKS.md §22)."""
  import os
  import sys

  probe = (
    "import json, os, sys, time; out = sys.argv[1]; t0 = time.time(); time.sleep(1.0); "
    "json.dump({'span': [t0, time.time()]}, open(os.path.join(out, 'probe.json'), 'w')); "
    "json.dump({'status': 'done', 'step': 1, 'final': {}}, open(os.path.join(out, 'result.json'), 'w'))"
  )
  monkeypatch.setattr(paper_logs, "_command", lambda name, seed, out, lr: [sys.executable, "-c", probe, out])
  w = str(tmp_path / "w")
  gb = {"lamb_b60000": 14.0, "momentum_b1024": 1.2}.get
  assert paper_logs.run(w, ["lamb_b60000", "momentum_b1024"], [0, 1], workers=2, memory_gb=20.0, gb=gb) == 0
  span = lambda name, s: json.load(open(os.path.join(paper_logs.run_dir(w, name, s), "probe.json")))["span"]
  (a0, a1), (b0, b1) = span("lamb_b60000", 0), span("lamb_b60000", 1)
  assert a1 <= b0 or b1 <= a0  # the two big ones one after the other
  (m0, m1) = span("momentum_b1024", 0)
  assert m0 < a1 and a0 < m1  # a small one beside the first big one


def test_memory_estimate_from_the_micro_batch_loop():
  """estimated_gb: with the unrolled loop 1.2 GB + 0.46 GB per extra micro-batch (30 at the full batch, 8 of 1,024 at
  8K, 1 at 1K); with the host loop (the full-batch paper configs) 2.0 GB whatever the batch (peak RSS,
  docs/BENCHMARKS.md §22, §24)."""
  import pytest

  unrolled = lambda name: mock.patch.object(paper_logs, "load_config", _with_loop(name, "unrolled"))
  with unrolled("momentum_b1024"):
    assert paper_logs.estimated_gb("momentum_b1024") == pytest.approx(1.2)
  with unrolled("lars_b8192"):
    assert paper_logs.estimated_gb("lars_b8192") == pytest.approx(1.2 + 0.46 * 7)
  with unrolled("lamb_b60000"):
    assert paper_logs.estimated_gb("lamb_b60000") == pytest.approx(1.2 + 0.46 * 29)
  assert paper_logs.estimated_gb("momentum_b1024") == pytest.approx(1.2)  # as configured: unrolled, 1 micro-batch
  assert paper_logs.estimated_gb("lamb_b60000") == pytest.approx(2.0)  # as configured: the host loop


def _with_loop(name, loop):
  real = paper_logs.load_config

  def load(n, seed):
    config = real(n, seed)
    config.microbatch_loop = loop
    return config

  return load


def test_their_full_batch_result_among_their_neighbouring_runs():
  """The authors' logged full-batch runs are each one of their LR × warmup sweep's runs (the transcription holds
  them), ranked among those by accuracy; each of our seeds gets the share of their runs below it (numpy reference)."""
  from lamb_lars.proj.you2020 import paper

  runs = [
    {"config": "lamb_b60000", "learning_rate": "", "seed": "0", "status": "done", "eval_accuracy": "0.9856"},
    {"config": "lamb_b60000", "learning_rate": "", "seed": "1", "status": "diverged", "eval_accuracy": ""},
  ]
  rows = {r["config"]: r for r in authors_logs.neighbours(runs)}
  for name, near in paper.AUTHORS_NEIGHBOURS.items():
    theirs = np.array(list(near.runs.values()))
    assert paper.AUTHORS[name].mean in near.runs.values()  # their logged run is one of the sweep's
    r = rows[name]
    assert r["n"] == theirs.size and math.isclose(r["sd"], theirs.std(ddof=1))
    assert r["rank"] == 1 + int(np.sum(theirs > paper.AUTHORS[name].mean))
  lamb = np.array(list(paper.AUTHORS_NEIGHBOURS["lamb_b60000"].runs.values()))
  assert rows["lamb_b60000"]["ours"] == [(0.9856, float(np.mean(lamb < 0.9856)))]  # the diverged seed has no share
  assert rows["lamb_b60000"]["where"] == "LR 0.1–0.12, warmup 5–25" and rows["lars_b60000"]["rank"] == 1
  assert len(paper.AUTHORS_NEIGHBOURS["lamb_b60000"].runs) == 45 and max(lamb) == 0.9887


def test_runs_csv_names_each_runs_micro_batch_loop(tmp_path):
  """From the run's recorded config: microbatch_loop, or the older unroll_microbatches flag, or nothing recorded."""
  w = str(tmp_path / "w")
  recorded = [{"microbatch_loop": "host"}, {"unroll_microbatches": True}, {"unroll_microbatches": False}, None]
  for seed, config in enumerate(recorded):
    d = paper_logs.run_dir(w, "lamb_b60000", seed)
    _result(d, 0.985)
    if config is not None:
      with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config, f)
  rows = paper_logs.collect(w)
  assert [r[authors_logs.RUNS_COLUMNS.index("microbatch_loop")] for r in rows] == ["host", "unrolled", "scan", ""]
