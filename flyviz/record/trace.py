"""Trace a prompt or a saved run: which earlier tokens, neurons and synapses made a logit.

:func:`trace` is what :func:`flyviz.trace` and ``flyviz trace`` run: it reads
the tokens (a prompt with BOS, or a recording's tokens teacher-forced with its
interventions) through the model's engine while a
:class:`~flyviz.model.attribution.Tape` records the run, then sweeps back
through the model's :class:`~flyviz.model.attribution.BackwardEngine`
(:func:`flyviz.model.explain.explain`). No Qt.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from flyviz.errors import InputError, RecordingError
from flyviz.model.explain import (DEFAULT_WINDOW, Attribution, IncompleteAttributionWarning,
                                  check_position_type, explain)
from flyviz.record.recording import Recording
from flyviz.record.run import encode_prompt
from flyviz.record.runner import Model

#: Largest |x| difference between a recording's stored state (float16 by default) and
#: the same model's re-run of its tokens that still counts as the same run.
STATE_TOLERANCE = 1e-2


def recording_ids(recording: Recording, model: Model, what: str = "the recording") -> list[int]:
    """The tokens a recording's frames read, checked against ``model``.

    Raises
    ------
    RecordingError
        When the recording was made with another model (size, graph, weights or
        vocabulary).
    """
    from flyviz.model.identity import identity_mismatch

    if recording.neurons != model.neurons:
        raise RecordingError(f"{what} holds {recording.neurons:,} neurons per state but "
                             f"{model.name} has {model.neurons:,}: it was made with another "
                             "model")
    note = identity_mismatch(recording.metadata.get("model_identity"), model.checkpoint, what)
    if note:
        raise RecordingError(note)
    ids = [int(t) for t in recording.token_ids]
    vocabulary = model.checkpoint.config.vocabulary
    if not ids:
        raise RecordingError(f"{what} holds no frames to trace")
    if any(not 0 <= t < vocabulary for t in ids):
        raise RecordingError(f"{what} reads token ids outside {model.name}'s vocabulary "
                             f"0..{vocabulary - 1}: it was made with another model")
    return ids


def trace(model: Model, source: "str | Recording | Path", *, position: int | None = None,
          target: int | str | None = None, versus: int | str | None = None,
          window: int | None = DEFAULT_WINDOW, mode: str = "decomposition",
          interventions: Any = (),
          should_stop: Callable[[], bool] | None = None,
          patch_source: Any = None) -> Attribution:
    """Explain the logit of one position of a prompt's run or of a saved run.

    Parameters
    ----------
    model
        The loaded model.
    source
        A prompt (text; BOS is added where the tokenizer has one), a
        :class:`Recording`, or the path of a saved one (a :class:`pathlib.Path`).
    position
        The step explained (0 is BOS). Default: the last prompt token, whose
        prediction is the first generated token.
    target
        Token id or one-token text. Default: the token chosen there (the
        most likely one for a prompt; the recorded one for a recording).
    versus, window, mode
        See :func:`flyviz.model.explain.explain` (``window``: default
        :data:`~flyviz.model.explain.DEFAULT_WINDOW` steps, ``None`` the whole run).
    interventions
        Applied to a prompt's run (the forms :func:`flyviz.run` accepts). A
        recording is traced with its own interventions.
    should_stop
        Polled between the backward steps (cancel).
    patch_source
        For a recording: the source of its patches whose source is not stored
        with it (a recording's states are not; a source prompt is), see
        :func:`flyviz.record.replay.recording_interventions`.

    Raises
    ------
    InputError
        For a bad position or token, or a patch whose source cannot be had or
        does not line up with the traced prompt (another length, another
        number of neurons).
    RecordingError
        When the recording was made with another model.
    """
    from flyviz.model.patching import bind_patches

    if isinstance(source, Path):
        source = Recording.load(source)
    if isinstance(source, Recording):
        if interventions:
            raise InputError("a recording is traced with the interventions it was made with; "
                             "give no others")
        from flyviz.record.replay import recording_interventions

        recording = source
        ids = recording_ids(recording, model)
        prompt_last = len(recording.prompt_ids) - 1
        if position is None:
            position = max(0, min(prompt_last, len(ids) - 1))
        if not 0 <= check_position_type(position) < len(ids):
            raise InputError(f"position {position} is outside the recording: give one of "
                             f"0..{len(ids) - 1} (0 is BOS)")
        if target is None:
            target = int(recording[int(position)].predicted_token_id)
        made_with = recording_interventions(recording, patch_source)
        resolved = model.resolve_interventions(
            bind_patches(made_with, len(recording.prompt_ids), model.checkpoint))
        attribution = explain(model.engine, model.backward, model.tokenizer, ids,
                              position=int(position), target=target, versus=versus,
                              window=window, mode=mode, interventions=resolved,
                              model_name=model.name, should_stop=should_stop)
        stored = recording.state(int(position))
        drift = float(np.max(np.abs(attribution.tape.x(int(position)) - stored)))
        if drift > STATE_TOLERANCE:
            raise RecordingError(f"{model.name} does not reproduce the recording's states "
                                 f"(|dx| up to {drift:.3g} at position {position}): it was made "
                                 "with another model or other interventions")
        return attribution
    if not isinstance(source, str):
        raise InputError(f"trace takes a prompt, a Recording or a recording's path, not "
                         f"{type(source).__name__}")
    if patch_source is not None:
        raise InputError("patch_source is for a recording's patches; give a prompt's patches "
                         "with their sources in interventions")
    ids = encode_prompt(model.tokenizer, source, model.checkpoint.config.bos_token_id)
    # Patches line up with this prompt (a source of another length is refused, as in a run).
    resolved = model.resolve_interventions(bind_patches(interventions, len(ids),
                                                        model.checkpoint))
    return explain(model.engine, model.backward, model.tokenizer, ids, position=position,
                   target=target, versus=versus, window=window, mode=mode,
                   interventions=resolved, model_name=model.name, should_stop=should_stop)


def trace_for_command(model: Model, source: "str | Recording | Path", *, window: int | None,
                      **options: Any) -> tuple[Attribution, str | None]:
    """:func:`trace` as the commands run it (``flyviz trace``, ``flyviz share --trace``).

    ``window`` ``None`` is the option left out: :data:`~flyviz.model.explain.DEFAULT_WINDOW`
    steps. :class:`~flyviz.model.explain.IncompleteAttributionWarning` is not raised: its
    line comes back with the attribution (``None`` when the flows add up), for the command
    to say once with the option that helps, and to exit with status 1.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", IncompleteAttributionWarning)
        attribution = trace(model, source,
                            window=DEFAULT_WINDOW if window is None else window, **options)
    return attribution, attribution.incompleteness("--window ")
