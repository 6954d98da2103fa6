"""A study config → the list of trials it describes: grids and quasi-random searches over dotted config keys.

A study config (``configs/studies/*.py``) is a ``ConfigDict`` with

* ``name``: the study name (stored with every run);
* ``base``: a complete training config (``configs/default.py`` keys); overridable from the command line
  (``--config.base.num_epochs=2``);
* ``sweeps``: a tuple of plain dicts, one *sub-sweep* each (their union is the study)::

    dict(name='b8k-adam',                         # prefix of the run ids (required, unique)
         variant='layerwise',                     # Table 3 column ('original' if absent), see table3.py
         fixed={'batch_size': 8192, 'optimizer.name': 'adam'},          # dotted key → value
         grid={'optimizer.learning_rate': (1e-3, 3e-3)},                # Cartesian product, in key order
         random={'optimizer.schedule.warmup_epochs': ('linear', 0, 5)}, # quasi-random (Halton) ranges
         num_random=4, seed=0)                    # random points; each is crossed with the grid

  Range kinds: ``('log', lo, hi)`` (log-uniform), ``('linear', lo, hi)``, ``('int', lo, hi)`` (inclusive),
  ``('choice', (a, b, ...))``.

A trial = ``base`` with its overrides applied (fixed, then grid, then random values); a misspelled key is a
``ValueError`` here, before anything runs, while a bad *value* is left for the trainer to reject (the run is then
recorded as ``failed`` with the error). The run id is readable and deterministic in the swept values only:
``<sweep>-b<batch>-<optimizer>-<variant>-<8 hex of sha1(variant, overrides)>``, so re-expanding the same study
gives the same ids in the same order (the runner's resume depends on it).

Quasi-random search (Bousquet et al. 2017, as in Shallue et al. 2018): a Halton sequence (prime bases per
dimension; point i = index i + 1, index 0 being the all-zeros corner), rotated by a seeded random shift modulo 1
when ``seed`` ≠ 0.
"""
from __future__ import annotations

import copy
import dataclasses
import hashlib
import itertools
import json
import math
from typing import Any, Mapping, Optional, Sequence

import ml_collections
import numpy as np

from lamb_lars.study import table3

_SWEEP_KEYS = ("name", "variant", "fixed", "grid", "random", "num_random", "seed")
_PRIMES = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79, 83, 89, 97)
VARIANTS = ("original", "layerwise", "layerwise_bound")


@dataclasses.dataclass(frozen=True)
class Trial:
  """One run of a study: its id, sub-sweep, variant, the overrides applied to ``base``, and the result config."""
  run_id: str
  sweep: str
  variant: str
  overrides: Mapping[str, Any]
  config: ml_collections.ConfigDict

  @property
  def batch_size(self) -> int:
    return int(self.config.batch_size)

  @property
  def optimizer(self) -> str:
    return str(self.config.optimizer.name)

  def params(self) -> dict[str, Any]:
    """What the store keeps as the swept values: the overrides plus ``variant`` and ``lr_scaling``."""
    out = dict(self.overrides)
    out.update(variant=self.variant, lr_scaling=self.config.optimizer.lr_scaling)
    return out


# ----------------------------------------------------------------------------------------------- quasi-random


def _radical_inverse(index: int, base: int) -> float:
  """Van der Corput radical inverse of ``index`` in ``base``: its digits mirrored after the radix point."""
  out, scale = 0.0, 1.0 / base
  while index > 0:
    index, digit = divmod(index, base)
    out += digit * scale
    scale /= base
  return out


def halton(num_points: int, num_dims: int, seed: int = 0) -> np.ndarray:
  """``[num_points, num_dims]`` points in [0, 1): Halton (point i = index i + 1), and for ``seed`` ≠ 0 shifted by
  a seeded random vector modulo 1 (Cranley–Patterson rotation, which keeps the low discrepancy)."""
  if num_dims > len(_PRIMES):
    raise ValueError(f"halton supports at most {len(_PRIMES)} dimensions, got {num_dims}.")
  u = np.array([[_radical_inverse(i + 1, b) for b in _PRIMES[:num_dims]] for i in range(num_points)],
               dtype=np.float64).reshape(num_points, num_dims)
  if seed:
    u = np.mod(u + np.random.default_rng(seed).random(num_dims), 1.0)
  return u


def scale_point(u: float, spec: Sequence[Any]) -> Any:
  """Maps u ∈ [0, 1) into a range spec: ('log'|'linear', lo, hi), ('int', lo, hi) or ('choice', values)."""
  kind = spec[0]
  if kind == "choice":
    values = tuple(spec[1])
    return values[min(int(u * len(values)), len(values) - 1)]
  lo, hi = spec[1], spec[2]
  if kind == "log":
    if not 0 < lo <= hi:
      raise ValueError(f"log range needs 0 < lo <= hi, got {spec!r}.")
    return float(math.exp(math.log(lo) + u * (math.log(hi) - math.log(lo))))
  if kind == "linear":
    return float(lo + u * (hi - lo))
  if kind == "int":
    return int(min(hi, math.floor(lo + u * (hi - lo + 1))))
  raise ValueError(f"range kind must be log, linear, int or choice; got {spec!r}.")


