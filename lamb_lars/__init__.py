"""lamb_lars: the science of huge-batch training, in JAX.

Importing this package parses no flags and touches no devices, so every module is usable from a notebook.
"""
__version__ = "0.1.0"
