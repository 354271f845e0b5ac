"""The neuron point cloud: every neuron as a glowing point coloured by its activation.

Positions are uploaded once; a frame uploads one float32 per neuron (its
activation) and the colormap, display curve and glow are applied in the
shader. This is what lets 49,393 neurons animate at display rate in software
OpenGL, where rebuilding a ``Markers`` buffer every frame cannot.

Values map onto the colormap linearly over a range ``[low, high]`` (see
:meth:`NeuronCloudVisual.set_range`); how the range is chosen is a colour
layer's scale policy (:mod:`flyviz.render.style`).

Glow is additive blending with depth writes off: overlapping neurons add up,
so draw order does not matter and no sorting is needed. Brightness and sprite
size grow with ``sqrt(m)``, ``m`` the distance from the middle of a diverging
colormap or from the start of a sequential one (see
:mod:`flyviz.render.colormaps`): a quiet neuron is a faint dot, an active one
a bright spot with a halo.

Software OpenGL (Mesa llvmpipe and the like) draws with the *lean* shaders
(``NeuronCloudVisual(..., lean=True)``): the same picture, cheaper. Each
sprite ends where the neuron's halo falls below half a step of an 8-bit
framebuffer (:data:`INVISIBLE_LEVEL`), since the fragments beyond add nothing
a screen can show, yet cost the rasteriser as much as the lit ones; and the
fragment shader works on squared radii with one fewer varying. On a GPU the
original shaders are kept unchanged.
"""

from __future__ import annotations

import numpy as np
from vispy import gloo
from vispy.scene.visuals import create_visual_node
from vispy.visuals import Visual
from vispy.visuals.shaders import Function

from flyviz.render.colormaps import (COLORMAPS, RESTING_ALPHA, RESTING_RGB, glsl_colormap,
                                     is_diverging, value_range)
from flyviz.render.style import percentile_limit

# What both vertex shaders read, and how both turn a value into a colour and a size: one
# text, so the software path and a GPU cannot drift apart in how a neuron looks.
_NEURON_INPUTS = """
attribute vec3 a_position;
attribute float a_value;
attribute float a_emphasis;
attribute float a_index;
uniform float u_low;       // the value at the start of the colormap
uniform float u_inv_span;  // 1 / (high - low)
uniform float u_fold;      // 1: colour |value| (the "abs" colormap)
uniform float u_diverging; // 1: brightness grows both ways from the middle of the range
uniform float u_size;
uniform float u_glow;
uniform float u_dim;
uniform float u_selected;
uniform float u_px_scale;
uniform float u_gain;
uniform float u_resting;   // 1: no state is shown; every neuron in the resting tone
"""

_NEURON_LOOK = """    gl_Position = $transform(vec4(a_position, 1.0));
    float v = (u_fold > 0.5) ? abs(a_value) : a_value;
    float coord = clamp((v - u_low) * u_inv_span, 0.0, 1.0);
    float mag = (u_resting > 0.5) ? 0.0 : ((u_diverging > 0.5) ? abs(2.0 * coord - 1.0) : coord);
    vec4 c = (u_resting > 0.5) ? RESTING_COLOUR : $colormap(coord);
    float lit = sqrt(mag);
    float emphasis = mix(u_dim, 1.0, a_emphasis);
    float core = u_size * (0.8 + 0.7 * lit) * mix(0.7, 1.0, a_emphasis);
    // Only strongly active neurons get a halo sprite: fill rate is the cost in software GL.
    float sprite = core * (1.0 + 1.2 * u_glow * mag * mag * a_emphasis);
""".replace("RESTING_COLOUR", "vec4(" + ", ".join(f"{c:.6f}" for c in (*RESTING_RGB, RESTING_ALPHA))
            + ")")

