"""Our runs of the authors' MNIST configurations against their training logs (You et al. 2020), as a pure function
of the published CSV rows: the comparison table and the README text (analysis layer).

``runs.csv`` has one row per run of ours (``config, learning_rate, seed, status, step, eval_accuracy,
train_time_s, microbatch_loop``; ``learning_rate`` is empty for the configuration's own LR, else a run of the
response-surface slice; ``microbatch_loop`` is how the run looped over its micro-batches, the same sums either way).
The authors' side is :data:`lamb_lars.proj.you2020.paper.AUTHORS` and
:data:`~lamb_lars.proj.you2020.paper.LARS_FULL_BATCH_SLICE`.

The verdict per configuration (:func:`lamb_lars.study.analysis.replicates.agreement`) compares our 95% t interval
over seeds with their mean ± a tolerance: 0.3 percentage points at batches up to 8K (the resolution of the paper's
tables) and 1.0 point at the full batch, where their own repeats spread by about that much. A configuration with a
diverged or unfinished seed, or fewer than two seeds, is ``inconclusive``.

At the full batch each logged result is one run of an LR × warmup sweep with one run per point, so ``neighbours``
also places it, and our seeds, among the authors' other runs near it
(:data:`~lamb_lars.proj.you2020.paper.AUTHORS_NEIGHBOURS`).
"""

from __future__ import annotations

from typing import Mapping, Optional, Sequence

import numpy as np

from lamb_lars.proj.you2020 import paper
from lamb_lars.study.analysis import replicates

RUNS_COLUMNS = ["config", "learning_rate", "seed", "status", "step", "eval_accuracy", "train_time_s", "microbatch_loop"]
AUTHORS_COLUMNS = ["config", "log_file", "eval_accuracy"]


def authors_rows() -> list[list[str]]:
  """authors.csv: one row per log of theirs (the configurations, then the slice)."""
  rows = [[name, file, f"{acc:.4f}"] for name, logged in paper.AUTHORS.items() for file, acc in logged.runs.items()]
  rows += [
    [
      f"{paper.SLICE_CONFIG}@lr{lr:g}",
      f"momentum_lars/log/batch-60000-lr-{lr}-warmup-9-poly-0.5-2019-03-07-*.log",
      f"{acc:.4f}",
    ]
    for lr, acc in paper.LARS_FULL_BATCH_SLICE.items()
  ]
  return rows


def _accuracy(row: Mapping[str, str]) -> Optional[float]:
  return float(row["eval_accuracy"]) if row["status"] == "done" and row["eval_accuracy"] else None


def _own_runs(runs: Sequence[Mapping[str, str]], name: str) -> list[Mapping[str, str]]:
  """The runs of configuration ``name`` at its own LR (not the slice's)."""
  return [r for r in runs if r["config"] == name and not r["learning_rate"]]


def comparison(runs: Sequence[Mapping[str, str]]) -> list[dict]:
  """One row per configuration: theirs, ours per seed, our summary, the difference of means, the verdict."""
  out = []
  for name, logged in paper.AUTHORS.items():
    mine = _own_runs(runs, name)
    accs = [a for a in map(_accuracy, mine) if a is not None]
    s = replicates.summarise(accs)
    complete = bool(mine) and len(accs) == len(mine)
    verdict = replicates.agreement(s, logged.mean, logged.tolerance / 100.0) if complete else "inconclusive"
    out.append(
      dict(
        config=name,
        theirs=sorted(logged.runs.values()),
        their_mean=logged.mean,
        ours=mine,
        summary=s,
        diff=None if s.mean is None else s.mean - logged.mean,
        tolerance=logged.tolerance,
        verdict=verdict if mine else "not run",
      )
    )
  return out


def _pct(x: Optional[float]) -> str:
  return "—" if x is None else f"{100 * x:.2f}"


def _ours_cell(rows: Sequence[Mapping[str, str]]) -> str:
  return (
    ", ".join(
      f"{_pct(_accuracy(r))} (seed {r['seed']}{'' if r['status'] == 'done' else ', ' + r['status']})" for r in rows
    )
    or "not run yet"
  )


def neighbours(runs: Sequence[Mapping[str, str]]) -> list[dict]:
  """Per full-batch configuration: the authors' other runs of its optimizer near it (paper.AUTHORS_NEIGHBOURS), the
  rank of their logged run among them (1 = the best), and each of our seeds' share of their runs below it."""
  out = []
  for name, near in paper.AUTHORS_NEIGHBOURS.items():
    theirs = sorted(near.runs.values(), reverse=True)
    logged = paper.AUTHORS[name].mean
    ours = [a for a in map(_accuracy, _own_runs(runs, name)) if a is not None]
    lrs, warmups = sorted({lr for lr, _ in near.runs}), sorted({w for _, w in near.runs})
    where = f"LR {lrs[0]:g}" + (f"–{lrs[-1]:g}" if len(lrs) > 1 else "") + f", warmup {warmups[0]}–{warmups[-1]}"
    out.append(
      dict(
        config=name,
        logs=near.logs,
        where=where,
        runs=theirs,
        n=len(theirs),
        mean=float(np.mean(theirs)),
        sd=float(np.std(theirs, ddof=1)),
        logged=logged,
        rank=1 + sum(a > logged for a in theirs),
        ours=[(a, float(np.mean([t < a for t in theirs]))) for a in ours],
      )
    )
  return out


