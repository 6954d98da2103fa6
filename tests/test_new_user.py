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

from lamb_lars.configs import mnist_lenet
from lamb_lars.train import stopping, trainer
from test_bad_inputs import ENV, REPO, one_sentence, tiny_config


def _train_py(*args: str, timeout: int = 300, cwd: str = REPO) -> subprocess.CompletedProcess:
  return subprocess.run(
    [sys.executable, os.path.join(REPO, "train.py"), *args],
    cwd=cwd,
    env=ENV,
    capture_output=True,
    text=True,
    timeout=timeout,
  )


# --- 1. Not learning: exploding loss, chance accuracy. -----------------------------------------------------------


@pytest.mark.parametrize(
  "row,epochs,expected",
  [
    ({"train_loss": 8.6e21, "eval_accuracy": 0.1135}, 30.0, "exploding_loss"),  # the README's LAMB example on main
    ({"train_loss": 1000 * math.log(10) + 1, "eval_accuracy": 0.9}, 0.1, "exploding_loss"),
    ({"train_loss": 1000 * math.log(10) - 1, "eval_accuracy": 0.9}, 30.0, None),
    ({"train_loss": 2.30, "eval_accuracy": 0.1135}, 30.0, "chance_accuracy"),
    ({"train_loss": 2.30, "eval_accuracy": 0.325}, 1.0, "chance_accuracy"),  # 1/10 + 0.25·(1 − 1/10) = 0.325
    ({"train_loss": 2.30, "eval_accuracy": 0.326}, 1.0, None),
    ({"train_loss": 2.30, "eval_accuracy": 0.1135}, 0.99, None),  # under an epoch: not judged
    ({"train_loss": 0.05, "eval_accuracy": 0.99}, 30.0, None),
  ],
)
def test_not_learning_thresholds(row, epochs, expected):
  judged = stopping.not_learning(row, 10, epochs)
  assert (judged and judged[0]) == expected
  if judged:
    assert judged[1].startswith("not learning:")


@pytest.mark.slow
def test_an_exploding_loss_is_flagged_in_result_summary_and_study(tmp_path):
  """LAMB at an absurd LR: the loss runs to ~1e12 without a NaN; result.json, the summary line and a study see it."""
  workdir = tmp_path / "w"
  out = _train_py(
    "--config=lamb_lars/configs/mnist_lenet.py",
    f"--workdir={workdir}",
    "--config.dataset=synthetic",
    "--config.synthetic.num_train=256",
    "--config.synthetic.num_eval=64",
    "--config.batch_size=32",
    "--config.eval_batch_size=64",
    "--config.num_train_steps=2",
    "--config.eval_every_steps=2",
    "--config.progress=False",
    "--config.optimizer.name=lamb",
    "--config.optimizer.learning_rate=1000",
  )
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


def test_synthetic_data_is_not_judged_on_accuracy():
  """Its held-out labels are random, so its test accuracy is chance by construction (the smoke studies)."""
  assert stopping.not_learning({"train_loss": 2.3, "eval_accuracy": 0.1}, 10, 3.0, random_labels=True) is None
  assert (
    stopping.not_learning({"train_loss": 1e9, "eval_accuracy": 0.1}, 10, 3.0, random_labels=True)[0] == "exploding_loss"
  )


@pytest.mark.slow
@pytest.mark.xla_opt  # a full epoch of MNIST and an evaluation: the optimised program saves more (20 s → 12 s)
def test_a_run_at_chance_after_an_epoch_is_flagged(tmp_path):
  """MNIST at LR 1e-9 for one epoch (30 steps of 2,048) ends at chance level: flagged, not done."""
  cfg = mnist_lenet.get_config()
  cfg.update_from_flattened_dict(
    {
      "batch_size": 2048,
      "num_train_steps": 30,
      "eval_every_steps": 30,
      "checkpoint_every_steps": 30,
      "progress": False,
      "optimizer.learning_rate": 1e-9,
    }
  )
  result = trainer.train_and_evaluate(cfg, str(tmp_path))
  assert result["status"] == "diverged" and result["not_learning"] == "chance_accuracy"
  assert result["final"]["eval_accuracy"] <= stopping.chance_threshold(10)


