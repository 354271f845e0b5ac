"""The napari layers of a flyviz brain, and the binding that colours them at the shown token.

The layers are built from one :class:`~flyviz.viewer.state.ViewerState` (``metadata["flyviz"]
["state"]``), read through a :class:`~flyviz.brain_source.BrainSource`: its colour layers
are the registry's (:mod:`flyviz.viewer.layers`), the ones every flyviz view draws.
The brain is one 3-D Points layer per colour quantity (the recorded state;
a comparison's Δx as a second one), at the somas, with the neurons' labels as
``features``. The token axis is napari's own: a tiny hidden 4-D "token axis"
layer (one byte per token) gives the viewer a leading dims axis as long as
the recording, and napari broadcasts the 3-D points over it.

Why not a 4-D Points array with the token as its first coordinate? It would
hold every neuron at every token (49,393 × tokens points, about 1.6 MB per
token in coordinates alone, plus a colour each): not lazy. Here the recording
stays memory-mapped and :func:`bind` recolours the points from the shown
token's state alone, on napari's dims event.

napari follows the state (:func:`follow`): the slider shows the state's token (and
moving it moves the state's), the Points layers select the state's selected and
picked neurons, and the camera looks from where the state's camera does. Without a camera
of the state's, napari frames the brain as flyviz's own views do (:func:`frame_brain`), not
by the box around every soma, which the ascending neurons' somata stretch far below it.
"""

from __future__ import annotations

import weakref
from typing import Any, Generic, TypeVar

import numpy as np

from flyviz.brain_source import DELTA, BrainSource
from flyviz.errors import MissingDependencyError
from flyviz.render.camera import FRAMING_MARGIN, brain_bounds
from flyviz.viewer.state import ViewerState

#: Key of the layers' ``metadata`` entry that :func:`bind` looks for.
METADATA_KEY = "flyviz"
#: Disc diameter of a neuron, in micrometres.
POINT_SIZE_UM = 4.0

_LAYER_NAMES = {"signed": "state", "abs": "|state|", DELTA: "Δx", "spike_rate": "rate",
                "spike_flash": "spikes"}


def layer_name(source: BrainSource, quantity: str | None) -> str:
    """The name of ``source``'s Points layer coloured by ``quantity`` (``"run rate"``)."""
    return f"{source.name} {_LAYER_NAMES.get(quantity or '', quantity or 'neurons')}"


def napari_coordinates(positions_um: np.ndarray) -> np.ndarray:
    """flyviz's (x, y dorsal up, z) micrometres as napari's (z, y, x) with dorsal at the top."""
    p = np.asarray(positions_um, dtype=np.float32)
    return np.ascontiguousarray(np.stack([p[:, 2], -p[:, 1], p[:, 0]], axis=1))


def layer_data(source: "BrainSource | ViewerState", token: int = 0
               ) -> list[tuple[Any, dict[str, Any], str]]:
    """napari LayerData tuples for a viewer state (or its source): the token axis (if any),
    the brain, Δx."""
    if isinstance(source, ViewerState):
        source = BrainSource.from_state(source, source.model_name or "flyviz")
    coords = napari_coordinates(source.positions_um)
    features = source.features()
    out: list[tuple[Any, dict[str, Any], str]] = []
    quantities: list[str | None]
    if source.tokens:
        centre = coords.mean(axis=0) if len(coords) else np.zeros(3, np.float32)
        # Tokens, or bins of the milliseconds this run was recorded with (`--bin 5`: 5 ms
        # bins, not the kind's default 10).
        axis = source.time_axis
        out.append((np.zeros((source.tokens, 1, 1, 1), np.uint8),
                    {"name": f"{source.name} {axis.names}", "visible": False,
                     "axis_labels": (axis.label, "z", "y", "x"),
                     "translate": (0.0, *map(float, centre)),
                     "metadata": {METADATA_KEY: {"source": source, "state": source.state,
                                                 "role": "tokens"}}},
                    "image"))
        # The state's colour layer, and a comparison's Δx beside it.
        quantities = [source.quantity, *([DELTA] if DELTA in source.quantities
                                         and source.quantity != DELTA else [])]
    else:
        quantities = [source.quantity] if source.quantities else [None]
    for quantity in quantities:
        face = (source.rgba(quantity, token) if quantity is not None
                else np.full((len(coords), 4), 0.6, np.float32))
        out.append((coords, {
            "name": layer_name(source, quantity),
            "features": features,
            "face_color": face,
            "border_width": 0.0,
            "border_color": "transparent",
            "size": POINT_SIZE_UM,
            "blending": "additive",
            "axis_labels": ("z", "y", "x"),
            "metadata": {METADATA_KEY: {"source": source, "state": source.state,
                                        "role": "points", "quantity": quantity}},
        }, "points"))
    return out


