"""Bad inputs and faults a hostile but fair user meets: each is refused with one sentence (exit status 2 on the
command line), and nothing is written or lost. Most cases run in-process through the one validator
(lamb_lars/train/validate.py) and the small helpers; a few run train.py or the study CLI end to end."""

from __future__ import annotations

import glob
import json
import os
import shutil
import sqlite3
import subprocess
import sys

import numpy as np
import pytest

from lamb_lars.configs import mnist_lenet
from lamb_lars.configs.studies import smoke
from lamb_lars.train import checkpoint, metric_writers, run_identity, validate
from lamb_lars.common import cli_errors, io_utils, workdir_lock
from lamb_lars.train.run_plan import ConfigError
from lamb_lars.common import run_files
from lamb_lars.study.publishing import publish
from lamb_lars.study.running import runner, search_log, sections, store as st, sweep
from lamb_lars.study.running.driver import Active, Driver, ingest_run_dir
from lamb_lars.study.running import workdir as wd

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = {**{k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}, "PYTHONPATH": REPO}


def tiny_config(**overrides):
  """LeNet-5 on 256 synthetic 28×28 examples: a few steps compile and run in seconds."""
  cfg = mnist_lenet.get_config()
  cfg.dataset = "synthetic"
  cfg.synthetic.num_train, cfg.synthetic.num_eval = 256, 64
  cfg.batch_size, cfg.eval_batch_size = 32, 64
  cfg.num_train_steps = 6
  cfg.eval_every_steps = cfg.checkpoint_every_steps = 2
  cfg.keep_checkpoints = 3
  cfg.progress = False
  cfg.update_from_flattened_dict(overrides)  # dotted keys, e.g. {"optimizer.name": "lars"}
  return cfg


def one_sentence(msg: str) -> bool:
  return "\n" not in msg.strip() and "Traceback" not in msg and msg.strip()[-1] in ".?"


def files(path) -> dict:
  """Every file under ``path`` with its bytes (nothing written, nothing lost)."""
  out = {}
  for p in glob.glob(os.path.join(str(path), "**"), recursive=True, include_hidden=True):
    if os.path.isfile(p):
      with open(p, "rb") as f:
        out[os.path.relpath(p, str(path))] = f.read()
  return out


# --- 1. Numeric bounds and the data (issue items 2 and 6): the validator train.py and the study runner share. ------

VALIDATOR_CASES = [
  ({"num_classes": 5}, "config.num_classes=5 but dataset 'synthetic' has 10 classes"),
  ({"optimizer.learning_rate": float("inf")}, "learning_rate=inf must be a finite number > 0"),
  ({"optimizer.learning_rate": float("nan")}, "learning_rate=nan must be a finite number > 0"),
  ({"optimizer.learning_rate": 0.0}, "learning_rate=0.0 must be a finite number > 0"),
  ({"bn.momentum": 1.5}, "config.bn.momentum=1.5 must be in [0, 1)"),
  ({"bn.momentum": 1.0}, "config.bn.momentum=1.0 must be in [0, 1)"),
  ({"bn.epsilon": -1.0}, "config.bn.epsilon=-1.0 must be a finite number > 0"),
  ({"bn.epsilon": 0.0}, "config.bn.epsilon=0.0 must be a finite number > 0"),
  ({"optimizer.schedule.warmup_steps": 7}, "the warmup (7 steps) is longer than training (6 steps)"),
  ({"keep_checkpoints": 0}, "config.keep_checkpoints=0 must be an integer ≥ 1"),
  ({"num_microbatches": 0}, "config.num_microbatches=0 must be an integer ≥ 1"),
  ({"num_train_steps": 10**10}, "the run has 10,000,000,000 steps"),
  ({"model": "resnet9000"}, "config.model='resnet9000' is not one of lenet5"),
  ({"synthetic.image_shape": (8, 8, 1)}, "needs images of at least 12×12"),
  ({"eval_batch_size": 0}, "config.eval_batch_size=0 must be an integer ≥ 1"),
  ({"microbatch_loop": "rolled"}, "config.microbatch_loop='rolled' is not one of 'scan', 'unrolled', 'host'"),
  ({"microbatch_loop": "host", "parallelism": "pmap"}, "microbatch_loop='host' drives the micro-batches of the jit"),
]