# ----------------------------------------------------------------------------------------------- overrides


def apply_overrides(base: ml_collections.ConfigDict, overrides: Mapping[str, Any]) -> ml_collections.ConfigDict:
  """A copy of ``base`` with each dotted key set; an unknown key raises ValueError naming it."""
  config = base.copy_and_resolve_references()
  with config.unlocked():
    for key, value in overrides.items():
      node, parts = config, key.split(".")
      for i, part in enumerate(parts):
        if not isinstance(node, ml_collections.ConfigDict) or part not in node:
          raise ValueError(f"sweep key {key!r}: the base config has no {'.'.join(parts[:i + 1])!r}.")
        if i == len(parts) - 1:
          try:
            setattr(node, part, value)
          except TypeError as e:
            raise ValueError(f"sweep key {key!r}: {e}") from None
        else:
          node = node[part]
  return config


def run_id(sweep_name: str, variant: str, overrides: Mapping[str, Any], config: ml_collections.ConfigDict) -> str:
  """``<sweep>-b<batch>-<optimizer>-<variant>-<hash8>``; the hash covers the variant and the overrides only."""
  blob = json.dumps({"variant": variant, "overrides": dict(overrides)}, sort_keys=True, default=str)
  digest = hashlib.sha1(blob.encode()).hexdigest()[:8]
  return f"{sweep_name}-b{config.batch_size}-{config.optimizer.name}-{variant}-{digest}"


def _check_sweep(sweep: Mapping[str, Any]) -> None:
  unknown = set(sweep) - set(_SWEEP_KEYS)
  if unknown:
    raise ValueError(f"sub-sweep {sweep.get('name')!r} has unknown fields {sorted(unknown)}; allowed: "
                     f"{_SWEEP_KEYS}.")
  if not sweep.get("name") or not isinstance(sweep["name"], str):
    raise ValueError(f"every sub-sweep needs a 'name' (run id prefix); got {sweep!r}.")
  variant = sweep.get("variant", "original")
  if table3.normalise_variant(variant) not in {table3.normalise_variant(v) for v in VARIANTS}:
    raise ValueError(f"sub-sweep {sweep['name']!r}: variant {variant!r} is not one of {VARIANTS}.")
  for key, values in (sweep.get("grid") or {}).items():
    if not isinstance(values, (list, tuple)) or not values:
      raise ValueError(f"sub-sweep {sweep['name']!r}: grid[{key!r}] must be a non-empty tuple of values.")


def _sweep_points(sweep: Mapping[str, Any]) -> list[dict[str, Any]]:
  """The override dicts of one sub-sweep: fixed × grid × quasi-random points."""
  fixed = dict(sweep.get("fixed") or {})
  grid = dict(sweep.get("grid") or {})
  rand = dict(sweep.get("random") or {})
  n_random = int(sweep.get("num_random", 0) or 0)
  if rand and n_random < 1:
    raise ValueError(f"sub-sweep {sweep['name']!r} has random ranges but num_random={n_random}.")
  random_points: list[dict[str, Any]] = [{}]
  if rand:
    keys = list(rand)
    u = halton(n_random, len(keys), int(sweep.get("seed", 0) or 0))
    random_points = [{k: scale_point(u[i, j], rand[k]) for j, k in enumerate(keys)} for i in range(n_random)]
  out = []
  for combo in itertools.product(*grid.values()):
    for point in random_points:
      out.append({**fixed, **dict(zip(grid.keys(), combo)), **point})
  return out


def expand(study: ml_collections.ConfigDict) -> list[Trial]:
  """Every trial of the study, in sweep order; raises ValueError on a bad sweep or a duplicate run id."""
  if not study.get("sweeps"):
    raise ValueError("the study config has no sweeps.")
  trials, seen = [], set()
  for sweep in study.sweeps:
    sweep = dict(sweep)
    _check_sweep(sweep)
    variant = sweep.get("variant", "original")
    for overrides in _sweep_points(sweep):
      config = apply_overrides(study.base, overrides)
      rid = run_id(sweep["name"], variant, overrides, config)
      if rid in seen:
        raise ValueError(f"two trials have the same id {rid!r}: a sub-sweep repeats a point.")
      seen.add(rid)
      trials.append(Trial(rid, sweep["name"], variant, copy.deepcopy(overrides), config))
  return trials


def variant_overrides(variant: str, ratio_bounds: tuple = (0.0, 10.0)) -> dict[str, Any]:
  """The optimizer keys of a Table 3 variant: layer-wise trust ratio, optionally with the ratio bounded."""
  v = table3.normalise_variant(variant)
  if v == "original":
    return {}
  if v == "layerwise":
    return {"optimizer.layerwise": True}
  if v == "layerwisebound":
    return {"optimizer.layerwise": True, "optimizer.ratio_bounds": tuple(ratio_bounds)}
  raise ValueError(f"variant {variant!r} is not one of {VARIANTS}.")
