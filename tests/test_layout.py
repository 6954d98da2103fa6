"""The house rules of the package layout (issue 23), checked on the source tree rather than promised in prose.

- No import cycle between lamb_lars modules, neither among module-level imports (the ones that run at import time)
  nor counting imports inside functions; nothing in lamb_lars/common/ imports a layer above it; the study's
  packages import downward only (analysis < report < publishing, running < publishing).
- No module-level ``__getattr__`` (compatibility shims hide where a name lives).
- No function over 60 lines under lamb_lars/, its docstring not counted (configs are data: exempt); no module size
  cap (one concept per module).
- Every lamb_lars module is used by the product (the package, configs, train.py, benchmarks, scripts, notebooks)
  or is an entry point: nothing in the package exists only for the tests.
- The README's layout table names every package under lamb_lars/, and every path it names exists.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_FUNCTION_LINES = 60


def _modules() -> dict[str, str]:
  """{dotted name: file} of every module of the installed package (lamb_lars/configs/ and lamb_lars/input_pipeline/
  included: ordinary subpackages)."""
  out = {}
  for folder, _, files in os.walk(os.path.join(REPO, "lamb_lars")):
    for name in files:
      if name.endswith(".py"):
        path = os.path.join(folder, name)
        dotted = os.path.relpath(path, REPO)[:-3].replace(os.sep, ".")
        out[dotted.removesuffix(".__init__")] = path
  return out


MODULES = _modules()


def _imports(path: str, module: str, top_level_only: bool) -> set[str]:
  """The lamb_lars modules ``module`` imports (``from a.b import c`` counts a.b.c when that is a module)."""
  tree = ast.parse(open(path, encoding="utf-8").read())
  nodes = tree.body if top_level_only else list(ast.walk(tree))
  if top_level_only:  # module level includes try/if blocks at module level, not function bodies
    nodes = [
      n
      for stmt in tree.body
      for n in ast.walk(stmt)
      if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    ]
    nodes += [
      n
      for stmt in tree.body
      if isinstance(stmt, ast.ClassDef)
      for n in stmt.body
      if isinstance(n, (ast.Import, ast.ImportFrom))
    ]
  out = set()
  for node in nodes:
    if isinstance(node, ast.Import):
      out |= {a.name for a in node.names if a.name in MODULES}
    elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
      if node.module in MODULES:
        out.add(node.module)
      out |= {f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in MODULES}
  out.discard(module)
  return out


def _cycles(top_level_only: bool) -> list[list[str]]:
  graph = {m: _imports(p, m, top_level_only=top_level_only) for m, p in MODULES.items()}
  # A package's __init__ importing its own submodules is how re-exports work, not a cycle with them.
  graph = {m: {d for d in deps if not d.startswith(m + ".")} for m, deps in graph.items()}
  state: dict[str, str] = {}
  cycles: list[list[str]] = []

  def visit(m, stack):
    state[m] = "open"
    for d in sorted(graph[m]):
      if state.get(d) == "open":
        cycles.append(stack[stack.index(d) :] + [d])
      elif d not in state:
        visit(d, stack + [d])
    state[m] = "done"

  for m in sorted(graph):
    if m not in state:
      visit(m, [m])
  return cycles


def test_no_import_cycle():
  cycles = _cycles(top_level_only=True)
  assert not cycles, "import cycles: " + "; ".join(" → ".join(c) for c in cycles)


def test_no_import_cycle_counting_function_imports():
  """An import inside a function still ties two modules together; it only hides the circle from the import."""
  cycles = _cycles(top_level_only=False)
  assert not cycles, "import cycles (imports inside functions counted): " + "; ".join(" → ".join(c) for c in cycles)


UPPER_LAYERS = ("lamb_lars.train", "lamb_lars.study", "lamb_lars.input_pipeline", "lamb_lars.models", "lamb_lars.optim")


def test_common_imports_nothing_above_it():
  """lamb_lars/common/ is the bottom layer: no module in it imports train, study, input_pipeline, models or optim,
  at module level or inside a function."""
  upward = {
    m: sorted(d for d in _imports(p, m, top_level_only=False) if d.startswith(UPPER_LAYERS))
    for m, p in MODULES.items()
    if m.startswith("lamb_lars.common")
  }
  upward = {m: deps for m, deps in upward.items() if deps}
  assert not upward, f"lamb_lars/common imports upward: {upward}"


def _named_imports(path: str) -> set[str]:
  """The modules ``importlib.import_module("…")`` / ``__import__("…")`` calls with a literal name import in a file."""
  out = set()
  for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
    if (
      isinstance(node, ast.Call)
      and node.args
      and isinstance(node.args[0], ast.Constant)
      and isinstance(node.args[0].value, str)
      and (getattr(node.func, "attr", None) == "import_module" or getattr(node.func, "id", None) == "__import__")
    ):
      out.add(node.args[0].value)
  return out


def test_nothing_outside_proj_imports_a_project():
  """lamb_lars/proj/<name>/ (a paper's reproduction, big_vision style) may import everything below it; nothing else
  in lamb_lars imports it, at module level, inside a function or by a literal ``importlib.import_module`` (issue 39).
  The generic report reaches a project only through the import path a study config names (``analysis.reference``;
  lamb_lars/study/report/reference.py), and ``verify`` through the verifier a manifest names."""
  upward = {
    m: sorted(
      d
      for d in _imports(p, m, top_level_only=False) | _named_imports(p)
      if d == "lamb_lars.proj" or d.startswith("lamb_lars.proj.")
    )
    for m, p in MODULES.items()
    if not m.startswith("lamb_lars.proj")
  }
  upward = {m: deps for m, deps in upward.items() if deps}
  assert not upward, f"modules outside lamb_lars/proj import a project: {upward}"


def test_the_proj_rule_sees_imports_inside_functions(tmp_path):
  """The rule above can fail: an import inside a function, and a literal import_module, are both seen."""
  f = tmp_path / "m.py"
  f.write_text(
    "import importlib\ndef f():\n  from lamb_lars.proj.you2020 import paper\n"
    "  return importlib.import_module('lamb_lars.proj.you2020.table3')\n"
  )
  assert "lamb_lars.proj.you2020.paper" in _imports(str(f), "x", top_level_only=False)
  assert not _imports(str(f), "x", top_level_only=True)
  assert _named_imports(str(f)) == {"lamb_lars.proj.you2020.table3"}


def test_no_symlinks_in_the_package():
  """configs/ and input_pipeline/ are real subpackages (issue 39): a symlink in lamb_lars/ would ship a second copy
  of a folder in the wheel, or none, depending on the installer."""
  links = [
    os.path.relpath(os.path.join(d, n), REPO)
    for d, dirs, files in os.walk(os.path.join(REPO, "lamb_lars"))
    for n in dirs + files
    if os.path.islink(os.path.join(d, n))
  ]
  assert not links, f"symlinks under lamb_lars/: {links}"
  assert not os.path.exists(os.path.join(REPO, "configs")) and not os.path.exists(os.path.join(REPO, "input_pipeline"))


# The study's packages and the study packages each may not import (module level or inside a function). analysis is
# pure over records; report renders analysis results; running (orchestration) runs trials and keeps the store;
# publishing turns a workdir into a published folder, so it reads running's store and writes report's report.
STUDY_FORBIDDEN = {
  "lamb_lars.study.analysis": ("lamb_lars.study.report", "lamb_lars.study.running", "lamb_lars.study.publishing"),
  "lamb_lars.study.report": ("lamb_lars.study.running", "lamb_lars.study.publishing"),
  "lamb_lars.study.running": ("lamb_lars.study.report", "lamb_lars.study.publishing"),
  "lamb_lars.study.publishing": (),
}
# A paper's own code is a project above the general layers (lamb_lars/proj/, big_vision style): its own rule below.
STUDY_LAYER_EXEMPT: set[str] = set()


def test_study_packages_import_only_downward():
  """analysis < report < publishing and running < publishing: no study package imports one it must not."""
  bad = {}
  for m, p in MODULES.items():
    for pkg, forbidden in STUDY_FORBIDDEN.items():
      if (m == pkg or m.startswith(pkg + ".")) and m not in STUDY_LAYER_EXEMPT:
        deps = sorted(d for d in _imports(p, m, top_level_only=False) if d.startswith(forbidden))
        if deps:
          bad[m] = deps
  assert not bad, f"study packages import a layer they must not: {bad}"
  present = {m.rsplit(".", 1)[0] if m.count(".") > 2 else m for m in MODULES if m.startswith("lamb_lars.study.")}
  assert set(STUDY_FORBIDDEN) <= present, "a package the layer rule names is gone: update STUDY_FORBIDDEN"


def test_no_module_level_getattr():
  """No module forwards names with a module-level ``__getattr__`` (a shim for a moved module hides where code
  lives). The one exception is the package root's lazy optimizer API, which may name only lamb_lars.optim modules."""
  shims = [
    m
    for m, p in MODULES.items()
    if m != "lamb_lars"
    and any(
      isinstance(n, ast.FunctionDef) and n.name == "__getattr__"
      for n in ast.parse(open(p, encoding="utf-8").read()).body
    )
  ]
  assert not shims, f"module-level __getattr__ in {shims}"
  import lamb_lars

  assert all(m.startswith("lamb_lars.optim.") for m in lamb_lars._API.values()), lamb_lars._API


def _is_config(module: str) -> bool:
  """lamb_lars/configs/ and a project's lamb_lars/proj/<name>/configs/: data, one long table by design."""
  return module.startswith("lamb_lars.configs") or bool(re.match(r"lamb_lars\.proj\.\w+\.configs\b", module))


def _library(module: str) -> bool:
  return not _is_config(module)


def _function_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
  """A function's length in lines, from its ``def`` (decorators not counted) to its last line, less its docstring:
  the cap measures code, and an optax-style docstring (Args, Returns, an example) is documentation (issue 39)."""
  lines = node.end_lineno - node.lineno + 1
  first = node.body[0]
  if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
    lines -= first.end_lineno - first.lineno + 1
  return lines


def test_function_lines_leave_out_the_docstring():
  """The count can fail: code lines count, the docstring's do not."""
  doc = "\n".join(f"  line {i}" for i in range(100))
  f = ast.parse(f'def f():\n  """Doc.\n{doc}\n  """\n  a = 1\n  return a\n').body[0]
  g = ast.parse("def g():\n" + "".join(f"  a{i} = {i}\n" for i in range(70))).body[0]
  assert _function_lines(f) == 3 and _function_lines(g) == 71


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _library(m)))
def test_function_sizes(module):
  """No function over 60 lines, its docstring not counted (the cap is on code; an optax-style docstring with Args,
  Returns and an example is not held against it). Modules have no size cap: one concept per module, however long
  (issue 39)."""
  src = open(MODULES[module], encoding="utf-8").read()
  long = [
    (n.name, _function_lines(n))
    for n in ast.walk(ast.parse(src))
    if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and _function_lines(n) > MAX_FUNCTION_LINES
  ]
  assert not long, f"{module}: functions over {MAX_FUNCTION_LINES} lines (docstring not counted): {long}"


