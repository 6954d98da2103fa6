"""Branches (lamb_lars/train/init_from.py): a run that starts from another run's checkpoint, its state exactly the
reference's, its data the reference's stream from there, its LR m·rule(B/B_ref)·η_ref(t); bad references are one
sentence before compiling."""

import jax
import numpy as np
import pytest

from lamb_lars.train import checkpoint, init_from, run_plan, validate
from lamb_lars.train.trainer import train_and_evaluate
from test_train import data_dir, small_config  # noqa: F401  (fixture)

COMMON = dict(
  data_order="examples",
  eval_every_steps=10,
  checkpoint_every_steps=10,
  keep_checkpoints=10,
  **{"optimizer.schedule.decay": "constant"},
)
# The tests that read the module's reference run go to one pytest-xdist worker (--dist loadgroup), which trains it
# once; left to themselves, both workers would train it.
ON_REFERENCE_WORKER = pytest.mark.xdist_group("init_from_reference")


@pytest.fixture(scope="module")
def reference(data_dir, tmp_path_factory):
  """20 steps at batch 128, constant LR 0.05·128/256 = 0.025, checkpoints and evaluations (on the 10K test
  examples) at steps 10 and 20."""
  workdir = str(tmp_path_factory.mktemp("ref"))
  result = train_and_evaluate(small_config(data_dir, batch_size=128, num_train_steps=20, **COMMON), workdir)
  return workdir, result


def _branch(data_dir, ref_dir, **kw):
  return small_config(data_dir, **{**COMMON, "init_from_dir": ref_dir, "init_from_steps": 10, **kw})


@pytest.mark.slow
@pytest.mark.e2e
@ON_REFERENCE_WORKER
def test_a_branch_starts_from_the_reference_state_exactly(data_dir, reference):
  cfg = _branch(data_dir, reference[0], batch_size=512, num_train_steps=5)
  plan = validate.validate(cfg, 1)
  from lamb_lars.train import mesh as mesh_lib, parallel, run_optimizer, trainer

  tx, _ = run_optimizer.create_optimizer(cfg, plan, plan.branch.lr)
  mesh = mesh_lib.make_mesh(1, jax.devices()[:1])
  model = trainer.build_model(cfg, plan, parallel.make(cfg, mesh))
  fresh, _ = trainer.create_train_state(model, tx, mesh, (28, 28, 1), cfg.seed)
  branched = init_from.restore_into(fresh, plan.branch)
  saved = checkpoint.read_state(reference[0], 10, fresh)
  for got, want in zip(
    jax.tree.leaves((branched.params, branched.opt_state)), jax.tree.leaves((saved.params, saved.opt_state))
  ):
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
  assert int(branched.step) == 0
  assert not np.array_equal(np.asarray(jax.tree.leaves(fresh.params)[0]), np.asarray(jax.tree.leaves(saved.params)[0]))
  momentum = [np.asarray(x) for x in jax.tree.leaves(saved.opt_state) if np.ndim(x) > 0]
  assert momentum and any(np.abs(m).sum() > 0 for m in momentum)  # the buffers carried over are not empty


@pytest.mark.slow
@pytest.mark.e2e
@ON_REFERENCE_WORKER
def test_a_branch_at_the_same_batch_and_seed_continues_the_reference(data_dir, reference, tmp_path):
  """rule 'none' at B_ref with the reference's seed: its 10 steps are the reference's steps 11–20, bit for bit."""
  got = train_and_evaluate(
    _branch(data_dir, reference[0], batch_size=128, num_train_steps=10, init_from_lr_rule="none"), str(tmp_path / "b")
  )
  want = reference[1]["final"]
  assert (got["final"]["eval_loss"], got["final"]["train_loss"]) == (want["eval_loss"], want["train_loss"])
  assert got["final"]["examples"] == 1280


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.parametrize("rule, mult, lr", [("linear", 1.0, 0.1), ("sqrt", 1.0, 0.05), ("none", 0.5, 0.0125)])
@ON_REFERENCE_WORKER
def test_the_branch_lr_is_the_rule_times_the_reference_lr(data_dir, reference, rule, mult, lr):
  plan = validate.validate(
    _branch(
      data_dir, reference[0], batch_size=512, num_train_steps=5, init_from_lr_rule=rule, init_from_lr_multiplier=mult
    ),
    1,
  )
  assert plan.branch.lr == pytest.approx(lr, rel=1e-6)  # η_ref = 0.025, B/B_ref = 4
  assert (plan.branch.step, plan.data_start, plan.branch.batch_size) == (10, 1280, 128)


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.parametrize(
  "kw, fragment",
  [
    (dict(init_from_steps=15), r"holds checkpoints at steps \[10, 20\]"),
    (dict(data_order="batches"), "data_order='examples'"),
    (dict(**{"optimizer.lr_table": True}), "lr_table"),
    (dict(init_from_lr_rule="cubic"), "init_from_lr_rule"),
    (dict(model="small_cnn"), "does not fit"),
  ],
)
@ON_REFERENCE_WORKER
def test_a_bad_branch_is_one_sentence(data_dir, reference, tmp_path, kw, fragment):
  cfg = _branch(data_dir, reference[0], batch_size=256, num_train_steps=2, **kw)
  with pytest.raises(run_plan.ConfigError, match=fragment) as e:
    train_and_evaluate(cfg, str(tmp_path / "bad"))
  assert "\n" not in str(e.value)


def test_a_reference_without_a_run_is_one_sentence(data_dir, tmp_path):
  with pytest.raises(run_plan.ConfigError, match="holds no run of this trainer"):
    validate.validate(_branch(data_dir, str(tmp_path), batch_size=256, num_train_steps=2), 1)