def _flyviz_layers(viewer: Any) -> list[Any]:
    return [layer for layer in viewer.layers
            if isinstance(layer.metadata.get(METADATA_KEY), dict)]


def shown_token(viewer: Any) -> int:
    """The token napari's dims show (the leading axis of a 4-D world; 0 in 3-D)."""
    dims = viewer.dims
    if dims.ndim < 4:
        return 0
    return int(dims.current_step[dims.ndim - 4])


def text_layer(viewer: Any, token: int | None = None) -> Any:
    """The flyviz Points layer whose words at the slider's token are shown (the canvas's
    corner, the dock widget's line), or ``None``: the selected layer when it is a shown
    recording, else the first shown one whose recording reaches ``token`` (default: the
    slider's), else the first shown one.

    With recordings of different lengths open, the first layer's words were shown
    whatever was selected: after a 100-bin run was added beside a 20-bin recording, the
    slider at bin 99 read "bin 19 of 0–19" (the shorter one's last bin, where it stays).
    """
    token = shown_token(viewer) if token is None else int(token)
    shown = [layer for layer in viewer.layers
             if (info := _points_info(layer)) is not None and layer.visible
             and info["source"].tokens]
    active = viewer.layers.selection.active
    if active is not None and any(layer is active for layer in shown):
        return active
    reaching = [layer for layer in shown
                if token < layer.metadata[METADATA_KEY]["source"].tokens]
    return (reaching or shown or [None])[0]


def recolour(viewer: Any, token: int | None = None) -> None:
    """Colour every flyviz Points layer of ``viewer`` by its quantity at ``token`` (default:
    shown), and write the words of :func:`text_layer` at it in the canvas's corner."""
    token = shown_token(viewer) if token is None else int(token)
    for layer in _flyviz_layers(viewer):
        info = layer.metadata[METADATA_KEY]
        source: BrainSource = info["source"]
        if info.get("role") != "points":
            continue
        if info.get("quantity") is not None:
            layer.face_color = source.rgba(info["quantity"], min(token, max(source.tokens - 1, 0)))
    speaking = text_layer(viewer, token)
    text = "" if speaking is None else speaking.metadata[METADATA_KEY]["source"].token_text(token)
    overlay = viewer.canvas.overlays.text if hasattr(viewer, "canvas") else viewer.text_overlay
    overlay.text = text
    overlay.visible = bool(text)


def set_quantity(layer: Any, quantity: str) -> None:
    """Colour a flyviz Points layer by another quantity (one of its source's ``quantities``)."""
    info = layer.metadata[METADATA_KEY]
    source: BrainSource = info["source"]
    source.layer(quantity)  # an unknown quantity fails here, with the ones there are
    # The layer list says what the points show ("spk rate" stayed over spike flashes); a
    # name the user gave the layer is kept.
    if layer.name == layer_name(source, info.get("quantity")):
        layer.name = layer_name(source, quantity)
    info["quantity"] = quantity


V = TypeVar("V")


