"""Per-token frames, the recording they form, the runner that makes them, comparisons of
two runs, and data export. No Qt, no vispy."""

from flyviz.record.compare import ComparedStep, Comparison, compare, kl_divergence
from flyviz.record.frame import PHASE_GENERATION, PHASE_PROMPT, Frame
from flyviz.record.recording import Recording
from flyviz.record.run import GenerationSettings, RunSummary, encode_prompt, iter_frames
from flyviz.record.runner import Model

__all__ = ["ComparedStep", "Comparison", "Frame", "GenerationSettings", "Model",
           "PHASE_GENERATION", "PHASE_PROMPT", "Recording", "RunSummary", "compare",
           "encode_prompt", "iter_frames", "kl_divergence"]
