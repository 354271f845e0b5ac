"""Model kinds: what a kind of model gives runs and views (no Qt, no vispy).

flyviz shows more than one kind of model on the same instrument. A
:class:`ModelKind` says, for its models,

* their **neurons and anatomy** (:meth:`ModelKind.neurons`,
  :meth:`ModelKind.anatomy`: where the neurons are drawn);
* their **time axis** (:class:`TimeAxis`: what one frame is called, its unit
  and length): ``token`` for the Fly LLM, a bin of milliseconds for a model
  stepped in time;
* **runs** (:meth:`ModelKind.new_run_settings`: the evented settings of its runs that
  the viewer state keeps; :meth:`ModelKind.run_request`: the run a state describes;
  :meth:`ModelKind.prepare_run`: the checked request and the recording it fills;
  :meth:`ModelKind.frames`: the run's :class:`~flyviz.record.frame.Frame` objects,
  stepped by :class:`flyviz.runs.Run`, the one caller);
* the **side channels** its frames carry beside the neurons' state
  (:class:`SideChannel`: text and next-token candidates for a language model,
  spike counts for a spiking one) and what they make the movie overlays and
  the figures' captions say (:meth:`ModelKind.overlays`,
  :meth:`ModelKind.frame_caption`);
* their **wiring** (:meth:`ModelKind.wiring`: the synapses, as one compressed
  table, that the Neuron dock ranks a neuron's partners by);
* **which docks apply**: a dock declares the kinds it serves (their
  :attr:`ModelKind.key`, or :data:`EVERY_KIND`), and :meth:`ModelKind.shows`
  answers for a kind.

The Fly LLM is the first kind, :class:`~flyviz.kinds.language.LanguageModelKind`
(:data:`LANGUAGE`), over the existing loader, engine and runner; every model
that names no kind is one (:func:`kind_of`). A viewer state knows the kind of
the model it shows (:attr:`ViewerState.kind <flyviz.viewer.state.ViewerState.kind>`),
and the viewer, the renderer and the exporters ask it rather than a tokenizer:
``tests/test_model_kinds.py`` keeps ``viewer/``, ``render/`` and ``export/``
free of the language model's words.

A kind is the only door to its models: it **loads** them from a spec
(:meth:`ModelKind.load`), says **which model made a recording**
(:func:`kind_of_recording`, then :meth:`ModelKind.recording_model`) and offers
its own **colour layers** (:meth:`ModelKind.colour_layers`). Nothing outside
this package asks which kind it has: it asks the kind.

Kinds **register** through the entry-point group ``flyviz.kinds``
(:data:`ENTRY_POINT_GROUP`), the built-in ones included (flyviz's
``pyproject.toml``), so a package that is not flyviz adds a kind by declaring
one entry point to its :class:`ModelKind` (an instance or the class);
:func:`registered_kinds` reads the group once per process. A new kind is one
folder: a module beside ``language.py`` here, or a package of its own
(``docs/kinds.md`` shows one).
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.errors import ModelNotFoundError
    from flyviz.model.checkpoint import Anatomy
    from flyviz.record.frame import Frame
    from flyviz.record.convert import FrameTiming
    from flyviz.record.recording import Recording
    from flyviz.render.overlay_content import OverlayContent
    from flyviz.viewer.layers import LayerKind
    from flyviz.viewer.settings import RunSettings

from flyviz.kinds.request import RunRequest

__all__ = ["BUILT_IN_KINDS", "DEFAULT_KIND", "ENTRY_POINT_GROUP", "EVERY_KIND", "LANGUAGE",
           "ModelDescription", "ModelKind", "RunRequest", "SideChannel", "TimeAxis", "Wiring", "default_kind",
           "kind_named", "kind_of", "kind_of_recording", "recorded_model_not_found",
           "refuse_without_tokens", "register_kind", "registered_kinds",
           "registry_generation", "reload_kinds", "state_frame"]

#: What a dock that serves every kind of model declares.
EVERY_KIND: tuple[str, ...] = ("*",)


@dataclass(frozen=True)
class TimeAxis:
    """How a kind's frames follow each other in time, and what the viewer calls them.

    Parameters
    ----------
    name
        What one frame is called (``"token"``, ``"bin"``).
    unit
        What the axis is measured in: the frame itself (``unit == name``, a
        count: the Fly LLM's tokens) or a physical unit (``"ms"``).
    step
        The length of one frame in ``unit`` (1 for a count).
    plural
        ``name``'s plural (default: ``name + "s"``).
    end
        Where the run ends on the axis, in ``unit`` (``None``: where its last frame's
        ``step`` ends). A run whose length is not a whole number of frames (a spiking run of
        30 ms in bins of 7 ms) has a short last frame, which ends here and not a whole
        ``step`` after its start.

    Frames are counted from 0 in words as everywhere else: the command line's
    ``--token K``, ``#token=K`` of a shared page, the plots' token axes. The words
    name a frame's index beside the last index, not the count (as napari's slider
    does): the last of 40 tokens reads ``"token 39 / 39"``, not "39 / 40", which
    would promise one more.

    Examples
    --------
    >>> TimeAxis("token", "token").of(11, 40)
    'token 11 of 0–39'
    >>> TimeAxis("token", "token").counter(39, 40)
    'token 39 / 39'
    >>> TimeAxis("bin", "ms", 10.0).of(11, 40)
    'bin 11 of 0–39 · 120 ms'
    >>> TimeAxis("token", "token").counter(0, 1), TimeAxis("token", "token").of(0, 1)
    ('token 0 / 0', 'token 0 of 0–0')
    >>> TimeAxis("bin", "ms", 7.0, end=30.0).of(4, 5)
    'bin 4 of 0–4 · 30 ms'
    """

    name: str
    unit: str
    step: float = 1.0
    plural: str = ""
    end: float | None = None

    @property
    def counted(self) -> bool:
        """True when the axis counts frames (its unit is the frame: tokens)."""
        return self.unit == self.name

    @property
    def names(self) -> str:
        """The plural of :attr:`name` (``"tokens"``)."""
        return self.plural or f"{self.name}s"

    @property
    def label(self) -> str:
        """What a slider over this axis is labelled: :attr:`name` for counted frames
        (``"token"``), else with a frame's length (``"bin (5 ms)"``), so that a run recorded
        in bins of 5 ms does not read as the kind's default bins.

        Examples
        --------
        >>> TimeAxis("token", "token").label, TimeAxis("bin", "ms", 5.0).label
        ('token', 'bin (5 ms)')
        """
        return self.name if self.counted else f"{self.name} ({self.step:g} {self.unit})"

    def time(self, index: int) -> float:
        """Where frame ``index`` (0-based) ends on the axis, in :attr:`unit`: a whole
        :attr:`step` after its start, or at :attr:`end` for a short last frame."""
        stop = (int(index) + 1) * float(self.step)
        return stop if self.end is None else min(stop, float(self.end))

    def at(self, index: int) -> str:
        """Frame ``index`` (0-based) in words: ``"token 11"``, ``"bin 11 · 120 ms"``."""
        words = f"{self.name} {int(index):,}"
        return words if self.counted else f"{words} \u00b7 {self.time(index):g} {self.unit}"

    def of(self, index: int, total: int) -> str:
        """Frame ``index`` of the ``total`` frames ``0`` to ``total - 1``, in words (movie
        and figure captions): ``"token 11 of 0–39"``, ``"bin 11 of 0–39 · 120 ms"``
        (an en dash); a one-frame run's ``"token 0 of 0–0"``."""
        words = f"{self.name} {int(index)} of 0\u2013{max(int(total) - 1, 0)}"
        return words if self.counted else f"{words} \u00b7 {self.time(index):g} {self.unit}"

    def counter(self, index: int, total: int) -> str:
        """The timeline's counter, the frame ``index`` beside the last index ``total - 1``:
        ``"token 11 / 39"``, ``"bin 11 / 39 · 120 ms"`` (the last frame's
        ``"token 39 / 39"``); ``"no tokens yet"`` while there is no frame."""
        if total <= 0:
            return f"no {self.names} yet"
        words = f"{self.name} {int(index):,} / {int(total) - 1:,}"
        return words if self.counted else f"{words} \u00b7 {self.time(index):g} {self.unit}"


