"""Claims that cannot go stale (lamb_lars/study/publishing/claims.py; issue 41): the numbers a discussion quotes are
read as written (thousands commas, K, %, decimals), exemptions are honoured, a quoted number matches a data number
only at its own rounding, and ``verify`` fails a claims-checked folder whose discussion quotes an edited number."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from lamb_lars.study.publishing import claims, provenance

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _values(text):
  return [(q.value, q.decimals, q.kilo) for q in claims.quoted_numbers(text)]


def test_numbers_are_read_as_written_and_exemptions_are_skipped():
  assert _values("B_crit = 1,756 [1,206, 2,446] at 99.0%; 8K and −0.7 pp") == [
    (1756.0, 0, False),
    (1206.0, 0, False),
    (2446.0, 0, False),
    (99.0, 1, False),
    (8.0, 0, True),
    (-0.7, 1, False),
  ]
  text = (
    "Def. 2.1 and Table 3, §3.1, eq. 2.11, issue 41, LeNet-5, commit 2c14c0b, on 2026-11-26 at 22:24, "
    "`lr=0.05` and [x](../a/b1.md), You et al. 2020.\n"
    "the paper's 99.4 <!--nc-->\n"
    "<!--nc: 2.5--> a derived 2.5× here\n"
    "```\npython run 123\n```\n"
    "## Heading 42\n"
  )
  assert _values(text) == []


def test_a_quoted_number_matches_only_at_its_own_rounding():
  data = claims.data_numbers(["B_crit = 1755.6, acc 0.98534, batch 8192, loss 0.0382"])
  q = lambda s: claims.quoted_numbers(s)[0]
  assert claims.matches(q("1,756"), data) and claims.matches(q("98.5%"), data) and claims.matches(q("98.53"), data)
  assert claims.matches(q("8K"), data) and claims.matches(q("0.038"), data)
  assert not claims.matches(q("1,760"), data)  # a drifted number
  assert not claims.matches(q("98.54"), data)  # more precise than and different from the data
  assert not claims.matches(q("1,755"), data)  # 1755.6 rounds to 1756
  assert not claims.matches(q("16K"), data)


def test_a_number_quoted_from_another_folder_is_looked_up_there():
  text = "The [ladder](../ladder/README.md) gives 1,756.\n\nAlone: 1,756.\n"
  bad = claims.unmatched(text, claims.data_numbers(["nothing"]), {"../ladder": claims.data_numbers(["1756.2"])})
  assert [(q.line, q.text) for q in bad] == [(3, "1,756")]


@pytest.mark.slow  # > 5 s (the fast tier's bound, pyproject.toml)
def test_verify_fails_on_an_edited_number_in_a_claims_checked_discussion(tmp_path):
  src = os.path.join(REPO, "docs", "studies", "mnist_branching_sqrt_prereg")
  out = str(tmp_path / "mnist_branching_sqrt_prereg")
  shutil.copytree(src, out)
  path = os.path.join(out, "manifest.json")
  m = json.load(open(path, encoding="utf-8"))
  m["claims_checked"] = True
  json.dump(m, open(path, "w", encoding="utf-8"))
  assert provenance.verify(out) == []  # every number it quotes is in the data
  disc = os.path.join(out, "discussion.md")
  text = open(disc, encoding="utf-8").read()
  assert "181.6, 827.3 and 2051" in text  # B_simple(t), as the README prints it
  open(disc, "w", encoding="utf-8").write(text.replace("181.6, 827.3 and 2051", "181.6, 827.9 and 2051"))
  problems = provenance.verify(out)
  assert len(problems) == 1 and "quotes 827.9" in problems[0], problems
  run = subprocess.run(
    [sys.executable, "-m", "lamb_lars.study", "verify", out], cwd=REPO, capture_output=True, text=True
  )
  assert run.returncode == 1 and "827.9" in run.stdout
  m["claims_checked"] = False  # not opted in: verify passes, --claims warns
  json.dump(m, open(path, "w", encoding="utf-8"))
  assert provenance.verify(out) == []
  found = []
  assert provenance.verify(out, found) == [] and len(found) == 1
  run = subprocess.run(
    [sys.executable, "-m", "lamb_lars.study", "verify", "--claims", out], cwd=REPO, capture_output=True, text=True
  )
  assert run.returncode == 0 and "warning" in run.stdout and "827.9" in run.stdout


def test_only_links_to_a_sibling_or_a_part_name_another_folder():
  """``](../x/`` names the sibling ``../x`` and ``](x/`` a part ``x``; the index (``../README.md``), ``./``, ``..``
  and web links name none (so a paragraph linking the index cannot quote every folder's numbers)."""
  text = (
    "[a](../ladder/README.md) [b](data7500/README.md) [idx](../README.md) [c](./x/y.md) [d](../../x/y.md) "
    "[e](https://example.com/a/b) ![f](fig/x.png)"
  )
  assert sorted(claims._LINKED.findall(text)) == ["../ladder", "data7500", "fig"]
