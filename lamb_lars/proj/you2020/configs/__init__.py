"""The authors' own MNIST runs of You et al. 2020, one config per configuration checked against their logs.

The paper's MNIST numbers come from the TensorFlow TPU code in GitHub ``fastalgo/mnist_tpu``: TensorFlow's official
MNIST CNN (``model='mnist_cnn'``) trained on all 60,000 training images and evaluated on the 10,000 test images,
with the recipes below. Each config's docstring names the log file(s) it reproduces and their final test accuracy;
``docs/studies/mnist_paper_logs/`` compares our runs with them. ``common.base`` holds what all of them share.
"""