@dataclass(frozen=True)
class SideChannel:
    """Something a kind's frames carry beside the neurons' state.

    Parameters
    ----------
    key
        Its name in code (``"text"``).
    title
        What the viewer calls it (``"Text"``).
    description
        One line on what it holds.
    """

    key: str
    title: str
    description: str = ""


@dataclass(frozen=True)
class Wiring:
    """A model's synapses as one compressed sparse table, grouped by one end.

    Row ``i`` holds the synapses whose ``grouped_by`` end is neuron ``i``: the other ends
    ``partners[offsets[i]:offsets[i+1]]`` with ``weights[...]``. The Fly LLM's graph is
    grouped by its postsynaptic neuron (fly-formats §1.3, CSR rows), the spiking brain's by
    the presynaptic one (the order Brian2 delivers spikes); the arrays are not copied.

    Attributes
    ----------
    neurons
        Number of neurons.
    offsets, partners, weights
        ``(neurons + 1,)`` row offsets, the synapses' other ends and their weights.
    grouped_by
        ``"post"`` (rows are inputs) or ``"pre"`` (rows are outputs).
    weight_name
        What a weight is, as a table's column names it (``"Weight"``, ``"Synapses"``).
    whole
        True when every weight is a whole number (synapse counts), shown without decimals.
    """

    neurons: int
    offsets: np.ndarray
    partners: np.ndarray
    weights: np.ndarray
    grouped_by: str = "post"
    weight_name: str = "Weight"
    whole: bool = False

    def __post_init__(self) -> None:
        if self.grouped_by not in ("post", "pre"):
            raise ValueError(f"grouped_by must be 'post' or 'pre', not {self.grouped_by!r}")
        if self.offsets.shape != (self.neurons + 1,):
            raise ValueError(f"offsets must have {self.neurons + 1:,} entries, "
                             f"not {self.offsets.shape}")
        if self.partners.shape != self.weights.shape or \
                int(self.offsets[-1]) != self.partners.shape[0]:
            raise ValueError("partners and weights must both have offsets[-1] entries")


