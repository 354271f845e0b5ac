"""Render frames to RGB arrays of an exact size, with or without a display.

:class:`FrameRenderer` draws the neuron cloud on a canvas created at the
requested size (rendering a differently sized canvas would leave the scene
unscaled in a corner) and, optionally, the overlays a shared movie needs:
the model's name, a token counter, a colourbar, the top-k candidates as bars
and the text so far with the newest token highlighted. Everything is drawn
with vispy visuals in the same OpenGL pass; nothing else rasterises text.

OpenGL without a window comes from the first backend that works, in the
order of :data:`BACKENDS`: EGL with Mesa's surfaceless platform (no X server
needed), the default vispy backend (Qt, needs a display such as Xvfb), then
OSMesa. :func:`offscreen_app` reports which one was chosen.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Any

import numpy as np
import vispy.app
from vispy import gloo, scene
from vispy.visuals import Visual
from vispy.visuals.transforms import STTransform

from flyviz.model.errors import ExportError
from flyviz.render.camera import DEFAULT_FOV, VIEW_PRESETS, CameraPose, frame_brain
from flyviz.render.cloud import NeuronCloud, crowding_gain
from flyviz.render.colormaps import colorbar_image, is_diverging
from flyviz.render.overlay import OverlayContent, display_token
from flyviz.render.style import (REFERENCE_HEIGHT, CloudStyle, ColourScale, activation_layer,
                                 apply_style)

#: Offscreen OpenGL backends, tried in this order.
BACKENDS = ("egl", "default", "osmesa")

#: Largest frame edge, in pixels (8K); larger sizes exceed what GL drivers allow.
MAX_EDGE = 7680

_FONT = "OpenSans"  # shipped with vispy, so every machine draws the same glyphs
_COLOR_PROMPT = (0.60, 0.64, 0.72, 1.0)
_COLOR_TEXT = (0.95, 0.96, 0.98, 1.0)
_COLOR_NEWEST = (1.0, 0.80, 0.32, 1.0)
_COLOR_DIM = (0.55, 0.58, 0.66, 1.0)
_COLOR_PANEL = (0.045, 0.05, 0.08, 0.82)
_COLOR_TRACK = (1.0, 1.0, 1.0, 0.07)
_COLOR_TOP_BAR = (1.0, 0.72, 0.26, 0.95)
_COLOR_BAR = (0.42, 0.58, 0.85, 0.85)
_COLOR_HIGHLIGHT = (1.0, 0.70, 0.20, 0.22)

_apps: dict[str, Any] = {}


def _make_app(name: str) -> Any:
    if name == "egl":
        # Surfaceless: an EGL context with no window system at all.
        os.environ.setdefault("EGL_PLATFORM", "surfaceless")
        return vispy.app.Application("egl")
    if name == "default":
        if sys.platform.startswith("linux") and not (os.environ.get("DISPLAY")
                                                     or os.environ.get("WAYLAND_DISPLAY")):
            raise RuntimeError("no display")
        return vispy.app.use_app()
    if name == "osmesa":
        return vispy.app.Application("osmesa")
    raise ValueError(f"unknown backend {name!r}")


def _release_egl(app: Any) -> None:
    """Leave no EGL context current on this thread.

    vispy's EGL canvases never release their context, not even when closed;
    a context left current keeps GL calls pointed at EGL and upsets any Qt
    OpenGL widget the same thread draws later (the app, or tests).
    """
    if getattr(app, "backend_name", "").lower() != "egl":
        return
    module = sys.modules.get("vispy.app.backends._egl")
    display = getattr(module, "_EGL_DISPLAY", None)
    if module is None or display is None:
        return
    egl = module.egl
    egl.eglMakeCurrent(display, egl.EGL_NO_SURFACE, egl.EGL_NO_SURFACE, egl.EGL_NO_CONTEXT)


def _initialise_hidden_qt_canvas(canvas: Any) -> None:
    """Give a hidden Qt canvas an OpenGL context of its own.

    A QOpenGLWidget that was never shown has no context: its ``makeCurrent``
    does nothing and GL calls land in whichever context is current, so its
    draws fail ("Shader compilation error") once the app's brain view exists.
    Showing it with ``WA_DontShowOnScreen`` creates the context without
    putting a window on screen.
    """
    native = getattr(canvas, "native", None)
    if native is None or not hasattr(native, "setAttribute"):
        return  # EGL or OSMesa: the canvas has its own context already
    from vispy.app.backends._qt import QtCore

    native.setAttribute(QtCore.Qt.WidgetAttribute.WA_DontShowOnScreen, True)
    native.show()


def _probe(app: Any) -> None:
    canvas = scene.SceneCanvas(size=(8, 8), show=False, app=app)
    try:
        image = canvas.render(alpha=False)
        if image.shape[:2] != (8, 8):
            raise RuntimeError(f"rendered {image.shape[1]}x{image.shape[0]} instead of 8x8")
    finally:
        canvas.close()
        _release_egl(app)


def offscreen_app(order: tuple[str, ...] = BACKENDS) -> tuple[Any, str]:
    """A vispy application that can render offscreen, and the name of its backend.

    Parameters
    ----------
    order
        Backends to try: ``"egl"``, ``"default"`` (vispy's usual choice,
        normally Qt) and ``"osmesa"``. The first that renders a test frame
        wins and is remembered for the process. The environment variable
        ``FLYVIZ_OFFSCREEN_GL`` names one backend to use instead.

    Raises
    ------
    ExportError
        When none works, naming each backend's problem.
    """
    forced = os.environ.get("FLYVIZ_OFFSCREEN_GL", "").strip().lower()
    if forced:
        if forced not in BACKENDS:
            raise ExportError(f"FLYVIZ_OFFSCREEN_GL={forced!r} must be one of {', '.join(BACKENDS)}")
        order = (forced,)
    problems = []
    for name in order:
        if name in _apps:
            return _apps[name], _apps[name].backend_name
        try:
            app = _make_app(name)
            _probe(app)
        except Exception as exc:  # noqa: BLE001 - any failure means "try the next one"
            problems.append(f"{name}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
            continue
        _apps[name] = app
        return app, app.backend_name
    raise ExportError("no OpenGL available for offscreen rendering (" + "; ".join(problems)
                      + "); install Mesa's EGL (libegl1) or run under a display, e.g. xvfb-run")


def parse_size(text: str) -> tuple[int, int]:
    """``"1280x720"`` -> ``(1280, 720)``; raises :class:`ExportError` when malformed."""
    parts = str(text).lower().replace("\u00d7", "x").split("x")
    try:
        w, h = (int(p) for p in parts)
    except ValueError:
        raise ExportError(f"size {text!r} must look like WIDTHxHEIGHT, e.g. 1280x720") from None
    return check_size((w, h))


def check_size(size: tuple[int, int]) -> tuple[int, int]:
    """Validate a ``(width, height)`` pair."""
    w, h = int(size[0]), int(size[1])
    if not (16 <= w <= MAX_EDGE and 16 <= h <= MAX_EDGE):
        raise ExportError(f"size {w}x{h} is out of range: each side must be 16 to {MAX_EDGE} pixels")
    return w, h


class _TextMetrics:
    """Glyph advances of a vispy font, to wrap and place text before drawing it."""

    def __init__(self, text_visual: Any) -> None:
        self._font = text_visual._font
        self._em: dict[str, float] = {}

    def em(self, ch: str) -> float:
        adv = self._em.get(ch)
        if adv is None:
            # Advances are stored at the font's low-resolution size (an em of 64 units).
            glyph = self._font[ch]
            adv = float(glyph["advance"]) / self._font.ratio / float(self._font._lowres_size)
            self._em[ch] = adv
        return adv

    def width(self, text: str, px: float) -> float:
        return px * sum(self.em(ch) for ch in text)


def _clean(text: str) -> str:
    text = text.replace("\r", "").replace("\t", "  ")
    return "".join(ch for ch in text if ch == "\n" or ch.isprintable())


class RectanglesVisual(Visual):
    """Flat-coloured rectangles in canvas pixels, replaced wholesale every update.

    vispy's ``Mesh`` relinks its shader program whenever its data is set,
    which costs tens of milliseconds per frame in software GL; this visual's
    program never changes, only its two vertex buffers.
    """

    _VERT = """
    attribute vec2 a_position;
    attribute vec4 a_color;
    varying vec4 v_color;
    void main() {
        gl_Position = $transform(vec4(a_position, 0.0, 1.0));
        v_color = a_color;
    }
    """
    _FRAG = """
    varying vec4 v_color;
    void main() { gl_FragColor = v_color; }
    """

    def __init__(self) -> None:
        Visual.__init__(self, vcode=self._VERT, fcode=self._FRAG)
        self._positions = gloo.VertexBuffer(np.zeros((6, 2), np.float32))
        self._colors = gloo.VertexBuffer(np.zeros((6, 4), np.float32))
        self.shared_program["a_position"] = self._positions
        self.shared_program["a_color"] = self._colors
        self._draw_mode = "triangles"
        self.set_gl_state("translucent", depth_test=False, cull_face=False)
        self.freeze()

    def set_rectangles(self, rects: np.ndarray, colors: np.ndarray) -> None:
        """``rects`` ``(n, 4)`` as ``x0, y0, x1, y1``; ``colors`` ``(n, 4)`` RGBA in [0, 1]."""
        r = np.asarray(rects, dtype=np.float32).reshape(-1, 4)
        if r.shape[0] == 0:
            r = np.zeros((1, 4), np.float32)
            colors = np.zeros((1, 4), np.float32)
        x0, y0, x1, y1 = r.T
        corners = np.stack([np.stack(p, axis=1) for p in
                            ((x0, y0), (x1, y0), (x1, y1), (x0, y0), (x1, y1), (x0, y1))], axis=1)
        self._positions.set_data(np.ascontiguousarray(corners.reshape(-1, 2)))
        self._colors.set_data(np.repeat(np.asarray(colors, dtype=np.float32), 6, axis=0))
        self.update()

    def _prepare_transforms(self, view) -> None:
        view.view_program.vert["transform"] = view.get_transform()

    def _compute_bounds(self, axis: int, view) -> None:
        return None


Rectangles = scene.visuals.create_visual_node(RectanglesVisual)


class _Overlays:
    """Header, colourbar, top-k bars and running text, in canvas pixels."""

    def __init__(self, canvas: Any, size: tuple[int, int], colormap: str,
                 value_range: tuple[float, float], caption: str, model_name: str) -> None:
        w, h = size
        # One layout unit: a pixel at 1280x720, scaled with the frame (not below
        # the size at which text stays legible).
        u = max(min(h / 720.0, w / 1280.0), 0.45)
        self.size, self.u = size, u
        self.margin = 22.0 * u
        self.panel_w = max(150.0 * u, 0.25 * w)
        self.band_h = max(90.0 * u, 0.19 * h)
        self.cloud_rect = (0.0, 0.0, w - self.panel_w, h - self.band_h)
        self.px_title, self.px_body, self.px_small = 24.0 * u, 20.0 * u, 14.0 * u
        dpi = float(canvas.dpi or 96.0)

        def text(px: float, bold: bool = False) -> Any:
            t = scene.visuals.Text("", parent=canvas.scene, face=_FONT, bold=bold,
                                   font_size=px * 72.0 / dpi, anchor_x="left",
                                   anchor_y="baseline", color=_COLOR_TEXT)
            t.order = 20
            return t

        self.panels = Rectangles(parent=canvas.scene)
        self.panels.order = 10
        self.title, self.body, self.small = text(self.px_title, bold=True), text(self.px_body), text(self.px_small)
        self.metrics_body = _TextMetrics(self.body)
        self.metrics_small = _TextMetrics(self.small)

        # Colourbar: horizontal, at the foot of the right panel, labels underneath;
        # kept off the brain so it never hides neurons.
        pad = 14.0 * u
        bar_w = int(round(self.panel_w - 2 * pad))
        bar_h = max(4, int(round(10 * u)))
        self.bar_x = w - self.panel_w + pad
        below = self.margin + 1.4 * self.px_small  # room for the labels under the bar
        self.bar_y = h - self.band_h - below - bar_h
        self.bar_h, self.bar_w = bar_h, bar_w
        self.colorbar = scene.visuals.Image(colorbar_image(colormap, bar_h, bar_w, vertical=False),
                                            parent=canvas.scene, interpolation="nearest")
        self.colorbar.transform = STTransform(translate=(self.bar_x, self.bar_y))
        self.colorbar.set_gl_state("translucent", depth_test=False)
        self.colorbar.order = 15
        self.colormap, self.value_range, self.caption = colormap, value_range, caption
        self.model_name = model_name
        self._last: OverlayContent | None = None

    # ----------------------------------------------------------------- text
    def _wrap(self, content: OverlayContent, max_w: float, max_lines: int):
        """Greedy word wrap of the running text; the last ``max_lines`` lines."""
        styled: list[tuple[str, int]] = []
        for text, style in ((content.prompt, 0), (content.generated, 1),
                            (content.newest, 2 if content.newest_in_prompt else 3)):
            styled.extend((ch, style) for ch in _clean(text))
        while styled and styled[0][0] == " ":  # a run's first token often starts with a space
            styled.pop(0)
        lines: list[list[tuple[str, int]]] = []
        line: list[tuple[str, int]] = []
        width = 0.0
        em = self.metrics_body.em
        scale = self.px_body
        for ch, style in styled:
            if ch == "\n":
                lines.append(line)
                line, width = [], 0.0
                continue
            w = em(ch) * scale
            if width + w > max_w and line:
                spaces = [i for i, (c, _) in enumerate(line) if c == " "]
                if spaces and spaces[-1] > 0:
                    cut = spaces[-1]
                    lines.append(line[:cut])
                    line = line[cut + 1:]
                else:
                    lines.append(line)
                    line = []
                width = sum(em(c) * scale for c, _ in line)
            line.append((ch, style))
            width += w
        lines.append(line)
        return lines[-max_lines:]

    def update(self, content: OverlayContent | None) -> None:
        if content is not None and content == self._last:
            return
        self._last = content
        w, h = self.size
        u, m = self.u, self.margin
        quads: list[tuple[float, float, float, float]] = []
        colors: list[tuple[float, ...]] = []
        body_s: list[str] = []
        body_p: list[tuple[float, float]] = []
        body_c: list[tuple[float, ...]] = []
        small_s: list[str] = []
        small_p: list[tuple[float, float]] = []
        small_c: list[tuple[float, ...]] = []

        def quad(x0, y0, x1, y1, color):
            quads.append((x0, y0, x1, y1))
            colors.append(color)

        def small(s, x, y, color=_COLOR_DIM):
            small_s.append(s)
            small_p.append((x, y))
            small_c.append(color)

        # Header: model name and counter.
        self.title.text = [self.model_name or "flyviz"]
        self.title.pos = [(m, m + self.px_title)]
        if content is not None:
            small(content.counter, m, m + self.px_title + 1.6 * self.px_small)

        # Colourbar labels.
        small(self.caption, self.bar_x, self.bar_y - 0.6 * self.px_small)
        ly = self.bar_y + self.bar_h + 1.2 * self.px_small
        for label, where in colorbar_labels(self.colormap, self.value_range):
            width = self.metrics_small.width(label, self.px_small)
            small(label, self.bar_x + where * (self.bar_w - width), ly)

        # Right panel: top-k candidates.
        px0 = w - self.panel_w
        quad(px0, 0, w, h - self.band_h, _COLOR_PANEL)
        if content is not None and content.top_k:
            pad = 14 * u
            small("next token", px0 + pad, m + self.px_small)
            row_h = 1.75 * self.px_body
            room = self.bar_y - 2.5 * self.px_small - (m + 2.2 * self.px_small + pad)
            rows = int(max(1, room // row_h))
            label_w = 0.36 * (self.panel_w - 2 * pad)
            pct_w = self.metrics_small.width("100%", self.px_small) + 6 * u
            bar_x0 = px0 + pad + label_w
            bar_max = max(4.0, w - pad - pct_w - bar_x0)
            for r, (token, prob) in enumerate(content.top_k[:min(rows, 10)]):
                y = m + 2.2 * self.px_small + pad + r * row_h
                label = display_token(token)
                while len(label) > 1 and self.metrics_body.width(label, self.px_body) > label_w - 6 * u:
                    label = label[:-2] + "\u2026"
                body_s.append(label)
                body_p.append((px0 + pad, y + 0.75 * self.px_body))
                body_c.append(_COLOR_NEWEST if r == 0 else _COLOR_TEXT)
                top, bottom = y + 0.1 * self.px_body, y + 0.95 * self.px_body
                quad(bar_x0, top, bar_x0 + bar_max, bottom, _COLOR_TRACK)
                quad(bar_x0, top, bar_x0 + max(1.0, bar_max * float(np.clip(prob, 0, 1))), bottom,
                     _COLOR_TOP_BAR if r == 0 else _COLOR_BAR)
                small(f"{100 * prob:.0f}%" if prob >= 0.01 else "<1%", bar_x0 + bar_max + 5 * u,
                      bottom - 0.1 * self.px_body, _COLOR_DIM)

        # Bottom band: the text so far, newest token highlighted.
        band_y = h - self.band_h
        quad(0, band_y, w, h, _COLOR_PANEL)
        if content is not None:
            line_h = 1.4 * self.px_body
            max_lines = max(1, int((self.band_h - 1.4 * m) // line_h))
            lines = self._wrap(content, w - 2 * m, max_lines)
            y0 = band_y + 0.7 * m + self.px_body
            style_color = {0: _COLOR_PROMPT, 1: _COLOR_TEXT, 2: _COLOR_NEWEST, 3: _COLOR_NEWEST}
            for li, line in enumerate(lines):
                x = m
                y = y0 + li * line_h
                run: list[str] = []
                run_style = None
                run_x = x
                for ch, style in line + [("", -1)]:
                    if style != run_style and run:
                        text = "".join(run)
                        body_s.append(text)
                        body_p.append((run_x, y))
                        body_c.append(style_color[run_style])
                        width = self.metrics_body.width(text, self.px_body)
                        if run_style in (2, 3):
                            quad(run_x - 2 * u, y - 0.95 * self.px_body, run_x + width + 2 * u,
                                 y + 0.32 * self.px_body, _COLOR_HIGHLIGHT)
                        run_x += width
                        run = []
                    if style == -1:
                        break
                    if not run:
                        run_style = style
                    run.append(ch)

        self.panels.set_rectangles(np.array(quads, dtype=np.float32), np.array(colors, dtype=np.float32))
        self._set_text(self.body, body_s, body_p, body_c)
        self._set_text(self.small, small_s, small_p, small_c)

    @staticmethod
    def _set_text(visual: Any, strings: list[str], pos: list, colors: list) -> None:
        # vispy's Text cannot draw an empty list: keep one invisible string instead.
        if not strings:
            strings, pos, colors = [" "], [(0.0, 0.0)], [(0, 0, 0, 0)]
        visual.text = strings
        visual.pos = np.asarray(pos, dtype=np.float32)
        visual.color = np.asarray(colors, dtype=np.float32)


def colorbar_labels(colormap: str, value_range: tuple[float, float],
                    digits: int = 2) -> tuple[tuple[str, float], ...]:
    """``(text, position along the bar)`` of the low, middle and high ticks of a colourbar.

    Diverging colormaps show signs (``-0.8``, ``0``, ``+0.8``).
    """
    lo, hi = (float(v) for v in value_range)
    signed = is_diverging(colormap)

    def fmt(v: float) -> str:
        if abs(v) < 1e-12 * max(abs(lo), abs(hi), 1e-30):
            v = 0.0
        return f"{v:+.{digits}g}" if signed and v != 0.0 else f"{v:.{digits}g}"

    return ((fmt(lo), 0.0), (fmt((lo + hi) / 2.0), 0.5), (fmt(hi), 1.0))


def _area_matrix(n_in: int, n_out: int) -> Any:
    """Sparse ``(n_out, n_in)`` box-filter resampling: each output pixel averages what it covers."""
    import scipy.sparse as sp

    scale = n_in / n_out
    rows, cols, weights = [], [], []
    for i in range(n_out):
        lo, hi = i * scale, (i + 1) * scale
        for j in range(int(np.floor(lo)), min(n_in, int(np.ceil(hi)))):
            overlap = min(hi, j + 1) - max(lo, j)
            if overlap > 0:
                rows.append(i)
                cols.append(j)
                weights.append(overlap / scale)
    return sp.csr_matrix((np.asarray(weights, np.float32), (rows, cols)), shape=(n_out, n_in))


class FrameRenderer:
    """Draw states (or any colour layer's values) of one brain to RGB arrays of a fixed size.

    Parameters
    ----------
    positions
        ``(N, 3)`` neuron positions in micrometres (``Anatomy.positions_um()``).
    visible
        ``(N,)`` bool of neurons with known positions, or ``None``.
    size
        ``(width, height)`` of every rendered image, in pixels.
    style
        How the cloud looks and what the colours mean (see
        :class:`~flyviz.render.style.CloudStyle`): the same value the app's
        brain view and screenshots apply. By default it is made from
        ``mode``, ``scale``, ``point_size`` and ``glow``.
    value_range
        The colour range, fixed for the renderer's life so that brightness
        means the same thing in every frame. By default the style's layer
        resolves it: its fixed or given range, or its automatic policy over
        ``activity_sample``.
    view
        A camera preset name (see :data:`~flyviz.render.camera.VIEW_PRESETS`).
    camera
        A :class:`~flyviz.render.camera.CameraPose` to look from instead of
        the preset (e.g. the app's current view).
    orbit
        Frame the brain so that it stays in view at every azimuth.
    overlays
        Draw the header, colourbar, top-k bars and text.
    model_name
        Shown in the header.
    activity_sample
        Some of the values to be shown (any shape). With an automatic
        ``style.gain`` the brightness gain is set once from how crowded the
        brain is on screen and how active these values are, so that a busy
        run does not saturate to white and every frame of a movie keeps the
        same exposure.
    mode, scale, point_size, glow
        Without ``style``: the activation colormap (``"signed"`` or
        ``"abs"``), the activation at the end of the colour range, the disc
        diameter in pixels on this frame (default 3 px at 720 lines, scaled
        with the height) and the halo strength.
    app
        A vispy application to render with; by default the first that works
        (see :func:`offscreen_app`).
    """

    def __init__(self, positions: np.ndarray, visible: np.ndarray | None = None,
                 size: tuple[int, int] = (1280, 720), *, style: CloudStyle | None = None,
                 value_range: tuple[float, float] | None = None, mode: str = "signed",
                 scale: float = 1.0, view: str = "front", camera: CameraPose | None = None,
                 orbit: bool = False, overlays: bool = True, model_name: str = "",
                 point_size: float | None = None, glow: float = 1.0,
                 activity_sample: np.ndarray | None = None, app: Any = None) -> None:
        self.size = check_size(size)
        w, h = self.size
        if view not in VIEW_PRESETS:
            raise ValueError(f"unknown view {view!r}; choose one of {', '.join(VIEW_PRESETS)}")
        if style is None:
            style = CloudStyle(layer=activation_layer(mode, ColourScale.fixed(scale)), glow=glow)
            if point_size:
                style = dataclasses.replace(style, point_size=float(point_size) * REFERENCE_HEIGHT / h)
        self.style = style
        layer = style.layer
        if value_range is None:
            value_range = layer.value_range(activity_sample)
        self.value_range = (float(value_range[0]), float(value_range[1]))
        if app is None:
            app, self.backend = offscreen_app()
        else:
            self.backend = app.backend_name
        self._app = app
        self.canvas = scene.SceneCanvas(size=(w, h), show=False, app=app,
                                        bgcolor=style.background, dpi=96.0)
        _initialise_hidden_qt_canvas(self.canvas)
        self.canvas.set_current()
        self._fbo: Any = None
        self._resize: Any = None
        self.overlays = (_Overlays(self.canvas, self.size, layer.colormap, self.value_range,
                                   layer.caption, model_name) if overlays else None)
        x, y, vw, vh = self.overlays.cloud_rect if self.overlays else (0.0, 0.0, float(w), float(h))
        self.view = scene.widgets.ViewBox(parent=self.canvas.scene, pos=(x, y), size=(vw, vh),
                                          border_color=None)
        self.view.camera = scene.TurntableCamera(fov=DEFAULT_FOV)
        self.cloud = NeuronCloud(positions, visible, parent=self.view.scene)
        apply_style(self.cloud, style, h, self.value_range)
        if camera is not None:
            camera.apply(self.view.camera)
        else:
            frame_brain(self.view.camera, view, self.cloud.positions, self.cloud.shown,
                        aspect=vw / vh, orbit=orbit)
        self.base_azimuth = float(self.view.camera.azimuth)
        if style.gain is None:
            # Brightness gain from how crowded the brain is on screen in this view.
            self._draw()
            self.gain = crowding_gain(self.cloud, h, style.point_px(h), activity_sample,
                                      layer.colormap, self.value_range)
        else:
            self.gain = float(style.gain)
        self.cloud.set_gain(self.gain)

    def render_state(self, state: np.ndarray, overlay: OverlayContent | None = None,
                     azimuth: float | None = None) -> np.ndarray:
        """Render one activation state.

        Parameters
        ----------
        state
            ``(N,)`` values of the style's colour layer (activations by default).
        overlay
            Words to draw (ignored when the renderer has no overlays).
        azimuth
            Camera azimuth in degrees (default: the view preset's).

        Returns
        -------
        numpy.ndarray
            ``(height, width, 3)`` uint8 RGB, exactly the requested size.
        """
        self.canvas.set_current()
        self.cloud.set_activity(state)
        self.view.camera.azimuth = self.base_azimuth if azimuth is None else float(azimuth)
        if self.overlays is not None:
            self.overlays.update(overlay)
        image = self._draw()
        w, h = self.size
        if image.shape[:2] != (h, w):
            image = self._fit(image)
        return np.ascontiguousarray(image[..., :3])

    def _draw(self) -> np.ndarray:
        """Draw into a framebuffer kept for the renderer's life and read it back.

        ``canvas.render()`` would allocate (and clear) a new colour and depth
        buffer for every frame; at 1080p that is 16 MB of memory traffic per
        frame for nothing.
        """
        if self._fbo is None:
            # At the canvas's physical size: vispy lays the scene out for it. On
            # a high-DPI screen (Qt backend) that is larger than the movie and
            # _fit brings it back to size.
            s = self.canvas.pixel_scale
            shape = (int(round(self.canvas.size[1] * s)), int(round(self.canvas.size[0] * s)))
            self._fbo = gloo.FrameBuffer(color=gloo.RenderBuffer(shape),
                                         depth=gloo.RenderBuffer(shape))
        self.canvas.push_fbo(self._fbo, (0, 0), self.canvas.size)
        try:
            self.canvas.context.clear(color=self.canvas.bgcolor, depth=True)
            self.canvas.draw_visual(self.canvas.scene)
            return self._fbo.read(alpha=False)
        finally:
            self.canvas.pop_fbo()

    def _fit(self, image: np.ndarray) -> np.ndarray:
        """Bring a high-DPI rendering back to the requested size (area averaging)."""
        w, h = self.size
        fy, fx = image.shape[0] / h, image.shape[1] / w
        if fy == fx and fy == int(fy) and fy >= 1:
            f = int(fy)
            return image.reshape(h, f, w, f, -1).mean(axis=(1, 3)).round().astype(np.uint8)
        if self._resize is None:
            self._resize = (_area_matrix(image.shape[0], h), _area_matrix(image.shape[1], w))
        rows, cols = self._resize
        c = image.shape[2]
        tall = rows @ image.reshape(image.shape[0], -1).astype(np.float32)
        tall = tall.reshape(h, image.shape[1], c).transpose(1, 0, 2).reshape(image.shape[1], -1)
        out = (cols @ tall).reshape(w, h, c).transpose(1, 0, 2)
        return np.clip(np.round(out), 0, 255).astype(np.uint8)

    def close(self) -> None:
        """Release the canvas and its OpenGL resources."""
        self.canvas.close()
        _release_egl(self._app)

    def __enter__(self) -> "FrameRenderer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
