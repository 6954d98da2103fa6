"""Regex masks over '/'-joined Flax parameter paths."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from lamb_lars.optim import masks


def tree_paths(tree):
  """A tree with the structure of ``tree`` whose leaves are their '/'-joined paths."""
  return jax.tree.map_with_path(lambda kp, _: masks.path_str(kp), tree)


def selected_paths(params, mask, default=True):
  """The paths of the leaves a mask selects."""
  flags = jax.tree.leaves(masks.resolve(mask, params, default))
  return [p for p, f in zip(jax.tree.leaves(tree_paths(params)), flags) if f]


PARAMS = {
  "conv1": {"kernel": jnp.ones((3, 3, 1, 4)), "bias": jnp.ones(4)},
  "layer1_0": {"bn1": {"scale": jnp.ones(4), "bias": jnp.ones(4)}, "conv1": {"kernel": jnp.ones((1, 1, 4, 4))}},
  "LayerNorm_0": {"scale": jnp.ones(4), "offset": jnp.ones(4)},
  "fc1": {"kernel": jnp.ones((4, 2)), "bias": jnp.ones(2)},
  "scaled_dense": {"kernel": jnp.ones((2, 2))},
}


def test_paths():
  assert selected_paths(PARAMS, True) == [
    "LayerNorm_0/offset",
    "LayerNorm_0/scale",
    "conv1/bias",
    "conv1/kernel",
    "fc1/bias",
    "fc1/kernel",
    "layer1_0/bn1/bias",
    "layer1_0/bn1/scale",
    "layer1_0/conv1/kernel",
    "scaled_dense/kernel",
  ]
  assert jax.tree.leaves(tree_paths({"a": [jnp.ones(1), {"b": jnp.ones(1)}]})) == ["a/0", "a/1/b"]


def test_default_exclusion_keeps_only_weights():
  assert selected_paths(PARAMS, masks.exclude_mask()) == [
    "conv1/kernel",
    "fc1/kernel",
    "layer1_0/conv1/kernel",
    "scaled_dense/kernel",
  ]


def test_include_exclude_and_empty_patterns():
  assert selected_paths(PARAMS, masks.include_mask(["^conv1/", "fc1/bias$"])) == [
    "conv1/bias",
    "conv1/kernel",
    "fc1/bias",
  ]
  assert selected_paths(PARAMS, masks.include_mask("")) == []
  assert len(selected_paths(PARAMS, masks.exclude_mask(""))) == 10
  assert len(selected_paths(PARAMS, masks.exclude_mask(None))) == 10
  assert selected_paths(PARAMS, masks.include_mask(r"bn\d/")) == ["layer1_0/bn1/bias", "layer1_0/bn1/scale"]
  assert selected_paths({"conv1": {"kernel": 1}}, masks.include_mask(["bn", "bias"])) == []


def test_resolve_accepts_bool_callable_and_prefix_trees():
  assert all(jax.tree.leaves(masks.resolve(None, PARAMS, True)))
  assert not any(jax.tree.leaves(masks.resolve(False, PARAMS)))
  prefix = {k: k == "fc1" for k in PARAMS}
  assert selected_paths(PARAMS, prefix) == ["fc1/bias", "fc1/kernel"]


def test_invalid_regex_raises_value_error():
  with pytest.raises(ValueError, match="regex"):
    masks.exclude_mask("([")


def test_masks_work_with_optax_masked_under_jit():
  tx = optax.masked(optax.scale(0.0), masks.include_mask("kernel$"))
  out, _ = jax.jit(tx.update)(PARAMS, tx.init(PARAMS), PARAMS)
  np.testing.assert_array_equal(np.asarray(out["fc1"]["kernel"]), 0.0)
  np.testing.assert_array_equal(np.asarray(out["fc1"]["bias"]), 1.0)
