"""The text of ``python train.py --help``: how to run, the run configs in ``lamb_lars/configs/`` (each with the first
line of its docstring), and the most-used keys with their defaults and comments, read from
``lamb_lars/configs/default.py`` and ``lamb_lars/configs/optimizer.py`` themselves (the configs stay the one place that
defines a default)."""

from __future__ import annotations

import ast
import importlib
import os
import re

# The keys most runs set (a batch-size experiment: You et al. 2020 Table 3 varies these), in this order.
MAIN_KEYS = (
  "dataset",
  "model",
  "batch_size",
  "num_epochs",
  "num_train_steps",
  "validation_split",
  "seed",
  "optimizer.name",
  "optimizer.learning_rate",
  "optimizer.lr_scaling",
  "optimizer.base_batch_size",
  "optimizer.weight_decay",
  "optimizer.layerwise",
  "optimizer.schedule.warmup_epochs",
  "optimizer.schedule.decay",
  "eval_every_epochs",
  "checkpoint_every_epochs",
  "num_devices",
  "progress",
)

# For main keys whose line in the config has no comment (or one that continues on the next line).
_WHAT = {
  "num_epochs": "training length in epochs (N/B steps each, rounded up); num_train_steps > 0 wins",
  "num_train_steps": "training length in steps; > 0 wins over num_epochs",
  "validation_split": "> 0: hold out the last N training examples; evals then report validation_* too",
  "optimizer.schedule.warmup_epochs": "LR warmup length in epochs (or warmup_steps/_examples/_percent)",
  "checkpoint_every_epochs": "0 = only at the end; resume from the newest",
  "seed": "init and data order",
  "optimizer.learning_rate": "peak LR at base_batch_size; None = the optimizer's own, "
  "optimizer.default_learning_rate.NAME",
}

_ASSIGN = re.compile(r"^\s*(config|c|s)\.(\w+)\s*=.*?#\s*(.*)$")
_PREFIX = {"config": "", "c": "optimizer.", "s": "optimizer.schedule."}


def first_doc_line(path: str) -> str:
  with open(path, encoding="utf-8") as f:
    doc = ast.get_docstring(ast.parse(f.read())) or ""
  return doc.strip().splitlines()[0] if doc.strip() else ""


def _configs_dir() -> str:
  """The repo's ``lamb_lars/configs/`` (the package ``lamb_lars.configs``), wherever lamb_lars is imported from."""
  from lamb_lars import configs

  return os.path.dirname(configs.__file__)


def run_configs() -> list[tuple[str, str]]:
  """``(lamb_lars/configs/NAME.py, first docstring line)`` of every run config: a ``lamb_lars/configs/*.py`` whose
  ``get_config()`` has a ``model``, and the same in every paper project's ``lamb_lars/proj/<name>/configs/``, found on
  disk (``lamb_lars/configs/optimizer.py`` is a subtree, ``studies/`` and a project's study configs are study
  configs)."""
  package = os.path.dirname(_configs_dir())  # lamb_lars/
  proj = os.path.join(package, "proj")
  folders = [_configs_dir()] + sorted(
    os.path.join(proj, p, "configs") for p in (os.listdir(proj) if os.path.isdir(proj) else ())
  )
  out = []
  for folder in folders:
    rel = os.path.relpath(folder, os.path.dirname(package))  # lamb_lars/configs, lamb_lars/proj/you2020/configs
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else ():
      if not name.endswith(".py") or name.startswith("_"):
        continue
      module = importlib.import_module(rel.replace(os.sep, ".") + "." + name[:-3])
      if "model" in getattr(module, "get_config", dict)():
        out.append((f"{rel}/{name}", first_doc_line(os.path.join(folder, name))))
  return out


def key_comments() -> dict[str, str]:
  """``{dotted key: its end-of-line comment}`` from lamb_lars/configs/default.py and lamb_lars/configs/optimizer.py; a
  comment continued on the next lines (a line holding only a comment) is joined, so no help line stops mid-comment."""
  out, last = {}, None
  for name in ("default.py", "optimizer.py"):
    with open(os.path.join(_configs_dir(), name), encoding="utf-8") as f:
      for line in f:
        m = _ASSIGN.match(line)
        if m and (name == "optimizer.py") == (m.group(1) != "config"):
          last = _PREFIX[m.group(1)] + m.group(2)
          out[last] = m.group(3).strip()
        elif last is not None and line.strip().startswith("#") and line.index("#") > 20:
          out[last] += " " + line.strip()[1:].strip()
        else:
          last = None
  return out


def _value(config, key: str):
  for part in key.split("."):
    config = config[part]
  return config


def usage() -> str:
  """The whole --help text above the flags (``%`` escaped for absl, which %-formats it)."""
  from lamb_lars.configs import default

  config, comments = default.get_config(), key_comments()
  lines = [
    "Train and evaluate one config (resumes from the newest checkpoint in --workdir).",
    "",
    "  python train.py --config=lamb_lars/configs/mnist_lenet.py --workdir=runs/mnist \\",
    "      --config.batch_size=8192 --config.optimizer.name=lamb",
    "",
    "Configs:",
  ]
  configs = run_configs()
  width = max(len(p) for p, _ in configs)
  lines += [f"  {p:<{width}}  {doc}" for p, doc in configs]
  lines += [
    "",
    "Most-used keys (--config.KEY=VALUE; default; every key with its comment: "
    "lamb_lars/configs/default.py, lamb_lars/configs/optimizer.py):",
  ]
  items = [(f"{k}={_value(config, k)!r}", _WHAT.get(k) or comments.get(k, "")) for k in MAIN_KEYS]
  width = max(len(a) for a, _ in items)
  lines += [f"  {a:<{width}}  {c}".rstrip() for a, c in items]
  lines += ["", "TensorBoard: tensorboard --logdir=WORKDIR (grouped train/ eval/ optim/ perf/ tags, HParams tab).", ""]
  return "\n".join(lines).replace("%", "%%")
