"""Colour lookup tables for neuron activity, shared by the cloud, colourbars and export.

A table is ``(256, 4)`` float32 RGBA. The RGB part is the hue of an
activation; the alpha part is the *display curve*: how bright a neuron of that
activation glows on black under additive blending. Baking the curve into the
table keeps the shader, the on-screen colourbar and the movie colourbar in
agreement by construction.

Four colormaps, two for the recorded activation and two for other values
(see :class:`flyviz.render.style.ColourLayer`):

``"signed"`` (diverging)
    Entry ``i`` stands for ``h = (2 i / 255 - 1) * limit``: cool blues for
    negative activations, warm oranges for positive ones, a neutral dim violet
    around zero.
``"abs"`` (sequential, of ``|value|``)
    Entry ``i`` stands for ``|x| = i / 255 * limit``: a magma-like sequential
    ramp from dim violet through red and orange to pale yellow.
``"difference"`` (diverging)
    For differences such as Δx (intervened − untouched state): saturated blue
    below zero, pale grey at zero, crimson above. Its hues are chosen to be
    told apart from ``"signed"`` at a glance (deep blue against sky blue,
    crimson against orange), so a difference is never mistaken for a state.
``"sequential"``
    For amounts such as importance or an atlas statistic: a viridis-like
    ramp from deep blue through teal and green to yellow, distinct from the
    magma-like ``"abs"``.

On a diverging map brightness grows with the distance from the middle of the
range, on a sequential one with the value. It follows ``sqrt(m)`` above a
small floor, so quiet neurons stay faintly visible (the brain's shape remains
readable) while a dense region of quiet neurons does not add up to a bright blob.
"""

from __future__ import annotations

import numpy as np

#: Activation display modes (the colormaps of the recorded state).
MODES = ("signed", "abs")

#: Every colormap understood by :func:`lut`, the cloud and the colourbars.
COLORMAPS = ("signed", "abs", "difference", "sequential")

#: Colormaps centred on the middle of their range (brightness grows both ways from it).
DIVERGING = ("signed", "difference")

#: Brightness (alpha) of a neuron at zero activation.
QUIET_ALPHA = 0.05

#: The resting brain: how every neuron is drawn while no state is shown (before the first
#: run), so the brain's shape is there to see. A neutral grey-blue, no hue of any colormap,
#: as a plain disc (no halo); activity, once shown, is drawn as the colormaps say.
RESTING_RGB = (0.62, 0.66, 0.74)
#: The resting brain's brightness (alpha): well above :data:`QUIET_ALPHA`, below any glow.
RESTING_ALPHA = 0.35

# (position in [0, 1], r, g, b) control points, linearly interpolated.
_SIGNED_STOPS = (
    (0.00, 0.55, 0.85, 1.00),
    (0.22, 0.20, 0.50, 1.00),
    (0.50, 0.55, 0.50, 0.75),
    (0.78, 1.00, 0.42, 0.12),
    (1.00, 1.00, 0.88, 0.45),
)
_ABS_STOPS = (
    (0.00, 0.45, 0.35, 0.80),
    (0.30, 0.80, 0.22, 0.55),
    (0.60, 1.00, 0.45, 0.15),
    (0.85, 1.00, 0.80, 0.35),
    (1.00, 1.00, 0.97, 0.80),
)
_DIFFERENCE_STOPS = (
    (0.00, 0.46, 0.38, 1.00),
    (0.25, 0.34, 0.28, 0.98),
    (0.50, 0.82, 0.80, 0.84),
    (0.75, 0.96, 0.16, 0.30),
    (1.00, 1.00, 0.42, 0.52),
)
_SEQUENTIAL_STOPS = (
    (0.00, 0.27, 0.20, 0.62),
    (0.30, 0.17, 0.45, 0.75),
    (0.55, 0.10, 0.70, 0.62),
    (0.80, 0.50, 0.86, 0.30),
    (1.00, 0.99, 0.93, 0.25),
)
_STOPS = {"signed": _SIGNED_STOPS, "abs": _ABS_STOPS, "difference": _DIFFERENCE_STOPS,
          "sequential": _SEQUENTIAL_STOPS}


def control_points(mode: str) -> tuple[tuple[float, float, float, float], ...]:
    """The ``(position in [0, 1], r, g, b)`` control points of colormap ``mode``, which
    :func:`lut` and :func:`glsl_colormap` interpolate linearly (and the splatting
    renderer, :mod:`flyviz.render.splat`, too)."""
    return _STOPS[_check_mode(mode)]


def _check_mode(mode: str) -> str:
    if mode not in COLORMAPS:
        raise ValueError(f"colormap {mode!r} must be one of {', '.join(COLORMAPS)}")
    return mode


