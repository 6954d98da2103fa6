"""The metaparameter search of one study cell, on Optuna (Akiba et al. 2019): quasi-random points and an
asynchronous successive-halving pruner (ASHA, Li et al. 2020), used through ask-and-tell beside our results store.

* **Points.** Optuna's ``QMCSampler`` (scrambled Sobol, seeded per cell) over the cell's space, e.g. log-LR over
  ≥ 2 decades and warmup epochs. Quasi-random search follows Bousquet et al. 2017 and Shallue et al. 2018. The
  points are drawn when the study is expanded, so run ids are known up front and a resumed study has the same
  trials.
* **Pruning.** Each trial reports its search metric (by default validation accuracy) at every evaluation, with the
  epoch as the step. Optuna's ``SuccessiveHalvingPruner`` (min resource r epochs, reduction factor η) stops a
  trial at rung k (epoch r·η^k) unless its value is in the top 1/η of the values its cell reached at that rung
  so far. The trials that survive every rung run the full budget. A rung at the end of a trial's epoch budget
  (e.g. epoch 30 of 30 for r = 10, η = 3) is reported and logged but not acted on: stopping the trial there saves
  nothing, and it ends ``done`` with its own result (driver.py; before 2026-12-02 it was recorded ``pruned``).
* **Resume.** The store is the system of record: every report and its decision is logged (``store.decisions``)
  before it is acted on, and a restarted runner replays the log, in order, into a fresh Optuna study. The pruner is
  deterministic, so the replay rebuilds its exact state.
* **Optuna storage.** The runner keeps each cell's Optuna study in Optuna's own RDB storage,
  ``sqlite:///<workdir>/optuna.db`` (``optuna_storage``; study name ``<study>/<cell>``), so ``optuna-dashboard
  sqlite:///<workdir>/optuna.db`` shows a running study and ``optuna.load_study`` reads every trial (user
  attribute ``run_id`` and its swept values; its searched values as Optuna ``params`` with the cell's
  distributions, so the dashboard plots them) with its intermediate values and state (running, complete, pruned;
  a diverged trial is failed). It is a mirror of the log: at every start the runner replays the log into a fresh
  in-memory study and replaces the stored one with it (``CellSearch.persist``), so a resumed study never counts a
  trial twice.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Mapping, Optional, Sequence

import optuna
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from lamb_lars.common import io_utils

optuna.logging.set_verbosity(optuna.logging.WARNING)


def distributions(space: Mapping[str, Sequence[Any]]) -> dict[str, Any]:
  """Optuna distributions from range specs: ('log'|'linear', lo, hi), ('int', lo, hi), ('choice', values)."""
  out = {}
  for key, spec in space.items():
    if not isinstance(spec, (list, tuple)) or not spec:
      raise ValueError(f"search[{key!r}] must be a range like ('log', lo, hi); got {spec!r}.")
    kind = spec[0]
    if kind == "choice":
      values = tuple(spec[1]) if len(spec) > 1 else ()
      if not values:
        raise ValueError(f"search[{key!r}] has no choices.")
      out[key] = CategoricalDistribution(values)
      continue
    if kind not in ("log", "linear", "int") or len(spec) != 3:
      raise ValueError(f"search[{key!r}] must be ('log'|'linear'|'int', lo, hi) or ('choice', values); got {spec!r}.")
    lo, hi = spec[1], spec[2]
    if not lo < hi:
      raise ValueError(f"search[{key!r}] is empty: it needs lo < hi, got {spec!r}.")
    if kind == "log" and lo <= 0:
      raise ValueError(f"search[{key!r}] is log-uniform, so it needs 0 < lo; got {spec!r}.")
    out[key] = IntDistribution(int(lo), int(hi)) if kind == "int" else FloatDistribution(lo, hi, log=kind == "log")
  return out


def sample(space: Mapping[str, Sequence[Any]], num: int, seed: int) -> list[dict[str, Any]]:
  """``num`` quasi-random points of ``space`` (Optuna QMCSampler, scrambled Sobol, ``seed``); deterministic."""
  dists = distributions(space)
  points = []
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # QMCSampler is marked experimental; Sobol warns for non-powers of two
    sampler = optuna.samplers.QMCSampler(
      qmc_type="sobol", scramble=True, seed=seed, warn_independent_sampling=False, warn_asynchronous_seeding=False
    )
    study = optuna.create_study(sampler=sampler)
    for _ in range(num):
      t = study.ask(dists)
      points.append({k: _plain(t.params[k]) for k in space})
      study.tell(t, 0.0)
  return points


def _plain(v: Any) -> Any:
  return float(v) if isinstance(v, float) else v


OPTUNA_DB = "optuna.db"


def optuna_storage(workdir: str) -> optuna.storages.RDBStorage:
  """The Optuna RDB storage of a study workdir, ``sqlite:///<workdir>/optuna.db`` (for ``optuna-dashboard``).

  SQLite needs a local disk: for an object-store workdir (``gs://…``) the file lives in the workdir's machine-local
  folder (``io_utils.local_path``, like the study store's copy). It is a mirror only: the search is rebuilt from the
  store's decision log, so a machine without this file loses nothing."""
  url = "sqlite:///" + io_utils.local_path(io_utils.abspath(workdir), OPTUNA_DB)
  return optuna.storages.RDBStorage(url, engine_kwargs={"connect_args": {"timeout": 60}})


class CellSearch:
  """The ASHA pruner of one cell. ``report`` returns True when the trial must stop (pruned).

  ``trial_attrs`` maps a run id to the user attributes its Optuna trial gets (the run id is always one). The study
  starts in memory (a replay of the store's log is fast there); ``persist`` moves it into Optuna storage.
  """

  def __init__(
    self,
    *,
    min_epochs: int,
    reduction_factor: int,
    direction: str = "maximize",
    trial_attrs: Optional[Mapping[str, Mapping[str, Any]]] = None,
    trial_params: Optional[Mapping[str, tuple[Mapping[str, Any], Mapping[str, Any]]]] = None,
  ):
    self._pruner = optuna.pruners.SuccessiveHalvingPruner(
      min_resource=int(min_epochs), reduction_factor=int(reduction_factor)
    )
    self._study = optuna.create_study(direction=direction, pruner=self._pruner)
    self._attrs = dict(trial_attrs or {})
    self._params = dict(trial_params or {})  # run id → (its point {key: value}, the cell's search space)
    self._trials: dict[str, optuna.trial.Trial] = {}
    self._last_step: dict[str, int] = {}
    self._last_value: dict[str, float] = {}
    self._finished: set[str] = set()

  def persist(self, storage: optuna.storages.BaseStorage, study_name: str) -> None:
    """Copies the study, every trial as it stands, into ``storage`` as ``study_name`` (replacing an older copy:
    the store's log is the system of record, so no trial is ever counted twice) and continues there."""
    if study_name in {s.study_name for s in optuna.get_all_study_summaries(storage)}:
      optuna.delete_study(study_name=study_name, storage=storage)
    study = optuna.create_study(
      direction=self._study.direction, pruner=self._pruner, storage=storage, study_name=study_name
    )
    study.add_trials(self._study.get_trials(deepcopy=False))
    ids = {t.user_attrs["run_id"]: t._trial_id for t in study.get_trials(deepcopy=False)}  # noqa: SLF001
    self._study = study
    self._trials = {rid: optuna.trial.Trial(study, ids[rid]) for rid in self._trials}

  def _trial(self, run_id: str) -> optuna.trial.Trial:
    if run_id not in self._trials:
      point, space = self._params.get(run_id, ({}, {}))
      dists = {k: _holding(d, point[k]) for k, d in distributions(space).items() if k in point}
      dists = {k: d for k, d in dists.items() if d is not None}
      with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a follow-up's point may lie outside its cell's first range
        if dists:  # the trial's point as Optuna params, so optuna-dashboard plots them against the value
          self._study.enqueue_trial({k: point[k] for k in dists}, skip_if_exists=False)
        trial = self._study.ask(dists)
      for k, v in {"run_id": run_id, **self._attrs.get(run_id, {})}.items():
        trial.set_user_attr(k, v)
      self._trials[run_id] = trial
    return self._trials[run_id]

  def finish(self, run_id: str, status: str) -> None:
    """Tells Optuna how a reported trial ended: ``done`` → complete with its last reported value, ``pruned`` →
    pruned, ``diverged`` → failed. Other statuses (``failed`` is retried) and unreported trials are left as they
    are; the pruner's decisions do not depend on trial states."""
    if run_id not in self._trials or run_id in self._finished or status not in ("done", "pruned", "diverged"):
      return
    self._finished.add(run_id)
    value = self._last_value.get(run_id, float("nan"))
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")  # Optuna warns when it records a NaN value as a failed trial
      if status == "pruned":
        self._study.tell(self._trials[run_id], state=optuna.trial.TrialState.PRUNED)
      elif status == "done" and math.isfinite(value):
        self._study.tell(self._trials[run_id], value)
      else:
        self._study.tell(self._trials[run_id], state=optuna.trial.TrialState.FAIL)

  def report(self, run_id: str, step: int, value: float) -> bool:
    """Reports ``value`` at integer ``step`` (epoch); True = prune. Steps at or before the last reported one are
    ignored (False): a resumed trial re-logs rows it had already reported."""
    if step <= self._last_step.get(run_id, -1) or run_id in self._finished:
      return False
    self._last_step[run_id] = step
    trial = self._trial(run_id)
    value = float(value)
    self._last_value[run_id] = value
    trial.report(value if math.isfinite(value) else float("nan"), step)
    return bool(trial.should_prune())

  def would_report(self, run_id: str, step: int) -> bool:
    return step > self._last_step.get(run_id, -1) and run_id not in self._finished


def _holding(dist: Any, value: Any) -> Any:
  """``dist`` widened to hold ``value`` (a follow-up's point may lie outside its cell's range); None when it cannot."""
  if isinstance(dist, CategoricalDistribution):
    return dist if value in dist.choices else None
  if dist._contains(dist.to_internal_repr(value)):  # noqa: SLF001
    return dist
  lo, hi = min(dist.low, value), max(dist.high, value)
  return (
    IntDistribution(int(lo), int(hi)) if isinstance(dist, IntDistribution) else FloatDistribution(lo, hi, log=dist.log)
  )


def report_value(row: Mapping[str, Any], metric: str) -> Optional[float]:
  """The search metric of an eval row; falls back from validation to test accuracy when there is no split."""
  v = row.get(metric)
  if v is None and metric.startswith("validation_"):
    v = row.get("eval_" + metric[len("validation_") :])
  return None if v is None else float(v)
