"""Activation patching: set some neurons' state to another run's state, position by position.

``Patch(neurons, source, start, stop)`` is an intervention like the others of
:mod:`flyviz.model.interventions`: after the step at position ``p`` of the
window, ``x_p[S] = source_p[S]``, the state the *source run* had at the
corresponding position. It is exactly a clamp of each neuron of ``S`` to its
source value at each position, applied in the same place of the step (after
the update, in list order with the silences and clamps; the later wins on a
shared neuron), so the bits are the same as those clamps'
(``tests/test_model_patch.py``).

The source (:class:`PatchSource`) is one of

* a source prompt (``PatchSource.from_prompt``, ``--source-prompt TEXT``): its
  states are computed on the same model, untouched, when the patch is
  resolved;
* a recording (``PatchSource.from_recording``, ``--source REC``): its stored
  states (float16 unless recorded with ``--states float32``);
* a ``(positions, neurons)`` array of states, row ``r`` the state after the
  step at position ``r``.

Alignment: positions are aligned from the start (``align="start"``, the
default: position ``p`` reads the source's position ``p``, and the two
prompts must have the same length in tokens) or from the end
(``align="end"``: the last prompt token of each lines up, so position ``p``
reads the source's position ``p + Ls - Lt``, ``Ls`` and ``Lt`` the two
prompts' lengths, BOS included). A patch is bound to its target prompt's
length (:func:`bind_patches`) where that prompt is known: ``flyviz.run``,
``flyviz.compare``, the command line, the causal trace. A patch acts only at
positions where the source has a state; an explicit ``@FROM:TO`` window that
reaches outside them is an error.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from flyviz.model.engine_core import EngineCore
from flyviz.model.errors import InputError
from flyviz.model.intervention_types import (InterventionBase, ResolvedInterventions,
                                             StatePatch, Target, as_interventions,
                                             check_target, init_window, split_window,
                                             target_text)

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.model.checkpoint import Checkpoint
    from flyviz.record.recording import Recording

#: How the positions of the source and the patched run line up.
ALIGNS = ("start", "end")


def source_states(checkpoint: "Checkpoint", prompt_ids: Sequence[int], *,
                  kernel: str | None = None, threads: int | None = None) -> np.ndarray:
    """The untouched model's states after each step of ``prompt_ids`` (BOS first):
    ``(len(prompt_ids), neurons)`` float32, row ``p`` the state of position ``p``.

    It runs on the engine's core (:class:`~flyviz.model.engine_core.EngineCore`, no
    interventions), which sits below this module: :class:`~flyviz.model.engine.Engine`
    resolves patches through here, so importing it would close a circle."""
    ids = [int(i) for i in prompt_ids]
    engine = EngineCore(checkpoint, threads, kernel=kernel, overlap=False)
    try:
        out = np.empty((len(ids), checkpoint.config.neurons), dtype=np.float32)
        for p, token in enumerate(ids):
            engine.step(token)
            out[p] = engine.state
    finally:
        engine.close()
    out.setflags(write=False)
    return out


@dataclass(frozen=True, eq=False)
class PatchSource:
    """Where a patch takes its values from (see the module documentation).

    Attributes
    ----------
    states
        ``(positions, neurons)`` float32, row ``r`` the source's state at
        position ``r``; ``None`` for a prompt not run yet.
    prompt
        The source prompt (its states are computed when the patch is resolved).
    prompt_length
        The source prompt's length in tokens, BOS included (``None``: unknown,
        for a plain array of states).
    align
        ``"start"`` or ``"end"``.
    target_length
        The patched run's prompt length this source was bound to
        (:meth:`bind`), or ``None``.
    label
        What the source is, for messages and JSON (``recording run.flyrec``).
    model_identity
        The identity of the model a recording was made with
        (:func:`~flyviz.model.identity.model_identity`), checked against the patched
        model when the states are used; ``None``: not known (a prompt is run on the
        patched model itself).
    """

    states: np.ndarray | None = None
    prompt: str | None = None
    prompt_length: int | None = None
    align: str = "start"
    target_length: int | None = None
    label: str = ""
    model_identity: Any = None

    def __post_init__(self) -> None:
        if self.align not in ALIGNS:
            raise InputError(f"patch alignment {self.align!r} must be one of {', '.join(ALIGNS)}")
        if self.states is not None:
            states = np.asarray(self.states)
            if states.ndim != 2 or states.shape[0] == 0:
                raise InputError("a patch source's states must be a (positions, neurons) array "
                                 f"with at least one position, not shape {list(states.shape)}")
            if states.dtype != np.float32 or states.flags.writeable:
                # A copy of the caller's array: it is frozen below, and must not change.
                states = np.array(states, dtype=np.float32)
            if not np.isfinite(states).all():
                raise InputError("a patch source's states hold NaN or infinite values")
            states.setflags(write=False)
            object.__setattr__(self, "states", states)
        if self.prompt is not None and not str(self.prompt).strip():
            raise InputError("the source prompt of the patch is empty")
        if self.states is None and self.prompt is None:
            object.__setattr__(self, "label", self.label or "a source that is not stored")

    # ------------------------------------------------------------ constructors
    @classmethod
    def from_prompt(cls, prompt: str, align: str = "start") -> "PatchSource":
        """A source prompt, run untouched on the patched model when the patch is resolved."""
        if not isinstance(prompt, str):
            raise InputError(f"the source prompt of the patch must be text (a str), not "
                             f"{type(prompt).__name__}")
        if not prompt.strip():
            raise InputError("the source prompt of the patch is empty: give the text whose "
                             "states to patch in, e.g. --source-prompt 'Once upon a time'")
        return cls(prompt=prompt, align=align, label=f"prompt {prompt!r}")

    @classmethod
    def from_recording(cls, recording: "Recording | str | Path", align: str = "start",
                       name: str | None = None) -> "PatchSource":
        """A recording's stored states (a :class:`~flyviz.record.recording.Recording` or the
        path of a ``.flyrec``); ``name``, the file's name for a recording already loaded."""
        from flyviz.record.recording import Recording

        name = "recording" if name is None else f"recording {name}"
        if not isinstance(recording, Recording):
            name = f"recording {Path(recording).name}"
            recording = Recording.load(recording)
        if len(recording) == 0:
            raise InputError(f"the {name} holds no frame to patch from")
        return cls(states=recording.states(), prompt_length=len(recording.prompt_ids),
                   align=align, label=name,
                   model_identity=recording.metadata.get("model_identity"))

    @classmethod
    def of(cls, value: Any) -> "PatchSource":
        """A source from what :class:`Patch` accepts: a :class:`PatchSource`, a prompt string,
        a recording or its :class:`pathlib.Path`, or a ``(positions, neurons)`` array.

        A string that names an existing file is refused rather than run as a prompt: the
        recording is read from a ``Path``."""
        from flyviz.arguments import text_not_a_path
        from flyviz.record.recording import Recording

        if isinstance(value, PatchSource):
            return value
        if isinstance(value, str):
            return cls.from_prompt(text_not_a_path("a patch's source", value,
                                                   "to patch from the saved recording"))
        if isinstance(value, (Recording, Path)):
            return cls.from_recording(value)
        try:
            states = np.asarray(value, dtype=np.float32)
        except (TypeError, ValueError):
            states = None
        if states is None or states.ndim != 2:
            raise InputError("a patch's source must be a source prompt, a recording or a "
                             "(positions, neurons) array of states")
        return cls(states=states, label=f"{states.shape[0]} positions of states")

    # ---------------------------------------------------------------- alignment
    @property
    def shift(self) -> int:
        """Source row = patched position + shift (0 when aligned from the start)."""
        if self.align == "end" and self.prompt_length is not None and \
                self.target_length is not None:
            return self.prompt_length - self.target_length
        return 0

    def bind(self, target_length: int, *, what: str = "the prompt") -> "PatchSource":
        """This source aligned to a patched run whose prompt has ``target_length`` tokens
        (BOS included).

        Raises
        ------
        InputError
            One line, when aligned from the start and the two lengths differ.
        """
        target_length = int(target_length)
        if self.align == "start" and self.prompt_length is not None and \
                self.prompt_length != target_length:
            raise InputError(
                f"the patch's source ({self.label}) is {self.prompt_length} tokens long and "
                f"{what} {target_length} (BOS included); patching aligns positions from the "
                "start and needs the same length: give prompts of equal length, or align "
                "them from the end (--align end, align='end')")
        return replace(self, target_length=target_length)

    def covered(self) -> tuple[int, int] | None:
        """The patched positions ``[lo, hi)`` the source has a state for (``None`` while its
        states are not computed)."""
        if self.states is None:
            return None
        rows = int(self.states.shape[0])
        return max(0, -self.shift), rows - self.shift

    def with_states(self, checkpoint: "Checkpoint") -> "PatchSource":
        """This source with its states (a source prompt is run on ``checkpoint`` now)."""
        if self.states is not None:
            if self.states.shape[1] != checkpoint.config.neurons:
                raise InputError(f"the patch's source ({self.label}) holds states of "
                                 f"{self.states.shape[1]:,} neurons but {checkpoint.name} has "
                                 f"{checkpoint.config.neurons:,}")
            if self.model_identity is not None:
                # The check trace --recording makes: another model's states on the same
                # graph would run without a word, and mean nothing here.
                from flyviz.errors import RecordingError
                from flyviz.model.identity import identity_mismatch

                note = identity_mismatch(self.model_identity, checkpoint,
                                         f"the patch's source ({self.label})",
                                         f"record the source run with {checkpoint.name}, or "
                                         "give --source-prompt TEXT")
                if note:
                    raise RecordingError(note)
            return self
        if self.prompt is None:
            raise InputError(f"the patch's source ({self.label}) is not stored with it; give "
                             "it again (--source-prompt TEXT or --source REC; in Python "
                             "patch_source= of flyviz.trace, or the Patch's source)")
        from flyviz.model.tokenizer import start_ids, tokenizer_for

        tokenizer = tokenizer_for(checkpoint)
        ids = start_ids(tokenizer, checkpoint.config.bos_token_id) + tokenizer.encode(self.prompt)
        length = self.prompt_length if self.prompt_length is not None else len(ids)
        return replace(self, states=source_states(checkpoint, ids), prompt_length=length)

    def to_json(self) -> dict[str, Any]:
        """``{"prompt": TEXT}`` or ``{"label": ...}``, with ``align`` and ``shift``."""
        out: dict[str, Any] = {"prompt": self.prompt} if self.prompt is not None else \
            {"label": self.label}
        out["align"] = self.align
        if self.prompt_length is not None:
            out["prompt_length"] = self.prompt_length
        if self.target_length is not None:
            out["target_length"] = self.target_length
        return out

    @classmethod
    def from_json(cls, item: Any) -> "PatchSource":
        """The source of a patch's JSON form: a prompt is run again; other sources are not
        stored (resolving such a patch asks for its source)."""
        if not isinstance(item, dict):
            raise InputError("a patch's 'source' must be a JSON object")
        align = str(item.get("align", "start"))
        length = item.get("prompt_length")
        target = item.get("target_length")
        ints = [v if isinstance(v, int) and not isinstance(v, bool) else None
                for v in (length, target)]
        if isinstance(item.get("prompt"), str):
            return cls(prompt=item["prompt"], prompt_length=ints[0], align=align,
                       target_length=ints[1], label=f"prompt {item['prompt']!r}")
        return cls(prompt_length=ints[0], align=align, target_length=ints[1],
                   label=str(item.get("label") or "a source that is not stored"))


