"""lamb_lars/proj/you2020/configs/mnist_table3_paper.py: the faithful Table 3 expands (18 searched cells), and its CPU
part runs the authors' logged LARS 8K configuration (lamb_lars/proj/you2020/configs/lars_b8192.py) and linearly scaled
momentum."""

import pytest

from lamb_lars.proj.you2020.configs import lars_b8192, momentum_b1024
from lamb_lars.proj.you2020.configs import mnist_table3_paper as t3p
from lamb_lars.study.running import sweep


def test_whole_table_expands_to_18_searched_cells():
  trials = sweep.expand(t3p.get_config())
  cells = {t.cell for t in trials}
  assert len(cells) == 18 and len(trials) == 18 * t3p.NUM_TRIALS
  assert all(t.config.model == "mnist_cnn" and t.config.validation_split == 5000 for t in trials)


def test_cpu_cells_are_the_authors_settings():
  trials = {t.sweep: t.config for t in sweep.expand(t3p.get_config("cpu"))}
  lars, logged = trials["b8k-lars-authors"], lars_b8192.get_config()
  for key in (
    "name",
    "lars_update",
    "learning_rate",
    "momentum",
    "weight_decay",
    "trust_coefficient",
    "trust_eps",
    "weight_decay_mask",
    "adaptation_mask",
  ):
    assert lars.optimizer[key] == logged.optimizer[key], key
  assert lars.optimizer.schedule.warmup_epochs == logged.optimizer.schedule.warmup_epochs == 16.0
  assert lars.optimizer.schedule.decay == "tf_poly" and lars.batch_size == logged.batch_size == 8192
  # the same images as the authors' 250 steps at 8K: 34.13 epochs of 60,000
  assert lars.num_epochs == pytest.approx(logged.num_train_steps * 8192 / 60000)
  momentum, base = trials["b8k-momentum-original-linear"], momentum_b1024.get_config()
  assert momentum.optimizer.learning_rate == pytest.approx(base.optimizer.learning_rate * 8192 / base.batch_size)


def test_unknown_part_is_one_sentence():
  with pytest.raises(ValueError, match="the one part is 'cpu'"):
    t3p.get_config("gpu")
