"""Provenance of published study folders: publish writes manifest.json, ``verify`` recomputes the README from the
CSVs and checks hashes and counts, a tampered CSV fails, and every folder in docs/studies/ verifies."""

from __future__ import annotations

import csv
import glob
import json
import os
import shutil
import subprocess
import sys

import ml_collections
import pytest

from lamb_lars.study.publishing import claims, provenance, publish
from lamb_lars.study.running import store as st
from lamb_lars.study.running import workdir as wd
from lamb_lars.common import code_state
from lamb_lars.study.publishing import manifest as manifest_lib

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _curve(b, acc, n=4):
  return [
    {
      "step": (i + 1) * 10,
      "epoch": 30.0 * (i + 1) / n,
      "examples": (i + 1) * 10 * b,
      "wall_time": 1.0 + i,
      "eval_accuracy": acc * (i + 1) / n,
      "eval_loss": 1.0 / (i + 1),
      "validation_loss": 0.05 / (i + 1),
      "validation_accuracy": acc * (i + 1) / n,
      "noise_scale": 100.0 * (i + 1),
    }
    for i in range(n)
  ]


def _workdir(tmp_path):
  work = tmp_path / "work"
  study = ml_collections.ConfigDict(
    dict(
      name="tiny",
      base=dict(model="lenet5", dataset="mnist", num_classes=10, num_epochs=30.0, eval_every_epochs=1.0),
      search=dict(metric="validation_accuracy"),
      runner=dict(num_workers=1),
      analysis=dict(
        title="Tiny",
        paper="mnist_lenet",
        num_train=1000,
        baseline_epochs=30.0,
        target_goal=0.9,
        techniques=["tuned"],
        target_technique="tuned",
      ),
    )
  )
  wd.save_study_config(study, str(work), command="python -m lamb_lars.study run --config=tiny.py --workdir=w")
  con = st.open_store(wd.store_path(str(work)))
  rows = [
    ("baseline", 256, 0.99, "baseline", ""),
    ("linear-512", 512, 0.99, "linear", ""),
    ("linear-1024", 1024, 0.5, "linear", ""),
    ("tuned-1024", 1024, 0.99, "technique", "tuned"),
  ]
  for rid, b, acc, role, tech in rows:
    st.upsert_run(
      con,
      rid,
      study="tiny",
      batch_size=b,
      optimizer="momentum",
      role=role,
      technique=tech,
      cell=rid,
      budget_epochs=30.0,
      params={"learning_rate": 0.05},
    )
    st.add_evals(con, rid, _curve(b, acc))
    st.set_status(con, rid, "running")
    st.set_status(con, rid, "done")
  con.close()
  return str(work)


def test_publish_writes_a_manifest_that_verifies(tmp_path):
  work, out = _workdir(tmp_path), str(tmp_path / "out")
  publish.publish(work, out, command="python -m lamb_lars.study report --workdir=w --out=o")
  with open(os.path.join(out, "manifest.json")) as f:
    m = json.load(f)
  assert m["study"] == "tiny" and m["trials"] == {"total": 4, "by_status": {"done": 4}}
  assert m["commands"][-1] == "python -m lamb_lars.study report --workdir=w --out=o"
  assert "run --config=tiny.py" in m["commands"][0]
  assert len(m["config_sha256"]) == 64 and m["machine"]["cpu_count"] == os.cpu_count()
  assert set(m["files"]) == {"runs.csv", "evals.csv", "README.md"} and m["superseded"] is False
  assert m["started"] and m["finished"] and "commit" in m["code"] and "dirty" in m["code"]
  assert provenance.verify(out) == []


