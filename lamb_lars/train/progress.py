"""Training progress wherever the run is watched: a tqdm bar on a terminal, a ``tqdm.auto`` widget bar in a
notebook (Jupyter, Colab; needs ipywidgets), and otherwise (``nohup`` logs, CI, a notebook without ipywidgets)
one line every ``every_s()`` seconds (60, or ``$LAMB_LARS_PROGRESS_EVERY_S``; an environment setting, not a config
key, so that recorded study configs stay valid)::

  progress: step 1200/9380 (12.8%)  epoch 2.56  41,200 ex/s  ETA 3m12s  loss 0.1234

Examples/s and the ETA count wall time from the end of the first chunk of steps (which includes compilation)
and include evaluations and checkpoints: they say when the run will end, not how fast one step is
(``perf/examples_per_sec`` in the metrics is the training throughput alone).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Callable, Optional, TextIO


def duration(seconds: Optional[float]) -> str:
  """``41s``, ``4m05s``, ``1h12m`` (``?`` when unknown)."""
  if seconds is None or seconds != seconds or seconds < 0 or seconds == float("inf"):
    return "?"
  s = int(round(seconds))
  if s < 60:
    return f"{s}s"
  if s < 3600:
    return f"{s // 60}m{s % 60:02d}s"
  return f"{s // 3600}h{(s % 3600) // 60:02d}m"


EVERY_S_ENV = "LAMB_LARS_PROGRESS_EVERY_S"


def every_s() -> float:
  """Seconds between progress lines without a bar: ``$LAMB_LARS_PROGRESS_EVERY_S`` or 60."""
  return float(os.environ.get(EVERY_S_ENV) or 60.0)


def in_notebook() -> bool:
  """Whether this process is a Jupyter/Colab kernel (tqdm.autonotebook's test)."""
  return "ipykernel.zmqshell" in sys.modules


def _has_widgets() -> bool:
  try:
    import ipywidgets  # noqa: F401

    return True
  except ImportError:
    return False


class Progress:
  """``update(k, loss)`` after every chunk of ``k`` steps; ``close()`` at the end. ``mode``: 'bar' (tqdm),
  'widget' (tqdm.auto in a notebook), 'lines' (periodic lines) or 'off'; default chosen from the stream."""

  def __init__(
    self,
    *,
    total: int,
    initial: int,
    batch_size: int,
    epoch_of: Callable[[int], float],
    every_s: float,
    enabled: bool = True,
    stream: TextIO = sys.stdout,
    mode: Optional[str] = None,
    clock: Callable[[], float] = time.monotonic,
  ):
    self.total, self.step, self.batch_size, self.epoch_of = int(total), int(initial), int(batch_size), epoch_of
    self.every_s, self.stream, self.clock = float(every_s), stream, clock
    if mode is None:
      if not enabled:
        mode = "off"
      elif in_notebook() and _has_widgets():
        mode = "widget"
      elif getattr(stream, "isatty", lambda: False)():
        mode = "bar"
      else:
        mode = "lines" if self.every_s > 0 else "off"
    self.mode = mode
    self._bar = None
    if mode in ("bar", "widget"):
      if mode == "widget":
        from tqdm.auto import tqdm
      else:
        from tqdm import tqdm
      self._bar = tqdm(total=self.total, initial=self.step, unit="step", dynamic_ncols=True, file=stream)
    self._start: Optional[tuple[float, int]] = None  # (time, step) at the end of the first chunk
    self._last_line = self.clock()

  def retarget(self, total: int, epoch_of: Callable[[int], float]) -> None:
    """A new length (an adaptive batch changed the run's steps)."""
    self.total, self.epoch_of = int(total), epoch_of
    if self._bar is not None:
      self._bar.total = self.total
      self._bar.refresh()

  def update(self, k: int, loss: Optional[float] = None) -> None:
    self.step += int(k)
    if self._bar is not None:
      self._bar.update(k)
      if loss is not None:
        self._bar.set_postfix(loss=f"{loss:.4f}")
      return
    if self.mode != "lines":
      return
    now = self.clock()
    if self._start is None:
      self._start = (now, self.step)
    if now - self._last_line >= self.every_s:
      self._last_line = now
      print(self.line(now, loss), file=self.stream, flush=True)

  def line(self, now: float, loss: Optional[float] = None) -> str:
    """``progress: step s/N (p%)  epoch e  R ex/s  ETA T  loss l``."""
    parts = [
      f"progress: step {self.step}/{self.total} ({100 * self.step / max(1, self.total):.1f}%)",
      f"epoch {self.epoch_of(self.step):.2f}",
    ]
    rate = None
    if self._start is not None and now > self._start[0] and self.step > self._start[1]:
      rate = (self.step - self._start[1]) / (now - self._start[0])  # steps per second
      parts.append(f"{rate * self.batch_size:,.0f} ex/s")
    parts.append(f"ETA {duration((self.total - self.step) / rate if rate else None)}")
    if loss is not None:
      parts.append(f"loss {loss:.4f}")
    return "  ".join(parts)

  def write(self, msg: str) -> None:
    """A message that does not break the bar."""
    if self._bar is not None:
      self._bar.write(msg, file=self.stream)
    else:
      print(msg, file=self.stream, flush=True)

  def close(self) -> None:
    if self._bar is not None:
      self._bar.close()
