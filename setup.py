"""Shim: the metadata lives in pyproject.toml (notebooks/ find a checkout by this file)."""

__import__("setuptools").setup()
