"""What the runner adds to a study after each cell's search (running layer): range extensions, promotions to the
full budget, and replicates of the chosen configuration. Each decision is made once, from finished trials only,
and recorded in the store's ``plan`` log before its trials are registered; a restarted runner rebuilds the trials
of every recorded decision from the log (``planned``), so a study killed at any moment resumes with the same
trials and ids, and raising ``replicates.num_seeds`` on a finished study launches only the missing seeds.

Per cell, in order, once every trial of the cell has finished (done, diverged, pruned or failed):

1. **Extension** (searched cells; ``search.edge_fraction``, ``search.max_extensions``): when the chosen trial's
   LR lies in the outer ``edge_fraction`` (log scale) of the LR range searched so far, or no trial of the cell
   tried an LR beyond it on that side (search_adequacy.edge), the cell's sub-sweep is
   searched again, ``num_trials`` new points on the range shifted by the original range's width on that side
   (search_adequacy.py); trials ``<sweep>-x<k>-…``, phase ``extend<k>``, pruned by the same cell search. At most
   ``max_extensions`` times; the log records each extension and the cell's final verdict ('extend', key 'end').
   A cell where no trial finished and some diverged (the Table 3 momentum cell at 8K whose range began at 0.05)
   extends downward: divergence at every LR tried says the range lies above the stable ones.
   The decision holds for the trial chosen when it was made: when promotions (step 2) change the chosen trial,
   the cell is decided again for the new one ('end', then 'end2', … in the log), so a promoted trial that wins
   at the range's edge extends the range like any other (the LeNet-5 Table 3 republish of 2026-11-26 found two
   cells at batch 256 whose promoted winner sat at the high edge, unextended, before this rule).
2. **Promotion** (searched cells; ``search.min_full_budget``): while fewer trials of the cell ran their full budget
   (or stopped at the target) than ``min_full_budget``, the pruned trials that got furthest (then with the best
   search metric at their last evaluation) resume from their checkpoints to the full budget, never pruned again.
   **Refinement** (searched cells; ``search.refine_factor`` = r > 1, ``search.max_refinements``; off by default):
   once the cell's search has ended for its chosen trial (step 1), the chosen LR η needs a tried LR on each side
   within ×r (search_adequacy.neighbours; trials that diverged or were pruned count, failed ones do not). A side
   without one gets a trial at η/r or η·r with the chosen trial's other searched values, never pruned; trials
   ``<sweep>-r<k>-…``, phase ``refine<k>``. When a refinement trial becomes the chosen one, the cell is decided
   again (step 1, then another round), at most ``max_refinements`` rounds (issue 41: the chosen LR's neighbours
   within 1.5× near the optimum).
3. **Replicates** (``replicates.num_seeds`` = k, ``replicates.roles``): the chosen configuration (selection.py, on
   the validation split) is re-run with seeds s₀+1 … s₀+k (s₀ its own seed), ids ``<chosen>-seed<s>``, phase
   ``replicate``, never pruned. An unsearched cell (a baseline, a linear-scaling point) has one trial: it is its
   chosen configuration when it finished (done or diverged: a divergence is a result worth replicating).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Mapping, Optional, Sequence

from lamb_lars.study.analysis import search_adequacy as adequacy_lib
from lamb_lars.study.running import store, sweep
from lamb_lars.study.records import FINISHED, Trial
from lamb_lars.study.running.search import report_value
from lamb_lars.study.analysis.selection import choose, finished_full

SETTLED = FINISHED + ("failed",)


def replicate_spec(chosen: sweep.TrialSpec, seed: int) -> sweep.TrialSpec:
  """The chosen trial's configuration with ``config.seed = seed``."""
  config = chosen.config.copy_and_resolve_references()
  with config.unlocked():
    config.seed = int(seed)
  return dataclasses.replace(
    chosen,
    run_id=f"{chosen.run_id}-seed{int(seed)}",
    config=config,
    searched=False,
    phase="replicate",
    replicate_of=chosen.run_id,
    overrides={**chosen.overrides, "seed": int(seed)},
  )


def planned(study, con, specs: Sequence[sweep.TrialSpec]) -> list[sweep.TrialSpec]:
  """The trials of every follow-up already recorded in the plan log (extensions first, then replicates)."""
  log = store.plan(con)
  out: list[sweep.TrialSpec] = []
  for p in log:
    if p["kind"] == "extend" and not _is_end(p["key"]):
      out += sweep.extension_trials(study, p["cell"], int(p["key"]), p["detail"]["space"])
    elif p["kind"] == "refine":
      out += sweep.refinement_trials(study, p["cell"], int(p["key"]), p["detail"]["points"])
  by_id = {s.run_id: s for s in list(specs) + out}
  for p in log:
    if p["kind"] == "replicate":
      chosen = by_id.get(p["detail"]["chosen"])
      if chosen is None:
        raise ValueError(
          f"the plan log replicates {p['detail']['chosen']}, which this study no longer has; use "
          "the study config that made this workdir."
        )
      out.append(replicate_spec(chosen, int(p["detail"]["seed"])))
  return out


