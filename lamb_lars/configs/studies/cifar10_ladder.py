"""CIFAR-10 / ResNet-50 (CIFAR stem) batch-size ladder 128 → 50K: the large-batch regime [2K, 25K] and the huge one
(25K, 50K) of You et al. 2020 Table 2 (here 45K: 5K are held out for validation) (docs/science.md). For accelerators;
not run on the 2-core CPU.

Command:  python -m lamb_lars.study run --config=lamb_lars/configs/studies/cifar10_ladder.py \\
              --workdir=runs/studies/cifar10 --config.base.data_dir=$TFDS_DATA_DIR [--executor=ray --ray_address=auto]
          python -m lamb_lars.study report --workdir=runs/studies/cifar10 --out=docs/studies/cifar10_ladder
Hardware: one GPU per trial, bf16 (lamb_lars/configs/cifar10_resnet50.py). 1 baseline + 8 linear runs + 3 techniques × 4
          batches × 6 searched trials (ASHA keeps about 2 of each 6 to the full 200 epochs). Batches beyond one
          device's memory need --config.base.num_microbatches or more devices.
Expected (paper): baseline 128 → 93.9% in 200 epochs; linear scaling works below B_L = 2K (Table 2: large =
[2K, 25K]); no technique reaches 99.5%·A above B_H = 25K.

Roles (docs/studies.md): the baseline recipe (momentum SGD, η = 0.1 at 128, cosine, 200 epochs), linear scaling of
it (η·B/128 and nothing else), and the techniques: LR + warmup tuning of the same optimizer ('tuned_momentum'),
LARS and LAMB with warmup + polynomial decay, each searched (6 quasi-random points per batch).
"""
import ml_collections

from lamb_lars.configs import cifar10_resnet50
from lamb_lars.configs.studies import common

B0 = 128
FULL = 45000  # the training set after the 5K validation hold-out: the full batch of this study
LADDER = (128, 512, 2048, 4096, 8192, 16384, 25000, 32768, FULL)
TECHNIQUE = (16384, 25000, 32768, FULL)


def _technique(name: str, fixed: dict, lr: tuple, warmup: tuple, seed: int) -> dict:
  return dict(name=name, role="technique", technique=name, fixed=fixed, grid={"batch_size": TECHNIQUE},
              search={"optimizer.learning_rate": ("log",) + lr,
                      "optimizer.schedule.warmup_epochs": ("linear",) + warmup}, num_trials=6, seed=seed)


def get_config() -> ml_collections.ConfigDict:
  base = cifar10_resnet50.get_config()
  base.progress = False
  base.validation_split = 5000
  base.diagnostics.dist_from_init = True
  base.stop.dead_after_fraction = 0.1
  poly = {"optimizer.schedule.decay": "poly", "optimizer.lr_scaling": "none", "optimizer.weight_decay": 5e-4}
  c = ml_collections.ConfigDict()
  c.name = "cifar10_ladder"
  c.base = base
  c.sweeps = (
      dict(name="baseline", role="baseline", fixed={"batch_size": B0}),
      dict(name="linear", role="linear", grid={"batch_size": LADDER[1:]}),
      _technique("tuned_momentum", {}, (0.1 / 30, 0.1 * 3), (0.0, 20.0), 1),
      _technique("lars", {"optimizer.name": "lars", **poly}, (2.0, 30.0), (5.0, 40.0), 2),
      _technique("lamb", {"optimizer.name": "lamb", **poly}, (2e-3, 2e-2), (5.0, 40.0), 3),
  )
  c.search = common.search(min_epochs=20, reduction_factor=3)
  c.runner = common.runner(num_workers=1, cpus_per_trial=0)
  c.replicates = common.replicates(num_seeds=3)
  c.runner.resources = {"CPU": 4, "GPU": 1}
  c.analysis = common.analysis(
      title="CIFAR-10 / ResNet-50 batch-size ladder (200 epochs)", paper="cifar10_resnet50", target_goal=0.93,
      num_train=FULL, baseline_epochs=200.0, techniques=("tuned_momentum", "lars", "lamb"),
      target_technique="tuned_momentum")
  return c
