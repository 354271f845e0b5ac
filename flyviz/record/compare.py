"""Run the untouched and the intervened model side by side, token by token.

:class:`Comparison` holds two engines on one checkpoint, the untouched one and
one with interventions (:mod:`flyviz.model.interventions`), and
:meth:`Comparison.run` steps them in lockstep through
:func:`~flyviz.record.run.iter_frames`, yielding one :class:`ComparedStep` (a
pair of frames with their KL divergence and mean |Δx|) per token, so a
GUI worker thread can show them as they come and stop at any time:

``"forced"`` (teacher forcing, the default)
    the untouched model continues the prompt with the sampler; the
    intervened model reads the same tokens, so the two are comparable
    position by position: the same input history, two next-token
    distributions and two states.
``"free"``
    both continue freely with the same sampler settings and seed, so they
    write the same text until the intervention makes them part.

:func:`compare` is what ``flyviz compare --json`` prints: both free-running
runs and the teacher-forced per-token statistics.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from flyviz.model.checkpoint import Checkpoint
from flyviz.model.engine import Engine
from flyviz.errors import InputError
from flyviz.model.interventions import ResolvedInterventions
from flyviz.model.tokenizer import FlyTokenizer, tokenizer_for
from flyviz.record.flyrec_codec import COMPARISON_MODES
from flyviz.record.frame import Frame
from flyviz.record.run import (GenerationSettings, RunSummary, encode_prompt, iter_frames,
                               run_metadata)

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.record.recording import Recording

#: How a comparison runs (:data:`flyviz.record.flyrec_codec.COMPARISON_MODES`, the one list).
MODES = COMPARISON_MODES

#: Where the intervened model gives a token no probability at all (float64
#: underflow), its probability counts as this, so that KL stays finite.
PROBABILITY_FLOOR = 1e-300


def kl_divergence(p: np.ndarray, q: np.ndarray) -> float:
    """KL(p ‖ q) in nats: ``sum(p * (log p - log q))`` over the tokens where ``p > 0``
    (``q`` floored at :data:`PROBABILITY_FLOOR`)."""
    p = np.asarray(p, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    keep = p > 0
    pk = p[keep]
    return float(np.sum(pk * (np.log(pk) - np.log(np.maximum(q[keep], PROBABILITY_FLOOR)))))


@dataclass(frozen=True)
class ComparedStep:
    """One position of a comparison: the two frames and how far apart they are.

    Parameters
    ----------
    position
        Input position (0 is BOS), as in :attr:`Frame.position`.
    baseline, intervened
        The untouched and the intervened frame; in ``"free"`` mode one may be
        ``None`` once its run has ended (EOS) and the other goes on.
    kl
        KL(p_untouched ‖ p_intervened) of the next-token distributions in
        nats, or ``None`` when a frame is missing.
    mean_abs_delta
        Mean over all neurons of |x_intervened − x_untouched|, or ``None``.
    """

    position: int
    baseline: Frame | None
    intervened: Frame | None
    kl: float | None
    mean_abs_delta: float | None

    @property
    def is_generation(self) -> bool:
        """True when the step predicts a generated token (in the untouched run, if any)."""
        frame = self.baseline if self.baseline is not None else self.intervened
        return frame is not None and frame.is_generation

    def delta(self) -> np.ndarray | None:
        """``x_intervened − x_untouched`` (float32, per neuron), or ``None``."""
        if self.baseline is None or self.intervened is None:
            return None
        return self.intervened.state - self.baseline.state


def _pair(position: int, baseline: Frame | None, intervened: Frame | None) -> ComparedStep:
    if baseline is None or intervened is None:
        return ComparedStep(position, baseline, intervened, None, None)
    kl = None
    if baseline.probabilities is not None and intervened.probabilities is not None:
        kl = kl_divergence(baseline.probabilities, intervened.probabilities)
    delta = float(np.abs(intervened.state - baseline.state).mean(dtype=np.float64))
    return ComparedStep(position, baseline, intervened, kl, delta)


class Comparison:
    """An untouched and an intervened engine on one checkpoint, run in lockstep.

    Parameters
    ----------
    baseline
        The untouched engine (it must have no interventions).
    intervened
        An engine on the same checkpoint with the interventions to study.
    tokenizer
        The checkpoint's tokenizer.

    Use :meth:`for_checkpoint` to build both engines. The engines are reset
    by every :meth:`run`; call :meth:`close` when done with them (or let
    the caller who made them close them).
    """

    def __init__(self, baseline: Engine, intervened: Engine, tokenizer: FlyTokenizer) -> None:
        if baseline.checkpoint is not intervened.checkpoint:
            raise InputError("the untouched and the intervened engine must run the same model")
        if baseline.interventions:
            raise InputError("the untouched engine has interventions; give it none")
        self.baseline = baseline
        self.intervened = intervened
        self.tokenizer = tokenizer

    @classmethod
    def for_checkpoint(cls, checkpoint: Checkpoint, interventions: Any,
                       threads: int | None = None, kernel: str | None = None,
                       tokenizer: FlyTokenizer | None = None,
                       overlap: bool | None = None) -> "Comparison":
        """Two new engines on ``checkpoint``, the second with ``interventions``.

        ``threads``, ``kernel`` and ``overlap`` are each engine's (see
        :class:`~flyviz.model.engine.Engine`). With ``overlap``, each engine
        starts its next ``W @ x`` in its own background thread as soon as its
        state is updated, so the two products run side by side while the
        stepping thread reads out the other engine: on two cores a lockstep
        position then costs about one product instead of two, with the same
        arithmetic.

        Raises
        ------
        InputError
            For bad interventions, or none at all.
        """
        intervened = Engine(checkpoint, threads, kernel=kernel, interventions=interventions,
                            overlap=overlap)
        if not intervened.interventions:
            intervened.close()
            raise InputError("give at least one intervention to compare with the untouched run")
        return cls(Engine(checkpoint, threads, kernel=kernel, overlap=overlap), intervened,
                   tokenizer or tokenizer_for(checkpoint))

    @property
    def interventions(self) -> ResolvedInterventions:
        """The intervened engine's interventions, resolved."""
        return self.intervened.interventions

    def set_interventions(self, interventions: Any) -> ResolvedInterventions:
        """Change the intervened engine's interventions (between runs)."""
        return self.intervened.set_interventions(interventions)

    def run(self, prompt: str, settings: GenerationSettings | None = None, *,
            mode: str = "forced",
            prompt_ids: list[int] | None = None) -> Generator[ComparedStep, None, None]:
        """Run both engines on ``prompt``, yielding one :class:`ComparedStep` per position.

        Parameters
        ----------
        prompt, settings, prompt_ids
            As for :func:`~flyviz.record.run.iter_frames`; both runs use the
            same settings (and so the same sampler seed).
        mode
            ``"forced"``: the intervened model reads the untouched run's
            tokens; ``"free"``: both continue on their own.

        Stop iterating at any time to cancel; both engines are then left
        between steps, ready for the next run.
        """
        if mode not in MODES:
            raise InputError(f"comparison mode {mode!r} must be one of {', '.join(MODES)}")
        settings = (settings or GenerationSettings()).validate()
        ids = list(prompt_ids) if prompt_ids is not None else encode_prompt(
            self.tokenizer, prompt, self.baseline.config.bos_token_id)
        forced: list[int] | None = [] if mode == "forced" else None
        base_frames = iter_frames(self.baseline, self.tokenizer, prompt, settings, prompt_ids=ids)
        int_frames = iter_frames(self.intervened, self.tokenizer, prompt, settings,
                                 prompt_ids=ids, forced_ids=forced)
        try:
            position = 0
            while True:
                base = next(base_frames, None)
                if base is not None and forced is not None and base.is_generation:
                    forced.append(base.predicted_token_id)
                other = next(int_frames, None)
                if base is None and other is None:
                    return
                yield _pair(position, base, other)
                position += 1
        finally:
            base_frames.close()
            int_frames.close()

    def record(self, prompt: str, settings: GenerationSettings | None = None, *,
               mode: str = "forced", spec: str | None = None,
               states_dtype: str = "float16") -> "Recording":
        """Run both engines to the end into one comparison recording
        (:func:`new_comparison_recording`), to save and reopen as a whole."""
        settings = (settings or GenerationSettings()).validate()
        recording = new_comparison_recording(self.baseline.checkpoint, prompt, settings,
                                             self.interventions, mode, spec=spec,
                                             states_dtype=states_dtype)
        for step in self.run(prompt, settings, mode=mode):
            record_step(recording, step)
        return recording

    def close(self) -> None:
        """Stop both engines' threads."""
        self.baseline.close()
        self.intervened.close()


