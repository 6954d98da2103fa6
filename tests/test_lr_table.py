"""The LR schedule as data (lamb_lars/optim/lr_table.py): same updates as the schedule, against numpy float64
references,
and a compiled update, init and train step that no longer depend on the learning rates."""

from __future__ import annotations

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lamb_lars.configs import optimizer as optimizer_defaults
from lamb_lars.optim import lr_table, optimizer_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def opt_config(name="momentum", lr=0.3, warmup=3, table=True):
  cfg = optimizer_defaults.get_config()
  cfg.name, cfg.learning_rate, cfg.lr_scaling, cfg.lr_table = name, lr, "none", table
  cfg.weight_decay = 0.0
  cfg.schedule.warmup_steps = warmup
  cfg.schedule.decay = "cosine"
  return cfg


def reference_lr(t, peak, w, total):
  """Linear warmup from peak/W then cosine decay to 0 (schedules.py docstring), from the formula; t ≥ total holds."""
  t = min(t, total)
  if t < w:
    return peak * (t + 1) / w
  d = total - w
  return peak * 0.5 * (1 + np.cos(np.pi * min(t - w, d) / d))


def test_table_reads_back_the_schedule_and_holds_its_last_value():
  total = 10
  tx, schedule = optimizer_config.create_optimizer(
    opt_config(lr=0.3, warmup=3), total_steps=total, num_train=1, batch_size=1
  )
  table = lr_table.tabulate(schedule, total)
  want = [reference_lr(t, 0.3, 3, total) for t in range(total + 4)]
  got = [float(lr_table.table_schedule(jnp.asarray(table))(t)) for t in range(total + 4)]
  np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-9)
  # the trainer's host-side read of the same table (the LR it logs for each update)
  np.testing.assert_allclose(lr_table.lookup(table, np.arange(total + 4)), want, rtol=1e-6, atol=1e-9)
  np.testing.assert_allclose(float(lr_table.lookup(table, 4)), want[4], rtol=1e-6)
  with pytest.raises(ValueError, match="non-empty vector"):
    lr_table.with_lr_table(lambda s: tx, np.zeros((2, 2)))


def test_momentum_with_a_table_follows_the_numpy_reference():
  """Heavy-ball SGD (v ← μv + g, w ← w − η_t v) with η_t from the formula, float64, 12 updates past the table's end."""
  total, mu = 8, 0.9
  with jax.enable_x64(True):
    tx, _ = optimizer_config.create_optimizer(
      opt_config(lr=0.3, warmup=3), total_steps=total, num_train=1, batch_size=1
    )
    rng = np.random.default_rng(0)
    w = {"w": jnp.asarray(rng.normal(size=(3, 2)))}
    state = tx.init(w)
    assert any(
      isinstance(s, lr_table.LRTableState)
      for s in jax.tree.leaves(state, is_leaf=lambda x: isinstance(x, lr_table.LRTableState))
    )
    w_ref, v_ref = np.asarray(w["w"]).copy(), np.zeros((3, 2))
    for t in range(12):
      g = rng.normal(size=(3, 2))
      updates, state = tx.update({"w": jnp.asarray(g)}, state, w)
      w = {"w": w["w"] + updates["w"]}
      v_ref = mu * v_ref + g
      w_ref = w_ref - reference_lr(t, 0.3, 3, total) * v_ref
    np.testing.assert_allclose(np.asarray(w["w"]), w_ref, rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("name", ["momentum", "lamb"])
def test_the_compiled_update_does_not_depend_on_the_learning_rates(name):
  """With the table the lowered update is the same program for another LR and warmup; without it, it is not."""
  params = {"w": jnp.ones((4, 3)), "b": jnp.zeros((3,))}

  def lowered(**kw):
    tx, _ = optimizer_config.create_optimizer(opt_config(name, **kw), total_steps=50, num_train=1, batch_size=1)
    return jax.jit(tx.update).lower(params, tx.init(params), params).as_text()

  assert lowered(lr=0.1, warmup=2) == lowered(lr=0.7, warmup=9)
  assert lowered(lr=0.1, warmup=2, table=False) != lowered(lr=0.7, warmup=9, table=False)


def test_set_lr_table_refuses_another_length():
  tx, _ = optimizer_config.create_optimizer(opt_config(), total_steps=5, num_train=1, batch_size=1)
  state = tx.init({"w": jnp.ones(2)})
  new = lr_table.set_lr_table(state, jnp.arange(6.0))
  np.testing.assert_array_equal(np.asarray(new.lr_table), np.arange(6.0))
  with pytest.raises(ValueError, match="cannot replace"):
    lr_table.set_lr_table(state, jnp.arange(7.0))


@pytest.mark.slow
@pytest.mark.e2e
def test_trials_differing_in_lr_and_warmup_share_every_compiled_program(tmp_path):
  """Two real LeNet runs through train.py in one persistent cache: with ``optimizer.lr_table`` the second (another
  LR and warmup) adds no init, train-step or eval program; without it, it adds its train step. The data are
  synthetic MNIST-shaped images: the programs are the same as on MNIST, without reading it. Both runs compile without
  XLA's optimisation passes (the persistent cache keys a program by its HLO and the same flags, so which programs are
  shared does not depend on them): 40 CPU-s against 66 with them (2026-12-03)."""

  def run(name, *flags):
    env = {
      **os.environ,
      "JAX_COMPILATION_CACHE_DIR": str(tmp_path / name),
      "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
      "XLA_FLAGS": "",
      "JAX_DISABLE_MOST_OPTIMIZATIONS": "1",
    }
    args = [
      sys.executable,
      "train.py",
      "--config=lamb_lars/configs/mnist_lenet.py",
      f"--workdir={tmp_path / name}_{len(flags)}",
      "--config.num_train_steps=4",
      "--config.batch_size=64",
      "--config.eval_batch_size=64",
      "--config.eval_every_steps=2",
      "--config.progress=False",
      "--config.dataset=synthetic",
      "--config.synthetic.num_train=512",
      "--config.synthetic.num_eval=128",
      *flags,
    ]
    out = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return {f for f in os.listdir(tmp_path / name) if f.startswith(("jit_init", "jit_chunk", "jit_eval_step"))}

  for table, grows in (("True", False), ("False", True)):
    first = run(table, f"--config.optimizer.lr_table={table}", "--config.optimizer.learning_rate=0.01")
    assert any(f.startswith("jit_chunk") for f in first)
    second = run(
      table,
      f"--config.optimizer.lr_table={table}",
      "--config.optimizer.learning_rate=0.03",
      "--config.optimizer.schedule.warmup_steps=2",
    )
    assert (second > first) == grows, (table, sorted(second - first))
