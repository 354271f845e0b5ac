"""The Fly LLM's kind: a connectome language model read and run token by token.

:class:`LanguageModelKind` (:data:`LANGUAGE`) is the kind every model flyviz
loads from a checkpoint has (:class:`~flyviz.record.runner.Model`, a
:class:`~flyviz.model.checkpoint.Checkpoint`, a model with no ``kind``): one
frame per consumed token, the text read and generated and the next-token
candidates carried beside the state. It adds nothing to the loader, engine or
runner: it calls them.

What the overlays of a movie, a still and a figure's caption say about a
language model's frames (the text so far, the newest token, the top-k bars, the
token counter) is made here, so that the renderer and the exporters draw what
any kind says (:meth:`~flyviz.kinds.ModelKind.overlays`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from psygnal import SignalGroupDescriptor

from flyviz.kinds import ModelKind, SideChannel, TimeAxis, Wiring
from flyviz.kinds.request import RunRequest
from flyviz.record.run import EncodedPrompt
from flyviz.render.overlay_content import OverlayContent
from flyviz.viewer.settings import ViewerError, one_of, whole_number

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.model.checkpoint import Anatomy
    from flyviz.record.frame import Frame
    from flyviz.record.recording import Recording
    from flyviz.record.run import GenerationSettings
    from flyviz.viewer.settings import RunSettings

__all__ = ["COMPARE_VIEWS", "EncodedPrompt", "LANGUAGE", "LANGUAGE_KEY", "LanguageDockSettings",
           "LanguageModelKind", "NEXT_TOKEN_TITLE", "PATCHING_MEASURES", "TEXT", "TOP_K",
           "generation_settings"]

#: The language model kind's key (what its docks declare).
LANGUAGE_KEY = "language"

#: The side channel of the text read and generated so far.
TEXT = SideChannel("text", "Text", "the prompt read and the text generated so far")
#: The side channel of the most likely next tokens and their probabilities.
TOP_K = SideChannel("top-k", "Next token", "the most likely next tokens and their probabilities")

#: The end-of-sequence token's text, and how a text line shows it (as the app's text panel).
EOS_TEXT = "</s>"
EOS_SHOWN = " [end]"

#: The heading of a movie's next-token bars.
NEXT_TOKEN_TITLE = "next token"

#: Candidates a frame records when the caller does not say (as :class:`GenerationSettings`).
DEFAULT_TOP_K = 10
#: Candidates each frame of a run a host starts from its state records (what the Next
#: token dock can show at most).
LIVE_TOP_K = 20

#: What the activation patching heatmap shows: the logit difference or the answer's
#: probability (:attr:`LanguageDockSettings.patching_measure`; the first is the default).
PATCHING_MEASURES = ("logit_diff", "p_answer")

#: What the whole-brain raster shows of a comparison: the intervened run, the untouched one, Δx
#: (:attr:`LanguageDockSettings.population_view`).
COMPARE_VIEWS = ("intervened", "untouched", "delta")


@dataclass
class LanguageDockSettings:
    """The language model's docks' own choices, so that a script reproduces what clicking
    shows: the language kind's dock settings (:meth:`LanguageModelKind.new_dock_settings`),
    a part of the viewer state (``state.kind_settings.docks_of(LANGUAGE)``, or
    :attr:`state.docks <flyviz.viewer.state.ViewerState.docks>`).

    Each dock is a view of its fields: it shows them and writes the user's
    changes back (``state.docks.why_lag = 3`` moves the *Why?* dock's slider).

    Parameters
    ----------
    prompt
        The text in the prompt box: what *Run* starts on.
    lesion_log_scale
        The lesion map's *log scale*: colour by log10 ΔCE (groups and the estimate).
    why_lag
        *Why?*'s lag: steps back from the traced token (clipped to the trace's window).
    why_synapses
        *Why?* draws the strongest synapses into the shown step as lines.
    why_first_step_first
        *Why?*'s movie sweeps from the window's first step forward (else from the
        traced token back).
    patching_measure
        What the patching heatmap shows, one of
        :data:`PATCHING_MEASURES` (default: the first).
    population_view
        What the whole-brain raster shows of a comparison, one of :data:`COMPARE_VIEWS`
        (a single run is always shown as it is).
    """

    events: ClassVar[SignalGroupDescriptor] = SignalGroupDescriptor()

    prompt: str = ""
    lesion_log_scale: bool = True
    why_lag: int = 0
    why_synapses: bool = True
    why_first_step_first: bool = False
    patching_measure: str = PATCHING_MEASURES[0]
    population_view: str = COMPARE_VIEWS[0]

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, self._checked(name, value))

    @staticmethod
    def _checked(name: str, value: Any) -> Any:
        if name == "prompt":
            if not isinstance(value, str):
                raise ViewerError(f"the prompt must be text, got {value!r}")
            return value
        if name in ("lesion_log_scale", "why_synapses", "why_first_step_first"):
            return bool(value)
        if name == "why_lag":
            return whole_number("lag", value, 0, 2**31 - 1)
        if name == "patching_measure":
            return one_of("patching measure", value, PATCHING_MEASURES)
        if name == "population_view":
            return one_of("population view", value, COMPARE_VIEWS)
        return value


def generation_settings(run: "RunSettings", top_k: int = DEFAULT_TOP_K) -> "GenerationSettings":
    """The settings of the next language-model run from the viewer's run settings, validated
    (``top_k``: candidates recorded per token; :meth:`RunSettings.generation_settings
    <flyviz.viewer.settings.RunSettings.generation_settings>`)."""
    return run.generation_settings(int(top_k))


class LanguageModelKind(ModelKind):
    """The Fly LLM: tokens in, a state per token, text and top-k candidates out."""

    key: ClassVar[str] = LANGUAGE_KEY
    title: ClassVar[str] = "language model"
    time_axis: ClassVar[TimeAxis] = TimeAxis("token", "token")
    state_label: ClassVar[str] = "x"
    state_name: ClassVar[str] = "Activation"
    state_rows: ClassVar[str] = "activations x"
    side_channels: ClassVar[tuple[SideChannel, ...]] = (TEXT, TOP_K)
    reads_text: ClassVar[bool] = True
    steps_its_wiring: ClassVar[bool] = True
    comparison_hint: ClassVar[str] = ("make one with 'flyviz compare SPEC --prompt TEXT "
                                      "--silence QUERY --record FILE', or Compare with "
                                      "untouched in the app")

    # ------------------------------------------------------------ models and recordings
    def load(self, spec: str, *, dataset: "str | Path | None" = None, progress: Any = None,
             kernel: str | None = None, download: bool = True, **options: Any) -> Any:
        """A :class:`~flyviz.record.runner.Model` of ``spec`` (a folder, a hub repo id or
        ``"demo"``) joined to ``dataset``; ``download=False`` loads only ``"demo"`` and
        folders (nothing is fetched behind the user's back: an embedded host's opening)."""
        from flyviz.errors import ModelNotFoundError
        from flyviz.record.runner import Model

        spec = str(spec).strip()
        if not download and spec != "demo" and not Path(spec).expanduser().is_dir():
            raise ModelNotFoundError(f"model {spec} is not a folder here, and it is not "
                                     "downloaded unasked; give the model it was recorded with")
        return Model.load(spec, dataset, progress=progress, kernel=kernel)

    def model_spec(self, recording: "Recording") -> tuple[str | None, dict[str, Any]]:
        """The model the recording names (its identity's spec, else its ``model``), with the
        ``dataset`` it was recorded with when that folder still exists."""
        identity = recording.metadata.get("model_identity")
        identity = identity if isinstance(identity, dict) else {}
        named = identity.get("spec") or recording.metadata.get("model")
        if not isinstance(named, str) or not named:
            return None, {}
        recorded = identity.get("dataset")
        if named != "demo" and isinstance(recorded, str) and Path(recorded).is_dir():
            return named, {"dataset": Path(recorded)}
        return named, {}

    def recording_mismatch(self, recording: "Recording", model: Any, name: str = ""
                           ) -> str | None:
        """How ``model``'s graph or weights differ from the identity the recording keeps."""
        from flyviz.model.identity import identity_mismatch

        return identity_mismatch(recording.metadata.get("model_identity"),
                                 getattr(model, "checkpoint", model), name)

    def neuron_labels(self, model: Any) -> "Anatomy | None":
        """The checkpoint's anatomy (``None`` without positions: no stand-in layout is a
        label)."""
        return getattr(model, "checkpoint", model).anatomy

    def rate_unit(self) -> str:
        """``"tok/s"``."""
        return "tok/s"

    def wiring(self, model: Any) -> Wiring | None:
        """The checkpoint's signed weights by postsynaptic neuron (its CSR rows), of a
        :class:`~flyviz.record.runner.Model` or a :class:`~flyviz.model.checkpoint.Checkpoint`."""
        checkpoint = getattr(model, "checkpoint", model)
        if getattr(checkpoint, "w_offsets", None) is None:
            return None
        return Wiring(int(checkpoint.config.neurons), np.asarray(checkpoint.w_offsets),
                      np.asarray(checkpoint.w_indices), np.asarray(checkpoint.w_values))

    # ------------------------------------------------------------ stepping
    def run_settings(self, run: "RunSettings", **options: Any) -> "GenerationSettings":
        """:func:`generation_settings` (``top_k=``: candidates recorded per token)."""
        return generation_settings(run, **options)

    def new_run_settings(self) -> "RunSettings":
        """The Settings dock's *Generation* group (a viewer state's :attr:`run
        <flyviz.viewer.state.ViewerState.run>` is the one it keeps)."""
        from flyviz.viewer.settings import RunSettings

        return RunSettings()

    def new_dock_settings(self) -> LanguageDockSettings:
        """The language model's docks' own choices (the prompt, *Why?*'s lag, the
        patching measure...: :class:`LanguageDockSettings`), a part of the viewer state
        (``state.docks``)."""
        return LanguageDockSettings()

    def run_request(self, state: Any) -> "RunRequest":
        """The run ``state`` describes: its prompt (``docks.prompt``), generation settings
        (``run``, :data:`LIVE_TOP_K` candidates a frame), interventions (else those set for
        the next run only, with their description) and, when ``comparing``, the comparison
        with the untouched run in ``compare_mode``."""
        interventions, note = tuple(state.interventions or ()), ""
        if not interventions and state.next_interventions:
            interventions, note = tuple(state.next_interventions), state.next_description
        return RunRequest(state.docks.prompt, generation_settings(state.run, LIVE_TOP_K),
                          interventions, state.compare_mode if state.comparing else None,
                          state.run.states_dtype, note=note)

    def prepare_run(self, model: Any, request: "RunRequest"
                    ) -> "tuple[RunRequest, Recording]":
        """Check the prompt, settings and interventions of ``request`` on ``model`` (a
        :class:`~flyviz.record.runner.Model`) and make its recording
        (:meth:`Model.new_recording <flyviz.record.runner.Model.new_recording>`, or a
        comparison's, :func:`~flyviz.record.compare.new_comparison_recording`, with the
        untouched run beside it, when ``request.compare`` names a mode)."""
        import dataclasses

        from flyviz.errors import InputError
        from flyviz.record.compare import MODES, new_comparison_recording
        from flyviz.record.run import GenerationSettings, encode_prompt

        from flyviz.model.patching import bind_patches

        from flyviz.arguments import instance_or_default

        settings = instance_or_default("a Fly LLM run's settings are", request.settings,
                                       GenerationSettings).validate()
        given = request.given
        if isinstance(given, EncodedPrompt):
            prompt, ids = given.text, list(given.ids)
            vocabulary = model.checkpoint.config.vocabulary
            if not ids or any(not 0 <= i < vocabulary for i in ids):
                raise InputError(f"prompt ids must be a non-empty list of ids in "
                                 f"0..{vocabulary - 1}")
        else:
            # As given, not str(): None, b"Once" or a Stimulus is no prompt, and
            # encode_prompt says so ("must be text (a str), not None"); no run here
            # takes None for the kind's default, there is no default prompt.
            prompt = given
            ids = encode_prompt(model.tokenizer, prompt, model.checkpoint.config.bos_token_id)
        # A patch's positions are aligned to this prompt (flyviz.model.patching).
        resolved = model.resolve_interventions(bind_patches(request.interventions or (),
                                                            len(ids), model.checkpoint))
        dtype = request.states_dtype or "float16"
        if request.compare:
            if request.compare not in MODES:
                raise InputError(f"comparison mode {request.compare!r} must be one of "
                                 f"{', '.join(MODES)}")
            if not resolved:
                raise InputError("nothing to compare: add an intervention and switch it on")
            recording = new_comparison_recording(model.checkpoint, prompt, settings, resolved,
                                                 request.compare, spec=model.spec,
                                                 states_dtype=dtype)
        else:
            recording = model.new_recording(prompt, settings, resolved, states_dtype=dtype)
        return dataclasses.replace(request, given=given if isinstance(given, EncodedPrompt)
                                   else prompt, settings=settings,
                                   interventions=resolved or ()), recording

    def frames(self, model: Any, request: Any, settings: Any = None, *,
               interventions: Any = (), recording: "Recording | None" = None,
               **options: Any) -> Iterator["Frame"]:
        """Run the prompt ``request`` on ``model`` (a :class:`~flyviz.record.runner.Model`):
        :meth:`Model.frames <flyviz.record.runner.Model.frames>`, one frame per token; with
        ``compare=mode``, beside the untouched run (:meth:`Model.comparison
        <flyviz.record.runner.Model.comparison>`): the intervened run's frames, each
        appended to ``recording`` (a comparison recording) with the untouched frame and
        the KL (:func:`~flyviz.record.compare.record_step`)."""
        mode = options.get("compare")
        ids = list(request.ids) if isinstance(request, EncodedPrompt) else None
        prompt = request.text if isinstance(request, EncodedPrompt) else request
        if mode:
            return self._compared(model, prompt, settings, interventions, recording,
                                  str(mode), ids)
        return model.frames(prompt, settings, interventions=interventions, prompt_ids=ids,
                            recording=recording)

    @staticmethod
    def _compared(model: Any, prompt: str, settings: Any, interventions: Any,
                  recording: "Recording | None", mode: str, ids: list[int] | None
                  ) -> Iterator["Frame"]:
        from flyviz.record.compare import record_step

        comparison = model.comparison(model.resolve_interventions(interventions))
        for step in comparison.run(prompt, settings, mode=mode, prompt_ids=ids):
            grew = record_step(recording, step) if recording is not None else \
                step.intervened is not None
            if grew and step.intervened is not None:
                yield step.intervened

    # ------------------------------------------------------------ side channels
    def overlays(self, recording: "Recording", start: int = 0,
                 stop: int | None = None) -> Iterator[OverlayContent]:
        """Overlay content of frames ``start:stop`` of ``recording``, one at a time: the
        text so far with the newest token, the top-k candidates and the token counter.

        The first frame of a run consumes BOS, which is not shown as text.
        Frames before ``start`` are read (for their prompt text) but not yielded.
        """
        from flyviz.record.frame import PHASE_PROMPT

        n = len(recording)
        stop = n if stop is None else min(int(stop), n)
        start = max(0, int(start))
        prompt = ""
        for i in range(0, stop):
            frame = recording[i]
            in_prompt = frame.phase == PHASE_PROMPT
            read, read_prompt = read_text(frame)
            if in_prompt:
                newest, before, generated = read, prompt, ""
                prompt += read
            else:
                if read and read_prompt:
                    prompt += read  # the last prompt token starts generation
                before = prompt
                newest = frame.predicted_text
                so_far = frame.text_so_far
                if newest and so_far.endswith(newest):
                    generated = so_far[:-len(newest)]
                else:
                    # Special tokens (</s>) are not part of the decoded text: show them
                    # after it; a token that decodes to part of a character shows nothing.
                    generated = so_far
                    if not (newest.startswith("<") and newest.endswith(">")):
                        newest = ""
            if i < start:
                continue
            phase = "reading the prompt" if in_prompt else "generating"
            counter = f"{self.time_axis.of(i, n)} \u00b7 {phase}"
            top = tuple((str(t), float(p)) for t, p in zip(frame.top_k_text,
                                                           frame.top_k_probabilities))
            yield OverlayContent(prompt=before, generated=generated, newest=newest,
                                 newest_in_prompt=in_prompt, bars=top, counter=counter,
                                 bars_title=NEXT_TOKEN_TITLE)

    def page_steps(self, recording: "Recording") -> list[dict[str, Any]]:
        """Each token's text, phase and position, whether it generates, the predicted token
        with its probability, and the top-k candidates as the page's bars.

        The text line is made of the tokens each step reads, so the token the last step
        chose is read by none: the last step of a generating run also carries it as
        ``then`` (``{"text", "end"}``: its text, or ``" [end]"`` with ``end`` true for
        ``</s>``, as the app's text shows the end of a run), for the page to show it after
        the text as that step's prediction (``flyviz generate`` printed it)."""
        from flyviz.record.frame import PHASE_GENERATION, PHASE_PROMPT

        out: list[dict[str, Any]] = []
        for i in range(len(recording)):
            frame = recording[i]
            top = [[str(t), round(float(p), 5)]
                   for t, p in zip(frame.top_k_text, frame.top_k_probabilities)]
            # The word a step reads is prompt or generated as the movie's text says
            # (read_text): the first generating step reads the prompt's last word.
            read, read_prompt = read_text(frame)
            out.append({"text": read,
                        "phase": PHASE_PROMPT if read_prompt else PHASE_GENERATION,
                        "generating": bool(frame.is_generation),
                        "position": int(frame.position), "next": frame.predicted_text,
                        "p": round(float(frame.probability), 5), "top": top})
        if out and out[-1]["generating"]:
            chosen = str(out[-1]["next"])
            end = chosen == EOS_TEXT
            out[-1]["then"] = {"text": EOS_SHOWN if end else chosen, "end": end}
        return out

    def page_axis(self, recording: "Recording") -> dict[str, Any]:
        """Tokens, the text line and the next-token bars."""
        return {**super().page_axis(recording), "bars": NEXT_TOKEN_TITLE}

    def replay_refusal(self, recording: "Recording") -> str | None:
        """None: a run is replayed (:func:`flyviz.record.replay.replay_recording`)."""
        return None

    def frame_line(self, recording: "Recording", index: int) -> str:
        """``'t=K "token"  |  text so far'``."""
        return f"t={index} {recording.token_texts[index]!r} | {recording.text_so_far(index)}"

    def frame_phase(self, frame: "Frame", streaming: bool) -> str:
        """Whether the model reads the prompt or generates at ``frame``: ``"reading the
        prompt"`` / ``"generating"`` while streaming, else ``"prompt"`` / ``"generated"``."""
        if streaming:
            return "generating" if frame.is_generation else "reading the prompt"
        return "generated" if frame.is_generation else "prompt"

    def frame_caption(self, recording: "Recording", index: int) -> str:
        """``"token 11 of 0–39: ' cat'"``: the token counter and the token read there."""
        text = list(recording.token_texts)[index]
        return f"{self.time_axis.of(index, len(recording))}: {text!r}"


def read_text(frame: "Frame") -> tuple[str, bool]:
    """The text ``frame`` reads as a movie's text line shows it (``""`` for BOS, at position
    0), and whether that text is the prompt's: every prompt step's and the first generating
    step's (it reads the prompt's last token); later steps read generated tokens. The movie's
    overlays (:meth:`LanguageModelKind.overlays`) and a shared page's text
    (:meth:`LanguageModelKind.page_steps`) both ask this."""
    from flyviz.record.frame import PHASE_PROMPT

    read = "" if frame.position == 0 else frame.input_text
    return read, frame.phase == PHASE_PROMPT or frame.generation_index == 0


#: The Fly LLM's kind.
LANGUAGE = LanguageModelKind()