# The repository paths a README names (its links and sources). A manifest records the ones its README was computed
# with (``paths``); one reported before this project had its folder (issue 39) names none and used LEGACY_PATHS.
PATHS = dict(
  configs="lamb_lars/proj/you2020/configs",
  authors_logs="lamb_lars/proj/you2020/authors_logs.py",
  paper="lamb_lars/proj/you2020/paper.py",
)
LEGACY_PATHS = dict(
  configs="configs/paper", authors_logs="lamb_lars/study/analysis/authors_logs.py", paper="lamb_lars/study/paper.py"
)


def neighbours_lines(runs: Sequence[Mapping[str, str]], paths: Mapping[str, str] = PATHS) -> list[str]:
  lines = [
    "",
    "## Their logged full-batch runs among their other runs near them",
    "",
    "At the full batch the authors swept LR × warmup with one run each, and the configuration they logged as "
    "the result is one of those runs. Here: their runs of the same optimizer at batch 60,000 near it "
    f"(`{paths['paper']}` AUTHORS_NEIGHBOURS, transcribed in docs/authors_full_batch_logs.md), the "
    "rank of their logged run among them (1 = the best), and where each of our seeds falls (the share of "
    "their runs below it).",
    "",
    "| configuration | their runs near it | n | mean ± sd | range | their logged run: accuracy, rank | "
    "ours: accuracy (share of theirs below) |",
    "|---|---|---|---|---|---|---|",
  ]
  for r in neighbours(runs):
    ours = ", ".join(f"{_pct(a)} ({100 * q:.0f}%)" for a, q in r["ours"]) or "not run yet"
    lines.append(
      f"| {r['config']} | {r['where']}: `{r['logs']}` | {r['n']} | "
      f"{_pct(r['mean'])} ± {100 * r['sd']:.2f} | "
      f"{_pct(min(r['runs']))}–{_pct(max(r['runs']))} | {_pct(r['logged'])}, {r['rank']} of {r['n']} | "
      f"{ours} |"
    )
  return lines


def render(runs: Sequence[Mapping[str, str]], command: str, paths: Mapping[str, str] = PATHS) -> str:
  """The README of the published comparison, from runs.csv's rows, the report command and the repository paths it
  names (``paths``: PATHS, or the manifest's) alone."""
  lines = [
    "# The authors' MNIST configurations, run by us, against their training logs",
    "",
    f"Computed by `{paths['authors_logs']}` from `runs.csv` (our runs) and `authors.csv` (their",
    "logs in GitHub fastalgo/mnist_tpu); `python -m lamb_lars.study verify` recomputes it. Accuracies are final",
    "test accuracies in %, on the 10,000 test images after the configuration's full number of steps. Ours:",
    "mean ± sd [95% t interval] over seeds; the verdict compares that interval with their mean ± the tolerance",
    "(agrees / differs / inconclusive); a configuration with fewer than two finished seeds is inconclusive.",
    "",
    f"Command: `{command}`",
    "",
    "| configuration | theirs (each log) | their mean | ours (each seed) | ours: mean ± sd [95% CI] | "
    "ours − theirs | tolerance | verdict |",
    "|---|---|---|---|---|---|---|---|",
  ]
  for r in comparison(runs):
    diff = "—" if r["diff"] is None else f"{100 * r['diff']:+.2f}"
    summary = r["summary"].text() if r["ours"] else "—"
    lines.append(
      f"| [{r['config']}](../../../{paths['configs']}/{r['config']}.py) | "
      f"{', '.join(_pct(a) for a in r['theirs'])} | {_pct(r['their_mean'])} | {_ours_cell(r['ours'])} | "
      f"{summary} | {diff} | ±{r['tolerance']:.1f} | {r['verdict']} |"
    )
  lines += neighbours_lines(runs, paths)
  ours_slice: dict[float, list] = {}
  for r in runs:
    if r["config"] == paper.SLICE_CONFIG:  # the configuration's own runs are its points at its own LR
      lr = float(r["learning_rate"]) if r["learning_rate"] else paper.SLICE_CONFIG_LR
      ours_slice.setdefault(lr, []).append(_accuracy(r))
  lines += [
    "",
    f"## A slice of their response surface: {paper.SLICE_CONFIG} (LARS, full batch, warmup 9) against the LR",
    "",
    "Theirs: one run per LR. Ours: each seed's final test accuracy (a diverged run shows as —); "
    f"at LR {paper.SLICE_CONFIG_LR:g} they are the runs of {paper.SLICE_CONFIG} in the table above.",
    "",
    "| LR | theirs | ours |",
    "|---|---|---|",
  ]
  for lr in sorted(set(paper.LARS_FULL_BATCH_SLICE) | set(ours_slice)):
    mine = ", ".join(_pct(a) for a in ours_slice.get(lr, [])) or "not run"
    lines.append(f"| {lr:g} | {_pct(paper.LARS_FULL_BATCH_SLICE.get(lr))} | {mine} |")
  return "\n".join(lines) + "\n"