_VERTEX_SHADER = (_NEURON_INPUTS + """varying vec4 v_color;
varying vec3 v_shape;  // (core radius / sprite radius, halo strength, ring flag)

void main() {
""" + _NEURON_LOOK + """    float ring = (abs(a_index - u_selected) < 0.5) ? 1.0 : 0.0;
    if (ring > 0.5) {
        sprite = max(sprite, max(3.0 * core, 18.0));
    }
    v_shape = vec3(core / sprite, clamp(u_glow, 0.0, 2.0) * 0.5 * lit, ring);
    v_color = vec4(c.rgb, c.a * emphasis * u_gain);
    gl_PointSize = sprite * u_px_scale;
}
""")

_FRAGMENT_SHADER = """
varying vec4 v_color;
varying vec3 v_shape;

void main() {
    float r = length(gl_PointCoord * 2.0 - 1.0);
    if (r > 1.0) discard;
    float rr = r / v_shape.x;  // 1.0 at the edge of the neuron's disc
    float disc = 1.0 - smoothstep(0.55, 1.0, rr);
    float halo = v_shape.y * exp(-1.6 * rr * rr);
    // Premultiplied colour, blended with (one, one): contributions simply add.
    vec3 rgb = v_color.rgb * v_color.a * max(disc, halo);
    if (v_shape.z > 0.5) {
        float ring = smoothstep(0.70, 0.80, r) * (1.0 - smoothstep(0.90, 1.0, r));
        rgb += vec3(0.45, 1.0, 0.75) * ring;
    }
    gl_FragColor = vec4(rgb, 1.0);
}
"""


#: Contributions below this fraction of full brightness are invisible: half a step of an
#: 8-bit framebuffer, a quarter for a margin against the driver's rounding (see
#: :data:`_LEAN_VERTEX_SHADER`). A sprite ends where its neuron's halo falls below it.
INVISIBLE_LEVEL = 0.25 / 255.0

# The lean shaders (software OpenGL): the picture of the two above, for less work. A
# rasteriser's cost grows with the pixels each sprite covers, and for an active neuron
# most of them are the halo's far tail, exp(-1.6 rr^2), which contributes less than the
# framebuffer can hold; the sprite now ends where the halo drops below
# INVISIBLE_LEVEL. The colour is premultiplied in the vertex shader and the sprite's
# size in core radii rides in its alpha (six varyings instead of seven).
_LEAN_VERTEX_SHADER = (_NEURON_INPUTS + """uniform float u_invisible;
varying vec4 v_color;  // (premultiplied rgb, sprite radius / core radius)
varying vec2 v_shape;  // (halo strength, ring flag)

void main() {
""" + _NEURON_LOOK + """    vec3 rgb = c.rgb * (c.a * emphasis * u_gain);
    float halo = clamp(u_glow, 0.0, 2.0) * 0.5 * lit;
    float ring = (abs(a_index - u_selected) < 0.5) ? 1.0 : 0.0;
    if (ring > 0.5) {
        sprite = max(sprite, max(3.0 * core, 18.0));
    } else {
        // Where halo * exp(-1.6 rr^2) * the brightest channel falls below the invisible
        // level (rr in core radii); the disc itself ends at rr = 1.
        float peak = halo * max(max(rgb.r, rgb.g), rgb.b);
        float reach = (peak > u_invisible) ? sqrt(log(peak / u_invisible) / 1.6) : 1.0;
        sprite = min(sprite, core * max(1.0, reach));
    }
    v_color = vec4(rgb, sprite / core);
    v_shape = vec2(halo, ring);
    gl_PointSize = sprite * u_px_scale;
}
""")

_LEAN_FRAGMENT_SHADER = """
varying vec4 v_color;
varying vec2 v_shape;

void main() {
    vec2 p = gl_PointCoord * 2.0 - 1.0;
    float r2 = dot(p, p);
    if (r2 > 1.0) discard;
    float rr2 = r2 * v_color.a * v_color.a;  // squared radius in core radii
    float disc = 1.0 - smoothstep(0.55, 1.0, sqrt(rr2));
    float halo = v_shape.x * exp2(-2.3083120654223412 * rr2);  // exp(-1.6 rr^2)
    vec3 rgb = v_color.rgb * max(disc, halo);
    /* ring */
    gl_FragColor = vec4(rgb, 1.0);
}
"""

