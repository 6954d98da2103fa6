"""ImageNet / ResNet-50 v1.5 batch-size ladder 256 → 128K: the large-batch regime [2K, 64K] and the huge one
(64K, 1.28M) of You et al. 2020 Table 2 (docs/science.md). For accelerator pods; not run on the 2-core CPU.

Command:  python -m lamb_lars.study run --config=lamb_lars/configs/studies/imagenet_ladder.py \\
              --workdir=gs://BUCKET/imagenet --config.base.data_dir=gs://BUCKET/tensorflow_datasets \\
              --executor=ray --ray_address=auto
          python -m lamb_lars.study report --workdir=gs://BUCKET/imagenet --out=docs/studies/imagenet_ladder
Hardware: every trial is a 90-epoch ResNet-50 (≈ 35 min on 8 H100s at MLPerf-level throughput, an estimate; see
          lamb_lars/configs/imagenet_resnet50.py and docs/ray.md): 1 baseline + 7 linear + 2 techniques × 3 batches × 4
          trials. Batches beyond the devices' memory need --config.base.num_microbatches (ghost BN keeps 128 examples
          per BN group: bn.mode='ghost', bn.ghost_batch_size=128).
Expected (paper): baseline 256 → 75.9%; B_L = 2K, B_H = 64K (Table 2 caption; large = [2K, 64K]); LARS reaches the
baseline up to 64K (32K: 76.7% in 90
epochs) and not beyond (128K best 73.37%, Table 4).

Roles: the baseline (Goyal et al.'s recipe at 256, no warmup), linear scaling of it (η = 0.1·B/256, nothing else
changed), and two techniques: Goyal's 5-epoch gradual warmup ('warmup', the LR searched around the linear rule)
and LARS with the MLPerf-era presets' warmup + polynomial decay (label smoothing 0.1, wd 1e-4), LR and warmup
searched around the presets (batch < 32K: LR 25 / 5 warmup epochs; < 64K: 32 / 14; ≥ 64K: 35.6 / 40).
"""
import ml_collections

from lamb_lars.configs import imagenet_resnet50
from lamb_lars.configs.studies import common

B0 = 256
LADDER = (256, 1024, 4096, 8192, 16384, 32768, 65536, 131072)
TECHNIQUE = (32768, 65536, 131072)


def get_config() -> ml_collections.ConfigDict:
  base = imagenet_resnet50.get_config()
  base.progress = False
  base.validation_split = 50000
  base.stop.dead_after_fraction = 0.1
  c = ml_collections.ConfigDict()
  c.name = "imagenet_ladder"
  c.base = base
  c.sweeps = (
      dict(name="baseline", role="baseline", fixed={"batch_size": B0}),
      dict(name="linear", role="linear", grid={"batch_size": LADDER[1:]}),
      dict(name="warmup", role="technique", technique="warmup", grid={"batch_size": TECHNIQUE},
           fixed={"optimizer.schedule.warmup_epochs": 5.0},
           search={"optimizer.learning_rate": ("log", 0.03, 0.3)}, num_trials=4, seed=1),
      dict(name="lars", role="technique", technique="lars", grid={"batch_size": TECHNIQUE},
           fixed={"optimizer.name": "lars", "optimizer.lr_scaling": "none", "optimizer.schedule.decay": "poly",
                  "optimizer.schedule.poly_power": 2.0, "label_smoothing": 0.1, "optimizer.weight_decay": 1e-4},
           search={"optimizer.learning_rate": ("log", 10.0, 60.0),
                   "optimizer.schedule.warmup_epochs": ("linear", 5.0, 40.0)}, num_trials=4, seed=2),
  )
  c.search = common.search(min_epochs=10, reduction_factor=3)
  c.runner = common.runner(num_workers=1, cpus_per_trial=0)
  c.replicates = common.replicates(num_seeds=3)
  c.runner.resources = {"CPU": 8, "GPU": 8}
  c.analysis = common.analysis(
      title="ImageNet / ResNet-50 batch-size ladder (90 epochs)", paper="imagenet_resnet50", target_goal=0.759,
      num_train=1281167 - 50000, baseline_epochs=90.0, techniques=("warmup", "lars"), target_technique="")
  return c