# ------------------------------------------------------------ recordings of comparisons
def new_comparison_recording(checkpoint: Checkpoint, prompt: str, settings: GenerationSettings,
                             interventions: ResolvedInterventions, mode: str, *,
                             spec: str | None = None,
                             states_dtype: str = "float16") -> "Recording":
    """An empty recording of a comparison: the intervened run, with the untouched one as
    its :attr:`~flyviz.record.recording.Recording.baseline`.

    The intervened run's metadata is :func:`~flyviz.record.run.run_metadata` with
    the interventions, plus ``comparison``: ``{"mode": "forced"|"free", "kl": [],
    "mean_abs_delta": []}``, one KL and one mean |dx| per intervened frame
    (``null`` where the untouched run has no frame), filled by :func:`record_step`.
    The untouched run's metadata is the same run's without interventions.
    ``settings`` must be validated (the seed stored is the one used).
    """
    from flyviz.record.recording import Recording

    if mode not in MODES:
        raise InputError(f"comparison mode {mode!r} must be one of {', '.join(MODES)}")
    neurons = checkpoint.config.neurons
    metadata = run_metadata(checkpoint, prompt, settings, spec, interventions or None)
    metadata["comparison"] = {"mode": mode, "kl": [], "mean_abs_delta": []}
    recording = Recording(neurons, metadata, states_dtype=states_dtype)
    recording.baseline = Recording(neurons, run_metadata(checkpoint, prompt, settings, spec),
                                   states_dtype=states_dtype)
    return recording