@dataclass(frozen=True)
class ModelDescription:
    """What the window says of a shown model: its title, status bar, Model dock and About.

    Attributes
    ----------
    name
        The model's name (the window's title, the status bar).
    facts
        Short lines under the name (``"300 neurons · 3,000 synapses"``).
    provenance
        ``(what, value)`` pairs: where it came from (``("source", folder)``).
    credit
        Whose work it is, as About says it (``""``: nothing to say).
    """

    name: str
    facts: tuple[str, ...] = ()
    provenance: tuple[tuple[str, str], ...] = ()
    credit: str = ""


class ModelKind:
    """A kind of model: what its models give the viewer, the runs and the exporters.

    Subclass it for a new kind and set the class attributes; the methods have
    defaults that suit a kind whose frames carry only the neurons' state
    (no text). Instances are values: two kinds of the same key are the same kind.
    """

    #: The kind's name in code: docks declare the kinds they serve by it.
    key: ClassVar[str] = ""
    #: What the viewer calls it (``"language model"``).
    title: ClassVar[str] = ""
    #: Its frames' time axis.
    time_axis: ClassVar[TimeAxis] = TimeAxis("step", "step")
    #: What a neuron's recorded state is, as a plot's axis names it.
    state_label: ClassVar[str] = "state"
    #: The recorded state's name beside one neuron's value (the Neuron dock's row).
    state_name: ClassVar[str] = "State"
    #: What the State raster's rows show, in its caption (``"activations x"``; a spiking
    #: brain's ``"rates, not spikes"``, whose spikes are in its own dock).
    state_rows: ClassVar[str] = "states"
    #: The *Colour by* title of the recorded state (:meth:`state_layer`), as the window's
    #: menu and a shared page's name it (``&`` marks the menu's key).
    state_title: ClassVar[str] = "&Live state (activation x)"
    #: The names an embedded host (napari, the notebook widget: :class:`BrainSource
    #: <flyviz.brain_source.BrainSource>`) gives the recorded state's colourings, the
    #: default first: the colour modes ``"signed"`` and ``"abs"`` of a state with a sign, one
    #: name for a state without (a spiking brain's rate).
    state_quantities: ClassVar[tuple[str, ...]] = ("signed", "abs")
    #: How an embedded host that shows a whole recording (napari, the notebook widget) takes
    #: the colour range (:attr:`ViewerState.range_scope
    #: <flyviz.viewer.state.ViewerState.range_scope>`): ``"recording"``, one range over the
    #: run, so that a colour means the same value at every frame (a movie's); ``"token"``,
    #: each frame over its own values, as the window's brain view ranges every frame it
    #: shows (one path for both: :meth:`ViewerState.value_range
    #: <flyviz.viewer.state.ViewerState.value_range>`).
    host_range_scope: ClassVar[str] = "recording"
    #: The side channels its frames carry.
    side_channels: ClassVar[tuple[SideChannel, ...]] = ()
    #: True when a run is given text (a prompt box applies) and its frames carry it.
    reads_text: ClassVar[bool] = False
    #: True when a neuron's input at a frame is its weights times the previous frame's
    #: states (what the Neuron dock's *Currents now* computes): the Fly LLM's step.
    steps_its_wiring: ClassVar[bool] = False
    #: How to make a recording with an untouched run beside an intervened one (what a
    #: comparison's Δ layer needs), as the end of an error's sentence; ``""`` when the
    #: kind's runs are not compared.
    comparison_hint: ClassVar[str] = ""

    # ------------------------------------------------------------ neurons and anatomy
    def describe(self, model: Any) -> ModelDescription:
        """What the window says of ``model`` (:class:`ModelDescription`): by default its
        ``name`` (else the kind's title) and its number of neurons."""
        name = str(getattr(model, "name", "") or self.title or self.key)
        return ModelDescription(name, (f"{self.neurons(model):,} neurons",),
                                (("kind", self.title or self.key),))

    def neurons(self, model: Any) -> int:
        """How many neurons ``model`` has (the length of a state)."""
        return int(model.neurons)

    def anatomy(self, model: Any) -> "Anatomy | None":
        """Where ``model``'s neurons are drawn: its ``drawing_anatomy()`` (the anatomy or a
        stand-in layout), or ``None`` when it has none."""
        drawing = getattr(model, "drawing_anatomy", None)
        return drawing() if callable(drawing) else None

    def wiring(self, model: Any) -> Wiring | None:
        """``model``'s synapses (:class:`Wiring`), or ``None`` when its kind has no graph
        to show (the default)."""
        return None

    # ------------------------------------------------------------ models and recordings
    def load(self, spec: str, **options: Any) -> Any:
        """The model ``spec`` names (a folder, ``"demo"``...), loaded.

        ``options`` are what a host may pass any kind (a kind reads those it knows and
        ignores the others): ``dataset`` (a folder a model is joined to), ``progress``
        (``progress(label, fraction)``), ``kernel`` and ``download`` (``False``: only what
        is on this machine already).

        Raises
        ------
        FlyvizError
            One line naming what does not load and what to do.
        """
        from flyviz.errors import InputError

        raise InputError(f"the {self.title or self.key} kind loads no models from a spec")

    def model_spec(self, recording: "Recording") -> tuple[str | None, dict[str, Any]]:
        """What loads the model ``recording`` was made with, as its metadata says: the spec
        and the :meth:`load` options it was recorded with (``(None, {})``: it names none).
        Default: the metadata's ``"model"``."""
        spec = recording.metadata.get("model")
        return (spec if isinstance(spec, str) and spec else None), {}

    def recording_model(self, recording: "Recording", spec: str | None = None, *,
                        instead: str | None = None, **options: Any) -> tuple[Any, str]:
        """The model that made ``recording``: ``spec`` when given (the user's choice), else
        the one the recording names (:meth:`model_spec`), loaded with ``options`` over the
        recorded ones; ``(None, why)`` when there is none to load.

        ``instead`` is how a command's user names another model (``"--model SPEC"``,
        ``"SPEC"``): given, the error for a named model that is not found says that the
        recording names it, and to use ``instead`` (:func:`recorded_model_not_found`).

        Raises
        ------
        FlyvizError
            When the model does not load (:meth:`load`'s error; with ``instead``, for
            the one the recording names and is not found,
            :func:`recorded_model_not_found`'s), or has another number of neurons than
            the recording (:class:`~flyviz.errors.RecordingError`).
            A kind whose recordings are shown without their model overrides this to say
            why instead.
        """
        from flyviz.errors import ModelNotFoundError, RecordingError

        named, recorded = self.model_spec(recording)
        chosen = spec is not None
        if spec is None:
            spec = named
            options = {**recorded, **{k: v for k, v in options.items() if v is not None}}
        if not spec:
            return None, "the recording names no model"
        try:
            model = self.load(str(spec), **options)
        except ModelNotFoundError as exc:
            if chosen or instead is None:
                raise
            raise recorded_model_not_found(str(spec), exc, instead) from None
        if self.neurons(model) != recording.neurons:
            raise RecordingError(f"the recording has {recording.neurons:,} neurons but model "
                                 f"{spec} has {self.neurons(model):,}; give the model it was "
                                 "recorded with")
        return model, ""

    def model_refusal(self, model: Any, neurons: int, what: str = "the recording"
                      ) -> str | None:
        """Why ``model``, given to show ``what`` (one of this kind's recordings, or an atlas,
        of ``neurons`` neurons), cannot be the model it was made with: a model of another
        kind or another number of neurons (one line); ``None`` when it may be."""
        given = kind_of(model)
        name = getattr(model, "name", "") or "the model given"
        if given != self:
            return (f"{what} is a {self.title or self.key} recording but {name} is a "
                    f"{given.title or given.key}; give the model it was made with, or none "
                    "to load the one it names")
        if self.neurons(model) != int(neurons):
            return (f"{what} has {int(neurons):,} neurons but {name} has "
                    f"{self.neurons(model):,}; give the model it was made with, or none to "
                    "load the one it names")
        return None

    def recording_mismatch(self, recording: "Recording", model: Any, name: str = ""
                           ) -> str | None:
        """How ``model`` differs from the one ``recording`` says it was made with (a note),
        or ``None`` (the default: a kind that keeps no model identity)."""
        return None

    def select(self, model: Any, query: str) -> np.ndarray:
        """Sorted indices of ``model``'s neurons that the selection ``query`` picks
        (flyviz's selection language, ``flyviz select --help``). Default: the query over a
        checkpoint's labels (a Fly LLM's, :func:`flyviz.model.selection.select`).

        Raises
        ------
        flyviz.errors.SelectionError
            For a bad query, one that selects nothing, or a model with no labels to select
            by (one line).
        """
        from flyviz.errors import SelectionError
        from flyviz.model.selection import select

        checkpoint = getattr(model, "checkpoint", None)
        if checkpoint is None:
            raise SelectionError(f"a {self.title or self.key}'s neurons are not selected by "
                                 "query here")
        return select(checkpoint, query)

    def neuron_labels(self, model: Any) -> "Anatomy | None":
        """The anatomy whose labels a converted file gives ``model``'s neurons (default:
        :meth:`anatomy`)."""
        return self.anatomy(model)

    # ------------------------------------------------------------ colour layers
    def colour_layers(self) -> "tuple[LayerKind, ...]":
        """The colour layers this kind's recordings offer beside the recorded state
        (:class:`~flyviz.viewer.layers.LayerKind` entries with their ``build``), registered
        in :data:`flyviz.viewer.layers.LAYERS` and offered by a viewer state showing one of
        its models (default: none)."""
        return ()

    def rate_unit(self) -> str:
        """What a run's speed is counted in (``"bins/s"``)."""
        return f"{self.time_axis.names}/s"

    # ------------------------------------------------------------ stepping
    def run_settings(self, run: "RunSettings", **options: Any) -> Any:
        """The settings of a run (what :meth:`frames` takes), made from the viewer's run
        settings or ``options``."""
        raise NotImplementedError(f"the {self.title or self.key} kind cannot start runs")

    def new_run_settings(self) -> Any:
        """A new object of this kind's run settings: an evented dataclass (psygnal) that
        the viewer state keeps (:attr:`ViewerState.kind_settings
        <flyviz.viewer.state.ViewerState.kind_settings>`), docks bind to and scripts set;
        ``None`` (the default) for a kind whose runs take no settings."""
        return None

    def new_dock_settings(self) -> Any:
        """A new object of this kind's docks' own choices (an evented dataclass, as
        :meth:`new_run_settings`'): what its docks show and a script sets, kept by the
        viewer state (``state.kind_settings.docks_of(kind)``); ``None`` (the default) for
        a kind whose docks keep none there."""
        return None

    def run_request(self, state: Any) -> "RunRequest":
        """The run the viewer ``state`` describes (its settings of this kind, see
        :meth:`new_run_settings`): what a host's Run button starts. Default: a run with
        the kind's defaults."""
        return RunRequest()

    def speed_cap(self, state: Any) -> float:
        """Most frames per wall second a live run of ``state``'s settings makes (``<= 0``:
        as fast as it goes). Default: the state's run speed cap."""
        return float(state.run.speed_cap)

    def prepare_run(self, model: Any, request: "RunRequest"
                    ) -> "tuple[RunRequest, Recording]":
        """Check ``request`` for ``model`` before anything runs and make the empty recording
        the run fills: the request with its settings validated (a seed drawn, so that the
        recording stores the one used) and the recording with its metadata.

        Raises
        ------
        InputError
            One line saying what is wrong with the request.

        The default suits a kind whose runs take no interventions and do not compare: a
        float32 recording (or the request's ``states_dtype``) whose metadata names the kind
        and the model.
        """
        from flyviz.errors import InputError
        from flyviz.record.recording import Recording

        words = self.title or self.key
        if request.interventions:
            raise InputError(f"a {words} run takes no interventions")
        if request.compare:
            raise InputError(f"a {words} run cannot be compared with an untouched one")
        recording = Recording(self.neurons(model),
                              {"kind": self.key, "model_name": str(getattr(model, "name", ""))},
                              states_dtype=request.states_dtype or "float32")
        return request, recording

    def frames(self, model: Any, request: Any, settings: Any = None, *,
               interventions: Any = (), recording: "Recording | None" = None,
               **options: Any) -> Iterator["Frame"]:
        """Start a run of ``model`` on ``request`` (what the run is given: a prompt, a
        stimulus) with ``settings`` and yield its frames, appending them to
        ``recording`` if given; stopping the iteration stops the run between two frames.

        ``options`` are the run request's options that the kind reads (``compare``: the
        Fly LLM's comparison with the untouched run); hosts never call this themselves:
        they start a :class:`~flyviz.runs.Run` (:mod:`flyviz.runs`)."""
        raise NotImplementedError(f"the {self.title or self.key} kind cannot start runs")

    # ------------------------------------------------------------ side channels
    def has(self, channel: str) -> bool:
        """True when this kind's frames carry side channel ``channel``."""
        return any(c.key == channel for c in self.side_channels)

    def overlays(self, recording: "Recording", start: int = 0,
                 stop: int | None = None) -> Iterator["OverlayContent"]:
        """What the movie overlays say over frames ``start:stop`` of ``recording``
        (default: the time axis's counter alone, no text and no bars)."""
        from flyviz.render.overlay_content import OverlayContent

        n = len(recording)
        stop = n if stop is None else min(int(stop), n)
        for i in range(max(0, int(start)), stop):
            yield OverlayContent(prompt="", generated="", newest="", newest_in_prompt=False,
                                 bars=(), counter=self.time_axis.of(i, n))

    def state_layer(self, mode: str, scale: Any) -> Any:
        """What this kind's recorded state is, as a view colours it: its label, units,
        colormap and ``scale`` (the window's *Live state*, a shared page's and a figure's
        colour bar; a viewer state asks it, :meth:`ViewerState.layer
        <flyviz.viewer.state.ViewerState.layer>`). Default: the activation in colormap
        ``mode`` (``"signed"`` or ``"abs"``) over ``scale``."""
        from flyviz.render.style import activation_layer

        return activation_layer(mode, scale)

    def recorded_layer(self, mode: str, scale: Any) -> Any:
        """How a movie or still colours this kind's recorded state when nothing else is
        chosen (``flyviz export``); default :meth:`state_layer`."""
        return self.state_layer(mode, scale)

    def recording_axis(self, recording: "Recording") -> TimeAxis:
        """``recording``'s time axis: :attr:`time_axis`, with the frame length the
        recording was made with where the kind lets a run choose it (a spiking run's bin)."""
        return self.time_axis

    def frame_timing(self, recording: "Recording") -> "FrameTiming":
        """How a converted file (NWB) times ``recording``'s frames
        (:class:`~flyviz.record.convert.FrameTiming`): counted frames, one a second, for an
        axis that counts them (tokens); else frames at their real length
        (:meth:`recording_axis`), the states in the unit of :meth:`recorded_layer`."""
        from flyviz.record.convert import FrameTiming

        axis = self.recording_axis(recording)
        layer = self.state_layer("signed", None)
        return FrameTiming.of_axis(axis.name, axis.unit, axis.step, counted=axis.counted,
                                   state_unit=str(getattr(layer, "units", "") or "1"),
                                   state_label=str(getattr(layer, "label", "")
                                                   or self.state_label), end=axis.end)

    def frame_caption(self, recording: "Recording", index: int) -> str:
        """A figure's title for frame ``index`` of ``recording`` (default: the time axis's)."""
        return self.time_axis.of(index, len(recording))

    def frame_phase(self, frame: "Frame", streaming: bool) -> str:
        """A few words on what ``frame`` is, after the timeline's counter: what the model
        was doing at it (``streaming``: the newest frame of a run still going). Default:
        ``"running"`` while streaming, else nothing (a kind that reads no text has no prompt
        and no generated part; its frames are only times)."""
        return "running" if streaming else ""

    def frame_line(self, recording: "Recording", index: int) -> str:
        """One line on frame ``index`` for a host's readout (the notebook widget's text,
        napari's status): default :meth:`frame_caption`."""
        return self.frame_caption(recording, index)

    def page_steps(self, recording: "Recording") -> list[dict[str, Any]]:
        """What a shared web page shows beside the brain at each frame of ``recording``
        (:mod:`flyviz.export.share`): ``text`` (the step's word in the page's text line),
        ``phase``, ``position``, ``next`` with its probability ``p``, and ``top``, the
        ``[label, value]`` bars; a kind that chooses tokens also says whether the step
        ``generating`` chose its ``next``, and the last step may carry ``then``, the text its
        choice adds after the text line (``{"text", "end"}``). Default: the time axis's words
        and no bars."""
        return [{"text": f" {self.time_axis.at(i)}", "phase": 0, "position": i, "next": "",
                 "p": 0.0, "top": []} for i in range(len(recording))]

    def state_text(self, value: float) -> str:
        """One neuron's recorded state as the Neuron dock writes it (``"+0.4213"``)."""
        return f"{value:+.4f}"

    def run_summary(self, recording: "Recording") -> str:
        """What was run, in a few words, for a shared page's title after the model's name
        (``"demo: 21 excited at 150 Hz, 0.5 s"``). Default: the recording's prompt, or
        ``""``."""
        return str(recording.metadata.get("prompt", "") or "").strip()

    def state_step(self, recording: "Recording", index: int) -> float:
        """The step a recorded state's values come in at frame ``index`` (every value a
        whole multiple of it: a spiking brain's rate is a count of spikes over the bin and
        the trials), for a view to show a value it holds only approximately at one of them;
        ``0.0`` for a state of any value (the default)."""
        return 0.0

    def page_counter(self, recording: "Recording", index: int) -> str:
        """A shared page's counter at frame ``index`` of ``recording``, as the window's
        timeline counts (:meth:`TimeAxis.counter` of :meth:`recording_axis`):
        ``"token 11 / 39"``, ``"bin 11 / 39 · 120 ms"`` (40 frames: the last index)."""
        return self.recording_axis(recording).counter(index, len(recording))

    def page_axis(self, recording: "Recording") -> dict[str, Any]:
        """How a shared web page counts ``recording``'s frames and what it shows beside the
        brain (:mod:`flyviz.export.share`): the time axis (:meth:`recording_axis`: ``name``,
        ``names``, ``unit``, ``step``, ``counted``), ``text`` (the frames carry text for the
        page's text line: :attr:`reads_text`) and ``bars`` (the title over a step's bars,
        ``""`` for a kind whose frames carry none)."""
        axis = self.recording_axis(recording)
        return {"name": axis.name, "names": axis.names, "unit": axis.unit,
                "step": float(axis.step), "counted": axis.counted,
                "text": bool(self.reads_text), "bars": ""}

    def replay_refusal(self, recording: "Recording") -> str | None:
        """Why ``recording`` cannot be run again and checked frame by frame
        (``flyviz replay``), and what to do instead, in one line; ``None`` when this kind
        replays its recordings. Default: it does not."""
        return (f"a {self.title or self.key} recording is not replayed: flyviz replay re-runs "
                "a language model's prompt and checks its tokens")

    # ------------------------------------------------------------ docks
    def shows(self, kinds: tuple[str, ...]) -> bool:
        """True when a dock that serves ``kinds`` (kind keys, or :data:`EVERY_KIND`)
        applies to this kind's models."""
        return kinds == EVERY_KIND or "*" in kinds or self.key in kinds

    # ------------------------------------------------------------ values
    def __eq__(self, other: object) -> bool:
        return isinstance(other, ModelKind) and other.key == self.key

    def __hash__(self) -> int:
        return hash(("ModelKind", self.key))

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.key!r}: {self.time_axis.name} in {self.time_axis.unit}>"