class _ByIdentity(Generic[V]):
    """A value per live object, by identity, that holds the object only weakly.

    The entry goes when its object is collected (its weak reference's callback), so a closed
    viewer or a removed layer is not kept alive by flyviz; and a later object that reuses a
    collected one's ``id()`` is not taken for it. (napari's viewer models compare by their
    fields, so a ``WeakKeyDictionary`` would take two viewers of the same settings for one.)
    """

    def __init__(self) -> None:
        self._entries: dict[int, tuple[weakref.ref[Any], V]] = {}

    def get(self, obj: Any) -> V | None:
        """``obj``'s value, or ``None``."""
        entry = self._entries.get(id(obj))
        return entry[1] if entry is not None and entry[0]() is obj else None

    def put(self, obj: Any, value: V) -> None:
        """Keep ``value`` for ``obj`` while ``obj`` lives."""
        key = id(obj)

        def forget(ref: weakref.ref[Any]) -> None:
            entry = self._entries.get(key)
            if entry is not None and entry[0] is ref:
                del self._entries[key]

        self._entries[key] = (weakref.ref(obj, forget), value)

    def pop(self, obj: Any) -> V | None:
        """Forget ``obj``; its value, or ``None``."""
        value = self.get(obj)
        if value is not None:
            del self._entries[id(obj)]
        return value

    def values(self) -> list[V]:
        """The values of the objects alive."""
        return [value for ref, value in list(self._entries.values()) if ref() is not None]


#: The viewers :func:`bind` hooked (to recolour their layers).
_bound: _ByIdentity[bool] = _ByIdentity()
#: Per viewer, per viewer state followed there: its :class:`_Following`.
_followed: _ByIdentity[_ByIdentity["_Following"]] = _ByIdentity()


def is_bound(viewer: Any) -> bool:
    """Whether :func:`bind` hooked ``viewer`` (its layers recolour at its slider's token)."""
    return _bound.get(viewer) is not None


def followed_layers(viewer: Any) -> list[Any]:
    """The flyviz Points layers of ``viewer`` that follow their viewer states (:func:`follow`)."""
    states = _followed.get(viewer)
    return [] if states is None else [layer for following in states.values()
                                      for layer in following.layers()]


def napari_direction(vector: np.ndarray) -> np.ndarray:
    """A direction in flyviz's (x, y dorsal up, z) as napari's (z, y, x) with dorsal at the
    top (the linear part of :func:`napari_coordinates`)."""
    v = np.asarray(vector, dtype=np.float64)
    return np.array([v[2], -v[1], v[0]])


def set_token(viewer: Any, token: int) -> None:
    """Move napari's token slider to ``token`` (nothing in a 3-D world)."""
    dims = viewer.dims
    if dims.ndim < 4 or token < 0 or shown_token(viewer) == token:
        return
    step = list(dims.current_step)
    step[dims.ndim - 4] = int(token)
    dims.current_step = tuple(step)


def show_camera(viewer: Any, pose: Any) -> None:
    """Look from where the flyviz camera ``pose`` (a :class:`~flyviz.render.camera.CameraPose`)
    looks: the same point, direction, up and field of view; nothing for ``None``."""
    if pose is None:
        return
    camera = viewer.scene.camera    # napari 0.9's (viewer.camera is its deprecated alias)
    view, up = pose.directions()
    camera.center = tuple(float(c) for c in napari_coordinates(np.array([pose.center]))[0])
    camera.perspective = float(pose.fov)
    camera.set_view_direction(tuple(napari_direction(view)), tuple(napari_direction(up)))
    if pose.scale_factor > 0:
        # The pose's scale_factor is the scene's size across the view's shorter side (a vispy
        # camera's); napari's zoom is canvas pixels per world unit, over the canvas's size
        # (its public model, (height, width)): the same view. napari before 0.9 kept the size
        # on the viewer (``_canvas_size``, gone since), so the zoom was silently never set.
        camera.zoom = float(min(canvas_size(viewer))) / float(pose.scale_factor)


