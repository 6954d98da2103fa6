"""Published numbers a study report puts next to its measurements (records layer: data only).

You et al. 2020, "The Limit of the Batch Size" (arXiv:2006.08517): Table 2 (baselines and regimes), Table 3 (MNIST /
LeNet-5 optimizers at batch 8K, 30 epochs) and the huge-batch MNIST results of §3–4. A study config names its
workload (``analysis.paper = 'mnist_lenet'``) and the report looks the numbers up here. See docs/science.md.
"""

from __future__ import annotations

import dataclasses

# Table 2: baseline batch B0, epochs ρ, baseline top-1 A, the large range [B_L, B_H], huge = (B_H, B_F], B_F.
# Def. 2.1: linear scaling works for every B < B_L, and B ≥ B_L is large, so B_L is the *lower* end of the large
# range: "for ImageNet, B_L = 2K, B_H = 64K" (Table 2 caption). MNIST large = [2K, 8K] means B_L = 2K.
TABLE2 = {
  "mnist_lenet": dict(b0=256, epochs=30, accuracy=0.992, large=(2048, 8192), b_l=2048, b_h=8192, b_f=60000),
  "cifar10_resnet50": dict(b0=128, epochs=200, accuracy=0.939, large=(2048, 25000), b_l=2048, b_h=25000, b_f=50000),
  "imagenet_resnet50": dict(b0=256, epochs=90, accuracy=0.759, large=(2048, 65536), b_l=2048, b_h=65536, b_f=1281167),
}

# Table 3 (MNIST / LeNet-5, 30 epochs): (bs 256, 8K original, 8K + layer-wise, 8K + layer-wise + bound ratio).
# Numbers are test accuracy in %; 'diverge' / 'unstable' are the paper's verdicts; 'n/a' = not reported.
# The paper's "SGD" row is run as momentum SGD here (the baseline's optimizer).
TABLE3 = {
  "momentum": ("99.2", "diverge", "99.2", "99.2"),
  "adagrad": ("99.2", "98.3", "99.3", "99.3"),
  "rmsprop": ("99.2", "98.6", "diverge", "99.0"),
  "adam": ("99.3", "99.1", "unstable", "99.4"),
  "lars": ("99.3", "99.4", "n/a", "n/a"),
}

# Single results: (batch, optimizer or 'any', test accuracy, what); batch 'full' = the study's whole training set
# (the paper's 60,000; 55,000 when 5,000 are held out for validation).
POINTS = {
  "mnist_lenet": (
    (32768, "lars", 0.958, "LARS + warmup + poly decay, 30 epochs (4.2% error)"),
    (32768, "lamb", 0.987, "LAMB + long warmup + poly decay"),
    ("full", "any", 0.983, "full batch (60,000), best after 1,000 epochs"),
  ),
}


# The authors' MNIST training logs (GitHub fastalgo/mnist_tpu, about 1,900 files, each ending in one run's final test
# accuracy), transcribed for the configurations of lamb_lars/proj/you2020/configs/ (read on 2026-11-25); compared with
# our runs by lamb_lars/proj/you2020/paper_logs.py.
@dataclasses.dataclass(frozen=True)
class Logged:
  """The authors' logs of one configuration: ``runs`` maps a log file (in fastalgo/mnist_tpu) to its accuracy."""

  config: str
  runs: dict
  tolerance: float  # percentage points: |ours − theirs| within this "agrees"

  @property
  def mean(self) -> float:
    return sum(self.runs.values()) / len(self.runs)


_MOM1K = "momentum_poly/{}/batch-1024-lr-0.08-warmup-0-poly-0.5-2019-03-05-{}.log"
_LAMB1K = "lamb/log2/batch-1024-lr-0.004-warmup-1-poly-0.5-weight-decay-0.01-2019-04-{}.log"
AUTHORS = {
  a.config: a
  for a in (
    Logged(
      "momentum_b1024",
      {
        _MOM1K.format("best", "03-25-33"): 0.9923,
        _MOM1K.format("best", "03-26-23"): 0.9935,
        _MOM1K.format("best", "03-27-23"): 0.9934,
        _MOM1K.format("best", "03-28-33"): 0.9932,
        _MOM1K.format("best", "03-53-49"): 0.9922,
        _MOM1K.format("log", "03-14-29"): 0.9929,
      },
      0.3,
    ),
    Logged(
      "lars_b8192", {"momentum_lars/best/batch-8192-lr-6.0-warmup-16-poly-0.5-2019-03-05-20-21-28.log": 0.9935}, 0.3
    ),
    Logged(
      "lamb_b1024",
      {
        _LAMB1K.format("15-23-57-07"): 0.9941,
        _LAMB1K.format("15-23-59-45"): 0.9935,
        _LAMB1K.format("16-00-00-56"): 0.9947,
        _LAMB1K.format("16-00-02-21"): 0.9938,
        _LAMB1K.format("16-00-03-36"): 0.9941,
      },
      0.3,
    ),
    Logged(
      "momentum_b60000",
      {"momentum_poly/log/batch-60000-lr-0.11-warmup-12-poly-0.5-2019-03-05-10-38-07.log": 0.9244},
      1.0,
    ),
    Logged(
      "lars_b60000", {"momentum_lars/log/batch-60000-lr-22.0-warmup-9-poly-0.5-2019-03-07-01-23-07.log": 0.9727}, 1.0
    ),
    Logged("lamb_b60000", {"lamb/log1/batch-60000-lr-0.11-warmup-7-poly-0.5-2019-04-04-11-08-14.log": 0.9887}, 1.0),
  )
}