def state_frame(index: int, state: np.ndarray) -> "Frame":
    """A :class:`~flyviz.record.frame.Frame` that carries only the neurons' ``state`` at
    step ``index``, for kinds whose frames have no text (its text fields are empty)."""
    from flyviz.record.frame import PHASE_GENERATION, Frame

    values = np.asarray(state, dtype=np.float32)
    # Token ids are 0, not -1: a .flyrec file holds non-negative ids only, and these frames
    # are saved like any other (their empty texts say there is no token).
    return Frame(position=int(index), phase=PHASE_GENERATION, input_token_id=0, input_text="",
                 predicted_token_id=0, predicted_text="", probability=0.0,
                 top_k_ids=np.zeros(0, np.int64), top_k_probabilities=np.zeros(0, np.float32),
                 top_k_text=(), state=values,
                 mean_abs_state=float(np.abs(values).mean()) if values.size else 0.0)


def kind_of(model: Any) -> ModelKind:
    """The kind of ``model``: its ``kind`` attribute when it has one (a :class:`ModelKind`),
    else the default kind (:func:`default_kind`, the Fly LLM's: every model flyviz loaded
    before kinds existed)."""
    kind = getattr(model, "kind", None)
    return kind if isinstance(kind, ModelKind) else default_kind()


#: The entry-point group kinds register in (``importlib.metadata``): each entry point names a
#: :class:`ModelKind` instance or subclass.
ENTRY_POINT_GROUP = "flyviz.kinds"

