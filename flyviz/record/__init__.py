"""Per-token frames, the recording they form, and movie export. No Qt, no vispy."""

from flyviz.record.frame import PHASE_GENERATION, PHASE_PROMPT, Frame
from flyviz.record.recording import Recording
from flyviz.record.run import GenerationSettings, encode_prompt, iter_frames

__all__ = ["Frame", "GenerationSettings", "PHASE_GENERATION", "PHASE_PROMPT", "Recording",
           "encode_prompt", "iter_frames"]
