"""The manifest of a published study folder (``manifest.json``): how its runs.csv, evals.csv and README.md were made.

A published folder (publish.py) holds ``runs.csv``, ``evals.csv`` and a README.md computed from those two
files alone; ``manifest.json`` records how they were made:

* ``code``: the commit of the code that ran and reported the study, and whether the tree had uncommitted changes;
* ``commands``: the exact study commands (from the workdir's ``commands.txt``), the report command;
* ``config_sha256``: sha256 of the study config as saved in the workdir (``study_config.json``, sorted keys);
* ``machine``: platform, CPU count and model, Python; ``started`` / ``finished``: the first trial start and the
  last trial end (UTC, ISO 8601);
* ``trials``: the number of trials and the count per status; ``files``: sha256 of runs.csv, evals.csv, README.md;
* ``report_spec``: everything besides the CSVs that the README is computed from (title, settings lines, target …);
* ``workload`` and ``data``: for a study on a researcher's model or loader, the sha256 of its source files and of
  the arrays its loader returns (workload_provenance.py).

``verify`` (provenance.py) recomputes the hashes, the trial counts and the README against it.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
from typing import Any, Mapping, Optional, Sequence

from lamb_lars.common import io_utils
from lamb_lars.configs.studies import common
from lamb_lars.study.records import Target
from lamb_lars.study.report import report
from lamb_lars.common.code_state import code_state, config_sha256, iso, machine, sha256
from lamb_lars.study.publishing import workload_provenance
from lamb_lars.study.publishing.csv_tables import read_csv

MANIFEST = "manifest.json"
HASHED = ("runs.csv", "evals.csv", "README.md")


def trial_counts(out_dir: str) -> dict:
  """``{"total": n, "by_status": {status: n}}`` from runs.csv."""
  statuses = [r["status"] for r in read_csv(os.path.join(out_dir, "runs.csv"))]
  return {"total": len(statuses), "by_status": dict(sorted(collections.Counter(statuses).items()))}


def trial_window(out_dir: str) -> tuple[Optional[float], Optional[float]]:
  """(first start, last finish) over runs.csv, in seconds since the epoch."""
  rows = read_csv(os.path.join(out_dir, "runs.csv"))
  starts = [float(r["started"]) for r in rows if r.get("started")]
  ends = [float(r["finished"]) for r in rows if r.get("finished")]
  return (min(starts) if starts else None), (max(ends) if ends else None)


def spec_to_json(spec: report.ReportSpec) -> dict:
  return dataclasses.asdict(spec)


def spec_from_json(d: Mapping[str, Any]) -> report.ReportSpec:
  """The ReportSpec of a manifest (JSON lists back to tuples; fields the current ReportSpec lacks are an error)."""
  known = {f.name for f in dataclasses.fields(report.ReportSpec)}
  unknown = sorted(set(d) - known)
  if unknown:
    raise ValueError(f"the manifest's report_spec has fields {unknown} that this code's report does not know.")
  d = {k: tuple(v) if isinstance(v, list) else v for k, v in d.items()}
  d.setdefault("select_on", "test")  # a manifest written before the field existed: its report chose on test
  # ... and it took the paper's numbers from the reference every study had then (the analysis section's default)
  d.setdefault("reference", common.analysis()["reference"])
  d.setdefault("fit_rule", "any")  # written before issue 62: every fit's numbers were printed
  d["target"] = Target(**d["target"]) if d.get("target") else None
  return report.ReportSpec(**d)


def build_manifest(
  out_dir: str,
  spec: report.ReportSpec,
  *,
  study: str,
  commands: Sequence[str],
  config_json: Optional[str],
  code: Optional[Mapping] = None,
  started: Optional[float] = None,
  finished: Optional[float] = None,
  **extra: Any,
) -> dict:
  """The manifest of a published folder whose runs.csv, evals.csv and README.md are already written."""
  if started is None and finished is None:
    started, finished = trial_window(out_dir)
  return {
    "study": study,
    "code": dict(code) if code is not None else code_state(),
    "commands": list(commands),
    "config_sha256": config_sha256(config_json) if config_json else None,
    "machine": machine(),
    "started": iso(started),
    "finished": iso(finished),
    "trials": trial_counts(out_dir),
    "files": {name: sha256(os.path.join(out_dir, name)) for name in HASHED},
    "report_spec": spec_to_json(spec),
    "superseded": False,
    **({"workload": workload} if (workload := workload_provenance.sources(config_json)) else {}),
    **({"data": data} if (data := workload_provenance.data_sources(config_json)) else {}),
    **extra,
  }


def write_manifest(out_dir: str, manifest: Mapping) -> str:
  path = os.path.join(out_dir, MANIFEST)
  io_utils.write_text_atomic(path, json.dumps(manifest, indent=1, ensure_ascii=False, sort_keys=True) + "\n")
  return path