# The selection ring's part of the lean fragment shader, there only while a neuron is
# selected: llvmpipe runs a branch's body for every pixel, masked (the ring is drawn for
# one neuron, its cost paid by all); 2-3 ms of ~40 a frame in one measurement, about
# the noise of a shared 2-core machine.
_LEAN_RING = """
    if (v_shape.y > 0.5) {
        float r = sqrt(r2);
        float ring = smoothstep(0.70, 0.80, r) * (1.0 - smoothstep(0.90, 1.0, r));
        rgb += vec3(0.45, 1.0, 0.75) * ring;
    }
"""


def auto_scale(values: np.ndarray, percentile: float = 99.0) -> float:
    """A colour limit that keeps the brightest ~1 % of neurons saturated.

    Parameters
    ----------
    values
        Activations (any shape); non-finite entries are ignored.
    percentile
        Percentile of ``|values|`` to use.

    Returns
    -------
    float
        A positive limit (1.0 when every value is zero or non-finite).
    """
    return percentile_limit(values, percentile)


class NeuronCloudVisual(Visual):
    """Neurons as additive glowing points with per-frame activation colouring.

    Parameters
    ----------
    positions
        ``(N, 3)`` positions in micrometres, uploaded once.
    visible
        ``(N,)`` bool; neurons marked False (no known soma) are not drawn.
        ``None`` draws every neuron.
    lean
        Draw with the lean shaders (for software OpenGL; see the module's
        notes): the same picture for fewer rasterised pixels.
    """

    def __init__(self, positions: np.ndarray, visible: np.ndarray | None = None,
                 lean: bool = False) -> None:
        self._lean = bool(lean)
        Visual.__init__(self, vcode=_LEAN_VERTEX_SHADER if lean else _VERTEX_SHADER,
                        fcode=self._lean_fragment_shader(False) if lean else _FRAGMENT_SHADER)
        pos = np.asarray(positions, dtype=np.float32)
        if pos.ndim != 2 or pos.shape[1] != 3:
            raise ValueError(f"positions must have shape (N, 3), got {pos.shape}")
        n = pos.shape[0]
        shown = np.ones(n, dtype=bool) if visible is None else np.asarray(visible, dtype=bool)
        if shown.shape != (n,):
            raise ValueError(f"visible must have shape ({n},), got {shown.shape}")
        # Missing or non-finite somata are hidden, never drawn at a made-up place.
        shown = shown & np.isfinite(pos).all(axis=1)
        pos = np.ascontiguousarray(np.where(shown[:, None], pos, 0.0), dtype=np.float32)
        self._n = n
        self._positions = pos
        self._shown = shown
        self._colormap = "signed"
        self._range = (-1.0, 1.0)
        self._selected: int | None = None

        # What was uploaded, kept on the CPU too (the software path paints from it).
        self._activity = np.zeros(n, dtype=np.float32)
        self._emphasis_weights = np.ones(n, dtype=np.float32)
        self._values = gloo.VertexBuffer(self._activity)
        self._emphasis = gloo.VertexBuffer(self._emphasis_weights)
        prog = self.shared_program
        prog["a_position"] = gloo.VertexBuffer(pos)
        prog["a_value"] = self._values
        prog["a_emphasis"] = self._emphasis
        prog["a_index"] = gloo.VertexBuffer(np.arange(n, dtype=np.float32))
        prog.vert["colormap"] = Function(glsl_colormap(self._colormap))
        prog["u_low"] = -1.0
        prog["u_inv_span"] = 0.5
        prog["u_fold"] = 0.0
        prog["u_diverging"] = 1.0
        prog["u_size"] = 3.0
        prog["u_glow"] = 1.0
        prog["u_dim"] = 0.1
        prog["u_selected"] = -1.0
        prog["u_px_scale"] = 1.0
        prog["u_gain"] = 1.0
        prog["u_resting"] = 0.0
        self._resting = False
        if lean:
            prog["u_invisible"] = INVISIBLE_LEVEL
        self._draw_mode = "points"
        if not shown.all():
            self._index_buffer = gloo.IndexBuffer(np.flatnonzero(shown).astype(np.uint32))
        self._all_shown = self._index_buffer
        self._all_shown_index = np.flatnonzero(shown)
        self._drawn_index = self._all_shown_index
        self._detail_index: dict[float, np.ndarray] = {}
        self._detail = 1.0
        self._detail_buffers: dict[float, gloo.IndexBuffer] = {}
        self.set_gl_state(depth_test=False, depth_mask=False, cull_face=False, blend=True,
                          blend_func=("one", "one"))
        self.freeze()

    # ------------------------------------------------------------ properties
    @property
    def lean(self) -> bool:
        """True when drawn with the lean shaders (software OpenGL)."""
        return self._lean

    @property
    def n_neurons(self) -> int:
        """Number of neurons (drawn or not)."""
        return self._n

    @property
    def positions(self) -> np.ndarray:
        """``(N, 3)`` float32 positions as uploaded (hidden rows are zero)."""
        return self._positions

    @property
    def shown(self) -> np.ndarray:
        """``(N,)`` bool: neurons that are drawn."""
        return self._shown

    @property
    def colormap(self) -> str:
        """The colormap's name (see :data:`~flyviz.render.colormaps.COLORMAPS`)."""
        return self._colormap

    @property
    def mode(self) -> str:
        """The colormap's name (the activation modes are ``"signed"`` and ``"abs"``)."""
        return self._colormap

    @property
    def value_range(self) -> tuple[float, float]:
        """The values at the two ends of the colormap."""
        return self._range

    @property
    def scale(self) -> float:
        """The largest magnitude of the colour range (the limit of ``±limit`` or ``[0, limit]``)."""
        return max(abs(self._range[0]), abs(self._range[1]))

    @property
    def detail(self) -> float:
        """Fraction of the shown neurons drawn (1: all; see :meth:`set_detail`)."""
        return self._detail

    @property
    def activity(self) -> np.ndarray:
        """``(N,)`` float32 values as last uploaded (non-finite ones as 0); do not modify."""
        return self._activity

    @property
    def emphasis_weights(self) -> np.ndarray:
        """``(N,)`` float32 emphasis as uploaded: 1 lit, 0 dimmed; do not modify."""
        return self._emphasis_weights

    @property
    def drawn_index(self) -> np.ndarray:
        """Indices of the neurons drawn now (the shown ones, or a detail subset of them)."""
        return self._drawn_index

    def uniforms(self) -> dict[str, float]:
        """The shaders' uniforms as they are now (what the CPU painter reads)."""
        prog = self.shared_program
        names = ("u_low", "u_inv_span", "u_fold", "u_diverging", "u_size", "u_glow", "u_dim",
                 "u_gain", "u_resting")
        values = {name: float(prog[name]) for name in names}
        values["u_invisible"] = INVISIBLE_LEVEL
        values["u_px_scale"] = float(self.transforms.pixel_scale)
        return values

    @property
    def selected(self) -> int | None:
        """Index of the highlighted neuron, or ``None``."""
        return self._selected

    @property
    def resting(self) -> bool:
        """True while the cloud draws the resting brain (see :meth:`set_resting`)."""
        return self._resting

    # --------------------------------------------------------------- setters
    def set_activity(self, values: np.ndarray) -> None:
        """Upload one activation per neuron (the only per-frame upload)."""
        vals = np.asarray(values, dtype=np.float32)
        if vals.shape != (self._n,):
            raise ValueError(f"activity must have shape ({self._n},), got {vals.shape}")
        if not np.isfinite(vals).all():
            vals = np.nan_to_num(vals, nan=0.0, posinf=0.0, neginf=0.0)
        self._activity = np.array(vals, dtype=np.float32)
        self._values.set_data(self._activity)
        self.update()

    def set_resting(self, resting: bool) -> None:
        """Draw every neuron in the resting tone (True: no state is shown) or by its value.

        The resting brain (:data:`~flyviz.render.colormaps.RESTING_RGB` at
        :data:`~flyviz.render.colormaps.RESTING_ALPHA`, a plain disc of a quiet neuron's
        size) is what a view shows before it has any state, where zero activation would
        be drawn as faint as the background. Emphasis, gain and the selection ring apply
        as ever. ``False`` (the default) draws exactly what it drew without this.
        """
        resting = bool(resting)
        if resting == self._resting:
            return
        self._resting = resting
        self.shared_program["u_resting"] = 1.0 if resting else 0.0
        self.update()

    def set_detail(self, fraction: float) -> None:
        """Draw only a fixed random ``fraction`` of the shown neurons (1: all of them).

        In software OpenGL the cost of a frame grows with the number of points;
        a quarter of them keeps the brain's shape and lets a camera move or a
        window resize redraw several times faster.
        """
        fraction = float(np.clip(fraction, 0.01, 1.0))
        if fraction == self._detail:
            return
        self._detail = fraction
        if fraction >= 1.0:
            self._index_buffer = self._all_shown
            self._drawn_index = self._all_shown_index
        else:
            buffer = self._detail_buffers.get(fraction)
            if buffer is None:
                shown = np.flatnonzero(self._shown)
                count = max(1, int(round(fraction * shown.size)))
                subset = np.sort(np.random.default_rng(0).permutation(shown)[:count])
                buffer = gloo.IndexBuffer(subset.astype(np.uint32))
                self._detail_buffers[fraction] = buffer
                self._detail_index[fraction] = subset
            self._index_buffer = buffer
            self._drawn_index = self._detail_index[fraction]
        self.update()

    def set_colormap(self, colormap: str) -> None:
        """Colour with ``colormap`` (the range stays; see :meth:`set_range`)."""
        if colormap not in COLORMAPS:
            raise ValueError(f"colormap {colormap!r} must be one of {', '.join(COLORMAPS)}")
        if colormap == self._colormap:
            return
        self._colormap = colormap
        prog = self.shared_program
        prog.vert["colormap"] = Function(glsl_colormap(colormap))
        prog["u_fold"] = 1.0 if colormap == "abs" else 0.0
        prog["u_diverging"] = 1.0 if is_diverging(colormap) else 0.0
        self.update()

    def set_range(self, low: float, high: float) -> None:
        """Map values ``low..high`` onto the colormap (``|value|`` for ``"abs"``)."""
        low, high = float(low), float(high)
        if not (np.isfinite(low) and np.isfinite(high) and high > low):
            raise ValueError(f"colour range {low}..{high} must be finite and increasing")
        if (low, high) == self._range:
            return
        self._range = (low, high)
        self.shared_program["u_low"] = low
        self.shared_program["u_inv_span"] = 1.0 / (high - low)
        self.update()

    def set_mode(self, mode: str) -> None:
        """Colour with the colormap ``mode``, keeping the scale (``±limit`` or ``[0, limit]``)."""
        limit = self.scale
        self.set_colormap(mode)
        self.set_range(*value_range(mode, limit))

    def set_scale(self, limit: float) -> None:
        """Map ``[-limit, limit]`` (diverging colormaps) or ``[0, limit]`` onto the colormap."""
        limit = float(limit)
        if not (np.isfinite(limit) and limit > 0.0):
            raise ValueError(f"colour limit must be a positive number, got {limit}")
        self.set_range(*value_range(self._colormap, limit))

    def set_emphasis(self, mask: np.ndarray | None) -> None:
        """Keep neurons where ``mask`` is True lit and dim the rest; ``None`` clears."""
        if mask is None:
            weights = np.ones(self._n, dtype=np.float32)
        else:
            m = np.asarray(mask, dtype=bool)
            if m.shape != (self._n,):
                raise ValueError(f"emphasis mask must have shape ({self._n},), got {m.shape}")
            weights = m.astype(np.float32)
        self._emphasis_weights = weights
        self._emphasis.set_data(weights)
        self.update()

    def set_selected(self, index: int | None) -> None:
        """Draw a ring around neuron ``index`` (``None`` removes it)."""
        if index is not None and not 0 <= int(index) < self._n:
            raise ValueError(f"neuron {index} out of range 0..{self._n - 1}")
        ringed = self._selected is not None
        self._selected = None if index is None else int(index)
        self.shared_program["u_selected"] = -1.0 if index is None else float(index)
        if self._lean and ringed != (index is not None):
            self.shared_program.frag = self._lean_fragment_shader(index is not None)
        self.update()

    def set_point_size(self, px: float) -> None:
        """Diameter of a quiet neuron's disc in logical pixels."""
        px = float(px)
        if not (np.isfinite(px) and px > 0.0):
            raise ValueError(f"point size must be positive, got {px}")
        self.shared_program["u_size"] = px
        self.update()

    def set_gain(self, gain: float) -> None:
        """Brightness multiplier of every neuron (see :func:`density_gain`).

        Additive blending makes regions where many neurons overlap on screen
        saturate to white; a gain below 1 keeps dense views readable.
        """
        gain = float(gain)
        if not (np.isfinite(gain) and gain > 0.0):
            raise ValueError(f"gain must be positive, got {gain}")
        self.shared_program["u_gain"] = gain
        self.update()

    def set_glow(self, strength: float) -> None:
        """Halo strength of active neurons: 0 plain discs, 1 default, 2 strong."""
        self.shared_program["u_glow"] = float(np.clip(strength, 0.0, 2.0))
        self.update()

    @staticmethod
    def _lean_fragment_shader(ring: bool) -> str:
        """The lean fragment shader, with the selection ring's code or without."""
        return _LEAN_FRAGMENT_SHADER.replace("/* ring */", _LEAN_RING.strip() if ring else "")

    # ---------------------------------------------------------------- vispy
    def _prepare_transforms(self, view) -> None:
        view.view_program.vert["transform"] = view.get_transform()

    def _prepare_draw(self, view) -> bool:
        view.view_program["u_px_scale"] = float(view.transforms.pixel_scale)
        return True

    def _compute_bounds(self, axis: int, view) -> tuple[float, float] | None:
        if not self._shown.any():
            return None
        column = self._positions[self._shown, axis]
        return float(column.min()), float(column.max())


