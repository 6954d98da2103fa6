"""Markdown helpers of the study report (report layer): number formatting and tables."""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence


def fmt(x: Any, digits: int = 4) -> str:
  if x is None:
    return "—"
  if isinstance(x, float):
    return "∞" if math.isinf(x) else f"{x:.{digits}g}"
  return str(x)


def table(head: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
  return (
    ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    + ["| " + " | ".join(fmt(c) for c in r) + " |" for r in rows]
    + [""]
  )


def pct(x: Optional[float], digits: int = 2) -> str:
  return "—" if x is None or not math.isfinite(x) else f"{100 * x:.{digits}f}"
