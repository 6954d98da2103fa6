"""Training metrics, accumulated in one place between evaluations, and the gradient-noise-scale tracker.

:class:`MetricsWindow` takes each chunk's per-step metrics (host numpy) and gives the evaluation row's training part
(``train_loss``, ``train_accuracy``, ``grad_norm``, ``signal_to_noise``) and timing (``wall_time``,
``compile_time``, ``examples_per_sec``, ``step_time``); per-step scalars go to TensorBoard as ``step/...``.
:class:`NoiseScaleTracker` owns the EMAs and windows of the simple and preconditioned noise scales (McCandlish et al.
2018; Qiao et al. 2021; formulas in :mod:`lamb_lars.train.noise_scale`), the row's ``noise_scale``,
``noise_scale_precond`` and their ``_lo`` / ``_hi``, and the state it saves with each checkpoint.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from lamb_lars.train import noise_scale


class NoiseScaleTracker:
  """B_simple and B_precond from micro-batch (B/(D·k): one micro-batch of one device) and global (B) gradient norms,
  EMA-averaged, with a 95 % interval over windows of steps (formulas: :mod:`lamb_lars.train.noise_scale`).

  ``enabled`` by the run plan when its steps have ≥ 2 gradient samples (devices × micro-batches). A stage of a batch
  schedule with a single sample adds nothing; the averages carry over from stage to stage (B_simple does not depend
  on the batch, McCandlish et al. 2018 §2.2). ``preconditioned``: the step measures |P·g|² of an adaptive optimizer
  (``grad_sq_norm_small_precond``, ``grad_sq_norm_precond``); otherwise P = I and B_precond is B_simple. A step whose
  preconditioned norms are NaN while the plain ones are finite (P undefined: before the optimizer's first update) is
  left out of the preconditioned averages. ``window_steps`` W and ``windows`` K: the interval is over the last K
  complete windows of W steps each; both are NaN until two windows are complete.
  """

  KINDS = ("simple", "precond")

  def __init__(self, *, decay: float, enabled: bool, window_steps: int = 50, windows: int = 8, preconditioned=False):
    self.enabled, self.decay, self.preconditioned = bool(enabled), decay, bool(preconditioned)
    self.window_steps, self.windows = int(window_steps), int(windows)
    self.ema = {k: noise_scale.NoiseScaleState(0.0, 0.0, 0) for k in self.KINDS}
    self.win = {k: noise_scale.windows_init() for k in self.KINDS}

  @property
  def state(self) -> noise_scale.NoiseScaleState:
    """The B_simple EMA (as before the preconditioned estimate existed)."""
    return self.ema["simple"]

  def update(self, metrics: dict, batch_size: int, samples: int) -> None:
    """One chunk's steps, all at global batch ``batch_size`` split into ``samples`` gradient samples."""
    if not self.enabled or samples < 2:
      return
    small = np.asarray(metrics["grad_sq_norm_small"], np.float64)
    big = np.asarray(metrics["grad_norm"], np.float64) ** 2
    if self.preconditioned:
      small_p = np.asarray(metrics["grad_sq_norm_small_precond"], np.float64)
      big_p = np.asarray(metrics["grad_sq_norm_precond"], np.float64)
    else:
      small_p, big_p = small, big
    sizes = (batch_size / samples, batch_size)
    for j in range(len(small)):
      self._add("simple", small[j], big[j], *sizes)
      undefined = not (np.isfinite(small_p[j]) and np.isfinite(big_p[j])) and np.isfinite(small[j] + big[j])
      if not undefined:
        self._add("precond", small_p[j], big_p[j], *sizes)

  def _add(self, kind: str, small_sq: float, big_sq: float, b_small: float, b_big: float) -> None:
    with np.errstate(invalid="ignore", over="ignore"):  # a diverged step's inf − inf is NaN, the estimate's answer
      self.ema[kind] = noise_scale.update(self.ema[kind], small_sq, big_sq, b_small, b_big, self.decay)
      g2, trace = noise_scale.two_batch_estimates(small_sq, big_sq, b_small, b_big)
    self.win[kind] = noise_scale.windows_update(self.win[kind], g2, trace, self.window_steps, self.windows)

  def estimate(self, kind: str) -> tuple[float, float, float]:
    """(value, lo, hi) of the noise scale ``kind`` ('simple': B_simple, 'precond': B_precond): the EMA ratio and the
    95 % interval over the last windows (NaN where not available: disabled, or too few steps so far)."""
    if kind not in self.KINDS:
      raise ValueError(f"kind must be one of {self.KINDS}; got {kind!r}.")
    if not self.enabled:
      return (float("nan"),) * 3
    done = self.win[kind].done
    _, lo, hi = noise_scale.window_interval([d[0] for d in done], [d[1] for d in done])
    return float(noise_scale.b_simple(self.ema[kind])), lo, hi

  def value(self) -> dict:
    """The evaluation row's keys: noise_scale[_lo, _hi], noise_scale_precond[_lo, _hi] (nothing when disabled); a
    value not available yet (NaN) is None, so that a row read back from JSON equals the row written."""
    if not self.enabled:
      return {}
    out = {}
    for kind, key in (("simple", "noise_scale"), ("precond", "noise_scale_precond")):
      value, lo, hi = (v if np.isfinite(v) else None for v in self.estimate(kind))
      out.update({key: value, f"{key}_lo": lo, f"{key}_hi": hi})
    return out

  def state_dict(self) -> dict:
    """Exact as JSON (Python floats): a resumed run continues the averages and windows bit for bit."""
    return {
      k: {
        "ema": [float(self.ema[k].g2), float(self.ema[k].trace), int(self.ema[k].count)],
        "window": [float(self.win[k].g2_sum), float(self.win[k].trace_sum), int(self.win[k].steps)],
        "done": [[float(g), float(t)] for g, t in self.win[k].done],
      }
      for k in self.KINDS
    }

  def load_state_dict(self, saved: Any) -> None:
    """A checkpoint's state; a list is the format before B_precond (the B_simple EMA only; the rest starts anew)."""
    if not saved:
      return
    if isinstance(saved, list):
      self.ema["simple"] = noise_scale.NoiseScaleState(*saved)
      return
    for k in self.KINDS:
      if k in saved:
        self.ema[k] = noise_scale.NoiseScaleState(*saved[k]["ema"])
        g2, trace, steps = saved[k]["window"]
        self.win[k] = noise_scale.Windows(g2, trace, int(steps), tuple((g, t) for g, t in saved[k]["done"]))


class MetricsWindow:
  """Per-step training metrics and throughput since the last evaluation; compilation is counted apart."""

  def __init__(self, train_time: float = 0.0):
    self.train_time, self.compile_time = float(train_time), 0.0
    self.reset()

  def reset(self) -> None:
    self.values: dict[str, list] = {"train_loss": [], "train_accuracy": [], "grad_norm": [], "signal_to_noise": []}
    self.time, self.examples, self.steps = 0.0, 0, 0

  def add_time(self, seconds: float, steps: int, batch_size: int) -> None:
    """``steps`` at global batch ``batch_size`` trained in ``seconds`` of wall time (compilation excluded:
    :meth:`add_compile`)."""
    self.train_time += seconds
    self.time += seconds
    self.examples += steps * batch_size
    self.steps += steps

  def add_compile(self, seconds: float) -> None:
    """Compilation, timed on its own (``.lower().compile()``): training time, but not throughput."""
    self.train_time += seconds
    self.compile_time += seconds

  def add(self, metrics: dict) -> None:
    for key, values in self.values.items():
      if key in metrics:
        values.extend(np.asarray(metrics[key]).tolist())

  def state_dict(self) -> dict:
    """What a checkpoint between two evaluations keeps, so that a resumed run's next row equals an uninterrupted
    run's: the per-step values since the last evaluation (exact as JSON: float32 values are exact float64s) and the
    throughput counters."""
    return {
      "values": {k: list(v) for k, v in self.values.items()},
      "time": self.time,
      "examples": self.examples,
      "steps": self.steps,
    }

  def load_state_dict(self, saved: Optional[dict]) -> None:
    if saved:
      self.values = {k: list(saved["values"].get(k, [])) for k in self.values}
      self.time, self.examples, self.steps = float(saved["time"]), int(saved["examples"]), int(saved["steps"])

  def summary(self) -> dict:
    """The row's training statistics and timing; then starts a new window."""
    v = self.values
    out = {
      "train_loss": float(np.mean(v["train_loss"])),
      "train_accuracy": float(np.mean(v["train_accuracy"])),
      "grad_norm": float(np.mean(v["grad_norm"])),
    }
    if v["signal_to_noise"]:
      out["signal_to_noise"] = float(np.mean(v["signal_to_noise"]))
    out.update(
      wall_time=self.train_time,
      compile_time=self.compile_time,
      examples_per_sec=self.examples / self.time if self.time else float("nan"),
      step_time=self.time / self.steps if self.steps else float("nan"),
    )
    self.reset()
    return out


def step_scalars(first_step: int, metrics: dict, lrs: np.ndarray) -> list[tuple[int, dict[str, Any]]]:
  """(step, scalars) for TensorBoard of each step in a chunk; ``first_step`` is the 1-based number of its first."""
  return [
    (
      first_step + j,
      {
        "step/train_loss": float(metrics["train_loss"][j]),
        "step/lr": float(lrs[j]),
        "step/grad_norm": float(metrics["grad_norm"][j]),
        "step/grad_norm_small_rms": float(np.sqrt(metrics["grad_sq_norm_small"][j])),
      },
    )
    for j in range(len(metrics["train_loss"]))
  ]