#: flyviz's own kinds, as its ``pyproject.toml`` declares them in :data:`ENTRY_POINT_GROUP`.
#: They are found without the metadata too (a source checkout on ``PYTHONPATH`` whose
#: installed metadata is older), and once each however many distributions declare them.
BUILT_IN_KINDS: dict[str, str] = {
    "language": "flyviz.kinds.language:LANGUAGE",
    "spiking": "flyviz.kinds.spiking:SPIKING",
}

#: The key of the kind of every model and recording that names none: the Fly LLM's
#: (:func:`default_kind`).
DEFAULT_KIND = "language"

#: The registered kinds by key, ``None`` until the entry points are read; replaced whole
#: (under the lock), never filled in place, so a reader on another thread sees all or none.
_REGISTRY: dict[str, ModelKind] | None = None
_REGISTRY_LOCK = threading.RLock()
#: How many times the registry changed (read again, or a kind registered): what a cache of
#: the kinds' offerings (the colour layers, :data:`flyviz.viewer.layers.LAYERS`) compares.
_GENERATION = 0


def _as_kind(value: Any) -> ModelKind | None:
    """An entry point's object as a kind (an instance, or a subclass instantiated)."""
    if isinstance(value, type) and issubclass(value, ModelKind):
        value = value()
    return value if isinstance(value, ModelKind) and value.key else None


