"""flyviz: watch a connectome language model think, and analyse what it did.

From Python (no Qt, no vispy: ``import flyviz`` loads neither)::

    import flyviz

    model = flyviz.load("demo")                       # checkpoint, tokenizer, anatomy
    recording = flyviz.run(model, "Once upon a time", max_new_tokens=20)
    states = recording.states()                       # (tokens, neurons) float32
    dataset = recording.to_xarray(model)              # labelled: token x neuron
    recording.save("run.flyrec")
    flyviz.export_movie(recording, "run.mp4", model=model)

The public API:

:func:`load`
    A model from ``"demo"``, a folder or a Hugging Face repo id
    (:class:`Model`: checkpoint, tokenizer, anatomy, and one engine reused
    by every run).
:func:`run`
    A prompt's run, with optional interventions (:class:`Silence`,
    :class:`Clamp`, :class:`Stimulate`, :class:`Cut`, :class:`Scale`, or
    their command-line text), as a :class:`Recording`.
:func:`compare`
    The untouched and the intervened model on one prompt.
:func:`trace`
    Why this token? One logit split exactly into the flows of the earlier
    tokens, neurons and synapses (an :class:`~flyviz.model.explain.Attribution`).
:func:`causal_trace`
    Which group of neurons, at which position, carries what makes a clean
    prompt's answer: a (positions x groups) grid (a :class:`Patch` copies
    another run's states into this one: activation patching).
:func:`importance`
    Estimated lesions: every neuron's first-order cost to a text's
    cross-entropy if it were silenced, and any grouping's sum.
:func:`export_movie`
    A recording as MP4, WebM, GIF or PNG frames (imports vispy when called).
:func:`share`
    What a viewer state shows as one self-contained web page (WebGL2, offline).
:class:`Attribution`
    What :func:`trace` returns: token, node, group and edge flows, the pruned
    graph, JSON and xarray forms.
:class:`Recording`
    States, tokens, texts and probabilities of a run; ``save``/``load``
    (``.flyrec``), ``to_xarray``, ``to_zarr``, ``to_nwb``, ``to_npz``.
:mod:`flyviz.errors`
    Every error a user can fix is a :class:`FlyvizError` with a one-line
    message.

The package's parts, for more than the API offers:

``flyviz.model``
    Checkpoint loaders, tokenizer, engine and sampler, selections and
    interventions (NumPy/SciPy only).
``flyviz.record``
    Per-token frames, the recording they form, the runner, comparisons,
    replays and data export.
``flyviz.export``
    Movie export.
``flyviz.render``
    vispy visuals and the offscreen renderer.
``flyviz.app``
    The Qt desktop application.
"""

import importlib as _importlib
import typing as _typing

from flyviz import errors
from flyviz._version import __version__
from flyviz.errors import FlyvizError

if _typing.TYPE_CHECKING:  # pragma: no cover
    from flyviz.api import causal_trace, compare, export_movie, importance, load, run, trace
    from flyviz.export.share import share
    from flyviz.model.explain import Attribution
    from flyviz.model.interventions import Clamp, Cut, Scale, Silence, Stimulate
    from flyviz.model.patching import Patch, PatchSource
    from flyviz.record.recording import Recording
    from flyviz.record.runner import Model

APP_NAME = "flyviz"
ORGANIZATION = "flyviz"
ORGANIZATION_DOMAIN = "flyviz.org"

#: Public names imported on first use, so that ``import flyviz`` stays fast: the
#: model code (NumPy, SciPy, tokenizers) loads only when something is used.
_LAZY = {
    "load": "flyviz.api", "run": "flyviz.api", "compare": "flyviz.api",
    "export_movie": "flyviz.api", "trace": "flyviz.api", "causal_trace": "flyviz.api",
    "importance": "flyviz.api", "share": "flyviz.export.share",
    "Model": "flyviz.record.runner", "Recording": "flyviz.record.recording",
    "Attribution": "flyviz.model.explain",
    "Silence": "flyviz.model.interventions", "Clamp": "flyviz.model.interventions",
    "Stimulate": "flyviz.model.interventions", "Cut": "flyviz.model.interventions",
    "Scale": "flyviz.model.interventions",
    "Patch": "flyviz.model.patching", "PatchSource": "flyviz.model.patching",
}

__all__ = ["Attribution", "Clamp", "Cut", "FlyvizError", "Model", "Patch", "PatchSource",
           "Recording", "Scale", "Silence", "Stimulate", "__version__", "causal_trace", "compare",
           "errors", "export_movie", "importance", "load", "run", "share", "trace"]


def __getattr__(name: str) -> _typing.Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'flyviz' has no attribute {name!r}")
    value = getattr(_importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
