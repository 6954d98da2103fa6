"""Branching from a reference run (Merrill et al. 2025, arXiv:2505.23971): ``python -m lamb_lars.study branch``.

A branching study config (e.g. lamb_lars/configs/studies/mnist_branching.py) holds, besides the usual sections, a
``branching`` section (lamb_lars/configs/studies/common.py) and two kinds of sub-sweeps (sweep.py):

* one *reference* sub-sweep (role ``baseline``, one trial): the run the branches start from. It must save a
  checkpoint at or just after every branch point and keep it to its end (``checkpoint_every_*``,
  ``keep_checkpoints``);
* *branch* sub-sweeps (role ``branch``): their own fixed keys and a grid over ``batch_size`` (which must hold the
  reference's batch B0: that branch is the reference's own continuation, the pair every other batch is compared
  with) and ``seed`` (the branch seeds, the replicates: seed s runs at every batch from the same checkpoint).

``branch`` runs the study through the ordinary runner (runner.py: store, executors, resume) in two steps:

1. the reference alone, recorded as the study's baseline trial, in ``<workdir>/runs/reference-…``;
2. the whole study, each branch sub-sweep completed (:func:`branch_sweeps`) with ``init_from_dir`` = the
   reference's run dir, ``data_order='examples'``, the LR rule and multiplier (the branch trains at the constant
   LR multiplier·rule(B/B0)·η_ref(t)), Δ as ``num_epochs`` = Δ/N, and the branch point as the first grid key,
   ``init_from_examples``: the examples the reference had seen at its checkpoint at or after the point.

Re-running the command resumes both steps: the reference trains once and every branch is recorded once. What a
config can get wrong — a branch point with no checkpoint kept, an unknown rule, a Δ that a branch batch does not
divide (each branch must see exactly Δ examples), B0 missing from the batches — is one sentence before anything
runs (:func:`prepare`).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional, Sequence

import ml_collections

from lamb_lars.common import durations, io_utils
from lamb_lars.study.running import runner, sections, store, sweep, trial_checks
from lamb_lars.study.running import workdir as wd

RULES = ("linear", "sqrt", "none")
LOSSES = ("validation_loss", "eval_loss")
POINT_KEY = "init_from_examples"  # the grid key of the branch point (the reference's examples seen)
_TOL = 1e-9


def subsweeps(study: ml_collections.ConfigDict) -> tuple[dict, list[dict]]:
  """(the reference sub-sweep, the branch sub-sweeps) of a branching study; ValueError when it is not one."""
  all_ = [dict(s) for s in study.get("sweeps") or ()]
  refs = [s for s in all_ if s.get("role") == "baseline"]
  branches = [s for s in all_ if s.get("role") == "branch"]
  if len(refs) != 1 or not branches or len(refs) + len(branches) != len(all_):
    raise ValueError(
      "a branching study has exactly one reference sub-sweep (role 'baseline') and at least one "
      f"branch sub-sweep (role 'branch'), nothing else; this one has roles "
      f"{[s.get('role', 'search') for s in all_]}."
    )
  return refs[0], branches


def with_sweeps(study: ml_collections.ConfigDict, sweeps: Sequence[Mapping]) -> ml_collections.ConfigDict:
  """A copy of ``study`` whose sub-sweeps are ``sweeps``."""
  c = study.copy_and_resolve_references()
  with c.unlocked():
    c.sweeps = tuple(dict(s) for s in sweeps)
  return c


def num_train(study: ml_collections.ConfigDict, ref: sweep.TrialSpec) -> int:
  """N, the reference's training examples: ``analysis.num_train`` (the report's epochs use it too), checked
  against the reference's dataset when that is on this machine."""
  from lamb_lars.input_pipeline import DatasetNotFoundError  # noqa: PLC0415
  from lamb_lars.train.validate import dataset_info  # noqa: PLC0415

  n = int(sections.section(study, "analysis")["num_train"])
  try:
    actual = int(dataset_info(ref.config).num_train)
  except DatasetNotFoundError:
    return n
  if actual != n:
    raise ValueError(
      f"analysis.num_train={n}, but the reference trains on {actual} examples (its dataset after "
      f"validation_split); set analysis.num_train={actual}."
    )
  return n


