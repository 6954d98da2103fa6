"""Publishing a study: the raw results as CSV files (csv_tables.py), the report recomputed from those files alone
(so every number in it can be recomputed from them), and the manifest that records how they were made
(manifest.py; ``verify`` in provenance.py checks a folder against it).
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import time
from typing import Any, Optional

import ml_collections

from lamb_lars.common import code_state, import_path, io_utils
from lamb_lars.study.records import Target
from lamb_lars.study.publishing import manifest, preregistration
from lamb_lars.study.publishing.csv_tables import export_csvs, load_csvs
from lamb_lars.study.report import report
from lamb_lars.study.running import sections, store
from lamb_lars.study.running import workdir as wd


def _study_window(con, study_name: str) -> tuple[Optional[float], Optional[float], float]:
  """(first start, last finish, busy seconds = length of the union of the trials' [start, finish])."""
  spans = sorted(
    (d["started"], d["finished"]) for d in store.runs(con, study=study_name) if d["started"] and d["finished"]
  )
  if not spans:
    return None, None, 0.0
  busy, cur_s, cur_e = 0.0, spans[0][0], spans[0][1]
  for s, e in spans[1:]:
    if s > cur_e:
      busy, cur_s, cur_e = busy + cur_e - cur_s, s, e
    else:
      cur_e = max(cur_e, e)
  return spans[0][0], max(e for _, e in spans), busy + cur_e - cur_s


def _plain_dict(section) -> dict:
  return section.to_dict() if hasattr(section, "to_dict") else dict(section or {})


def _key_values(d: dict) -> str:
  """``metric=validation_accuracy, mode=max`` (sorted; text, not a Python repr)."""
  return ", ".join(f"{k}={json.dumps(v) if isinstance(v, (dict, list)) else v}" for k, v in sorted(d.items())) or "—"


def _validation_text(base: ml_collections.ConfigDict) -> str:
  """``validation split N`` (the last N training examples held out), or, for a loader that returns its own
  'validation' split, ``its own validation split of N examples`` (issue 62: it read 'validation split 0')."""
  split = int(base.get("validation_split", 0))
  if not split and import_path.is_import_path(base.dataset):
    from lamb_lars.input_pipeline import user_data

    own = user_data.loader_data(base.dataset)["splits"].get("validation")
    if own is not None:
      return f"its own validation split of {len(own[1])} examples"
  return f"validation split {split}"


def report_spec(study: ml_collections.ConfigDict, workdir: str, con) -> report.ReportSpec:
  """The report's settings from the study config's ``analysis`` section and the workdir's history."""
  a = sections.section(study, "analysis")
  base = study.base
  first, last, busy = _study_window(con, study.name)
  stamp = lambda t: time.strftime("%Y-%m-%d %H:%M", time.localtime(t)) if t else "—"
  settings = [
    f"- study `{study.name}`: model `{base.model}` on `{base.dataset}` "
    f"({int(a['num_train'])} training examples, {_validation_text(base)}),"
    f" budget ρ = {a['baseline_epochs']:g} epochs, eval every "
    f"{base.eval_every_epochs:g} epoch(s)",
    f"- search: {_key_values(_plain_dict(study.get('search')))}; runner: "
    f"{_key_values({k: v for k, v in _plain_dict(study.get('runner')).items() if k != 'env'})}",
    f"- machine: {os.cpu_count()} CPUs ({code_state.cpu_model()}), {platform.system()} {platform.release()}",
  ] + (
    [
      f"- first trial started {stamp(first)}, last finished {stamp(last)}; wall time with at least "
      f"one trial running: {busy / 60:.1f} min"
    ]
    if first
    else []
  )
  cmds = wd.commands(workdir)
  if cmds:
    settings += ["- commands (latest last):", ""] + [f"      {c}" for c in cmds[-4:]] + [""]
  return report.ReportSpec(
    title=str(a["title"] or f"Study {study.name}"),
    notes=str(a["notes"]),
    workload=str(a["paper"]),
    reference=str(a["reference"]),
    target=Target(a["target_metric"], float(a["target_goal"]), a["target_mode"]),
    baseline_epochs=float(a["baseline_epochs"]) or float(base.num_epochs),
    num_train=int(a["num_train"]),
    num_classes=int(base.num_classes),
    techniques=tuple(a["techniques"]),
    target_technique=str(a["target_technique"]),
    table3_batch=int(a["table3_batch"]),
    settings=tuple(settings),
    targets=tuple(float(g) for g in a["targets"]),
    edge_fraction=float(sections.section(study, "search")["edge_fraction"]),
    noninferiority_margin=float(a["noninferiority_margin"]),
    best_fixed=bool(a["best_fixed"]),
    analysis_changes=preregistration.analysis_changes(preregistration.load(workdir), a),
    **_branching_spec(study),
  )


def _branching_spec(study: ml_collections.ConfigDict) -> dict[str, Any]:
  """The ReportSpec fields of a branching study's CBS(t) section (none for another study)."""
  if not any(dict(s).get("role") == "branch" for s in study.get("sweeps") or ()):
    return {}
  b = sections.section(study, "branching")
  return {
    "branch_epsilon": float(b["epsilon"]),
    "branch_relative": bool(b["relative"]),
    "branch_loss": str(b["loss"]),
    "branch_epsilons": tuple(float(e) for e in b["epsilon_sensitivity"]),
  }


def publish(workdir: str, out_dir: Optional[str] = None, command: Optional[str] = None) -> str:
  """Writes runs.csv, evals.csv, README.md and PNGs of the study in ``workdir`` to ``out_dir`` (default
  ``<workdir>/report``); the report is computed from the CSV files. Then ``manifest.json`` (manifest.py): the
  code commit, the study's commands and ``command`` (this report's), the config hash, the machine, the trial
  window and counts, the files' sha256 and the report's settings, so ``verify`` can recompute the README.
  Returns the README path."""
  study = wd.load_study_config(workdir)
  code = code_state.code_state()  # before writing: the report's own files would make the checkout look edited
  out_dir = out_dir or os.path.join(workdir, "report")
  if not io_utils.is_remote(out_dir) and os.path.exists(out_dir) and not os.path.isdir(out_dir):
    raise ValueError(f"--out={out_dir} is a file; give a directory for the report.")
  if not (os.path.exists(wd.store_path(workdir)) or io_utils.exists(os.path.join(workdir, wd.STORE_FILE))):
    raise ValueError(
      f"{workdir} has no results store ({wd.STORE_FILE}); re-run `python -m lamb_lars.study run` with "
      f"the same --config and --workdir to rebuild it (finished trials are read back from their run "
      f"dirs)."
    )
  con = wd.open_store(workdir)
  try:
    export_csvs(con, study.name, out_dir)
    spec = report_spec(study, workdir, con)
  finally:
    con.close()
  if io_utils.exists(os.path.join(out_dir, "discussion.md")):  # hand-written next to the generated report
    spec = dataclasses.replace(
      spec,
      notes=(spec.notes + "\n\n" if spec.notes else "")
      + (
        "The disagreements with the paper, and what would settle them, are discussed in [discussion.md](discussion.md)."
      ),
    )
  readme = report.write_report(load_csvs(out_dir), out_dir, spec)
  config_json = io_utils.read_text(os.path.join(workdir, wd.STUDY_CONFIG_FILE))
  manifest.write_manifest(
    out_dir,
    manifest.build_manifest(
      out_dir,
      spec,
      study=study.name,
      commands=wd.commands(workdir) + ([command] if command else []),
      config_json=config_json,
      code=code,
      claims_checked=True,
      preregistration=preregistration.load(workdir),
      analysis=json.loads(json.dumps(sections.section(study, "analysis"), default=str)),  # the settings it used
    ),
  )  # verify: every number discussion.md quotes
  return readme