def _product_sources() -> list[tuple[str, str]]:
  """(name, source) of every product file outside tests/: the package, train.py, benchmarks, scripts, notebooks."""
  out = []
  for m, p in MODULES.items():
    out.append((m, open(p, encoding="utf-8").read()))
  for folder in ("benchmarks", "scripts"):
    for name in sorted(os.listdir(os.path.join(REPO, folder))):
      if name.endswith((".py", ".sh")):
        out.append((f"{folder}/{name}", open(os.path.join(REPO, folder, name), encoding="utf-8").read()))
  out.append(("train.py", open(os.path.join(REPO, "train.py"), encoding="utf-8").read()))
  nb_dir = os.path.join(REPO, "notebooks")
  for name in sorted(os.listdir(nb_dir)):
    if name.endswith(".ipynb"):
      cells = json.load(open(os.path.join(nb_dir, name), encoding="utf-8"))["cells"]
      out.append((f"notebooks/{name}", "\n".join("".join(c["source"]) for c in cells)))
  for doc in ("README.md",):
    out.append((doc, open(os.path.join(REPO, doc), encoding="utf-8").read()))
  return out


def test_every_module_is_used_by_the_product():
  sources = _product_sources()
  unused = []
  for m in sorted(MODULES):
    if _is_config(m) or m.endswith("__main__") or m.count(".") < 2 and m in ("lamb_lars",):
      continue
    pkg, _, leaf = m.rpartition(".")
    used = re.compile(
      rf"(\b{re.escape(m)}\b|from {re.escape(pkg)} import [^\n]*\b{leaf}\b|"
      rf"from {re.escape(pkg)} import \([^)]*\b{leaf}\b)"
    )
    if m in ("lamb_lars.configs", "lamb_lars.input_pipeline") or MODULES[m].endswith("__init__.py"):
      continue
    if not any(used.search(src) for name, src in sources if name != m):
      unused.append(m)
  assert not unused, f"modules no product file imports or runs (test-only or dead): {unused}"