@pytest.mark.parametrize("overrides,expected", VALIDATOR_CASES, ids=[str(c[0]) for c in VALIDATOR_CASES])
def test_validator_refuses_in_one_sentence(overrides, expected):
  cfg = tiny_config(**overrides)
  with pytest.raises(ConfigError) as e:
    validate.validate(cfg, 1)
  assert expected in str(e.value) and one_sentence(str(e.value)), str(e.value)


@pytest.mark.parametrize(
  "overrides",
  [
    {},
    {"optimizer.schedule.warmup_steps": 7, "optimizer.schedule.allow_long_warmup": True},
    {"optimizer.schedule.warmup_steps": 6},
    {"bn.momentum": 0.0},
  ],
)
def test_validator_accepts_what_can_be_right(overrides):
  cfg = tiny_config(**overrides)
  assert validate.validate(cfg, 1).total_steps == 6


@pytest.mark.parametrize(
  "overrides,expected",
  [
    ({"train_examples": -5}, "config.train_examples=-5 must be an integer ≥ 0"),
    ({"synthetic.num_train": 0}, "config.synthetic.num_train=0 must be ≥ 1"),
  ],
)
def test_a_value_that_cannot_be_right_is_named_before_the_data_is_read(overrides, expected):
  """The trainer reads the dataset's sizes first (validate.dataset_info): a value out of its own bounds is named as
  such there, not as a mismatch with the data ("-5 is larger than the 1257 training examples", "[0, 0)")."""
  with pytest.raises(ConfigError) as e:
    validate.dataset_info(tiny_config(**overrides))
  assert expected in str(e.value) and one_sentence(str(e.value)), str(e.value)


def test_the_lr_table_is_checked_before_it_is_allocated(monkeypatch):
  """1e10 steps are refused by the plan check, before ``lr_table.tabulate`` could allocate 80 GB."""
  from lamb_lars.optim import lr_table

  monkeypatch.setattr(lr_table, "tabulate", lambda *a, **k: pytest.fail("tabulated an absurd LR table"))
  cfg = tiny_config(num_train_steps=10**10)
  with pytest.raises(ConfigError, match="host LR table"):
    validate.validate(cfg, [None])


# --- 2. The run identity check (item 1). ------------------------------------------------------------------------

IDENTITY_CASES = [
  ({"batch_size": 64}, ["batch_size"]),
  ({"optimizer.name": "lamb", "optimizer.learning_rate": 0.01}, ["optimizer.learning_rate", "optimizer.name"]),
  ({"progress": True, "eval_every_steps": 3, "checkpoint_every_steps": 3, "keep_checkpoints": 5}, []),
]


@pytest.mark.parametrize("changes,keys", IDENTITY_CASES, ids=[str(c[0]) for c in IDENTITY_CASES])
def test_run_identity_names_the_changed_keys(tmp_path, changes, keys):
  run_identity.record(tiny_config(), str(tmp_path))
  before = files(tmp_path)
  changed = tiny_config(**changes)
  assert run_identity.differing_keys(run_identity.recorded_config(str(tmp_path)), changed) == keys
  if keys:
    with pytest.raises(ConfigError) as e:
      run_identity.check(changed, str(tmp_path))
    assert one_sentence(str(e.value)) and ", ".join(keys) in str(e.value) and "new --workdir" in str(e.value)
  else:
    run_identity.check(changed, str(tmp_path))
  assert files(tmp_path) == before


def test_a_key_added_by_an_upgrade_is_not_a_change(tmp_path):
  record = json.loads(tiny_config().to_json_best_effort())
  del record["optimizer"]["schedule"]["allow_long_warmup"]
  io_utils.write_json_atomic(os.path.join(tmp_path, run_identity.CONFIG_FILE), record)
  run_identity.check(tiny_config(), str(tmp_path))


