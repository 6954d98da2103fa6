"""Optimizers as optax transformations (the public names are re-exported from :mod:`lamb_lars`).

trust_ratio        the layer-wise trust ratio ‖w‖/‖d‖ (You et al. 2017, 2019) as small composable transforms
base_directions    SGD, momentum, Nesterov, AdaGrad, RMSprop, Adam directions and ``layerwise(base)``
optimizers         the public aliases: ``lars``, ``lamb``, ``layerwise_*``, the "original" solvers
tf_lars            LARS as the paper's authors ran it (TensorFlow's ``LARSOptimizer``)
masks              parameter masks from regexes over parameter paths
schedules          warmup, decay and batch-size LR scaling (You et al. 2020 §3–4)
lr_table           the schedule as data carried in the optimizer state
optimizer_config   ``config.optimizer`` → an optax transformation and its schedule
preconditioner     an adaptive optimizer's diagonal preconditioner P, read from its state (noise scale)
"""
