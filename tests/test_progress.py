"""Training progress without a terminal (nohup logs, CI, a notebook without ipywidgets): one line a
minute (``LAMB_LARS_PROGRESS_EVERY_S``) with step, epoch, examples/s and ETA, computed by hand here from a fake
clock."""

import io

from lamb_lars.train import progress


def test_periodic_lines_without_a_terminal():
  now = [0.0]
  out = io.StringIO()  # not a TTY
  p = progress.Progress(
    total=1000,
    initial=0,
    batch_size=64,
    epoch_of=lambda s: s * 64 / 6400,
    every_s=60.0,
    stream=out,
    clock=lambda: now[0],
  )
  assert p.mode == "lines"
  now[0] = 30.0
  p.update(100, loss=2.0)  # first chunk (compilation): the clock for ex/s and ETA starts here; no line before 60 s
  assert out.getvalue() == ""
  now[0] = 70.0
  p.update(200, loss=1.5)  # 200 steps in 40 s → 5 steps/s = 320 ex/s; 700 steps left → 140 s
  assert out.getvalue() == "progress: step 300/1000 (30.0%)  epoch 3.00  320 ex/s  ETA 2m20s  loss 1.5000\n"
  now[0] = 100.0
  p.update(100)  # 30 s after the last line: none
  assert out.getvalue().count("\n") == 1
  p.close()


def test_first_line_before_any_rate_and_off_modes():
  now = [100.0]
  out = io.StringIO()
  p = progress.Progress(
    total=10, initial=4, batch_size=8, epoch_of=lambda s: s / 5, every_s=1.0, stream=out, clock=lambda: now[0]
  )
  now[0] = 200.0
  p.update(2)  # resumed at step 4; the first chunk gives no rate yet
  assert out.getvalue() == "progress: step 6/10 (60.0%)  epoch 1.20  ETA ?\n"
  off = progress.Progress(total=1, initial=0, batch_size=1, epoch_of=float, every_s=0.0, stream=io.StringIO())
  assert off.mode == "off"
  assert (
    progress.Progress(
      total=1, initial=0, batch_size=1, epoch_of=float, every_s=5.0, enabled=False, stream=io.StringIO()
    ).mode
    == "off"
  )


def test_duration_text():
  assert [progress.duration(s) for s in (None, float("nan"), 41, 245, 4320)] == ["?", "?", "41s", "4m05s", "1h12m"]


def test_the_eval_line_shows_validation_accuracy_beside_its_loss():
  """A study's search prunes on validation accuracy, so the training log shows it (issue 62)."""
  from lamb_lars.train import loop

  lines = []
  row = {"epoch": 1.0, "train_loss": 2.0, "eval_loss": 1.5, "eval_accuracy": 0.5, "examples_per_sec": 10.0}
  loop.log_eval(lines.append, {**row, "validation_loss": 1.25, "validation_accuracy": 0.625}, 8)
  loop.log_eval(lines.append, row, 8)
  assert "val_loss 1.2500  val_acc 62.50%" in lines[0] and "  val_" not in lines[1]