def test_tampered_csv_or_readme_fails_verify(tmp_path):
  work, out = _workdir(tmp_path), str(tmp_path / "out")
  publish.publish(work, out)
  evals = os.path.join(out, "evals.csv")
  with open(evals, newline="") as f:
    rows = list(csv.DictReader(f))
  for r in rows:  # linear scaling at 512 now fails Def. 2.1
    if r["run_id"] == "linear-512":
      r["test_accuracy"] = str(float(r["test_accuracy"]) / 2)
  with open(evals, "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)
  problems = provenance.verify(out)
  assert len(problems) == 1 and problems[0].startswith("evals.csv has sha256")
  # re-hash the tampered CSV into the manifest: now the recomputed README disagrees with the committed one
  m = json.load(open(os.path.join(out, "manifest.json")))
  m["files"]["evals.csv"] = code_state.sha256(evals)
  manifest_lib.write_manifest(out, m)
  problems = provenance.verify(out)
  assert problems and all("differs from the one recomputed from the CSVs" in p for p in problems), problems
  # a hand-edited README
  publish.publish(work, out)
  readme = os.path.join(out, "README.md")
  with open(readme, "a") as f:
    f.write("\nB_L = 512.\n")
  problems = provenance.verify(out)
  assert len(problems) == 1 and problems[0].startswith("README.md has sha256 ")
  # a manifest whose trial counts do not match runs.csv
  publish.publish(work, out)
  m = json.load(open(os.path.join(out, "manifest.json")))
  m["trials"]["total"] = 5
  manifest_lib.write_manifest(out, m)
  assert provenance.verify(out) == [
    "runs.csv has 4 trials {'done': 4}, the manifest says {'by_status': {'done': 4}, 'total': 5}."
  ]


@pytest.mark.slow
@pytest.mark.e2e
def test_cli_verify_exit_codes(tmp_path):
  work, out = _workdir(tmp_path), str(tmp_path / "out")
  publish.publish(work, out)
  run = lambda *a: subprocess.run(
    [sys.executable, "-m", "lamb_lars.study", "verify", *a],
    cwd=REPO,
    capture_output=True,
    text=True,
    env={**os.environ, "PYTHONPATH": REPO},
  )
  ok = run(out)
  assert ok.returncode == 0 and ok.stdout.strip().endswith("verified"), ok.stderr
  os.remove(os.path.join(out, "evals.csv"))
  bad = run(out)
  assert bad.returncode == 1 and "evals.csv is missing." in bad.stdout
  none = run(str(tmp_path))
  assert none.returncode == 2 and none.stderr.count("\n") == 1 and "has no manifest.json" in none.stderr


PUBLISHED = sorted(
  os.path.dirname(p) for p in glob.glob(os.path.join(REPO, "docs", "studies", "**", "runs.csv"), recursive=True)
)


def test_every_published_folder_has_a_manifest():
  assert PUBLISHED and all(os.path.isfile(os.path.join(d, "manifest.json")) for d in PUBLISHED)


@pytest.mark.parametrize("folder", PUBLISHED, ids=[os.path.relpath(d, REPO) for d in PUBLISHED])
def test_published_folder_verifies(folder):
  assert provenance.verify(folder) == []


def test_the_code_state_is_read_before_the_report_writes_anything(tmp_path, monkeypatch):
  """A clean checkout publishing into itself is recorded clean: its own new files are not 'edits'."""
  work, out = _workdir(tmp_path), str(tmp_path / "out")
  seen = []
  monkeypatch.setattr(
    code_state,
    "code_state",
    lambda: seen.append(os.listdir(out) if os.path.isdir(out) else []) or {"commit": "abc", "dirty": False},
  )
  publish.publish(work, out)
  assert seen == [[]]
  assert json.load(open(os.path.join(out, "manifest.json")))["code"] == {"commit": "abc", "dirty": False}


def test_each_study_command_is_stamped_with_the_commit_that_ran_it(tmp_path):
  """commands.txt (and so the manifest's ``commands``) names the commit of the code that ran each command: a study
  run from a worktree at one commit and reported from another shows both."""
  work, out = _workdir(tmp_path), str(tmp_path / "out")
  line = wd.commands(work)[0]
  head = code_state.code_state()
  assert head["commit"] and line.endswith(
    f"--workdir=w   # commit {head['commit']}" + (", uncommitted changes" if head["dirty"] else "")
  )
  assert wd.command_line("c", {"commit": "ab" * 20, "dirty": True}) == f"c   # commit {'ab' * 20}, uncommitted changes"
  assert wd.command_line("c", {"commit": None, "dirty": None}) == "c   # commit unknown (not a git checkout)"
  publish.publish(work, out, command="python -m lamb_lars.study report --workdir=w --out=o")
  with open(os.path.join(out, "manifest.json")) as f:
    assert json.load(f)["commands"][0] == line
  assert provenance.verify(out) == []


def test_rereport_recomputes_the_readme_from_the_published_csvs(tmp_path, monkeypatch):
  """After the analysis changes (here: a README written by an older report, simulated by editing it and
  re-hashing), ``rereport`` recomputes README.md from the folder's own CSVs at the current clean commit and records
  that in the manifest; it refuses a folder whose CSVs are not the manifest's, and a dirty checkout."""
  work, out = _workdir(tmp_path), str(tmp_path / "out")
  publish.publish(work, out, command="python -m lamb_lars.study report --workdir=w --out=o")
  readme = os.path.join(out, "README.md")
  fresh = open(readme).read()
  open(readme, "w").write(fresh.replace("## Regimes", "## Regimes\n\nan older analysis said B_L = 512.", 1))
  m = json.load(open(os.path.join(out, "manifest.json")))
  m["files"]["README.md"] = code_state.sha256(readme)
  m["not_recomputed"] = {"## Trials": "an older report"}
  manifest_lib.write_manifest(out, m)
  assert any("## Regimes" in p for p in provenance.verify(out))
  monkeypatch.setattr(code_state, "code_state", lambda: {"commit": "f" * 40, "dirty": False})
  provenance.rereport(out, "python -m lamb_lars.study rereport o")
  assert open(readme).read() == fresh and provenance.verify(out) == []
  m = json.load(open(os.path.join(out, "manifest.json")))
  assert m["code"]["commit"] == "f" * 40 and "not_recomputed" not in m
  assert [r["command"] for r in m["rereports"]] == ["python -m lamb_lars.study rereport o"]
  assert m["commands"][-1] == "python -m lamb_lars.study report --workdir=w --out=o"  # the runs' record is kept
  monkeypatch.setattr(code_state, "code_state", lambda: {"commit": "f" * 40, "dirty": True})
  with pytest.raises(ValueError, match="uncommitted changes"):
    provenance.rereport(out, "x")
  monkeypatch.setattr(code_state, "code_state", lambda: {"commit": "f" * 40, "dirty": False})
  with open(os.path.join(out, "runs.csv"), "a") as f:
    f.write("\n")
  with pytest.raises(ValueError, match="runs.csv is not the file its manifest records"):
    provenance.rereport(out, "x")


def test_rereport_can_adopt_the_measured_fit_rule(tmp_path, monkeypatch):
  """A folder published before issue 62 (``fit_rule`` 'any') re-reported with ``--fit_rule=measured`` reads as a
  fresh report does (the README that ``publish`` writes with the default rule), verifies, and records the change
  in its spec and in the re-report's entry; an unknown rule is one sentence and exit 2."""
  work, out = _workdir(tmp_path), str(tmp_path / "out")
  publish.publish(work, out, command="python -m lamb_lars.study report --workdir=w --out=o")
  readme = os.path.join(out, "README.md")
  fresh = open(readme).read()
  monkeypatch.setattr(code_state, "code_state", lambda: {"commit": "f" * 40, "dirty": False})
  provenance.rereport(out, "old", fit_rule="any")  # as a folder published before the rule reads
  assert json.load(open(os.path.join(out, "manifest.json")))["report_spec"]["fit_rule"] == "any"
  assert provenance.verify(out) == []
  provenance.rereport(out, "python -m lamb_lars.study rereport --fit_rule=measured o", fit_rule="measured")
  m = json.load(open(os.path.join(out, "manifest.json")))
  assert m["report_spec"]["fit_rule"] == "measured" and open(readme).read() == fresh
  assert [r.get("fit_rule") for r in m["rereports"]] == ["measured → any", "any → measured"]
  assert provenance.verify(out) == []
  assert provenance.rereport_main(["--fit_rule=maybe", out]) == 2
  assert provenance.rereport_main(["--fit_rule=measured"]) == 2


def test_rereport_opts_a_folder_into_the_claim_check_only_when_its_quotes_pass(tmp_path, monkeypatch):
  """An older folder (no ``claims_checked``) re-reported gains ``claims_checked`` when every number its discussion
  quotes is one its data produce; a discussion quoting a number the data do not produce keeps it off."""
  work, out = _workdir(tmp_path), str(tmp_path / "out")
  publish.publish(work, out, command="python -m lamb_lars.study report --workdir=w --out=o")
  m = json.load(open(os.path.join(out, "manifest.json")))
  m.pop("claims_checked", None)
  manifest_lib.write_manifest(out, m)
  monkeypatch.setattr(code_state, "code_state", lambda: {"commit": "f" * 40, "dirty": False})
  with open(os.path.join(out, "discussion.md"), "w") as f:
    f.write("The study quotes 987654.321, which no report prints.\n")
  provenance.rereport(out, "first")
  m = json.load(open(os.path.join(out, "manifest.json")))
  assert not m.get("claims_checked") and "claims_checked" not in m["rereports"][-1]
  with open(os.path.join(out, "discussion.md"), "w") as f:
    f.write("The study quotes 987654.321, which no report prints. <!--nc-->\n")
  provenance.rereport(out, "second")
  m = json.load(open(os.path.join(out, "manifest.json")))
  assert m["claims_checked"] is True and m["rereports"][-1]["claims_checked"] is True
  assert provenance.verify(out) == []
  with open(os.path.join(out, "discussion.md"), "w") as f:
    f.write("Now it quotes 987654.321 unmarked.\n")
  assert any("987654.321" in p for p in provenance.verify(out))  # from now on verify fails on it


# ---- a composite folder: published parts and one report across them (publishing/composite.py) ----

STUB_REPORT = """
import csv, os

def markdown(root):
  lines = ["# Across the parts", ""]
  for part in sorted(d for d in os.listdir(root) if os.path.isfile(os.path.join(root, d, "runs.csv"))):
    with open(os.path.join(root, part, "runs.csv"), newline="") as f:
      n = len(list(csv.DictReader(f)))
    lines.append(f"- [{part}]({part}/README.md): {n} trials")
  return "\\n".join(lines) + "\\n"

def report(root):
  with open(os.path.join(root, "README.md"), "w") as f:
    f.write(markdown(root))

def check(root):
  have = open(os.path.join(root, "README.md")).read().splitlines()
  want = markdown(root).splitlines()
  return [f"line {i + 1}: {a!r} != {b!r}" for i, (a, b) in enumerate(zip(have, want)) if a != b] + (
    [f"{len(have)} lines, recomputed {len(want)}"] if len(have) != len(want) else [])
"""
CLEAN = {"commit": "c" * 40, "dirty": False}


def _composite(tmp_path, monkeypatch):
  """Two published parts of the tiny study under ``root`` and a stub cross-part report module on sys.path."""
  from lamb_lars.study.publishing import composite

  (tmp_path / "stub_cross_report.py").write_text(STUB_REPORT)
  monkeypatch.syspath_prepend(str(tmp_path))
  root = tmp_path / "root"
  work = _workdir(tmp_path)
  for part in ("part_a", "part_b"):
    publish.publish(work, str(root / part), command="python -m lamb_lars.study report --workdir=w --out=o")
  m = composite.publish(str(root), "stub_cross_report", "python -m lamb_lars.study.publishing.composite root", CLEAN)
  return composite, str(root), m


def test_a_composite_folder_verifies_and_fails_on_a_changed_part_or_report(tmp_path, monkeypatch):
  composite, root, m = _composite(tmp_path, monkeypatch)
  assert m["kind"] == "composite" and m["parts"] == ["part_a", "part_b"] and m["code"] == CLEAN
  assert "[part_a](part_a/README.md): 4 trials" in open(os.path.join(root, "README.md")).read()
  assert provenance.verify(root) == []
  # a part's CSV edited: the part's own verify fails, named by its part
  evals = os.path.join(root, "part_b", "evals.csv")
  original = open(evals, "rb").read()
  with open(evals, "ab") as f:
    f.write(original.splitlines(keepends=True)[1])
  problems = provenance.verify(root)
  assert len(problems) == 1 and problems[0].startswith("part_b: evals.csv has sha256"), problems
  with open(evals, "wb") as f:
    f.write(original)
  # the README hand-edited, then re-hashed into the manifest: the recomputation names the line
  readme = os.path.join(root, "README.md")
  with open(readme, "a") as f:
    f.write("- part_c: 9 trials\n")
  assert provenance.verify(root)[0].startswith("README.md has sha256")
  m["files"]["README.md"] = code_state.sha256(readme)
  manifest_lib.write_manifest(root, m)
  assert provenance.verify(root) == ["README.md 5 lines, recomputed 4"]
  # a part published after the cross-part report
  composite.publish(root, "stub_cross_report", "cmd", CLEAN)
  publish.publish(_workdir(tmp_path / "late"), os.path.join(root, "part_c"))
  assert any("['part_c'] are not in the manifest" in p for p in provenance.verify(root))


def test_a_composite_discussion_may_quote_its_report_and_its_linked_parts_only(tmp_path, monkeypatch):
  _, root, _ = _composite(tmp_path, monkeypatch)
  part_readme = open(os.path.join(root, "part_a", "README.md")).read()
  # a non-integer that only the part's README holds: no number of the composite's README or manifest matches it at
  # its rounding. The most decimals: the manifest holds wall times and timestamps, different in every run, that a
  # short number ("2.1") can match by chance (it did on 2026-12-03, when a substring test chose the number)
  theirs = open(os.path.join(root, "README.md")).read() + open(os.path.join(root, "manifest.json")).read()
  data = claims.data_numbers([theirs])
  only_part = [q for q in claims.quoted_numbers(part_readme) if q.value % 1 and not claims.matches(q, data)]
  quoted = max(only_part, key=lambda q: q.decimals).text
  disc = os.path.join(root, "discussion.md")
  with open(disc, "w") as f:
    f.write(f"Each part has 4 trials; [part_a](part_a/README.md) gives {quoted}.\n")
  assert provenance.verify(root) == []
  with open(disc, "w") as f:
    f.write(f"Each part has 4 trials, and one gives {quoted}.\n")  # the part not linked: not the folder's data
  problems = provenance.verify(root)
  assert len(problems) == 1 and f"quotes {quoted}" in problems[0], problems


def test_a_composite_names_a_republished_missing_or_half_published_part(tmp_path, monkeypatch):
  composite, root, m = _composite(tmp_path, monkeypatch)
  # part_b re-published from another workdir with the same README numbers: only its manifest shows it
  publish.publish(_workdir(tmp_path / "again"), os.path.join(root, "part_b"), command="another command")
  assert provenance.verify(os.path.join(root, "part_b")) == []
  assert provenance.verify(root) == [
    "the part part_b was re-published after the cross-part report (its manifest.json changed)."
  ]
  shutil.rmtree(os.path.join(root, "part_b"))
  assert provenance.verify(root)[0] == "the part part_b is missing."
  os.makedirs(os.path.join(root, "stray"))
  shutil.copy(os.path.join(root, "part_a", "runs.csv"), os.path.join(root, "stray", "runs.csv"))
  assert any("['stray'] have a runs.csv but no manifest.json" in p for p in provenance.verify(root))
  with pytest.raises(ValueError, match="runs.csv but no manifest.json"):
    composite.publish(root, "stub_cross_report", "cmd", CLEAN)


def test_a_composite_is_not_published_from_a_dirty_checkout_or_without_parts(tmp_path, monkeypatch):
  from lamb_lars.study.publishing import composite

  (tmp_path / "empty").mkdir()
  with pytest.raises(ValueError, match="uncommitted changes"):
    composite.publish(str(tmp_path / "empty"), "stub_cross_report", "cmd", {"commit": "c" * 40, "dirty": True})
  with pytest.raises(ValueError, match="no published part"):
    composite.publish(str(tmp_path / "empty"), "stub_cross_report", "cmd", CLEAN)


def test_code_state_reads_dirty_under_the_paths_given(tmp_path):
  """A composite folder is published beside uncommitted parts: only changes under lamb_lars/ make the code dirty."""
  repo = tmp_path / "repo"
  (repo / "lamb_lars").mkdir(parents=True)
  (repo / "lamb_lars" / "m.py").write_text("x = 1\n")
  git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
  subprocess.run(git[:3] + ["init", "-q"], check=True)
  subprocess.run(git + ["add", "-A"], check=True)
  subprocess.run(git + ["commit", "-qm", "c"], check=True)
  (repo / "docs").mkdir()
  (repo / "docs" / "new.md").write_text("a part\n")
  assert code_state.code_state(str(repo))["dirty"] is True
  assert code_state.code_state(str(repo), paths=("lamb_lars",))["dirty"] is False
  (repo / "lamb_lars" / "m.py").write_text("x = 2\n")
  assert code_state.code_state(str(repo), paths=("lamb_lars",))["dirty"] is True


def test_rereport_of_a_folder_of_another_kind_only_opts_into_the_claim_check(tmp_path, monkeypatch):
  """mnist_paper_logs (kind paper_logs, its own verifier) is not recomputed by ``rereport``: a copy without
  ``claims_checked`` gains it (README untouched); with an unmarked number in its discussion it is refused."""
  src = os.path.join(REPO, "docs", "studies", "mnist_paper_logs")
  out = str(tmp_path / "mnist_paper_logs")
  shutil.copytree(src, out)
  m = json.load(open(os.path.join(out, "manifest.json")))
  m.pop("claims_checked", None)
  m.pop("rereports", None)
  manifest_lib.write_manifest(out, m)
  readme = open(os.path.join(out, "README.md")).read()
  monkeypatch.setattr(code_state, "code_state", lambda: {"commit": "f" * 40, "dirty": False})
  with open(os.path.join(out, "discussion.md"), "a") as f:
    f.write("\nAn unmarked 987654.321.\n")
  with pytest.raises(ValueError, match="cannot opt into the claim check"):
    provenance.rereport(out, "x")
  shutil.copy(os.path.join(src, "discussion.md"), os.path.join(out, "discussion.md"))
  provenance.rereport(out, "python -m lamb_lars.study rereport o")
  m = json.load(open(os.path.join(out, "manifest.json")))
  assert m["claims_checked"] is True and m["rereports"][-1]["claims_checked"] is True
  assert open(os.path.join(out, "README.md")).read() == readme and provenance.verify(out) == []
