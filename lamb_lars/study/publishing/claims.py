"""Claims that cannot go stale: every number a folder's ``discussion.md`` (and its row in docs/studies/README.md)
quotes must be one that the folder's data produce (issue 41).

The data's numbers are those of the README recomputed from the CSVs (``provenance._recomputed``: the same text
``verify`` compares), of the manifest (trial counts, dates, commands, settings) and, for a paragraph that links
another published folder (``../<folder>/…``, or a part ``<part>/…`` of a composite folder), of that
folder's README as well: a number quoted from a folder whose data have since changed no longer matches.

A quoted number matches a data number when the data number, rounded to the quoted number's decimals, equals it,
with ``%`` / fraction (0.991 ↔ 99.1%) and ``K`` (8K ↔ 8192 or 8000) read both ways and the sign ignored (prose
writes "−0.7 pp lower"). So the discussion may quote fewer decimals than the report, never different ones.

Not claims, and not checked: numbers in backticks or code blocks (run ids, commands, commits, config values), in
link targets and HTML comments, on a line carrying the marker ``<!--nc-->`` (paper numbers, derived prose), those
listed in a ``<!--nc: 99.4, 2020-->`` comment (anywhere in the file; exempt throughout it), dates and times,
identifiers (a number glued to letters: LeNet-5, H100, 2c14c0b) and section references (Def. 2.1, Table 3, §3.1,
eq. 2.11, issue 41). A folder whose manifest has ``"claims_checked": true`` (set by new reports) fails ``verify``
on an unmatched number; for the others, ``verify --claims`` prints them as warnings.
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import os
import re
from typing import Iterable, Optional, Sequence

from lamb_lars.common import io_utils

NC_MARK = "<!--nc-->"
_NC_LIST = re.compile(r"<!--\s*nc:([^>]*)-->")
_FENCE = re.compile(r"^\s*```")
_CODE = re.compile(r"`[^`]*`")
_COMMENT = re.compile(r"<!--.*?-->")
_LINK_TARGET = re.compile(r"\]\([^)]*\)")
_URL = re.compile(r"https?://\S+")
_DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2})?Z?)?\b|\b\d{1,2}:\d{2}(?::\d{2})?\b")
_REF = re.compile(
  r"(?:\bDefs?\.?|\bDefinitions?|\bTables?|\bFig(?:ure)?s?\.?|\beq\.|§|\bissues?|\bOptimization|"
  r"\bSection|\bAlgorithm|\bPR|\bet al\.|#)\s*\d+(?:\.\d+)*(?:\s*(?:–|-|and|,)\s*\d+(?:\.\d+)*)*",
  re.IGNORECASE,
)
# A number: optional sign, digits with thousands commas, decimals, optional exponent, an optional K suffix. Not
# glued to a letter, digit or '.' on the left, nor to a letter (other than the K) on the right.
_NUM = re.compile(
  r"(?<![\w.])(?<!\w-)([−\-+]?)(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?"
  r"(?:e([−\-+]?\d{1,2})(?!\d))?(K)?(?![\w])"
)
_DATA_NUM = re.compile(r"([−\-+]?)(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(?:e([−\-+]?\d{1,2})(?!\d))?(K)?")  # fixed_256 too


@dataclasses.dataclass(frozen=True)
class Quoted:
  """A number as written: its value (K read as written, ×1000), decimals, whether it had K or %, and where."""

  text: str
  value: float
  decimals: int
  kilo: bool
  line: int
  context: str


def _strip(line: str) -> str:
  for pat in (_CODE, _COMMENT, _LINK_TARGET, _URL, _DATE, _REF):
    line = pat.sub(" ", line)
  return line


def _parse(m: re.Match) -> tuple[float, int, bool]:
  sign, whole, frac, exp, kilo = m.groups()
  v = float(whole.replace(",", "") + (frac or ""))
  if exp:
    v *= 10.0 ** int(exp.replace("−", "-"))
  v = -v if sign in ("−", "-") else v
  return v, (len(frac) - 1 if frac else 0) - (int(exp.replace("−", "-")) if exp else 0), bool(kilo)


def quoted_numbers(text: str) -> list[Quoted]:
  """The numbers ``text`` (markdown prose) quotes as claims, with the exemptions of the module docstring."""
  exempt = {v for m in _NC_LIST.finditer(text) for v in _values_of(m.group(1))}
  out, fenced = [], False
  for i, raw in enumerate(text.splitlines(), 1):
    if _FENCE.match(raw):
      fenced = not fenced
      continue
    if fenced or NC_MARK in raw or raw.lstrip().startswith("#"):  # headings name things; they quote nothing
      continue
    line = _strip(raw)
    for m in _NUM.finditer(line):
      v, d, k = _parse(m)
      if abs(v) in exempt or (abs(v) * 1000 if k else None) in exempt:
        continue
      out.append(Quoted(m.group(0).strip(), v, max(d, 0), k, i, raw.strip()[:160]))
  return out


def _values_of(text: str) -> list[float]:
  vals = []
  for m in _NUM.finditer(text):
    v, _, k = _parse(m)
    vals += [abs(v), abs(v) * 1000] if k else [abs(v)]
  return vals


def data_numbers(texts: Iterable[str]) -> list[float]:
  """Every number in ``texts`` (a report, a manifest) as a candidate value: K read as ×1024 and ×1000, and a
  fraction as a percentage too."""
  vals: set[float] = set()
  for text in texts:
    for m in _DATA_NUM.finditer(text.replace("\\n", " ")):
      v, _, k = _parse(m)
      v = abs(v)
      vals.update((v * 1024, v * 1000) if k else (v, v * 100.0, v / 100.0))
  return sorted(vals)


def matches(q: Quoted, data: Sequence[float]) -> bool:
  """Whether the quoted number is one of ``data`` (sorted) at its own rounding (module docstring)."""
  half = 0.5 * 10.0 ** (-q.decimals)
  units = (1024.0, 1000.0) if q.kilo else (1.0,)  # 8K is 8192 or 8000; the K is itself a rounding
  for u in units:
    t, h = abs(q.value) * u, half * u * (1 + 1e-9)
    i = bisect.bisect_left(data, t - h)  # ``data`` is sorted (data_numbers)
    if i < len(data) and data[i] <= t + h:
      return True
  return False


# A link to a sibling folder (``](../x/…``) or to a part of a composite folder (``](x/…``): the key is ``../x`` or
# ``x``. A name starts with a letter, digit or underscore, so ``../README.md``, ``./x`` and ``..`` are never keys.
_LINKED = re.compile(r"\]\(((?:\.\./)?[A-Za-z0-9_][A-Za-z0-9_.\-]*)/")


def _paragraphs(text: str) -> list[tuple[int, int, str]]:
  """(first line, last line, text) of each blank-line separated paragraph."""
  out, start, buf = [], 1, []
  for i, line in enumerate(text.splitlines() + [""], 1):
    if line.strip():
      if not buf:
        start = i
      buf.append(line)
    elif buf:
      out.append((start, i - 1, "\n".join(buf)))
      buf = []
  return out


def unmatched(
  text: str, own: Sequence[float], other_folders: Optional[dict[str, Sequence[float]]] = None
) -> list[Quoted]:
  """The numbers ``text`` quotes that neither ``own`` (the folder's data numbers) nor, within a paragraph linking
  ``../<folder>/``, that folder's numbers (``other_folders``) contain."""
  other_folders = other_folders or {}
  linked_at: dict[int, list[float]] = {}
  for first, last, para in _paragraphs(text):
    extra = [x for name in _LINKED.findall(para) for x in other_folders.get(name, ())]
    for i in range(first, last + 1):
      linked_at[i] = extra
  out = []
  for q in quoted_numbers(text):
    if not matches(q, own) and not (linked_at.get(q.line) and matches(q, sorted(linked_at[q.line]))):
      out.append(q)
  return out


def index_row(index_text: str, folder: str) -> Optional[str]:
  """The row of docs/studies/README.md whose first link is ``folder``'s README, or None."""
  for line in index_text.splitlines():
    if line.startswith(f"| [{folder}]({folder}/README.md)"):
      return line
  return None


def check_folder(
  out_dir: str, recomputed_readme: str, manifest: dict, readme_of: Optional[callable] = None
) -> list[str]:
  """One sentence per number in ``out_dir``'s discussion.md and index row that the data do not produce.

  ``recomputed_readme``: the README as the report computes it now from the CSVs; ``readme_of(name)``: another
  published folder's README text (for numbers quoted from it), None when unknown."""
  own = data_numbers([recomputed_readme, json.dumps(manifest, ensure_ascii=False)])
  problems = []
  path = os.path.join(out_dir, "discussion.md")
  text = io_utils.read_text(path) if os.path.isfile(path) else None
  if text is not None:
    names = set(_LINKED.findall(text))
    others = {n: data_numbers([t]) for n in names if readme_of and (t := readme_of(n)) is not None}
    for q in unmatched(text, own, others):
      problems.append(
        f"discussion.md line {q.line} quotes {q.text}, which the folder's data do not produce ({q.context!r})."
      )
  folder = os.path.basename(os.path.normpath(out_dir))
  index_path = os.path.join(os.path.dirname(os.path.normpath(out_dir)), "README.md")
  if os.path.isfile(index_path):
    row = index_row(io_utils.read_text(index_path), folder)
    if row is not None:
      for q in unmatched(row, own):
        problems.append(
          f"the studies index row of {folder} quotes {q.text}, which the folder's data do not "
          f"produce ({q.context[:100]!r}…)."
        )
  return problems
