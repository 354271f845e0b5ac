"""Errors a user can act on.

Every problem with user input (a missing file, a corrupt checkpoint, a bad
argument) is raised as a :class:`FlyvizError` subclass whose message is one
line that says what is wrong and what to do. The command line prints that line
and exits with status 2; the app shows it in a dialog. Anything else is a bug.
"""

from __future__ import annotations


class FlyvizError(Exception):
    """Base class for errors caused by input the user can fix."""

    def __init__(self, message: str) -> None:
        # Keep it to one line: the CLI prints str(error) as is.
        super().__init__(" ".join(str(message).split()))


class CheckpointError(FlyvizError):
    """A checkpoint is missing, unreadable, truncated or inconsistent."""


class ModelNotFoundError(CheckpointError):
    """A model spec names nothing that can be found locally or in the cache."""


class TokenizerError(FlyvizError):
    """The tokenizer file is missing or malformed, or text cannot be encoded."""


class InputError(FlyvizError):
    """A user-supplied value (prompt, token id, option) is out of range."""


class RecordingError(FlyvizError):
    """A saved recording is missing, corrupt or from an incompatible model."""


class ExportError(FlyvizError):
    """A movie could not be written (bad path, encoder failure, cancelled)."""
