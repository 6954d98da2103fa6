"""``config.microbatch_loop='host'`` (lamb_lars/train/host_accumulation.py) computes the scanned step's function:
after several optimizer steps its state and metrics equal those of the scanned accumulation (itself checked
against sharded steps in tests/test_parallel.py), on one device and on several, with BN groups, host-fed or
resident, with every noise option on (so the random keys are the same ones), compiled ahead of time as the feeders
do; and its compiled programs' memory does not grow with the number of micro-batches, where the unrolled loop's
does (the reason it exists, docs/BENCHMARKS.md §22)."""

import jax
import numpy as np
import pytest

from lamb_lars.train import host_accumulation, mesh as mesh_lib, train_step as ts
from tests.test_parallel import TX, assert_same, data, model_for, pre, run_jit

NOISE = dict(weight_noise=1e-3, activation_noise=1e-2, gradient_noise=1e-3, label_noise=0.2, signal_to_noise=True)


@pytest.mark.slow  # over 4 CPU-seconds: compiles several programs
@pytest.mark.parametrize(
  "ndev, group, ghost, k, resident",
  [
    (1, 1, 4, 8, False),  # one device, 8 micro-batches
    (2, 1, 4, 4, False),  # two devices × 4 micro-batches
    (8, 2, 2, 2, False),  # BN groups of 2 devices
    (2, 1, 4, 4, True),  # the training set resident on the devices
    (1, 1, 32, 1, False),  # one micro-batch
  ],
)
@pytest.mark.usefixtures("unoptimized_xla")  # cheap compilation (tests/conftest.py), not in the memory test
def test_host_loop_equals_scanned_accumulation(ndev, group, ghost, k, resident):
  a, ma = run_jit(ndev, group, ghost, k=k, resident=resident)
  h, mh = run_jit(ndev, group, ghost, k=k, resident=resident, microbatch_loop="host")
  assert int(h.step) == int(a.step)
  assert_same(h, a, tol=1e-6)
  assert set(mh) == set(ma)
  for key in ma:
    np.testing.assert_allclose(mh[key], ma[key], rtol=1e-5, err_msg=key)


@pytest.mark.slow  # over 4 CPU-seconds: compiles several programs
@pytest.mark.usefixtures("unoptimized_xla")  # cheap compilation (tests/conftest.py), not in the memory test
def test_host_loop_uses_the_same_random_keys():
  """With input, label, weight and gradient noise on, a different key anywhere would change the state by ≫ 1e-6."""
  a, ma = run_jit(2, 1, 4, k=4, **NOISE)
  h, mh = run_jit(2, 1, 4, k=4, microbatch_loop="host", **NOISE)
  plain, _ = run_jit(2, 1, 4, k=4)
  assert_same(h, a, tol=1e-6)
  np.testing.assert_allclose(mh["signal_to_noise"], ma["signal_to_noise"], rtol=1e-5)
  from tests.test_parallel import rel_err

  assert rel_err(a.params, plain.params) > 1e-4  # the noise did change training


def _ahead_of_time(k, ghost=4, ndev=2, batch=None):
  """The host chunk compiled as the feeders compile it (``lower(...).compile()``), run for the test data's steps
  (their first ``batch`` examples)."""
  mesh = mesh_lib.make_mesh(1, jax.devices()[:ndev])
  model = model_for(1, ghost)
  f = host_accumulation.make_host_chunk(
    model, TX, ts.StepOptions(10, k, microbatch_loop="host"), pre, mesh, resident=False
  )
  state = jax.device_put(ts.init_state(model, TX, jax.random.PRNGKey(0), (8, 8, 1)), mesh_lib.replicated(mesh))
  put = lambda x: mesh_lib.put_global_batch(mesh, x[:, :batch], batch_axis=1)
  images, labels = data()
  args = (put(images), put(labels), jax.random.PRNGKey(1))
  compiled = f.lower(state, *args).compile()
  return compiled, compiled(state, *args)


@pytest.mark.slow  # over 4 CPU-seconds: compiles several programs
@pytest.mark.usefixtures("unoptimized_xla")  # cheap compilation (tests/conftest.py), not in the memory test
def test_ahead_of_time_compilation_equals_the_jitted_host_loop():
  _, (state, metrics) = _ahead_of_time(4)
  h, mh = run_jit(2, 1, 4, k=4, microbatch_loop="host")
  assert_same(jax.device_get(state), h, tol=1e-7)
  np.testing.assert_allclose(jax.device_get(metrics)["train_loss"], mh["train_loss"], rtol=1e-6)


def _temp_bytes(compiled) -> int:
  return compiled.memory_analysis().temp_size_in_bytes


@pytest.mark.slow  # over 4 CPU-seconds: compiles several programs
def test_host_loop_memory_does_not_grow_with_the_micro_batches():
  """Micro-batches of 4 images, k = 2 or 8 of them in a step: the host loop's micro-batch program needs the same
  temporaries whatever k; the unrolled scan's temporaries grow with k."""
  micro = [_temp_bytes(_ahead_of_time(k, ndev=1, batch=4 * k)[0].micro) for k in (2, 8)]
  assert micro[1] == micro[0]
  mesh = mesh_lib.make_mesh(1, jax.devices()[:1])
  model = model_for(1, 4)
  state = ts.init_state(model, TX, jax.random.PRNGKey(0), (8, 8, 1))
  images, labels = data()
  unrolled = []
  for k in (2, 8):
    f = ts.make_train_chunk(model, TX, ts.StepOptions(10, k, microbatch_loop="unrolled"), pre, mesh, resident=False)
    unrolled.append(
      _temp_bytes(f.lower(state, images[:1, : 4 * k], labels[:1, : 4 * k], jax.random.PRNGKey(1)).compile())
    )
  assert unrolled[1] > 1.5 * unrolled[0], unrolled