#: Scene-graph node: ``NeuronCloud(positions, visible=None, lean=False, parent=view.scene)``.
NeuronCloud = create_visual_node(NeuronCloudVisual)


def activity_load(values: np.ndarray, limit: float | None = None, *, colormap: str = "abs",
                  value_range: tuple[float, float] | None = None) -> tuple[float, float]:
    """How bright and how large neurons are on average under some activity.

    Parameters
    ----------
    values
        Values of a colour layer (any shape), e.g. a few states of a run stacked.
    limit
        The colour limit they will be shown with (``|values| / limit``, as the
        activation colormaps show them); or give ``colormap`` and ``value_range``.
    colormap, value_range
        The colormap and range they will be shown with.

    Returns
    -------
    typical_alpha, size_factor
        Mean display brightness and mean disc diameter relative to the point
        size, as the shader computes them; inputs to :func:`density_gain`.
    """
    from flyviz.render.colormaps import display_curve, magnitude

    vals = np.asarray(values, dtype=np.float32).ravel()
    vals = vals[np.isfinite(vals)]
    if vals.size == 0:
        return 0.4, 1.0
    if value_range is None:
        value_range = (0.0, float(max(limit if limit is not None else 1.0, 1e-12)))
        colormap = "abs"
    mags = magnitude(vals, colormap, *value_range)
    return float(display_curve(mags).mean()), float((0.8 + 0.7 * np.sqrt(mags)).mean())