def record_step(recording: "Recording", step: ComparedStep,
                append: Callable[[Frame], Any] | None = None) -> bool:
    """Add one compared position to a comparison recording (:func:`new_comparison_recording`).

    The untouched frame goes to ``recording.baseline``; the KL and mean |dx| to
    ``metadata["comparison"]``; then the intervened frame to the recording, through
    ``append`` if given (the app's session, which tells its views). Returns whether
    the intervened run grew (in ``"free"`` mode it may have ended before the
    untouched one).
    """
    baseline = recording.baseline
    if baseline is None:
        raise InputError("this recording is not a comparison: it has no untouched run")
    if step.baseline is not None:
        baseline.append(step.baseline)
    if step.intervened is None:
        return False
    info = recording.metadata["comparison"]
    info["kl"].append(step.kl)
    info["mean_abs_delta"].append(step.mean_abs_delta)
    (append or recording.append)(step.intervened)
    return True


@dataclass(frozen=True)
class ComparisonTrace:
    """What a comparison recording says per intervened frame (NaN where it says nothing).

    Parameters
    ----------
    mode
        ``"forced"`` or ``"free"``.
    kl
        KL(p_untouched ‖ p_intervened) in nats per frame, float64.
    mean_abs_delta
        Mean |x_intervened − x_untouched| per frame, float64.
    """

    mode: str
    kl: np.ndarray
    mean_abs_delta: np.ndarray


def comparison_trace(recording: "Recording") -> ComparisonTrace | None:
    """The per-frame KL and mean |dx| of a comparison recording, or ``None`` for a
    recording of one run. Entries past what was recorded so far are NaN."""
    info = recording.metadata.get("comparison")
    if recording.baseline is None or not isinstance(info, dict):
        return None
    n = len(recording)

    def column(key: str) -> np.ndarray:
        values = info.get(key) or []
        out = np.full(n, np.nan)
        for i, value in enumerate(values[:n]):
            if value is not None:
                out[i] = float(value)
        return out

    return ComparisonTrace(str(info.get("mode", "forced")), column("kl"),
                           column("mean_abs_delta"))



def _cross_entropy(probabilities: np.ndarray, target: int) -> float:
    """``-ln p(target)`` in nats, ``p`` floored at :data:`PROBABILITY_FLOOR` as in KL."""
    return -float(np.log(max(float(probabilities[target]), PROBABILITY_FLOOR)))


@dataclass(frozen=True)
class TextPosition:
    """One position of a comparison teacher-forced on a given text (:func:`forced_on_text`).

    Parameters
    ----------
    position
        Input position (0 is BOS).
    target
        The text's next token, the one this position predicts.
    kl
        KL(p_untouched ‖ p_intervened) in nats, as :func:`kl_divergence`.
    cross_entropy_untouched, cross_entropy_intervened
        ``-ln p(target)`` under each model's next-token distribution (nats; ``p``
        floored at :data:`PROBABILITY_FLOOR`, as in :func:`kl_divergence`).
    top1_untouched, top1_intervened
        Each model's most likely next token (the lower id on a tie).
    """

    position: int
    target: int
    kl: float
    cross_entropy_untouched: float
    cross_entropy_intervened: float
    top1_untouched: int
    top1_intervened: int


