"""What the napari plugin and the notebook widget show: one brain, its labels and its colours.

:class:`BrainSource` is the small adapter between flyviz's recordings and
the two hosts that embed flyviz's picture of the brain (:mod:`flyviz.napari`
and :mod:`flyviz.notebook`). It answers the questions they both ask, and
nothing else:

* where the neurons are (:attr:`BrainSource.positions_um`, the neurons with
  a known soma only) and what they are (:meth:`BrainSource.features`:
  superclass, cell type, side, body id, and an atlas's statistics);
* which colour quantities there are (:attr:`BrainSource.quantities`:
  ``"signed"`` h, ``"abs"`` |h|, ``"delta"`` Δx of a comparison, ``"atlas:mean"``...),
  each a :class:`~flyviz.render.style.ColourLayer`;
* the colours of one token (:meth:`BrainSource.rgba`), in flyviz's
  colormaps (:mod:`flyviz.render.colormaps`) over one range per quantity for
  the whole recording, the range a movie of it uses
  (:meth:`ColourLayer.recording_range`), so a colour means the same value at
  every token;
* the text at a token (:meth:`BrainSource.token_text`).

The recording stays memory-mapped: a colour is computed from one token's
state when it is asked for, and nothing of the other tokens is read.

When flyviz's Qt-free viewer state lands, this class is where the hosts
switch to it: they read only the names above.

Nothing here imports Qt or vispy.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from flyviz.errors import InputError, RecordingError
from flyviz.render.colormaps import lut
from flyviz.render.style import ColourLayer, ColourScale, activation_layer

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.analysis.atlas import Atlas
    from flyviz.model.checkpoint import Anatomy
    from flyviz.record.recording import Recording
    from flyviz.record.runner import Model

#: Label columns of :meth:`BrainSource.features`, in order.
LABEL_COLUMNS = ("superclass", "cell_type", "side", "body_id")

#: Colour quantity of a comparison's difference (intervened minus untouched state).
DELTA = "delta"


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


def _delta_layer(recording: "Recording") -> ColourLayer:
    baseline = recording.baseline
    assert baseline is not None

    def source(rec: Any, index: int) -> np.ndarray | None:
        if index < 0 or index >= min(len(rec), len(baseline)):
            return None
        return rec.state(index) - baseline.state(index)

    return ColourLayer(name=DELTA, colormap="difference", label="Δx, intervened − untouched",
                       source=source)


def resolve_model(spec: str) -> "Model | None":
    """The model a recording or atlas names, when it can be had without a download.

    ``"demo"`` and local folders are loaded; a hub id is loaded only if the
    hub's cache already holds it (nothing is downloaded behind the user's
    back). ``None`` when it cannot be had.
    """
    from flyviz.errors import FlyvizError
    from flyviz.record.runner import Model

    spec = str(spec or "").strip()
    if not spec:
        return None
    local = spec == "demo" or Path(spec).expanduser().is_dir()
    if not local:
        return None
    try:
        return Model.load(spec)
    except FlyvizError:
        return None


@dataclass
class BrainSource:
    """One brain to show: positions, labels and per-token colours of a recording (or an atlas).

    Parameters
    ----------
    anatomy
        Where the neurons are drawn (``Model.drawing_anatomy()``).
    recording
        The run whose states colour the neurons, or ``None`` (an atlas alone).
    atlas
        An :class:`~flyviz.analysis.atlas.Atlas` of the same model, or ``None``:
        its statistics become features and colour quantities.
    name
        A short name for the layers (the file's stem).

    Raises
    ------
    RecordingError
        When the anatomy, the recording and the atlas disagree on the number of neurons.
    """

    anatomy: "Anatomy"
    recording: "Recording | None" = None
    atlas: "Atlas | None" = None
    name: str = "flyviz"
    _ranges: dict[str, tuple[float, float]] = field(default_factory=dict, repr=False)
    _layers: dict[str, ColourLayer] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        n = int(self.anatomy.positions.shape[0])
        if self.recording is not None and self.recording.neurons != n:
            raise RecordingError(f"the recording has {self.recording.neurons:,} neurons but its "
                                 f"model's anatomy has {n:,}; open it with the model it was made with")
        if self.atlas is not None and self.atlas.neurons != n:
            raise RecordingError(f"the atlas has {self.atlas.neurons:,} neurons but the model's "
                                 f"anatomy has {n:,}")
        #: Indices of the neurons drawn (known soma), in the order of every per-point array.
        self.shown = np.flatnonzero(np.asarray(self.anatomy.valid, dtype=bool))
        layers: dict[str, ColourLayer] = {}
        if self.recording is not None:
            layers["signed"] = activation_layer("signed")
            layers["abs"] = activation_layer("abs")
            if self.recording.baseline is not None:
                layers[DELTA] = _delta_layer(self.recording)
        if self.atlas is not None:
            from flyviz.analysis.atlas import STATISTICS

            for stat in STATISTICS:
                values = self.atlas.statistic(stat)
                colormap = "signed" if stat == "mean" else "sequential"
                scale = ColourScale.given(0.0, 1.0) if stat == "density" else ColourScale.auto()
                layers[f"atlas:{stat}"] = ColourLayer.static(f"atlas:{stat}", values,
                                                             colormap=colormap, label=stat,
                                                             scale=scale)
        self._layers = layers

    # ------------------------------------------------------------ opening
    @classmethod
    def open(cls, path: str | Path, model: "Model | None" = None) -> "BrainSource":
        """A source for a ``.flyrec`` file or an atlas folder.

        Parameters
        ----------
        path
            The recording or the atlas store.
        model
            The model it was made with (its anatomy places the neurons). By
            default the model the file names, when it can be loaded without a
            download (see :func:`resolve_model`); otherwise the neurons are
            spread on a generic ball and a warning says so.

        Raises
        ------
        RecordingError
            A missing, damaged or mismatched recording (one line).
        flyviz.analysis.atlas.AtlasError
            An atlas that cannot be read.
        """
        p = Path(path)
        recording = None
        atlas = None
        if is_atlas_dir(p):
            from flyviz.analysis.atlas import Atlas

            atlas = Atlas(p)
            spec = str(atlas.info.get("model", {}).get("spec") or atlas.model_name)
            neurons = atlas.neurons
        else:
            from flyviz.record.recording import Recording

            # verify=False: opening stays instant whatever the size; a damaged frame
            # still fails with one line when it is shown.
            recording = Recording.load(p, verify=False)
            spec, neurons = str(recording.metadata.get("model", "")), recording.neurons
        if model is None:
            model = resolve_model(spec)
        if model is not None and model.neurons == neurons:
            anatomy = model.drawing_anatomy()
        else:
            from flyviz.model.layout import ball_layout

            warnings.warn(f"{p.name}: its model {spec or '(unnamed)'} could not be loaded here; "
                          "neurons are placed on a generic layout", stacklevel=2)
            anatomy = ball_layout(neurons)
        if atlas is not None and model is not None and model.neurons == neurons:
            note = atlas.mismatch(model.checkpoint)
            if note is not None:
                warnings.warn(note, stacklevel=2)
        return cls(anatomy, recording, atlas, name=p.stem or p.name)

    # ------------------------------------------------------------ reading
    @property
    def tokens(self) -> int:
        """Number of tokens (frames) of the recording (0 for an atlas alone)."""
        return 0 if self.recording is None else len(self.recording)

    @property
    def quantities(self) -> tuple[str, ...]:
        """The colour quantities this source can show, the default first."""
        return tuple(self._layers)

    def add_quantity(self, name: str, values: np.ndarray, *, colormap: str = "sequential",
                     label: str = "") -> str:
        """Add a quantity with the same per-neuron ``values`` at every token (e.g. a trace's
        summed node flows, an importance); returns its name.

        Raises
        ------
        InputError
            For values that are not one number per neuron, or an unknown colormap.
        """
        values = np.asarray(values, dtype=np.float32)
        if values.shape != (self.anatomy.positions.shape[0],):
            raise InputError(f"{name}: {values.shape} values given; colouring needs one per neuron "
                             f"({self.anatomy.positions.shape[0]:,})")
        try:
            self._layers[name] = ColourLayer.static(name, values, colormap=colormap, label=label)
        except ValueError as exc:
            raise InputError(str(exc)) from None
        self._ranges.pop(name, None)
        return name

    def layer(self, quantity: str) -> ColourLayer:
        """The :class:`~flyviz.render.style.ColourLayer` of a quantity."""
        try:
            return self._layers[quantity]
        except KeyError:
            raise InputError(f"unknown colour quantity {quantity!r}; choose one of "
                             f"{', '.join(self._layers) or '(none)'}") from None

    @property
    def positions_um(self) -> np.ndarray:
        """``(shown, 3)`` float32 soma positions in micrometres, x, y (dorsal up), z."""
        return self.anatomy.positions_um()[self.shown]

    def features(self) -> dict[str, np.ndarray]:
        """Per shown neuron: ``neuron`` (its index), the labels, and an atlas's statistics."""
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
        layer = self.layer(quantity)
        values = None
        if self.recording is not None:
            values = layer.values(self.recording, int(token))
        elif not layer.is_state:
            values = layer.values(None, 0)  # type: ignore[arg-type]  # static: ignores both
        if values is None:
            return np.zeros(self.shown.size, np.float32)
        return np.asarray(values, dtype=np.float32)[self.shown]

    def value_range(self, quantity: str) -> tuple[float, float]:
        """The quantity's colour range, one for the whole recording (as a movie of it has)."""
        if quantity not in self._ranges:
            layer = self.layer(quantity)
            if self.recording is not None:
                self._ranges[quantity] = layer.recording_range(self.recording)
            else:
                self._ranges[quantity] = layer.value_range(self.values(quantity, 0))
        return self._ranges[quantity]

    def forget_ranges(self) -> None:
        """Recompute the ranges on next use (the recording grew)."""
        self._ranges.clear()

    def rgba(self, quantity: str, token: int) -> np.ndarray:
        """``(shown, 4)`` float32 RGBA of the shown neurons at ``token``.

        Each value is placed on the quantity's colormap over its range
        (``|value|`` for ``"abs"``), as the cloud's shader does, and read from
        the colormap's table: RGB is the hue, alpha the brightness of the
        display curve (neurons glow on black under additive blending).
        """
        return colours(self.values(quantity, token), self.layer(quantity).colormap,
                       self.value_range(quantity))

    def token_text(self, token: int) -> str:
        """``'t=K "token"  |  text so far'`` at ``token`` ('' without a recording)."""
        rec = self.recording
        if rec is None or not len(rec):
            return ""
        k = int(np.clip(token, 0, len(rec) - 1))
        frame_text = rec.token_texts[k]
        return f"t={k} {frame_text!r} | {rec.text_so_far(k)}"


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