def _check_settings(study: ml_collections.ConfigDict, b0: int, n: int) -> dict[str, Any]:
  """The ``branching`` section and the branch sub-sweeps, checked against each other (one sentence each)."""
  b = sections.section(study, "branching")
  if b["lr_rule"] not in RULES:
    raise ValueError(f"branching.lr_rule={b['lr_rule']!r} is not one of {RULES}.")
  if b["loss"] not in LOSSES or not float(b["epsilon"]) > 0 or not float(b["lr_multiplier"]) >= 0:
    raise ValueError(
      f"branching: loss must be one of {LOSSES}, epsilon > 0 and lr_multiplier ≥ 0; got "
      f"{b['loss']!r}, {b['epsilon']!r}, {b['lr_multiplier']!r}."
    )
  if not b["points_epochs"] or any(not float(p) > 0 for p in b["points_epochs"]):
    raise ValueError(f"branching.points_epochs must be positive epochs of the reference; got {b['points_epochs']!r}.")
  delta = int(b["delta_examples"])
  exact = lambda x: durations.to_steps(delta / n, "epochs", num_train=n, batch_size=x) * x == delta  # Δ/N epochs
  for s in subsweeps(study)[1]:
    grid = dict(s.get("grid") or {})
    if s.get("search") or POINT_KEY in grid or POINT_KEY in dict(s.get("fixed") or {}):
      raise ValueError(
        f"branch sub-sweep {s.get('name')!r}: no search and no {POINT_KEY!r} (the branch points "
        "come from branching.points_epochs)."
      )
    batches = [int(x) for x in grid.get("batch_size", ())]
    if b0 not in batches or "seed" not in grid:
      raise ValueError(
        f"branch sub-sweep {s.get('name')!r} needs a grid over 'seed' and over 'batch_size' that "
        f"holds the reference's batch {b0} (its own continuation); it has {sorted(grid)}, batches "
        f"{batches}."
      )
    bad = [x for x in batches if delta <= 0 or delta % x or not exact(x)]
    if bad:
      raise ValueError(
        f"branching.delta_examples={delta} must be a positive multiple of every branch batch, so "
        f"that each branch trains exactly Δ examples; it is not one of {bad}."
      )
  return b


def checkpoint_examples(study: ml_collections.ConfigDict, ref: sweep.TrialSpec, n: int) -> list[int]:
  """Per branch point (epochs of the reference): the examples the reference has seen at its first checkpoint at or
  after the point. ValueError (one sentence) when a point has no such checkpoint, or the reference does not keep
  it to its end (``keep_checkpoints``: the newest K are kept)."""
  from lamb_lars.train import run_plan  # noqa: PLC0415  (the trainer's plan: the reference's own step arithmetic)

  devices = trial_checks.trial_devices(ref.config, {**sections.section(study, "runner")["env"], **ref.env})
  plan = run_plan.make_plan(ref.config, num_train=n, num_devices=devices)
  every, total = plan.checkpoint_every_steps, plan.total_steps
  saves = list(range(every, total + 1, every)) if every > 0 else []
  saves += [total] if not saves or saves[-1] != total else []
  keep = int(ref.config.keep_checkpoints)
  out = []
  for p in sections.section(study, "branching")["points_epochs"]:
    step = next((s for s in saves if s >= float(p) * n / plan.batch_size - _TOL), None)
    if step is None:
      raise ValueError(
        f"branch point {p:g} epochs is past the reference's end ({total * plan.batch_size / n:g} "
        "epochs): no checkpoint to branch from."
      )
    if len(saves) - saves.index(step) > keep:
      raise ValueError(
        f"the reference keeps only its newest {keep} checkpoints, so its checkpoint at step {step} "
        f"(branch point {p:g} epochs) is gone by its end: set keep_checkpoints ≥ "
        f"{len(saves) - saves.index(step)} in the reference sub-sweep."
      )
    if step * plan.batch_size in out:
      raise ValueError(
        f"branch point {p:g} epochs falls on the same reference checkpoint (step {step}) as an "
        "earlier one; space the points by at least the reference's checkpoint cadence."
      )
    out.append(step * plan.batch_size)
  return out