# --- 3. Workdir locks (item 3). --------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.e2e
def test_workdir_lock_is_exclusive_reentrant_and_survives_a_dead_holder(tmp_path):
  path = os.path.join(tmp_path, workdir_lock.TRAIN_LOCK)
  with open(path, "w") as f:
    f.write("999999999\n")  # a PID file left by a dead process: its flock died with it
  with workdir_lock.hold(str(tmp_path)):
    assert open(path).read().strip() == str(os.getpid())
    with workdir_lock.hold(str(tmp_path)):  # re-entrant: run_one holds it and train_and_evaluate asks again
      pass
    before = files(tmp_path)
    out = subprocess.run(
      [
        sys.executable,
        "train.py",
        "--config=lamb_lars/configs/mnist_lenet.py",
        "--config.dataset=synthetic",
        f"--workdir={tmp_path}",
      ],
      cwd=REPO,
      env=ENV,
      capture_output=True,
      text=True,
      timeout=120,
    )
    last = out.stderr.strip().splitlines()[-1]
    assert out.returncode == 2 and f"in use by a training run (PID {os.getpid()})" in last and one_sentence(last)
    assert files(tmp_path) == before
  code = "import sys; from lamb_lars.common import workdir_lock as w; w.acquire(sys.argv[1])"
  out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], env=ENV, capture_output=True, text=True)
  assert out.returncode == 0, out  # released