def _goal(spec: sweep.TrialSpec) -> Optional[float]:
  stop = spec.config.get("stop") or {}
  return float(stop.get("target_goal")) if stop.get("target_metric") else None


def _promotion_order(t: Trial, metric: str, mode: str) -> tuple:
  last = next((report_value(r, metric) for r in reversed(t.curve) if report_value(r, metric) is not None), None)
  value = -math.inf if last is None or not math.isfinite(last) else (last if mode == "max" else -last)
  return (-(t.final_epoch or 0.0), -value, t.run_id)


def follow_ups(
  study,
  con,
  specs: Sequence[sweep.TrialSpec],
  search_cfg: Mapping[str, Any],
  rep_cfg: Mapping[str, Any],
  log: Callable[[str], None] = print,
) -> tuple[list[sweep.TrialSpec], int]:
  """Decides the follow-ups now due (module docstring); returns (new trials to register, trials promoted)."""
  trials = {t.run_id: t for t in store.trials(con, study=study.name)}
  plan = store.plan(con)
  by_cell: dict[str, list[sweep.TrialSpec]] = {}
  for s in specs:
    by_cell.setdefault(s.cell, []).append(s)
  known = {s.run_id for s in specs}
  metric, mode = search_cfg["metric"], search_cfg["mode"]
  new: list[sweep.TrialSpec] = []
  promoted = 0
  for cell, cell_specs in by_cell.items():
    own = [s for s in cell_specs if s.phase != "replicate"]
    ts = [trials[s.run_id] for s in own if s.run_id in trials]
    if not own or len(ts) < len(own) or any(t.status not in SETTLED for t in ts):
      continue
    first = own[0]
    if first.searched:
      chosen = choose(ts, metric, mode, _goal(first))
      if not _ended(plan, cell, chosen):
        ext = _extension(study, con, cell, own, ts, chosen, search_cfg, log, _end_key(plan, cell))
        if ext:
          new += [s for s in ext if s.run_id not in known]
          continue
      ref = _refinement(study, con, cell, own, ts, chosen, search_cfg, log)
      if ref:
        new += [s for s in ref if s.run_id not in known]
        continue
      need = int(search_cfg["min_full_budget"]) - sum(finished_full(t) for t in ts)
      if need > 0:
        n = _promote(con, cell, ts, need, search_cfg, log)
        promoted += n
        if n:
          continue
    else:
      chosen = ts[0] if len(ts) == 1 and ts[0].status in ("done", "diverged") else None
    new += _replicates(con, cell, cell_specs, chosen, rep_cfg, known, plan, log)
  return new, promoted


def _promote(
  con, cell: str, ts: Sequence[Trial], need: int, search_cfg: Mapping[str, Any], log: Callable[[str], None]
) -> int:
  """Promotes up to ``need`` pruned trials of ``cell`` to their full budget (furthest trained first, then best);
  returns how many."""
  metric, mode = search_cfg["metric"], search_cfg["mode"]
  pool = sorted(
    (t for t in ts if t.status == "pruned" and not t.promoted), key=lambda t: _promotion_order(t, metric, mode)
  )
  for t in pool[:need]:  # logged first: a runner killed in between promotes the same trial next time
    store.log_plan(
      con,
      "promote",
      cell,
      t.run_id,
      {"epoch": t.final_epoch, "reason": f"{need} short of search.min_full_budget={search_cfg['min_full_budget']}"},
    )
    store.promote(con, t.run_id)
    log(f"         {cell}: promoting pruned {t.run_id} (epoch {t.final_epoch}) to its full budget")
  return len(pool[:need])


def _is_end(key: str) -> bool:
  return key == "end" or (key.startswith("end") and key[3:].isdigit())


def _ended(plan: Sequence[Mapping[str, Any]], cell: str, chosen: Optional[Trial]) -> bool:
  """Whether the cell's search has ended for ``chosen``: its last extension record is an end decided for this
  very trial (an end decided for another chosen trial, before promotions changed it, no longer holds)."""
  last = next((p for p in reversed(plan) if p["kind"] == "extend" and p["cell"] == cell), None)
  return (
    last is not None
    and _is_end(last["key"])
    and last["detail"].get("chosen") == (None if chosen is None else chosen.run_id)
  )


def _end_key(plan: Sequence[Mapping[str, Any]], cell: str) -> str:
  n = sum(1 for p in plan if p["kind"] == "extend" and p["cell"] == cell and _is_end(p["key"]))
  return "end" if n == 0 else f"end{n + 1}"