def density_gain(xy: np.ndarray, point_size_px: float, typical_alpha: float = 0.4,
                 cell_px: float = 8.0, size_factor: float = 1.0) -> float:
    """A brightness gain that keeps a dense view from saturating under additive blending.

    Parameters
    ----------
    xy
        ``(N, 2)`` canvas pixel positions of the drawn neurons (see
        :func:`flyviz.render.picking.project_points`).
    point_size_px
        The cloud's point size.
    typical_alpha
        Mean brightness of a neuron under typical activity.
    cell_px
        Size of the screen cells in which crowding is measured.
    size_factor
        Mean disc diameter relative to the point size (active neurons are
        drawn larger); see :func:`activity_load`.

    Returns
    -------
    float
        A gain in ``[0.05, 1]``: 1 for sparse views, less where the neurons a
        typical neuron shares its screen cell with would add up past white.
    """
    pts = np.asarray(xy, dtype=np.float64)
    pts = pts[np.isfinite(pts).all(axis=1)]
    if pts.shape[0] == 0:
        return 1.0
    cells = np.floor(pts / float(cell_px)).astype(np.int64)
    key = (cells[:, 0] - cells[:, 0].min()) * (int(np.ptp(cells[:, 1])) + 1) + (cells[:, 1] - cells[:, 1].min())
    if int(key.max()) <= 8 * key.size + 4096:
        crowd = np.bincount(key)[key]           # the usual view: counted in one pass
    else:                                       # zoomed far in: cells far apart
        _, inverse, counts = np.unique(key, return_inverse=True, return_counts=True)
        crowd = counts[inverse]
    disc_area = np.pi * (0.5 * float(point_size_px) * float(size_factor)) ** 2
    coverage = float(np.percentile(crowd, 75)) * disc_area / float(cell_px) ** 2
    return float(np.clip(1.0 / max(coverage * typical_alpha, 1e-6), 0.05, 1.0))


