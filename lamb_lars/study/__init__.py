"""Batch-size studies, in layers; each imports only from the layers below it (tests/test_layout.py checks it):
records < analysis < report < publishing, and running < publishing (running and report do not import each other).

records (what every layer reads: records.py at this level)
  records          one ``Trial``, ``Target``, ``Baseline``, the variants, statuses, roles, the chance threshold
analysis/ (pure functions of records; notebook-friendly)
  steps_to_target  Shallue et al. 2018: fewest steps to a goal per batch size
  critical_batch   S(B) = S_min·(1 + B_crit/B), T(B) = S(B)·t(B), B*, Golmant et al. 2018 breakdown point
  regimes          You et al. 2020 Definitions 2.1–2.3: B_L, B_H, B_F from tagged trials
  baseline         the baseline's A and ξ (Defs 2.1–2.2's references), over its seeds
  reach            Def. 2.2 at one batch from the chosen configuration's seeds; label/verdict cautions
  verdict          pass / fail / borderline of per-seed values (or one run ± a tolerance) against a threshold
  noise_trajectory McCandlish et al. 2018 B_simple per phase of training, non-finite evaluations counted
  selection        a cell's chosen configuration, on the validation split only
  replicates       fresh seeds of the chosen configuration: mean, sd, t interval, agrees/differs, censored steps
  scaling_fit      S(B) fitted per seed with misses as lower bounds; bootstrap over seeds, leave one batch out
  search_adequacy  a cell's best LR interior or at an edge, its full-budget trials, the ranges searched
  batch_warmup     batch-size warmup arms against the fixed base batch: non-inferiority, step ratio, steps to a*
report/ (the README.md and PNGs of a published folder, rendered from the analysis)
  report           the report, composed from its sections and written once; report_scaling (steps to target,
                   B_crit, noise scale), report_curves (accuracy, curves, diffusion, trust ratios),
                   report_replicates (search adequacy, replicate intervals, per-seed B_crit), report_branching
                   (CBS(t)) and report_batch_warmup hold sections
  reference        the published numbers and sections beside a study's, from the module its config names
                   (e.g. lamb_lars.proj.you2020.reference: the paper's tables, its Table 3 sections)
  plots, markdown  PNG figures; markdown formatting
running/ (orchestration: processes, files, the search)
  sections         the study's settings sections, their one source of defaults lamb_lars/configs/studies/common.py
  sweep            study config → tagged trials (grids, quasi-random searches); one-sentence validation
  trial_checks     every trial through the trainer's validator, on the devices it will see
  search           Optuna: quasi-random points, the ASHA pruner per cell; search_log: replayed from the store's log
  store, workdir   the SQLite results store (the system of record) and the workdir layout
  executor         where trials run (local processes; the one trial-spawning helper)
  runner, driver   run_study (waves of trials, then follow-ups) and the trials in flight (poll, prune, record)
  status           the study's status line, a trial's progress line, the failures
  phases           after a cell's search: LR range extensions, promotions to the full budget, replicates
  ray_executor     trials as Ray tasks (ray_cluster: connecting and sizing)
  run_one          one trial in its own process
  snapshot         a study without most of its checkpoints, to resume elsewhere
publishing/ (a workdir → a published folder; reads running's store)
  csv_tables       runs.csv / evals.csv written from the store and read back as Trials
  publish          ``study report``: the CSVs, the report recomputed from them, the manifest
  manifest         manifest.json: code state, commands, hashes, counts, report settings
  provenance       ``verify`` (hashes, counts, the README recomputed) and ``rereport`` (the README recomputed from
                   the folder's CSVs after the analysis changed)
  claims           the numbers a discussion quotes, checked against the data
  preregistration  the commit of a study's config at its first run (its thresholds)
  workload_provenance  sha256 of the user modules a study config names
The code's commit, the machine and file hashes that both running and publishing record: lamb_lars/common/code_state.py.
A run dir's files (the trainer ↔ runner contract) are named and read in lamb_lars/common/run_files.py.
Definitions: docs/studies.md. A paper's own code (its numbers, Table 3, the runs against the authors' logs) lives in
its project folder, lamb_lars/proj/you2020/, which imports this package and is imported by nothing here.
"""
