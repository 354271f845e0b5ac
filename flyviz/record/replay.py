"""Re-run a recorded prompt with its stored settings and seed, and compare the tokens.

A recording stores its prompt ids, the sampler settings and the seed the
sampler actually used (drawn even when the user asked for a random one), and
the identity of the model it was made with, and the interventions it ran with;
:func:`replay_recording` runs the same prompt again (with them) and reports whether every generated token matches.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flyviz.errors import InputError
from flyviz.model.checkpoint import Checkpoint
from flyviz.record.recording import Recording
from flyviz.record.run import GenerationSettings

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.record.runner import Model


@dataclass
class ReplayResult:
    """What a replay found.

    Parameters
    ----------
    recorded, replayed
        The generated token ids of the recording and of the replay.
    first_mismatch
        Index (among the generated tokens) of the first one that differs, or
        ``None`` when all match; a replay that stops early or runs on differs
        at the shorter one's length.
    frame
        The recording's frame index of that token (``None`` when all match).
    settings
        The settings the replay ran with.
    identity_note
        :func:`~flyviz.model.identity.identity_mismatch`'s line when the
        model differs from the recorded one, else ``None``.
    max_probability_error
        Largest |difference| of the chosen tokens' probabilities over the
        matching tokens.
    run
        Of a comparison recording, which of its two runs was replayed:
        ``"untouched"`` (a teacher-forced comparison: the intervened run only
        read its tokens) or ``"intervened"`` (a free-running one); ``None``
        for a single run.
    """

    recorded: list[int]
    replayed: list[int]
    first_mismatch: int | None
    frame: int | None
    settings: GenerationSettings
    identity_note: str | None = None
    max_probability_error: float = 0.0
    texts: dict[str, str] = field(default_factory=dict)
    run: str | None = None

    @property
    def matched(self) -> bool:
        """True when every generated token matches."""
        return self.first_mismatch is None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON form (``flyviz replay --json``)."""
        return {"matched": self.matched, "tokens": len(self.recorded),
                "first_mismatch": None if self.matched else {
                    "index": self.first_mismatch, "frame": self.frame,
                    "recorded": self._at(self.recorded), "replayed": self._at(self.replayed)},
                "recorded": self.recorded, "replayed": self.replayed,
                "settings": {"temperature": self.settings.temperature,
                             "top_p": self.settings.top_p, "seed": self.settings.seed,
                             "max_new_tokens": self.settings.max_new_tokens},
                "identity_note": self.identity_note,
                "max_probability_error": self.max_probability_error, "run": self.run}

    def _at(self, tokens: list[int]) -> int | None:
        i = self.first_mismatch
        return tokens[i] if i is not None and i < len(tokens) else None


def replay_settings(recording: Recording) -> GenerationSettings:
    """The settings a recording was made with, to run it again.

    ``max_new_tokens`` is the number of tokens the recording generated (a run
    stopped early is replayed as far as it went).

    Raises
    ------
    InputError
        When the recording generated nothing, or sampled without storing its
        seed (a format 1.0 recording of a run with a random seed).
    """
    meta = recording.metadata
    generated = len(recording.generated_ids)
    if generated == 0:
        raise InputError("the recording has no generated tokens to replay")

    def number(key: str, default: float) -> float:
        value = meta.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InputError(f"the recording's {key} is {value!r}, not a number")
        return float(value)

    temperature = number("temperature", 0.0)
    seed = meta.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise InputError(f"the recording's seed is {seed!r}, not a whole number")
    if temperature > 0 and seed is None:
        raise InputError("the recording sampled with a random seed it did not store (a format "
                         "1.0 recording), so it cannot be replayed exactly")
    top_k = max((len(f.top_k_ids) for f in recording), default=1)
    # A run kept past its end-of-text token is replayed kept past it as far.
    least = min(generated, int(number("min_new_tokens", 0)))
    return GenerationSettings(max_new_tokens=generated, min_new_tokens=max(0, least),
                              temperature=temperature, top_p=number("top_p", 1.0), seed=seed,
                              top_k=max(1, min(100, top_k))).validate()


