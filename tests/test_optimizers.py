"""Every optimizer alias against the independent float64 numpy reference; optax-compatible forms against optax."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import reference_optimizers as ref
from lamb_lars.configs import optimizer as optimizer_defaults
from lamb_lars.optim import optimizer_config as OC
from lamb_lars.optim import optimizers as O

LR = 0.1
STEPS = 3


def schedule(count):
  """A learning-rate schedule that works on jax counts and python ints alike."""
  return LR / (1.0 + count)


def _cfg(**kw):
  c = optimizer_defaults.get_config()
  for k, v in kw.items():
    c[k] = v
  return c


# (id, tx factory, Reference kwargs). Bounds are chosen so that some leaves are clipped and some are not.
LARS_B = (0.01, 1.0)
LW_B = (0.03, 3.0)
CASES = [
  (
    "lars_paper_momentum",
    lambda: O.lars(LR, momentum=0.9, weight_decay=0.01, trust_coefficient=0.01),
    dict(kind="lars", lr=LR, momentum=0.9, weight_decay=0.01, trust_coefficient=0.01, denominator="paper"),
  ),
  (
    "lars_paper_nesterov",
    lambda: O.lars(LR, momentum=0.9, nesterov=True, weight_decay=0.01, trust_coefficient=0.01),
    dict(
      kind="lars", lr=LR, momentum=0.9, nesterov=True, weight_decay=0.01, trust_coefficient=0.01, denominator="paper"
    ),
  ),
  (
    "lars_optax_momentum",
    lambda: O.lars(LR, weight_decay=0.01, trust_coefficient=0.01, denominator="optax"),
    dict(kind="lars", lr=LR, momentum=0.9, weight_decay=0.01, trust_coefficient=0.01),
  ),
  (
    "lars_optax_nesterov_eps",
    lambda: O.lars(schedule, nesterov=True, weight_decay=0.01, trust_coefficient=0.01, eps=1e-3, denominator="optax"),
    dict(
      kind="lars", lr=schedule, momentum=0.9, nesterov=True, weight_decay=0.01, trust_coefficient=0.01, trust_eps=1e-3
    ),
  ),
  (
    "lars_bounds_active",
    lambda: O.lars(LR, weight_decay=0.01, trust_coefficient=0.01, ratio_bounds=LARS_B),
    dict(
      kind="lars",
      lr=LR,
      momentum=0.9,
      weight_decay=0.01,
      trust_coefficient=0.01,
      denominator="paper",
      ratio_bounds=LARS_B,
    ),
  ),
  (
    "lars_bounds_inactive",
    lambda: O.lars(LR, weight_decay=0.01, ratio_bounds=(1e-9, 1e9)),
    dict(
      kind="lars",
      lr=LR,
      momentum=0.9,
      weight_decay=0.01,
      trust_coefficient=0.001,
      denominator="paper",
      ratio_bounds=(1e-9, 1e9),
    ),
  ),
  (
    "lars_no_masks",
    lambda: O.lars(LR, weight_decay=0.01, weight_decay_mask=True, adaptation_mask=True),
    dict(
      kind="lars",
      lr=LR,
      momentum=0.9,
      weight_decay=0.01,
      trust_coefficient=0.001,
      denominator="paper",
      wd_exclude=None,
      adapt_exclude=None,
    ),
  ),
  (
    "lars_stacked",
    lambda: O.lars(
      LR, weight_decay=0.01, stacked_mask=lambda p: jax.tree.map_with_path(lambda kp, _: kp[0].key == "stack", p)
    ),
    dict(
      kind="lars",
      lr=LR,
      momentum=0.9,
      weight_decay=0.01,
      trust_coefficient=0.001,
      denominator="paper",
      stacked="^stack/",
    ),
  ),
  (
    "lars_phi_nesterov",
    lambda: O.lars(LR, nesterov=True, weight_decay=0.01, phi_bounds=(1.0, 50.0)),
    dict(
      kind="lars",
      lr=LR,
      momentum=0.9,
      nesterov=True,
      weight_decay=0.01,
      trust_coefficient=0.001,
      denominator="paper",
      phi_bounds=(1.0, 50.0),
    ),
  ),
  (
    "lamb",
    lambda: O.lamb(LR, weight_decay=0.01),
    dict(kind="layerwise", base="adam", lr=LR, eps=1e-6, weight_decay=0.01),
  ),
  (
    "lamb_phi_nobc_paper",
    lambda: O.lamb(
      schedule, weight_decay=0.01, phi_bounds=(0.5, 5.0), bias_correction=False, denominator="paper", ratio_bounds=LW_B
    ),
    dict(
      kind="layerwise",
      base="adam",
      lr=schedule,
      eps=1e-6,
      weight_decay=0.01,
      phi_bounds=(0.5, 5.0),
      bias_correction=False,
      denominator="paper",
      ratio_bounds=LW_B,
    ),
  ),
  (
    "lw_sgd",
    lambda: O.layerwise_sgd(LR, weight_decay=0.01),
    dict(kind="layerwise", base="sgd", lr=LR, weight_decay=0.01),
  ),
  (
    "lw_momentum_bound",
    lambda: O.layerwise_sgd(LR, momentum=0.9, weight_decay=0.01, ratio_bounds=LW_B),
    dict(kind="layerwise", base="momentum", momentum=0.9, lr=LR, weight_decay=0.01, ratio_bounds=LW_B),
  ),
  (
    "lw_nesterov_bound",
    lambda: O.layerwise_sgd(LR, momentum=0.9, nesterov=True, ratio_bounds=LW_B),
    dict(kind="layerwise", base="nesterov", momentum=0.9, lr=LR, ratio_bounds=LW_B),
  ),
  (
    "lw_adagrad_bound",
    lambda: O.layerwise_adagrad(LR, weight_decay=0.01, ratio_bounds=LW_B),
    dict(kind="layerwise", base="adagrad", lr=LR, eps=1e-7, weight_decay=0.01, ratio_bounds=LW_B),
  ),
  (
    "lw_rmsprop",
    lambda: O.layerwise_rmsprop(LR, weight_decay=0.01),
    dict(kind="layerwise", base="rmsprop", lr=LR, eps=1e-8, weight_decay=0.01),
  ),
  (
    "lw_rmsprop_bound",
    lambda: O.layerwise_rmsprop(LR, ratio_bounds=LW_B),
    dict(kind="layerwise", base="rmsprop", lr=LR, eps=1e-8, ratio_bounds=LW_B),
  ),
  (
    "lw_adam_bound",
    lambda: O.layerwise_adam(LR, weight_decay=0.01, ratio_bounds=LW_B),
    dict(kind="layerwise", base="adam", lr=LR, weight_decay=0.01, ratio_bounds=LW_B),
  ),
]
# The "original" solvers and the config glue: built from config.optimizer.
for _name in ("sgd", "momentum", "nesterov", "adagrad", "rmsprop", "adam"):
  CASES.append(
    (
      f"cfg_{_name}",
      lambda n=_name: OC.optimizer_from_config(_cfg(name=n, weight_decay=0.01), LR),
      dict(kind="original", base=_name, lr=LR, momentum=0.9, weight_decay=0.01, eps={"adagrad": 1e-7}.get(_name, 1e-8)),
    )
  )
CASES += [
  (
    "cfg_adamw",
    lambda: OC.optimizer_from_config(_cfg(name="adamw", weight_decay=0.01), LR),
    dict(kind="adamw", base="adam", lr=LR, weight_decay=0.01),
  ),
  (
    "cfg_lars_optax",
    lambda: OC.optimizer_from_config(_cfg(name="lars", weight_decay=0.01, denominator="optax", nesterov=True), LR),
    dict(kind="lars", lr=LR, momentum=0.9, nesterov=True, weight_decay=0.01, trust_coefficient=0.001),
  ),
  (
    "cfg_lamb_bound",
    lambda: OC.optimizer_from_config(
      _cfg(name="lamb", weight_decay=0.01, ratio_bounds=LW_B, phi_bounds=(None, 10.0)), LR
    ),
    dict(kind="layerwise", base="adam", lr=LR, eps=1e-6, weight_decay=0.01, ratio_bounds=LW_B, phi_bounds=(None, 10.0)),
  ),
  (
    "cfg_rmsprop_layerwise_bound",
    lambda: OC.optimizer_from_config(_cfg(name="rmsprop", layerwise=True, weight_decay=0.01, ratio_bounds=LW_B), LR),
    dict(kind="layerwise", base="rmsprop", lr=LR, weight_decay=0.01, ratio_bounds=LW_B),
  ),
  (
    "cfg_momentum_layerwise_masks",
    lambda: OC.optimizer_from_config(
      _cfg(name="momentum", layerwise=True, weight_decay=0.01, weight_decay_mask="", adaptation_mask="bias$"), LR
    ),
    dict(
      kind="layerwise", base="momentum", momentum=0.9, lr=LR, weight_decay=0.01, wd_exclude=None, adapt_exclude="bias$"
    ),
  ),
]


def run_both(make_tx, ref_kwargs, dtype):
  """Per-step (jax updates, reference updates) as flat dicts; the reference starts from the rounded inputs."""
  params, grads = ref.make_problem(steps=STEPS)
  cast = lambda d: {k: np.asarray(v, dtype).astype(np.float64) for k, v in d.items()}
  with jax.enable_x64(dtype == np.float64):
    tx = make_tx()
    p = ref.nest({k: jnp.asarray(v, dtype) for k, v in params.items()})
    state = tx.init(p)
    update = jax.jit(tx.update)
    r = ref.Reference(**ref_kwargs)
    rp = cast(params)
    out = []
    for g in grads:
      u, state = update(ref.nest({k: jnp.asarray(v, dtype) for k, v in g.items()}), state, p)
      p = optax.apply_updates(p, u)
      new = r.step(rp, cast(g))
      out.append((ref.flatten(u), {k: new[k] - rp[k] for k in new}))
      rp = new
  return out, r


def assert_close(steps, rtol):
  for t, (got, want) in enumerate(steps):
    for path, w in want.items():
      err, scale = np.max(np.abs(got[path] - w)), np.max(np.abs(w))
      assert err <= rtol * scale + 1e-300, f"step {t} {path}: max err {err:.3g}, max |update| {scale:.3g}"


@pytest.mark.parametrize("name,make_tx,ref_kwargs", CASES, ids=[c[0] for c in CASES])
def test_alias_matches_reference_float64(name, make_tx, ref_kwargs):
  steps, r = run_both(make_tx, ref_kwargs, np.float64)
  assert_close(steps, 1e-10)
  if "bound" in name and "inactive" not in name:  # the bounds really clipped something
    b = ref_kwargs["ratio_bounds"]
    adapted = [v for p, v in r.ratios.items() if not (p.endswith("bias") or p.endswith("scale"))]
    assert any(np.any(np.isclose(v, b[0]) | np.isclose(v, b[1])) for v in adapted), name
    assert any(np.any((v > b[0] * 1.01) & (v < b[1] * 0.99)) for v in adapted), name


@pytest.mark.parametrize("name,make_tx,ref_kwargs", CASES, ids=[c[0] for c in CASES])
def test_alias_matches_reference_float32(name, make_tx, ref_kwargs):
  steps, _ = run_both(make_tx, ref_kwargs, np.float32)
  assert_close(steps, 2e-5)


def _run(tx, params, grads_list, jit=True):
  state = tx.init(params)
  update = jax.jit(tx.update) if jit else tx.update
  for g in grads_list:
    u, state = update(g, state, params)
    params = optax.apply_updates(params, u)
  return params


@pytest.mark.parametrize("nesterov", [False, True])
@pytest.mark.parametrize("jit", [False, True])
def test_lars_optax_form_equals_optax_lars_exactly(nesterov, jit):
  params, grads = ref.make_problem(steps=STEPS)
  p = ref.nest({k: jnp.asarray(v, jnp.float32) for k, v in params.items()})
  gs = [ref.nest({k: jnp.asarray(v, jnp.float32) for k, v in g.items()}) for g in grads]
  wd_mask = jax.tree.map_with_path(lambda kp, _: kp[-1].key != "bias", p)
  tr_mask = jax.tree.map_with_path(lambda kp, _: kp[0].key != "bn1", p)
  kw = dict(weight_decay=1e-2, trust_coefficient=0.02, eps=1e-6, momentum=0.8, nesterov=nesterov)
  want = _run(optax.lars(schedule, weight_decay_mask=wd_mask, trust_ratio_mask=tr_mask, **kw), p, gs, jit)
  got = _run(
    O.lars(schedule, denominator="optax", weight_decay_mask=wd_mask, adaptation_mask=tr_mask, **kw), p, gs, jit
  )
  jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)), got, want)


@pytest.mark.parametrize("jit", [False, True])
def test_lamb_equals_optax_lamb_exactly(jit):
  params, grads = ref.make_problem(steps=STEPS)
  p = ref.nest({k: jnp.asarray(v, jnp.float32) for k, v in params.items()})
  gs = [ref.nest({k: jnp.asarray(v, jnp.float32) for k, v in g.items()}) for g in grads]
  wd_mask = jax.tree.map_with_path(lambda kp, _: kp[-1].key == "kernel", p)
  want = _run(optax.lamb(schedule, b1=0.8, b2=0.99, eps=1e-5, weight_decay=1e-2, mask=wd_mask), p, gs, jit)
  got = _run(
    O.lamb(schedule, b1=0.8, b2=0.99, eps=1e-5, weight_decay=1e-2, weight_decay_mask=wd_mask, adaptation_mask=True),
    p,
    gs,
    jit,
  )
  jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)), got, want)


def test_paper_and_optax_denominators_differ():
  params, grads = ref.make_problem(steps=1)
  p = ref.nest({k: jnp.asarray(v, jnp.float32) for k, v in params.items()})
  g = ref.nest({k: jnp.asarray(v, jnp.float32) for k, v in grads[0].items()})
  a = _run(O.lars(LR, weight_decay=0.01), p, [g])
  b = _run(O.lars(LR, weight_decay=0.01, denominator="optax"), p, [g])
  assert not np.allclose(np.asarray(a["conv1"]["kernel"]), np.asarray(b["conv1"]["kernel"]), rtol=0, atol=0)


# ------------------------------------------------------------------------------------------------ config glue


def test_default_config_has_every_key_and_validates():
  c = optimizer_defaults.get_config()
  for key in (
    "name",
    "learning_rate",
    "lr_scaling",
    "base_batch_size",
    "momentum",
    "nesterov",
    "b1",
    "b2",
    "eps",
    "weight_decay",
    "layerwise",
    "ratio_bounds",
    "trust_coefficient",
    "denominator",
    "phi_bounds",
    "weight_decay_mask",
    "adaptation_mask",
    "gradient_clip_norm",
    "track_stats",
    "schedule",
  ):
    assert key in c, key
  for key in (
    "warmup_steps",
    "warmup_epochs",
    "warmup_shape",
    "decay",
    "poly_power",
    "end_lr_factor",
    "step_boundaries_epochs",
    "step_factor",
    "cycle_steps",
    "cycle_shape",
  ):
    assert key in c.schedule, key
  OC.validate_config(c)


@pytest.mark.parametrize(
  "key,value",
  [
    ("name", "lbfgs"),
    ("lr_scaling", "cubic"),
    ("denominator", "median"),
    ("ratio_bounds", (1.0,)),
    ("ratio_bounds", (2.0, 1.0)),
    ("phi_bounds", (-1.0, 1.0)),
    ("momentum", 1.0),
    ("weight_decay", -1.0),
    ("weight_decay_mask", "(["),
    ("layerwise", True),
    ("schedule.decay", "exp"),
    ("schedule.warmup_shape", "step"),
    ("schedule.step_boundaries_epochs", ()),
    ("schedule.cycle_steps", -1),
  ],
)
def test_validate_config_names_the_bad_key(key, value):
  c = optimizer_defaults.get_config()
  c.name = "lars" if key == "layerwise" else ("sgd" if key != "name" else c.name)
  if key == "schedule.step_boundaries_epochs":
    c.schedule.decay = "step"
  if key == "schedule.cycle_steps":
    c.schedule.decay = "cyclical"
  node, leaf = (c.schedule, key.split(".")[1]) if "." in key else (c, key)
  if key in ("ratio_bounds", "phi_bounds"):
    c.layerwise = True
  node[leaf] = value
  with pytest.raises(ValueError, match=f"config.optimizer.{key} must be"):
    OC.validate_config(c)


def test_bounds_without_layerwise_are_rejected():
  c = optimizer_defaults.get_config()
  c.ratio_bounds = (0.1, 1.0)
  with pytest.raises(ValueError, match="ratio_bounds"):
    OC.validate_config(c)


@pytest.mark.parametrize("rule,factor", [("none", 1.0), ("linear", 32.0), ("sqrt", 32.0**0.5)])
def test_create_optimizer_scales_lr_and_returns_schedule(rule, factor):
  c = optimizer_defaults.get_config()
  c.lr_scaling, c.learning_rate, c.base_batch_size = rule, 0.1, 256
  c.schedule.warmup_epochs, c.schedule.decay = 2.0, "poly"
  tx, lr = OC.create_optimizer(c, total_steps=100, num_train=81920, batch_size=8192)
  np.testing.assert_allclose(
    [float(lr(0)), float(lr(19)), float(lr(100))], [0.1 * factor / 20, 0.1 * factor, 0.0], rtol=1e-6, atol=1e-7
  )  # 2 epochs of warmup = 20 steps, first update η/20
  assert isinstance(tx, optax.GradientTransformation)


def test_gradient_clipping_comes_first():
  c = optimizer_defaults.get_config()
  c.name, c.gradient_clip_norm, c.schedule.decay, c.lr_scaling = "sgd", 1.0, "constant", "none"
  tx, _ = OC.create_optimizer(c, total_steps=10, num_train=256, batch_size=256)
  p = {"w": jnp.ones(4)}
  u, _ = tx.update({"w": jnp.full(4, 10.0)}, tx.init(p), p)
  np.testing.assert_allclose(np.asarray(u["w"]), -0.1 * 0.5 * np.ones(4), rtol=1e-6)  # ‖g‖ = 20 → clipped to 1


def _doc_commands() -> list[str]:
  import os

  path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "optimizers.md")
  with open(path) as f:
    return [line.strip() for line in f if line.startswith("python train.py")]


def test_docs_list_every_table3_cell():
  assert len(_doc_commands()) == 18  # 4 solvers x (256, original, layer-wise, bound) + LARS x (256, original)


@pytest.mark.parametrize("command", _doc_commands(), ids=lambda c: c.split("--workdir=runs/t3/")[1].split()[0])
def test_table3_command_parses_with_locked_config_and_builds(command):
  import shlex
  import ml_collections
  from absl import flags
  from ml_collections import config_flags

  root = ml_collections.ConfigDict({"batch_size": 256})
  root.optimizer = optimizer_defaults.get_config()
  argv = ["prog"] + [a for a in shlex.split(command) if a.startswith("--config.")]
  fv = flags.FlagValues()
  # config_flags finds the override flags in sys_argv (sys.argv by default, which is pytest's here).
  config_flags.DEFINE_config_dict("config", root, flag_values=fv, lock_config=True, sys_argv=argv)
  fv(argv)
  cfg = fv.config
  OC.validate_config(cfg.optimizer)
  tx, _ = OC.create_optimizer(cfg.optimizer, total_steps=100, num_train=10 * cfg.batch_size, batch_size=cfg.batch_size)
  if "ratio_bounds" in command:
    assert tuple(cfg.optimizer.ratio_bounds) == (0.01, 10.0)
  p = ref.nest({k: jnp.asarray(v, jnp.float32) for k, v in ref.make_problem(steps=1)[0].items()})
  u, _ = tx.update(p, tx.init(p), p)
  assert all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(u))


def test_trust_ratio_travels_as_one_value():
  """A TrustRatio value and its fields as keywords build the same optimizer; the package exports the aliases."""
  import lamb_lars
  from lamb_lars.optim import trust_ratio as tr

  assert lamb_lars.lars is O.lars and lamb_lars.lamb is O.lamb
  assert lamb_lars.scale_by_trust_ratio is tr.scale_by_trust_ratio
  params = {"w": jnp.arange(1.0, 5.0), "bias": jnp.ones(2)}
  grads = jax.tree.map(lambda p: 0.1 * p, params)
  trust = O.LARS_TRUST.replace(weight_decay=0.01, trust_coefficient=0.02)
  a, b = O.lars(LR, trust=trust), lamb_lars.lars(LR, weight_decay=0.01, trust_coefficient=0.02)
  ua, _ = a.update(grads, a.init(params), params)
  ub, _ = b.update(grads, b.init(params), params)
  jax.tree.map(np.testing.assert_array_equal, ua, ub)
  cfg = optimizer_defaults.get_config()
  cfg.name, cfg.weight_decay = "lars", 0.01
  got = OC.trust_from_config(cfg)
  assert (got.trust_coefficient, got.denominator, got.weight_decay) == (0.001, "paper", 0.01)


def test_config_default_mask_matches_the_library():
  from lamb_lars.optim import masks

  assert optimizer_defaults.DEFAULT_EXCLUDE == masks.DEFAULT_EXCLUDE


@pytest.mark.slow
def test_import_lamb_lars_is_light():
  """``import lamb_lars`` gives the optimizers (optax style) and nothing else: no trainer, input pipeline, models,
  TensorFlow or config library, and no device initialised, so a notebook can import it first."""
  import subprocess
  import sys

  code = (
    "import sys, lamb_lars, jax\n"
    "heavy = [m for m in sys.modules if m.startswith(('lamb_lars.train', 'lamb_lars.input_pipeline', "
    "'lamb_lars.models', 'lamb_lars.study', 'tensorflow', 'ml_collections', 'flax'))]\n"
    "assert not heavy, heavy\n"
    "assert not getattr(jax._src.xla_bridge, '_backends', {}), 'a device backend was initialised'\n"
    "assert all(hasattr(lamb_lars, n) for n in lamb_lars.__all__)\n"
  )
  subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


@pytest.mark.parametrize("module", ["optimizers", "base_directions", "masks"])
def test_docstring_examples_run(module):
  """The optax-style examples in the public optimizer API's docstrings run and show what they say (doctest)."""
  import doctest
  import importlib

  mod = importlib.import_module(f"lamb_lars.optim.{module}")
  result = doctest.testmod(mod, optionflags=doctest.NORMALIZE_WHITESPACE)
  assert result.attempted >= 4 and result.failed == 0, result
