"""One per-token snapshot of a run: the unit that live view, scrubbing and export share."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

PHASE_PROMPT = "prompt"
PHASE_GENERATION = "generation"


@dataclass(frozen=True)
class Frame:
    """The model's state right after it consumed one input token.

    Parameters
    ----------
    position
        Index of the input token in the sequence (0 is BOS).
    phase
        ``"prompt"`` while reading the prompt; ``"generation"`` from the frame
        that consumes the last prompt token on (that frame predicts the first
        new token), as in the fly-wordbrain replay traces.
    input_token_id, input_text
        The token consumed.
    predicted_token_id, predicted_text, probability
        The token chosen next from this state and its probability.
    top_k_ids, top_k_probabilities, top_k_text
        The most likely next tokens, most likely first.
    state
        ``(neurons,)`` float32 state after the token (a private copy).
    mean_abs_state
        Mean |x| over all neurons of ``state``.
    text_so_far
        Decoded continuation up to and including the predicted token
        (``""`` during the prompt).
    generation_index
        For generation frames, the index of the predicted token among the
        generated ones; ``None`` during the prompt.
    probabilities
        The whole ``(vocabulary,)`` float64 next-token distribution, as
        :func:`~flyviz.record.run.iter_frames` computed it (for comparing two
        runs); ``None`` in frames read back from a recording, which keeps only
        the top-k.
    """

    position: int
    phase: str
    input_token_id: int
    input_text: str
    predicted_token_id: int
    predicted_text: str
    probability: float
    top_k_ids: np.ndarray
    top_k_probabilities: np.ndarray
    top_k_text: tuple[str, ...]
    state: np.ndarray = field(repr=False)
    mean_abs_state: float = 0.0
    text_so_far: str = ""
    generation_index: int | None = None
    probabilities: np.ndarray | None = field(default=None, repr=False)

    @property
    def is_generation(self) -> bool:
        """True for frames that predict a generated token."""
        return self.phase == PHASE_GENERATION

    @property
    def top1_probability(self) -> float:
        """Probability of the most likely next token."""
        return float(self.top_k_probabilities[0])


#: The fields of a :class:`Frame` a recording keeps per frame beside its state and its
#: text (stored apart, see :mod:`flyviz.record.recording`), in :class:`Frame`'s order;
#: ``probabilities`` is not kept. Code that copies a frame's fields uses this list, so a
#: new field is written in one place (and in the recording's storage record); the file
#: codec (:mod:`flyviz.record.flyrec_codec`) stores it in each frame's JSON entry unless
#: it names it as a number tensor.
STORED_FIELDS: tuple[str, ...] = tuple(
    f.name for f in fields(Frame) if f.name not in ("state", "text_so_far", "probabilities"))


#: Frames per chunk of appended states, and between two frames whose whole text is kept
#: (the text anchors; the frames between store what changed).
CHUNK_FRAMES = 64


@dataclass
class FrameInfo:
    """Everything in a frame but its state (the fields :data:`STORED_FIELDS` names), and its
    text as what changed since the previous frame: ``text_keep`` characters of the previous
    frame's ``text_so_far``, then ``text_tail``.

    What a :class:`~flyviz.record.recording.Recording` holds per frame
    (:attr:`Recording.frame_infos <flyviz.record.recording.Recording.frame_infos>`) and what the
    ``.flyrec`` codec reads and writes beside the states.
    """

    position: int
    phase: str
    input_token_id: int
    input_text: str
    predicted_token_id: int
    predicted_text: str
    probability: float
    top_k_ids: np.ndarray
    top_k_probabilities: np.ndarray
    top_k_text: tuple[str, ...]
    mean_abs_state: float
    text_keep: int          # characters kept from the previous frame's text_so_far
    text_tail: str          # what follows them
    generation_index: int | None

    @classmethod
    def of(cls, values: Any, keep: int, tail: str) -> "FrameInfo":
        """The record of a frame's :data:`STORED_FIELDS` values (a mapping), normalised."""
        generation = values["generation_index"]
        return cls(
            position=int(values["position"]), phase=str(values["phase"]),
            input_token_id=int(values["input_token_id"]), input_text=str(values["input_text"]),
            predicted_token_id=int(values["predicted_token_id"]),
            predicted_text=str(values["predicted_text"]),
            probability=float(values["probability"]),
            top_k_ids=np.asarray(values["top_k_ids"], dtype=np.int32).copy(),
            top_k_probabilities=np.asarray(values["top_k_probabilities"], dtype=np.float32).copy(),
            top_k_text=tuple(values["top_k_text"]), mean_abs_state=float(values["mean_abs_state"]),
            text_keep=int(keep), text_tail=str(tail),
            generation_index=None if generation is None else int(generation))
