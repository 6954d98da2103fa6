#!/usr/bin/env bash
# The MNIST / LeNet-5 baseline of You et al. 2020 (Table 2), fully offline: installs, then trains 30 epochs at
# batch 256 and prints the test accuracy (expected ≥ 99.0%; paper 99.2%). Extra arguments go to train.py,
# e.g. `bash scripts/demo.sh --config.num_epochs=5`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
python train.py --config=lamb_lars/configs/mnist_lenet.py --workdir="${WORKDIR:-runs/mnist_lenet}" "$@"
