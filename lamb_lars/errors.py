"""The typed error of a user's mistake in a config, kept in a leaf module so every layer can raise it.

:class:`ConfigError` says one sentence naming the key and the fix; the command lines turn it into ``error: <that
sentence>`` and exit status 2 (:mod:`lamb_lars.common.cli_errors`), before anything is compiled. Any other exception
is a bug and keeps its traceback.
"""


class ConfigError(ValueError):
  """A config that cannot run; the message is one sentence naming the key and the fix."""