@pytest.mark.slow
@pytest.mark.e2e
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

  lenet = lambda *a: _parse(["--config=lamb_lars/configs/mnist_lenet.py", "--workdir=w", *a]).optimizer
  assert optimizer_config.learning_rate(lenet()) == 0.05  # the published baseline
  assert optimizer_config.learning_rate(lenet("--config.optimizer.name=lamb")) == 0.0005  # not momentum's 0.05
  assert optimizer_config.learning_rate(lenet("--config.optimizer.name=lars")) == 0.05
  assert (
    optimizer_config.learning_rate(lenet("--config.optimizer.name=lamb", "--config.optimizer.learning_rate=0.01"))
    == 0.01
  )
  assert (
    optimizer_config.learning_rate(
      _parse(["--config=lamb_lars/configs/default.py", "--config.optimizer.name=adam"]).optimizer
    )
    == 0.001
  )


def _documented_commands() -> list[tuple[str, list[str]]]:
  """(where, argv) of every ``python train.py ...`` in --help, train.py, lamb_lars/main.py, the configs'
  docstrings, the README and docs/*.md (continuation lines joined; commands with a placeholder such as ``:RUNG``
  are left out)."""
  import ast
  import glob
  import re
  import shlex
  from lamb_lars.common import cli_help

  texts = {"--help": cli_help.usage().replace("%%", "%")}
  for path in [
    "train.py",
    "lamb_lars/main.py",
    *sorted(glob.glob(os.path.join(REPO, "lamb_lars", "configs", "**", "*.py"), recursive=True)),
    *sorted(glob.glob(os.path.join(REPO, "lamb_lars", "proj", "*", "configs", "*.py"))),
  ]:
    path = os.path.relpath(os.path.join(REPO, path), REPO)
    texts[path] = ast.get_docstring(ast.parse(open(os.path.join(REPO, path), encoding="utf-8").read())) or ""
  for path in ["README.md", *sorted(glob.glob(os.path.join(REPO, "docs", "*.md")))]:  # the documents' examples too
    path = os.path.relpath(os.path.join(REPO, path), REPO)
    md = open(os.path.join(REPO, path), encoding="utf-8").read()
    texts[path] = "\n".join(re.findall(r"```(?:bash|sh)?\n(.*?)```", md, re.S))  # fenced shell blocks only
  out = []
  for where, text in texts.items():
    text = re.sub(r"\\\s*\n\s*", " ", text.replace("``", "\n"))
    for cmd in re.findall(r"python train\.py ([^\n]*)", text):
      words = cmd.split("#")[0].split("(")[0]
      try:
        words = shlex.split(words)
      except ValueError:  # the command sits inside a quoted remote command (e.g. gcloud ... --command="...")
        words = words.replace('"', " ").split()
      argv = [a for a in words if a.startswith("--")]
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


# --- 7, 8. One sentence before anything compiles: values that cannot be right. --------------------------------

BOUND_CASES = [
  ({"num_epochs": float("inf"), "num_train_steps": -1}, "config.num_epochs=inf must be a finite number"),
  ({"num_epochs": float("nan")}, "config.num_epochs=nan must be a finite number"),
  ({"eval_batch_size": 10**12}, "config.eval_batch_size=1,000,000,000,000 is larger than the 64 examples"),
  ({"microbatch_size": -8}, "config.microbatch_size=-8 must be an integer ≥ 0"),
  ({"diagnostics.noise_injection.gradients": -0.1}, "noise_injection.gradients=-0.1 must be a finite std ≥ 0"),
  ({"diagnostics.noise_injection.weights": float("inf")}, "noise_injection.weights=inf must be a finite std"),
  ({"diagnostics.noise_injection.labels": 1.5}, "noise_injection.labels=1.5 must be a fraction in [0, 1]"),
  ({"synthetic.num_train": 0}, "config.synthetic.num_train=0 must be ≥ 1"),
  (
    {"init_from_dir": "/nonexistent/reference", "init_from_steps": 2},
    "init_from_dir='/nonexistent/reference' does not exist",
  ),
]


@pytest.mark.parametrize("overrides,expected", BOUND_CASES, ids=[str(c[0]) for c in BOUND_CASES])
def test_values_that_cannot_be_right_are_one_sentence(overrides, expected):
  from lamb_lars.train import validate
  from lamb_lars.train.run_plan import ConfigError

  with pytest.raises(ConfigError) as e:
    validate.validate(tiny_config(**overrides), 1)
  assert expected in str(e.value) and one_sentence(str(e.value)), str(e.value)


