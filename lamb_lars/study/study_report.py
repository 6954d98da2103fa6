"""The report of a study workdir: the analysis settings saved with the study → ``report.write_report``, plus a
settings section and a measured-vs-paper comparison (You et al. 2020 Tables 2–3, §3.1).

``study.analysis`` (see ``configs/studies/*.py``)::

  target_metric, target_goal, target_mode   steps-to-target goal (Shallue et al. 2018)
  baseline_batch                            B0
  baseline_accuracy, baseline_val_loss      A and ξ; ≤ 0: measured, from the best finished run at B0 that
                                            matches ``linear_select`` (its final eval)
  baseline_epochs                           ρ; ≤ 0: ``base.num_epochs``
  num_train                                 N (B_F)
  linear_select                             ('optimizer.lr_scaling=linear', 'variant=original', ...): the runs
                                            that test Def. 2.1 (LR = η·B/B0); keys are dotted config keys or
                                            ``variant`` / ``optimizer`` / ``batch_size``
  table3_batch                              Table 3's large batch (0: none / automatic)
  paper_table3                              {optimizer: (bs B0, original, layer-wise, layer-wise + bound)}
  paper_regimes                             {accuracy, b_l, b_h}: the paper's A, B_L, B_H
  paper_points                              ((batch, optimizer | 'any', accuracy, what), ...): single results
  notes                                     markdown shown under the title (e.g. how the run was reduced)
"""
from __future__ import annotations

import math
import os
from typing import Any, Callable, Mapping, Optional, Sequence

import ml_collections

from lamb_lars.study import regimes as rg
from lamb_lars.study import report as rp
from lamb_lars.study import runner
from lamb_lars.study import store as st
from lamb_lars.study import table3 as t3


def _lookup(trial: st.Trial, key: str) -> Any:
  if key in ("variant", "optimizer", "batch_size"):
    value = getattr(trial, key)
    return t3.normalise_variant(value) if key == "variant" else value
  node: Any = trial.config
  for part in key.split("."):
    if not isinstance(node, Mapping) or part not in node:
      return None
    node = node[part]
  return node


def selector(specs: Sequence[str]) -> Callable[[st.Trial], bool]:
  """A predicate from ``'key=value'`` strings (all must hold; values compared as text, variants normalised)."""
  pairs = []
  for spec in specs:
    key, _, value = str(spec).partition("=")
    pairs.append((key.strip(), t3.normalise_variant(value) if key.strip() == "variant" else value.strip()))
  return lambda t: all(str(_lookup(t, k)) == v for k, v in pairs)


def _final_row(t: st.Trial) -> Optional[Mapping[str, Any]]:
  rows = sorted(t.curve, key=lambda r: r["step"])
  return rows[-1] if rows else None


def measured_baseline(trials: Sequence[st.Trial], batch: int,
                      linear: Callable[[st.Trial], bool]) -> Optional[st.Trial]:
  """The finished run at ``batch`` with linear scaling and the best final accuracy (ties: smaller run_id)."""
  cands = [t for t in trials if t.batch_size == batch and t.status == "done" and linear(t)
           and (_final_row(t) or {}).get(rp.ACC_KEY) is not None]
  return min(cands, key=lambda t: (-_final_row(t)[rp.ACC_KEY], t.run_id), default=None)


def baseline_from(analysis: Any, base: Any, trials: Sequence[st.Trial],
                  linear: Callable[[st.Trial], bool]) -> tuple[Optional[rg.Baseline], str]:
  """The Baseline (measured where the settings say ≤ 0) and a sentence saying where A and ξ come from."""
  b0 = int(analysis.baseline_batch)
  acc, loss = float(analysis.baseline_accuracy), float(analysis.baseline_val_loss)
  epochs = float(analysis.baseline_epochs) if analysis.baseline_epochs > 0 else float(base.num_epochs)
  source = "given in the study config"
  if acc <= 0 or loss <= 0:
    ref = measured_baseline(trials, b0, linear)
    if ref is None:
      return None, f"no finished linear-scaled run at B0 = {b0} to measure the baseline from"
    row = _final_row(ref)
    acc = acc if acc > 0 else float(row[rp.ACC_KEY])
    loss = loss if loss > 0 else float(row["eval_loss"])
    source = f"measured: final eval of `{ref.run_id}`"
  return rg.Baseline(b0, acc, loss, epochs, int(analysis.num_train)), source


def _settings_section(study: Any, workdir: str, trials: Sequence[st.Trial], baseline_note: str) -> list[str]:
  base = study.base
  lines = ["## Settings", ""]
  if study.analysis.get("notes"):
    lines += [str(study.analysis.notes).strip(), ""]
  lines += [f"- study `{study.name}`: {len(trials)} runs; model `{base.model}` on `{base.dataset}`, "
            f"{base.num_epochs:g} epochs" + (f" / {base.num_train_steps} steps" if base.num_train_steps > 0 else "")
            + f", eval every {base.eval_every_epochs:g} epochs",
            f"- baseline A and ξ: {baseline_note}"]
  cmds = os.path.join(workdir, runner.COMMANDS_FILE)
  if os.path.exists(cmds):
    with open(cmds, encoding="utf-8") as f:
      last = [ln.strip() for ln in f if ln.strip()][-3:]
    lines += ["- commands (latest last):", ""] + [f"      {c}" for c in last]
  walls = [t.wall_time for t in trials if t.wall_time]
  if walls:
    lines += ["", f"- training time, sum over runs: {sum(walls) / 60:.1f} min"]
  return lines + [""]


