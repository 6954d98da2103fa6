"""A study config → its cells and trials: fixed points, grids and quasi-random metaparameter searches over dotted
config keys, each trial tagged with what it is for. Everything a study config can get wrong fails here, with one
sentence, before anything runs.

A study config (``lamb_lars/configs/studies/*.py``, plain data) has

* ``name``; ``base``: a complete training config (``lamb_lars/configs/default.py`` keys);
* ``sweeps``: a tuple of dicts, one *sub-sweep* each (their union is the study)::

    dict(name='b8k-adam-lw',              # run-id prefix (required, unique)
         role='table3',                   # baseline | linear | technique | table3 | search (records.ROLES)
         technique='',                    # the technique this sub-sweep tests (Def. 2.2 evidence), e.g. 'lars'
         variant='layerwise',             # Table 3 column: original | layerwise | layerwise_bound
         fixed={'batch_size': 8192, 'optimizer.name': 'adam', 'optimizer.layerwise': True},
         grid={'batch_size': (8192, 16384)},                         # one *cell* per grid point
         search={'optimizer.learning_rate': ('log', 1e-4, 1e-1),    # a metaparameter search inside each cell
                 'optimizer.schedule.warmup_epochs': ('linear', 0.0, 5.0)},
         num_trials=8, seed=0,            # search points per cell (Optuna's scrambled Sobol sampler)
         stop_at_target=False,            # steps-to-target: each trial stops at the analysis target
         env={},                          # extra environment of these trials (e.g. XLA_FLAGS for 2 CPU devices)
         pruner={})                       # this sub-sweep's own first-rung rule: min_epochs, rung_after_warmup

  Range kinds: ``('log', lo, hi)``, ``('linear', lo, hi)``, ``('int', lo, hi)``, ``('choice', (a, b, ...))``.
  ``role='baseline'`` must give exactly one trial; ``role='linear'`` may vary ``batch_size`` only (linear
  scaling is the baseline recipe with η·B/B0 and nothing else; the base config must scale the LR linearly).
* ``search``: how searched cells are pruned (``lamb_lars/study/running/search.py``);
* ``runner``: workers, threads, timeouts (``lamb_lars/study/running/runner.py``);
* ``analysis``: the report's settings (``lamb_lars/study/publishing/publish.py``), including ``techniques``, the
  declared technique set of Def. 2.2, which must name techniques of the sub-sweeps.

A trial = ``base`` with its overrides applied (fixed, then grid, then search point). Run ids read like the sweep
that made them, ``<sweep>-<swept values>-<4 hex>``, e.g. ``b8k-adam-lw-lr0.00123-wu1.5-3f2a``, and are
deterministic: re-expanding the same study gives the same ids in the same order (resume depends on it).
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import re
from typing import Any, Collection, Mapping, Optional, Sequence

import ml_collections

from lamb_lars.optim import optimizer_config

from lamb_lars.study.analysis import search_adequacy
from lamb_lars.study.running import search as search_lib
from lamb_lars.study.running import sections, trial_checks
from lamb_lars.study.records import ROLES, normalise_variant

_SWEEP_KEYS = (
  "name",
  "role",
  "technique",
  "variant",
  "fixed",
  "grid",
  "search",
  "num_trials",
  "seed",
  "stop_at_target",
  "env",
  "pruner",
)
PRUNER_KEYS = ("min_epochs", "rung_after_warmup")  # per-sub-sweep overrides of the study's ``search`` settings
_SHORT = {
  "batch_size": "b",
  "learning_rate": "lr",
  "warmup_epochs": "wu",
  "weight_decay": "wd",
  "name": "",
  "momentum": "m",
  "num_epochs": "ep",
  "label_smoothing": "ls",
  "trust_coefficient": "tc",
  "init_from_examples": "at",
}


@dataclasses.dataclass(frozen=True)
class TrialSpec:
  """One trial of a study: its id, sub-sweep and cell, its tags, the overrides applied to ``base``, its config."""

  run_id: str
  sweep: str
  cell: str
  role: str
  technique: str
  variant: str
  overrides: Mapping[str, Any]
  config: ml_collections.ConfigDict
  searched: bool = False
  env: Mapping[str, str] = dataclasses.field(default_factory=dict)
  pruner: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  phase: str = "search"  # 'search' | 'extend<k>' | 'replicate' (phases.py)
  replicate_of: str = ""
  space: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # the search space its point came from

  @property
  def seed(self) -> int:
    """``config.seed``: initialisation, data order and per-step randomness (dropout, augmentation)."""
    return int(self.config.get("seed", 0) or 0)

  @property
  def batch_size(self) -> int:
    return int(self.config.batch_size)

  @property
  def optimizer(self) -> str:
    return str(self.config.optimizer.name)

  def at_budget_end(self, epoch: float) -> bool:
    """Whether ``epoch`` is at (or past) the end of the trial's epoch budget (``num_epochs``; False for a budget in
    steps): the search does not stop a trial there, since stopping it saves nothing (driver.py)."""
    budget = float(self.config.get("num_epochs", 0) or 0)
    return budget > 0 and float(epoch) >= budget * (1 - 1e-6)

  def params(self) -> dict[str, Any]:
    """What the store keeps as the swept values (plus the LR and warmup the trial actually uses)."""
    sched = self.config.optimizer.schedule
    return {
      **self.overrides,
      "learning_rate": float(optimizer_config.learning_rate(self.config.optimizer)),
      "warmup_epochs": float(sched.get("warmup_epochs", 0.0) or 0.0),
      "lr_scaling": str(self.config.optimizer.lr_scaling),
    }

  def hparams(self) -> dict[str, Any]:
    """What TensorBoard's HParams dashboard shows for the trial: the keys its study varies (:meth:`params`) with
    its batch size and optimizer."""
    return {"batch_size": self.batch_size, "optimizer.name": self.optimizer, **self.params()}


def apply_overrides(base: ml_collections.ConfigDict, overrides: Mapping[str, Any]) -> ml_collections.ConfigDict:
  """A copy of ``base`` with each dotted key set; an unknown key raises ValueError naming it."""
  config = base.copy_and_resolve_references()
  with config.unlocked():
    for key, value in overrides.items():
      node, parts = config, key.split(".")
      for i, part in enumerate(parts):
        if not isinstance(node, ml_collections.ConfigDict) or part not in node:
          raise ValueError(f"sweep key {key!r}: the base config has no {'.'.join(parts[: i + 1])!r}.")
        if i == len(parts) - 1:
          try:
            setattr(node, part, value)
          except TypeError as e:
            raise ValueError(f"sweep key {key!r}: {e}") from None
        else:
          node = node[part]
  return config


def _fmt_value(v: Any) -> str:
  if isinstance(v, bool):
    return "1" if v else "0"
  if isinstance(v, float):
    return f"{v:.3g}"
  return re.sub(r"[^A-Za-z0-9.]+", "", str(v))


def _short_key(key: str) -> str:
  last = key.split(".")[-1]
  return _SHORT.get(last, last.replace("_", ""))


def run_id(sweep_name: str, swept: Mapping[str, Any], all_overrides: Mapping[str, Any]) -> str:
  """``<sweep>-<swept values>-<4 hex>``; the hash covers every override, so ids never collide."""
  blob = json.dumps({"sweep": sweep_name, "overrides": dict(all_overrides)}, sort_keys=True, default=str)
  digest = hashlib.sha1(blob.encode()).hexdigest()[:4]
  parts = [sweep_name] + [f"{_short_key(k)}{_fmt_value(v)}" for k, v in swept.items()] + [digest]
  return "-".join(parts)


def _check_sweep(sweep: Mapping[str, Any]) -> None:
  name = sweep.get("name")
  if not name or not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.]+(-[A-Za-z0-9_.]+)*", name):
    raise ValueError(f"every sub-sweep needs a 'name' of letters, digits, '_', '.' and '-'; got {name!r}.")
  unknown = set(sweep) - set(_SWEEP_KEYS)
  if unknown:
    raise ValueError(f"sub-sweep {name!r} has unknown fields {sorted(unknown)}; allowed: {_SWEEP_KEYS}.")
  role = sweep.get("role", "search")
  if role not in ROLES:
    raise ValueError(f"sub-sweep {name!r}: role {role!r} is not one of {ROLES}.")
  try:
    normalise_variant(sweep.get("variant"))
  except ValueError as e:
    raise ValueError(f"sub-sweep {name!r}: {e}") from None
  for key, values in (sweep.get("grid") or {}).items():
    if not isinstance(values, (list, tuple)) or not values:
      raise ValueError(f"sub-sweep {name!r}: grid[{key!r}] must be a non-empty tuple of values.")
  space = sweep.get("search")
  if space is not None:
    if not space:
      raise ValueError(f"sub-sweep {name!r}: its search space is empty; give at least one range or drop 'search'.")
    if int(sweep.get("num_trials", 0) or 0) < 1:
      raise ValueError(f"sub-sweep {name!r} has a search space but num_trials={sweep.get('num_trials')}.")
    try:
      search_lib.distributions(space)
    except ValueError as e:
      raise ValueError(f"sub-sweep {name!r}: {e}") from None
  pruner = sweep.get("pruner") or {}
  if set(pruner) - set(PRUNER_KEYS) or (pruner and not space):
    raise ValueError(
      f"sub-sweep {name!r}: 'pruner' may set only {PRUNER_KEYS}, and only on a searched sub-sweep; got {dict(pruner)}."
    )
  if role in ("baseline", "linear"):
    if space:
      raise ValueError(f"sub-sweep {name!r}: a {role} sub-sweep runs one recipe and cannot have a search.")
    varied = set(sweep.get("fixed") or {}) | set(sweep.get("grid") or {})
    scaling = (sweep.get("fixed") or {}).get("optimizer.lr_scaling", "linear")
    if role == "linear" and (varied - {"batch_size", "optimizer.lr_scaling"} or scaling not in ("linear", "sqrt")):
      raise ValueError(
        f"sub-sweep {name!r}: linear scaling is the baseline recipe with η·B/B0 and nothing else, so "
        "it may vary batch_size only (and optimizer.lr_scaling, 'linear' or 'sqrt': the paper's "
        f"Optimization 0 alternative); it sets {sorted(varied)}, lr_scaling {scaling!r}."
      )


def _cells(sweep: Mapping[str, Any]) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
  """[(grid point, [search points])] of one sub-sweep; a sub-sweep without search has one empty point."""
  grid = dict(sweep.get("grid") or {})
  space = sweep.get("search")
  out = []
  for i, combo in enumerate(itertools.product(*grid.values())):
    point = dict(zip(grid.keys(), combo))
    if space:
      seed = int(sweep.get("seed", 0) or 0) * 1000 + i
      out.append((point, search_lib.sample(space, int(sweep["num_trials"]), seed)))
    else:
      out.append((point, [{}]))
  return out


def expand(study: ml_collections.ConfigDict, ended: Collection[str] = ()) -> list[TrialSpec]:
  """Every trial of the study, in sweep order; raises ValueError (one sentence) on anything malformed.

  Args:
    study: the study config.
    ended: run ids recorded as ended for good (done or diverged: never started again), which skip the trainer's
      validator: what they needed to start may be gone (a branch's reference checkpoint, left out of a
      snapshot), and they will not start. The checks across trials still count them.

  Returns:
    The trials, each a :class:`TrialSpec`.
  """
  if not study.get("sweeps"):
    raise ValueError("the study config has no sweeps.")
  trials, seen_ids, seen_names = [], set(), set()
  for sweep in study.sweeps:
    sweep = dict(sweep)
    _check_sweep(sweep)
    if sweep["name"] in seen_names:
      raise ValueError(f"two sub-sweeps are named {sweep['name']!r}; run-id prefixes must be unique.")
    seen_names.add(sweep["name"])
    fixed = _fixed(study, sweep)
    for grid_point, points in _cells(sweep):
      for spec in _cell_trials(study, sweep, grid_point, points, fixed, sweep["name"], "search"):
        if spec.run_id in seen_ids:
          raise ValueError(f"two trials have the same id {spec.run_id!r}: a sub-sweep repeats a point.")
        seen_ids.add(spec.run_id)
        trials.append(spec)
  _check_study(study, trials, frozenset(ended))
  return trials


def cell_name(sweep: Mapping[str, Any], grid_point: Mapping[str, Any]) -> str:
  return "-".join([sweep["name"]] + [f"{_short_key(k)}{_fmt_value(v)}" for k, v in grid_point.items()])


def _cell_trials(
  study,
  sweep: Mapping[str, Any],
  grid_point: Mapping[str, Any],
  points: Sequence[Mapping[str, Any]],
  fixed: Mapping[str, Any],
  id_prefix: str,
  phase: str,
  space: Optional[Mapping[str, Any]] = None,
) -> list[TrialSpec]:
  """The trials of one cell: ``base`` + fixed + grid point + each search point."""
  role, variant = sweep.get("role", "search"), normalise_variant(sweep.get("variant"))
  space = dict(sweep.get("search") or {}) if space is None else dict(space)
  out = []
  for point in points:
    overrides = {**fixed, **grid_point, **point}
    config = apply_overrides(study.base, overrides)
    out.append(
      TrialSpec(
        run_id(id_prefix, {**grid_point, **point}, overrides),
        sweep["name"],
        cell_name(sweep, grid_point),
        role,
        str(sweep.get("technique", "") or ""),
        variant,
        overrides,
        config,
        searched=bool(sweep.get("search")),
        env={str(k): str(v) for k, v in dict(sweep.get("env") or {}).items()},
        pruner=dict(sweep.get("pruner") or {}),
        phase=phase,
        space={k: list(v) if isinstance(v, tuple) else v for k, v in space.items()},
      )
    )
  return out


def _fixed(study, sweep: Mapping[str, Any]) -> dict[str, Any]:
  """The sub-sweep's fixed keys; a steps-to-target sub-sweep's trials also stop at the analysis target."""
  fixed = dict(sweep.get("fixed") or {})
  if sweep.get("stop_at_target"):
    analysis = sections.section(study, "analysis")
    fixed.update(
      {
        "stop.target_metric": analysis["target_metric"],
        "stop.target_goal": float(analysis["target_goal"]),
        "stop.target_mode": analysis["target_mode"],
      }
    )
  return fixed


def extension_trials(
  study: ml_collections.ConfigDict, cell: str, round_: int, space: Mapping[str, Any]
) -> list[TrialSpec]:
  """The trials of the ``round_``-th extension of ``cell``'s search: its sub-sweep's ``num_trials`` new points
  drawn from ``space`` (the cell's space with a moved LR range, phases.py), ids ``<sweep>-x<round>-…``."""
  for sweep in study.sweeps:
    sweep = dict(sweep)
    if not sweep.get("search"):
      continue
    for i, combo in enumerate(itertools.product(*dict(sweep.get("grid") or {}).values())):
      grid_point = dict(zip(dict(sweep.get("grid") or {}).keys(), combo))
      if cell_name(sweep, grid_point) != cell:
        continue
      seed = int(sweep.get("seed", 0) or 0) * 1000 + i + 7919 * int(round_)
      space = _in_order(space, list(dict(sweep["search"])))
      points = search_lib.sample(space, int(sweep["num_trials"]), seed)
      return _cell_trials(
        study, sweep, grid_point, points, _fixed(study, sweep), f"{sweep['name']}-x{round_}", f"extend{round_}", space
      )
  raise ValueError(f"no searched cell {cell!r} in this study.")


def _in_order(mapping: Mapping[str, Any], order: Sequence[str]) -> dict[str, Any]:
  """``mapping`` with the keys of ``order`` first, in that order, then any others in their own order.

  A follow-up's trial ids and sampled points depend on key order, and the plan log stores its details as JSON with
  sorted keys: the trials rebuilt from the log on resume must get the order the runner used when it decided them
  (for a refinement point, the sweep's other searched keys, then the LR; phases.py)."""
  mapping = dict(mapping)
  return {**{k: mapping[k] for k in order if k in mapping}, **{k: v for k, v in mapping.items() if k not in order}}


def _refine_order(sweep: Mapping[str, Any]) -> list[str]:
  """A refinement point's key order as phases.py builds it: the sweep's other searched keys, then the LR."""
  lr = search_adequacy.LR_KEY
  return [k for k in dict(sweep["search"]) if k != lr] + [lr]


def refinement_trials(
  study: ml_collections.ConfigDict, cell: str, round_: int, points: Sequence[Mapping[str, Any]]
) -> list[TrialSpec]:
  """The trials of the ``round_``-th refinement of ``cell``'s search: the given ``points`` (the chosen trial's
  searched values with the LR moved, phases.py), ids ``<sweep>-r<round>-…``, phase ``refine<round>``, never pruned
  (``searched=False``: each runs to its budget or target, so the chosen LR's neighbours are observed, not guessed)."""
  for sweep in study.sweeps:
    sweep = dict(sweep)
    if not sweep.get("search"):
      continue
    for combo in itertools.product(*dict(sweep.get("grid") or {}).values()):
      grid_point = dict(zip(dict(sweep.get("grid") or {}).keys(), combo))
      if cell_name(sweep, grid_point) != cell:
        continue
      specs = _cell_trials(
        study,
        sweep,
        grid_point,
        [_in_order(p, _refine_order(sweep)) for p in points],
        _fixed(study, sweep),
        f"{sweep['name']}-r{round_}",
        f"refine{round_}",
      )
      return [dataclasses.replace(s, searched=False) for s in specs]
  raise ValueError(f"no searched cell {cell!r} in this study.")


def _check_study(study: ml_collections.ConfigDict, trials: Sequence[TrialSpec], ended: frozenset = frozenset()) -> None:
  """Checks across trials (one baseline, a technique set the sweeps can match, batches within the training set),
  then every trial not in ``ended`` through the trainer's validator (trial_checks.py)."""
  baselines = [t for t in trials if t.role == "baseline"]
  if len(baselines) > 1:
    raise ValueError(f"a study has at most one baseline trial (role 'baseline'); these sweeps give {len(baselines)}.")
  if (
    any(t.role == "linear" for t in trials) and baselines and str(baselines[0].config.optimizer.lr_scaling) != "linear"
  ):
    raise ValueError("linear-scaling sweeps need the baseline recipe to set optimizer.lr_scaling='linear'.")
  analysis = sections.section(study, "analysis")
  tagged = {t.technique for t in trials if t.technique}
  missing = [name for name in analysis["techniques"] if name not in tagged]
  if missing:
    raise ValueError(
      f"analysis.techniques names {missing}, which no sub-sweep tests (techniques tagged in the "
      f"sweeps: {sorted(tagged) or 'none'})."
    )
  n = int(analysis["num_train"])  # training examples after the validation hold-out (B_F)
  for t in trials:
    if n > 0 and t.batch_size > n:
      raise ValueError(f"trial {t.run_id}: batch {t.batch_size} exceeds the {n} training examples.")
  trial_checks.validate_trials([t for t in trials if t.run_id not in ended], sections.section(study, "runner")["env"])
