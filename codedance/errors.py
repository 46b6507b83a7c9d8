"""The error vocabulary: what a person can act on derives from `CodeDanceError`.

    CodeDanceError
      SettingsError(ValueError)   a setting or input that cannot work: bad option, preset, YAML
                                  file, override, output folder; demo, synth, world, config errors
      DataError                   benchmark data missing or unreadable (DataNotFoundError)
        CheckpointError           a saved model or training checkpoint that does not load whole
      BackendError(RuntimeError)  a model server or judge failed (PolicyError..., JudgeError...)

The command line catches `CodeDanceError` (and the sandbox's own `ServiceError` /
`SandboxUnavailable`, which say what to run: the sandbox keeps its own errors) and prints one
line, ``error: <message>``, with exit code 2. Anything else is a bug and keeps its traceback.
Messages say what to change. Only the standard library is imported here.
"""

from __future__ import annotations


class CodeDanceError(Exception):
    """Base of every error a person can act on."""


class SettingsError(CodeDanceError, ValueError):
    """A setting, option, file or folder that cannot work; the text says what to change."""


class DataError(CodeDanceError):
    """Input data that is missing or unreadable; the text names the file and where to get it."""


class CheckpointError(DataError):
    """A saved model or checkpoint whose weights do not fill the model; the text names the folder
    and what to delete to go on."""


class BackendError(CodeDanceError, RuntimeError):
    """A model server or judge that failed or answered something unusable."""
