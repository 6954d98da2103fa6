"""Writes honest manifest.json files for the study folders published before manifests existed (run once).

Their CSVs and READMEs were written by earlier code from workdirs that are gone, so a manifest can record only
what is known: the commit that added the folder to the repository (``git log``), the code commit a hand-written
record names (docs/studies/rerun_2026-11-24/README.md), the commands and machine the README itself lists, the
trial window and counts from runs.csv, and the files' sha256. Each is marked ``"superseded": true``: the studies
are to be republished with replicates. The README sections today's report code no longer reproduces from the CSVs
are listed under ``not_recomputed`` with the reason; ``verify`` recomputes every other section.

  PYTHONPATH=$PWD python scripts/legacy_manifests.py
"""
from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
import tempfile
from typing import Optional

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from lamb_lars.study.running import manifest as manifest_lib
from lamb_lars.study.running import provenance, publish
from lamb_lars.study.analysis import report# noqa: E402
from lamb_lars.study.records import Target  # noqa: E402

# folder → (config module, part, code commit named by a hand-written record or None)
FOLDERS = {
    "docs/studies/mnist_table3": ("mnist_table3", "", None),
    "docs/studies/mnist_table3_round2": ("mnist_table3", "round2", None),
    "docs/studies/mnist_batch_ladder": ("mnist_batch_ladder", "", None),
    "docs/studies/rerun_2026-11-24/mnist_table3": ("mnist_table3", "", "0560744"),
    "docs/studies/rerun_2026-11-24/mnist_batch_ladder": ("mnist_batch_ladder", "", "0560744"),
    "docs/studies/rerun_2026-11-24/run2/mnist_table3": ("mnist_table3", "", "e5d4b1a"),
    "docs/studies/rerun_2026-11-24/run2/mnist_batch_ladder": ("mnist_batch_ladder", "", "e5d4b1a"),
    "docs/studies/rerun_2026-11-24/run4/mnist_table3": ("mnist_table3", "", "920d000"),
    "docs/studies/rerun_2026-11-24/run4/mnist_batch_ladder": ("mnist_batch_ladder", "", "920d000"),
}
# Sections today's code computes differently from the code that wrote these READMEs: (section, test on the
# (committed, recomputed) texts, why).
WHY = (
    ("## Regimes", lambda old, new: "first failing linear batch" in old,
     "written before B_L followed You et al. 2020 Def. 2.1 (it reported the largest passing batch as B_L, and the "
     "paper's B_L as 8K); the recomputed section reports B_L as the smallest failing batch with its bracket and "
     "pass/fail/borderline verdicts"),
    ("## Huge-batch results next to the paper", lambda old, new: "| any at 60000 |" in old,
     "written before the full-batch row used the study's own training set (55,000) instead of the paper's 60,000"),
    ("## Steps to target", lambda old, new: "Caution: B_crit" in new and "Caution: B_crit" not in old,
     "written before the report added its caution when the fitted B_crit lies beyond every batch that reached the "
     "goal (the recomputed section carries it)"),
    ("## Steps to target", lambda old, new: "γ, δ ≥ 0" in new and "γ, δ ≥ 0" not in old,
     "written before the step-time fit t(B) = γ + δB was constrained to γ, δ ≥ 0"),
    ("## Predicted vs fitted critical batch", lambda old, new: "B_simple over training" not in old,
     "written before the report gave B_simple as a trajectory over training and counted its non-finite "
     "evaluations (the committed section drops them silently)"),
) + tuple((head, lambda old, new: True, why) for head, why in (
    ("## Trials", "written before the report listed the sections it leaves out for lack of data (issue 25)"),
    ("## Table 3: optimizer × layer-wise variants",
     "written before each cell was chosen on the validation split and its caption stated which 'best' it shows "
     "(issues 22 and 25)"),
    ("## Accuracy vs batch size", "written before accuracies were printed in % with a caption naming the 'best' "
     "(issue 25)"),
    ("## Training curves", "written before the figures got titles, axis labels in words and the target line "
     "(issue 25)"),
    ("## Regimes", "written before the regimes table captioned its 'best' test accuracy (issue 25)"),
    ("## Baseline", "written before the report's presentation changes of issue 25 (accuracies in %)"),
    ("## Steps to target", "written before the report's presentation changes of issue 25 (the goal in words, "
     "captions naming the best run)"),
    ("## Predicted vs fitted critical batch", "written before the noise-scale figure was titled in words (issue 25)"),
    ("## Distance from initialisation", "written before the figures got titles and axis labels in words (issue 25)"),
    ("## Huge-batch results next to the paper", "written before accuracies were printed in % (issue 25)"),
))