# One slice of a response surface the authors swept (momentum_lars/run.sh): LARS at the full batch, warmup 9 epochs,
# 35 steps, one run per LR (momentum_lars/log/batch-60000-lr-<LR>-warmup-9-poly-0.5-2019-03-07-*.log; LR 28's log
# has no result). Neighbouring LRs differ by up to 22 points, so single runs here are mostly seed noise.
LARS_FULL_BATCH_SLICE = {
  1.0: 0.8514,
  2.0: 0.8301,
  3.0: 0.8306,
  4.0: 0.9344,
  5.0: 0.9080,
  6.0: 0.9103,
  7.0: 0.9159,
  8.0: 0.8976,
  9.0: 0.8727,
  10.0: 0.8370,
  11.0: 0.8685,
  12.0: 0.8589,
  13.0: 0.8906,
  14.0: 0.9521,
  15.0: 0.9686,
  16.0: 0.7481,
  17.0: 0.9259,
  18.0: 0.9528,
  19.0: 0.9488,
  20.0: 0.9648,
  21.0: 0.9165,
  22.0: 0.9727,
  23.0: 0.9022,
  24.0: 0.9713,
  25.0: 0.9077,
  26.0: 0.9231,
  27.0: 0.8917,
}
SLICE_CONFIG = "lars_b60000"
SLICE_CONFIG_LR = 22.0  # the LR of SLICE_CONFIG itself: its own runs are the slice's points at this LR


# The authors' other full-batch runs of the same optimizer near each full-batch configuration (LR × warmup epochs
# → final test accuracy), from docs/authors_full_batch_logs.md (transcribed from their logs; runs without a result
# left out). Their logged configuration is one of these runs, chosen by its test accuracy.
@dataclasses.dataclass(frozen=True)
class Neighbours:
  """Runs of ``config``'s optimizer at batch 60,000 at other (LR, warmup); ``logs``: their file pattern."""

  config: str
  logs: str
  runs: dict


AUTHORS_NEIGHBOURS = {
  n.config: n
  for n in (
    Neighbours(
      "lamb_b60000",
      "lamb/log1/batch-60000-lr-{lr}-warmup-{w}-poly-0.5-2019-04-04-*.log",
      {
        (0.1, 10): 0.9871,
        (0.1, 11): 0.9879,
        (0.1, 12): 0.9875,
        (0.1, 13): 0.9842,
        (0.1, 14): 0.9833,
        (0.1, 15): 0.9853,
        (0.1, 16): 0.9856,
        (0.11, 5): 0.9866,
        (0.11, 6): 0.9844,
        (0.11, 7): 0.9887,
        (0.11, 8): 0.9858,
        (0.11, 9): 0.9879,
        (0.11, 12): 0.9849,
        (0.11, 13): 0.9874,
        (0.11, 14): 0.9857,
        (0.11, 15): 0.9864,
        (0.11, 16): 0.9844,
        (0.11, 17): 0.9862,
        (0.11, 18): 0.9881,
        (0.11, 19): 0.9851,
        (0.11, 20): 0.9834,
        (0.11, 21): 0.9840,
        (0.11, 22): 0.9842,
        (0.11, 23): 0.9793,
        (0.11, 24): 0.9825,
        (0.11, 25): 0.9851,
        (0.12, 5): 0.9842,
        (0.12, 6): 0.9831,
        (0.12, 7): 0.9799,
        (0.12, 8): 0.9827,
        (0.12, 9): 0.9859,
        (0.12, 12): 0.9862,
        (0.12, 13): 0.9867,
        (0.12, 14): 0.9849,
        (0.12, 15): 0.9840,
        (0.12, 16): 0.9859,
        (0.12, 17): 0.9829,
        (0.12, 18): 0.9821,
        (0.12, 19): 0.9834,
        (0.12, 20): 0.9828,
        (0.12, 21): 0.9816,
        (0.12, 22): 0.9791,
        (0.12, 23): 0.9832,
        (0.12, 24): 0.9809,
        (0.12, 25): 0.9844,
      },
    ),
    Neighbours(
      "momentum_b60000",
      "momentum_poly/log/batch-60000-lr-{lr}-warmup-{w}-poly-0.5-2019-03-*.log",
      {
        (0.1, 14): 0.8708,
        (0.1, 16): 0.5839,
        (0.1, 17): 0.8524,
        (0.1, 18): 0.8956,
        (0.1, 19): 0.3405,
        (0.11, 11): 0.9120,
        (0.11, 12): 0.9244,
        (0.11, 13): 0.9212,
        (0.11, 15): 0.8362,
        (0.11, 16): 0.5294,
        (0.11, 18): 0.8169,
        (0.11, 19): 0.4703,
        (0.12, 11): 0.6141,
        (0.12, 12): 0.8326,
        (0.12, 13): 0.1135,
        (0.12, 14): 0.8509,
        (0.12, 15): 0.8545,
        (0.12, 17): 0.8514,
      },
    ),
    Neighbours(
      "lars_b60000",
      "momentum_lars/log/batch-60000-lr-22.0-warmup-{w}-poly-0.5-2019-03-*.log",
      {
        (22, 9): 0.9727,
        (22, 10): 0.9180,
        (22, 11): 0.9336,
        (22, 12): 0.9367,
        (22, 13): 0.9497,
        (22, 14): 0.9529,
        (22, 15): 0.9593,
        (22, 16): 0.9696,
        (22, 17): 0.9290,
        (22, 18): 0.8911,
        (22, 19): 0.9581,
        (22, 20): 0.9545,
        (22, 21): 0.7463,
        (22, 22): 0.9527,
        (22, 23): 0.9134,
        (22, 24): 0.8617,
        (22, 25): 0.4034,
      },
    ),
  )
}