def _pct(x: Optional[float]) -> str:
  return "—" if x is None or not math.isfinite(x) else f"{100 * x:.1f}"


def _paper_table3(study: Any, trials: Sequence[st.Trial]) -> list[str]:
  paper = study.analysis.get("paper_table3")
  batch = int(study.analysis.get("table3_batch", 0) or 0)
  if not paper or not batch:
    return []
  table = t3.build_table3(trials, batch, baseline_batch=int(study.analysis.baseline_batch))
  heads = list(table.columns)
  lines = ["### Table 3: measured / paper", "",
           "| solver | " + " | ".join(c if c.startswith("bs") else f"{t3.batch_label(batch)} {c}" for c in heads)
           + " |", "|---" * (len(heads) + 1) + "|"]
  for opt in [r for r in table.rows if r in paper] + sorted(set(paper) - set(table.rows)):
    ref = paper[opt]
    cells = [table.cells.get((opt, c)) for c in heads]
    lines.append(f"| {opt} | " + " | ".join(f"{c.text() if c else 'n/a'} / {r}" for c, r in zip(cells, ref))
                 + " |")
  return lines + [""]


def _paper_regimes(study: Any, trials: Sequence[st.Trial], baseline: Optional[rg.Baseline],
                   linear: Callable[[st.Trial], bool]) -> list[str]:
  paper = study.analysis.get("paper_regimes")
  points = study.analysis.get("paper_points") or ()
  if not paper and not points:
    return []
  lines = ["### Measured / paper", "", "| quantity | measured | paper |", "|---|---|---|"]
  if paper and baseline is not None:
    r = rg.classify_trials(baseline, [t for t in trials if linear(t)], trials)
    lines += [f"| baseline accuracy A (B0 = {baseline.batch_size}) | {_pct(baseline.accuracy)} | "
              f"{_pct(paper.get('accuracy'))} |",
              f"| B_L (largest batch passing Def. 2.1) | {rp._fmt(r.b_l)} (next tested fails: "
              f"{rp._fmt(r.b_l_next_fail)}) | {rp._fmt(paper.get('b_l'))} |",
              f"| B_H (largest batch any technique reaches 99.5%·A) | {rp._fmt(r.b_h)} (next tested fails: "
              f"{rp._fmt(r.b_h_next_fail)}) | {rp._fmt(paper.get('b_h'))} |"]
  for batch, opt, acc, what in points:
    got = [(_final_row(t) or {}).get(rp.ACC_KEY) for t in trials
           if t.batch_size == int(batch) and opt in ("any", t.optimizer) and t.status == "done"]
    got = [g for g in got if g is not None]
    lines.append(f"| {opt} at batch {batch}: best final accuracy ({what}) | {_pct(max(got)) if got else 'not run'} "
                 f"| {_pct(float(acc))} |")
  return lines + [""]


def write_study_report(workdir: str, out_dir: Optional[str] = None) -> str:
  """Writes ``out_dir`` (default ``<workdir>/report``)/README.md and PNGs for the study in ``workdir``."""
  study = runner.load_study_config(workdir)
  out_dir = out_dir or os.path.join(workdir, "report")
  a = study.get("analysis") or ml_collections.ConfigDict()
  con = st.open_store(runner.store_path(workdir))
  try:
    trials = st.trials(con, study=study.name)
  finally:
    con.close()
  linear = selector(a.get("linear_select") or ("optimizer.lr_scaling=linear",))
  baseline, note = baseline_from(a, study.base, trials, linear) if a.get("baseline_batch") else (None, "none")
  target = rp.Target(a.get("target_metric", rp.ACC_KEY), float(a.get("target_goal", 0.99)),
                     a.get("target_mode", "max"))
  table3_batch = int(a.get("table3_batch", 0) or 0) or None
  path = rp.write_report(trials, out_dir, target=target, baseline=baseline, linear_scaled=linear,
                         table3_batch=table3_batch, title=str(a.get("title") or f"Study {study.name}"))
  with open(path, encoding="utf-8") as f:
    body = f.read().split("\n")
  extra = _paper_table3(study, trials) + _paper_regimes(study, trials, baseline, linear)
  head, rest = body[:2], body[2:]  # title + blank line first
  text = head + _settings_section(study, workdir, trials, note) + rest
  if extra:
    text = [ln for ln in text] + ["## Measured vs the paper (You et al. 2020)", ""] + extra
  with open(path, "w", encoding="utf-8") as f:
    f.write("\n".join(text).rstrip() + "\n")
  return path
