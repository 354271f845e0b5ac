"""Every colour layer of flyviz, each with its one rule, and where the neurons are drawn.

A colour layer (:class:`~flyviz.render.style.ColourLayer`) says what colours the
neurons and how. Every picture of the brain — the window, movies, stills,
figures, the notebook widget and napari — builds its layers here, so a layer
means the same thing wherever it is shown. Each kind has one rule for its
range, for NaN and for its caption, written once in its builder:

=====================  ==========================================================
key                    rule
=====================  ==========================================================
``state``              the recorded activation x, ``"signed"`` or ``"abs"``; the
                       display's scale (automatic 99th percentile of |x|, or a
                       fixed limit) — :func:`activation_layer`
``delta``              Δx, intervened − untouched, of a comparison; diverging,
                       symmetric automatic scale; nothing where the untouched run
                       has no frame — :func:`delta_layer`
``atlas:<statistic>``  an atlas statistic; the mean on the signed colours, the
                       others sequential, from zero; automatic scale (the 99th
                       percentile); NaN drawn at zero — :func:`atlas_layer`
``importance``         a lesion map's ΔCE per neuron (its group's); linear from 0
                       or log10; ≤ 0 and NaN at the bottom — :func:`importance_layer`
``estimate``           the per-neuron ΔCE_est, as ``importance`` — :func:`estimate_layer`
``flow``               a trace's node flow at a lag; diverging over the largest
                       |flow| of that step — :func:`flyviz.viewer.flow.flow_layer`
``patching``           a patching effect per neuron, from the corrupted run's value
                       (dark) to the clean run's (bright); NaN at the bottom —
                       :func:`patching_layer`
``screen``             a spiking screen's change in one target neuron's rate when
                       each neuron's set is silenced or activated (Hz); diverging,
                       ±the largest change; NaN (a neuron in no set) drawn at 0,
                       the neutral middle — :func:`screen_layer`
``spike_rate``         a spiking recording's rate per neuron in the bin, Hz;
                       sequential from 0, automatic scale — :func:`rate_layer`
``spike_flash``        a spiking recording's spikes, each flashing at its bin and
                       fading by e^(−t/τ), τ 15 ms; sequential over a fixed
                       0..1 spike — :func:`flash_layer`
=====================  ==========================================================

:data:`LAYERS` is the registry: per key its *Colour by* title and tooltip, which
the window's menu, the notebook's and napari's quantity lists read
(:meth:`flyviz.viewer.state.ViewerState.offer_layer`). It is open: the spiking
layers, and any other kind of model's, come from their kind
(:meth:`flyviz.kinds.ModelKind.colour_layers`), registered through the
``flyviz.kinds`` entry points.

:func:`drawing_anatomy` is the one choice of where the neurons are drawn: the
model's anatomy, a graph layout when it has no positions, or a generic ball
when the model is not at hand, with the line that says so.

Nothing here imports Qt or vispy.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from flyviz.errors import InputError
from flyviz.render.style import ColourLayer, ColourScale, activation_layer, recorded_state
from flyviz.viewer.flow import FLOW, flow_layer

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.analysis.atlas import Atlas
    from flyviz.model.checkpoint import Anatomy
    from flyviz.record.recording import Recording

__all__ = ["ATLAS", "ATLAS_STATISTICS", "DELTA", "ESTIMATE", "FLOW", "IMPORTANCE", "LAYERS",
           "PATCHING", "SCREEN", "STATE", "LayerKind", "LayerRegistry", "Placement", "ScreenEffect",
           "activation_layer", "atlas_key", "atlas_layer", "delta_layer", "delta_state",
           "drawing_anatomy", "estimate_layer", "flow_layer", "importance_colours",
           "importance_layer", "patching_layer", "screen_layer", "values_layer", "FLASH",
           "FLASH_TAU_MS", "RATE", "flash_layer", "flash_state", "rate_layer"]

#: The recorded state (always offered).
STATE = "state"
#: A comparison's difference.
DELTA = "delta"
#: The prefix of an atlas statistic's key (``"atlas:mean"``).
ATLAS = "atlas:"
#: A lesion map's importance.
IMPORTANCE = "importance"
#: The per-neuron estimated lesions.
ESTIMATE = "estimate"
#: A patching effect.
PATCHING = "patching"
#: A spiking screen's change in one neuron's rate.
SCREEN = "screen"
#: A spiking recording's rates.
RATE = "spike_rate"
#: A spiking recording's spikes, flashing and fading.
FLASH = "spike_flash"
#: How fast a spike's flash fades, ms (the decay peers use to show spikes: flymsg's 15 ms).
FLASH_TAU_MS = 15.0

#: Per atlas statistic: its menu title, colormap and caption (``{threshold}`` filled in).
ATLAS_STATISTICS: dict[str, tuple[str, str, str]] = {
    "mean": ("Atlas: &mean activation", "signed", "atlas mean h"),
    "std": ("Atlas: &standard deviation", "sequential", "atlas std of h"),
    "density": ("Atlas: &density", "sequential",
                "atlas density (share of tokens |x| > {threshold})"),
    "max": ("Atlas: ma&ximum", "sequential", "atlas largest h"),
    "selectivity": ("Atlas: s&electivity", "sequential",
                    "atlas selectivity ((top token mean − mean) / std)"),
}


@dataclass(frozen=True)
class LayerKind:
    """One kind of colour layer: its key, its *Colour by* title and its tooltip; a kind of
    model's own layer (:meth:`flyviz.kinds.ModelKind.colour_layers`) also says how it is
    built (``build() -> ColourLayer``, offered by a viewer state showing that kind)."""

    key: str
    title: str
    tip: str
    build: "LayerBuilder | None" = field(default=None, compare=False)


def atlas_key(statistic: str) -> str:
    """The key of an atlas statistic's layer (``"atlas:mean"``)."""
    return f"{ATLAS}{statistic}"


