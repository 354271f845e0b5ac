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
* the display, run and mesh settings (:mod:`flyviz.viewer.settings`), and each kind's
  run settings and its docks' own choices (:attr:`ViewerState.kind_settings`: the Fly
  LLM's prompt, the lesion map's log scale, *Why?*'s lag...,
  :class:`~flyviz.kinds.language.LanguageDockSettings`, also :attr:`ViewerState.docks`);
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

from collections.abc import Iterable
from typing import Any, TypeVar

import numpy as np
from psygnal import Signal, SignalGroup

from flyviz.kinds import ModelKind, default_kind, kind_of
from flyviz.model.checkpoint import Anatomy
from flyviz.record.frame import Frame
from flyviz.record.recording import Recording
from flyviz.render.camera import VIEW_PRESETS, CameraPose
from flyviz.render.style import BACKGROUND, CloudStyle, ColourLayer
from flyviz.viewer.feature_parts import AtlasPart, ScreenPart, WhyPart
from flyviz.viewer.highlight import Highlights
from flyviz.viewer.kind_settings import KindSettingsPart
from flyviz.viewer.layers import (ATLAS_STATISTICS, DELTA, FLOW, LAYERS, SCREEN, STATE,
                                  ScreenEffect, atlas_key, atlas_layer, delta_layer,
                                  screen_layer)
from flyviz.viewer.marks import HighlightPart, MarksPart
from flyviz.viewer.parts import LIFECYCLE_EVENTS, MODEL, NEW_RUN, RECORDING, RESET, StatePart
from flyviz.viewer.run_config import COMPARE_MODES, RunConfigPart
from flyviz.viewer.settings import (DisplaySettings, MeshSettings, RunSettings,
                                    ViewerError)
from flyviz.viewer.view_parts import (RANGE_SCOPES, CameraPart, ColourLayerEntry, ColoursPart,
                                      LayerBuilder, MeshesPart, ShownPart)

__all__ = ["COMPARE_MODES", "LIFECYCLE_EVENTS", "MODEL", "NEW_RUN", "RANGE_SCOPES",
           "RECORDING", "RESET", "STATE", "ColourLayerEntry", "LayerBuilder", "ViewerEvents",
           "ViewerState"]