#: Size of the screen cells in which crowding is measured, in pixels at the
#: style's reference height (720); scaled with the canvas like the points, so
#: the automatic gain does not depend on the resolution.
CROWDING_CELL_PX = 8.0


def crowding_gain(cloud, canvas_height: float, point_px: float,
                  activity: np.ndarray | None = None, colormap: str = "abs",
                  value_range: tuple[float, float] | None = None) -> float:
    """The automatic brightness gain of a cloud as its camera shows it now.

    Parameters
    ----------
    cloud
        A :class:`NeuronCloud` node in a view whose camera is set.
    canvas_height
        Logical height of the canvas (the crowding cells scale with it).
    point_px
        The cloud's point size in pixels.
    activity
        Some of the values to be shown (any shape), or ``None`` for a typical
        activity; with ``colormap`` and ``value_range`` they set how bright
        and large neurons are on average (:func:`activity_load`).

    Returns
    -------
    float
        :func:`density_gain` of the projected neurons.
    """
    from flyviz.render.picking import project_points
    from flyviz.render.style import REFERENCE_HEIGHT

    shown = cloud.shown
    xy, _, ok = project_points(cloud.positions[shown], cloud.get_transform("visual", "canvas"))
    if activity is not None and np.asarray(activity).size:
        typical_alpha, size_factor = activity_load(activity, colormap=colormap,
                                                   value_range=value_range or (0.0, 1.0))
    else:
        typical_alpha, size_factor = 0.4, 1.0
    cell = max(2.0, CROWDING_CELL_PX * float(canvas_height) / REFERENCE_HEIGHT)
    return density_gain(xy[ok], point_px, typical_alpha, cell_px=cell, size_factor=size_factor)