def _kinds() -> dict[str, LayerKind]:
    kinds = [
        LayerKind(STATE, "&Live state (activation x)",
                  "The recorded activation at the shown token (the Settings' colours)"),
        LayerKind(DELTA, "&Δx: intervened − untouched",
                  "The comparison's difference at the shown token"),
        *(LayerKind(atlas_key(name), title,
                    "Colour every neuron by this statistic of the open atlas")
          for name, (title, _colormap, _caption) in ATLAS_STATISTICS.items()),
        LayerKind(IMPORTANCE, "Lesion &importance (ΔCE)",
                  "Colour every neuron by its group's ΔCE in the open lesion map"),
        LayerKind(ESTIMATE, "Es&timated lesions (ΔCE_est, every neuron)",
                  "Colour every neuron by its own estimated ΔCE of being silenced"),
        LayerKind(FLOW, "&Flow (Why?)",
                  "Colour every neuron by the part of the traced logit it carries"),
        LayerKind(PATCHING, "&Patching effect",
                  "Colour every neuron by how much restoring it brings the clean answer back"),
        LayerKind(SCREEN, "&Screen: Δ rate of the target",
                  "Colour every neuron by the change in the screen's target neuron's rate "
                  "when that neuron (or its set) is silenced or activated"),
    ]
    return {kind.key: kind for kind in kinds}


class LayerRegistry(Mapping[str, LayerKind]):
    """Every kind of colour layer by key, in the *Colour by* menu's order: flyviz's own,
    then each registered kind of model's (:meth:`flyviz.kinds.ModelKind.colour_layers`,
    read when first asked for: the kinds register through entry points)."""

    def __init__(self, own: dict[str, LayerKind]) -> None:
        self._own = dict(own)
        self._all: dict[str, LayerKind] | None = None
        self._generation = -1

    def _layers(self) -> dict[str, LayerKind]:
        from flyviz.kinds import registered_kinds, registry_generation

        # The kinds' layers are read again when the registered kinds changed since.
        generation = registry_generation()
        if self._all is None or generation != self._generation:
            layers = dict(self._own)
            for kind in registered_kinds().values():
                for layer in kind.colour_layers():
                    layers.setdefault(layer.key, layer)
            self._all, self._generation = layers, generation
        return self._all

    def forget(self) -> None:
        """Read the kinds' layers again when next asked."""
        self._all = None

    def __getitem__(self, key: str) -> LayerKind:
        # flyviz's own layers are found without reading the kinds' entry points
        own = self._own.get(key)
        return own if own is not None else self._layers()[key]

    def __contains__(self, key: object) -> bool:
        return key in self._own or key in self._layers()

    def __iter__(self) -> Iterator[str]:
        return iter(self._layers())

    def __len__(self) -> int:
        return len(self._layers())


#: Every kind of colour layer, by key, in the *Colour by* menu's order.
LAYERS = LayerRegistry(_kinds())


# ---------------------------------------------------------------- the comparison
def delta_state(recording: "Recording", index: int) -> np.ndarray | None:
    """``x_intervened − x_untouched`` at frame ``index`` (``None`` without an untouched frame)."""
    baseline = recording.baseline
    if baseline is None or not 0 <= index < min(len(recording), len(baseline)):
        return None
    return recording.state(index).astype(np.float32) - baseline.state(index).astype(np.float32)


