"""The numerical core: checkpoints, tokenizer, engine and sampler, selections and
interventions. No Qt, no vispy."""

from flyviz.model.checkpoint import Anatomy, Checkpoint, validate_checkpoint
from flyviz.model.config import ModelConfig
from flyviz.model.engine import Engine, softmax, top_k
from flyviz.model.errors import (CheckpointError, FlyvizError, InputError,
                                 ModelNotFoundError, RecordingError, TokenizerError)
from flyviz.model.interventions import (Clamp, Cut, ResolvedInterventions, Scale, Silence,
                                        Stimulate, parse_intervention)
from flyviz.model.patching import Patch, PatchSource
from flyviz.model.sampler import Sampler
from flyviz.model.selection import NeuronIndex, SelectionError, neuron_index, select
from flyviz.model.tokenizer import FlyTokenizer

__all__ = [
    "Anatomy", "Checkpoint", "CheckpointError", "Clamp", "Cut", "Engine", "FlyTokenizer",
    "FlyvizError", "InputError", "ModelConfig", "ModelNotFoundError", "NeuronIndex", "Patch",
    "PatchSource",
    "RecordingError", "ResolvedInterventions", "Sampler", "Scale", "SelectionError", "Silence",
    "Stimulate", "TokenizerError", "neuron_index", "parse_intervention", "select", "softmax",
    "top_k", "validate_checkpoint",
]