def test_readme_layout_table_matches_the_tree():
  readme = open(os.path.join(REPO, "README.md"), encoding="utf-8").read()
  section = readme.split("## Layout", 1)[1].split("\n## ", 1)[0]
  rows = [line.split(" | ", 1) for line in section.splitlines() if line.startswith("| `")]
  named = [re.fullmatch(r"\| `([^`]+)`", first).group(1) for first, _ in rows]
  missing = [p for p in named if not os.path.exists(os.path.join(REPO, p.rstrip("/")))]
  # each module a package row names (``x.py``) is in that package
  missing += [
    os.path.join(p, f)
    for p, (_, what) in zip(named, rows)
    if p.endswith("/")
    for f in re.findall(r"`(\w+\.py)`", what)
    if not os.path.exists(os.path.join(REPO, p, f))
  ]
  assert not missing, f"README layout names paths that do not exist: {missing}"
  packages = sorted(
    os.path.relpath(d, REPO) + "/"
    for d, _, files in os.walk(os.path.join(REPO, "lamb_lars"))
    if "__init__.py" in files and "__pycache__" not in d
  )
  # configs are data: a configs/ folder's subfolders (studies/), and a project's configs/ when its project is named
  unnamed = [
    p
    for p in packages
    if p not in named
    and not any(p.startswith(n) and n.endswith("configs/") for n in named)
    and not (p.endswith("/configs/") and p[: -len("configs/")] in named)
  ]
  assert not unnamed, f"packages the README layout table does not name: {unnamed}"