def prepare(study: ml_collections.ConfigDict) -> tuple[sweep.TrialSpec, list[int]]:
  """Every check that needs no reference run: (the reference trial, its checkpoint per branch point, in
  examples). A mistake is one sentence (ValueError)."""
  ref_sweep, _ = subsweeps(study)
  if ref_sweep.get("search") or ref_sweep.get("grid"):
    raise ValueError(f"the reference sub-sweep {ref_sweep.get('name')!r} is one run: no grid and no search.")
  (ref,) = sweep.expand(with_sweeps(study, [ref_sweep]))
  n = num_train(study, ref)
  _check_settings(study, ref.batch_size, n)
  return ref, checkpoint_examples(study, ref, n)


def branch_sweeps(study: ml_collections.ConfigDict, ref_dir: str, examples: Sequence[int]) -> list[dict]:
  """The branch sub-sweeps completed (module docstring, step 2)."""
  b = sections.section(study, "branching")
  n = int(sections.section(study, "analysis")["num_train"])
  out = []
  for s in subsweeps(study)[1]:
    fixed = {
      **dict(s.get("fixed") or {}),
      "init_from_dir": ref_dir,
      "data_order": "examples",
      "init_from_lr_rule": b["lr_rule"],
      "init_from_lr_multiplier": float(b["lr_multiplier"]),
      "num_epochs": int(b["delta_examples"]) / n,
      "num_train_steps": -1,
    }
    out.append({**s, "fixed": fixed, "grid": {POINT_KEY: tuple(int(e) for e in examples), **dict(s["grid"])}})
  return out


def _reference_status(workdir: str, run_id: str) -> Optional[str]:
  con = wd.open_store(workdir)
  try:
    rows = store.runs(con, run_id=run_id)
  finally:
    con.close()
  return rows[0]["status"] if rows else None


def run_branching(
  study: ml_collections.ConfigDict,
  workdir: str,
  *,
  make_executor: Callable[[], Any] = lambda: None,
  num_workers: Optional[int] = None,
  command: Optional[str] = None,
  log: Callable[[str], None] = print,
  **kwargs,
) -> dict[str, int]:
  """Runs (or resumes) the reference, then every branch (module docstring); returns the count of runs per status.

  ``make_executor``: a fresh executor per step (None: the runner's local one); ``kwargs`` go to
  ``runner.run_study``. A reference that does not end ``done`` stops here with one sentence (ValueError)."""
  ref, examples = prepare(study)
  ref_sweep, _ = subsweeps(study)
  runner.run_study(
    with_sweeps(study, [ref_sweep]),
    workdir,
    executor=make_executor(),
    num_workers=num_workers,
    command=command,
    log=log,
    **kwargs,
  )
  status = _reference_status(workdir, ref.run_id)
  if status != "done":
    raise ValueError(
      f"the reference run {ref.run_id} ended {status!r}, so there is nothing to branch from; see "
      f"{wd.run_dir(workdir, ref.run_id)}/log.txt."
    )
  ref_dir = io_utils.abspath(wd.run_dir(workdir, ref.run_id))
  full = with_sweeps(study, [ref_sweep] + branch_sweeps(study, ref_dir, examples))
  log(f"study {study.name}: reference {ref.run_id} done; {len(examples)} branch points × the branch grid")
  return runner.run_study(full, workdir, executor=make_executor(), num_workers=num_workers, log=log, **kwargs)


def is_branching(study: ml_collections.ConfigDict) -> bool:
  """Whether ``study`` has branch sub-sweeps (then only ``branch`` runs it)."""
  return any(dict(s).get("role") == "branch" for s in study.get("sweeps") or ())