@dataclass(frozen=True, eq=False)
class Patch(InterventionBase):
    """After every step (in the window), the neurons' state is the source run's state at
    the same (aligned) position.

    Parameters
    ----------
    neurons
        Query string or neuron indices.
    source
        A :class:`PatchSource`, a source prompt (a ``str``, aligned from the
        start), a :class:`~flyviz.record.recording.Recording` or the
        :class:`pathlib.Path` of a saved one, or a ``(positions, neurons)``
        array of states.
    start, stop
        Token window (positions, half-open); ``None`` for no bound.

    Examples
    --------
    >>> clean = "Once upon a time, there was a little girl named Lily"    # doctest: +SKIP
    >>> flyviz.run(model, "Once upon a time, there was a little boy named Tom",
    ...            interventions=[flyviz.Patch("superclass:cb_intrinsic", clean, 12, 13)])
    """

    neurons: Target
    source: Any
    start: int | None = None
    stop: int | None = None
    kind: ClassVar[str] = "patch"
    _json_fields: ClassVar[tuple[str, ...]] = ("neurons",)

    def __post_init__(self) -> None:
        object.__setattr__(self, "neurons", check_target(self.neurons, "the neurons to patch"))
        object.__setattr__(self, "source", PatchSource.of(self.source))
        init_window(self)

    def steps_in(self, steps: int) -> int:
        lo = self.start or 0
        hi = steps if self.stop is None else min(self.stop, steps)
        covered = self.source.covered()
        if covered is not None:
            lo, hi = max(lo, covered[0]), min(hi, covered[1])
        return max(0, hi - lo)

    def __str__(self) -> str:
        return f"patch {self.cli_value()} from {self.source.label}"

    def cli_value(self) -> str:
        """``QUERY@FROM:TO`` (the value of ``--patch``; the source is given apart)."""
        neurons: Any = self.neurons  # normalised to a query or a tuple by __post_init__
        return target_text(neurons) + self.window_text

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        out["source"] = self.source.to_json()
        return out


