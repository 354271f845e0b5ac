"""The numerical core: checkpoints, tokenizer, engine and sampler. No Qt, no vispy."""

from flyviz.model.checkpoint import Anatomy, Checkpoint, validate_checkpoint
from flyviz.model.config import ModelConfig
from flyviz.model.engine import Engine, softmax, top_k
from flyviz.model.errors import (CheckpointError, FlyvizError, InputError,
                                 ModelNotFoundError, RecordingError, TokenizerError)
from flyviz.model.sampler import Sampler
from flyviz.model.tokenizer import FlyTokenizer

__all__ = [
    "Anatomy", "Checkpoint", "CheckpointError", "Engine", "FlyTokenizer", "FlyvizError",
    "InputError", "ModelConfig", "ModelNotFoundError", "RecordingError", "Sampler",
    "TokenizerError", "softmax", "top_k", "validate_checkpoint",
]