@pytest.mark.slow
@pytest.mark.e2e
def test_second_study_runner_is_refused_before_it_writes(tmp_path):
  study = smoke.get_config()
  workdir = str(tmp_path / "study")
  with workdir_lock.hold(workdir, workdir_lock.STUDY_LOCK, what="a study runner"):
    before = files(workdir)
    # The lock is per process and re-entrant, so the second runner is another process.
    code = (
      "import sys; sys.path.insert(0, sys.argv[2]); from lamb_lars.configs.studies import smoke\n"
      "from lamb_lars.study.running import runner; from lamb_lars.common import workdir_lock as w\n"
      "try:\n  runner.run_study(smoke.get_config(), sys.argv[1])\n"
      "except w.WorkdirLocked as e:\n  print(e); sys.exit(2)"
    )
    out = subprocess.run([sys.executable, "-c", code, workdir, REPO], env=ENV, capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 2 and "in use by a study runner" in out.stdout and one_sentence(out.stdout), out
    assert files(workdir) == before
  del study


def test_duplicated_decisions_are_impossible_and_a_damaged_log_is_repaired(tmp_path):
  con = st.open_store(str(tmp_path / "s.sqlite"))
  assert st.log_decision(con, "c", "r1", 1, 0.5, False)
  assert not st.log_decision(con, "c", "r1", 1, 0.5, True)  # a second runner's report of the same epoch
  assert len(st.decisions(con)) == 1
  # A store damaged before the fix: two runners logged the same reports, one deciding differently.
  study = smoke.get_config()
  specs = sweep.expand(study)
  cell = next(t.cell for t in specs if t.searched)
  ids = [t.run_id for t in specs if t.cell == cell]
  runner.register(con, study, specs)
  rows = [(cell, ids[0], 1, 0.9, 0), (cell, ids[1], 1, 0.8, 0), (cell, ids[1], 1, 0.8, 1), (cell, ids[2], 1, 0.1, 1)]
  con.executemany("INSERT INTO decisions(cell, run_id, step, value, prune) VALUES (?, ?, ?, ?, ?)", rows)
  lines = []
  cfg = sections.section(study, "search")
  search_log.rebuild_searches(con, specs, cfg, lines.append)
  assert len(lines) == 1 and "removed 1 duplicated decision" in lines[0] and one_sentence(lines[0])
  assert len(st.decisions(con)) == 4  # the 1 from above + 3: the later duplicate is gone
  search_log.rebuild_searches(con, specs, cfg, lines.append)  # repaired: replays cleanly now
  assert len(lines) == 1
  con.close()


# --- 4. Checkpoint fallback (item 4). ---------------------------------------------------------------------------


def _truncate(step_dir):
  data = [p for p in glob.glob(os.path.join(step_dir, "state", "**", "d", "*"), recursive=True) if os.path.isfile(p)]
  biggest = max(data, key=os.path.getsize)
  with open(biggest, "r+b") as f:
    f.truncate(os.path.getsize(biggest) // 2)


def _empty_state(step_dir):
  shutil.rmtree(os.path.join(step_dir, "state"))
  os.makedirs(os.path.join(step_dir, "state"))


def _garble_meta(step_dir):
  with open(os.path.join(step_dir, "meta", "metadata"), "w") as f:
    f.write("})>.")


CORRUPTIONS = {"truncated data": _truncate, "missing state": _empty_state, "garbled meta": _garble_meta}


@pytest.mark.parametrize("how", list(CORRUPTIONS))
def test_a_damaged_newest_checkpoint_falls_back_to_the_previous_one(tmp_path, how):
  state = {"w": np.arange(64, dtype=np.float32).reshape(8, 8), "b": np.ones(3, np.float32)}
  ck = checkpoint.Checkpointer(str(tmp_path), keep=3)
  for step in (1, 2, 3):
    ck.save(step, {k: v * step for k, v in state.items()}, {"step": step})
  ck.close()
  CORRUPTIONS[how](os.path.join(tmp_path, "checkpoints", "3"))
  ck = checkpoint.Checkpointer(str(tmp_path), keep=3)
  lines = []
  restored, meta = ck.restore_newest_intact(state, log=lines.append)
  assert meta == {"step": 2}
  for k in state:
    np.testing.assert_array_equal(np.asarray(restored[k]), state[k] * 2)  # bit-exact: step 2's arrays
  assert len(lines) == 1 and "step 3 does not restore" in lines[0] and "resuming from step 2" in lines[0]
  moved = os.listdir(os.path.join(tmp_path, checkpoint.QUARANTINE_DIR))
  assert len(moved) == 1 and moved[0].startswith("3-")  # renamed, not deleted
  assert sorted(os.listdir(os.path.join(tmp_path, "checkpoints"))) == ["1", "2"]
  ck.close()


def test_no_restorable_checkpoint_is_one_sentence_and_moves_nothing(tmp_path):
  ck = checkpoint.Checkpointer(str(tmp_path), keep=2)
  ck.save(1, {"w": np.zeros(4, np.float32)}, {})
  ck.close()
  _garble_meta(os.path.join(tmp_path, "checkpoints", "1"))
  before = files(tmp_path)
  with pytest.raises(checkpoint.CheckpointError) as e:
    checkpoint.Checkpointer(str(tmp_path), keep=2).restore_newest_intact({"w": np.zeros(4, np.float32)})
  assert one_sentence(str(e.value)) and "no checkpoint under" in str(e.value)
  assert files(tmp_path) == before


@pytest.mark.slow
@pytest.mark.e2e
def test_training_resumes_past_a_truncated_checkpoint_exactly_as_uninterrupted(tmp_path):
  from lamb_lars.train.trainer import train_and_evaluate

  timing = ("wall_time", "compile_time", "examples_per_sec", "step_time", "train_time")

  def rows(workdir):
    return [{k: v for k, v in r.items() if k not in timing} for r in io_utils.read_jsonl(f"{workdir}/metrics.jsonl")]

  ref = str(tmp_path / "ref")
  train_and_evaluate(tiny_config(), ref)
  resumed = str(tmp_path / "resumed")
  shutil.copytree(ref, resumed)
  os.remove(os.path.join(resumed, "result.json"))
  _truncate(os.path.join(resumed, "checkpoints", "6"))
  result = train_and_evaluate(tiny_config(), resumed)
  assert result["status"] == "done" and os.listdir(os.path.join(resumed, checkpoint.QUARANTINE_DIR))
  assert rows(resumed) == rows(ref) and len(rows(ref)) == 3
  # The finished run re-run with another batch size: refused in one sentence, nothing changed (issue item 1).
  before = files(ref)
  with pytest.raises(ConfigError) as e:
    train_and_evaluate(tiny_config(batch_size=64), ref)
  assert "different config (batch_size)" in str(e.value) and one_sentence(str(e.value))
  assert files(ref) == before


# --- 5. Studies: every trial validated before any runs, failures counted (item 5), the prune race (item 9). -----


@pytest.mark.slow
@pytest.mark.e2e
def test_study_validates_every_trial_before_launching_any(tmp_path):
  study = smoke.get_config()
  study.base.model = "resnet9000"
  workdir = str(tmp_path / "study")
  with pytest.raises(ValueError) as e:
    runner.run_study(study, workdir, log=lambda s: None)
  assert "trial " in str(e.value) and "resnet9000" in str(e.value) and one_sentence(str(e.value))
  assert not os.path.exists(workdir)


def test_num_workers_zero_is_refused():
  with pytest.raises(ValueError, match="must be an integer ≥ 1"):
    runner.make_executor(smoke.get_config(), 0)


def test_failed_trials_give_exit_status_1_and_their_lines(tmp_path, capsys):
  from lamb_lars.study import __main__ as cli

  study = smoke.get_config()
  specs = sweep.expand(study)
  wd.save_study_config(study, str(tmp_path))
  con = st.open_store(wd.store_path(str(tmp_path)))
  runner.register(con, study, specs)
  st.set_status(con, specs[0].run_id, "failed", error="Traceback (most recent call last):\n  ...\nOSError: disk")
  st.set_status(con, specs[1].run_id, "failed", error="ValueError: bad thing\nmore")
  con.close()
  with pytest.raises(SystemExit) as e:
    cli._exit_failed(str(tmp_path), study.name)  # noqa: SLF001
  err = capsys.readouterr().err
  assert e.value.code == 1 and "2 trial(s) failed" in err
  assert f"{specs[0].run_id}: OSError: disk" in err and f"{specs[1].run_id}: ValueError: bad thing" in err


class _Handle:
  killed = False

  def kill(self):
    self.killed = True


def test_a_pruned_trial_keeps_no_eval_past_its_prune_point(tmp_path):
  study = smoke.get_config()
  specs = sweep.expand(study)
  cell_specs = [t for t in specs if t.searched]
  con = st.open_store(wd.store_path(str(tmp_path)))
  runner.register(con, study, specs)
  cfg = sections.section(study, "search")
  searches = search_log.rebuild_searches(con, specs, cfg)
  for t, v in zip(cell_specs[:3], (0.9, 0.8, 0.7)):
    searches[t.cell].report(t.run_id, 1, v)
  slow = cell_specs[3]
  rdir = wd.run_dir(str(tmp_path), slow.run_id)
  os.makedirs(rdir)
  rows = [
    {"step": 16, "epoch": 1.0, "validation_accuracy": 0.1},
    {"step": 32, "epoch": 2.0, "validation_accuracy": 0.2},
  ]
  with open(os.path.join(rdir, "metrics.jsonl"), "w") as f:
    f.writelines(json.dumps(r) + "\n" for r in rows)  # both rows arrived in one poll
  driver = Driver(study, str(tmp_path), con, None, searches, cfg, sections.section(study, "runner"), print)
  active = Active(slow, _Handle(), 0.0, run_files.MetricsTail(rdir))
  assert driver.consider(active, driver.ingest(active), running=True) and active.handle.killed
  assert [r["step"] for r in st.evals(con, slow.run_id)] == [16]
  con.close()


# --- 6. One sentence for every command-line mistake (item 7). --------------------------------------------------


def _exc(fn):
  try:
    fn()
  except BaseException as e:  # noqa: BLE001
    return e
  raise AssertionError("no exception")


def _locked_key():
  cfg = tiny_config()
  cfg.lock()
  return cfg.optimizr


def _bad_store(tmp_path):
  path = tmp_path / "study.sqlite"
  path.write_bytes(b"this is not a database" * 100)
  return lambda: st.open_store(str(path))


def test_every_mistake_is_one_sentence(tmp_path):
  a_file = tmp_path / "a_file"
  a_file.write_text("x")
  cases = [
    (_exc(_locked_key), "did you mean 'optimizer'?"),
    (_exc(lambda: compile("x = (", "cfg.py", "exec")), "the config file cfg.py does not parse"),
    (AttributeError("module 'config_config' has no attribute 'get_config'"), "defines no get_config()"),
    (
      OSError(
        "Configuration is not available because of an earlier failure to load: Failed loading config file "
        "config_config\n  Attempted [Relative path]:\n    c.py\n      [Errno 2] No such file or directory: "
        "'c.py'"
      ),
      "the config file could not be loaded ([Errno 2]",
    ),
    (_exc(lambda: os.makedirs(str(a_file))), "cannot write"),
    (OSError(28, "No space left on device"), "No space left on device"),
    (_exc(_bad_store(tmp_path)), "the study store cannot be read"),
    (workdir_lock.WorkdirLocked("w is in use by a training run (PID 7); wait."), "PID 7"),
    (_exc(lambda: validate.validate(tiny_config(validation_split=300), 1)), "validation_split"),
  ]
  for exc, expected in cases:
    msg = cli_errors.sentence(exc)
    assert msg is not None and expected in msg and one_sentence(msg), (exc, msg)
  assert cli_errors.sentence(ZeroDivisionError("a bug")) is None  # bugs keep their traceback
  assert cli_errors.sentence(ValueError("inside training"), value_errors=False) is None


def test_truncated_result_json_is_one_sentence(tmp_path):
  from lamb_lars.train import trainer

  (tmp_path / "result.json").write_text('{"status": "do')
  with pytest.raises(ConfigError) as e:
    trainer.recorded_result(str(tmp_path))
  assert "result.json is damaged" in str(e.value) and one_sentence(str(e.value))
  con = st.open_store(str(tmp_path / "s.sqlite"))  # the study runner reads the same file
  with pytest.raises(ValueError) as e:
    ingest_run_dir(con, "r1", str(tmp_path))
  assert f"{tmp_path}/result.json is damaged" in str(e.value) and one_sentence(str(e.value))
  con.close()


def test_report_refuses_a_missing_store_and_an_out_file(tmp_path):
  wd.save_study_config(smoke.get_config(), str(tmp_path))
  before = files(tmp_path)
  with pytest.raises(ValueError, match="has no results store") as e:
    publish.publish(str(tmp_path))
  assert one_sentence(str(e.value)) and files(tmp_path) == before  # no empty store created
  st.open_store(wd.store_path(str(tmp_path))).close()
  (tmp_path / "out").write_text("x")
  with pytest.raises(ValueError, match="is a file") as e:
    publish.publish(str(tmp_path), str(tmp_path / "out"))
  assert one_sentence(str(e.value))


CLI_CASES = [
  (
    ["train.py", "--config=lamb_lars/configs/mnist_lenet.py", "--config.optimizr.name=lars"],
    "did you mean 'optimizer'?",
  ),
  (
    ["train.py", "--config=lamb_lars/configs/mnist_lenet.py", "--config.num_classes=5", "--config.dataset=synthetic"],
    "config.num_classes=5 but dataset 'synthetic' has 10 classes",
  ),
  (["train.py", "--config=lamb_lars/configs/nope.py"], "the config file lamb_lars/configs/nope.py does not exist"),
  (
    ["-m", "lamb_lars.study", "run", "--config=lamb_lars/configs/studies/smoke.py", "--config.base.model=resnet9000"],
    "is not one of lenet5",
  ),
]


@pytest.mark.slow
@pytest.mark.parametrize("argv,expected", CLI_CASES, ids=[a[-1] for a, _ in CLI_CASES])
def test_command_line_mistakes_exit_2_with_one_sentence(tmp_path, argv, expected):
  workdir = tmp_path / "w"
  out = subprocess.run(
    [sys.executable, *argv, f"--workdir={workdir}"], cwd=REPO, env=ENV, capture_output=True, text=True, timeout=120
  )
  assert out.returncode == 2, out.stderr
  last = out.stderr.strip().splitlines()[-1]
  assert last.startswith("error: ") and expected in last and one_sentence(last), out.stderr
  assert "Traceback" not in out.stderr
  assert not workdir.exists()  # nothing written


# --- 7. metrics.jsonl (item 8). --------------------------------------------------------------------------------


def test_read_jsonl_skips_and_reports_lines_that_are_not_objects(tmp_path):
  path = tmp_path / "m.jsonl"
  path.write_text('{"step": 1}\n123\n{"step": 2\n["x"]\n{"step": 3}\n')
  skipped = []
  assert io_utils.read_jsonl(str(path), lambda n, why: skipped.append(n)) == [{"step": 1}, {"step": 3}]
  assert skipped == [2, 3, 4]


METRICS_CASES = [  # (file, resume step, file afterwards, how many log lines)
  ('{"step": 2}\n{"step": 4}\n{"step": 6}\n', 4, '{"step": 2}\n{"step": 4}\n', 1),  # lost future dropped
  ('{"step": 2}\n{"step": 4}\n123', 4, '{"step": 2}\n{"step": 4}\n123\n', 2),  # `123` last: no block
  ('{"step": 2}\n{"ste\n{"step": 4}\n', 4, '{"step": 2}\n{"ste\n{"step": 4}\n', 1),  # corrupt middle kept
  ('{"step": 2}\n{"step": 4}\n{"step": 6, "x', 4, '{"step": 2}\n{"step": 4}\n', 1),  # torn last line
  ('{"step": 2}\n{"step": 4}\n', 4, '{"step": 2}\n{"step": 4}\n', 0),  # nothing to do
]


@pytest.mark.parametrize("text,resume,after,num_lines", METRICS_CASES)
def test_resume_keeps_every_valid_row_and_says_what_it_drops(tmp_path, text, resume, after, num_lines):
  path = tmp_path / "metrics.jsonl"
  path.write_text(text)
  lines = []
  metric_writers.keep_rows_until(str(path), resume, lines.append)
  assert path.read_text() == after and len(lines) == num_lines, lines
  assert all(one_sentence(ln) for ln in lines)


def test_a_malformed_eval_row_names_the_run(tmp_path):
  con = st.open_store(str(tmp_path / "s.sqlite"))
  st.upsert_run(con, "r7")
  with pytest.raises(ValueError) as e:
    st.add_evals(con, "r7", [{"step": "twelve"}])
  assert "run r7" in str(e.value) and "runs/r7/metrics.jsonl" in str(e.value) and one_sentence(str(e.value))
  con.close()


def test_a_damaged_store_is_one_sentence(tmp_path):
  with pytest.raises(sqlite3.DatabaseError) as e:
    _bad_store(tmp_path)()
  assert "study store cannot be read" in cli_errors.sentence(e.value)


# --- Issue 62: the last quiet cases, each exactly one line on stderr, exit status 2, no traceback. ----------------


def _train_py(tmp_path, *args, pythonpath: str = REPO):
  return subprocess.run(
    [sys.executable, "train.py", f"--workdir={tmp_path / 'w'}", *args],
    cwd=REPO,
    env={**ENV, "PYTHONPATH": pythonpath},
    capture_output=True,
    text=True,
    timeout=300,
  )


def _one_error_line(out, expected: str) -> None:
  lines = out.stderr.strip().splitlines()
  assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
  assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], out.stderr
  assert one_sentence(lines[0]), lines[0]


@pytest.mark.slow
def test_a_raising_dataset_loader_is_one_sentence_naming_it(tmp_path):
  (tmp_path / "my_loader.py").write_text("def load():\n  raise OSError('cannot open /data/digits.npz')\n")
  out = _train_py(
    tmp_path,
    "--config=lamb_lars/configs/mnist_lenet.py",
    "--config.dataset=my_loader:load",
    pythonpath=f"{REPO}:{tmp_path}",
  )
  _one_error_line(out, "config.dataset='my_loader:load' raised OSError: cannot open /data/digits.npz")


@pytest.mark.slow
def test_a_missing_tfds_dataset_is_our_sentence_alone(tmp_path):
  """A folder left by an unfinished ``tfds build`` makes tfds log a warning; the sentence comes alone."""
  (tmp_path / "data" / "mnist" / "3.0.1").mkdir(parents=True)
  out = _train_py(
    tmp_path,
    "--config=lamb_lars/configs/mnist_lenet.py",
    "--config.dataset=tfds:mnist",
    f"--config.data_dir={tmp_path / 'data'}",
  )
  _one_error_line(out, "No prepared TFDS dataset 'mnist'")


@pytest.mark.slow
def test_a_config_file_returning_none_is_our_sentence_alone(tmp_path):
  (tmp_path / "none.py").write_text("def get_config():\n  return None\n")
  out = _train_py(tmp_path, f"--config={tmp_path / 'none.py'}")
  _one_error_line(out, "get_config() returned None")


TINY_ARGS = [
  "--config=lamb_lars/configs/mnist_lenet.py",
  "--config.dataset=synthetic",
  "--config.synthetic.num_train=256",
  "--config.synthetic.num_eval=64",
  "--config.batch_size=32",
  "--config.num_train_steps=6",
  "--config.checkpoint_every_steps=2",
  "--config.eval_every_steps=2",
  "--config.keep_checkpoints=3",
]


@pytest.fixture
def small_tmpfs(tmp_path):
  """A 700 KB tmpfs (two LeNet checkpoints do not fit), remounted larger by ``grow()``; skipped where it cannot be
  mounted (not root, no mount namespace)."""
  where = tmp_path / "disk"
  where.mkdir()
  mount = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=700k", "tmpfs", str(where)], capture_output=True)
  if mount.returncode != 0:
    pytest.skip(f"cannot mount a small tmpfs here ({mount.stderr.decode().strip()[:80]}); a full disk needs one")
  try:
    yield where, lambda: subprocess.run(["mount", "-o", "remount,size=8m", str(where)], check=True)
  finally:
    subprocess.run(["umount", str(where)], capture_output=True)


@pytest.mark.slow
@pytest.mark.e2e
def test_a_full_disk_is_one_line_and_the_run_resumes_once_there_is_space(small_tmpfs):
  """orbax's background threads report a failed save with a traceback each (108–381 lines) and tensorboardX's
  atexit hook retries its flush; stderr holds our sentence alone, the noise goes to log.txt (when it fits)."""
  disk, grow = small_tmpfs
  args = [
    *TINY_ARGS,
    "--config.num_train_steps=20",
    "--config.checkpoint_every_steps=5",
    "--config.eval_every_steps=10",
  ]
  args = [a for a in args if not a.startswith(("--config.num_train_steps=6", "--config.checkpoint_every_steps=2"))]
  args = [a for a in args if a != "--config.eval_every_steps=2"]
  out = _train_py(disk, *args)
  _one_error_line(out, "No space left on device; free some space and re-run the same command to resume")
  grow()
  again = _train_py(disk, *args)
  assert again.returncode == 0 and again.stderr == "", again.stderr
  assert json.loads((disk / "w" / "result.json").read_text())["status"] == "done"


@pytest.mark.slow
@pytest.mark.e2e
def test_a_quarantined_checkpoint_leaves_stderr_empty_and_resumes(tmp_path):
  """A damaged newest checkpoint is moved aside with one line on stdout; orbax's tracebacks stay off stderr."""
  first = _train_py(tmp_path, *TINY_ARGS)
  assert first.returncode == 0, first.stderr
  os.remove(tmp_path / "w" / "result.json")
  _truncate(str(tmp_path / "w" / "checkpoints" / "6"))
  out = _train_py(tmp_path, *TINY_ARGS)
  assert out.returncode == 0 and out.stderr == "", out.stderr
  assert "Checkpoint at step 6 does not restore" in out.stdout and "done: step 6/6" in out.stdout
  assert os.listdir(tmp_path / "w" / checkpoint.QUARANTINE_DIR)