def test_importing_the_package_imports_no_jax_and_every_public_name_resolves():
  """``import lamb_lars`` loads the optimizer API on first use (PEP 562), so the study command line starts without
  JAX; every name of ``__all__`` still resolves to the optimizer module's own object."""
  code = (
    "import sys, importlib, lamb_lars\n"
    "assert 'jax' not in sys.modules, 'import lamb_lars imported jax'\n"
    "for n in lamb_lars.__all__:\n"
    "  assert getattr(lamb_lars, n) is getattr(importlib.import_module(lamb_lars._API[n]), n), n\n"
    "assert sorted(lamb_lars.__all__) == sorted(lamb_lars._API) and set(lamb_lars.__all__) <= set(dir(lamb_lars))\n"
    "print('ok')\n"
  )
  out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
  assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


@pytest.mark.slow
def test_the_trainer_loads_grain_only_for_a_grain_pipeline():
  """Every run and study trial is a process that imports the trainer; grain (0.2–0.4 s to import on the 2-core CPU)
  is loaded only by the ImageNet pipeline that reads through it (input_pipeline/imagenet.py), not at import."""
  code = "import sys, lamb_lars.train.trainer\nassert 'grain' not in sys.modules, 'grain was imported'\nprint('ok')\n"
  out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
  assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
