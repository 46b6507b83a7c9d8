"""The error vocabulary: what a person can act on derives from `CodeDanceError`.

    CodeDanceError
      SettingsError(ValueError)   a setting or input that cannot work: bad option, preset, YAML
                                  file, override, output folder; demo, synth, world, curate and
                                  config errors; an import's bad paths or columns (InputError);
                                  a chat template the trainer cannot split (TemplateMismatch);
                                  an input image, answer kind or sandbox limit no run can use;
                                  an installed package the step needs missing or too old
      DataError                   benchmark data, an import folder or a report missing or
                                  unreadable (DataNotFoundError)
        CheckpointError           a saved model or training checkpoint that does not load whole
      BackendError(RuntimeError)  a model server or judge failed (PolicyError..., JudgeError...,
                                  curate's EndpointDown)
      ServiceError(RuntimeError)  the sandbox service could not start or stopped answering
                                  (the remote client's QuotaExceeded ...)
      SandboxUnavailable(RuntimeError)  the host cannot give the isolation that was required
      SandboxClosed(RuntimeError) a sandbox used after it was closed

The command line catches `CodeDanceError` and prints one line, ``error: <message>``, with exit
code 2. Anything else is a bug and keeps its traceback. A built-in error a person can cause is
turned into one of these where it is raised, not by the command line. Messages say what to
change. Outside the tree, on purpose: exceptions that never leave the module that raises them
(the sandbox's wire `ProtocolError` family, its `LimitExceeded` / `DeadlinePassed` /
`SnapshotBroken` during a rollback, curate's and the importer's per-row parse failures, and
private classes named with a leading underscore), each caught and turned into a step status, a
skipped row or one of the errors above (`tests/test_errors.py`). Only the standard library is
imported here.
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


class SandboxClosed(CodeDanceError, RuntimeError):
    """A sandbox used after it was closed; create a new one to run more code."""
