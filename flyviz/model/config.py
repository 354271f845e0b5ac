"""Model hyper-parameters shared by every Fly LLM checkpoint layout."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class ModelConfig:
    """Sizes and constants of one Fly LLM.

    Parameters
    ----------
    neurons
        Number of recurrent neurons (49,393 in the released models).
    delay_k
        Number of delay slots; slot ``j`` carries the token ``j`` steps back.
    neurons_per_slot
        Input neurons driven by each slot (1,758 in the released models).
    d_embed
        Token embedding width (128 for ngxson, 32 for fly-wordbrain).
    vocabulary
        Vocabulary size (1,024).
    readout_rank
        Rank of the two-factor readout, or ``None`` for one dense matrix.
    leak
        Leak of the state update ``x = (1 - leak) x + leak tanh(...)``.
    layer_norm_eps
        Epsilon of the final LayerNorm.
    pad_token_id, bos_token_id, eos_token_id
        Special token ids (0, 1, 2). ``eos_token_id`` is ``None`` for a model with no
        end-of-sequence token (FlyGPT's 65 characters): its text never ends by itself,
        only at the token limit.
    microsteps
        Updates of the state per token, each with the same drive (1 in the Fly
        LLM, 2 in FlyGPT).
    layer_norm
        Whether the readout normalises the read-out neurons' states first (the
        Fly LLM) or reads them as they are (FlyGPT's biased linear map).
    bos_prepended
        Whether a prompt starts with BOS (the Fly LLM) or with its first
        character (FlyGPT has no BOS).

    Notes
    -----
    ``microsteps``, ``layer_norm`` and ``bos_prepended`` at their defaults, with
    no per-neuron leak and no input or readout bias in the checkpoint, are
    the Fly LLM's operator exactly (the engine then takes today's path).
    """

    neurons: int
    delay_k: int
    neurons_per_slot: int
    d_embed: int
    vocabulary: int
    readout_rank: int | None = None
    leak: float = 0.9
    layer_norm_eps: float = 1e-5
    pad_token_id: int = 0
    bos_token_id: int = 1
    eos_token_id: int | None = 2
    microsteps: int = 1
    layer_norm: bool = True
    bos_prepended: bool = True

    @property
    def n_inputs(self) -> int:
        """Number of input neurons actually driven (``delay_k * neurons_per_slot``)."""
        return self.delay_k * self.neurons_per_slot

    @property
    def readout_kind(self) -> str:
        """``"dense"`` or ``"rank-<r>"``."""
        return "dense" if self.readout_rank is None else f"rank-{self.readout_rank}"

    def to_dict(self) -> dict[str, Any]:
        """Plain-JSON form, used by ``flyviz info --json`` and recordings."""
        return asdict(self)