def why(head: str, old: Optional[str], new: Optional[str]) -> Optional[str]:
  if old is None:
    return "the report gained this section after the folder was written"
  if new is None:
    return "the report no longer has this section"
  return next((reason for h, test, reason in WHY if h == head and test(old, new)), None)


def git(*args: str) -> str:
  return subprocess.run(["git", "-C", REPO, *args], capture_output=True, text=True, check=True).stdout.strip()


def spec_from_readme(text: str, config) -> report.ReportSpec:
  """The report's settings: title, notes and settings lines as the README states them (they came from the study
  workdir, not from the CSVs), the rest from the study config's ``analysis`` section."""
  a = config.analysis
  title = text.splitlines()[0][2:]
  body = text.split("## Settings\n\n", 1)[1].split("\n## Trials", 1)[0].split("\n")
  i = next(k for k, line in enumerate(body) if line.startswith("- study"))
  settings = [line for line in body[i:-1] if not line.startswith("- training time summed")]  # [-1]: the split's ''
  return report.ReportSpec(
      title=title, notes="\n".join(body[:i]).strip(), workload=a.paper,
      target=Target(a.target_metric, float(a.target_goal), a.target_mode), baseline_epochs=float(a.baseline_epochs),
      num_train=int(a.num_train), techniques=tuple(a.techniques), target_technique=a.target_technique,
      table3_batch=int(a.table3_batch), settings=tuple(settings))


def legacy_manifest(folder: str) -> dict:
  module, part, code_commit = FOLDERS[folder]
  path = os.path.join(REPO, folder)
  config = importlib.import_module(f"lamb_lars.configs.studies.{module}").get_config(*([part] if part else []))
  with open(os.path.join(path, "README.md"), encoding="utf-8") as f:
    text = f.read()
  spec = spec_from_readme(text, config)
  commands = [re.sub(r"^\s+", "", line) for line in spec.settings if line.startswith("      ")]
  machine_line = next((line[2:] for line in spec.settings if line.startswith("- machine:")), None)
  with tempfile.TemporaryDirectory() as tmp:
    for name in ("runs.csv", "evals.csv"):
      os.symlink(os.path.join(path, name), os.path.join(tmp, name))
    new = provenance.sections(open(report.write_report(publish.load_csvs(tmp), tmp, spec), encoding="utf-8").read())
  old = provenance.sections(text)
  differ = {h: why(h, old.get(h), new.get(h)) for h in list(old) + [h for h in new if h not in old]
            if new.get(h) != old.get(h)}
  unknown = [h for h, reason in differ.items() if reason is None]
  if unknown:
    raise SystemExit(f"{folder}: sections {unknown} differ for an unknown reason; not writing a manifest.")
  added = git("log", "--diff-filter=A", "--format=%H", "--", f"{folder}/runs.csv").splitlines()[-1]
  return manifest_lib.build_manifest(
      path, spec, study=config.name, commands=commands, config_json=None,
      code={"commit": code_commit, "dirty": None,
            "note": ("the code commit named in docs/studies/rerun_2026-11-24/README.md" if code_commit else
                     "unknown: the study ran from a workdir before manifests existed")},
      superseded=True, published_in_commit=added,
      machine={"from_readme": machine_line},
      not_recomputed=differ,
      legacy_note="Published before manifests existed: the workdir, its study_config.json (so config_sha256) and "
                  "the exact code state are gone. Recorded here: the commit that added the folder, the commands "
                  "and machine the README lists, the trial window and counts from runs.csv, the files' sha256. "
                  "Superseded: to be republished with replicates (issue 22).")


def main() -> None:
  for folder in FOLDERS:
    m = legacy_manifest(folder)
    manifest_lib.write_manifest(os.path.join(REPO, folder), m)
    print(folder, "not recomputed:", list(m["not_recomputed"]) or "none")


if __name__ == "__main__":
  main()
