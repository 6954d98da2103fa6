"""Smoke recipe: ResNet-18 (CIFAR stem) on tiny synthetic 8×8 images, with BN groups — a minute on a laptop CPU.

Command:  XLA_FLAGS=--xla_force_host_platform_device_count=8 JAX_PLATFORMS=cpu \\
              python train.py --config=lamb_lars/configs/smoke_resnet18.py --workdir=/tmp/smoke_resnet18
Hardware: any CPU; with the XLA_FLAGS above, 8 fake devices, so the (full) batch of 32 is 4 per device and
          `bn.examples_per_group=8` pools BN statistics over pairs of devices (on one device: ghost batches of 8).
          ≈ 35 s of CPU time (20 s of it compiling ResNet-18), measured on the shared 2-core CPU.
Expected: the mean training loss falls from ≈ 2.1 over steps 1–2 to ≈ 1.4 over steps 3–4 (the model memorises 32
          random examples); evaluation on 40 other random examples stays at chance or worse.
          tests/test_resnet_train.py runs this config through the real trainer.

Not a paper recipe: it exercises the ImageNet recipes' code path (ResNet, group BN, LARS + cosine decay,
evaluation with a padded last batch) in seconds. Everything is overridable, e.g. --config.num_microbatches=2.
"""
from lamb_lars.configs import default


def get_config():
  config = default.get_config()
  config.dataset = "synthetic"
  config.synthetic.image_shape = (8, 8, 3)
  config.synthetic.num_classes = 10
  config.synthetic.num_train = 32     # one full batch per epoch
  config.synthetic.num_eval = 40      # not a multiple of eval_batch_size: the last batch is padded and masked
  config.model = "resnet18_cifar"
  config.num_classes = 10
  config.dtype = "float32"
  config.batch_size = 32
  config.num_train_steps = 4
  config.eval_batch_size = 16
  config.eval_every_epochs = 2.0      # 1 step per epoch: evaluations after steps 2 and 4
  config.checkpoint_every_epochs = 0.0
  config.bn.mode = "ghost"            # on one device: ghost batches of 8; on 8 devices either rule pools pairs
  config.bn.examples_per_group = 8

  opt = config.optimizer
  opt.name = "lars"
  opt.learning_rate = 10.0           # with η = 0.001: each layer moves by ≈ 1% of its norm per step
  opt.lr_scaling = "none"
  opt.momentum = 0.9
  opt.weight_decay = 1e-4
  opt.schedule.decay = "cosine"
  return config
