"""The edge rule of a cell's LR search and the range it moves to (lamb_lars/study/analysis/search_adequacy.py), the
choice on the validation split (selection.py), and an old store gaining the new columns."""

from __future__ import annotations

import sqlite3

import pytest

from lamb_lars.study.analysis import search_adequacy as A
from lamb_lars.study.running import store as st
from lamb_lars.study.records import Trial
from lamb_lars.study.analysis.selection import choose


def test_position_edge_and_shift_on_a_log_scale():
  assert A.position(0.01, 0.001, 0.1) == pytest.approx(0.5)
  # outer 10% of [1e-3, 1e-1] in log: below 10^-2.8 = 1.585e-3 or above 10^-1.2 = 6.31e-2
  assert A.edge(1.5e-3, 1e-3, 1e-1, 0.1) == "low" and A.edge(1.7e-3, 1e-3, 1e-1, 0.1) == ""
  assert A.edge(6.4e-2, 1e-3, 1e-1, 0.1) == "high" and A.edge(6.2e-2, 1e-3, 1e-1, 0.1) == ""
  # interior by position, but nothing tried above it: still an edge
  assert A.edge(0.05, 1e-3, 1e-1, 0.1, tried=[0.002, 0.01, 0.05]) == "high"
  assert A.edge(0.01, 1e-3, 1e-1, 0.1, tried=[0.002, 0.01, 0.05]) == ""
  assert A.shifted(1e-3, 1e-1, "low", 100.0) == pytest.approx((1e-5, 1e-3))
  assert A.shifted(1e-3, 1e-1, "high", 100.0) == pytest.approx((1e-1, 10.0))
  assert A.lr_range({"optimizer.learning_rate": ["log", 0.05, 5.0]}) == (0.05, 5.0)
  assert A.lr_range({"optimizer.learning_rate": ["linear", 0.05, 5.0]}) is None


def _trial(rid, lr, val, test, status="done", stopped=None, steps=(1, 2)):
  curve = [
    {"step": s, "epoch": float(s), "validation_accuracy": v, "eval_accuracy": t} for s, v, t in zip(steps, val, test)
  ]
  return Trial(
    rid,
    256,
    status=status,
    stopped=stopped,
    budget_epochs=float(steps[-1]),
    curve=curve,
    params={"learning_rate": lr},
    space={"optimizer.learning_rate": ["log", 0.01, 1.0]},
  )


def test_choice_uses_validation_and_the_adequacy_record():
  ts = [
    _trial("a", 0.02, [0.9, 0.95], [0.9, 0.99]),
    _trial("b", 0.9, [0.9, 0.97], [0.9, 0.96]),
    _trial("c", 0.1, [0.9, 0.99], [0.9, 0.90], status="pruned"),
  ]
  chosen = choose(ts)
  assert chosen.run_id == "b"  # best final validation among full-budget trials; 'a' is best on test
  a = A.adequacy("cell", ts, chosen, 0.1)
  assert (a.num_trials, a.num_full_budget, a.ranges, a.where) == (3, 2, ((0.01, 1.0),), "high edge")
  # steps-to-target cells: fewest steps for validation to reach the goal, then the best validation value
  fast = _trial("f", 0.3, [0.99, 0.99], [0.9, 0.9], stopped="target")
  slow = _trial("s", 0.2, [0.95, 0.992], [0.99, 0.99])
  assert choose([slow, fast], goal=0.99).run_id == "f" and choose([slow, fast], goal=0.999).run_id == "s"


def test_an_old_store_gains_the_new_columns(tmp_path):
  path = str(tmp_path / "old.sqlite")
  con = sqlite3.connect(path)
  con.execute(
    "CREATE TABLE runs(run_id TEXT PRIMARY KEY, study TEXT, config_json TEXT, params_json TEXT, "
    "batch_size INT, optimizer TEXT, variant TEXT, role TEXT, technique TEXT, cell TEXT, budget_epochs REAL, "
    "status TEXT NOT NULL DEFAULT 'pending', stopped TEXT, error TEXT, started REAL, finished REAL, "
    "wall_time REAL, steps INT, final_json TEXT)"
  )
  con.execute(
    "INSERT INTO runs(run_id, study, config_json, params_json, batch_size, status) "
    "VALUES ('r', 's', '{}', '{}', 256, 'done')"
  )
  con.commit()
  con.close()
  con = st.open_store(path)
  (t,) = st.trials(con)
  assert (t.seed, t.phase, t.replicate_of, t.promoted, dict(t.space)) == (None, "search", "", False, {})
  assert st.log_plan(con, "replicate", "c", "seed1", {"chosen": "r", "seed": 1})
  assert not st.log_plan(con, "replicate", "c", "seed1", {"chosen": "r", "seed": 1})  # recorded once
  assert [p["detail"] for p in st.plan(con)] == [{"chosen": "r", "seed": 1}]
  con.close()