def _load_reference(reference: str) -> Any:
    """The object ``"module:name"`` names."""
    import importlib

    module, _, name = reference.partition(":")
    value: Any = importlib.import_module(module)
    for part in name.split(".") if name else ():
        value = getattr(value, part)
    return value


def _read_entry_points() -> dict[str, ModelKind]:
    """flyviz's own kinds, then every entry point of the group. A broken entry point is
    said once (a warning naming its distribution) and left out."""
    from importlib.metadata import entry_points

    found: dict[str, ModelKind] = {}
    for reference in BUILT_IN_KINDS.values():
        kind = _as_kind(_load_reference(reference))
        assert kind is not None, reference
        found.setdefault(kind.key, kind)
    for point in entry_points(group=ENTRY_POINT_GROUP):
        dist = getattr(getattr(point, "dist", None), "name", None) or "an unnamed distribution"
        try:
            kind = _as_kind(point.load())
        except Exception as exc:  # a third party's bug must not stop flyviz
            said = str(exc).splitlines()[0] if str(exc) else ""
            warnings.warn(f"flyviz: the model kind {point.name!r} of {dist} ({point.value}) does "
                          f"not load ({type(exc).__name__}: {said}); flyviz goes on without it",
                          RuntimeWarning, stacklevel=4)
            continue
        if kind is None:
            warnings.warn(f"flyviz: the model kind {point.name!r} of {dist} ({point.value}) is "
                          "not a flyviz.kinds.ModelKind with a key; flyviz goes on without it",
                          RuntimeWarning, stacklevel=4)
            continue
        known = found.get(kind.key)
        if known is None:
            found[kind.key] = kind
        elif known is not kind and type(known) is not type(kind):
            warnings.warn(f"flyviz: the model kind {kind.key!r} of {dist} ({point.value}) has "
                          f"the key of {known!r}, registered first; it is left out",
                          RuntimeWarning, stacklevel=4)
    return found


