"""Errors a user can act on: the one home of flyviz's error classes.

Every problem with user input (a missing file, a corrupt checkpoint, a bad
argument, an optional package that is not installed) is raised as a
:class:`FlyvizError` subclass whose message is one line that says what is
wrong and what to do. The command line prints that line and exits with status
2; the app shows it in a dialog. Anything else is a bug.

This module imports nothing but the standard library, so ``import flyviz``
and ``except flyviz.FlyvizError`` stay cheap. ``flyviz.model.errors`` re-exports
these classes for code written against flyviz 0.1.

Hierarchy::

    FlyvizError
    ├── CheckpointError          a model's files are missing, damaged or inconsistent
    │   ├── ModelNotFoundError   a model spec names nothing that can be found
    │   └── DatasetNotFoundError a model needs a connectome dataset and none was found
    ├── TokenizerError           the tokenizer file is missing or malformed
    ├── InputError               a value (prompt, option, index) is out of range
    │   ├── SelectionError       a neuron selection query is bad or selects nothing
    │   ├── FileAccessError      a path cannot be read or written (too long, no
    │   │                        permission, a FIFO, a full disk: flyviz.fileio)
    │   ├── IndexOutOfRange      an index past the end (a recording's frame); also an
    │   │                        IndexError, as for any Python sequence
    │   └── ModelKindError       a model kind unknown or not registrable (flyviz.kinds);
    │                            also a ValueError, what those calls raised before
    ├── RecordingError           a saved recording is missing, damaged or mismatched
    ├── ExportError              a movie or data file could not be written
    │   └── ExportCancelled      the user cancelled an export
    └── MissingDependencyError   an optional package a feature needs is not installed
"""

from __future__ import annotations

__all__ = ["CheckpointError", "DatasetNotFoundError", "ExportCancelled", "ExportError",
           "FileAccessError", "FlyvizError", "IndexOutOfRange", "InputError", "Interrupted",
           "MissingDependencyError", "ModelKindError", "ModelNotFoundError", "RecordingError",
           "SelectionError", "TokenizerError"]


class FlyvizError(Exception):
    """Base class for errors caused by input the user can fix."""

    def __init__(self, message: str) -> None:
        # Keep it to one line: the CLI prints str(error) as is.
        super().__init__(" ".join(str(message).split()))


class Interrupted(FlyvizError):
    """A long run was stopped (Ctrl+C, or SIGTERM from ``kill`` or a job manager); the
    message says what is kept (finished chunks for ``--resume``, or nothing). The command
    line ends with it as with Ctrl+C: exit status 130."""


class CheckpointError(FlyvizError):
    """A checkpoint is missing, unreadable, truncated or inconsistent."""


class ModelNotFoundError(CheckpointError):
    """A model spec names nothing that can be found locally or in the cache."""


class DatasetNotFoundError(CheckpointError):
    """A model's weights need a connectome dataset (the graph) and none was given or found
    next to them; the user can name the dataset folder (``--dataset``, or the app's
    Open model dialog)."""


class TokenizerError(FlyvizError):
    """The tokenizer file is missing or malformed, or text cannot be encoded."""


class InputError(FlyvizError):
    """A user-supplied value (prompt, token id, option) is out of range."""


class SelectionError(InputError):
    """A neuron selection query cannot be parsed, names an unknown label, or selects no
    neurons (:mod:`flyviz.model.selection`)."""


class FileAccessError(InputError):
    """A path the user gave cannot be read or written: a name over the file system's
    limit, no permission, a read-only folder, a folder or a FIFO where a file was
    expected, a full disk (:func:`flyviz.fileio.os_error` words it)."""


class IndexOutOfRange(InputError, IndexError):
    """An index past the end of what there is (``recording.state(100)`` of a 20-frame run).

    Also an :class:`IndexError`, so that code written for a Python sequence
    (``try: recording[i] except IndexError``) keeps working."""


class ModelKindError(InputError, ValueError):
    """A model kind is unknown (:func:`flyviz.kinds.kind_named`) or cannot be registered
    (:func:`flyviz.kinds.register_kind`). Also a :class:`ValueError`, what those calls
    raised before, so that code catching it keeps working."""


class RecordingError(FlyvizError):
    """A saved recording is missing, corrupt or from an incompatible model."""


class ExportError(FlyvizError):
    """A movie or data file could not be written (bad path, encoder failure, cancelled)."""


class ExportCancelled(ExportError):
    """The user cancelled an export; nothing was written."""


class MissingDependencyError(FlyvizError):
    """A feature needs an optional package that is not installed; the message names the
    ``pip install`` line that adds it."""

    @classmethod
    def for_feature(cls, feature: str, package: str, extra: str) -> "MissingDependencyError":
        """``"<feature> needs <package>; install it with pip install 'flyviz[<extra>]'"``
        (the line :func:`flyviz.extras.require` gives)."""
        return cls(f"{feature} needs {package}; install it with pip install 'flyviz[{extra}]'")