def is_diverging(colormap: str) -> bool:
    """True for a colormap centred on the middle of its range (``"signed"``, ``"difference"``)."""
    return _check_mode(colormap) in DIVERGING


def _ramp(stops: tuple[tuple[float, float, float, float], ...], t: np.ndarray) -> np.ndarray:
    table = np.asarray(stops, dtype=np.float64)
    return np.stack([np.interp(t, table[:, 0], table[:, c]) for c in (1, 2, 3)], axis=-1)


def display_curve(magnitude: np.ndarray) -> np.ndarray:
    """Brightness of a neuron whose ``|x| / limit`` is ``magnitude`` (clipped to [0, 1])."""
    m = np.clip(np.asarray(magnitude, dtype=np.float64), 0.0, 1.0)
    return QUIET_ALPHA + (1.0 - QUIET_ALPHA) * np.sqrt(m)


def magnitude(values: np.ndarray, colormap: str, low: float, high: float) -> np.ndarray:
    """How far ``values`` are along ``colormap`` over ``[low, high]``, in [0, 1], as the shader computes it.

    The distance from the middle on a diverging colormap, from the start on a
    sequential one; brightness is :func:`display_curve` of it.
    """
    v = np.asarray(values, dtype=np.float64)
    if colormap == "abs":
        v = np.abs(v)
    coord = np.clip((v - float(low)) / (float(high) - float(low)), 0.0, 1.0)
    return np.abs(2.0 * coord - 1.0) if is_diverging(colormap) else coord


def lut(mode: str) -> np.ndarray:
    """The ``(256, 4)`` float32 RGBA table of a colormap (see the module docstring)."""
    _check_mode(mode)
    t = np.linspace(0.0, 1.0, 256)
    rgb = _ramp(_STOPS[mode], t)
    magnitude = np.abs(2.0 * t - 1.0) if is_diverging(mode) else t
    out = np.empty((256, 4), dtype=np.float32)
    out[:, :3] = rgb
    out[:, 3] = display_curve(magnitude)
    return out


def _glsl_vec3(rgb) -> str:
    return "vec3(" + ", ".join(f"{float(c):.6f}" for c in rgb) + ")"


def glsl_colormap(mode: str) -> str:
    """GLSL ``vec4 colormap(float t)`` computing :func:`lut` exactly, without a texture.

    ``t`` is the table coordinate in [0, 1]. Generated from the same control
    points as the table, so the shader and the colourbar cannot drift apart;
    evaluating it per vertex is cheaper than a texture fetch in software GL.
    """
    stops = _STOPS[_check_mode(mode)]
    lines = ["vec4 colormap(float t) {", f"    vec3 c = {_glsl_vec3(stops[0][1:])};"]
    for (p0, *_), (p1, *rgb) in zip(stops, stops[1:]):
        lines.append(f"    c = mix(c, {_glsl_vec3(rgb)}, clamp((t - {p0:.6f}) / {p1 - p0:.6f}, 0.0, 1.0));")
    magnitude = "abs(2.0 * t - 1.0)" if is_diverging(mode) else "t"
    lines.append(f"    float m = clamp({magnitude}, 0.0, 1.0);")
    lines.append(f"    return vec4(c, {QUIET_ALPHA:.6f} + {1.0 - QUIET_ALPHA:.6f} * sqrt(m));")
    lines.append("}")
    return "\n".join(lines)


def value_range(mode: str, limit: float) -> tuple[float, float]:
    """The range a colourbar of ``mode`` spans at scale ``limit``: ``±limit`` or ``[0, limit]``."""
    return (-float(limit), float(limit)) if is_diverging(mode) else (0.0, float(limit))


def colorbar_image(mode: str, height: int, width: int, vertical: bool = True) -> np.ndarray:
    """A colourbar as it looks on screen: each colour at its display brightness on black.

    Parameters
    ----------
    mode
        A colormap name (see :data:`COLORMAPS`).
    height, width
        Image size in pixels.
    vertical
        Highest values at the top (True) or at the right (False).

    Returns
    -------
    numpy.ndarray
        ``(height, width, 4)`` uint8 RGBA, opaque.
    """
    if height <= 0 or width <= 0:
        raise ValueError("colourbar size must be positive")
    table = lut(mode)
    shown = np.clip(table[:, :3] * table[:, 3:4], 0.0, 1.0)
    n = height if vertical else width
    idx = np.round(np.linspace(0, 255, n)).astype(np.int64)
    ramp = shown[idx]
    img = np.empty((height, width, 4), dtype=np.uint8)
    if vertical:
        img[:, :, :3] = (ramp[::-1, None, :] * 255.0 + 0.5).astype(np.uint8)
    else:
        img[:, :, :3] = (ramp[None, :, :] * 255.0 + 0.5).astype(np.uint8)
    img[:, :, 3] = 255
    return img
