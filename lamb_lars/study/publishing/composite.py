"""A published folder made of published parts and one report across them (issue 42's critical-batch axes).

Layout: ``<root>/<part>/`` is an ordinary published study folder (``study report --out=<root>/<part>``, with its own
manifest), and ``<root>/README.md`` a report computed from the parts' CSVs alone by a module that the manifest names
(``report_module``: it has ``report(root)``, which writes README.md and its figure, and ``check(root)``, which lists
the README's lines that differ from a recomputation). ``manifest.json`` (``kind: "composite"``) records the parts,
the report module and command, the code and the README's sha256.

``verify`` (provenance.verify dispatches here by the manifest's ``verifier``) fails when:

* a part the manifest lists is missing, does not verify against its own manifest (its discussion's claims too),
  or was re-published since (the manifest pins each part's manifest.json by sha256); a part or a runs.csv folder
  that the manifest does not list is there;
* README.md is not the file the manifest records, or not what the report module recomputes from the parts now;
* (in provenance.verify) a number the root's discussion.md or index row quotes is not produced by README.md or by
  the README of a part the paragraph links (``](<part>/…)``).

Command: ``python -m lamb_lars.study.publishing.composite ROOT --report=MODULE [--parts=A,B,...]`` writes README.md
(``MODULE.report``) and manifest.json (``--parts``: published folders elsewhere, relative to ROOT, for a re-analysis
such as critical_batch_calibration; default: ROOT's sub-folders); the parts must be published first, and the
checkout committed (the manifest's commit says what computed the README).
"""

from __future__ import annotations

import importlib
import os
import sys
import time
from typing import Mapping, Optional, Sequence

from lamb_lars.common.code_state import code_state, iso, machine, sha256
from lamb_lars.study.publishing import manifest as manifest_lib
from lamb_lars.study.publishing import provenance

KIND = "composite"
VERIFIER = "lamb_lars.study.publishing.composite"  # not __name__: "__main__" when run with -m
README = "README.md"


def parts_of(root: str) -> list[str]:
  """The sub-folders of ``root`` that hold a published folder (a manifest.json), sorted."""
  return sorted(
    d
    for d in os.listdir(root)
    if os.path.isdir(os.path.join(root, d)) and os.path.isfile(os.path.join(root, d, manifest_lib.MANIFEST))
  )


def half_published(root: str) -> list[str]:
  """Sub-folders with a runs.csv but no manifest.json (a report interrupted, or CSVs put there by hand): a report
  module that reads CSVs would read them, unverified."""
  return sorted(
    d
    for d in os.listdir(root)
    if os.path.isfile(os.path.join(root, d, "runs.csv"))
    and not os.path.isfile(os.path.join(root, d, manifest_lib.MANIFEST))
  )


def _manifest_hashes(root: str, parts: Sequence[str]) -> dict[str, str]:
  return {p: sha256(os.path.join(root, p, manifest_lib.MANIFEST)) for p in parts}


def publish(
  root: str,
  report_module: str,
  command: str,
  code: Optional[Mapping] = None,
  parts: Optional[Sequence[str]] = None,
) -> dict:
  """Writes ``<root>/README.md`` (``report_module.report(root)``) and ``<root>/manifest.json``; returns the manifest.
  ``code``: the state of the code (lamb_lars/; default: read now), so that its commit says what computed the README
  (the parts just published beside it may be uncommitted). ``parts``: the published folders the report reads, as
  paths relative to ``root`` (a re-analysis of folders published elsewhere: ``../critical_batch_axes/mlp``);
  default: every sub-folder of ``root`` with a manifest. Raises ValueError (one sentence) when lamb_lars/ has
  uncommitted changes, ``root`` has no published part, or a part does not verify."""
  code = dict(code) if code is not None else code_state(paths=("lamb_lars",))
  if code.get("dirty") or not code.get("commit"):
    raise ValueError("lamb_lars/ has uncommitted changes (or is no git checkout); commit the code first.")
  parts = sorted(parts) if parts else parts_of(root)
  missing = [p for p in parts if not os.path.isfile(os.path.join(root, p, manifest_lib.MANIFEST))]
  if missing:
    raise ValueError(f"the parts {missing} are no published folders (no manifest.json under {root}).")
  if not parts:
    raise ValueError(f"{root} holds no published part (a sub-folder with a manifest.json).")
  if half_published(root):
    raise ValueError(f"{root} has sub-folders with a runs.csv but no manifest.json: {half_published(root)}.")
  for part in parts:
    bad = provenance.verify(os.path.join(root, part))
    if bad:
      raise ValueError(f"the part {part} does not verify: {bad[0]}")
  importlib.import_module(report_module).report(root)
  m = dict(
    kind=KIND,
    verifier=VERIFIER,
    report_module=report_module,
    report_command=command,
    parts=parts,
    part_manifests=_manifest_hashes(root, parts),  # a part re-published since changes its manifest
    code=code,
    machine=machine(),
    reported=iso(time.time()),
    files={README: sha256(os.path.join(root, README))},
    claims_checked=True,
  )
  manifest_lib.write_manifest(root, m)
  return m


