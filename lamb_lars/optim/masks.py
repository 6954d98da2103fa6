"""Parameter masks from regular expressions over '/'-joined Flax parameter paths.

A path joins the keys from the root of the param tree (the dict under ``'params'``) to a leaf with '/', e.g.
``conv1/kernel``, ``fc1/bias``, ``layer1_0/bn1/scale``. A pattern matches a path when ``re.search`` finds it.

Trust ratios and weight decay are usually skipped for biases and for BatchNorm / LayerNorm scale and offset
(TF-TPU LARS skip list ``batch_normalization``, ``bias``; docs/science.md §3). Flax names those leaves ``bias`` and
``scale`` (Haiku: ``offset``), so the default exclusion is a leaf *named* bias, scale or offset.

Masks follow optax's convention: a tree of booleans with the structure of the params, True where the transformation
applies. The functions here return callables ``params -> bool tree`` so that they work for any param tree, inside
``jit`` (paths are static) and with ``optax.masked``.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Sequence, Union

import jax
from jax import tree_util

Patterns = Union[str, Sequence[str], None]
MaskFn = Callable[[Any], Any]

# Leaves named bias / scale / offset: biases and BatchNorm / LayerNorm scale and offset.
DEFAULT_EXCLUDE = r"(^|/)(bias|scale|offset)$"


def key_name(key: Any) -> str:
  """One path element as text: a dict key, a sequence index or an attribute name."""
  if isinstance(key, tree_util.DictKey):
    return str(key.key)
  if isinstance(key, tree_util.SequenceKey):
    return str(key.idx)
  if isinstance(key, tree_util.GetAttrKey):
    return str(key.name)
  if isinstance(key, tree_util.FlattenedIndexKey):
    return str(key.key)
  return str(key)


def path_str(keypath: Sequence[Any]) -> str:
  """'/'-joined path of a ``jax.tree_util`` key path, e.g. ``('layer1_0', 'bn1', 'scale') -> 'layer1_0/bn1/scale'``."""
  return "/".join(key_name(k) for k in keypath)


def compile_patterns(patterns: Patterns) -> list[re.Pattern]:
  """Compiles one pattern or several; None, '' and () mean "no pattern" (match nothing).

  A string may hold several patterns separated by commas only if it is given as a sequence; a single string is one
  regular expression (use '|' for alternatives).
  """
  if patterns is None:
    return []
  if isinstance(patterns, str):
    patterns = [patterns]
  out = []
  for p in patterns:
    if p:
      try:
        out.append(re.compile(p))
      except re.error as e:
        raise ValueError(f"Invalid parameter-path regex {p!r}: {e}.") from e
  return out


def include_mask(patterns: Patterns) -> MaskFn:
  """Mask callable: True for leaves whose path matches any pattern.

  Args:
    patterns: one regular expression or several, searched in each leaf's '/'-joined path.

  Returns:
    A callable ``params -> bool tree`` (an optax-style mask).

  Example:
    >>> import lamb_lars
    >>> lamb_lars.include_mask(r"kernel$")({"conv1": {"kernel": 0.0, "bias": 0.0}})
    {'conv1': {'bias': False, 'kernel': True}}
  """
  compiled = compile_patterns(patterns)

  def mask_fn(params: Any) -> Any:
    return jax.tree.map_with_path(lambda kp, _: any(p.search(path_str(kp)) for p in compiled), params)

  return mask_fn


def exclude_mask(patterns: Patterns = DEFAULT_EXCLUDE) -> MaskFn:
  """Mask callable: True for leaves whose path matches no pattern (the complement of :func:`include_mask`).

  Args:
    patterns: one regular expression or several; the default excludes leaves named bias, scale or offset.

  Returns:
    A callable ``params -> bool tree`` (an optax-style mask).

  Example:
    >>> import lamb_lars
    >>> lamb_lars.exclude_mask()({"conv1": {"kernel": 0.0, "bias": 0.0}, "bn1": {"scale": 0.0}})
    {'bn1': {'scale': False}, 'conv1': {'bias': False, 'kernel': True}}
  """
  compiled = compile_patterns(patterns)

  def mask_fn(params: Any) -> Any:
    return jax.tree.map_with_path(lambda kp, _: not any(p.search(path_str(kp)) for p in compiled), params)

  return mask_fn


def resolve(mask: Any, params: Any, default: bool = True) -> Any:
  """A bool tree with the structure of ``params`` from an optax-style mask.

  ``mask`` may be None (every leaf ``default``), a bool, a callable ``params -> bool tree``, or a tree of bools with
  the structure of ``params`` or a prefix of it (a bool at an inner node applies to its whole subtree).
  """
  if mask is None:
    mask = default
  if callable(mask):
    mask = mask(params)
  if isinstance(mask, bool):
    return jax.tree.map(lambda _: mask, params)
  return jax.tree.broadcast(mask, params)