def resolve_patch(checkpoint: "Checkpoint", patch: Patch, indices: np.ndarray
                  ) -> tuple[Patch, StatePatch]:
    """The patch with its source's states, and its resolved form for ``checkpoint``.

    Raises
    ------
    InputError
        When the source cannot be had, holds another number of neurons, is
        aligned from the end without a known target length, or the window
        reaches positions the source has no state for.
    """
    label = f"patch {patch.cli_value()}"
    source = patch.source.with_states(checkpoint)
    if source.align == "end" and source.target_length is None:
        raise InputError(f"{label}: a patch aligned from the end needs the patched prompt's "
                         "length; run it with flyviz.run, flyviz.compare or bind_patches")
    lo, hi = source.covered() or (0, 0)
    if patch.start is not None and not lo <= patch.start < hi or \
            patch.stop is not None and not lo < patch.stop <= hi:
        raise InputError(f"{label}: the source ({source.label}) has states for positions "
                         f"{lo}..{hi - 1} only; keep the window inside them")
    assert source.states is not None  # with_states
    values = np.ascontiguousarray(source.states[:, indices], dtype=np.float32)
    values.setflags(write=False)
    bound = replace(patch, source=source)
    return bound, StatePatch(indices, values, source.shift, patch.start, patch.stop)


