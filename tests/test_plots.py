"""Figure conventions a reader relies on: no two series of a figure look alike (You et al. 2020 Table 3 has 13),
and log-axis tick labels are plain numbers."""

import pytest

from lamb_lars.study.report import plots

TABLE3 = [
  f"{opt} {var}: 98.0%"
  for opt in ("momentum", "adagrad", "rmsprop", "adam")
  for var in ("original", "layer-wise", "layer-wise + bound")
] + ["lars original: 98.4%"]


def _look(style):
  return (tuple(style["color"]), style["marker"], style["linestyle"])


@pytest.mark.parametrize(
  "labels", [TABLE3, [f"batch {2**i} (momentum)" for i in range(8, 21)], [f"layer{i}" for i in range(70)]]
)
def test_no_two_series_look_alike(labels):
  styles = plots.series_styles(labels)
  looks = [_look(styles[k]) for k in labels]
  assert len(set(looks)) == len(labels)
  assert len({(c, m) for c, m, _ in looks}) == len(labels)  # colour + marker alone already differ


def test_table3_variants_look_the_same_across_optimizers():
  styles = plots.series_styles(TABLE3)
  for var in ("original", "layer-wise", "layer-wise + bound"):
    looks = {
      (styles[f"{o} {var}: 98.0%"]["marker"], styles[f"{o} {var}: 98.0%"]["linestyle"])
      for o in ("momentum", "adagrad", "rmsprop", "adam")
    }
    assert len(looks) == 1, var
  for o in ("momentum", "adam"):
    assert len({tuple(styles[f"{o} {v}: 98.0%"]["color"]) for v in ("original", "layer-wise")}) == 1
  assert tuple(styles["adagrad original: 98.0%"]["color"]) != tuple(styles["rmsprop original: 98.0%"]["color"])


def test_tick_labels_are_plain_numbers():
  assert [plots._plain_number(v) for v in (256, 8192, 55000, 0.5, 0.005, 1e-5, 2e6)] == [
    "256",
    "8,192",
    "55,000",
    "0.5",
    "0.005",
    "1e-05",
    "2e+06",
  ]