def verify(root: str, m: Mapping) -> list[str]:
  """The mismatches of a composite folder with its manifest and its parts (one sentence each; [] = verified)."""
  problems = []
  for part in m.get("parts", []):
    folder = os.path.join(root, part)
    if not os.path.isfile(os.path.join(folder, manifest_lib.MANIFEST)):
      problems.append(f"the part {part} is missing.")
      continue
    problems += [f"{part}: {p}" for p in provenance.verify(folder)]
  extra = sorted(set(parts_of(root)) - set(m.get("parts", [])))
  if extra:
    problems.append(f"the parts {extra} are not in the manifest (published after the cross-part report).")
  if half_published(root):
    problems.append(f"the sub-folders {half_published(root)} have a runs.csv but no manifest.json.")
  pinned = m.get("part_manifests", {})
  present = [p for p in m.get("parts", []) if os.path.isfile(os.path.join(root, p, manifest_lib.MANIFEST))]
  for part, digest in _manifest_hashes(root, present).items():
    if digest != pinned.get(part):
      problems.append(f"the part {part} was re-published after the cross-part report (its manifest.json changed).")
  path = os.path.join(root, README)
  if not os.path.isfile(path):
    return problems + [f"{README} is missing."]
  listed = m.get("files", {}).get(README)
  if sha256(path) != listed:
    problems.append(f"{README} has sha256 {sha256(path)[:12]}…, the manifest says {str(listed)[:12]}….")
  if problems:  # a part or the README is not the manifest's: a recomputation would check the wrong files
    return problems
  check = importlib.import_module(m["report_module"]).check
  problems += [f"{README} {d}" for d in check(root)]
  return problems


def main(argv: Sequence[str]) -> int:
  """``ROOT --report=MODULE [--parts=A,B,...]``: publishes ROOT (README.md and manifest.json) and verifies it."""
  args = [a for a in argv if not a.startswith(("--report=", "--parts="))]
  mods = [a[len("--report=") :] for a in argv if a.startswith("--report=")]
  parts = [p for a in argv if a.startswith("--parts=") for p in a[len("--parts=") :].split(",") if p]
  if len(args) != 1 or len(mods) != 1 or not os.path.isdir(args[0]):
    print(
      "usage: python -m lamb_lars.study.publishing.composite ROOT --report=MODULE [--parts=A,B,...] (ROOT: an "
      "existing folder of published parts; MODULE: e.g. lamb_lars.study.analysis.axes; PARTS: published folders "
      "relative to ROOT, default its sub-folders)",
      file=sys.stderr,
    )
    return 2
  command = "python -m lamb_lars.study.publishing.composite " + " ".join(argv)
  try:
    publish(args[0], mods[0], command, parts=parts or None)
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  problems = provenance.verify(args[0])
  for p in problems:
    print(f"{args[0]}: {p}", file=sys.stderr)
  print(f"{args[0]}: " + ("verified" if not problems else f"{len(problems)} mismatches"))
  return 1 if problems else 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