def frame_brain(viewer: Any) -> bool:
    """Centre and zoom napari's camera on the brain of the flyviz Points layers shown, as the
    window and the movies frame it (:func:`flyviz.render.camera.brain_bounds`); whether it did.

    napari frames the box around every point (its home button, ``reset_view``): in the
    FlyWire brains some 300 ascending neurons' somata sit half a millimetre below the brain
    (the faint cloud under it), so the brain filled only the top half of the canvas. Here the
    few outlying somata are left out of the framing as flyviz's own views leave them out.

    Nothing is done (``False``) where napari's framing is the one wanted: another shown layer
    than flyviz's (its extent counts too), napari's grid of views, or no flyviz points shown.
    The camera's direction is kept: the brain is fitted as it is seen from there.
    """
    shown = [layer for layer in viewer.layers if layer.visible]
    brains = [layer for layer in shown if _points_info(layer) is not None]
    # The token axis layer is one voxel at the brain's middle: it frames nothing.
    flyviz = _flyviz_layers(viewer)
    others = [layer for layer in shown if layer not in flyviz]
    dims = viewer.dims
    if not brains or others or viewer.grid.enabled or dims.ndim < 3:
        return False
    data = np.concatenate([np.asarray(layer.data, dtype=np.float64) for layer in brains])
    if not len(data):
        return False
    lo, hi = brain_bounds(data)
    # The points are 3-D (z, y, x); a recording's token axis leads the world's dims.
    axes = [axis - (dims.ndim - 3) for axis in dims.displayed]
    if any(axis < 0 for axis in axes):
        return False        # the token axis is on the canvas: napari's framing
    lo, hi = lo[axes], hi[axes]
    camera = viewer.scene.camera
    if dims.ndisplay == 3:
        # The box's corners seen from the camera's direction: its height and width on screen.
        corners = np.array([[(lo, hi)[(i >> k) & 1][k] for k in range(3)] for i in range(8)])
        up = np.asarray(camera.up_direction, dtype=np.float64)
        across = np.cross(np.asarray(camera.view_direction, dtype=np.float64), up)
        tall, wide = np.ptp(corners @ up), np.ptp(corners @ across)
    else:
        tall, wide = hi - lo
    try:
        height, width = canvas_size(viewer)
    except MissingDependencyError:
        return False        # a napari without its canvas's size: its own framing
    camera.center = tuple(float(c) for c in (lo + hi) / 2.0)
    camera.zoom = float(min(height / max(tall, 1e-6), width / max(wide, 1e-6)) / FRAMING_MARGIN)
    return True


def canvas_size(viewer: Any) -> tuple[int, int]:
    """The canvas's size in pixels, ``(height, width)``: napari's ``viewer.canvas.size``.

    Raises
    ------
    flyviz.errors.MissingDependencyError
        For a napari without it (before 0.9): one line naming the napari flyviz needs,
        not a camera left unzoomed without a word.
    """
    size = getattr(getattr(viewer, "canvas", None), "size", None)
    if size is None or len(size) != 2:
        raise MissingDependencyError.for_feature("the napari plugin's camera", "napari>=0.9",
                                                 "napari")
    return int(size[0]), int(size[1])


class _Following:
    """A viewer state followed in one viewer: what :func:`follow` set up, undone by
    :meth:`close`.

    It holds the viewer and its layers weakly; the state's and napari's events hold its
    methods weakly (psygnal's and napari's bound-method connections); only the bookkeeping
    (:data:`_followed`, per viewer, gone with it) holds it. So neither a closed viewer nor a
    removed layer is kept alive by a state that outlives them (a script's, the window's).
    """

    def __init__(self, viewer: Any, state: ViewerState, source: BrainSource) -> None:
        self._viewer = weakref.ref(viewer)
        self.state = state
        self._layers: list[weakref.ref[Any]] = []
        self._rows = np.full(state.neurons, -1, np.int64)
        self._rows[source.shown] = np.arange(source.shown.size)
        state.events.index.connect(self.show_token)
        state.events.selected.connect(self.show_selection)
        state.events.picked.connect(self.show_selection)
        state.events.camera.connect(self.show_camera)
        viewer.dims.events.current_step.connect(self.from_dims)

    def layers(self) -> list[Any]:
        """The Points layers showing the state, in the order they were added."""
        return [layer for layer in (ref() for ref in self._layers) if layer is not None]

    def add(self, layer: Any) -> None:
        """Follow the state in ``layer`` too."""
        self._layers.append(weakref.ref(layer))

    def remove(self, layer: Any) -> bool:
        """Stop following in ``layer``; whether no layer shows the state any more."""
        self._layers = [ref for ref in self._layers if ref() is not None and ref() is not layer]
        return not self._layers

    def close(self) -> None:
        """Disconnect from the state's and the viewer's events."""
        events = self.state.events
        for signal, slot in ((events.index, self.show_token),
                             (events.selected, self.show_selection),
                             (events.picked, self.show_selection),
                             (events.camera, self.show_camera)):
            signal.disconnect(slot)
        viewer = self._viewer()
        if viewer is not None:
            viewer.dims.events.current_step.disconnect(self.from_dims)

    def show_token(self, index: int) -> None:
        viewer = self._viewer()
        if viewer is not None:
            set_token(viewer, index)

    def show_camera(self, pose: Any = None) -> None:
        viewer = self._viewer()
        if viewer is not None:
            show_camera(viewer, self.state.camera)

    def show_selection(self, *_args: Any) -> None:
        state, rows = self.state, self._rows
        chosen = set(state.picked.tolist())
        if state.selected is not None:
            chosen.add(int(state.selected))
        wanted = {int(rows[n]) for n in chosen if 0 <= n < rows.size and rows[n] >= 0}
        for shown in self.layers():
            if set(shown.selected_data) != wanted:
                shown.selected_data = wanted

    def from_dims(self, event: Any = None) -> None:
        viewer = self._viewer()
        if viewer is None:
            return
        token = shown_token(viewer)
        n = len(self.state.recording)
        if n and 0 <= token < n and token != self.state.index:
            self.state.index = token