def _extension(study, con, cell, own, ts, chosen, search_cfg, log, end_key="end") -> list[sweep.TrialSpec]:
  """The next extension of the cell's LR range, or [] after recording (under ``end_key``) why the cell's search
  ends."""
  rounds = max((int(s.phase[len("extend") :]) for s in own if s.phase.startswith("extend")), default=0)
  original = adequacy_lib.lr_range(own[0].space)
  span = adequacy_lib.union_range(ts)
  lr = None if chosen is None else chosen.params.get("learning_rate")
  side = (
    ""
    if original is None or span is None or lr is None
    else adequacy_lib.edge(float(lr), span[0], span[1], float(search_cfg["edge_fraction"]), adequacy_lib.tried_lrs(ts))
  )
  if (
    chosen is None
    and original is not None
    and span is not None
    and any(t.status == "diverged" for t in ts)
    and not any(t.status == "done" for t in ts)
  ):
    side = "low"  # every trial that ran diverged: the range lies above the stable LRs
  if side and rounds < int(search_cfg["max_extensions"]):
    lo, hi = adequacy_lib.shifted(span[0], span[1], side, original[1] / original[0])
    space = {**dict(own[0].space), adequacy_lib.LR_KEY: ["log", lo, hi]}
    why = "every trial diverged" if chosen is None else f"best LR {float(lr):.4g} at the {side} edge"
    store.log_plan(
      con,
      "extend",
      cell,
      str(rounds + 1),
      {
        "side": side,
        "why": why,
        "searched": list(span),
        "chosen": None if chosen is None else chosen.run_id,
        "space": space,
      },
    )
    log(
      f"         {cell}: {why} of [{span[0]:.4g}, {span[1]:.4g}]; searching [{lo:.4g}, {hi:.4g}] "
      f"(extension {rounds + 1})"
    )
    return sweep.extension_trials(study, cell, rounds + 1, space)
  if chosen is None:
    where = "nothing chosen"
  elif original is None:
    where = "no LR search"
  else:
    where = f"{side} edge, extensions used up" if side else "interior"
  store.log_plan(
    con,
    "extend",
    cell,
    end_key,
    {"rounds": rounds, "where": where, "chosen": None if chosen is None else chosen.run_id},
  )
  return []


def _refinement(study, con, cell, own, ts, chosen, search_cfg, log) -> list[sweep.TrialSpec]:
  """The next refinement round of the cell around ``chosen`` (module docstring), or [] when none is due."""
  factor, most = float(search_cfg["refine_factor"]), int(search_cfg["max_refinements"])
  if factor <= 1.0 or chosen is None or adequacy_lib.lr_range(own[0].space) is None:
    return []
  rounds = max((int(s.phase[len("refine") :]) for s in own if s.phase.startswith("refine")), default=0)
  lr = chosen.params.get(adequacy_lib.LR_KEY, chosen.params.get("learning_rate"))
  if lr is None or rounds >= most:
    return []
  lr = float(lr)
  below, above = adequacy_lib.neighbours(lr, adequacy_lib.tried_lrs(ts))
  moves = [
    (side, m)
    for side, m, n in (("low", 1.0 / factor, below), ("high", factor, above))
    if n is None or n > factor * (1.0 + 1e-9)
  ]
  if not moves:
    return []
  keys = [k for k in own[0].space if k != adequacy_lib.LR_KEY]
  points = [
    {**{k: chosen.params[k] for k in keys if k in chosen.params}, adequacy_lib.LR_KEY: lr * m} for _, m in moves
  ]
  why = ", ".join(
    f"{side}: nearest tried LR " + ("none" if n is None else f"×{n:.3g} away")
    for side, _, n in (("low", 0, below), ("high", 0, above))
  )
  store.log_plan(
    con,
    "refine",
    cell,
    str(rounds + 1),
    {"chosen": chosen.run_id, "lr": lr, "factor": factor, "why": why, "points": points},
  )
  tries = ", ".join(f"{p[adequacy_lib.LR_KEY]:.4g}" for p in points)
  log(f"         {cell}: chosen LR {lr:.4g} ({why}); trying {tries} (refinement {rounds + 1})")
  return sweep.refinement_trials(study, cell, rounds + 1, points)


def _replicates(con, cell, cell_specs, chosen, rep_cfg, known, plan, log) -> list[sweep.TrialSpec]:
  k = int(rep_cfg["num_seeds"])
  if k <= 0 or cell_specs[0].role not in tuple(rep_cfg["roles"]):
    return []
  earlier = [p["detail"]["chosen"] for p in plan if p["kind"] == "replicate" and p["cell"] == cell]
  chosen_id = earlier[0] if earlier else None if chosen is None else chosen.run_id
  spec = next((s for s in cell_specs if s.run_id == chosen_id), None)
  if spec is None:
    return []
  out = []
  for i in range(1, k + 1):
    seed = spec.seed + i
    if (
      store.log_plan(con, "replicate", cell, f"seed{seed}", {"chosen": spec.run_id, "seed": seed})
      or f"{spec.run_id}-seed{seed}" not in known
    ):
      rep = replicate_spec(spec, seed)
      if rep.run_id not in known:
        out.append(rep)
  if out:
    log(f"         {cell}: {len(out)} replicate(s) of {spec.run_id}")
  return out
