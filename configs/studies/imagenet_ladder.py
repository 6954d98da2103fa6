"""ImageNet / ResNet-50 v1.5 batch-size ladder 256 → 128K: the large-batch regime [2K, 64K] and the huge one
(64K, 1.28M) of You et al. 2020 Table 2 (DESIGN §1.1, §1.5). For accelerator pods; not run on the 2-core CPU.

Command:  python -m lamb_lars.study run --config=configs/studies/imagenet_ladder.py --workdir=runs/studies/imagenet \\
              --config.base.data_dir=$TFDS_DATA_DIR
          python -m lamb_lars.study report --workdir=runs/studies/imagenet --out=docs/studies/imagenet_ladder
Hardware: every run is a 90-epoch ResNet-50 (≈ 35 min on 8 H100s at MLPerf-level throughput, estimate; see
          configs/imagenet_resnet50.py); 8 linear rungs + 3 LARS rungs. Batches beyond the devices' memory need
          --config.base.num_microbatches (ghost BN keeps 128 examples per BN group: bn.examples_per_group).
Expected (paper): baseline 256 → 75.9%; linear scaling + warmup holds to B_L = 64K; LARS reaches the baseline up
to 64K (32K: 76.7% in 90 epochs) and not beyond (128K best 73.37%, Table 4), so B_H = 64K.

Rungs: Goyal et al.'s recipe (configs/imagenet_resnet50.py): η = 0.1·B/256, 5-epoch warmup from 0.1 for B > 256,
step decay. LARS rungs use the MLPerf-era presets (DESIGN §1.5: batch < 32K: LR 25 / 5 warmup epochs; < 64K:
32 / 14; ≥ 64K: 35.6 / 40; poly power 2), label smoothing 0.1, weight decay 1e-4.
"""
import ml_collections

from configs import imagenet_resnet50
from configs.studies import common

B0 = 256
LADDER = (256, 1024, 4096, 8192, 16384, 32768, 65536, 131072)
LARS_PRESETS = {32768: (32.0, 14.0), 65536: (35.6, 40.0), 131072: (35.6, 40.0)}  # batch → (LR, warmup epochs)


def get_config() -> ml_collections.ConfigDict:
  base = imagenet_resnet50.get_config()
  base.progress = False
  base.bn.examples_per_group = 128
  sweeps = []
  for b in LADDER:
    fixed = {"batch_size": b}
    if b > B0:
      fixed.update({"optimizer.schedule.warmup_epochs": 5.0, "optimizer.schedule.warmup_init_factor": B0 / b})
    sweeps.append(dict(name="linear", fixed=fixed))
  for b, (lr, warmup) in LARS_PRESETS.items():
    sweeps.append(dict(name="lars", fixed={
        "batch_size": b, "optimizer.name": "lars", "optimizer.learning_rate": lr, "optimizer.lr_scaling": "none",
        "optimizer.schedule.warmup_epochs": warmup, "optimizer.schedule.decay": "poly",
        "optimizer.schedule.poly_power": 2.0, "label_smoothing": 0.1, "optimizer.weight_decay": 1e-4}))
  c = ml_collections.ConfigDict()
  c.name = "imagenet_ladder"
  c.base = base
  c.sweeps = tuple(sweeps)
  c.analysis = common.analysis(
      title="ImageNet / ResNet-50 batch-size ladder (90 epochs)", target_goal=0.759, baseline_batch=B0,
      num_train=1281167, linear_select=("optimizer.name=momentum", "optimizer.lr_scaling=linear", "variant=original"),
      paper_regimes=dict(accuracy=0.759, b_l=65536, b_h=65536),
      paper_points=((32768, "lars", 0.767, "LARS, 90 epochs"), (131072, "lars", 0.7337, "LARS, Table 4 tuned")))
  c.runner = common.runner()
  return c