def delta_layer() -> ColourLayer:
    """Δx: the intervened state minus the untouched one at the shown frame.

    Diverging about 0 on a symmetric automatic scale (a difference has no fixed
    size); a frame the untouched run does not have shows nothing.
    """
    return ColourLayer(name=DELTA, colormap="difference", label="Δx, intervened − untouched",
                       scale=ColourScale.auto(), source=delta_state)


# ---------------------------------------------------------------- atlas statistics
def atlas_layer(atlas: "Atlas", statistic: str) -> ColourLayer:
    """A colour layer of the atlas statistic ``statistic`` (one of :data:`ATLAS_STATISTICS`).

    The mean is an activation, shown in the signed activation colours on a
    symmetric automatic scale; the others are amounts, on the sequential
    colormap from zero, automatic (the 99th percentile is the top of the bar).
    The density too, though a share of tokens could be drawn over a fixed
    0..1 (napari's rule before the hosts shared this one): on a sparse model
    few neurons come near 1, and a 0..1 bar leaves most of the cloud dark with
    the sparse neurons told apart by nothing; the percentile spreads the
    colours over the densities there are, as for every other amount, and the
    caption says it is a share (on the demo atlas the two tops are 0.98 and 1).

    A neuron the atlas has no value for (NaN: never active, a zero spread) is
    drawn at zero. Why not keep the NaN: the cloud's shader has no colour for
    it (a NaN uploaded to OpenGL is drawn black by one driver, white by
    another), and every host must draw the same picture; at zero it sits at
    the bottom of a sequential bar and at the neutral middle of the signed one,
    which is also where napari's table lookup put a NaN. The napari features
    keep the stored values, NaN included.
    """
    if statistic not in ATLAS_STATISTICS:
        raise InputError(f"unknown atlas statistic {statistic!r}; choose one of "
                         f"{', '.join(ATLAS_STATISTICS)}")
    _title, colormap, caption = ATLAS_STATISTICS[statistic]
    threshold = atlas.info.get("density_threshold")
    caption = caption.format(threshold=f"{float(threshold):g}" if threshold is not None else "t")
    values = np.nan_to_num(atlas.statistic(statistic), nan=0.0, posinf=0.0, neginf=0.0)
    return ColourLayer.static(atlas_key(statistic), values, colormap=colormap, label=caption,
                              scale=ColourScale.auto())


# ---------------------------------------------------------------- lesions
def importance_colours(key: str, values: np.ndarray, log: bool, label: str,
                       units: str = "nats/token") -> ColourLayer:
    """Each neuron coloured by ``values`` on the sequential colormap, with its colourbar.

    Linear (``log=False``): over ``[0, largest]``. Logarithmic: ``log10 value``
    over ``[log10 floor, log10 largest]``, the floor a third of the smallest
    positive value, so values that differ by decades are all told apart. A
    value ≤ 0 (a lesion that did not raise the cross-entropy) and NaN (a
    neuron in no group) are drawn at the bottom of the colourbar.
    """
    values = np.asarray(values, dtype=np.float64)
    finite = values[np.isfinite(values)]
    top = float(finite.max()) if finite.size else 0.0
    values = np.where(np.isfinite(values), values, 0.0)
    if log and top > 0.0:
        floor = float(finite[finite > 0.0].min()) / 3.0
        logs = np.log10(np.maximum(values, floor))
        return ColourLayer.static(key, logs, colormap="sequential", label=f"log10 {label}",
                                  units=units,
                                  scale=ColourScale.given(np.log10(floor), np.log10(top)))
    return ColourLayer.static(key, values, colormap="sequential", label=label, units=units,
                              scale=ColourScale.given(0.0, top if top > 0.0 else 1e-3))


def importance_layer(values: np.ndarray, log: bool = False, what: str = "silenced"
                     ) -> ColourLayer:
    """Each neuron coloured by its group's ΔCE in a lesion map (``what``: how the group was
    lesioned); see :func:`importance_colours`."""
    return importance_colours(IMPORTANCE, values, log, f"ΔCE, group {what}")


def estimate_layer(values: np.ndarray, log: bool = True) -> ColourLayer:
    """Each neuron coloured by its own estimated ``ΔCE_est`` (see :func:`importance_colours`)."""
    return importance_colours(ESTIMATE, values, log, "ΔCE_est, neuron silenced")


