"""The viewer state's settings groups: how the brain is drawn, how runs go, meshes.

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
from dataclasses import dataclass
from typing import Any, ClassVar

from psygnal import SignalGroupDescriptor

from flyviz.errors import InputError
from flyviz.record.run import MAX_NEW_TOKENS_LIMIT, GenerationSettings
from flyviz.render.colormaps import MODES
from flyviz.render.style import ColourScale

__all__ = ["DisplaySettings", "MAX_NEW_TOKENS_LIMIT", "MeshSettings", "RunSettings",
           "STATES_DTYPES", "ViewerError", "one_of", "whole_number"]

#: How new recordings may store their states.
STATES_DTYPES = ("float16", "float32")

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


def one_of(name: str, value: Any, choices: tuple[str, ...]) -> str:
    """``value`` when it is one of ``choices`` (a settings field's check);
    :class:`ViewerError` naming ``name`` and the choices otherwise."""
    if value not in choices:
        raise ViewerError(f"{name} {value!r} must be one of {', '.join(choices)}")
    return str(value)


def whole_number(name: str, value: Any, low: int, high: int) -> int:
    """``value`` as a whole number in ``low..high`` (a settings field's check);
    :class:`ViewerError` naming ``name`` otherwise."""
    # a float must be whole and finite: int() of NaN or infinity raises before any comparison
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (
            isinstance(value, float) and not value.is_integer()):
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
        ``"signed"`` (diverging colours) or ``"abs"`` (|x|, sequential).
    auto_scale
        Scale the colours to each frame's 99th percentile of |x|; else to ``limit``.
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
            return one_of("colour mode", value, tuple(MODES))
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
            return whole_number("max new tokens", value, 1, MAX_NEW_TOKENS_LIMIT)
        if name == "seed":
            return whole_number("seed", value, -1, 2**31 - 1)
        if name == "speed_cap":
            return _number("speed cap", value, 0.0, 1000.0)
        if name == "states_dtype":
            return one_of("stored states", value, STATES_DTYPES)
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
