"""The neuron cloud painted on the CPU: the lean shaders' picture without a rasteriser.

Software OpenGL (Mesa llvmpipe) spends most of a brain frame setting up
points, not shading them: about 0.3 µs of CPU per point even when a point
covers one pixel, 15-30 ms a frame for the 44,370 neurons with somata of the
MaleCNS brain, while the pixels those neurons cover are few (a quiet neuron
is a 2-3 pixel dot; some 330,000 fragments a frame in all). A compiled loop
over exactly those pixels (numba, as datashader rasterises points on the CPU)
paints the same frame in a few milliseconds. :class:`CloudPainter` does that
for a :class:`~flyviz.render.cloud.NeuronCloudVisual`; the app's software
path (:class:`flyviz.app.brain.raster_canvas.RasterScreen`) uses it whenever the
scene holds only the cloud and its backdrop.

The kernel computes what :data:`flyviz.render.cloud._LEAN_VERTEX_SHADER` and
the lean fragment shader compute, in float32, with the rasteriser's rules:

- a point of size ``S`` at window position ``(x, y)`` covers the pixels whose
  centres lie in ``[x - S/2, x + S/2)`` on both axes, and its sprite
  coordinate at a pixel centre ``c`` is ``(c - x) / S + 1/2``;
- fragments outside the sprite's disc are discarded;
- blending is ``(one, one)`` into an 8-bit framebuffer: each fragment is
  rounded to 8 bits and added, saturating at 255 (the sum of the rounded
  fragments, clipped once, is the same);
- a point whose centre is outside the clip volume is not drawn (not even the
  part of it that would be inside the window).

It equals llvmpipe's picture but for a level of 8 bits where a value lies on a
rounding edge and a pixel here and there at the edge of a sprite
(``tests/test_render_splat.py`` measures it). Without numba
(:func:`splat_available` is False) the cloud is drawn by OpenGL as before.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from flyviz.render.vispy_compat import scene_clip_bounds
from flyviz.render.colormaps import QUIET_ALPHA, RESTING_ALPHA, RESTING_RGB, control_points

__all__ = ["CloudPainter", "splat_available", "warm_up"]

_kernel: dict[str, Any] = {}
_lock = threading.Lock()


def _compile() -> Any:
    """The compiled kernel (numba), or None when numba is missing or cannot compile."""
    with _lock:
        if "paint" in _kernel:
            return _kernel["paint"]
        try:
            import numba
        except ImportError:
            _kernel["paint"] = None
            return None
        try:
            # error_model="numpy": a float division by zero gives inf, as in GLSL.
            _kernel["paint"] = numba.njit(cache=True, nogil=True, error_model="numpy")(_paint)
            _kernel["paint"](*_smallest_call())    # compiles now (or loads the cache)
        except Exception:  # noqa: BLE001 - any failure of the compiler means: draw with GL
            _kernel["paint"] = None
        return _kernel["paint"]


def warm_up(background: bool = True) -> None:
    """Compile the kernel now (a second or two, once per machine: numba caches it).

    ``background``: on a thread of its own, so a window opens without waiting.
    """
    if "paint" in _kernel:
        return
    if background:
        threading.Thread(target=_compile, name="flyviz-splat-compile", daemon=True).start()
    else:
        _compile()


def splat_available(wait: bool = False) -> bool:
    """True when the compiled kernel is ready (``wait``: compile it first if need be)."""
    if wait:
        _compile()
    return _kernel.get("paint") is not None


def _smallest_call() -> tuple:
    """Arguments of a one-neuron, 2x2-pixel call (compiling the kernel for its types)."""
    f32 = np.float32
    stops = np.zeros((2, 4), f32)
    stops[1, 0] = 1.0
    params = np.ones(_PARAMS, f32)
    return (np.zeros(1, f32), np.ones(1, f32), np.zeros(1, np.int64), np.ones(1, f32),
            np.ones(1, f32), stops, params, -1, np.array([0, 2, 0, 2], np.int64),
            np.zeros((2, 2, 4), np.uint8))


# The kernel's parameters, in order (float32).
_LOW, _INV_SPAN, _FOLD, _DIVERGING, _SIZE, _GLOW, _DIM, _GAIN, _PX_SCALE, _INVISIBLE, \
    _QUIET_ALPHA, _RESTING, _REST_R, _REST_G, _REST_B, _REST_ALPHA, _PARAMS = range(17)


def _paint(values, emphasis, index, wx, wy, stops, params, selected, clip, out):
    """Add the neurons ``index`` at window positions ``(wx, wy)`` to the frame ``out``.

    ``values`` and ``emphasis`` are those neurons' own, in the order of ``index``
    (gathered before the call: read here at ``index``, in the order of the rows the
    neurons land on, they would be reads at random, a cache miss a neuron once the
    arrays outgrow the cache, as 166,700 neurons' do). ``out`` is ``(h, w, 4)``
    uint8 B, G, R, A, top row first; only its columns ``clip[0]:clip[1]`` and rows
    ``clip[2]:clip[3]`` (top first) are drawn on.
    """
    f32 = np.float32

    def level(value):
        """A fragment's colour in 8 bits, as the framebuffer rounds it."""
        return np.int32(min(max(value, f32(0.0)), f32(1.0)) * f32(255.0) + f32(0.5))

    h = out.shape[0]
    low, inv_span = params[_LOW], params[_INV_SPAN]
    fold, diverging = params[_FOLD] > 0.5, params[_DIVERGING] > 0.5
    size, glow, dim, gain = params[_SIZE], params[_GLOW], params[_DIM], params[_GAIN]
    px_scale, invisible, quiet = params[_PX_SCALE], params[_INVISIBLE], params[_QUIET_ALPHA]
    resting = params[_RESTING] > 0.5
    halo_glow = min(max(glow, f32(0.0)), f32(2.0)) * f32(0.5)
    ux2 = np.empty(out.shape[1], f32)      # per column of a sprite: ux^2, its halo factor
    ex = np.empty(out.shape[1], f32)
    n_stops = stops.shape[0]
    for j in range(index.shape[0]):
        i = index[j]
        # ---- the vertex shader (_NEURON_LOOK and the lean shader's lines)
        v = values[j]
        if fold:
            v = abs(v)
        coord = min(max((v - low) * inv_span, f32(0.0)), f32(1.0))
        mag = abs(f32(2.0) * coord - f32(1.0)) if diverging else coord
        if resting:             # the resting brain: one tone, a quiet neuron's disc
            mag = f32(0.0)
            cr, cg, cb, ca = params[_REST_R], params[_REST_G], params[_REST_B], params[_REST_ALPHA]
        else:
            cr, cg, cb = stops[0, 1], stops[0, 2], stops[0, 3]
            for s in range(1, n_stops):
                t = min(max((coord - stops[s - 1, 0]) / (stops[s, 0] - stops[s - 1, 0]),
                            f32(0.0)), f32(1.0))
                cr += (stops[s, 1] - cr) * t
                cg += (stops[s, 2] - cg) * t
                cb += (stops[s, 3] - cb) * t
            ca = quiet + (f32(1.0) - quiet) * np.sqrt(min(max(mag, f32(0.0)), f32(1.0)))
        lit = np.sqrt(mag)
        e = emphasis[j]
        emph = dim + (f32(1.0) - dim) * e
        core = size * (f32(0.8) + f32(0.7) * lit) * (f32(0.7) + f32(0.3) * e)
        sprite = core * (f32(1.0) + f32(1.2) * glow * mag * mag * e)
        k = ca * emph * gain
        r, g, b = cr * k, cg * k, cb * k
        halo = halo_glow * lit
        ringed = i == selected
        if ringed:
            sprite = max(sprite, max(f32(3.0) * core, f32(18.0)))
        else:
            peak = halo * max(max(r, g), b)
            reach = np.sqrt(np.log(peak / invisible) / f32(1.6)) if peak > invisible else f32(1.0)
            sprite = min(sprite, core * max(f32(1.0), reach))
        radii2 = (sprite / core) * (sprite / core)
        full_r, full_g, full_b = level(r), level(g), level(b)
        point = sprite * px_scale
        # ---- the rasteriser: pixel centres in [x - S/2, x + S/2) on both axes
        half = point * f32(0.5)
        x0 = int(np.ceil(wx[j] - half - f32(0.5)))
        x1 = int(np.ceil(wx[j] + half - f32(0.5)))
        y0 = int(np.ceil(wy[j] - half - f32(0.5)))
        y1 = int(np.ceil(wy[j] + half - f32(0.5)))
        inv = f32(2.0) / point
        # The halo exp(-1.6 rr^2) is separable: exp2(k ux^2) * exp2(k uy^2), k in core radii.
        k_halo = f32(-2.3083120654223412) * radii2
        c0, c1 = max(x0, clip[0]), min(x1, clip[1])
        for t in range(c1 - c0):
            ux = (f32(c0 + t) + f32(0.5) - wx[j]) * inv
            ux2[t] = ux * ux
            ex[t] = np.exp2(k_halo * ux * ux)
        for gy in range(max(y0, h - clip[3]), min(y1, h - clip[2])):
            uy = (f32(gy) + f32(0.5) - wy[j]) * inv
            uy2 = uy * uy
            ey = np.exp2(k_halo * uy2)
            row = h - 1 - gy
            for t in range(c1 - c0):
                gx = c0 + t
                r2 = ux2[t] + uy2
                if r2 > f32(1.0):
                    continue
                # ---- the lean fragment shader
                rr2 = r2 * radii2
                if rr2 <= f32(0.3025) and not ringed:
                    # Inside 0.55 core radii the disc is whole: the neuron's own colour.
                    lr, lg, lb = full_r, full_g, full_b
                else:
                    wgt = f32(0.0)
                    if rr2 < f32(1.0):      # the disc's smooth edge; beyond it, the halo alone
                        x = min(max((np.sqrt(rr2) - f32(0.55)) / f32(0.45), f32(0.0)), f32(1.0))
                        wgt = f32(1.0) - x * x * (f32(3.0) - f32(2.0) * x)
                    if wgt < halo:          # only then can the halo be the brighter
                        wgt = max(wgt, halo * (ex[t] * ey))
                    fr, fg, fb = r * wgt, g * wgt, b * wgt
                    if ringed:
                        rad = np.sqrt(r2)
                        a = min(max((rad - f32(0.70)) / f32(0.10), f32(0.0)), f32(1.0))
                        c = min(max((rad - f32(0.90)) / f32(0.10), f32(0.0)), f32(1.0))
                        band = (a * a * (f32(3.0) - f32(2.0) * a)
                                * (f32(1.0) - c * c * (f32(3.0) - f32(2.0) * c)))
                        fr += f32(0.45) * band
                        fg += f32(1.0) * band
                        fb += f32(0.75) * band
                    lr, lg, lb = level(fr), level(fg), level(fb)
                # ---- (one, one) blending into 8 bits: each fragment rounded, then added
                # with saturation (for additions of non-negative levels, saturating at
                # every step ends where saturating once at the end would)
                out[row, gx, 2] = min(np.int32(255), np.int32(out[row, gx, 2]) + lr)
                out[row, gx, 1] = min(np.int32(255), np.int32(out[row, gx, 1]) + lg)
                out[row, gx, 0] = min(np.int32(255), np.int32(out[row, gx, 0]) + lb)



def _stops(colormap: str) -> np.ndarray:
    """The colormap's control points, ``(m, 4)`` float32 p, r, g, b (the GLSL function's, which
    writes them with 6 decimals: the same to float32 precision)."""
    return np.asarray(control_points(colormap), dtype=np.float32)


class CloudPainter:
    """Paints a :class:`~flyviz.render.cloud.NeuronCloudVisual` as its lean shaders draw it.

    Parameters
    ----------
    cloud
        The cloud (visual or scene node). Its values, emphasis, selection,
        detail and uniforms are read at every :meth:`paint`.
    """

    def __init__(self, cloud: Any) -> None:
        self.cloud = cloud
        #: Frames painted (for tests and benchmarks).
        self.frames = 0
        self._placed: tuple[bytes, tuple[int, int], int] | None = None
        self._index = np.zeros(0, np.int64)
        self._wx = np.zeros(0, np.float32)
        self._wy = np.zeros(0, np.float32)
        self._stops_for: str | None = None
        self._stops = np.zeros((2, 4), np.float32)
        #: The drawn neurons' values and emphasis in drawing order, gathered every frame.
        self._values = np.zeros(0, np.float32)
        self._emphasis = np.zeros(0, np.float32)

    def _place(self, h: int, w: int) -> None:
        """Window positions of the drawn neurons for the camera now (kept while it holds)."""
        cloud = self.cloud
        transform = cloud.get_transform("visual", "render")
        # The whole chain as one 4x4 matrix (row vectors, as vispy maps them).
        matrix = np.asarray(transform.map(np.eye(4)), dtype=np.float64)
        drawn = cloud.drawn_index
        key = (matrix.tobytes(), (h, w), id(drawn))
        if key == self._placed:
            return
        positions = cloud.positions[drawn].astype(np.float64)
        clip = positions @ matrix[:3] + matrix[3]
        # OpenGL clips a point by its centre: beyond the window's edge it is not drawn.
        w_clip = clip[:, 3]
        inside = ((w_clip > 0.0) & (np.abs(clip[:, 0]) <= w_clip) & (np.abs(clip[:, 1]) <= w_clip)
                  & (np.abs(clip[:, 2]) <= w_clip))
        clip = clip[inside]
        wx = ((clip[:, 0] / clip[:, 3] + 1.0) * (0.5 * w)).astype(np.float32)
        wy = ((clip[:, 1] / clip[:, 3] + 1.0) * (0.5 * h)).astype(np.float32)
        # In the order of the rows they land on: the frame is then written by sweeps
        # along its rows, not at random (the blending is order-independent).
        order = np.lexsort((wx, np.floor(wy)))
        self._index = np.ascontiguousarray(drawn[inside][order], dtype=np.int64)
        self._wx, self._wy = wx[order], wy[order]
        self._placed = key

    def _clip(self, h: int, w: int) -> np.ndarray:
        """Columns and rows (top first) the view's clipper lets the cloud draw on."""
        bounds = scene_clip_bounds(self.cloud)
        if bounds is None:
            return np.array([0, w, 0, h], np.int64)
        left, right, low, high = bounds
        # A fragment is kept when its centre (c + 1/2) lies within the bounds, both ends in.
        cols = (max(0, int(np.ceil(left - 0.5))), min(w, int(np.floor(right - 0.5)) + 1))
        rows = (max(0, int(np.ceil(low - 0.5))), min(h, int(np.floor(high - 0.5)) + 1))
        return np.array([cols[0], cols[1], rows[0], rows[1]], np.int64)

    def params(self) -> np.ndarray:
        """The cloud's uniforms as the kernel reads them."""
        u = self.cloud.uniforms()
        p = np.zeros(_PARAMS, np.float32)
        p[_LOW], p[_INV_SPAN] = u["u_low"], u["u_inv_span"]
        p[_FOLD], p[_DIVERGING] = u["u_fold"], u["u_diverging"]
        p[_SIZE], p[_GLOW], p[_DIM], p[_GAIN] = u["u_size"], u["u_glow"], u["u_dim"], u["u_gain"]
        p[_PX_SCALE], p[_INVISIBLE] = u["u_px_scale"], u["u_invisible"]
        p[_QUIET_ALPHA] = QUIET_ALPHA
        p[_RESTING] = u["u_resting"]
        p[_REST_R], p[_REST_G], p[_REST_B] = RESTING_RGB
        p[_REST_ALPHA] = RESTING_ALPHA
        return p

    def paint(self, under: np.ndarray, out: np.ndarray) -> None:
        """``out`` = ``under`` with the cloud added (both ``(h, w, 4)`` uint8 BGRA, top row first).

        Call it where the cloud would be drawn (its transforms set up for the
        framebuffer of ``under``'s size).
        """
        kernel = _kernel.get("paint")
        if kernel is None:
            raise RuntimeError("the splat kernel is not compiled (see flyviz.render.splat.warm_up)")
        h, w = under.shape[:2]
        self._place(h, w)
        np.copyto(out, under)
        cloud = self.cloud
        colormap = cloud.colormap
        if colormap != self._stops_for:
            self._stops, self._stops_for = _stops(colormap), colormap
        if self._values.shape != self._index.shape:
            self._values = np.empty(self._index.shape, np.float32)
            self._emphasis = np.empty(self._index.shape, np.float32)
        np.take(cloud.activity, self._index, out=self._values)
        np.take(cloud.emphasis_weights, self._index, out=self._emphasis)
        selected = cloud.selected
        kernel(self._values, self._emphasis, self._index, self._wx, self._wy,
               self._stops, self.params(), -1 if selected is None else int(selected),
               self._clip(h, w), out)
        self.frames += 1