PartT = TypeVar("PartT", bound=StatePart)


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
    #: The spiking screen's effect on its target changed (``None``: none).
    screen = Signal(object)
    #: A new run started, Reset emptied the recording, a model was loaded or a recording
    #: opened (one of :data:`~flyviz.viewer.parts.LIFECYCLE_EVENTS`), after every part
    #: did what its lifetime says.
    lifecycle = Signal(str)
    #: A part was added to the state: its name.
    parts = Signal(str)


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
        self.model: Any = None
        self._kind: ModelKind = default_kind()
        self.anatomy: Anatomy | None = None
        self.model_name = ""
        self._neurons = 0
        self.background = BACKGROUND
        self._parts: dict[str, StatePart] = {}
        for part in (ShownPart(), CameraPart(), ColoursPart(), HighlightPart(), MarksPart(),
                     MeshesPart(), RunConfigPart(), KindSettingsPart({self._kind: self.run}),
                     ScreenPart(), AtlasPart(), WhyPart()):
            self.add_part(part)
        self.mesh.events.connect(lambda *_: self.events.meshes.emit())
        self.offer_layer(STATE, lambda: None)
        self._offer_part_layers()

    def _offer_part_layers(self) -> None:
        """The *Colour by* entries of what the parts hold, offered while they hold it: Δx
        while a comparison is shown, *Why?*'s flow while a trace is, the open atlas's
        statistics (the kind's own come with its model: :meth:`set_model`). The one place
        that decides them: features and hosts set the parts, never the entries."""
        self.offer_layer(DELTA, delta_layer, available=False)
        why: WhyPart = self._parts["why"]      # type: ignore[assignment]
        self.offer_layer(FLOW, why.flow_layer, available=False)
        for statistic in ATLAS_STATISTICS:
            self.offer_layer(atlas_key(statistic), self._atlas_builder(statistic),
                             available=False)

    def _offer_own(self, keys: Iterable[str], available: bool) -> None:
        """Offer (or withdraw) the state's own entries ``keys`` that it has: a frozen copy
        keeps only the entry it shows."""
        self.set_available([key for key in keys if key in self._colours.entries], available)

    def _atlas_builder(self, statistic: str) -> LayerBuilder:
        def build() -> ColourLayer:
            if self.atlas is None:
                raise ViewerError("open an atlas first (File → Open atlas…)")
            return atlas_layer(self.atlas, statistic)
        return build

    # ------------------------------------------------------------ parts
    @property
    def parts(self) -> dict[str, StatePart]:
        """The state's parts by name, in the order they were added (see
        :mod:`flyviz.viewer.parts`): ``shown``, ``camera``, ``colours``, ``highlight``,
        ``marks``, ``meshes``, ``run_config``, ``kind_settings``, ``screen``, ``atlas``, ``why``, then
        those features and kinds add."""
        return dict(self._parts)

    def add_part(self, part: PartT) -> PartT:
        """Add ``part`` (a :class:`~flyviz.viewer.parts.StatePart` of a name not taken):
        from now on the state tells it of every new run, Reset, model and opened
        recording, and :meth:`frozen` copies it. Returns ``part``."""
        if not isinstance(part, StatePart):
            raise ViewerError(f"a part of the viewer state must be a flyviz.viewer.parts."
                              f"StatePart, got {type(part).__name__}")
        if not part.name or part.name in self._parts:
            raise ViewerError(f"the viewer state has a part named {part.name!r} already"
                              if part.name else "a part of the viewer state needs a name")
        part.attach(self)
        self._parts[part.name] = part
        self.events.parts.emit(part.name)
        return part

    def part(self, name: str) -> StatePart:
        """The part named ``name`` (a :class:`ViewerError` naming the parts if none)."""
        try:
            return self._parts[name]
        except KeyError:
            raise ViewerError(f"the viewer state has no part named {name!r}; its parts are "
                              f"{', '.join(self._parts)}") from None

    def lifecycle(self, event: str) -> None:
        """Tell every part that ``event`` happened (one of
        :data:`~flyviz.viewer.parts.LIFECYCLE_EVENTS`): each does what its lifetime says,
        in the order the parts were added; then :attr:`ViewerEvents.lifecycle` fires.

        :meth:`set_model` and :meth:`set_recording` call it; call it directly only for
        an event that shows no new recording."""
        if event not in LIFECYCLE_EVENTS:
            raise ViewerError(f"unknown event {event!r}; the events are "
                              f"{', '.join(LIFECYCLE_EVENTS)}")
        for part in list(self._parts.values()):
            part.hook(event)()
        self.events.lifecycle.emit(event)

    @property
    def _shown(self) -> ShownPart:
        return self._parts["shown"]         # type: ignore[return-value]

    @property
    def _colours(self) -> ColoursPart:
        return self._parts["colours"]       # type: ignore[return-value]

    @property
    def _marks(self) -> MarksPart:
        return self._parts["marks"]         # type: ignore[return-value]

    @property
    def _highlight(self) -> HighlightPart:
        return self._parts["highlight"]     # type: ignore[return-value]

    @property
    def _camera_part(self) -> CameraPart:
        return self._parts["camera"]        # type: ignore[return-value]

    @property
    def _meshes(self) -> MeshesPart:
        return self._parts["meshes"]        # type: ignore[return-value]

    @property
    def run_config(self) -> RunConfigPart:
        """The run configuration part: the interventions of the next runs, the comparison
        and next-run-only interventions (:mod:`flyviz.viewer.run_config`)."""
        return self._parts["run_config"]    # type: ignore[return-value]

    @property
    def kind_settings(self) -> KindSettingsPart:
        """Each kind's run settings and its docks' own choices
        (:mod:`flyviz.viewer.kind_settings`): ``kind_settings.of(kind)``, the Fly LLM's
        being :attr:`run`, and ``kind_settings.docks_of(kind)``."""
        return self._parts["kind_settings"]     # type: ignore[return-value]

    @property
    def docks(self) -> Any:
        """The Fly LLM's docks' own choices (the prompt, the lesion map's log scale, *Why?*'s
        lag, the patching measure, the population view: its kind's dock settings,
        :class:`~flyviz.kinds.language.LanguageDockSettings`, a part of
        :attr:`kind_settings`), whichever model is shown: a script sets
        ``state.docks.prompt`` for the next language-model run."""
        return self.kind_settings.docks_of(default_kind())

    @property
    def highlights(self) -> Highlights:
        """The named emphasis masks (the newest shown), the highlight part's."""
        highlights = self._highlight.highlights
        assert highlights is not None
        return highlights

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
        self._meshes.files.append(mesh)
        self.mesh.mesh_shown = True
        self.events.meshes.emit()
        return mesh

    def clear_meshes(self) -> None:
        """Forget the mesh files added (the soma outline stays available)."""
        self._meshes.files = []
        self.events.meshes.emit()

    @property
    def mesh_files(self) -> tuple[Any, ...]:
        """The meshes read from files, in the order they were added."""
        return tuple(self._meshes.files)

    def outline(self) -> Any:
        """The shown model's soma outline, computed once per model, or ``None``."""
        anatomy = self.anatomy
        if anatomy is None or anatomy.n_valid < 10:
            return None
        meshes = self._meshes
        if meshes.outline is None or meshes.outline[0] != id(anatomy):
            from flyviz.analysis.outline import soma_outline

            meshes.outline = (id(anatomy), soma_outline(anatomy.positions_um()[anatomy.valid]))
        return meshes.outline[1]

    def shown_meshes(self) -> list[Any]:
        """What is drawn behind the cloud now: the outline and the mesh files, if shown."""
        shown = []
        if self.mesh.outline_shown:
            outline = self.outline()
            if outline is not None:
                shown.append(outline)
        if self.mesh.mesh_shown:
            shown.extend(self._meshes.files)
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
        """Show ``model`` (``None``: none): the recording is an empty one of the model's
        size, and every part does what its lifetime says of a model (the picks,
        selection, highlights, camera pose and features' marks go).

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
        previous, self._kind = self._kind, kind
        self._offer_kind_layers(previous, kind)
        self.anatomy = anatomy
        self.model_name = str(name if name is not None else getattr(model, "name", "") or "")
        self._neurons = count
        shown = self._shown
        shown.recording, shown.index, shown.live = Recording(max(1, count)), -1, True
        self._offer_own((DELTA,), False)
        self.events.model.emit()
        self.events.recording.emit()
        self.events.index.emit(-1)
        self.lifecycle(MODEL)

    def _offer_kind_layers(self, previous: ModelKind, kind: ModelKind) -> None:
        """Offer the colour layers of the kind shown (:meth:`ModelKind.colour_layers`) and
        withdraw those of the kind shown before."""
        entry = self._colours.entries.get(STATE)
        if entry is not None and entry.title != kind.state_title:
            # The recorded state is what the kind says it is (its title, its layer:
            # state_layer), for the menu and a shared page alike.
            default = LAYERS[STATE]
            tip = default.tip if kind.state_title == default.title else \
                f"The recorded state at the shown {kind.time_axis.name} (the Settings' colours)"
            self._colours.entries[STATE] = ColourLayerEntry(STATE, kind.state_title, entry.build,
                                                            tip, entry.available)
            self.events.colour_layers.emit(STATE)
        own = {layer.key: layer for layer in kind.colour_layers()}
        gone = [layer.key for layer in previous.colour_layers()
                if layer.key not in own and layer.key in self.colour_layers]
        if gone:
            self.set_available(gone, False)
        for key, layer in own.items():
            if layer.build is not None:
                self.add_colour_layer(key, layer.title, layer.build, layer.tip, replace=True)
        self.refresh_layer(STATE)           # a shown state is drawn as the new kind's

    # ------------------------------------------------------------ recording and token
    @property
    def recording(self) -> Recording:
        """The recording shown (empty before a run)."""
        return self._shown.recording

    @property
    def index(self) -> int:
        """The shown token's frame index; ``-1`` while the recording is empty."""
        return self._shown.index

    @index.setter
    def index(self, index: int) -> None:
        n = len(self._shown.recording)
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
        if index != self._shown.index:
            self._shown.index = index
            self.events.index.emit(index)

    @property
    def live(self) -> bool:
        """True while the shown token follows the newest frame."""
        return self._shown.live

    def set_recording(self, recording: Recording, index: int | None = None, *,
                      cause: str | None = RECORDING) -> Recording:
        """Show ``recording``: at ``index``, or by default its last frame, following new ones.

        ``cause`` is why (one of :data:`~flyviz.viewer.parts.LIFECYCLE_EVENTS`): a
        :data:`~flyviz.viewer.parts.NEW_RUN`'s empty recording, :data:`~flyviz.viewer.parts.RESET`'s,
        or, by default, an opened one (:data:`~flyviz.viewer.parts.RECORDING`); every part
        then does what its lifetime says (:meth:`lifecycle`). ``None``: no event (a model's
        empty recording shown again).
        """
        if self._neurons and recording.neurons != self._neurons:
            raise ViewerError(f"the recording has {recording.neurons:,} neurons but the model "
                              f"shown has {self._neurons:,}; show the model it was made with")
        if cause is not None and cause not in LIFECYCLE_EVENTS:
            raise ViewerError(f"unknown cause {cause!r}; the causes are "
                              f"{', '.join(LIFECYCLE_EVENTS)}")
        n = len(recording)
        if index is not None and n and not 0 <= int(index) < n:
            axis = self._kind.time_axis
            raise ViewerError(f"{axis.name} {index} is out of range: the recording has {n:,} "
                              f"{axis.names} (0 to {n - 1:,})")
        shown = self._shown
        shown.recording = recording
        shown.index = n - 1 if index is None or not n else int(index)
        self._offer_own((DELTA,), recording.baseline is not None)
        self.events.recording.emit()
        self._set_live(shown.index == n - 1)
        self.events.index.emit(shown.index)
        if cause is not None:
            self.lifecycle(cause)
        return recording

    def append(self, frame: Frame) -> int:
        """Add a frame to the shown recording; while live it becomes the shown one."""
        shown = self._shown
        i = shown.recording.append(frame)
        self.events.frames_appended.emit(len(shown.recording))
        if shown.live:
            shown.index = i
            self.events.index.emit(i)
        return i

    def go_live(self) -> None:
        """Show the newest frame and follow the next ones."""
        n = len(self._shown.recording)
        if n:
            self.index = n - 1
        self._set_live(True)

    def _set_live(self, live: bool) -> None:
        if live != self._shown.live:
            self._shown.live = live
            self.events.live.emit(live)

    def frame(self) -> Frame | None:
        """The shown frame, or ``None``."""
        shown = self._shown
        if not 0 <= shown.index < len(shown.recording):
            return None
        return shown.recording[shown.index]

    def snapshot(self) -> Recording:
        """A frozen copy of the shown recording (for an export running beside a live run)."""
        return self._shown.recording.snapshot()

    def frozen(self) -> "ViewerState":
        """A copy of what this state shows now: the model, the settings, and a copy of
        every part (:meth:`StatePart.frozen <flyviz.viewer.parts.StatePart.frozen>`) over a
        :meth:`snapshot` of the recording.

        Later changes to either state do not reach the other, and frames a run still
        appends do not reach the copy; the chosen colour layer is the one built now.
        For an export running beside a live run (:func:`flyviz.export.export_state`).
        """
        import dataclasses

        copy = ViewerState(dataclasses.replace(self.display), dataclasses.replace(self.run),
                           dataclasses.replace(self.mesh))
        copy.model, copy.anatomy, copy.model_name = self.model, self.anatomy, self.model_name
        copy._kind, copy._neurons, copy.background = self._kind, self._neurons, self.background
        copy._parts = {}
        for name, part in self._parts.items():
            twin = part.frozen()
            twin.attach(copy)
            copy._parts[name] = twin
        return copy

    # ------------------------------------------------------------ colours
    def add_colour_layer(self, key: str, title: str, build: LayerBuilder, tip: str = "",
                         available: bool = True, *, replace: bool = False) -> ColourLayerEntry:
        """Offer a *Colour by* entry ``key`` whose layer ``build()`` makes when it is chosen
        (``replace``: an entry of that key may be there; a shown one is built again)."""
        if key in self._colours.entries and not replace:
            raise ViewerError(f"a colour layer named {key!r} already exists")
        if key == STATE and key in self._colours.entries:
            raise ViewerError("the live state's colour layer cannot be replaced")
        entry = ColourLayerEntry(key, title, build, tip, bool(available))
        self._colours.entries[key] = entry
        self.events.colour_layers.emit(key)
        self.refresh_layer(key)
        return entry

    @property
    def screen(self) -> ScreenEffect | None:
        """A spiking screen's effect on its target neuron
        (:class:`~flyviz.viewer.layers.ScreenEffect`), which the *Screen* colour layer
        draws (:func:`~flyviz.viewer.layers.screen_layer`), or ``None``.

        Setting it offers that layer (``None`` withdraws it) and redraws it if shown;
        ``state.screen = effect; state.colour_by = "screen"`` shows it.
        """
        return self._parts["screen"].effect         # type: ignore[attr-defined]

    @screen.setter
    def screen(self, effect: ScreenEffect | None) -> None:
        if effect is not None:
            if not isinstance(effect, ScreenEffect):
                raise ViewerError(f"a screen's effect must be a flyviz.viewer.layers."
                                  f"ScreenEffect, got {type(effect).__name__}")
            if effect.values.shape[0] != self._neurons:
                raise ViewerError(f"the screen's effect has {effect.values.shape[0]:,} values "
                                  f"but the model shown has {self._neurons:,} neurons")
        part: ScreenPart = self._parts["screen"]    # type: ignore[assignment]
        part.effect = effect
        if SCREEN not in self._colours.entries:
            self.offer_layer(SCREEN, lambda: None if part.effect is None
                             else screen_layer(part.effect), effect is not None)
        else:
            self.set_available((SCREEN,), effect is not None)
        self.refresh_layer(SCREEN)
        self.events.screen.emit(effect)

    def offer_layer(self, key: str, build: LayerBuilder, available: bool = True
                    ) -> ColourLayerEntry:
        """Offer the colour layer of kind ``key`` (one of :data:`flyviz.viewer.layers.LAYERS`,
        whose title and tooltip it shows), made by ``build()`` when it is chosen.

        A kind the state offers already (Δx, *Why?*'s flow, the atlas's statistics, which
        its parts offer while they hold them) takes ``build`` and ``available`` instead."""
        if key not in LAYERS:
            raise ViewerError(f"unknown kind of colour layer {key!r}; the kinds are "
                              f"{', '.join(LAYERS)} (add_colour_layer offers any other)")
        kind = LAYERS[key]
        return self.add_colour_layer(key, kind.title, build, kind.tip, available,
                                     replace=key != STATE and key in self._colours.entries)

    def state_layer(self, mode: str | None = None) -> ColourLayer:
        """The recorded state's colour layer: what the shown model's kind says its state is
        (:meth:`ModelKind.state_layer <flyviz.kinds.ModelKind.state_layer>`: a language
        model's activation x, a spiking brain's firing rate in Hz) in colour mode ``mode``
        (default: the display's) and the display's scale."""
        return self._kind.state_layer(mode or self.display.mode, self.display.scale)

    def layer_of(self, key: str) -> ColourLayer:
        """Entry ``key``'s layer, built now whether or not it is the one shown (``STATE``:
        the recorded state as the display and the kind say, :meth:`state_layer`)."""
        if key == STATE:
            return self.state_layer()
        layer = self._entry(key).build()
        return self.state_layer() if layer is None else layer

    @property
    def colour_layers(self) -> dict[str, ColourLayerEntry]:
        """Every registered *Colour by* entry, by key, in registration order."""
        return dict(self._colours.entries)

    def set_available(self, keys: Iterable[str], available: bool) -> None:
        """Offer ``keys`` or not; a withdrawn entry that is shown goes back to the live state."""
        keys = tuple(keys)
        for key in keys:
            entry = self._entry(key)
            if entry.available != available:
                self._colours.entries[key] = ColourLayerEntry(entry.key, entry.title, entry.build,
                                                      entry.tip, bool(available))
                self.events.colour_layers.emit(key)
        if not available and self._colours.colour_by in keys:
            self.colour_by = STATE

    def _entry(self, key: str) -> ColourLayerEntry:
        try:
            return self._colours.entries[key]
        except KeyError:
            raise ViewerError(f"unknown colour layer {key!r}; the colour layers are "
                              f"{', '.join(self._colours.entries)}") from None

    @property
    def colour_by(self) -> str:
        """The *Colour by* entry shown (:data:`STATE`: the recorded state)."""
        return self._colours.colour_by

    @colour_by.setter
    def colour_by(self, key: str) -> None:
        entry = self._entry(key)
        layer = entry.build() if key != STATE else None    # a FlyvizError leaves all as it was
        self._colours.colour_by = key
        self._colours.override = layer
        self.events.layer.emit(layer)
        self.events.colour_by.emit(key)

    def refresh_layer(self, key: str) -> None:
        """Build entry ``key``'s layer again if it is shown (its values changed)."""
        if self._colours.colour_by == key:
            self.colour_by = key

    @property
    def layer_override(self) -> ColourLayer | None:
        """The layer drawn instead of the recorded state (``None``: the state)."""
        return self._colours.override

    @property
    def layer(self) -> ColourLayer:
        """The colour layer drawn: the chosen entry's, or the state's as the display says."""
        return self._colours.override or self.state_layer()

    def values(self, index: int | None = None, layer: ColourLayer | None = None
               ) -> np.ndarray | None:
        """The drawn layer's (or ``layer``'s) values at token ``index`` (default: the shown
        one). A layer of fixed values (an atlas statistic) has them without a recording."""
        layer = self.layer if layer is None else layer
        index = self._shown.index if index is None else int(index)
        if not 0 <= index < len(self._shown.recording):
            if layer.is_state or len(self._shown.recording):
                return None
            return layer.values(self._shown.recording, 0)
        return layer.values(self._shown.recording, index)

    @property
    def range_scope(self) -> str:
        """How the colour range is taken (one of :data:`RANGE_SCOPES`): ``"token"``, from the
        shown token's values (the window); ``"recording"``, once over the recording."""
        return self._colours.range_scope

    @range_scope.setter
    def range_scope(self, scope: str) -> None:
        if scope not in RANGE_SCOPES:
            raise ViewerError(f"range scope {scope!r} must be one of {', '.join(RANGE_SCOPES)}")
        self._colours.range_scope = str(scope)

    def value_range(self, index: int | None = None, layer: ColourLayer | None = None
                    ) -> tuple[float, float]:
        """The colour range of the drawn layer (or ``layer``) as the layer's policy resolves
        it over the drawn neurons: at token ``index`` (default: the shown one), or, with
        :attr:`range_scope` ``"recording"``, once over the whole recording (what a movie of
        it uses: :meth:`~flyviz.render.style.ColourLayer.recording_range`)."""
        layer = self.layer if layer is None else layer
        if self._colours.range_scope == "recording" and len(self._shown.recording):
            # The cached entry holds the recording and the layer: their ids stay theirs.
            key = (id(self._shown.recording), len(self._shown.recording), id(layer.source), layer)
            found = self._colours.range_cache.get(key)
            if found is None:
                found = (layer.recording_range(self._shown.recording), self._shown.recording, layer)
                self._colours.range_cache = {key: found, **dict(list(self._colours.range_cache.items())[-15:])}
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
        return self._marks.selected

    @selected.setter
    def selected(self, index: int | None) -> None:
        index = None if index is None else self._neuron(index, "select")
        if index != self._marks.selected:
            self._marks.selected = index
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
        if index == self._marks.selected:
            self.events.selected.emit(index)
        else:
            self.selected = index
        return True

    @property
    def picked(self) -> np.ndarray:
        """The picked neurons, sorted (a copy)."""
        return self._marks.picked.copy()

    @picked.setter
    def picked(self, neurons: Iterable[int] | np.ndarray) -> None:
        self._marks.set_picked(neurons)

    def pick(self, neurons: Iterable[int], add: bool = False) -> None:
        """Pick ``neurons`` as a click or a lasso does: added to the pick when ``add``
        (Shift held), else instead of it."""
        neurons = np.asarray(list(neurons), dtype=np.int64).ravel()
        self.picked = np.union1d(self._marks.picked, neurons) if add else neurons

    @property
    def intervened(self) -> np.ndarray:
        """The neurons the next runs' interventions touch, sorted (a copy; ringed in the
        brain view)."""
        return self._marks.intervened.copy()

    @intervened.setter
    def intervened(self, neurons: Iterable[int] | np.ndarray) -> None:
        self._marks.set_intervened(neurons)

    # ------------------------------------------------------------ overlays
    @property
    def atlas(self) -> Any:
        """The open atlas (:class:`~flyviz.analysis.atlas.Atlas`) whose statistics are
        colour layers and whose cards the inspector shows, or ``None`` (the atlas part's)."""
        return self._parts["atlas"].atlas               # type: ignore[attr-defined]

    @atlas.setter
    def atlas(self, atlas: Any) -> None:
        part = self._parts["atlas"]
        if atlas is not part.atlas:                     # type: ignore[attr-defined]
            part.atlas = atlas                          # type: ignore[attr-defined]
            keys = [atlas_key(statistic) for statistic in ATLAS_STATISTICS]
            self._offer_own(keys, atlas is not None)
            if self.colour_by in keys:
                self.refresh_layer(self.colour_by)      # the newly opened atlas's values
            self.events.atlas.emit(atlas)

    @property
    def token_flows(self) -> tuple[float, ...] | None:
        """How the running text's tokens are shaded: ``token_flows[p]`` the flow of the token
        read at position ``p`` (red adds to the traced logit, blue takes from it), or ``None``
        (no shading); the *Why?* part's, cleared with the run."""
        return self._parts["why"].token_flows           # type: ignore[attr-defined]

    @token_flows.setter
    def token_flows(self, flows: Iterable[float] | None) -> None:
        self._parts["why"].set_token_flows(flows)       # type: ignore[attr-defined]

    def set_lines(self, source: str, points: Any = None, colours: Any = None) -> None:
        """Draw synapses of ``source`` as line segments over the brain: ``points`` ``(2k, 3)``
        (pre then post soma of each), ``colours`` ``(2k, 4)`` RGBA; ``None`` or no points
        clears the source's lines. The newest source set is the one shown."""
        self._marks.set_lines(source, points, colours)

    def lines(self, source: str) -> tuple[np.ndarray, np.ndarray] | None:
        """``(points, colours)`` of ``source``'s lines, or ``None`` (see :meth:`set_lines`)."""
        return self._marks.lines.get(source)

    @property
    def shown_lines(self) -> str | None:
        """The source whose lines are drawn (the newest set), or ``None``."""
        return self._marks.shown_lines

    def sync_camera(self) -> CameraPose | None:
        """Ask the view that owns the camera to write where it looks from now, and return
        :attr:`camera` (before an export reads it)."""
        self.events.camera_wanted.emit()
        return self._camera_part.pose

    @property
    def filter_superclass(self) -> str:
        """The superclass the highlight filter keeps lit (``""``: any)."""
        return self._highlight.filter[0]

    @property
    def filter_cell_type(self) -> str:
        """The cell-type prefix the highlight filter keeps lit (``""``: any)."""
        return self._highlight.filter[1]

    def set_filter(self, superclass: str | None = None, cell_type: str | None = None) -> None:
        """Light the neurons of ``superclass`` whose cell type starts with ``cell_type``
        (``None``: leave that part as it is; ``""``: any). The window turns the filter
        into the highlight source ``"filter"``."""
        sc = self._highlight.filter[0] if superclass is None else str(superclass)
        ct = self._highlight.filter[1] if cell_type is None else str(cell_type).strip()
        known = None if self.anatomy is None or self.anatomy.superclass is None \
            else set(self.anatomy.superclass)
        if sc and known is not None and sc not in known:
            raise ViewerError(f"unknown superclass {sc!r}; this model's are "
                              f"{', '.join(sorted(known)) or 'none'}")
        if (sc, ct) != self._highlight.filter:
            self._highlight.filter = (sc, ct)
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
        return self._camera_part.view

    @view.setter
    def view(self, name: str) -> None:
        if name not in VIEW_PRESETS:
            raise ViewerError(f"unknown view {name!r}; choose one of {', '.join(VIEW_PRESETS)}")
        self._camera_part.view = str(name)
        self._camera_part.pose = None
        self.events.view.emit(self._camera_part.view)
        self.events.camera.emit(None)

    @property
    def camera(self) -> CameraPose | None:
        """Where the camera looks from (``None``: the preset's framing of the brain)."""
        return self._camera_part.pose

    @camera.setter
    def camera(self, pose: CameraPose | None) -> None:
        if pose is not None and not isinstance(pose, CameraPose):
            raise ViewerError(f"camera must be a CameraPose or None, got {type(pose).__name__}")
        if pose != self._camera_part.pose:
            self._camera_part.pose = pose
            self.events.camera.emit(pose)

    # ------------------------------------------------------------ interventions
    @property
    def interventions(self) -> tuple[Any, ...]:
        """The interventions the next runs apply (:mod:`flyviz.model.interventions` objects)."""
        return self.run_config.interventions

    @interventions.setter
    def interventions(self, items: Iterable[Any]) -> None:
        self.run_config.set_interventions(items)

    @property
    def next_interventions(self) -> tuple[Any, ...]:
        """Interventions for the next run only (after :attr:`interventions` are ignored for
        it); the window's runs forget them once one starts with them."""
        return self.run_config.next_interventions

    @property
    def next_description(self) -> str:
        """What :attr:`next_interventions` do, in words (``""``: none)."""
        return self.run_config.next_description

    def set_next_interventions(self, items: Iterable[Any] = (), description: str = "") -> None:
        """Apply ``items`` to the next run only (``()`` clears them); ``description`` says
        what they do for the user (e.g. "group T4 silenced")."""
        self.run_config.set_next(items, description)

    @property
    def comparing(self) -> bool:
        """True when runs go beside the untouched model."""
        return self.run_config.comparing

    @property
    def compare_mode(self) -> str:
        """How the untouched model runs beside: one of :data:`COMPARE_MODES`."""
        return self.run_config.compare_mode

    def set_comparing(self, comparing: bool, mode: str | None = None) -> None:
        """Compare runs with the untouched model (``mode``: one of :data:`COMPARE_MODES`)."""
        self.run_config.set_comparing(comparing, mode)