def _points_info(layer: Any) -> dict[str, Any] | None:
    info = layer.metadata.get(METADATA_KEY)
    return info if isinstance(info, dict) and info.get("role") == "points" else None


def follow(viewer: Any, layer: Any) -> None:
    """Make ``viewer`` show what the flyviz Points ``layer``'s viewer state shows: its token
    (both ways: the slider moves the state's too), its selected and picked neurons (the
    layer's selected points) and its camera. Once per viewer and state; :func:`unfollow`
    (on the layer's removal) undoes it."""
    info = _points_info(layer)
    if info is None:
        return
    state: ViewerState = info["state"]
    states = _followed.get(viewer)
    if states is None:
        states = _ByIdentity()
        _followed.put(viewer, states)
    following = states.get(state)
    if following is not None:       # another layer of a state already followed (Δx)
        shown = following.layers()
        following.add(layer)
        if shown:
            layer.selected_data = set(shown[0].selected_data)
        show_camera(viewer, state.camera)       # napari framed the new layer afresh
        return
    following = _Following(viewer, state, info["source"])
    states.put(state, following)
    following.add(layer)
    set_token(viewer, state.index)
    following.show_selection()
    show_camera(viewer, state.camera)


def unfollow(viewer: Any, layer: Any) -> None:
    """Stop following ``layer``'s viewer state in it (it left ``viewer``); the state itself,
    once no layer of ``viewer`` shows it."""
    info = _points_info(layer)
    states = _followed.get(viewer)
    if info is None or states is None:
        return
    following = states.get(info["state"])
    if following is not None and following.remove(layer):
        following.close()
        states.pop(info["state"])


def bind(viewer: Any) -> None:
    """Recolour ``viewer``'s flyviz layers whenever its dims move or a layer is added (once per
    viewer: a viewer collected is forgotten, and a new one that reuses its ``id()`` is bound)."""
    if is_bound(viewer):
        return
    _bound.put(viewer, True)

    def on_change(event: Any = None) -> None:
        recolour(viewer)

    viewer.dims.events.current_step.connect(on_change)
    viewer.layers.events.inserted.connect(on_change)
    viewer.layers.events.removed.connect(on_change)
    viewer.layers.selection.events.active.connect(on_change)    # whose words are shown
    viewer.layers.events.inserted.connect(_show_three_d(viewer))
    viewer.layers.events.inserted.connect(lambda event: follow(viewer, event.value))
    viewer.layers.events.removed.connect(lambda event: unfollow(viewer, event.value))
    # napari's home button (and its reset_view) frames the brain as flyviz's views do.
    viewer.events.reset_view.connect(lambda event: frame_brain(viewer))
    for layer in list(viewer.layers):
        follow(viewer, layer)


def _show_three_d(viewer: Any) -> Any:
    def on_inserted(event: Any) -> None:
        layer = event.value
        info = layer.metadata.get(METADATA_KEY)
        if isinstance(info, dict) and info.get("role") == "points":
            if viewer.dims.ndisplay != 3:
                viewer.dims.ndisplay = 3
            # napari frames the first layer added; the token axis is one voxel.
            viewer.reset_view()
    return on_inserted
