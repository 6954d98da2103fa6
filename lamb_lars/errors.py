"""The typed errors of a user's mistakes, kept in a leaf module so every layer can raise them.

:class:`UserError` is the base of every mistake the user can fix by changing the command, the config or the workdir:
:class:`ConfigError` (a config that cannot run), ``DatasetNotFoundError`` (input_pipeline), ``CheckpointError``
(train.checkpoint) and ``WorkdirLocked`` (common.workdir_lock). Each says one sentence naming the key or the folder
and the fix; the command lines turn it into ``error: <that sentence>`` and exit status 2
(:mod:`lamb_lars.common.cli_errors`, which catches the base class and so imports none of the layers), before
anything is compiled. Any other exception is a bug and keeps its traceback.
"""


class UserError(Exception):
  """A mistake the user can fix; the message is one sentence naming what is wrong and the fix."""


class ConfigError(UserError, ValueError):
  """A config that cannot run; the message is one sentence naming the key and the fix."""
