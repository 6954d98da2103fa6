"""Training metrics, accumulated in one place between evaluations, and the gradient-noise-scale tracker.

:class:`MetricsWindow` takes each chunk's per-step metrics (host numpy) and gives the evaluation row's training part
(``train_loss``, ``train_accuracy``, ``grad_norm``, ``signal_to_noise``, ``noise_scale``) and timing (``wall_time``,
``compile_time``, ``examples_per_sec``, ``step_time``); per-step scalars go to TensorBoard as ``step/...``.
:class:`NoiseScaleTracker` owns the EMA of the simple noise scale (McCandlish et al. 2018; formulas in
:mod:`lamb_lars.train.noise_scale`) and the state it saves with each checkpoint.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from lamb_lars.train import noise_scale


class NoiseScaleTracker:
  """B_simple from micro-batch (B/(D·k): one micro-batch of one device) and global (B) gradient norms, EMA-averaged;
  ``enabled`` by the run plan when its steps have ≥ 2 gradient samples (devices × micro-batches). A stage of a batch
  schedule with a single sample adds nothing; the EMA carries over from stage to stage (B_simple does not depend on
  the batch, McCandlish et al. 2018 §2.2)."""

  def __init__(self, *, decay: float, enabled: bool):
    self.enabled, self.decay = bool(enabled), decay
    self.state = noise_scale.NoiseScaleState(0.0, 0.0, 0)

  def update(self, metrics: dict, batch_size: int, samples: int) -> None:
    """One chunk's steps, all at global batch ``batch_size`` split into ``samples`` gradient samples."""
    if not self.enabled or samples < 2:
      return
    small = np.asarray(metrics["grad_sq_norm_small"], np.float64)
    big = np.asarray(metrics["grad_norm"], np.float64) ** 2
    for small_sq, big_sq in zip(small, big):
      self.state = noise_scale.update(self.state, small_sq, big_sq, batch_size / samples, batch_size, self.decay)

  def estimate(self, kind: str) -> tuple[float, float, float]:
    """(value, lo, hi) of the noise scale ``kind``: 'simple' (B_simple; no interval yet: lo = hi = NaN) or
    'precond' (not measured here: NaN). All NaN when the tracker is off."""
    nan = float("nan")
    if kind == "simple" and self.enabled:
      return float(noise_scale.b_simple(self.state)), nan, nan
    return nan, nan, nan

  def value(self) -> dict:
    return {"noise_scale": float(noise_scale.b_simple(self.state))} if self.enabled else {}

  def state_dict(self) -> list:
    return [float(self.state.g2), float(self.state.trace), int(self.state.count)]

  def load_state_dict(self, saved: Optional[list]) -> None:
    if saved:
      self.state = noise_scale.NoiseScaleState(*saved)


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
