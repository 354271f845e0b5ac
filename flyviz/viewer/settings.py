"""The viewer state's settings groups: how the brain is drawn, how runs go, meshes, the docks.

Each group is an evented dataclass (psygnal): setting a field validates it
(a bad value raises :class:`~flyviz.viewer.state.ViewerError` and changes
nothing) and then emits ``group.events.<field>(new, old)``. Widgets bind to
these signals; code and tests set the fields directly::

    state.display.point_size = 4.0
    state.run.max_new_tokens = 6

No Qt here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

from psygnal import SignalGroupDescriptor

from flyviz.analysis.causal_file import PATCHING_MEASURES
from flyviz.errors import InputError
from flyviz.record.run import MAX_NEW_TOKENS_LIMIT, GenerationSettings
from flyviz.render.colormaps import MODES
from flyviz.render.style import ColourLayer, ColourScale, activation_layer

__all__ = ["COMPARE_VIEWS", "DockSettings", "DisplaySettings", "MAX_NEW_TOKENS_LIMIT",
           "MeshSettings", "RunSettings", "STATES_DTYPES", "ViewerError"]

#: How new recordings may store their states.
STATES_DTYPES = ("float16", "float32")

#: What the whole-brain raster shows of a comparison: the intervened run, the untouched one, Δx.
COMPARE_VIEWS = ("intervened", "untouched", "delta")


class ViewerError(InputError):
    """A value the viewer state cannot take (an out-of-range token, an unknown colour layer...)."""


def _number(name: str, value: Any, low: float, high: float) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ViewerError(f"{name} must be a number, got {value!r}") from None
    if not (math.isfinite(number) and low <= number <= high):
        raise ViewerError(f"{name} {number:g} is out of range: it must be {low:g} to {high:g}")
    return number


def _whole(name: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
        raise ViewerError(f"{name} must be a whole number, got {value!r}")
    number = int(value)
    if not low <= number <= high:
        raise ViewerError(f"{name} {number} is out of range: it must be {low} to {high}")
    return number


@dataclass
class DisplaySettings:
    """How the recorded state is drawn (the Settings dock's *Display* group).

    Parameters
    ----------
    mode
        ``"signed"`` (diverging colours) or ``"abs"`` (|h|, sequential).
    auto_scale
        Scale the colours to each frame's 99th percentile of |h|; else to ``limit``.
    limit
        The activation at the end of the colour range when not automatic.
    point_size
        Disc diameter of a quiet neuron, pixels at 720 lines.
    glow
        Halo strength, 0 to 2.
    smoothing_s
        Time constant of the easing between frames (s); 0: none.
    gain
        Brightness gain, or ``None`` for automatic (from the crowding on screen).
    """

    events: ClassVar[SignalGroupDescriptor] = SignalGroupDescriptor()

    mode: str = "signed"
    auto_scale: bool = True
    limit: float = 1.0
    point_size: float = 2.0
    glow: float = 0.6
    smoothing_s: float = 0.12
    gain: float | None = None

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, self._checked(name, value))

    @staticmethod
    def _checked(name: str, value: Any) -> Any:
        if name == "mode":
            if value not in MODES:
                raise ViewerError(f"colour mode {value!r} must be one of {', '.join(MODES)}")
            return str(value)
        if name == "auto_scale":
            return bool(value)
        if name == "limit":
            return _number("colour limit", value, 0.01, 10.0)
        if name == "point_size":
            return _number("point size", value, 0.5, 20.0)
        if name == "glow":
            return _number("glow", value, 0.0, 2.0)
        if name == "smoothing_s":
            return _number("smoothing", value, 0.0, 1.0)
        if name == "gain":
            return None if value is None else _number("gain", value, 1e-6, 1e6)
        return value

    @property
    def scale(self) -> ColourScale:
        """The state's colour scale policy: automatic, or fixed at :attr:`limit`."""
        return ColourScale.auto() if self.auto_scale else ColourScale.fixed(self.limit)

    def activation_layer(self) -> ColourLayer:
        """The recorded state's colour layer as these settings say."""
        return activation_layer(self.mode, self.scale)


@dataclass
class RunSettings:
    """How the next run goes (the Settings dock's *Generation* group).

    ``seed`` ``-1`` draws a new seed each run; ``speed_cap`` 0 runs as fast as
    the engine can.
    """

    events: ClassVar[SignalGroupDescriptor] = SignalGroupDescriptor()

    temperature: float = 0.7
    top_p: float = 0.9
    max_new_tokens: int = 80
    seed: int = -1
    speed_cap: float = 20.0
    states_dtype: str = "float16"

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, self._checked(name, value))

    @staticmethod
    def _checked(name: str, value: Any) -> Any:
        if name == "temperature":
            return _number("temperature", value, 0.0, 2.0)
        if name == "top_p":
            return _number("top-p", value, 0.05, 1.0)
        if name == "max_new_tokens":
            return _whole("max new tokens", value, 1, MAX_NEW_TOKENS_LIMIT)
        if name == "seed":
            return _whole("seed", value, -1, 2**31 - 1)
        if name == "speed_cap":
            return _number("speed cap", value, 0.0, 1000.0)
        if name == "states_dtype":
            if value not in STATES_DTYPES:
                raise ViewerError(f"stored states {value!r} must be one of "
                                  f"{', '.join(STATES_DTYPES)}")
            return str(value)
        return value

    def generation_settings(self, candidates: int | None = None,
                            **options: Any) -> GenerationSettings:
        """The settings of the next language-model run, validated: these fields, with
        ``candidates`` recorded per frame (default: :class:`GenerationSettings`') and any
        other of its fields in ``options``. The language model's kind reads them
        (:func:`flyviz.kinds.language.generation_settings`)."""
        settings = GenerationSettings(
            max_new_tokens=self.max_new_tokens, temperature=self.temperature, top_p=self.top_p,
            seed=None if self.seed < 0 else self.seed, **options)
        if candidates is not None:
            settings = settings.with_candidates(candidates)
        return settings.validate()


