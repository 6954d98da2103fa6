"""The results store of a batch-size study: one SQLite file in the study workdir.

Tables::

  runs(run_id TEXT PRIMARY KEY, study, config_json, params_json /*the swept values*/, batch_size, optimizer,
       variant, role, technique, cell, budget_epochs, status /*records.STATUSES*/, stopped, error, started,
       finished, wall_time, steps, final_json, seed INT, phase TEXT, replicate_of TEXT, promoted INT,
       space_json /*the search space of the trial's point*/)
  evals(run_id, step, epoch, examples, wall_time, metrics_json, PRIMARY KEY(run_id, step))
  decisions(seq INTEGER PRIMARY KEY AUTOINCREMENT, cell, run_id, step, value, prune)   /*the search's log*/
  notes(key TEXT PRIMARY KEY, value TEXT)   /*facts about the store itself, e.g. 'decisions_repaired'*/
  plan(seq INTEGER PRIMARY KEY AUTOINCREMENT, kind, cell, key, detail_json, UNIQUE(kind, cell, key))
       /*what the runner added after a cell's search: range extensions, promotions, replicates (phases.py)*/

Durability: WAL journal, ``synchronous=FULL``, and every write is its own committed transaction
(``BEGIN IMMEDIATE … COMMIT``), so a ``kill -9`` of any writer at any moment loses nothing already written; a
half-done transaction is rolled back by SQLite on the next open. Several processes may write at once (the busy
timeout makes them queue). Evals are keyed by (run_id, step) and written with INSERT OR REPLACE, so re-ingesting a
run's metrics file never duplicates rows.

A diverged run is a result, not an error (You et al. 2020, Table 3 has "diverge" cells): status ``diverged``. A run
stopped by the search is ``pruned``. ``decisions`` logs every report the search saw and what it decided, in order,
so a restarted runner can rebuild the search exactly (search.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import time
from typing import Any, Iterable, Iterator, Mapping, Optional, Sequence, Union

from lamb_lars.study.records import STATUSES, Trial

_ROW_KEYS = ("step", "epoch", "examples", "wall_time")

# Columns added after the first stores were written (open_store adds them to an older store).
_ADDED_COLUMNS = (
  ("seed", "INT"),
  ("phase", "TEXT"),
  ("replicate_of", "TEXT"),
  ("promoted", "INT DEFAULT 0"),
  ("space_json", "TEXT"),
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs(
  run_id TEXT PRIMARY KEY, study TEXT, config_json TEXT, params_json TEXT, batch_size INT, optimizer TEXT,
  variant TEXT, role TEXT, technique TEXT, cell TEXT, budget_epochs REAL, status TEXT NOT NULL DEFAULT 'pending',
  stopped TEXT, error TEXT, started REAL, finished REAL, wall_time REAL, steps INT, final_json TEXT);
CREATE TABLE IF NOT EXISTS plan(
  seq INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL, cell TEXT NOT NULL, key TEXT NOT NULL, detail_json TEXT,
  UNIQUE(kind, cell, key));
CREATE TABLE IF NOT EXISTS evals(
  run_id TEXT NOT NULL, step INT NOT NULL, epoch REAL, examples INT, wall_time REAL, metrics_json TEXT,
  PRIMARY KEY(run_id, step));
CREATE INDEX IF NOT EXISTS runs_by_study ON runs(study, batch_size);
CREATE TABLE IF NOT EXISTS notes(key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS decisions(
  seq INTEGER PRIMARY KEY AUTOINCREMENT, cell TEXT NOT NULL, run_id TEXT NOT NULL, step INT NOT NULL, value REAL,
  prune INT NOT NULL);
"""