def registered_kinds() -> dict[str, ModelKind]:
    """Every kind flyviz knows, by key: its own, those of the entry-point group
    :data:`ENTRY_POINT_GROUP` (read once per process) and those :func:`register_kind` added."""
    global _REGISTRY
    registry = _REGISTRY
    if registry is None:
        with _REGISTRY_LOCK:
            if _REGISTRY is None:
                _REGISTRY = _read_entry_points()
            registry = _REGISTRY
    return dict(registry)


def reload_kinds() -> dict[str, ModelKind]:
    """Read the entry-point group again (a package that adds a kind was installed, or put on
    ``sys.path``, in this process) and return :func:`registered_kinds`; kinds
    :func:`register_kind` added are forgotten."""
    global _REGISTRY, _GENERATION
    with _REGISTRY_LOCK:
        _REGISTRY = None
        _GENERATION += 1
    return registered_kinds()


def register_kind(kind: ModelKind, *, replace: bool = False) -> ModelKind:
    """Register ``kind`` in this process (a script's or a notebook's own kind, without a
    package); its colour layers join :data:`flyviz.viewer.layers.LAYERS` (which reads the
    kinds again when :func:`registry_generation` changed).

    Raises
    ------
    flyviz.errors.ModelKindError
        (an :class:`~flyviz.errors.InputError` and a ``ValueError``) For something that is
        not a kind with a key, or a key registered already (unless ``replace``).
    """
    from flyviz.arguments import shown
    from flyviz.errors import ModelKindError

    made = _as_kind(kind)
    if made is None:
        raise ModelKindError(f"register_kind takes a flyviz.kinds.ModelKind (or a subclass) "
                             f"with a key, not {shown(kind)}")
    kind = made
    global _REGISTRY, _GENERATION
    with _REGISTRY_LOCK:
        kinds = registered_kinds()
        known = kinds.get(kind.key)
        if known is not None and known is not kind and not replace:
            raise ModelKindError(f"a model kind named {kind.key!r} is registered already "
                                 f"({known!r}); give another key, or replace=True")
        _REGISTRY = {**kinds, kind.key: kind}
        _GENERATION += 1
    return kind


