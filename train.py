"""Train and evaluate one config:
``python train.py --config=lamb_lars/configs/mnist_lenet.py --workdir=runs/mnist_lenet``.

The command line lives in :mod:`lamb_lars.main` (installed as ``lamb_lars_train``); ``--help`` lists the configs.
"""

from lamb_lars.main import main, train_and_evaluate  # noqa: F401  (train.train_and_evaluate for notebooks)

if __name__ == "__main__":
  main()
