"""What a new user meets (issue 44): a run that is not learning is never a plain ``done``, a re-finished run keeps
its final row, the LR follows the optimizer, every documented command parses, and every mistake is one sentence
with exit status 2. Runs are tiny synthetic LeNet-5 runs (tests/test_bad_inputs.py ``tiny_config``)."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

from lamb_lars.train import stopping, trainer
from test_bad_inputs import ENV, REPO, one_sentence, tiny_config


def _train_py(*args: str, timeout: int = 300, cwd: str = REPO) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, os.path.join(REPO, "train.py"), *args], cwd=cwd, env=ENV,
                        capture_output=True, text=True, timeout=timeout)


# --- 1. Not learning: exploding loss, chance accuracy. -----------------------------------------------------------

@pytest.mark.parametrize("row,epochs,expected", [
    ({"train_loss": 8.6e21, "eval_accuracy": 0.1135}, 30.0, "exploding_loss"),   # the README's LAMB example on main
    ({"train_loss": 1000 * math.log(10) + 1, "eval_accuracy": 0.9}, 0.1, "exploding_loss"),
    ({"train_loss": 1000 * math.log(10) - 1, "eval_accuracy": 0.9}, 30.0, None),
    ({"train_loss": 2.30, "eval_accuracy": 0.1135}, 30.0, "chance_accuracy"),
    ({"train_loss": 2.30, "eval_accuracy": 0.325}, 1.0, "chance_accuracy"),      # 1/10 + 0.25·(1 − 1/10) = 0.325
    ({"train_loss": 2.30, "eval_accuracy": 0.326}, 1.0, None),
    ({"train_loss": 2.30, "eval_accuracy": 0.1135}, 0.99, None),                   # under an epoch: not judged
    ({"train_loss": 0.05, "eval_accuracy": 0.99}, 30.0, None),
])
def test_not_learning_thresholds(row, epochs, expected):
  judged = stopping.not_learning(row, 10, epochs)
  assert (judged and judged[0]) == expected
  if judged:
    assert judged[1].startswith("not learning:")


@pytest.mark.slow
def test_an_exploding_loss_is_flagged_in_result_summary_and_study(tmp_path):
  """LAMB at an absurd LR: the loss runs to ~1e12 without a NaN; result.json, the summary line and a study see it."""
  workdir = tmp_path / "w"
  out = _train_py("--config=configs/mnist_lenet.py", f"--workdir={workdir}", "--config.dataset=synthetic",
                  "--config.synthetic.num_train=256", "--config.synthetic.num_eval=64", "--config.batch_size=32",
                  "--config.eval_batch_size=64", "--config.num_train_steps=2", "--config.eval_every_steps=2",
                  "--config.progress=False", "--config.optimizer.name=lamb", "--config.optimizer.learning_rate=1000")
  assert out.returncode == 0, out.stderr
  result = json.loads((workdir / "result.json").read_text())
  assert result["status"] == "diverged" and result["not_learning"] == "exploding_loss" and result["stopped"] is None
  assert math.isfinite(result["final"]["train_loss"]) and result["final"]["train_loss"] > 1e3 * math.log(10)
  summary = out.stdout.strip().splitlines()[-1]
  assert summary.startswith("diverged (not_learning: exploding_loss): step 2/2"), summary
  from lamb_lars.study.running import store as st
  from lamb_lars.study.running.driver import ingest_run_dir
  con = st.open_store(str(tmp_path / "s.sqlite"))
  assert ingest_run_dir(con, "r1", str(workdir)) == "diverged"  # a study counts it as a failure, not a success
  con.close()


def test_a_run_at_chance_after_an_epoch_is_flagged(tmp_path):
  cfg = tiny_config(**{"optimizer.learning_rate": 1e-9, "num_train_steps": 8})  # 8 steps of 32 = one epoch of 256
  result = trainer.train_and_evaluate(cfg, str(tmp_path))
  assert result["status"] == "diverged" and result["not_learning"] == "chance_accuracy"
  assert result["final"]["eval_accuracy"] <= stopping.chance_threshold(10)


def test_a_learning_run_stays_done(tmp_path):
  result = trainer.train_and_evaluate(tiny_config(), str(tmp_path))
  assert result["status"] == "done" and result["not_learning"] is None


# --- 6. result.json always carries the final row. ----------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("lost", [("result.json",), ("result.json", "metrics.jsonl")])
def test_a_refinished_run_keeps_its_final_row(tmp_path, lost):
  cfg = tiny_config()
  first = trainer.train_and_evaluate(cfg, str(tmp_path))
  for name in lost:
    os.remove(tmp_path / name)
  again = trainer.train_and_evaluate(tiny_config(), str(tmp_path))
  assert again["final"] is not None and again["step"] == first["step"]
  for key in ("eval_accuracy", "eval_loss", "epoch", "examples"):
    assert again["final"][key] == first["final"][key], key
  if "metrics.jsonl" not in lost:
    assert again["final"] == first["final"]
  assert json.loads((tmp_path / "result.json").read_text())["final"] == again["final"]


# --- 2. The LR follows the optimizer; every documented command parses. -------------------------------------------

def _parse(argv: list[str]):
  """``train.py``'s flag parsing of ``argv`` (the --config file and its overrides), in a fresh flag registry."""
  from absl import flags
  from ml_collections import config_flags
  fv = flags.FlagValues()
  config_flags.DEFINE_config_file("config", None, "", flag_values=fv, lock_config=True, sys_argv=["train.py", *argv])
  flags.DEFINE_string("workdir", None, "", flag_values=fv)
  cwd = os.getcwd()
  os.chdir(REPO)
  try:
    fv(["train.py", *argv])
    return fv.config
  finally:
    os.chdir(cwd)


