"""Published numbers a study report puts next to its measurements (records layer: data only).

You et al. 2020, "The Limit of the Batch Size" (arXiv:2006.08517): Table 2 (baselines and regimes), Table 3 (MNIST /
LeNet-5 optimizers at batch 8K, 30 epochs) and the huge-batch MNIST results of §3–4. A study config names its
workload (``analysis.paper = 'mnist_lenet'``) and the report looks the numbers up here. See docs/science.md.
"""
from __future__ import annotations

# Table 2: baseline batch B0, epochs ρ, baseline top-1 A, the large range [B_L, B_H], huge = (B_H, B_F], B_F.
# Def. 2.1: linear scaling works for every B < B_L, and B ≥ B_L is large, so B_L is the *lower* end of the large
# range: "for ImageNet, B_L = 2K, B_H = 64K" (Table 2 caption). MNIST large = [2K, 8K] means B_L = 2K.
TABLE2 = {
    "mnist_lenet": dict(b0=256, epochs=30, accuracy=0.992, large=(2048, 8192), b_l=2048, b_h=8192, b_f=60000),
    "cifar10_resnet50": dict(b0=128, epochs=200, accuracy=0.939, large=(2048, 25000), b_l=2048, b_h=25000,
                             b_f=50000),
    "imagenet_resnet50": dict(b0=256, epochs=90, accuracy=0.759, large=(2048, 65536), b_l=2048, b_h=65536,
                              b_f=1281167),
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