def test_a_result_json_that_is_not_an_object_is_one_sentence(tmp_path):
  from lamb_lars.train.run_plan import ConfigError

  (tmp_path / "result.json").write_text("[1, 2]")
  with pytest.raises(ConfigError) as e:
    trainer.recorded_result(str(tmp_path))
  assert "does not hold a JSON object" in str(e.value) and one_sentence(str(e.value))


@pytest.mark.parametrize(
  "exc",
  [
    OSError(28, "No space left on device"),
    ValueError("RESOURCE_EXHAUSTED: Error writing local file /w/checkpoints/4/state/d/abc: No space left"),
    RuntimeError("orbax: RESOURCE_EXHAUSTED: failed to write checkpoint"),
  ],
)
def test_a_full_disk_is_one_sentence(exc):
  from lamb_lars.common import cli_errors

  msg = cli_errors.sentence(exc, value_errors=False)
  assert msg is not None and "space" in msg and "re-run the same command to resume" in msg and one_sentence(msg), msg


def test_a_full_disk_mid_run_ends_in_one_sentence(tmp_path, monkeypatch, capsys):
  """The checkpoint save fails as orbax does on a full disk: train.py's handler prints one sentence, exit 2."""
  from lamb_lars.common import cli_errors
  from lamb_lars.train import checkpoint

  def full(*a, **k):
    raise ValueError("RESOURCE_EXHAUSTED: Error writing local file: No space left on device")

  monkeypatch.setattr(checkpoint.Checkpointer, "save", full)
  with pytest.raises(ValueError) as e:
    trainer.train_and_evaluate(tiny_config(), str(tmp_path))
  with pytest.raises(SystemExit) as ex:
    cli_errors.exit_on_mistake(e.value, value_errors=False)
  assert ex.value.code == 2
  line = capsys.readouterr().err.strip().splitlines()[-1]
  assert line.startswith("error: ") and one_sentence(line), line


CONFIG_FILES = {
  "raises.py": ("def get_config():\n  raise RuntimeError('no GPU quota')\n", "raised RuntimeError: no GPU quota"),
  "missing_module.py": (
    "import not_a_module_anywhere\ndef get_config():\n  return None\n",
    "No module named 'not_a_module_anywhere'",
  ),
  "returns_none.py": ("def get_config():\n  return None\n", "get_config() returned None"),
}
CLI_CASES = [
  (["--config=lamb_lars/configs/mnist_lenet.py", "--config.foo=1"], "the config has no key 'foo'"),
  (
    ["--config=lamb_lars/configs/mnist_lenet.py", "--config.num_epochs=inf"],
    "config.num_epochs=inf must be a finite number",
  ),
  (["--config=lamb_lars/configs/mnist_lenet.py", "--config.eval_batch_size=1000000000000"], "eval_batch_size"),
  (["--config=lamb_lars/configs/mnist_lenet.py", "stray"], "unexpected argument 'stray'"),
  *[([f"--config={{tmp}}/{name}"], expected) for name, (_, expected) in CONFIG_FILES.items()],
]


@pytest.mark.slow
@pytest.mark.parametrize("argv,expected", CLI_CASES, ids=[a[-1] for a, _ in CLI_CASES])
def test_train_py_mistakes_exit_2_with_one_sentence(tmp_path, argv, expected):
  for name, (text, _) in CONFIG_FILES.items():
    (tmp_path / name).write_text(text)
  workdir = tmp_path / "w"
  out = _train_py(*[a.replace("{tmp}", str(tmp_path)) for a in argv], f"--workdir={workdir}", timeout=120)
  assert out.returncode == 2, out.stderr
  last = out.stderr.strip().splitlines()[-1]  # (ml_collections warns of a None config on the line before)
  assert last.startswith("error: ") and expected in last and one_sentence(last), out.stderr
  assert "Traceback" not in out.stderr
  assert not workdir.exists()