def test_changing_the_optimizer_brings_its_own_learning_rate():
  from lamb_lars.optim import optimizer_config
  lenet = lambda *a: _parse(["--config=configs/mnist_lenet.py", "--workdir=w", *a]).optimizer
  assert optimizer_config.learning_rate(lenet()) == 0.05                                  # the published baseline
  assert optimizer_config.learning_rate(lenet("--config.optimizer.name=lamb")) == 0.0005  # not momentum's 0.05
  assert optimizer_config.learning_rate(lenet("--config.optimizer.name=lars")) == 0.05
  assert optimizer_config.learning_rate(lenet("--config.optimizer.name=lamb", "--config.optimizer.learning_rate=0.01")
                                        ) == 0.01
  assert optimizer_config.learning_rate(_parse(["--config=configs/default.py", "--config.optimizer.name=adam"]
                                               ).optimizer) == 0.001


def _documented_commands() -> list[tuple[str, list[str]]]:
  """(where, argv) of every ``python train.py ...`` in --help, train.py, lamb_lars/main.py and the configs'
  docstrings (continuation lines joined; commands with a placeholder such as ``:RUNG`` are left out)."""
  import ast
  import glob
  import re
  import shlex
  from lamb_lars.common import cli_help
  texts = {"--help": cli_help.usage().replace("%%", "%")}
  for path in ["train.py", "lamb_lars/main.py", *sorted(glob.glob(os.path.join(REPO, "configs", "**", "*.py"),
                                                                    recursive=True))]:
    path = os.path.relpath(os.path.join(REPO, path), REPO)
    texts[path] = ast.get_docstring(ast.parse(open(os.path.join(REPO, path), encoding="utf-8").read())) or ""
  out = []
  for where, text in texts.items():
    text = re.sub(r"\\\s*\n\s*", " ", text.replace("``", "\n"))
    for cmd in re.findall(r"python train\.py ([^\n]*)", text):
      argv = [a for a in shlex.split(cmd.split("#")[0].split("(")[0]) if a.startswith("--")]
      if not re.search(r"--config=\S+:[A-Z]", " ".join(argv)):
        out.append((where, argv))
  return out


DOCUMENTED = _documented_commands()


def test_the_documented_commands_are_found():
  assert len(DOCUMENTED) >= 15 and any("--config.optimizer.name=lamb" in a for _, a in DOCUMENTED)


@pytest.mark.parametrize("where,argv", DOCUMENTED, ids=[f"{w}:{' '.join(a)}" for w, a in DOCUMENTED])
def test_every_documented_command_parses_and_validates(where, argv):
  """Each command parses as train.py parses it; MNIST ones also pass the whole validator (the plan of the run)."""
  from lamb_lars.train import validate
  config = _parse(argv)
  assert "model" in config, where
  if config.dataset == "mnist":
    plan = validate.validate(config, 1)
    assert plan.total_steps > 0
