"""CIFAR-10 / ResNet-50 (CIFAR stem) batch-size ladder 128 → 50K: the large-batch regime [2K, 25K] and the huge
one (25K, 50K) of You et al. 2020 Table 2 (DESIGN §1.1). For accelerators; not run on the 2-core CPU.

Command:  python -m lamb_lars.study run --config=configs/studies/cifar10_ladder.py --workdir=runs/studies/cifar10 \\
              --config.base.data_dir=$TFDS_DATA_DIR [--num_workers=N]
          python -m lamb_lars.study report --workdir=runs/studies/cifar10 --out=docs/studies/cifar10_ladder
Hardware: one GPU per run, bf16 (configs/cifar10_resnet50.py: < 1 h per 200-epoch run on one H100, estimate);
          9 linear rungs × 2 LRs + 16 LARS/LAMB trials ≈ 34 runs. Batches above one GPU's memory need
          --config.base.num_microbatches (gradient accumulation) or more devices.
Expected (paper): baseline 128 → 93.9% in 200 epochs; linear scaling holds to B_L = 25K; no technique reaches
99.5%·A above 25K (B_H = 25K).

Rungs: momentum SGD with η = 0.1·B/128 (linear scaling) and a 5-epoch linear warmup from η0 = 0.1 for B > 128
(Goyal et al.), cosine decay, 200 epochs, at LR factors ×{0.5, 1}. Techniques at ≥ 16K: LARS and LAMB with
warmup + polynomial decay, each a quasi-random search (Halton, 8 points) over the peak LR (log-uniform) and
the warmup length.
"""
import ml_collections

from configs import cifar10_resnet50
from configs.studies import common

B0 = 128
LADDER = (128, 512, 2048, 4096, 8192, 16384, 25000, 32768, 50000)
TECHNIQUE = (16384, 25000, 32768, 50000)


def _linear_rungs() -> list[dict]:
  out = []
  for b in LADDER:
    fixed = {"batch_size": b}
    if b > B0:
      fixed.update({"optimizer.schedule.warmup_epochs": 5.0, "optimizer.schedule.warmup_init_factor": B0 / b})
    out.append(dict(name="linear", fixed=fixed, grid={"optimizer.learning_rate": (0.05, 0.1)}))
  return out


def _technique(name: str, lr_range: tuple) -> dict:
  return dict(name=name, fixed={"optimizer.name": name, "optimizer.lr_scaling": "none",
                                "optimizer.schedule.decay": "poly", "optimizer.weight_decay": 5e-4},
              grid={"batch_size": TECHNIQUE},
              random={"optimizer.learning_rate": ("log",) + lr_range,
                      "optimizer.schedule.warmup_epochs": ("linear", 5.0, 40.0)},
              num_random=2, seed=1)


def get_config() -> ml_collections.ConfigDict:
  base = cifar10_resnet50.get_config()
  base.progress = False
  base.diagnostics.dist_from_init = True
  c = ml_collections.ConfigDict()
  c.name = "cifar10_ladder"
  c.base = base
  c.sweeps = tuple(_linear_rungs()) + (_technique("lars", (2.0, 30.0)), _technique("lamb", (2e-3, 2e-2)))
  c.analysis = common.analysis(
      title="CIFAR-10 / ResNet-50 batch-size ladder (200 epochs)", target_goal=0.93, baseline_batch=B0,
      num_train=50000, linear_select=("optimizer.name=momentum", "optimizer.lr_scaling=linear", "variant=original"),
      paper_regimes=dict(accuracy=0.939, b_l=25000, b_h=25000))
  c.runner = common.runner()
  return c
