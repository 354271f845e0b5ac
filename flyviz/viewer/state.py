"""What is shown, as one evented Qt-free value: :class:`ViewerState`.

The window, the movie exporter, offscreen stills and figures, the notebook
widget and the napari plugin all read the same state; none of them keeps its
own copy of "what is on screen", and
:meth:`FrameRenderer.for_state <flyviz.render.offscreen.FrameRenderer.for_state>`
is the one path from a state to pixels. The colour layers it offers are the
kinds of :mod:`flyviz.viewer.layers`. Views bind to :attr:`ViewerState.events`
(psygnal signals, emitted synchronously after a change) and write back to the
state when the user changes something. Setting a bad value raises
:class:`~flyviz.viewer.settings.ViewerError` (one line, a
:class:`~flyviz.errors.InputError`) and changes nothing.

The state holds

* the model (:meth:`~ViewerState.set_model`: a :class:`~flyviz.record.runner.Model`
  or anything with ``neurons`` and ``name``), its kind (:attr:`~ViewerState.kind`,
  a :class:`~flyviz.kinds.ModelKind`: its time axis, side channels and docks) and
  where its neurons are drawn (``anatomy``);
* the recording shown (a comparison is a recording with a ``baseline``), the
  shown token (:attr:`~ViewerState.index`) and whether it follows the newest
  frame (:attr:`~ViewerState.live`);
* the colour layer: *Colour by* entries registered by features
  (:meth:`~ViewerState.add_colour_layer`) and the chosen one
  (:attr:`~ViewerState.colour_by`); :attr:`~ViewerState.layer` is the
  :class:`~flyviz.render.style.ColourLayer` drawn, :meth:`~ViewerState.value_range`
  its range at the shown token;
* the display, run and mesh settings and the docks' own choices (the prompt, the
  lesion map's log scale, *Why?*'s lag...: :class:`~flyviz.viewer.settings.DockSettings`,
  :attr:`ViewerState.docks`), all in :mod:`flyviz.viewer.settings`;
* the highlight (named emphasis masks, :class:`~flyviz.viewer.highlight.Highlights`,
  and the superclass / cell-type filter), the selected neuron, the picked neurons
  and the neurons the interventions touch (:attr:`~ViewerState.intervened`, ringed);
* what features draw over the views: synapses as lines by source
  (:meth:`~ViewerState.set_lines`), the running text's shading
  (:attr:`~ViewerState.token_flows`) and the open atlas (:attr:`~ViewerState.atlas`,
  whose cards the inspector shows);
* the camera: a view preset and, once the user moved it, a
  :class:`~flyviz.render.camera.CameraPose`;
* the interventions of the next runs, whether runs compare with the untouched model,
  and interventions for the next run only (:meth:`~ViewerState.set_next_interventions`):
  the one copy the window's runs start from.

Threading: a state belongs to one thread (the app's UI thread); every setter
runs there and its signals fire there. Workers never touch it (see
:mod:`flyviz.viewer` for the app's threading rules).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
from psygnal import Signal, SignalGroup

from flyviz.kinds import LANGUAGE, ModelKind, kind_of
from flyviz.model.checkpoint import Anatomy
from flyviz.record.frame import Frame
from flyviz.record.recording import COMPARISON_MODES, Recording
from flyviz.render.camera import VIEW_PRESETS, CameraPose
from flyviz.render.style import BACKGROUND, CloudStyle, ColourLayer
from flyviz.viewer.highlight import Highlights
from flyviz.viewer.layers import LAYERS, STATE
from flyviz.viewer.settings import (DisplaySettings, DockSettings, MeshSettings, RunSettings,
                                    ViewerError)

__all__ = ["COMPARE_MODES", "RANGE_SCOPES", "STATE", "ColourLayerEntry", "LayerBuilder",
           "ViewerEvents", "ViewerState"]

#: How a state's colour range is taken: from the shown token's values (the window's),
#: or once over the whole recording (a movie's, the notebook's and napari's), so that a
#: colour means the same value at every token.
RANGE_SCOPES = ("token", "recording")

#: How a comparison runs the untouched model: teacher-forced on the intervened text, or free
#: (:data:`flyviz.record.flyrec_codec.COMPARISON_MODES`, the one list).
COMPARE_MODES = COMPARISON_MODES

#: ``build() -> layer``: an entry's colour layer, built when it is chosen (``None``: the state).
LayerBuilder = Callable[[], "ColourLayer | None"]


@dataclass(frozen=True)
class ColourLayerEntry:
    """One *Colour by* entry: its key, menu title, builder, tooltip and whether it is offered."""

    key: str
    title: str
    build: LayerBuilder
    tip: str = ""
    available: bool = True


class ViewerEvents(SignalGroup):
    """The signals of a :class:`ViewerState` (each fires after the change, on the state's thread)."""

    #: A new model (or none) is shown; the recording was replaced too.
    model = Signal()
    #: A different recording is shown (new run, opened file, reset).
    recording = Signal()
    #: Frames were appended to the shown recording: its new length.
    frames_appended = Signal(int)
    #: The shown token changed (``-1``: none).
    index = Signal(int)
    #: Following the newest frame was switched on or off.
    live = Signal(bool)
    #: The *Colour by* entry chosen now (its key).
    colour_by = Signal(str)
    #: The colour layer drawn instead of the recorded state changed (``None``: the state).
    layer = Signal(object)
    #: A *Colour by* entry was registered, or offered or withdrawn: its key.
    colour_layers = Signal(str)
    #: The emphasis mask shown (``None``: every neuron lit).
    highlight = Signal(object)
    #: The selected neuron (``None``: none).
    selected = Signal(object)
    #: The picked neurons (sorted indices).
    picked = Signal(object)
    #: The superclass / cell-type highlight filter: ``(superclass, cell-type prefix)``.
    filter = Signal(str, str)
    #: The camera preset the view was framed with.
    view = Signal(str)
    #: The camera pose (``None``: the preset's framing).
    camera = Signal(object)
    #: The interventions of the next runs (a tuple).
    interventions = Signal(object)
    #: Whether runs compare with the untouched model, and how.
    comparing = Signal(bool, str)
    #: The interventions of the next run only (a tuple), and what they do in words.
    next_interventions = Signal(object, str)
    #: The meshes drawn behind the cloud changed (outline or mesh files shown or added).
    meshes = Signal()
    #: The open atlas changed (the atlas, or ``None``).
    atlas = Signal(object)
    #: The shading of the running text's tokens changed (a flow per position, or ``None``).
    token_flows = Signal(object)
    #: A source's synapse lines were drawn or cleared: its name.
    lines = Signal(str)
    #: The neurons an intervention touches (sorted indices; ringed in the brain).
    intervened = Signal(object)
    #: Something is about to read :attr:`ViewerState.camera` (an export): a view that
    #: owns a camera writes where it looks from now (:meth:`ViewerState.sync_camera`).
    camera_wanted = Signal()


class ViewerState:
    """Everything a view of the brain shows, with validation and change signals.

    Parameters
    ----------
    display, run, mesh
        The settings groups (defaults: the app's first-launch settings).

    Examples
    --------
    >>> state = ViewerState()
    >>> state.set_model(model)                  # doctest: +SKIP
    >>> state.set_recording(flyviz.run(model, "the cat"))  # doctest: +SKIP
    >>> state.index = 3                         # doctest: +SKIP
    >>> state.display.mode = "abs"
    >>> state.events.index.connect(print)       # doctest: +SKIP
    """

    def __init__(self, display: DisplaySettings | None = None, run: RunSettings | None = None,
                 mesh: MeshSettings | None = None) -> None:
        self.events = ViewerEvents()
        self.display = display or DisplaySettings()
        self.run = run or RunSettings()
        self.mesh = mesh or MeshSettings()
        #: The docks' own choices (the prompt, log scale, lag, measure, view...).
        self.docks = DockSettings()
        self.model: Any = None
        self._kind: ModelKind = LANGUAGE
        self.anatomy: Anatomy | None = None
        self.model_name = ""
        self._neurons = 0
        self._recording = Recording(1)
        self._index = -1
        self._live = True
        self._entries: dict[str, ColourLayerEntry] = {}
        self._colour_by = STATE
        self._override: ColourLayer | None = None
        self.highlights = Highlights(self.events.highlight.emit, lambda: self._neurons)
        self._selected: int | None = None
        self._picked = np.zeros(0, np.int64)
        self._filter = ("", "")
        self._view = "front"
        self._camera: CameraPose | None = None
        self._interventions: tuple[Any, ...] = ()
        self._comparing = False
        self._compare_mode = COMPARE_MODES[0]
        self._next_interventions: tuple[Any, ...] = ()
        self._next_description = ""
        self.background = BACKGROUND
        self._mesh_files: list[Any] = []
        self._outline: tuple[int, Any] | None = None     # (id of the anatomy, its outline)
        self.mesh.events.connect(lambda *_: self.events.meshes.emit())
        self._atlas: Any = None
        self._token_flows: tuple[float, ...] | None = None
        self._lines: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._intervened = np.zeros(0, np.int64)
        self._range_scope = RANGE_SCOPES[0]
        self._range_cache: dict[Any, tuple[tuple[float, float], Any, Any]] = {}
        self.offer_layer(STATE, lambda: None)

    # ------------------------------------------------------------ meshes
    def add_mesh(self, path: Any, *, scale: float = 1.0,
                 offset: tuple[float, float, float] = (0.0, 0.0, 0.0)) -> Any:
        """Read a mesh file (.obj, .ply, .stl) into the model's frame and show it.

        A damaged file is a one-line :class:`~flyviz.errors.InputError` and
        changes nothing. Returns the :class:`~flyviz.analysis.outline.Mesh`.
        """
        from flyviz.analysis.outline import load_mesh

        return self.add_mesh_object(load_mesh(path, scale=scale, offset=offset))

    def add_mesh_object(self, mesh: Any) -> Any:
        """Show a :class:`~flyviz.analysis.outline.Mesh` already read (or made) behind the cloud."""
        self._mesh_files.append(mesh)
        self.mesh.mesh_shown = True
        self.events.meshes.emit()
        return mesh

    def clear_meshes(self) -> None:
        """Forget the mesh files added (the soma outline stays available)."""
        self._mesh_files = []
        self.events.meshes.emit()

    @property
    def mesh_files(self) -> tuple[Any, ...]:
        """The meshes read from files, in the order they were added."""
        return tuple(self._mesh_files)

    def outline(self) -> Any:
        """The shown model's soma outline, computed once per model, or ``None``."""
        anatomy = self.anatomy
        if anatomy is None or anatomy.n_valid < 10:
            return None
        if self._outline is None or self._outline[0] != id(anatomy):
            from flyviz.analysis.outline import soma_outline

            self._outline = (id(anatomy), soma_outline(anatomy.positions_um()[anatomy.valid]))
        return self._outline[1]

    def shown_meshes(self) -> list[Any]:
        """What is drawn behind the cloud now: the outline and the mesh files, if shown."""
        shown = []
        if self.mesh.outline_shown:
            outline = self.outline()
            if outline is not None:
                shown.append(outline)
        if self.mesh.mesh_shown:
            shown.extend(self._mesh_files)
        return shown

    # ------------------------------------------------------------ model
    @property
    def neurons(self) -> int:
        """Neurons of the model shown (0 before one is set)."""
        return self._neurons

    @property
    def kind(self) -> ModelKind:
        """The kind of the model shown (:mod:`flyviz.kinds`): its time axis, the side
        channels its frames carry, what the overlays say and which docks apply."""
        return self._kind

    def set_model(self, model: Any, anatomy: Anatomy | None = None, name: str | None = None,
                  neurons: int | None = None, kind: ModelKind | None = None) -> None:
        """Show ``model`` (``None``: none): picks, selection and highlights are cleared and
        the recording is an empty one of the model's size.

        ``anatomy`` places the neurons (default: the kind's, ``model.drawing_anatomy()``);
        ``neurons`` is needed only without a model; ``kind`` is the model's kind
        (default: :func:`flyviz.kinds.kind_of`, the Fly LLM's for a model that names none).
        """
        if kind is not None and not isinstance(kind, ModelKind):
            raise ViewerError(f"kind must be a flyviz.kinds.ModelKind, got {type(kind).__name__}")
        kind = kind_of(model) if kind is None else kind
        if model is None and neurons is None and anatomy is None:
            count = 0
        elif neurons is not None:
            count = int(neurons)
        elif model is not None:
            count = kind.neurons(model)
        else:
            assert anatomy is not None
            count = int(anatomy.positions.shape[0])
        if anatomy is None and model is not None:
            anatomy = kind.anatomy(model)
        if anatomy is not None and anatomy.positions.shape[0] != count:
            raise ViewerError(f"the anatomy places {anatomy.positions.shape[0]:,} neurons but the "
                              f"model has {count:,}")
        self.model = model
        self._kind = kind
        self.anatomy = anatomy
        self.model_name = str(name if name is not None else getattr(model, "name", "") or "")
        self._neurons = count
        self._selected = None
        self._picked = np.zeros(0, np.int64)
        self._intervened = np.zeros(0, np.int64)
        self._filter = ("", "")
        self._camera = None
        self.highlights.clear()
        self._recording = Recording(max(1, count))
        self._index = -1
        self._live = True
        self.events.model.emit()
        self.events.recording.emit()
        self.events.index.emit(-1)
        self.events.selected.emit(None)
        self.events.picked.emit(self._picked)
        self.events.intervened.emit(self._intervened.copy())
        self.events.filter.emit("", "")

    # ------------------------------------------------------------ recording and token
    @property
    def recording(self) -> Recording:
        """The recording shown (empty before a run)."""
        return self._recording

    @property
    def index(self) -> int:
        """The shown token's frame index; ``-1`` while the recording is empty."""
        return self._index

    @index.setter
    def index(self, index: int) -> None:
        n = len(self._recording)
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)):
            raise ViewerError(f"token index must be a whole number, got {index!r}")
        index = int(index)
        axis = self._kind.time_axis
        if n == 0 and index != -1:
            raise ViewerError(f"{axis.name} {index} is out of range: the recording is empty")
        if n and not 0 <= index < n:
            raise ViewerError(f"{axis.name} {index} is out of range: the recording has {n:,} "
                              f"{axis.names} (0 to {n - 1:,})")
        self._set_live(index == n - 1)
        if index != self._index:
            self._index = index
            self.events.index.emit(index)

    @property
    def live(self) -> bool:
        """True while the shown token follows the newest frame."""
        return self._live

    def set_recording(self, recording: Recording, index: int | None = None) -> Recording:
        """Show ``recording``: at ``index``, or by default its last frame, following new ones."""
        if self._neurons and recording.neurons != self._neurons:
            raise ViewerError(f"the recording has {recording.neurons:,} neurons but the model "
                              f"shown has {self._neurons:,}; show the model it was made with")
        n = len(recording)
        if index is not None and n and not 0 <= int(index) < n:
            axis = self._kind.time_axis
            raise ViewerError(f"{axis.name} {index} is out of range: the recording has {n:,} "
                              f"{axis.names} (0 to {n - 1:,})")
        self._recording = recording
        self._index = n - 1 if index is None or not n else int(index)
        self.events.recording.emit()
        self._set_live(self._index == n - 1)
        self.events.index.emit(self._index)
        return recording

    def append(self, frame: Frame) -> int:
        """Add a frame to the shown recording; while live it becomes the shown one."""
        i = self._recording.append(frame)
        self.events.frames_appended.emit(len(self._recording))
        if self._live:
            self._index = i
            self.events.index.emit(i)
        return i

    def go_live(self) -> None:
        """Show the newest frame and follow the next ones."""
        n = len(self._recording)
        if n:
            self.index = n - 1
        self._set_live(True)

    def _set_live(self, live: bool) -> None:
        if live != self._live:
            self._live = live
            self.events.live.emit(live)

    def frame(self) -> Frame | None:
        """The shown frame, or ``None``."""
        if not 0 <= self._index < len(self._recording):
            return None
        return self._recording[self._index]

    def snapshot(self) -> Recording:
        """A frozen copy of the shown recording (for an export running beside a live run)."""
        return self._recording.snapshot()

    def frozen(self) -> "ViewerState":
        """A copy of what this state shows now, over a :meth:`snapshot` of its recording.

        The copy has the model, anatomy, shown token, colour layer (the one built
        now), range scope, display and mesh settings, meshes, highlight, selection,
        picks and camera; later changes to either state do not reach the other,
        and frames a run still appends do not reach the copy. For an export running
        beside a live run (:func:`flyviz.export.export_state`).
        """
        import dataclasses

        copy = ViewerState(dataclasses.replace(self.display), dataclasses.replace(self.run),
                           dataclasses.replace(self.mesh))
        copy.model, copy.anatomy, copy.model_name = self.model, self.anatomy, self.model_name
        copy._kind = self._kind
        copy._neurons = self._neurons
        copy._atlas = self._atlas
        copy.background = self.background
        copy._recording = self.snapshot()
        copy._index, copy._live = self._index, self._live
        if self._colour_by != STATE:
            layer = self._override
            copy.add_colour_layer(self._colour_by, self._entries[self._colour_by].title,
                                  lambda: layer)
            copy._colour_by, copy._override = self._colour_by, layer
        copy._range_scope = self._range_scope
        copy._mesh_files = list(self._mesh_files)
        copy._outline = self._outline
        highlight = self.highlight
        if highlight is not None:
            copy.highlights.set(self.highlights.shown or "shown", highlight.copy())
        copy._selected, copy._picked, copy._filter = self._selected, self._picked.copy(), \
            self._filter
        copy._view, copy._camera = self._view, self._camera
        copy._interventions = self._interventions
        copy._comparing, copy._compare_mode = self._comparing, self._compare_mode
        return copy

    # ------------------------------------------------------------ colours
    def add_colour_layer(self, key: str, title: str, build: LayerBuilder, tip: str = "",
                         available: bool = True, *, replace: bool = False) -> ColourLayerEntry:
        """Offer a *Colour by* entry ``key`` whose layer ``build()`` makes when it is chosen
        (``replace``: an entry of that key may be there; a shown one is built again)."""
        if key in self._entries and not replace:
            raise ViewerError(f"a colour layer named {key!r} already exists")
        if key == STATE and key in self._entries:
            raise ViewerError("the live state's colour layer cannot be replaced")
        entry = ColourLayerEntry(key, title, build, tip, bool(available))
        self._entries[key] = entry
        self.events.colour_layers.emit(key)
        self.refresh_layer(key)
        return entry

    def offer_layer(self, key: str, build: LayerBuilder, available: bool = True
                    ) -> ColourLayerEntry:
        """Offer the colour layer of kind ``key`` (one of :data:`flyviz.viewer.layers.LAYERS`,
        whose title and tooltip it shows), made by ``build()`` when it is chosen."""
        if key not in LAYERS:
            raise ViewerError(f"unknown kind of colour layer {key!r}; the kinds are "
                              f"{', '.join(LAYERS)} (add_colour_layer offers any other)")
        kind = LAYERS[key]
        return self.add_colour_layer(key, kind.title, build, kind.tip, available)

    def layer_of(self, key: str) -> ColourLayer:
        """Entry ``key``'s layer, built now whether or not it is the one shown (``STATE``:
        the recorded state as the display says)."""
        if key == STATE:
            return self.display.activation_layer()
        layer = self._entry(key).build()
        return self.display.activation_layer() if layer is None else layer

    @property
    def colour_layers(self) -> dict[str, ColourLayerEntry]:
        """Every registered *Colour by* entry, by key, in registration order."""
        return dict(self._entries)

    def set_available(self, keys: Iterable[str], available: bool) -> None:
        """Offer ``keys`` or not; a withdrawn entry that is shown goes back to the live state."""
        keys = tuple(keys)
        for key in keys:
            entry = self._entry(key)
            if entry.available != available:
                self._entries[key] = ColourLayerEntry(entry.key, entry.title, entry.build,
                                                      entry.tip, bool(available))
                self.events.colour_layers.emit(key)
        if not available and self._colour_by in keys:
            self.colour_by = STATE

    def _entry(self, key: str) -> ColourLayerEntry:
        try:
            return self._entries[key]
        except KeyError:
            raise ViewerError(f"unknown colour layer {key!r}; the colour layers are "
                              f"{', '.join(self._entries)}") from None

    @property
    def colour_by(self) -> str:
        """The *Colour by* entry shown (:data:`STATE`: the recorded state)."""
        return self._colour_by

    @colour_by.setter
    def colour_by(self, key: str) -> None:
        entry = self._entry(key)
        layer = entry.build() if key != STATE else None    # a FlyvizError leaves all as it was
        self._colour_by = key
        self._override = layer
        self.events.layer.emit(layer)
        self.events.colour_by.emit(key)

    def refresh_layer(self, key: str) -> None:
        """Build entry ``key``'s layer again if it is shown (its values changed)."""
        if self._colour_by == key:
            self.colour_by = key

    @property
    def layer_override(self) -> ColourLayer | None:
        """The layer drawn instead of the recorded state (``None``: the state)."""
        return self._override

    @property
    def layer(self) -> ColourLayer:
        """The colour layer drawn: the chosen entry's, or the state's as the display says."""
        return self._override or self.display.activation_layer()

    def values(self, index: int | None = None, layer: ColourLayer | None = None
               ) -> np.ndarray | None:
        """The drawn layer's (or ``layer``'s) values at token ``index`` (default: the shown
        one). A layer of fixed values (an atlas statistic) has them without a recording."""
        layer = self.layer if layer is None else layer
        index = self._index if index is None else int(index)
        if not 0 <= index < len(self._recording):
            if layer.is_state or len(self._recording):
                return None
            return layer.values(self._recording, 0)
        return layer.values(self._recording, index)

    @property
    def range_scope(self) -> str:
        """How the colour range is taken (one of :data:`RANGE_SCOPES`): ``"token"``, from the
        shown token's values (the window); ``"recording"``, once over the recording."""
        return self._range_scope

    @range_scope.setter
    def range_scope(self, scope: str) -> None:
        if scope not in RANGE_SCOPES:
            raise ViewerError(f"range scope {scope!r} must be one of {', '.join(RANGE_SCOPES)}")
        self._range_scope = str(scope)

    def value_range(self, index: int | None = None, layer: ColourLayer | None = None
                    ) -> tuple[float, float]:
        """The colour range of the drawn layer (or ``layer``) as the layer's policy resolves
        it over the drawn neurons: at token ``index`` (default: the shown one), or, with
        :attr:`range_scope` ``"recording"``, once over the whole recording (what a movie of
        it uses: :meth:`~flyviz.render.style.ColourLayer.recording_range`)."""
        layer = self.layer if layer is None else layer
        if self._range_scope == "recording" and len(self._recording):
            # The cached entry holds the recording and the layer: their ids stay theirs.
            key = (id(self._recording), len(self._recording), id(layer.source), layer)
            found = self._range_cache.get(key)
            if found is None:
                found = (layer.recording_range(self._recording), self._recording, layer)
                self._range_cache = {key: found, **dict(list(self._range_cache.items())[-15:])}
            return found[0]
        values = self.values(index, layer)
        if values is not None and self.anatomy is not None and np.asarray(values).shape == \
                self.anatomy.valid.shape and self.anatomy.valid.any():
            values = np.asarray(values)[self.anatomy.valid]
        return layer.value_range(None if values is None else np.asarray(values))

    def style(self) -> CloudStyle:
        """The :class:`~flyviz.render.style.CloudStyle` every picture of this state applies."""
        d = self.display
        return CloudStyle(layer=self.layer, point_size=d.point_size, glow=d.glow, gain=d.gain,
                          background=self.background)

    # ------------------------------------------------------------ neurons
    def _neuron(self, index: Any, what: str) -> int:
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)):
            raise ViewerError(f"{what} must be a neuron index, got {index!r}")
        if not 0 <= int(index) < self._neurons:
            raise ViewerError(f"neuron {index} is out of range: the model has {self._neurons:,} "
                              "neurons" if self._neurons else f"no model is shown to {what} in")
        return int(index)

    @property
    def selected(self) -> int | None:
        """The selected neuron (ringed, described in the inspector), or ``None``."""
        return self._selected

    @selected.setter
    def selected(self, index: int | None) -> None:
        index = None if index is None else self._neuron(index, "select")
        if index != self._selected:
            self._selected = index
            self.events.selected.emit(index)

    def select(self, index: int | None) -> bool:
        """Select neuron ``index`` as a click does (``None`` clears): an index the model
        does not have is ignored (False); selecting the selected neuron again tells the
        views again (the inspector shows it again)."""
        if index is not None and (isinstance(index, bool)
                                  or not isinstance(index, (int, np.integer))
                                  or not 0 <= int(index) < self._neurons):
            return False
        index = None if index is None else int(index)
        if index == self._selected:
            self.events.selected.emit(index)
        else:
            self.selected = index
        return True

    @property
    def picked(self) -> np.ndarray:
        """The picked neurons, sorted (a copy)."""
        return self._picked.copy()

    @picked.setter
    def picked(self, neurons: Iterable[int] | np.ndarray) -> None:
        picks = np.unique(np.asarray(list(neurons) if not isinstance(neurons, np.ndarray)
                                     else neurons, dtype=np.int64).ravel())
        if picks.size and (picks[0] < 0 or picks[-1] >= self._neurons):
            bad = int(picks[0] if picks[0] < 0 else picks[-1])
            raise ViewerError(f"neuron {bad} is out of range: the model has {self._neurons:,} "
                              "neurons")
        if not np.array_equal(picks, self._picked):
            self._picked = picks
            self.events.picked.emit(picks.copy())

    def pick(self, neurons: Iterable[int], add: bool = False) -> None:
        """Pick ``neurons`` as a click or a lasso does: added to the pick when ``add``
        (Shift held), else instead of it."""
        neurons = np.asarray(list(neurons), dtype=np.int64).ravel()
        self.picked = np.union1d(self._picked, neurons) if add else neurons

    @property
    def intervened(self) -> np.ndarray:
        """The neurons the next runs' interventions touch, sorted (a copy; ringed in the
        brain view)."""
        return self._intervened.copy()

    @intervened.setter
    def intervened(self, neurons: Iterable[int] | np.ndarray) -> None:
        touched = np.unique(np.asarray(list(neurons) if not isinstance(neurons, np.ndarray)
                                       else neurons, dtype=np.int64).ravel())
        if touched.size and (touched[0] < 0 or touched[-1] >= self._neurons):
            bad = int(touched[0] if touched[0] < 0 else touched[-1])
            raise ViewerError(f"neuron {bad} is out of range: the model has {self._neurons:,} "
                              "neurons")
        if not np.array_equal(touched, self._intervened):
            self._intervened = touched
            self.events.intervened.emit(touched.copy())

    # ------------------------------------------------------------ overlays
    @property
    def atlas(self) -> Any:
        """The open atlas (:class:`~flyviz.analysis.atlas.Atlas`) whose statistics are
        colour layers and whose cards the inspector shows, or ``None``."""
        return self._atlas

    @atlas.setter
    def atlas(self, atlas: Any) -> None:
        if atlas is not self._atlas:
            self._atlas = atlas
            self.events.atlas.emit(atlas)

    @property
    def token_flows(self) -> tuple[float, ...] | None:
        """How the running text's tokens are shaded: ``token_flows[p]`` the flow of the token
        read at position ``p`` (red adds to the traced logit, blue takes from it), or ``None``
        (no shading)."""
        return self._token_flows

    @token_flows.setter
    def token_flows(self, flows: Iterable[float] | None) -> None:
        shaded = None if flows is None else tuple(float(f) for f in flows)
        if shaded is not None and not all(np.isfinite(shaded)):
            raise ViewerError("token flows must be finite numbers")
        if shaded != self._token_flows:
            self._token_flows = shaded
            self.events.token_flows.emit(shaded)

    def set_lines(self, source: str, points: Any = None, colours: Any = None) -> None:
        """Draw synapses of ``source`` as line segments over the brain: ``points`` ``(2k, 3)``
        (pre then post soma of each), ``colours`` ``(2k, 4)`` RGBA; ``None`` or no points
        clears the source's lines. The newest source set is the one shown."""
        lines = None
        if points is not None and len(points):
            pts = np.asarray(points, np.float32).reshape(-1, 3)
            if colours is None or np.shape(colours) != (pts.shape[0], 4):
                raise ViewerError(f"the lines of {source!r} need an RGBA colour per point")
            lines = (pts, np.asarray(colours, np.float32))
        self._lines.pop(source, None)
        if lines is not None:
            self._lines[source] = lines
        self.events.lines.emit(source)

    def lines(self, source: str) -> tuple[np.ndarray, np.ndarray] | None:
        """``(points, colours)`` of ``source``'s lines, or ``None`` (see :meth:`set_lines`)."""
        return self._lines.get(source)

    @property
    def shown_lines(self) -> str | None:
        """The source whose lines are drawn (the newest set), or ``None``."""
        return next(reversed(self._lines), None)

    def sync_camera(self) -> CameraPose | None:
        """Ask the view that owns the camera to write where it looks from now, and return
        :attr:`camera` (before an export reads it)."""
        self.events.camera_wanted.emit()
        return self._camera

    @property
    def filter_superclass(self) -> str:
        """The superclass the highlight filter keeps lit (``""``: any)."""
        return self._filter[0]

    @property
    def filter_cell_type(self) -> str:
        """The cell-type prefix the highlight filter keeps lit (``""``: any)."""
        return self._filter[1]

    def set_filter(self, superclass: str | None = None, cell_type: str | None = None) -> None:
        """Light the neurons of ``superclass`` whose cell type starts with ``cell_type``
        (``None``: leave that part as it is; ``""``: any). The window turns the filter
        into the highlight source ``"filter"``."""
        sc = self._filter[0] if superclass is None else str(superclass)
        ct = self._filter[1] if cell_type is None else str(cell_type).strip()
        known = None if self.anatomy is None or self.anatomy.superclass is None \
            else set(self.anatomy.superclass)
        if sc and known is not None and sc not in known:
            raise ViewerError(f"unknown superclass {sc!r}; this model's are "
                              f"{', '.join(sorted(known)) or 'none'}")
        if (sc, ct) != self._filter:
            self._filter = (sc, ct)
            self.events.filter.emit(sc, ct)

    @property
    def highlight(self) -> np.ndarray | None:
        """The emphasis mask shown (``None``: every neuron lit); set through :attr:`highlights`."""
        source = self.highlights.shown
        return None if source is None else self.highlights.mask(source)

    # ------------------------------------------------------------ camera
    @property
    def view(self) -> str:
        """The camera preset (``"front"``, ``"top"``, ``"side"``)."""
        return self._view

    @view.setter
    def view(self, name: str) -> None:
        if name not in VIEW_PRESETS:
            raise ViewerError(f"unknown view {name!r}; choose one of {', '.join(VIEW_PRESETS)}")
        self._view = str(name)
        self._camera = None
        self.events.view.emit(self._view)
        self.events.camera.emit(None)

    @property
    def camera(self) -> CameraPose | None:
        """Where the camera looks from (``None``: the preset's framing of the brain)."""
        return self._camera

    @camera.setter
    def camera(self, pose: CameraPose | None) -> None:
        if pose is not None and not isinstance(pose, CameraPose):
            raise ViewerError(f"camera must be a CameraPose or None, got {type(pose).__name__}")
        if pose != self._camera:
            self._camera = pose
            self.events.camera.emit(pose)

    # ------------------------------------------------------------ interventions
    @property
    def interventions(self) -> tuple[Any, ...]:
        """The interventions the next runs apply (:mod:`flyviz.model.interventions` objects)."""
        return self._interventions

    @interventions.setter
    def interventions(self, items: Iterable[Any]) -> None:
        items = _checked_interventions(items)
        if items != self._interventions:
            self._interventions = items
            self.events.interventions.emit(items)

    @property
    def next_interventions(self) -> tuple[Any, ...]:
        """Interventions for the next run only (after :attr:`interventions` are ignored for
        it); the window's runs forget them once one starts with them."""
        return self._next_interventions

    @property
    def next_description(self) -> str:
        """What :attr:`next_interventions` do, in words (``""``: none)."""
        return self._next_description

    def set_next_interventions(self, items: Iterable[Any] = (), description: str = "") -> None:
        """Apply ``items`` to the next run only (``()`` clears them); ``description`` says
        what they do for the user (e.g. "group T4 silenced")."""
        items = _checked_interventions(items or ())
        description = str(description) if items else ""
        if (items, description) != (self._next_interventions, self._next_description):
            self._next_interventions, self._next_description = items, description
            self.events.next_interventions.emit(items, description)

    @property
    def comparing(self) -> bool:
        """True when runs go beside the untouched model."""
        return self._comparing

    @property
    def compare_mode(self) -> str:
        """How the untouched model runs beside: one of :data:`COMPARE_MODES`."""
        return self._compare_mode

    def set_comparing(self, comparing: bool, mode: str | None = None) -> None:
        """Compare runs with the untouched model (``mode``: one of :data:`COMPARE_MODES`)."""
        mode = self._compare_mode if mode is None else mode
        if mode not in COMPARE_MODES:
            raise ViewerError(f"comparison mode {mode!r} must be one of {', '.join(COMPARE_MODES)}")
        if (bool(comparing), mode) != (self._comparing, self._compare_mode):
            self._comparing, self._compare_mode = bool(comparing), mode
            self.events.comparing.emit(self._comparing, mode)


def _checked_interventions(items: Iterable[Any]) -> tuple[Any, ...]:
    """``items`` as a tuple of intervention objects, or a :class:`ViewerError`."""
    from flyviz.model.interventions import Clamp, Cut, Scale, Silence, Stimulate
    from flyviz.model.patching import Patch

    items = tuple(items)
    for item in items:
        if not isinstance(item, (Silence, Clamp, Stimulate, Cut, Scale, Patch)):
            raise ViewerError(f"an intervention must be a flyviz.model.interventions object, "
                              f"got {type(item).__name__}")
    return items