# ---------------------------------------------------------------- patching
def patching_layer(values: np.ndarray, corrupted: float, clean: float,
                   label: str = "p(answer), patched") -> ColourLayer:
    """Each neuron coloured by the effect of restoring its group (a causal trace's cell).

    Sequential from the corrupted run's value (dark) to the clean run's
    (bright), as the Patching dock's heatmap; a neuron in no group (NaN) is
    drawn at the bottom.
    """
    low, high = sorted((float(corrupted), float(clean)))
    if not high > low:
        high = low + 1e-6
    values = np.where(np.isfinite(values), np.asarray(values, np.float64), low)
    return ColourLayer.static(PATCHING, values, colormap="sequential", label=label,
                              scale=ColourScale.given(low, high))


# ---------------------------------------------------------------- spiking screens
@dataclass(frozen=True)
class ScreenEffect:
    """What a spiking screen did to one target neuron, per neuron of the brain.

    Attributes
    ----------
    values
        ``(neurons,)`` the change of the target's rate (Hz, from the baseline run) when
        that neuron's set was run; NaN for a neuron in no set
        (:meth:`flyviz.spiking.screen.ScreenResult.neuron_values`).
    target
        The target neuron's index.
    target_name
        How the caption names it (a root id, a cell type).
    mode
        ``"silence"`` or ``"activate"``: what was done to each set.
    baseline_hz
        The target's rate in the baseline run.
    """

    values: np.ndarray
    target: int
    target_name: str = ""
    mode: str = "silence"
    baseline_hz: float = 0.0

    def __post_init__(self) -> None:
        values = np.array(self.values, dtype=np.float64)
        if values.ndim != 1:
            raise InputError(f"a screen's effect needs one value per neuron, not shape "
                             f"{values.shape}")
        if self.mode not in ("silence", "activate"):
            raise InputError(f"a screen's mode is 'silence' or 'activate', not {self.mode!r}")
        if not 0 <= int(self.target) < values.shape[0]:
            raise InputError(f"the screen's target {self.target} is not one of its "
                             f"{values.shape[0]:,} neurons")
        values.setflags(write=False)
        object.__setattr__(self, "values", values)

    @property
    def caption(self) -> str:
        """What the colourbar says (without the units)."""
        name = self.target_name or f"neuron {int(self.target)}"
        done = "silenced" if self.mode == "silence" else "activated"
        return f"Δ rate of {name} when the neuron's set is {done}"


def screen_layer(effect: ScreenEffect) -> ColourLayer:
    """Each neuron coloured by the change in the target's rate when its set was run.

    Diverging about 0 over ±the largest |change| (a fixed range for the whole screen, so
    a colour means one rate change at every bin and in every picture of it; 1 mHz when
    nothing changed). A neuron in no set (NaN) is drawn at 0, the neutral middle, as the
    atlas draws a missing value: the cloud's shader has no colour for NaN.
    """
    values = np.asarray(effect.values, dtype=np.float64)
    finite = np.abs(values[np.isfinite(values)])
    top = float(finite.max()) if finite.size else 0.0
    return ColourLayer.static(SCREEN, np.where(np.isfinite(values), values, 0.0),
                              colormap="difference", label=effect.caption, units="Hz",
                              scale=ColourScale.fixed(top if top > 0.0 else 1e-3))

# ---------------------------------------------------------------- spikes
def flash_state(recording: "Recording", index: int, tau_ms: float = FLASH_TAU_MS
                ) -> np.ndarray | None:
    """Each neuron's spikes up to bin ``index`` of a spiking recording, faded:
    ``sum_j spikes_j * exp(-(index - j) * bin / tau)`` (per trial), over the bins a flash is
    still above 1/256 of its start. A bin's spikes are its rate (Hz, the recorded state)
    times the bin's length; ``None`` outside the recording."""
    if not 0 <= int(index) < len(recording):
        return None
    from flyviz.kinds import kind_of_recording

    bin_ms = float(kind_of_recording(recording).recording_axis(recording).step)
    decay = float(np.exp(-bin_ms / float(tau_ms)))
    reach = max(1, int(np.ceil(np.log(256.0) * float(tau_ms) / bin_ms)))
    index = int(index)
    out = np.zeros(recording.neurons, dtype=np.float32)
    for j in range(max(0, index - reach + 1), index + 1):
        out += recording.state(j).astype(np.float32) * np.float32(decay ** (index - j))
    return out * np.float32(bin_ms / 1000.0)


def rate_layer(scale: ColourScale | None = None) -> ColourLayer:
    """Each neuron's firing rate in the shown bin (the recorded state of a spiking recording,
    Hz), on the sequential colours from 0 with ``scale`` (default: the automatic one)."""
    return ColourLayer(name=RATE, colormap="sequential", label="firing rate in the bin",
                       units="Hz", scale=scale if scale is not None else ColourScale.auto(),
                       source=recorded_state)


