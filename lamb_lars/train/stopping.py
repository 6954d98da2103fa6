"""When a run ends before its step budget: a target reached, a run stuck at chance level, a non-finite loss.

Checked at every evaluation (``config.stop``); the first rule that fires ends the run and is recorded in
``result.json`` as ``stopped``:

* ``'target'`` (status ``done``): the evaluation's ``stop.target_metric`` meets ``stop.target_goal`` (≥ for
  ``target_mode='max'``, ≤ for ``'min'``). Steps-to-target studies need only the first hit (Shallue et al. 2018,
  "Measuring the Effects of Data Parallelism on Neural Network Training").
* ``'dead'`` (status ``diverged``): at an evaluation at or after max(``dead_after_fraction`` · T, W) steps (T total,
  W warmup), the test accuracy of the last ``dead_evals`` evaluations (all of them, if there are fewer) is at most
  the chance-level threshold (:func:`chance_threshold`): the run never left chance level, or fell back to it and
  stayed. One evaluation at chance (a dip) does not stop a run.
* ``'nonfinite'`` (status ``diverged``): a training loss is NaN or ±inf (checked after every step, not only at an
  evaluation; see :func:`first_nonfinite`).

A run that trains its whole budget is also judged at its end (:func:`not_learning`): it is recorded with status
``diverged``, ``stopped`` null and ``not_learning`` naming the reason, never as a plain ``done``:

* ``'exploding_loss'``: the last row's training loss is finite but above ``EXPLODING_FACTOR`` (10³) × ln C, the
  cross-entropy of a uniform guess over C classes, where a freshly initialised classifier starts (2,303 for 10
  classes): the updates are too large and the loss ran away without reaching NaN (LAMB at a momentum LR).
* ``'chance_accuracy'``: after at least one epoch, the final test accuracy is at most the chance-level threshold
  (:func:`chance_threshold`, 32.5% for 10 classes; ``stop.dead_accuracy`` when set). Not for ``dataset='synthetic'``,
  whose held-out labels are random: its test accuracy is chance by construction.

The recent accuracies are state: :class:`StopRules` saves them with each checkpoint, so a resumed run stops exactly
where an uninterrupted one does.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import numpy as np

from lamb_lars.errors import ConfigError

TARGET_METRICS = (
  "eval_accuracy",
  "eval_loss",
  "validation_accuracy",
  "validation_loss",
  "train_accuracy",
  "train_loss",
)
MODES = ("max", "min")


def chance_threshold(num_classes: int) -> float:
  """1/C + ¼·(1 − 1/C): a quarter of the way from chance accuracy (1/C) to perfect accuracy (1).

  A run whose test accuracy never gets past this point has not left chance level (32.5% for 10 classes, 25.075%
  for 1,000); You et al. 2020 (Table 3) report such runs as diverged. The same threshold serves the trainer's
  early "dead run" stop and the study's Table 3 verdict.
  """
  c = float(num_classes)
  return 1.0 / c + 0.25 * (1.0 - 1.0 / c)


EXPLODING_FACTOR = 1e3  # a finite training loss above this × ln C is an exploding loss (not_learning)


def not_learning(
  row: Optional[dict], num_classes: int, epochs: float, threshold: Optional[float] = None, random_labels: bool = False
) -> Optional[tuple[str, str]]:
  """(reason, one sentence) when a run that trained its budget ends not learning (module docstring), else None.

  ``row``: the run's last evaluation row; ``epochs``: the epochs it trained; ``threshold``: the chance level
  (default :func:`chance_threshold`); ``random_labels``: held-out labels are random (synthetic data), so accuracy
  is not judged.
  """
  if not row:
    return None
  loss, acc = row.get("train_loss"), row.get("eval_accuracy")
  limit = EXPLODING_FACTOR * float(np.log(max(int(num_classes), 2)))
  if loss is not None and np.isfinite(loss) and loss > limit:
    return "exploding_loss", (
      f"not learning: the training loss {loss:.3g} is finite but above {limit:.4g} "
      f"({EXPLODING_FACTOR:g} × ln {num_classes}, the loss of a uniform guess); lower the "
      f"learning rate"
    )
  threshold = chance_threshold(num_classes) if threshold is None or threshold < 0 else threshold
  if acc is not None and epochs >= 1.0 and not random_labels and (not np.isfinite(acc) or acc <= threshold):
    return "chance_accuracy", (
      f"not learning: the final eval accuracy {100 * acc:.2f}% is at chance level "
      f"(≤ {100 * threshold:.2f}% for {num_classes} classes) after {epochs:.1f} epochs"
    )
  return None


@dataclasses.dataclass(frozen=True)
class Stop:
  """Why a run ended early: ``stopped`` ∈ {'target', 'dead', 'nonfinite'}, its ``status`` and an ``error`` sentence."""

  stopped: str
  status: str
  error: Optional[str] = None


def first_nonfinite(losses: np.ndarray) -> Optional[int]:
  """Index of the first non-finite entry of ``losses``, or None."""
  bad = np.flatnonzero(~np.isfinite(np.asarray(losses, np.float64)))
  return int(bad[0]) if bad.size else None


def validate(config: Any) -> None:
  """ConfigError naming the first bad ``config.stop`` key."""
  s = config.stop
  if s.target_metric and s.target_metric not in TARGET_METRICS:
    raise ConfigError(f"config.stop.target_metric={s.target_metric!r} must be '' or one of {TARGET_METRICS}.")
  from lamb_lars import input_pipeline  # noqa: PLC0415  (a user loader may bring its own validation split)

  if s.target_metric.startswith("validation_") and not input_pipeline.has_validation(config):
    raise ConfigError(f"config.stop.target_metric={s.target_metric!r} needs config.validation_split > 0.")
  if s.target_mode not in MODES:
    raise ConfigError(f"config.stop.target_mode={s.target_mode!r} must be 'max' or 'min'.")
  if not 0.0 <= s.dead_after_fraction <= 1.0:
    raise ConfigError(f"config.stop.dead_after_fraction={s.dead_after_fraction} must be in [0, 1] (0 = off).")
  if int(s.dead_evals) < 1:
    raise ConfigError(f"config.stop.dead_evals={s.dead_evals} must be at least 1.")
  if not s.dead_accuracy < 1.0:
    raise ConfigError(f"config.stop.dead_accuracy={s.dead_accuracy} must be < 1 (negative = derived from chance).")


class StopRules:
  """The ``config.stop`` rules of one run, with the recent test accuracies (checkpointed state)."""

  def __init__(self, config: Any, *, total_steps: int, warmup_steps: int, epoch_of=lambda step: float(step)):
    s = config.stop
    self.metric, self.goal, self.mode = s.target_metric, float(s.target_goal), s.target_mode
    fraction = float(s.dead_after_fraction)
    self.dead_from = max(int(np.ceil(fraction * total_steps - 1e-9)), int(warmup_steps)) if fraction > 0 else None
    given = float(s.dead_accuracy)
    self.threshold = given if given >= 0 else chance_threshold(int(config.num_classes))
    self.num_recent = int(s.dead_evals)
    self.total_steps, self.epoch_of = total_steps, epoch_of
    self.recent: list[float] = []

  def state_dict(self) -> dict:
    return {"recent_eval_accuracy": list(self.recent)}

  def load_state_dict(self, state: Optional[dict]) -> None:
    self.recent = [float(a) for a in (state or {}).get("recent_eval_accuracy", [])][-self.num_recent :]

  def check(self, step: int, row: dict) -> Optional[Stop]:
    """The rule that ends the run at the evaluation ``row`` of ``step``, or None to go on."""
    acc = row.get("eval_accuracy")
    if acc is not None:
      self.recent = (self.recent + [float(acc) if np.isfinite(acc) else 0.0])[-self.num_recent :]
    if self.metric and self.metric in row:
      value = float(row[self.metric])
      if (value >= self.goal) if self.mode == "max" else (value <= self.goal):
        return Stop("target", "done")
    if self.dead_from is not None and step >= self.dead_from and self.recent and max(self.recent) <= self.threshold:
      return Stop(
        "dead",
        "diverged",
        f"no progress off chance level: the last {len(self.recent)} eval accuracies are ≤ "
        f"{100 * self.threshold:.2f}% (latest {100 * self.recent[-1]:.2f}%) after "
        f"{self.epoch_of(step):.1f} of {round(self.epoch_of(self.total_steps), 1):g} epochs",
      )
    return None
