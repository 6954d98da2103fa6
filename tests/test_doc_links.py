"""Every relative link in README.md and docs/ (a file, a folder, or a markdown file plus a heading's #anchor) points
at something that exists in the repository, so that the links work on GitHub and in a clone.

A published study folder (docs/studies/<name>/ with a manifest.json) is never edited after it is reported, so its
links name the tree at the commit that reported it: a link there whose file has moved since (configs/ became
lamb_lars/configs/, issue 39) resolves against that commit (the manifest's ``code.commit``)."""

import glob
import json
import os
import re
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# [text](target) and [text](target "title"); images too. Code spans and fenced blocks are removed first.
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*(?:<([^>]+)>|([^)\s]+))(?:\s+\"[^\"]*\")?\s*\)")
_FENCE = re.compile(r"^```.*?^```", re.S | re.M)
_CODE = re.compile(r"`[^`\n]*`")


def _docs() -> list[str]:
  return [os.path.join(ROOT, "README.md"), *sorted(glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True))]


def relative_links(text: str) -> list[str]:
  """The relative link targets in markdown ``text`` (no URL scheme, no pure #anchor), without their #anchor."""
  text = _CODE.sub("", _FENCE.sub("", text))
  out = []
  for angled, plain in _LINK.findall(text):
    target = angled or plain
    if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith("#"):
      continue
    out.append(target)
  return out


def anchors(text: str) -> set[str]:
  """GitHub's heading anchors: lower case, punctuation other than - and _ dropped, spaces as hyphens."""
  text = _FENCE.sub("", text)
  return {
    re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
    for h in re.findall(r"^#{1,6}\s+(.+?)\s*#*$", text, re.M)
  }


def test_link_parser():
  text = (
    'See [a](docs/a.md#x), ![img](p.png "t"), [web](https://x.org), [anchor](#y), `[code](nope.md)`\n'
    "```\n[fenced](nope2.md)\n```\n[b](<docs/b c.md>)"
  )
  assert relative_links(text) == ["docs/a.md#x", "p.png", "docs/b c.md"]
  assert anchors("# Update cost (ResNet-50 v1.5 tree)\n## `config.optimizer`\n") == {
    "update-cost-resnet-50-v15-tree",
    "configoptimizer",
  }


def _at_recorded_commit(doc: str, target: str) -> bool:
  """Whether ``target`` (relative to ``doc``) existed at the commit of the published folder holding ``doc``."""
  manifest = os.path.join(os.path.dirname(doc), "manifest.json")
  if not os.path.isfile(manifest):
    return False
  commit = (json.load(open(manifest, encoding="utf-8")).get("code") or {}).get("commit")
  rel = os.path.relpath(os.path.normpath(os.path.join(os.path.dirname(doc), target)), ROOT)
  return (
    bool(commit)
    and not rel.startswith("..")
    and subprocess.run(
      ["git", "-C", ROOT, "cat-file", "-e", f"{commit}:{rel}"], capture_output=True, timeout=30
    ).returncode
    == 0
  )


@pytest.mark.parametrize("path", _docs(), ids=lambda p: os.path.relpath(p, ROOT))
def test_relative_links_resolve(path):
  with open(path, encoding="utf-8") as f:
    links = relative_links(f.read())
  broken = []
  for link in links:
    target, _, anchor = link.partition("#")
    full = os.path.join(os.path.dirname(path), target)
    if not os.path.exists(full):
      if not _at_recorded_commit(path, target):
        broken.append(link)
    elif anchor and full.endswith(".md"):
      with open(full, encoding="utf-8") as f:
        if anchor not in anchors(f.read()):
          broken.append(link)
  assert not broken, f"{os.path.relpath(path, ROOT)} links to missing {broken}"
