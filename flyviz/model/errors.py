"""The error classes, re-exported from :mod:`flyviz.errors` (their home) for code that
imports them from here, as flyviz 0.1 did."""

from flyviz.errors import (CheckpointError, DatasetNotFoundError, ExportCancelled, ExportError,
                           FlyvizError, InputError, MissingDependencyError, ModelNotFoundError,
                           RecordingError, SelectionError, TokenizerError)

__all__ = ["CheckpointError", "DatasetNotFoundError", "ExportCancelled", "ExportError",
           "FlyvizError", "InputError", "MissingDependencyError", "ModelNotFoundError",
           "RecordingError", "SelectionError", "TokenizerError"]