def bind_patches(interventions: Any, target_length: int,
                 checkpoint: "Checkpoint | None" = None) -> Any:
    """``interventions`` with every :class:`Patch`'s source aligned to a patched prompt of
    ``target_length`` tokens (BOS included); anything else is returned as it is.

    With ``checkpoint``, a source prompt is run now (its length is known only then), so
    that a mismatch is found before any other work.

    Raises
    ------
    InputError
        When a source aligned from the start has another length.
    """
    items = as_interventions(interventions)
    if isinstance(items, ResolvedInterventions):
        for item in items.interventions:
            if isinstance(item, Patch):
                item.source.bind(target_length)  # checks only: already resolved
        return items
    out: list[Any] = []
    for item in items:
        if isinstance(item, Patch):
            patch: Any = item
            source = patch.source if checkpoint is None else patch.source.with_states(checkpoint)
            item = replace(patch, source=source.bind(target_length))
        out.append(item)
    return tuple(out)


def patch_from_json(item: dict[str, Any], number: int = 0) -> Patch:
    """A patch from its JSON form (``number``: its 0-based place in the list, for messages);
    a source prompt is run again when it is resolved."""
    if "neurons" not in item:
        raise InputError(f"intervention {number + 1} (patch) lacks 'neurons'")
    return Patch(item["neurons"], PatchSource.from_json(item.get("source", {})),
                 item.get("from"), item.get("to"))


def parse_patch(text: str, source: PatchSource) -> Patch:
    """A patch from the value of ``--patch QUERY[@FROM:TO]`` and its source."""
    option = f"--patch {text!r}"
    body, start, stop = split_window(text, option)
    if "=" in body or "->" in body:
        raise InputError(f"{option} takes a selection and a window only, e.g. "
                         "--patch 'superclass:cb_intrinsic@12:13'")
    try:
        return Patch(body, source, start, stop)
    except InputError as exc:
        raise InputError(f"{option}: {exc}") from None


def patches_in(interventions: Iterable[Any]) -> list[Patch]:
    """The patches among ``interventions``."""
    return [item for item in interventions if isinstance(item, Patch)]


__all__ = ["ALIGNS", "Patch", "PatchSource", "StatePatch", "bind_patches", "parse_patch",
           "patch_from_json", "patches_in", "resolve_patch", "source_states"]
