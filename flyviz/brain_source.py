"""What the napari plugin and the notebook widget show: a view of one :class:`ViewerState`.

The two hosts that embed flyviz's picture of the brain (:mod:`flyviz.napari`
and :mod:`flyviz.notebook`) render a :class:`~flyviz.viewer.state.ViewerState`,
as the window, movies and figures do. This module makes their states
(:func:`state_for`, :func:`open_state`: a recording or an atlas, the neurons
placed by :func:`flyviz.viewer.layers.drawing_anatomy`) and
:class:`BrainSource` answers what they ask of one:

* where the neurons are (:attr:`BrainSource.positions_um`, the neurons with
  a known soma only) and what they are (:meth:`BrainSource.features`:
  superclass, cell type, side, body id, and an atlas's statistics);
* which colour quantities there are (:attr:`BrainSource.quantities`:
  ``"signed"`` x, ``"abs"`` |x|, then the state's colour layers: ``"delta"``
  of a comparison, ``"atlas:mean"``..., each built by
  :mod:`flyviz.viewer.layers`, the registry every view uses);
* the colours of one token (:meth:`BrainSource.rgba`), in flyviz's
  colormaps (:mod:`flyviz.render.colormaps`) over the range the state takes
  (its :attr:`~flyviz.viewer.state.ViewerState.range_scope`, as the kind says:
  a language model's one range over the whole recording, the range a movie of
  it uses, so a colour means the same value at every token; a spiking brain's
  each bin over its own rates, as the window shows them);
* the text at a token (:meth:`BrainSource.token_text`).

The recording stays memory-mapped: a colour is computed from one token's
state when it is asked for, and nothing of the other tokens is read.

Nothing here imports Qt or vispy.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from flyviz.errors import InputError, RecordingError
from flyviz.render.colormaps import lut
from flyviz.render.style import ColourLayer
from flyviz.viewer.layers import ATLAS_STATISTICS, DELTA, atlas_key
from flyviz.viewer.state import STATE, ViewerState

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.analysis.atlas import Atlas
    from flyviz.kinds import ModelKind, TimeAxis
    from flyviz.model.checkpoint import Anatomy
    from flyviz.record.recording import Recording
    from flyviz.record.runner import Model

__all__ = ["DELTA", "HOST_DISPLAY", "LABEL_COLUMNS", "BrainSource", "colours", "is_atlas_dir",
           "open_state", "resolve_model", "state_for"]

#: Label columns of :meth:`BrainSource.features`, in order.
LABEL_COLUMNS = ("superclass", "cell_type", "side", "body_id")

#: The embedded hosts' look: point size and glow of flyviz's plain
#: :class:`~flyviz.render.style.CloudStyle` (the notebook widget's frames, as before).
HOST_DISPLAY: dict[str, float] = {"point_size": 3.0, "glow": 1.0}

#: The activation quantities, the recorded state coloured by each colour mode.
ACTIVATION_QUANTITIES = ("signed", "abs")


def is_atlas_dir(path: str | Path) -> bool:
    """True when ``path`` is a folder holding a flyviz atlas (a Zarr store with its attributes)."""
    p = Path(path)
    if not p.is_dir():
        return False
    for name in (".zmetadata", ".zattrs", "zarr.json"):
        meta = p / name
        if meta.is_file():
            try:
                return "flyviz_atlas" in meta.read_text(encoding="utf-8", errors="replace")[:1 << 20]
            except OSError:
                return False
    return False


def resolve_model(spec: str) -> "Model | None":
    """The model a recording or atlas names, when it can be had without a download.

    ``"demo"`` and local folders are loaded; a hub id is loaded only if the
    hub's cache already holds it (nothing is downloaded behind the user's
    back). ``None`` when it cannot be had.
    """
    from flyviz.errors import FlyvizError
    from flyviz.kinds import LANGUAGE

    spec = str(spec or "").strip()
    if not spec:
        return None
    try:
        return LANGUAGE.load(spec, download=False)
    except FlyvizError:
        return None


def state_for(anatomy: "Anatomy", recording: "Recording | None" = None,
              atlas: "Atlas | None" = None, *, model: Any = None, name: str = "",
              kind: "ModelKind | None" = None) -> ViewerState:
    """A viewer state of ``recording`` (and an ``atlas``) as the embedded hosts show them.

    The colour range is taken as the kind says (:attr:`ModelKind.host_range_scope
    <flyviz.kinds.ModelKind.host_range_scope>`: one over the whole recording for a language
    model, each bin's own for a spiking brain, as the window shows it), the look
    :data:`HOST_DISPLAY`; the kind's colour layers are offered (``kind``: by
    default the model's, else the recording's), a comparison its Δ layer, an atlas its
    statistics (coloured by the mean when there is no recording).

    Raises
    ------
    RecordingError
        When the anatomy, the recording and the atlas disagree on the number of neurons.
    """
    from flyviz.viewer.settings import DisplaySettings

    n = int(anatomy.positions.shape[0])
    if recording is not None and recording.neurons != n:
        raise RecordingError(f"the recording has {recording.neurons:,} neurons but its "
                             f"model's anatomy has {n:,}; open it with the model it was made with")
    if atlas is not None and atlas.neurons != n:
        raise RecordingError(f"the atlas has {atlas.neurons:,} neurons but the model's "
                             f"anatomy has {n:,}")
    state = ViewerState(DisplaySettings(point_size=HOST_DISPLAY["point_size"],
                                        glow=HOST_DISPLAY["glow"]))
    if model is not None and int(model.neurons) != n:
        model = None
    if kind is None:
        from flyviz.kinds import kind_of, kind_of_recording

        kind = kind_of(model) if model is not None or recording is None \
            else kind_of_recording(recording)
    state.range_scope = kind.host_range_scope
    state.set_model(model, anatomy, name=name or getattr(model, "name", "") or "", neurons=n,
                    kind=kind)
    if recording is not None:
        state.set_recording(recording)      # a comparison's Δx is offered by the state
    if atlas is not None:
        state.atlas = atlas                 # and so are the atlas's statistics
        if recording is None:
            state.colour_by = atlas_key(next(iter(ATLAS_STATISTICS)))
    return state


def _model_at_hand(kind: "ModelKind", neurons: int, model: Any, recording: "Recording | None",
                   spec: str = "", what: str = "the recording") -> tuple[Any, str]:
    """``model`` when one is given (checked: it must be of ``kind`` and have ``neurons``
    neurons), else the one ``kind`` loads for ``recording`` (or ``spec``) without a
    download; ``(None, why)`` when there is none.

    Raises
    ------
    RecordingError
        For a given model of another kind or another number of neurons (one line): its
        anatomy would place another brain's neurons, and dropping it for the recording's
        own model said nothing of the model the user chose.
    """
    from flyviz.errors import FlyvizError

    if model is not None:
        refusal = kind.model_refusal(model, neurons, what)
        if refusal is not None:
            raise RecordingError(refusal)
        return model, ""
    try:
        if recording is not None:
            model, said = kind.recording_model(recording, download=False)
        else:
            model, said = (kind.load(spec, download=False) if spec else None), ""
    except FlyvizError as exc:
        return None, str(exc).splitlines()[0]
    if model is not None and int(model.neurons) != neurons:
        return None, f"its model has {int(model.neurons):,} neurons"
    return model, said


def _notes(*lines: str | None) -> str | None:
    """The lines that say something, as one note (``None``: nothing to say)."""
    said = [line for line in lines if line]
    return "; ".join(said) if said else None


def open_state(path: str | Path, model: "Model | None" = None) -> ViewerState:
    """The viewer state of a ``.flyrec`` file or an atlas folder (see :class:`BrainSource`)."""
    return BrainSource.open(path, model).state


class BrainSource:
    """One viewer state as the napari plugin and the notebook widget read it.

    Parameters
    ----------
    anatomy
        Where the neurons are drawn (:func:`flyviz.viewer.layers.drawing_anatomy`).
    recording
        The run whose states colour the neurons, or ``None`` (an atlas alone).
    atlas
        An :class:`~flyviz.analysis.atlas.Atlas` of the same model, or ``None``:
        its statistics become features and colour quantities.
    name
        A short name for the layers (the file's stem).
    state
        The :class:`~flyviz.viewer.state.ViewerState` to read instead of one made
        of the three above (see :meth:`from_state`).

    Raises
    ------
    RecordingError
        When the anatomy, the recording and the atlas disagree on the number of neurons.
    """

    def __init__(self, anatomy: "Anatomy | None" = None, recording: "Recording | None" = None,
                 atlas: "Atlas | None" = None, name: str = "flyviz", *,
                 state: ViewerState | None = None) -> None:
        if state is None:
            if anatomy is None:
                raise InputError("a brain source needs the anatomy or a viewer state")
            state = state_for(anatomy, recording, atlas, name=name)
        if state.anatomy is None:
            raise InputError("the viewer state shows no model with neuron positions; "
                             "state.set_model(model) first")
        #: The viewer state shown.
        self.state = state
        self.name = name
        #: Why the neurons are not at their soma positions (a stand-in layout), or ``None``.
        self.note: str | None = None
        self._layers: dict[str, ColourLayer] = {}
        #: Indices of the neurons drawn (known soma), in the order of every per-point array.
        self.shown = np.flatnonzero(np.asarray(state.anatomy.valid, dtype=bool))

    @classmethod
    def from_state(cls, state: ViewerState, name: str = "flyviz") -> "BrainSource":
        """The source reading ``state``."""
        return cls(name=name, state=state)

    @property
    def anatomy(self) -> "Anatomy":
        """Where the neurons are drawn (the state's)."""
        anatomy = self.state.anatomy
        assert anatomy is not None      # checked when the source was made
        return anatomy

    @property
    def recording(self) -> "Recording | None":
        """The state's recording, or ``None`` for an atlas alone."""
        return self.state.recording if len(self.state.recording) or self.atlas is None else None

    @property
    def atlas(self) -> "Atlas | None":
        """The state's atlas, or ``None``."""
        return self.state.atlas

    # ------------------------------------------------------------ opening
    @classmethod
    def open(cls, path: str | Path, model: Any = None) -> "BrainSource":
        """A source for a ``.flyrec`` file or an atlas folder.

        Parameters
        ----------
        path
            The recording or the atlas store.
        model
            The model it was made with (its anatomy places the neurons). By
            default the model the file names, when it can be loaded without a
            download (see :func:`resolve_model`); otherwise the neurons are
            spread on a generic ball and a warning says so. A model given must be of the
            recording's kind and size; one of that size that is not the model the recording
            names (another graph, other weights, another brain) is used, and a warning says
            how it differs.

        Raises
        ------
        RecordingError
            A missing, damaged or mismatched recording, or a model given of another kind
            or number of neurons (one line).
        flyviz.analysis.atlas.AtlasError
            An atlas that cannot be read.
        """
        from flyviz.kinds import LANGUAGE, kind_of_recording
        from flyviz.viewer.layers import drawing_anatomy

        p = Path(path)
        recording = None
        atlas = None
        kind: ModelKind
        if is_atlas_dir(p):
            from flyviz.analysis.atlas import Atlas

            atlas = Atlas(p)
            spec = str(atlas.info.get("model", {}).get("spec") or atlas.model_name)
            neurons = atlas.neurons
            kind = LANGUAGE                     # an atlas is of a language model's runs
        else:
            from flyviz.record.recording import Recording

            # verify=False: opening stays instant whatever the size; a damaged frame
            # still fails with one line when it is shown.
            recording = Recording.load(p, verify=False)
            neurons = recording.neurons
            kind = kind_of_recording(recording)
            spec = kind.model_spec(recording)[0] or ""
        given = model is not None
        model, said = _model_at_hand(kind, neurons, model, recording, spec, what=p.name)
        placement = drawing_anatomy(model, neurons, p.name,
                                    missing=said or f"its model {spec or '(unnamed)'} could "
                                                    "not be loaded here")
        # A model given of the right size may still be another one (another graph places
        # other neurons): said, as the window says it, not drawn without a word.
        mismatch = (kind.recording_mismatch(recording, model, p.name)
                    if given and recording is not None else None)
        for line in (placement.note, mismatch):
            if line is not None:
                warnings.warn(line, stacklevel=2)
        if atlas is not None and model is not None and int(model.neurons) == neurons:
            note = atlas.mismatch(model.checkpoint)
            if note is not None:
                warnings.warn(note, stacklevel=2)
        name = p.stem or p.name
        source = cls(state=state_for(placement.anatomy, recording, atlas, model=model, name=name,
                                     kind=kind), name=name)
        source.note = _notes(placement.note, mismatch)
        return source

    @classmethod
    def of_recording(cls, recording: "Recording", model: Any = None, name: str = "run",
                     missing: str = "") -> "BrainSource":
        """A source for a recording in memory, placed by ``model``: by default the model its
        kind loads for it without a download; without one, the neurons lie on a generic
        ball and :attr:`note` says why (``missing`` is added to it). A model given of
        another kind or number of neurons is refused (:class:`RecordingError`, one line); one
        of that size that is not the recording's own is used, and :attr:`note` says so."""
        from flyviz.kinds import kind_of_recording
        from flyviz.viewer.layers import drawing_anatomy

        kind = kind_of_recording(recording)
        given = model is not None
        model, said = _model_at_hand(kind, recording.neurons, model, recording)
        why = said or "its model is not at hand"
        placement = drawing_anatomy(model, recording.neurons,
                                    missing=f"{why} ({missing})" if missing else why)
        mismatch = kind.recording_mismatch(recording, model) if given else None
        source = cls(state=state_for(placement.anatomy, recording, model=model, name=name,
                                     kind=kind), name=name)
        source.note = _notes(placement.note, mismatch)
        return source

    # ------------------------------------------------------------ reading
    @property
    def tokens(self) -> int:
        """Number of tokens (frames) of the recording (0 for an atlas alone)."""
        return 0 if self.recording is None else len(self.recording)

    @property
    def time_axis(self) -> "TimeAxis":
        """The frames' time axis: the recording's (a spiking run's bins of the milliseconds it
        was recorded with, ``--bin 5``), else the kind's. Its :attr:`~flyviz.kinds.TimeAxis.label`
        is what every host's slider says (``"bin (5 ms)"``)."""
        rec = self.recording
        return self.state.kind.time_axis if rec is None else self.state.kind.recording_axis(rec)

    @property
    def _state_quantities(self) -> tuple[str, ...]:
        """The recorded state's colourings (the kind's: ``"signed"`` and ``"abs"``, or a
        spiking brain's ``"spike_rate"``); none for an atlas alone."""
        return tuple(self.state.kind.state_quantities) if self.recording is not None else ()

    @property
    def quantities(self) -> tuple[str, ...]:
        """The colour quantities this source can show, the default first: the recorded
        state's (``"signed"`` and ``"abs"``; ``"spike_rate"`` for a spiking brain), then the
        state's offered colour layers."""
        # dict.fromkeys: each name once, in order, whatever registers a layer of a
        # state quantity's name.
        return tuple(dict.fromkeys(self._state_quantities + tuple(
            key for key, entry in self.state.colour_layers.items()
            if key != STATE and entry.available)))

    @property
    def quantity(self) -> str:
        """The quantity the state shows now."""
        state = self.state
        if state.colour_by != STATE:
            return state.colour_by
        own = self._state_quantities
        return state.display.mode if state.display.mode in own or not own else own[0]

    def show(self, quantity: str) -> None:
        """Make the state show ``quantity`` (one of :attr:`quantities`)."""
        self.layer(quantity)
        if quantity in self._state_quantities:
            if quantity in ACTIVATION_QUANTITIES:
                self.state.display.mode = quantity
            self.state.colour_by = STATE
        else:
            self.state.colour_by = quantity

    def add_quantity(self, name: str, values: np.ndarray, *, colormap: str = "sequential",
                     label: str = "") -> str:
        """Add a quantity with the same per-neuron ``values`` at every frame (token or bin;
        e.g. a trace's summed node flows, an importance) to the state; returns its name.

        Adding a name again replaces the values added under it; the name of one of the
        recording's own quantities is refused (its kind's colourings of its state: a Fly
        LLM's activation as ``"signed"`` and ``"abs"``, a spiking brain's rate as
        ``"spike_rate"``; ``"state"``; the Δx layer ``"delta"``): the values would not be
        shown under it, and the name would be listed twice. A feature's layer of the name
        (``"flow"``, as the example notebook adds a trace's flows) is replaced.

        Raises
        ------
        InputError
            For values that are not one number per neuron, an unknown colormap, or a name
            that is not text or is a built-in quantity's.
        """
        from flyviz.arguments import shown
        from flyviz.viewer.layers import values_layer

        if not isinstance(name, str) or not name.strip():
            raise InputError(f"a quantity's name must be text (a str), not {shown(name)}")
        # The recording's own colourings win over added values of their name (its kind's:
        # "abs" is no spiking recording's, and was refused as one); a feature's layer
        # ("flow", an atlas statistic) is replaced, as the notebook's Why? example does.
        built_in = {*self.state.kind.state_quantities, STATE, DELTA}
        if name in built_in:
            raise InputError(f"{name!r} is one of the recording's own colour quantities; "
                             "give the added values another name")
        layer = values_layer(name, values, self.anatomy.positions.shape[0], colormap=colormap,
                             label=label)
        self.state.add_colour_layer(name, label or name, lambda: layer, replace=True)
        self._layers.pop(name, None)
        return name

    def layer(self, quantity: str) -> ColourLayer:
        """The :class:`~flyviz.render.style.ColourLayer` of a quantity."""
        found = self._layers.get(quantity)
        if found is not None:
            return found
        if quantity in self._state_quantities:
            # The kind's own colouring of its state: a spiking rate on sequential colours in
            # Hz, not an activation's diverging ones.
            found = self.state.state_layer(quantity if quantity in ACTIVATION_QUANTITIES
                                           else None)
        elif quantity in self.quantities:
            found = self.state.layer_of(quantity)
        else:
            raise InputError(f"unknown colour quantity {quantity!r}; choose one of "
                             f"{', '.join(self.quantities) or '(none)'}")
        self._layers[quantity] = found
        return found

    @property
    def positions_um(self) -> np.ndarray:
        """``(shown, 3)`` float32 soma positions in micrometres, x, y (dorsal up), z."""
        return self.anatomy.positions_um()[self.shown]

    def features(self) -> dict[str, np.ndarray]:
        """Per shown neuron: ``neuron`` (its index), the labels, and an atlas's statistics
        (as stored, NaN included: these are values to read, not colours)."""
        a, idx = self.anatomy, self.shown

        def labels(values: list[str] | None) -> np.ndarray:
            if values is None:
                return np.full(idx.size, "", dtype=object)
            return np.asarray(values, dtype=object)[idx]

        out: dict[str, np.ndarray] = {
            "neuron": idx.astype(np.int64),
            "superclass": labels(a.superclass),
            "cell_type": labels(a.cell_type),
            "side": labels(a.side),
            "body_id": (np.asarray(a.body_id, dtype=np.int64)[idx] if a.body_id is not None
                        else np.full(idx.size, -1, dtype=np.int64)),
        }
        if self.atlas is not None:
            from flyviz.analysis.atlas import STATISTICS

            for stat in STATISTICS:
                out[stat] = self.atlas.statistic(stat)[idx]
        return out

    def values(self, quantity: str, token: int) -> np.ndarray:
        """The quantity's values of the shown neurons at ``token`` (zeros where it has none)."""
        values = self.state.values(int(token), self.layer(quantity))
        if values is None:
            return np.zeros(self.shown.size, np.float32)
        return np.asarray(values, dtype=np.float32)[self.shown]

    def value_range(self, quantity: str, token: int | None = None) -> tuple[float, float]:
        """The quantity's colour range at ``token`` (default: the state's), as the state takes
        it (:meth:`ViewerState.value_range <flyviz.viewer.state.ViewerState.value_range>`, the
        path of every picture of it): one over the whole recording as it is now (a
        language model's, as a movie of it has; a run that grows is ranged again), or the
        token's own (a spiking brain's bins, as the window shows them)."""
        return self.state.value_range(None if token is None else int(token),
                                      self.layer(quantity))

    def rgba(self, quantity: str, token: int) -> np.ndarray:
        """``(shown, 4)`` float32 RGBA of the shown neurons at ``token``.

        Each value is placed on the quantity's colormap over its range at ``token``
        (:meth:`value_range`; ``|value|`` for ``"abs"``), as the cloud's shader does, and
        read from the colormap's table: RGB is the hue, alpha the brightness of the
        display curve (neurons glow on black under additive blending).
        """
        return colours(self.values(quantity, token), self.layer(quantity).colormap,
                       self.value_range(quantity, token))

    def token_text(self, token: int) -> str:
        """``'t=K "token"  |  text so far'`` at ``token`` ('' without a recording)."""
        rec = self.recording
        if rec is None or not len(rec):
            return ""
        return self.state.kind.frame_line(rec, int(np.clip(token, 0, len(rec) - 1)))


def colours(values: np.ndarray, colormap: str, value_range: tuple[float, float]) -> np.ndarray:
    """``(N, 4)`` float32 RGBA of ``values`` on ``colormap`` over ``value_range`` (table lookup)."""
    low, high = float(value_range[0]), float(value_range[1])
    v = np.asarray(values, dtype=np.float32)
    if colormap == "abs":
        v = np.abs(v)
    span = high - low if high > low else 1.0
    coord = np.clip((v - low) / span, 0.0, 1.0)
    coord = np.nan_to_num(coord, nan=0.5 if colormap in ("signed", "difference") else 0.0)
    return lut(colormap)[np.rint(coord * 255.0).astype(np.intp)]