def recording_interventions(recording: Recording, patch_source: Any = None
                            ) -> tuple[Any, ...]:
    """The interventions a recording was made with (``metadata["interventions"]``; none when
    the key is absent).

    Parameters
    ----------
    recording
        The recording.
    patch_source
        The source (a :class:`~flyviz.model.patching.PatchSource`, or what
        :class:`~flyviz.model.patching.Patch` accepts; a :class:`pathlib.Path` is a
        recording's file) of its patches whose
        source is not stored with it (a recording's or an array's states are
        not: only a source prompt is), aligned as the recording's patch was.

    Raises
    ------
    InputError
        When the stored interventions are malformed, or ``patch_source`` is
        given and the recording holds no patch that needs it.
    """
    from dataclasses import replace

    from flyviz.model.interventions import from_json
    from flyviz.model.patching import Patch, PatchSource

    stored = recording.metadata.get("interventions")
    try:
        items = () if stored is None else from_json(stored)
    except InputError as exc:
        raise InputError(f"the recording's interventions cannot be read: {exc}") from None
    if patch_source is None:
        return items
    # A Path is a recording's file; a str is a source prompt, as for a Patch.
    given = PatchSource.from_recording(patch_source) if isinstance(patch_source, Path) \
        else PatchSource.of(patch_source)
    out: list[Any] = []
    used = False
    for item in items:
        if isinstance(item, Patch) and item.source.states is None and item.source.prompt is None:
            kept = item.source
            # The run's own alignment: the patch was made with it.
            source = replace(given, align=kept.align, target_length=kept.target_length)
            patch: Any = item  # a Patch (the union of interventions has no source)
            item = replace(patch, source=source)
            used = True
        out.append(item)
    if not used:
        raise InputError("the recording holds no patch whose source is missing: leave out "
                         "--source/--source-prompt (its interventions are read from it)")
    return tuple(out)


def replay_recording(recording: Recording, checkpoint: "Checkpoint | Model", *,
                     should_stop: Callable[[], bool] | None = None,
                     patch_source: Any = None) -> ReplayResult:
    """Run the recorded prompt again on ``checkpoint`` and compare every generated token.

    Parameters
    ----------
    recording
        A recording with its settings and seed in the metadata. Of a
        teacher-forced comparison, the untouched run is replayed (the
        intervened one only read its tokens).
    checkpoint
        The model to run (normally the one the recording names): a
        :class:`~flyviz.record.runner.Model` (its engine and kernel are used)
        or a checkpoint (run on an engine made for this replay).
    should_stop
        Polled after every token; when it returns True the replay stops and
        the tokens so far are compared.
    patch_source
        The source of the recording's patches whose source is not stored with
        it (see :func:`recording_interventions`).

    Returns
    -------
    ReplayResult
    """
    from flyviz.model.identity import identity_mismatch
    from flyviz.record.runner import as_model

    comparison = recording.metadata.get("comparison")
    run = None
    if recording.baseline is not None and isinstance(comparison, dict):
        # Which run a match is about: "all 6 tokens match" alone reads as both.
        run = "intervened"
        if comparison.get("mode") == "forced":
            # The intervened run read the untouched run's tokens: the untouched run is
            # what generated them, and what a replay can check.
            recording, run = recording.baseline, "untouched"
    settings = replay_settings(recording)
    model, owned = as_model(checkpoint)
    try:
        result = _replay(recording, model, settings, should_stop, identity_mismatch,
                         patch_source)
    finally:
        if owned:
            model.close()
    result.run = run
    return result


def _replay(recording: Recording, model: "Model", settings: GenerationSettings,
            should_stop: Callable[[], bool] | None, identity_mismatch: Any,
            patch_source: Any = None) -> ReplayResult:
    checkpoint = model.checkpoint
    prompt_ids = recording.prompt_ids
    vocabulary = checkpoint.config.vocabulary
    if any(not 0 <= t < vocabulary for t in prompt_ids):
        raise InputError(f"the recording's prompt holds token ids outside {checkpoint.name}'s "
                         f"vocabulary 0..{vocabulary - 1}; it was made with another model")
    tokenizer = model.tokenizer
    recorded = recording.generated_ids
    recorded_frames = [i for i, f in enumerate(recording) if f.is_generation]
    recorded_probabilities = [recording[i].probability for i in recorded_frames]
    replayed: list[int] = []
    max_error = 0.0
    from flyviz.record.run import EncodedPrompt
    from flyviz.runs import Run, RunRequest

    given = EncodedPrompt(str(recording.metadata.get("prompt", "")), tuple(prompt_ids))
    frames = Run(model, RunRequest(given, settings, recording_interventions(
        recording, patch_source))).stream(keep=False)
    try:
        for frame in frames:
            if not frame.is_generation:
                continue
            i = len(replayed)
            replayed.append(frame.predicted_token_id)
            if i < len(recorded) and frame.predicted_token_id == recorded[i]:
                max_error = max(max_error, abs(frame.probability - recorded_probabilities[i]))
            if (i < len(recorded) and frame.predicted_token_id != recorded[i]) \
                    or (should_stop is not None and should_stop()):
                break
    finally:
        close = getattr(frames, "close", None)
        if close is not None:
            close()
    first = next((i for i, (a, b) in enumerate(zip(recorded, replayed)) if a != b), None)
    if first is None and len(recorded) != len(replayed):
        first = min(len(recorded), len(replayed))
    frame_index = None
    if first is not None:
        frame_index = recorded_frames[first] if first < len(recorded_frames) else len(recording)
    texts = {"recorded": tokenizer.decode(recorded), "replayed": tokenizer.decode(replayed)}
    return ReplayResult(recorded=recorded, replayed=replayed, first_mismatch=first,
                        frame=frame_index, settings=settings,
                        identity_note=identity_mismatch(recording.metadata.get("model_identity"),
                                                        checkpoint),
                        max_probability_error=max_error, texts=texts)