@dataclass
class MeshSettings:
    """Translucent meshes behind the cloud: the soma outline and the user's mesh files.

    ``outline_shown`` draws the shell computed from the somas
    (:func:`flyviz.analysis.outline.soma_outline`, cached per model by the
    viewer state), ``mesh_shown`` the meshes added to the state
    (:meth:`~flyviz.viewer.state.ViewerState.add_mesh`), both at ``mesh_opacity``.
    """

    events: ClassVar[SignalGroupDescriptor] = SignalGroupDescriptor()

    mesh_shown: bool = False
    mesh_opacity: float = 0.15
    outline_shown: bool = False

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("mesh_shown", "outline_shown"):
            value = bool(value)
        elif name == "mesh_opacity":
            value = _number("mesh opacity", value, 0.0, 1.0)
        super().__setattr__(name, value)


def _first_patching_measure() -> str:
    """The patching heatmap's default measure, the first of :data:`PATCHING_MEASURES`."""
    return PATCHING_MEASURES[0]


@dataclass
class DockSettings:
    """The docks' own choices, so that a script reproduces what clicking shows.

    Each dock is a view of its fields: it shows them and writes the user's
    changes back (``state.docks.why_lag = 3`` moves the *Why?* dock's slider).

    Parameters
    ----------
    prompt
        The text in the prompt box: what *Run* starts on.
    lesion_log_scale
        The lesion map's *log scale*: colour by log10 ΔCE (groups and the estimate).
    why_lag
        *Why?*'s lag: steps back from the traced token (clipped to the trace's window).
    why_synapses
        *Why?* draws the strongest synapses into the shown step as lines.
    why_first_step_first
        *Why?*'s movie sweeps from the window's first step forward (else from the
        traced token back).
    patching_measure
        What the patching heatmap shows, one of
        :data:`flyviz.analysis.causal_file.PATCHING_MEASURES` (default: the first).
    population_view
        What the whole-brain raster shows of a comparison, one of :data:`COMPARE_VIEWS`
        (a single run is always shown as it is).
    """

    events: ClassVar[SignalGroupDescriptor] = SignalGroupDescriptor()

    prompt: str = ""
    lesion_log_scale: bool = True
    why_lag: int = 0
    why_synapses: bool = True
    why_first_step_first: bool = False
    patching_measure: str = field(default_factory=_first_patching_measure)
    population_view: str = COMPARE_VIEWS[0]

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, self._checked(name, value))

    @staticmethod
    def _checked(name: str, value: Any) -> Any:
        if name == "prompt":
            if not isinstance(value, str):
                raise ViewerError(f"the prompt must be text, got {value!r}")
            return value
        if name in ("lesion_log_scale", "why_synapses", "why_first_step_first"):
            return bool(value)
        if name == "why_lag":
            return _whole("lag", value, 0, 2**31 - 1)
        if name == "patching_measure":
            if value not in PATCHING_MEASURES:
                raise ViewerError(f"patching measure {value!r} must be one of "
                                  f"{', '.join(PATCHING_MEASURES)}")
            return str(value)
        if name == "population_view":
            if value not in COMPARE_VIEWS:
                raise ViewerError(f"population view {value!r} must be one of "
                                  f"{', '.join(COMPARE_VIEWS)}")
            return str(value)
        return value
