"""Batch-size studies: the results store and pure analyses over it (no training, no flags, notebook-friendly).

Modules, one concept each:
  store            SQLite results store (runs, per-eval metrics) and ``Trial`` records for analysis.
  steps_to_target  Shallue et al. 2018: fewest steps (epochs, wall-clock) to a goal, per batch size.
  critical_batch   S(B) = S_min·(1 + B_crit/B) fit, T(B) = S(B)·t(B), B*, Golmant et al. 2018 breakdown point.
  regimes          You et al. 2020 Definitions 2.1–2.3: B_L, B_H, B_F and a label per batch size.
  table3           You et al. 2020 Table 3: accuracy / 'diverge' / 'unstable' per optimizer × variant.
  plots            The report's PNG figures (matplotlib object API, no pyplot).
  report           Markdown report with PNG plots.
The gradient noise scale and signal-to-noise ratio, measured in the train step, live in lamb_lars.noise_scale.
See docs/studies.md for the definitions.
"""