def registry_generation() -> int:
    """A number that changes each time the registered kinds do (:func:`reload_kinds`,
    :func:`register_kind`): a cache of what the kinds offer compares it."""
    return _GENERATION


def default_kind() -> ModelKind:
    """The kind of every model and recording that names none (:data:`DEFAULT_KIND`: the
    Fly LLM's, :data:`LANGUAGE`), found through the registry like any other."""
    return kind_named(DEFAULT_KIND)


def kind_named(key: str) -> ModelKind:
    """The registered kind whose key is ``key`` (:func:`registered_kinds`);
    :class:`~flyviz.errors.ModelKindError` (an ``InputError`` and a ``ValueError``) for
    another."""
    from flyviz.arguments import shown
    from flyviz.errors import ModelKindError

    kinds = registered_kinds()
    if not isinstance(key, str) or key not in kinds:
        said = repr(key) if isinstance(key, str) else shown(key)
        raise ModelKindError(f"unknown model kind {said}; the kinds are {', '.join(kinds)}")
    return kinds[key]


def kind_of_recording(recording: "Recording") -> ModelKind:
    """The kind of the model ``recording`` was made with: the registered one its metadata
    names (``"kind"``), else the Fly LLM's (every recording made before kinds existed).

    A kind that is not registered here (its package is not installed) is a plain
    :class:`ModelKind` of that key: its states are shown, its model is not loaded.

    Raises
    ------
    InputError
        For anything but a recording (``None``, a path: open it with ``Recording.load``).
    """
    metadata = getattr(recording, "metadata", None)
    if not isinstance(metadata, dict):
        from flyviz.arguments import shown
        from flyviz.errors import InputError

        raise InputError(f"kind_of_recording takes a flyviz Recording (Recording.load(path) "
                         f"opens a file), not {shown(recording)}")
    key = metadata.get("kind")
    if not isinstance(key, str) or not key:
        return default_kind()
    kinds = registered_kinds()
    return kinds[key] if key in kinds else _unregistered(key)


def recorded_model_not_found(named: str, error: Exception, instead: str
                             ) -> "ModelNotFoundError":
    """The error for a model that a recording names and that is not found here.

    The loader's own error (``no such folder: PATH; a model is ...``) reads as if the
    user had typed PATH, and lists every kind of spec; they gave a recording, so this
    says that the recording names the model, why it is not found, and how to give
    another (``instead``, e.g. ``"--model SPEC"``).
    """
    from flyviz.errors import ModelNotFoundError

    reason = str(error).split("; ")[0]
    if reason == f"no such folder: {named}":
        reason = "no such folder"
    return ModelNotFoundError(f"the recording names the model {named}, which is not found "
                              f"({reason}); give another as {instead}")


def refuse_without_tokens(recording: "Recording", name: str, what: str) -> None:
    """Refuse a recording whose kind reads no text for ``what`` (a clause saying what needs
    tokens, e.g. ``"--trace explains a language model's choice of a token"``).

    A spiking brain's recording holds time bins, not tokens: read as tokens, its one
    "prompt" frame and foreign neuron count would give errors about lengths or models
    that are not the problem.

    Raises
    ------
    InputError
        One line naming ``name`` (the file as the user gave it) and its kind.
    """
    from flyviz.errors import InputError

    kind = kind_of_recording(recording)
    if not kind.reads_text:
        raise InputError(f"{what}; {name} is a {kind.title or kind.key} recording, which "
                         "chooses no tokens")


def _frame_timing_of(recording: "Recording") -> Any:
    """The timing of ``recording``'s frames, as its kind gives it (for the record layer:
    :mod:`flyviz.record_hooks`)."""
    return kind_of_recording(recording).frame_timing(recording)


def _hand_down_to_the_record_layer() -> None:
    from flyviz import record_hooks

    record_hooks.frame_timing = _frame_timing_of


_hand_down_to_the_record_layer()


def _unregistered(key: str) -> ModelKind:
    """A plain kind standing in for kind ``key``, whose package is not installed."""

    class UnregisteredKind(ModelKind):
        def recording_model(self, recording: "Recording", spec: str | None = None,
                            **options: Any) -> tuple[Any, str]:
            return None, (f"its kind of model, {key!r}, is not installed here (install the "
                          "package that provides it)")

    UnregisteredKind.key = key
    UnregisteredKind.title = f"{key} (not installed)"
    return UnregisteredKind()


def __getattr__(name: str) -> ModelKind:
    # flyviz.kinds.LANGUAGE, the Fly LLM's kind, is found through the registry (its entry
    # point, flyviz.kinds.language:LANGUAGE) when first asked for: this module is the base
    # every kind imports, and imports none of them.
    if name == "LANGUAGE":
        return default_kind()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
