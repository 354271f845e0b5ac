"""Per-token frames, the recording they form, comparisons of two runs, and movie export.
No Qt, no vispy."""

from flyviz.record.compare import ComparedStep, Comparison, compare, kl_divergence
from flyviz.record.frame import PHASE_GENERATION, PHASE_PROMPT, Frame
from flyviz.record.recording import Recording
from flyviz.record.run import GenerationSettings, RunSummary, encode_prompt, iter_frames

__all__ = ["ComparedStep", "Comparison", "Frame", "GenerationSettings", "PHASE_GENERATION",
           "PHASE_PROMPT", "Recording", "RunSummary", "compare", "encode_prompt", "iter_frames",
           "kl_divergence"]