def forced_on_text(comparison: Comparison, token_ids: Sequence[int]) -> Iterator[TextPosition]:
    """Both models read ``token_ids`` (BOS first); one :class:`TextPosition` per position
    that predicts a token of the text.

    Position ``p`` (0 is BOS) has read ``token_ids[:p + 1]`` and predicts
    ``token_ids[p + 1]``, so a text of ``L`` ids gives positions ``0 .. L - 2``;
    the last id predicts nothing of the text. The text is fed as the prompt of
    :meth:`Comparison.run`, so the numbers are the ones its frames carry (the
    cross-entropies read off their float64 distributions). ``flyviz sweep``'s
    lesion map is defined as the mean of these over a corpus
    (:mod:`flyviz.analysis.sweep`).
    """
    ids = [int(i) for i in token_ids]
    if len(ids) < 2:
        return
    settings = GenerationSettings(max_new_tokens=1, seed=0, top_k=1)
    steps = comparison.run("", settings, prompt_ids=ids)
    try:
        for step in steps:
            if step.position >= len(ids) - 1:
                return
            base, other = step.baseline, step.intervened
            assert base is not None and other is not None and step.kl is not None
            assert base.probabilities is not None and other.probabilities is not None
            target = ids[step.position + 1]
            yield TextPosition(
                position=step.position, target=target, kl=step.kl,
                cross_entropy_untouched=_cross_entropy(base.probabilities, target),
                cross_entropy_intervened=_cross_entropy(other.probabilities, target),
                top1_untouched=int(base.top_k_ids[0]), top1_intervened=int(other.top_k_ids[0]))
    finally:
        steps.close()


def parted_at(a: Sequence[int], b: Sequence[int]) -> int | None:
    """Index of the first generated token where two continuations differ (one ending
    before the other counts), or ``None`` when they are identical."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def forced_step(step: ComparedStep) -> dict[str, Any] | None:
    """A teacher-forced comparison's generated position as ``flyviz compare --json`` lists
    it: ``token`` (the untouched run's), ``kl``, ``baseline_top1``, ``intervened_top1``,
    ``mean_abs_delta``; ``None`` for a prompt position."""
    if not step.is_generation or step.baseline is None or step.intervened is None:
        return None
    return {"token": step.baseline.predicted_token_id, "kl": step.kl,
            "baseline_top1": int(step.baseline.top_k_ids[0]),
            "intervened_top1": int(step.intervened.top_k_ids[0]),
            "mean_abs_delta": step.mean_abs_delta}


def compare(checkpoint: Checkpoint, prompt: str, interventions: Any,
            settings: GenerationSettings | None = None, *,
            threads: int | None = None, kernel: str | None = None,
            record: str | Path | None = None, spec: str | None = None,
            states_dtype: str = "float16") -> dict[str, Any]:
    """What ``flyviz compare --json`` prints.

    Runs the untouched model and the intervened one teacher-forced on its
    tokens (in lockstep), then the intervened one free-running with the same
    settings.

    With ``record`` (a path), the teacher-forced comparison is also saved
    there as a comparison recording (:func:`new_comparison_recording`, mode
    ``"forced"``: every position has both states, so its Δx is like with
    like), naming the model ``spec``, with states stored as ``states_dtype``;
    the result then has ``recording``, the path written.

    Returns
    -------
    dict
        ``prompt``; ``interventions`` (JSON form, with what each selected);
        ``baseline`` and ``intervened``: the two free-running runs, each with
        exactly the fields of ``flyviz generate --json``; ``parted_at``: the
        index of the first generated token where they differ (``None`` if
        never); ``forced``: ``{"steps": [...]}``, one :func:`forced_step` per
        generated position.

    ``threads`` and ``kernel`` are those of both engines (see
    :class:`~flyviz.model.engine.Engine`).
    """
    from flyviz.model.patching import bind_patches

    settings = (settings or GenerationSettings()).validate()
    ids = encode_prompt(tokenizer_for(checkpoint), prompt, checkpoint.config.bos_token_id)
    # A patch's positions are aligned to this prompt (flyviz.model.patching).
    bound = bind_patches(interventions, len(ids), checkpoint)
    comparison = Comparison.for_checkpoint(checkpoint, bound, threads=threads, kernel=kernel)
    recording = None
    try:
        tokenizer = comparison.tokenizer
        if record is not None:
            recording = new_comparison_recording(checkpoint, prompt, settings,
                                                 comparison.interventions, "forced", spec=spec,
                                                 states_dtype=states_dtype)
        baseline = RunSummary(prompt, ids, tokenizer, settings.seed)
        forced = []
        for step in comparison.run(prompt, settings, mode="forced", prompt_ids=ids):
            if recording is not None:
                record_step(recording, step)
            if step.baseline is not None:
                baseline.add(step.baseline)
            item = forced_step(step)
            if item is not None:
                forced.append(item)
        intervened = RunSummary(prompt, ids, tokenizer, settings.seed,
                                comparison.interventions)
        for frame in iter_frames(comparison.intervened, tokenizer, prompt, settings,
                                 prompt_ids=ids):
            intervened.add(frame)
    finally:
        comparison.close()
    base, other = baseline.to_json(), intervened.to_json()
    result = {"prompt": prompt, "interventions": other["interventions"],
              "baseline": base, "intervened": other,
              "parted_at": parted_at(base["tokens"], other["tokens"]),
              "forced": {"steps": forced}}
    if recording is not None and record is not None:
        result["recording"] = str(recording.save(record))
    return result