def open_store(path: Union[str, os.PathLike]) -> sqlite3.Connection:
  """Opens (creating if needed) the store at ``path``; WAL mode, autocommit connection, rows as ``sqlite3.Row``."""
  path = os.fspath(path)
  if os.path.dirname(path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
  con = sqlite3.connect(path, timeout=60.0, isolation_level=None)
  con.row_factory = sqlite3.Row
  con.execute("PRAGMA journal_mode=WAL")
  con.execute("PRAGMA synchronous=FULL")
  con.execute("PRAGMA busy_timeout=60000")
  with _transaction(con):
    for stmt in _SCHEMA.strip().split(";"):
      if stmt.strip():
        con.execute(stmt)
    have = {r["name"] for r in con.execute("PRAGMA table_info(runs)")}
    for column, kind in _ADDED_COLUMNS:
      if column not in have:  # a store written before these columns existed
        con.execute(f"ALTER TABLE runs ADD COLUMN {column} {kind}")
  return con


@contextlib.contextmanager
def _transaction(con: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
  """One committed write transaction (taken eagerly, so concurrent writers queue instead of deadlocking)."""
  con.execute("BEGIN IMMEDIATE")
  try:
    yield con
  except BaseException:
    con.execute("ROLLBACK")
    raise
  con.execute("COMMIT")


def dumps(obj: Any) -> str:
  """The store's JSON: sorted keys; NaN/inf are kept (Python's json writes and reads them), other objects via str()."""
  return json.dumps(plain(obj), sort_keys=True, default=str)


def plain(obj: Any) -> Any:
  """ml_collections ConfigDict / numpy or jax values → plain Python, as the store keeps them (configs are compared
  in this form)."""
  if hasattr(obj, "to_dict"):
    obj = obj.to_dict()
  if isinstance(obj, Mapping):
    return {str(k): plain(v) for k, v in obj.items()}
  if isinstance(obj, (list, tuple)):
    return [plain(v) for v in obj]
  if hasattr(obj, "tolist") and not isinstance(obj, (str, bytes)):
    return obj.tolist()  # numpy / jax scalars and arrays
  return obj


def _loads(text: Optional[str]) -> Any:
  return None if text is None else json.loads(text)


def upsert_run(
  con: sqlite3.Connection,
  run_id: str,
  *,
  study: str = "",
  config: Any = None,
  params: Optional[Mapping[str, Any]] = None,
  batch_size: Optional[int] = None,
  optimizer: str = "",
  variant: str = "",
  role: str = "",
  technique: str = "",
  cell: str = "",
  budget_epochs: Optional[float] = None,
  status: Optional[str] = None,
  seed: Optional[int] = None,
  phase: str = "search",
  replicate_of: str = "",
  space: Optional[Mapping[str, Any]] = None,
) -> None:
  """Registers a run (status ``pending``) or updates its description; an existing status is kept unless given."""
  if status is not None and status not in STATUSES:
    raise ValueError(f"status must be one of {STATUSES}, got {status!r}")
  with _transaction(con):
    con.execute(
      "INSERT INTO runs(run_id, study, config_json, params_json, batch_size, optimizer, variant, role, technique, "
      "cell, budget_epochs, status) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(run_id) DO UPDATE SET "
      "study=excluded.study, config_json=excluded.config_json, params_json=excluded.params_json, "
      "batch_size=excluded.batch_size, optimizer=excluded.optimizer, variant=excluded.variant, "
      "role=excluded.role, technique=excluded.technique, cell=excluded.cell, "
      "budget_epochs=excluded.budget_epochs, status=COALESCE(?, runs.status)",
      (
        run_id,
        study,
        dumps(config or {}),
        dumps(params or {}),
        None if batch_size is None else int(batch_size),
        optimizer,
        variant,
        role,
        technique,
        cell,
        None if budget_epochs is None else float(budget_epochs),
        status or "pending",
        status,
      ),
    )
    con.execute(
      "UPDATE runs SET seed=?, phase=?, replicate_of=?, space_json=? WHERE run_id=?",
      (None if seed is None else int(seed), phase, replicate_of, dumps(space or {}), run_id),
    )


def set_status(
  con: sqlite3.Connection,
  run_id: str,
  status: str,
  *,
  error: Optional[str] = None,
  steps: Optional[int] = None,
  final: Optional[Mapping[str, Any]] = None,
  wall_time: Optional[float] = None,
  now: Optional[float] = None,
  stopped: Optional[str] = None,
) -> None:
  """Moves a run to ``status``. ``running`` stamps ``started`` (first time only) and clears ``finished``;
  ``done``/``diverged``/``failed`` stamp ``finished``. ``wall_time`` defaults to finished − started."""
  if status not in STATUSES:
    raise ValueError(f"status must be one of {STATUSES}, got {status!r}")
  now = time.time() if now is None else now
  with _transaction(con):
    if con.execute("SELECT 1 FROM runs WHERE run_id=?", (run_id,)).fetchone() is None:
      raise KeyError(f"unknown run {run_id!r}; call upsert_run first")
    if status == "running":
      con.execute(
        "UPDATE runs SET status=?, started=COALESCE(started, ?), finished=NULL, error=NULL WHERE run_id=?",
        (status, now, run_id),
      )
    elif status == "pending":
      con.execute("UPDATE runs SET status=? WHERE run_id=?", (status, run_id))
    else:
      con.execute(
        "UPDATE runs SET status=?, finished=?, error=?, stopped=?, "
        "wall_time=COALESCE(?, ? - started, wall_time) WHERE run_id=?",
        (status, now, error, stopped, wall_time, now, run_id),
      )
    if steps is not None:
      con.execute("UPDATE runs SET steps=? WHERE run_id=?", (int(steps), run_id))
    if final is not None:
      con.execute("UPDATE runs SET final_json=? WHERE run_id=?", (dumps(final), run_id))


def add_evals(con: sqlite3.Connection, run_id: str, rows: Iterable[Mapping[str, Any]]) -> int:
  """Writes eval rows (dicts with ``step`` and metrics) in one transaction; same (run_id, step) is replaced."""
  records = []
  for row in rows:
    try:
      metrics = {k: _number(v) for k, v in plain(row).items() if k not in _ROW_KEYS}
      epoch, examples, wall = (row.get(k) for k in ("epoch", "examples", "wall_time"))
      records.append(
        (
          run_id,
          int(row["step"]),
          None if epoch is None else float(epoch),
          None if examples is None else int(examples),
          None if wall is None else float(wall),
          dumps(metrics),
        )
      )
    except (AttributeError, KeyError, TypeError, ValueError) as e:
      raise ValueError(
        f"run {run_id}: an eval row of its metrics.jsonl is malformed ({type(e).__name__}: {e}; row "
        f"{str(row)[:120]}); fix or remove that line in runs/{run_id}/metrics.jsonl."
      ) from None
  if records:
    with _transaction(con):
      con.executemany(
        "INSERT OR REPLACE INTO evals(run_id, step, epoch, examples, wall_time, metrics_json) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        records,
      )
  return len(records)


def delete_evals_after(con: sqlite3.Connection, run_id: str, step: int) -> int:
  """Deletes a run's eval rows past ``step`` (a pruned trial's rows after its prune point); returns how many."""
  with _transaction(con):
    return con.execute("DELETE FROM evals WHERE run_id=? AND step>?", (run_id, int(step))).rowcount


def _number(v: Any) -> Any:
  """The trainer writes NaN/inf metrics as the text 'nan' / 'inf' (JSON has none); they come back as floats."""
  return float(v) if isinstance(v, str) and v.lower() in ("nan", "inf", "-inf", "infinity", "-infinity") else v


def _run_dict(r: sqlite3.Row) -> dict:
  d = dict(r)
  d["config"] = _loads(d.pop("config_json")) or {}
  d["params"] = _loads(d.pop("params_json")) or {}
  d["final"] = _loads(d.pop("final_json"))
  d["space"] = _loads(d.pop("space_json", None)) or {}
  return d


def runs(
  con: sqlite3.Connection,
  *,
  study: Optional[str] = None,
  status: Union[None, str, Sequence[str]] = None,
  run_id: Optional[str] = None,
) -> list[dict]:
  """Run records (config/params/final decoded), ordered by batch size then run_id; filters are ANDed."""
  given = {k: v for k, v in (("study", study), ("run_id", run_id)) if v is not None}
  where, args = [f"{k}=?" for k in given], list(given.values())
  if status is not None:
    statuses = (status,) if isinstance(status, str) else tuple(status)
    where.append(f"status IN ({','.join('?' * len(statuses))})")
    args.extend(statuses)
  sql = "SELECT * FROM runs" + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY batch_size, run_id"
  return [_run_dict(r) for r in con.execute(sql, args)]


def evals(con: sqlite3.Connection, run_id: str) -> list[dict]:
  """A run's eval rows sorted by step: ``{step, epoch, examples, wall_time, **metrics}``."""
  out = []
  for r in con.execute(
    "SELECT step, epoch, examples, wall_time, metrics_json FROM evals WHERE run_id=? ORDER BY step", (run_id,)
  ):
    row = {"step": r["step"], "epoch": r["epoch"], "examples": r["examples"], "wall_time": r["wall_time"]}
    row.update(_loads(r["metrics_json"]) or {})
    out.append(row)
  return out


def last_epochs(con: sqlite3.Connection) -> dict[str, float]:
  """Run id → the epoch of its last eval row (by step), in one query; runs without one (or whose last row has no
  epoch) are left out."""
  rows = con.execute(
    "SELECT e.run_id, e.epoch FROM evals e JOIN (SELECT run_id, MAX(step) AS step FROM evals GROUP BY run_id) m "
    "ON e.run_id = m.run_id AND e.step = m.step"
  )
  return {r["run_id"]: float(r["epoch"]) for r in rows if r["epoch"] is not None}


def trials(
  con: sqlite3.Connection, *, study: Optional[str] = None, status: Union[None, str, Sequence[str]] = None
) -> list[Trial]:
  """Every run (optionally of one study / status) as a ``records.Trial`` with its curve."""
  return [to_trial(d, evals(con, d["run_id"])) for d in runs(con, study=study, status=status)]


def to_trial(d: Mapping[str, Any], curve: Sequence[Mapping[str, Any]]) -> Trial:
  """A run record (``runs()`` row) and its eval rows as a ``records.Trial``."""
  return Trial(
    run_id=d["run_id"],
    batch_size=int(d["batch_size"] or 0),
    optimizer=d["optimizer"] or "",
    variant=d["variant"] or "original",
    role=d.get("role") or "search",
    technique=d.get("technique") or "",
    cell=d.get("cell") or "",
    params=d["params"],
    status=d["status"],
    stopped=d.get("stopped"),
    budget_epochs=d.get("budget_epochs"),
    curve=curve,
    error=d["error"],
    wall_time=d["wall_time"],
    seed=d.get("seed"),
    phase=d.get("phase") or "search",
    replicate_of=d.get("replicate_of") or "",
    promoted=bool(d.get("promoted")),
    space=d.get("space") or {},
  )


def log_decision(
  con: sqlite3.Connection, cell: str, run_id: str, step: int, value: Optional[float], prune: bool
) -> bool:
  """Appends one search report and its decision to the log (before the runner acts on it). A trial reports each
  epoch once, so a second report of the same (cell, run_id, step) is not written (False): the log never holds a
  duplicate, even if two runners shared a workdir."""
  with _transaction(con):
    cur = con.execute(
      "INSERT INTO decisions(cell, run_id, step, value, prune) SELECT ?, ?, ?, ?, ? WHERE NOT EXISTS "
      "(SELECT 1 FROM decisions WHERE cell=? AND run_id=? AND step=?)",
      (cell, run_id, int(step), None if value is None else float(value), int(bool(prune)), cell, run_id, int(step)),
    )
    return cur.rowcount == 1


def remove_duplicate_decisions(con: sqlite3.Connection) -> int:
  """Repairs a log that two runners wrote at once (before workdir locks): keeps the first report of each
  (cell, run_id, step) and deletes the later ones; returns how many were deleted. A repair is noted in the store
  (:func:`decisions_repaired`) for good."""
  with _transaction(con):
    cur = con.execute(
      "DELETE FROM decisions WHERE seq NOT IN (SELECT MIN(seq) FROM decisions GROUP BY cell, run_id, step)"
    )
    if cur.rowcount:
      con.execute("INSERT OR REPLACE INTO notes(key, value) VALUES ('decisions_repaired', ?)", (str(time.time()),))
    return cur.rowcount


def decisions_repaired(con: sqlite3.Connection) -> bool:
  """Whether :func:`remove_duplicate_decisions` ever removed anything from this store's log."""
  return con.execute("SELECT 1 FROM notes WHERE key='decisions_repaired'").fetchone() is not None


def promote(con: sqlite3.Connection, run_id: str) -> None:
  """Marks a pruned run as promoted and puts it back to ``pending``: it resumes from its checkpoint to its full
  budget and the search never prunes it again (phases.py: the minimum of full-budget trials per cell)."""
  with _transaction(con):
    con.execute("UPDATE runs SET promoted=1, status='pending' WHERE run_id=? AND status='pruned'", (run_id,))


def log_plan(con: sqlite3.Connection, kind: str, cell: str, key: str, detail: Mapping[str, Any]) -> bool:
  """Records one follow-up of a cell's search (``kind`` 'extend' | 'promote' | 'replicate') once; True when new."""
  with _transaction(con):
    cur = con.execute(
      "INSERT OR IGNORE INTO plan(kind, cell, key, detail_json) VALUES (?, ?, ?, ?)",
      (kind, cell, str(key), dumps(detail)),
    )
    return cur.rowcount > 0


def plan(con: sqlite3.Connection) -> list[dict]:
  """The follow-up log in the order it was written (``detail`` decoded)."""
  return [
    {**dict(r), "detail": _loads(r["detail_json"])}
    for r in con.execute("SELECT kind, cell, key, detail_json FROM plan ORDER BY seq")
  ]


def decisions(con: sqlite3.Connection) -> list[dict]:
  """The search log in the order it was written."""
  return [dict(r) for r in con.execute("SELECT cell, run_id, step, value, prune FROM decisions ORDER BY seq")]
