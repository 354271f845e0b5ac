"""How the brain is drawn, as plain values: colour layers and the cloud style.

One :class:`CloudStyle` is applied by every picture of the brain: the app's
brain view, its screenshots and the offscreen movie renderer
(:class:`~flyviz.render.offscreen.FrameRenderer`). It says what the cloud looks
like (background, point size relative to the canvas, brightness gain, glow)
and, through its :class:`ColourLayer`, what the colours mean.

A colour layer is *what* colours the neurons and *how*:

* the values: one number per neuron for each frame of a recording, from
  ``source(recording, index)`` (``None``: the recorded state), or the same
  values for every frame (:meth:`ColourLayer.static`);
* the colormap (:data:`~flyviz.render.colormaps.COLORMAPS`): ``"signed"`` and
  ``"abs"`` for activations, ``"difference"`` (diverging) for differences,
  ``"sequential"`` for amounts such as importance or an atlas statistic;
* the colourbar's label and units;
* the scale policy (:class:`ColourScale`): automatic and symmetric, a fixed
  limit, or a given range.

Colour a window's brain by a layer with
:meth:`flyviz.app.window.display.DisplayController.set_colour_layer`; a movie with
``export_recording(..., style=CloudStyle(layer=...))``. Examples::

    from flyviz.render.style import ColourLayer, ColourScale

    # Δx: intervened minus untouched state at the shown frame, symmetric auto scale.
    delta = ColourLayer(
        name="delta", colormap="difference", label="Δx, intervened − untouched",
        source=lambda recording, i: intervened.state(i) - untouched.state(i))

    # A per-neuron statistic, the same at every frame, over a given range.
    density = ColourLayer.static("atlas:density", atlas_density, colormap="sequential",
                                 label="fraction of tokens active",
                                 scale=ColourScale.given(0.0, 1.0))

    # Importance: each neuron coloured by its group's ΔCE, from zero up.
    importance = ColourLayer.static("importance", per_neuron_delta_ce, colormap="sequential",
                                    label="lesion ΔCE", units="nats")

Nothing here imports Qt; the values are frozen dataclasses, so a style can be
compared, copied into an export job, and changed with
:func:`dataclasses.replace`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from flyviz.render.colormaps import COLORMAPS, MODES, is_diverging

if TYPE_CHECKING:
    from flyviz.record.recording import Recording

#: ``source(recording, index) -> values``: one float per neuron, or ``None`` for nothing to show.
ValueSource = Callable[["Recording", int], "np.ndarray | None"]

#: Scale policies of :class:`ColourScale`.
SCALE_KINDS = ("auto", "fixed", "range")

#: Background of every picture of the brain (the app's, screenshots', movies').
BACKGROUND = (11 / 255, 13 / 255, 18 / 255, 1.0)

#: Canvas height (pixels) at which :attr:`CloudStyle.point_size` is the disc diameter;
#: on other canvases points scale with the height, so every size shows the same picture.
REFERENCE_HEIGHT = 720.0

#: Default colourbar labels of the activation colormaps.
_ACTIVATION_LABELS = {"signed": "activation x", "abs": "|activation x|"}


def recorded_state(recording: "Recording", index: int) -> np.ndarray | None:
    """The state the model had at frame ``index`` (the default layer's values)."""
    return None if index < 0 or index >= len(recording) else recording.state(index)


@dataclass(frozen=True)
class ColourScale:
    """How values map onto a colormap: which value is each end of the colourbar.

    Build one with :meth:`auto`, :meth:`fixed` or :meth:`given`.

    Parameters
    ----------
    kind
        ``"auto"``: from the values themselves, a ``percentile`` of
        ``|values|``; symmetric (``±p``) on a diverging colormap, ``[0, p]``
        on a sequential one (``[-p, p]`` clipped at the lowest value when a
        sequential layer has negative values). The app recomputes it for
        every shown frame; a movie computes it once over the exported frames,
        so brightness means the same thing in every frame.
        ``"fixed"``: ``±limit`` on a diverging colormap, ``[0, limit]`` otherwise.
        ``"range"``: exactly ``[low, high]`` (a diverging colormap is centred
        on the middle of the range).
    limit
        For ``"fixed"``.
    low, high
        For ``"range"``.
    percentile
        For ``"auto"``.
    """

    kind: str = "auto"
    limit: float = 1.0
    low: float = 0.0
    high: float = 1.0
    percentile: float = 99.0

    def __post_init__(self) -> None:
        if self.kind not in SCALE_KINDS:
            raise ValueError(f"scale {self.kind!r} must be one of {', '.join(SCALE_KINDS)}")
        if self.kind == "fixed" and not (math.isfinite(self.limit) and self.limit > 0):
            raise ValueError(f"a fixed colour limit must be a positive number, got {self.limit}")
        if self.kind == "range" and not (math.isfinite(self.low) and math.isfinite(self.high)
                                         and self.high > self.low):
            raise ValueError(f"colour range {self.low}..{self.high} must be finite and increasing")
        if not 0.0 < self.percentile <= 100.0:
            raise ValueError(f"percentile {self.percentile} must be in (0, 100]")

    @classmethod
    def auto(cls, percentile: float = 99.0) -> "ColourScale":
        """From the values: a ``percentile`` of ``|values|`` (symmetric on diverging maps)."""
        return cls("auto", percentile=float(percentile))

    @classmethod
    def fixed(cls, limit: float) -> "ColourScale":
        """``±limit`` (diverging colormaps) or ``[0, limit]`` (the others)."""
        return cls("fixed", limit=float(limit))

    @classmethod
    def given(cls, low: float, high: float) -> "ColourScale":
        """Exactly ``[low, high]``."""
        return cls("range", low=float(low), high=float(high))

    def resolve(self, colormap: str, values: np.ndarray | None) -> tuple[float, float]:
        """The ``(low, high)`` range for ``values`` shown with ``colormap``.

        ``values`` may be ``None`` or any shape (a sample of several frames
        stacked); non-finite entries are ignored. An automatic range over
        nothing (or all zeros) is ``±1`` / ``[0, 1]``.
        """
        diverging = is_diverging(colormap)
        if self.kind == "range":
            return float(self.low), float(self.high)
        if self.kind == "fixed":
            limit = float(self.limit)
        else:
            limit = percentile_limit(values, self.percentile)
        if diverging:
            return -limit, limit
        if colormap == "sequential" and self.kind == "auto" and values is not None:
            finite = np.asarray(values, dtype=np.float32)
            finite = finite[np.isfinite(finite)]
            if finite.size and float(finite.min()) < 0.0:
                return max(-limit, float(finite.min())), limit
        return 0.0, limit


def percentile_limit(values: np.ndarray | None, percentile: float = 99.0) -> float:
    """A positive colour limit: the ``percentile`` of ``|values|`` (1.0 for nothing, or zeros).

    Keeps the brightest ~1 % of neurons saturated at the default 99.
    """
    if values is None:
        return 1.0
    mags = np.abs(np.asarray(values, dtype=np.float32).ravel())
    mags = mags[np.isfinite(mags)]
    if mags.size == 0:
        return 1.0
    limit = float(np.percentile(mags, percentile))
    if not limit > 0.0:
        limit = float(mags.max())
    return limit if limit > 0.0 else 1.0


@dataclass(frozen=True)
class ColourLayer:
    """What colours the neurons: values, colormap, colourbar label and units, scale policy.

    Parameters
    ----------
    name
        A short identifier (``"state"``, ``"delta"``, ``"importance"``,
        ``"atlas:mean"``...); views use it to tell layers apart.
    colormap
        One of :data:`~flyviz.render.colormaps.COLORMAPS`.
    label
        The colourbar's caption, e.g. ``"Δx, intervened − untouched"``.
    units
        Shown after the label in brackets (``""``: none).
    scale
        The scale policy (default: automatic).
    source
        ``source(recording, index) -> values``, one float per neuron, or
        ``None`` when there is nothing to show for that frame. ``None``
        (the default) means the recorded state.
    """

    name: str = "state"
    colormap: str = "signed"
    label: str = "activation x"
    units: str = ""
    scale: ColourScale = field(default_factory=ColourScale)
    source: ValueSource | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.colormap not in COLORMAPS:
            raise ValueError(f"colormap {self.colormap!r} must be one of {', '.join(COLORMAPS)}")
        if not isinstance(self.scale, ColourScale):
            raise TypeError(f"scale must be a ColourScale, got {type(self.scale).__name__}")

    # ------------------------------------------------------------ building
    @classmethod
    def static(cls, name: str, values: np.ndarray, *, colormap: str = "sequential",
               label: str = "", units: str = "",
               scale: ColourScale | None = None) -> "ColourLayer":
        """A layer showing the same per-neuron ``values`` at every frame (a copy is kept)."""
        fixed = np.array(values, dtype=np.float32)
        if fixed.ndim != 1:
            raise ValueError(f"layer values must be one number per neuron, got shape {fixed.shape}")
        fixed.setflags(write=False)

        def source(recording: Any, index: int) -> np.ndarray:
            return fixed

        return cls(name=name, colormap=colormap, label=label or name, units=units,
                   scale=scale or ColourScale.auto(), source=source)

    # ------------------------------------------------------------ reading
    @property
    def is_state(self) -> bool:
        """True when the layer shows the recorded state (no source of its own)."""
        return self.source is None

    @property
    def diverging(self) -> bool:
        """True for a colormap centred on the middle of its range."""
        return is_diverging(self.colormap)

    @property
    def caption(self) -> str:
        """The colourbar's caption: label and units."""
        return f"{self.label} ({self.units})" if self.units else self.label

    def values(self, recording: "Recording", index: int) -> np.ndarray | None:
        """The layer's values at frame ``index`` of ``recording`` (``None``: nothing to show)."""
        return (self.source or recorded_state)(recording, index)

    def value_range(self, values: np.ndarray | None) -> tuple[float, float]:
        """The colourbar's ``(low, high)`` for ``values`` under this layer's scale policy."""
        return self.scale.resolve(self.colormap, values)

    def sample(self, recording: "Recording", start: int = 0, stop: int | None = None,
               samples: int = 48) -> np.ndarray:
        """Up to ``samples`` evenly spaced frames' values of ``start:stop``, stacked (float32)."""
        stop = len(recording) if stop is None else min(stop, len(recording))
        if stop <= start:
            return np.zeros((0, recording.neurons), np.float32)
        picks = np.unique(np.linspace(start, stop - 1, min(samples, stop - start)).round().astype(int))
        values = [self.values(recording, int(i)) for i in picks]
        rows = [np.asarray(r, np.float32) for r in values if r is not None]
        return np.stack(rows) if rows else np.zeros((0, recording.neurons), np.float32)

    def recording_range(self, recording: "Recording", start: int = 0,
                        stop: int | None = None, samples: int = 48) -> tuple[float, float]:
        """One range for frames ``start:stop`` (a movie's): the policy over a sample of them."""
        if self.scale.kind != "auto":
            return self.value_range(None)
        values = self.sample(recording, start, stop, samples)
        return self.value_range(values if values.size else None)


def activation_layer(mode: str = "signed", scale: ColourScale | None = None) -> ColourLayer:
    """The recorded state coloured as ``"signed"`` x or ``"abs"`` |x| (the app's default layer)."""
    if mode not in MODES:
        raise ValueError(f"activation mode {mode!r} must be one of {', '.join(MODES)}")
    return ColourLayer(name="state", colormap=mode, label=_ACTIVATION_LABELS[mode],
                       scale=scale or ColourScale.auto())


@dataclass(frozen=True)
class CloudStyle:
    """Everything about how the cloud is drawn, applied alike by the app, screenshots and movies.

    Parameters
    ----------
    layer
        What colours the neurons (see :class:`ColourLayer`).
    point_size
        Diameter of a quiet neuron's disc, in pixels on a canvas
        :data:`REFERENCE_HEIGHT` (720) pixels tall; other canvases scale it
        with their height (:meth:`point_px`), so a 1080p movie, a 2x
        screenshot and the window show the same picture.
    glow
        Halo strength of active neurons: 0 plain discs, 1 default, 2 strong.
    gain
        Brightness multiplier of every neuron; ``None`` (automatic) sets it
        from how crowded the brain is on the canvas and how active the shown
        values are (:func:`flyviz.render.cloud.density_gain`), so that a dense
        view does not saturate to white under additive blending.
    background
        RGBA of the canvas behind the brain.
    """

    layer: ColourLayer = field(default_factory=ColourLayer)
    point_size: float = 3.0
    glow: float = 1.0
    gain: float | None = None
    background: tuple[float, float, float, float] = BACKGROUND

    def __post_init__(self) -> None:
        if not (math.isfinite(self.point_size) and self.point_size > 0):
            raise ValueError(f"point size must be positive, got {self.point_size}")
        if not (math.isfinite(self.glow) and 0.0 <= self.glow <= 2.0):
            raise ValueError(f"glow {self.glow} must be between 0 and 2")
        if self.gain is not None and not (math.isfinite(self.gain) and self.gain > 0):
            raise ValueError(f"gain must be a positive number or None, got {self.gain}")
        if len(self.background) != 4:
            raise ValueError("background must be RGBA")

    def point_px(self, canvas_height: float) -> float:
        """Disc diameter in pixels on a canvas ``canvas_height`` pixels tall (at least 1)."""
        return max(1.0, float(self.point_size) * float(canvas_height) / REFERENCE_HEIGHT)

    def with_layer(self, layer: ColourLayer) -> "CloudStyle":
        """This style colouring by ``layer``."""
        return dataclasses.replace(self, layer=layer)


def apply_style(cloud: Any, style: CloudStyle, canvas_height: float,
                value_range: tuple[float, float] | None = None) -> None:
    """Set a :class:`~flyviz.render.cloud.NeuronCloudVisual` up as ``style`` says.

    Parameters
    ----------
    cloud
        The cloud (node or visual).
    style
        The style.
    canvas_height
        Logical height of the canvas the cloud is drawn on (for the point size).
    value_range
        The colour range to show now; by default the layer's fixed or given
        range (an automatic one is set by whoever knows the values).
    """
    layer = style.layer
    cloud.set_colormap(layer.colormap)
    if value_range is None and layer.scale.kind != "auto":
        value_range = layer.value_range(None)
    if value_range is not None:
        cloud.set_range(*value_range)
    cloud.set_glow(style.glow)
    cloud.set_point_size(style.point_px(canvas_height))
    if style.gain is not None:
        cloud.set_gain(style.gain)