def flash_layer(tau_ms: float = FLASH_TAU_MS) -> ColourLayer:
    """Spikes that flash and fade: each neuron by its spikes of the shown bin and the bins
    before it, each fading by ``exp(-t / tau_ms)`` (:func:`flash_state`), on the sequential
    colours over a fixed 0..1 spike, so one spike lights a neuron fully at its bin and a
    silent neuron fades out over about ``4 tau``. NaN does not occur (rates are counts)."""
    if not (np.isfinite(tau_ms) and tau_ms > 0):
        raise InputError(f"a flash must fade over a positive time, not {tau_ms} ms")

    def source(recording: "Recording", index: int) -> np.ndarray | None:
        return flash_state(recording, index, tau_ms)

    # No unit after the label: it names them already (the caption read "spikes, fading
    # (τ 15 ms) (spikes)").
    return ColourLayer(name=FLASH, colormap="sequential",
                       label=f"spikes, fading (τ {float(tau_ms):g} ms)", units="",
                       scale=ColourScale.fixed(1.0), source=source)


# ---------------------------------------------------------------- any values
def values_layer(name: str, values: np.ndarray, neurons: int, *, colormap: str = "sequential",
                 label: str = "") -> ColourLayer:
    """The same per-neuron ``values`` at every token (a trace's summed flows, an importance).

    Raises
    ------
    InputError
        For values that are not one number per neuron, or an unknown colormap.
    """
    try:
        values = np.asarray(values, dtype=np.float32)
    except (TypeError, ValueError):     # "abc", a dict: numpy's own words name nothing here
        raise InputError(f"{name}: values must be numbers, one per neuron ({int(neurons):,}), "
                         f"not {type(values).__name__}") from None
    if values.shape != (int(neurons),):
        raise InputError(f"{name}: {values.shape} values given; colouring needs one per neuron "
                         f"({int(neurons):,})")
    try:
        return ColourLayer.static(name, values, colormap=colormap, label=label)
    except ValueError as exc:
        raise InputError(str(exc)) from None


# ---------------------------------------------------------------- where neurons are drawn
@dataclass(frozen=True)
class Placement:
    """Where a model's neurons are drawn, and the line that says it is not their anatomy.

    ``note`` is ``None`` for the model's own soma positions; otherwise it says
    what stands in (a graph layout, a generic ball) and every host shows it:
    a warning from the library, ``flyviz: ...`` on stderr, a line in the
    notebook widget.
    """

    anatomy: "Anatomy"
    note: str | None = None


def drawing_anatomy(model: Any, neurons: int, what: str = "", *,
                    missing: str = "") -> Placement:
    """Where to draw ``neurons`` neurons: the one choice every host makes.

    Parameters
    ----------
    model
        A :class:`~flyviz.record.runner.Model` (its
        :meth:`~flyviz.record.runner.Model.drawing_anatomy`: the checkpoint's
        anatomy, else a graph layout of its synapses), or ``None``.
    neurons
        How many neurons the recording or atlas has.
    what
        The thing drawn, for the note (a file name).
    missing
        Why no model is at hand, for the note (default: "no model was given").

    Returns
    -------
    Placement
        The anatomy, and a note when it is a stand-in: a graph layout (the
        model has no soma positions) or a generic ball (no model of that size).
    """
    subject = f"{what}: " if what else ""
    if model is not None and int(model.neurons) == int(neurons):
        placed = model.drawing_anatomy()
        if not hasattr(model, "checkpoint"):    # a model that places its neurons itself
            # A spiking brain without somata (a ConnecTorch .ct brain, the 166k MaleCNS
            # set) is placed on a generic ball: said as a checkpoint's graph layout is,
            # not drawn as if the points were its anatomy.
            if placed.kind == "layout":
                return Placement(placed, f"{subject}{model.name} has no neuron positions; "
                                         "neurons are placed on a generic layout")
            return Placement(placed)
        anatomy = model.checkpoint.anatomy
        if anatomy is None or anatomy.n_valid == 0:
            return Placement(placed, f"{subject}{model.name} has no neuron positions; placing "
                                     "neurons by a graph layout")
        return Placement(placed)
    from flyviz.model.layout import ball_layout

    why = missing or "no model was given"
    return Placement(ball_layout(int(neurons)),
                     f"{subject}{why}; neurons are placed on a generic layout")


#: ``build() -> layer``: a registered entry's layer, built when it is chosen.
LayerBuilder = Callable[[], "ColourLayer | None"]