@pytest.mark.slow
def test_gs_workdir_without_credentials_fails_at_once(tmp_path):
  from lamb_lars.common import cli_errors

  env = {k: v for k, v in ENV.items() if k not in cli_errors.GCS_ENV}
  out = subprocess.run(
    [sys.executable, "train.py", "--config=lamb_lars/configs/mnist_lenet.py", "--workdir=gs://no-bucket/w"],
    cwd=REPO,
    env={**env, "CLOUDSDK_CONFIG": str(tmp_path)},
    capture_output=True,
    text=True,
    timeout=60,
  )
  last = out.stderr.strip().splitlines()[-1]
  assert out.returncode == 2 and one_sentence(last) and "Traceback" not in out.stderr, out.stderr
  assert "GOOGLE_APPLICATION_CREDENTIALS" in last and "STORAGE_EMULATOR_HOST" in last


@pytest.mark.slow
@pytest.mark.parametrize("sig,rc", [(2, 130), (15, 143)])
def test_an_interrupted_run_says_where_and_how_to_resume(tmp_path, sig, rc):
  """SIGINT / SIGTERM after the first evaluation: the loop stops between chunks (no orbax traceback from inside a
  save), one line with the step and the checkpoint to resume from, rc 128 + signal."""
  import time

  args = [
    sys.executable,
    os.path.join(REPO, "train.py"),
    "--config=lamb_lars/configs/mnist_lenet.py",
    f"--workdir={tmp_path / 'w'}",
    "--config.dataset=synthetic",
    "--config.synthetic.num_train=256",
    "--config.synthetic.num_eval=64",
    "--config.batch_size=32",
    "--config.eval_batch_size=64",
    "--config.num_train_steps=100000",
    "--config.eval_every_steps=2",
    "--config.checkpoint_every_steps=2",
    "--config.progress=False",
  ]
  proc = subprocess.Popen(args, cwd=REPO, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  metrics = tmp_path / "w" / "metrics.jsonl"
  deadline = time.time() + 240
  while time.time() < deadline and not (metrics.exists() and metrics.read_text().count("\n") >= 2):
    time.sleep(0.5)
  proc.send_signal(sig)
  _, err = proc.communicate(timeout=120)
  last = err.strip().splitlines()[-1]
  assert proc.returncode == rc, err
  assert last.startswith("interrupted at step ") and "re-run the same command to resume" in last, err
  assert one_sentence(last) and "Traceback" not in err


# --- 6. A study's store missing beside its run directories is refused, never replaced. ------------------------


def test_a_missing_store_beside_run_directories_is_refused(tmp_path):
  from lamb_lars.configs.studies import smoke
  from lamb_lars.study.running import workdir as wd

  wd.save_study_config(smoke.get_config(), str(tmp_path))
  (tmp_path / "runs" / "bs256-momentum-lr0.05").mkdir(parents=True)
  with pytest.raises(ValueError) as e:
    wd.open_store(str(tmp_path))
  assert "study.sqlite is missing but 1 trial run directories exist" in str(e.value) and one_sentence(str(e.value))
  assert not (tmp_path / "study.sqlite").exists()
  out = subprocess.run(
    [sys.executable, "-m", "lamb_lars.study", "status", f"--workdir={tmp_path}"],
    cwd=REPO,
    env=ENV,
    capture_output=True,
    text=True,
    timeout=120,
  )
  last = out.stderr.strip().splitlines()[-1] if out.stderr.strip() else ""
  assert out.returncode == 2 and last.startswith("error: ") and "is missing" in last, out.stdout + out.stderr
  assert not (tmp_path / "study.sqlite").exists()


# --- 9. Smaller warts. ----------------------------------------------------------------------------------------

_FOLDER = "docs/studies/mnist_branching_sqrt_prereg"


@pytest.mark.parametrize("form", [[f"--workdir={_FOLDER}"], ["--workdir", _FOLDER], [_FOLDER]])
def test_study_verify_takes_the_workdir_flag_too(form):
  out = subprocess.run(
    [sys.executable, "-m", "lamb_lars.study", "verify", *form],
    cwd=REPO,
    env=ENV,
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert out.returncode == 0 and "verified" in out.stdout, out.stdout + out.stderr


def test_optuna_trials_carry_their_searched_values_as_params(tmp_path):
  """optuna-dashboard plots params: each trial's point is an Optuna param with the cell's distribution, also after
  the study is persisted (as a resumed runner does), and a follow-up outside the first range still keeps its."""
  import optuna
  from lamb_lars.study.running import search

  space = {"optimizer.learning_rate": ("log", 0.01, 1.0), "optimizer.schedule.warmup_epochs": ("linear", 0.0, 5.0)}
  points = {
    "a": {"optimizer.learning_rate": 0.05, "optimizer.schedule.warmup_epochs": 1.0},
    "b": {"optimizer.learning_rate": 0.3, "optimizer.schedule.warmup_epochs": 2.5},
    "c": {"optimizer.learning_rate": 3.0},
  }  # an extended range's trial
  cs = search.CellSearch(min_epochs=1, reduction_factor=3, trial_params={k: (v, space) for k, v in points.items()})
  for rid in points:
    cs.report(rid, 1, 0.9)
  cs.persist(search.optuna_storage(str(tmp_path)), "s/c")
  for rid in points:
    cs.finish(rid, "done")
  loaded = optuna.load_study(study_name="s/c", storage=f"sqlite:///{tmp_path}/{search.OPTUNA_DB}")
  got = {t.user_attrs["run_id"]: t for t in loaded.trials}
  for rid, point in points.items():
    assert got[rid].params == pytest.approx(point)
  want = optuna.distributions.FloatDistribution(0.01, 1.0, log=True)
  assert got["a"].distributions["optimizer.learning_rate"] == want


@pytest.mark.parametrize(
  "v,label",
  [(1.5, "1.5"), (2.0, "2"), (2.5, "2.5"), (256.0, "256"), (8192.0, "8,192"), (0.05, "0.05"), (1e-5, "1e-05")],
)
def test_log_axis_tick_labels_tell_values_apart(v, label):
  from lamb_lars.study.report import plots

  assert plots._plain_number(v) == label


TABLE3_FOLDERS = sorted(
  os.path.basename(os.path.dirname(p))
  for p in __import__("glob").glob(os.path.join(REPO, "docs", "studies", "*", "table3_curves.png"))
)


@pytest.mark.parametrize("folder", TABLE3_FOLDERS)
def test_table3_curves_show_each_trial_once_and_name_its_own_status(folder, monkeypatch, tmp_path):
  """The published folders' Table 3 curves, recomputed from their CSVs: one legend entry per trial, and a cell
  whose verdict is not the shown trial's status says which trial it shows."""
  from lamb_lars.study.publishing import provenance, publish
  from lamb_lars.study.report import plots, report

  seen = {}
  real = plots.training_curves

  def capture(out_dir, name, curves, *a, **k):
    seen[name] = dict(curves)
    return real(out_dir, name, curves, *a, **k)

  monkeypatch.setattr(plots, "training_curves", capture)
  d = os.path.join(REPO, "docs", "studies", folder)
  manifest = json.load(open(os.path.join(d, "manifest.json"), encoding="utf-8"))
  trials = publish.load_csvs(d)
  report.write_report(trials, str(tmp_path), provenance.spec_from_json(manifest["report_spec"]), figures=False)
  curves = seen["table3_curves.png"]
  assert len({id(c) for c in curves.values()}) == len(curves), list(curves)
  status = {id(t.curve): t.status for t in trials if t.curve}
  for label, curve in curves.items():
    if label.split(": ", 1)[1].startswith("diverge"):
      assert status[id(curve)] == "diverged" or f"(shown: a {status[id(curve)]} trial)" in label, label


# --- 10. Fidelity: the paper configs read the data as the authors' input stream does. --------------------------

PAPER = sorted(
  n[:-3]
  for n in os.listdir(os.path.join(REPO, "lamb_lars", "proj", "you2020", "configs"))
  if n.endswith(".py") and n not in ("__init__.py", "common.py", "mnist_table3_paper.py")
)


@pytest.mark.parametrize("name", PAPER)
def test_paper_configs_take_the_authors_data_order(name):
  """``.repeat().shuffle(60000).batch(B, drop_remainder=True)``: batches straddle epochs, no image is dropped."""
  import importlib
  from lamb_lars.train import validate

  config = importlib.import_module(f"lamb_lars.proj.you2020.configs.{name}").get_config()
  assert config.data_order == "examples"
  assert validate.validate(config, 1).total_steps == config.num_train_steps
