"""A vispy canvas shown as plain pixels: the brain view's presentation with software OpenGL.

A ``QOpenGLWidget`` (vispy's Qt canvas) draws into a framebuffer that Qt then
composes into its window with OpenGL at every frame: a full-window textured
quad for the OpenGL picture and another, blended, for the window's ordinary
widgets (the brain view's colourbar and notes), then a buffer swap. On a GPU
that is free; with Mesa llvmpipe it is two 1280x720 fills on the CPU, about
as much work as drawing the 49,393 neurons themselves.

:class:`RasterScreen` presents the same frames without it. The canvas lives
in a window of its own that is never put on screen (it keeps its OpenGL
context); each frame is drawn into a framebuffer object, read back once, and
painted as an image by an ordinary widget, so Qt flushes the window as plain
pixels. The picture is the one the canvas draws, pixel for pixel; mouse,
wheel and key events reach the canvas as if it were on screen.

A *backdrop* (:meth:`RasterScreen.set_backdrop`: the translucent brain
outline behind the neurons) is drawn once and reused while its key (the
camera, its look) stays the same: only what changes is drawn each frame. The
outline costs llvmpipe more than the 49,393 neurons do (about 80 ms a frame).

A *CPU layer* (:meth:`RasterScreen.set_cpu_layer`: the neuron cloud, painted
by :mod:`flyviz.render.splat`) is added on the CPU over the backdrop (or the
background) in every frame that holds nothing else; OpenGL then draws nothing
and nothing is read back. A frame with any other visual shown is drawn by
OpenGL whole, the layer's visual included.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import Any

import numpy as np
from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QImage, QPainter
from PySide6.QtWidgets import QSizePolicy, QWidget

from flyviz.render.vispy_compat import (redirect_repaint, run_draw_handlers,
                                         set_visible_quietly)


#: ``glPixelStorei`` name of Mesa's GL_MESA_pack_invert: read the top row first.
_PACK_INVERT_MESA = 0x8758
_GL_BGRA = 0x80E1
_GL_UNSIGNED_BYTE = 0x1401

_reader: dict[str, Any] = {}


def _read_bgra(out: np.ndarray) -> bool:
    """Read the bound framebuffer into ``out`` (``(h, w, 4)`` uint8) as B, G, R, A bytes.

    With Mesa's pack-invert extension the rows come top first (returns True);
    otherwise bottom first, as OpenGL stores them (returns False). One copy,
    no conversion: llvmpipe keeps its colour buffers as BGRA.
    """
    import ctypes

    from vispy.gloo import gl

    if "read" not in _reader:
        from vispy.gloo.gl.gl2 import _get_gl_func

        _reader["read"] = _get_gl_func("glReadPixels", None,
                                       (ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                        ctypes.c_uint, ctypes.c_uint, ctypes.c_void_p))
        extensions = str(gl.glGetParameter(gl.GL_EXTENSIONS) or "")
        _reader["invert"] = "GL_MESA_pack_invert" in extensions.split()
    h, w = out.shape[:2]
    gl.glPixelStorei(gl.GL_PACK_ALIGNMENT, 4)
    if _reader["invert"]:
        gl.glPixelStorei(_PACK_INVERT_MESA, 1)
    try:
        _reader["read"](0, 0, w, h, _GL_BGRA, _GL_UNSIGNED_BYTE, out.ctypes.data)
    finally:
        if _reader["invert"]:
            gl.glPixelStorei(_PACK_INVERT_MESA, 0)
    return bool(_reader["invert"])


def _drawn_visuals(node: Any) -> Iterator[Any]:
    """The visible visuals under ``node`` that draw something (not views, widgets, cameras)."""
    from vispy.scene.subscene import SubScene
    from vispy.scene.widgets import Widget
    from vispy.visuals import BaseVisual

    for child in node.children:
        if not child.visible:
            continue
        if isinstance(child, BaseVisual) and not isinstance(child, (Widget, SubScene)):
            yield child
        yield from _drawn_visuals(child)


class RasterScreen(QWidget):
    """Shows a vispy ``SceneCanvas``'s frames as an image, redrawn when the canvas asks.

    Parameters
    ----------
    canvas
        A vispy ``SceneCanvas`` on the Qt backend, made without a parent and
        not yet shown. Its native widget becomes a window of its own that
        never appears on screen, deleted with ``parent``.
    parent
        The widget that shows the canvas (the screen is its child).
    """

    def __init__(self, canvas: Any, parent: QWidget) -> None:
        super().__init__(parent)
        self.canvas = canvas
        #: Frames drawn and read back (for tests and benchmarks).
        self.frames = 0
        self._stale = True
        self._fbo: Any = None
        self._fbo_shape: tuple[int, int] | None = None
        self._pixels: np.ndarray | None = None
        self._image: QImage | None = None
        self._shown_pixels: np.ndarray | None = None
        self._backdrop_visuals: Callable[[], Sequence[Any]] = lambda: ()
        self._backdrop_key: Callable[[], Hashable] = lambda: None
        self._last_key: Hashable = None
        self._backdrop: Any = None          # the vispy Image showing the cached backdrop
        self._backdrop_for: Hashable = None  # the key it was drawn for
        self._backdrop_bgra: np.ndarray | None = None   # its pixels, for the CPU layer
        #: Times the backdrop was drawn anew (for tests and benchmarks).
        self.backdrops = 0
        self._cpu_visual: Any = None
        self._cpu_paint: Callable[[np.ndarray, np.ndarray], None] | None = None
        self._cpu_ready: Callable[[], bool] = lambda: False
        self._under: np.ndarray | None = None             # drawn by OpenGL under the layer
        self._background_frame: np.ndarray | None = None  # the background colour alone
        #: Frames whose top layer was painted on the CPU (see :meth:`set_cpu_layer`).
        self.cpu_frames = 0
        self.setAttribute(Qt.WidgetAttribute.WA_OpaquePaintEvent, True)
        self.setMouseTracking(True)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        native = canvas.native
        # A window of its own with no parent (any parent, even of a window, would be
        # marked as holding an OpenGL widget and composed through OpenGL from then on),
        # deleted with the view; it has a context but is never on screen.
        if native.parentWidget() is not None:
            raise ValueError("the canvas must be made without a parent")
        parent.destroyed.connect(native.deleteLater)
        native.setAttribute(Qt.WidgetAttribute.WA_DontShowOnScreen, True)
        native.setAttribute(Qt.WidgetAttribute.WA_QuitOnClose, False)
        native.resize(max(1, self.width()), max(1, self.height()))
        native.show()
        # vispy asks its backend to repaint the native widget; repaint this one instead.
        redirect_repaint(native, self.request_frame)

    # ------------------------------------------------------------ frames
    def request_frame(self) -> None:
        """Draw the scene again at the next paint (what ``canvas.update()`` comes to)."""
        self._stale = True
        self.update()

    @property
    def stale(self) -> bool:
        """True when the scene changed since the image shown was drawn."""
        return self._stale

    def image(self) -> QImage | None:
        """The last frame drawn (``None`` before the first)."""
        return self._image

    def render_frame(self) -> None:
        """Draw the scene now (the canvas's draw event runs, as for a paint) and keep the image."""
        from vispy import gloo

        canvas = self.canvas
        native = canvas.native
        ratio = float(native.devicePixelRatioF())
        w = max(1, round(native.width() * ratio))
        h = max(1, round(native.height() * ratio))
        canvas.set_current()
        if self._fbo is None or self._pixels is None or self._fbo_shape != (h, w):
            self._fbo = gloo.FrameBuffer(color=gloo.RenderBuffer((h, w)),
                                         depth=gloo.RenderBuffer((h, w)))
            self._fbo_shape = (h, w)
            self._pixels = np.empty((h, w, 4), np.uint8)
        pixels = self._pixels
        cached = self._use_backdrop(h, w)
        if self._cpu_layer_paints():
            self._render_with_cpu_layer(cached, pixels, h, w)
            image = QImage(pixels.data, w, h, 4 * w, QImage.Format.Format_RGB32)
            image.setDevicePixelRatio(ratio)
            self._image, self._shown_pixels = image, pixels
            self._stale = False
            self.frames += 1
            self.cpu_frames += 1
            return
        canvas.push_fbo(self._fbo, (0, 0), canvas.size)
        # The cached picture of the backdrop is drawn instead of its visuals, in this frame
        # only (visibility set underneath vispy, which would ask for another frame).
        swapped = [(visual, False) for visual in cached]
        if cached and self._backdrop is not None:
            swapped.append((self._backdrop, True))
        try:
            for visual, shown in swapped:
                set_visible_quietly(visual, shown)
            canvas.events.draw(region=None)
            canvas.context.flush_commands()
            top_down = _read_bgra(pixels)
        finally:
            for visual, shown in swapped:
                set_visible_quietly(visual, not shown)
            canvas.pop_fbo()
        if not top_down:
            pixels = np.ascontiguousarray(pixels[::-1])
        # Bytes B, G, R, A are Qt's RGB32 (0xffRRGGBB) on little-endian machines: the
        # window's own format, so painting is a copy. RGB32: the canvas is opaque.
        image = QImage(pixels.data, w, h, 4 * w, QImage.Format.Format_RGB32)
        image.setDevicePixelRatio(ratio)
        self._image, self._shown_pixels = image, pixels
        self._stale = False
        self.frames += 1

    # ------------------------------------------------------------ CPU layer
    def set_cpu_layer(self, visual: Any, paint: Callable[[np.ndarray, np.ndarray], None],
                      ready: Callable[[], bool]) -> None:
        """Paint ``visual`` on the CPU, over the rest of the frame, whenever that is the same.

        ``paint(under, out)`` writes ``under`` (``(h, w, 4)`` uint8 B, G, R, A,
        top row first) with the visual added into ``out``; ``ready()`` says
        whether it can now (a compiled kernel). It is used while ``visual`` is
        the last thing drawn and blends by addition (its look does not depend
        on the order): in a frame where anything else is shown but the
        backdrop, the whole frame is drawn by OpenGL as before.
        """
        self._cpu_visual, self._cpu_paint, self._cpu_ready = visual, paint, ready
        self.request_frame()

    def _cpu_layer_paints(self) -> bool:
        """True when this frame is the backdrop (or background) plus the CPU layer alone."""
        visual = self._cpu_visual
        if visual is None or self._cpu_paint is None or not visual.visible \
                or not self._cpu_ready():
            return False
        allowed = {id(visual), id(self._backdrop)}
        allowed.update(id(v) for v in self._backdrop_visuals())
        return not any(id(node) not in allowed for node in _drawn_visuals(self.canvas.scene))

    def _render_with_cpu_layer(self, cached: list[Any], pixels: np.ndarray, h: int,
                               w: int) -> None:
        """The frame as OpenGL would draw it: what is under the layer, then the layer."""
        canvas = self.canvas
        visual = self._cpu_visual
        canvas.set_current()
        moving_backdrop = [v for v in self._backdrop_visuals() if v.visible and v not in cached]
        if moving_backdrop:
            # The camera moves: OpenGL draws the backdrop (not the layer), as every frame.
            if self._under is None or self._under.shape[:2] != (h, w):
                self._under = np.empty((h, w, 4), np.uint8)
            under = self._under
            canvas.push_fbo(self._fbo, (0, 0), canvas.size)
            try:
                set_visible_quietly(visual, False)
                canvas.events.draw(region=None)
                canvas.context.flush_commands()
                if not _read_bgra(under):
                    under[:] = under[::-1].copy()
            finally:
                set_visible_quietly(visual, True)
                canvas.pop_fbo()
        else:
            under = self._backdrop_bgra if cached and self._backdrop_bgra is not None \
                else self._background(h, w)
            # The draw handlers (the view eases its values there) run; the scene is not drawn.
            run_draw_handlers(canvas)
            canvas.context.flush_commands()
        canvas.push_fbo(self._fbo, (0, 0), canvas.size)   # the transforms of this framebuffer
        try:
            assert self._cpu_paint is not None
            self._cpu_paint(under, pixels)
        finally:
            canvas.pop_fbo()

    def _background(self, h: int, w: int) -> np.ndarray:
        """A frame of the canvas's background colour alone (as OpenGL clears it)."""
        rgba = np.asarray(self.canvas.bgcolor.rgba, dtype=np.float64)
        bgra = np.round(np.clip(rgba[[2, 1, 0, 3]], 0.0, 1.0) * 255.0).astype(np.uint8)
        bgra[3] = 255
        frame = self._background_frame
        if frame is None or frame.shape[:2] != (h, w) or not np.array_equal(frame[0, 0], bgra):
            frame = self._background_frame = np.empty((h, w, 4), np.uint8)
            frame[:] = bgra
        return frame

    # ------------------------------------------------------------ backdrop
    def set_backdrop(self, visuals: Callable[[], Sequence[Any]],
                     key: Callable[[], Hashable]) -> None:
        """Visuals drawn first and unchanged while ``key()`` is: drawn once, then reused.

        ``visuals()`` lists them (those shown count); ``key()`` is anything
        that changes when their picture does (camera, size, colour, opacity).
        While the key changes from frame to frame (the camera moves) they are
        drawn every frame; once it holds, their picture over the background
        is kept and shown beneath the rest instead. The result is the same
        picture: they are drawn first, over the background, by blending that
        does not depend on what is drawn after them.
        """
        self._backdrop_visuals, self._backdrop_key = visuals, key
        self._drop_backdrop()
        self.request_frame()

    def _drop_backdrop(self) -> None:
        if self._backdrop is not None:
            self._backdrop.parent = None
        self._backdrop, self._backdrop_for, self._backdrop_bgra = None, None, None

    def _use_backdrop(self, h: int, w: int) -> list[Any]:
        """The backdrop visuals the cached picture stands for in this frame ([]: draw them)."""
        visuals = [v for v in self._backdrop_visuals() if v.visible]
        key = (self._backdrop_key(), h, w, tuple(id(v) for v in visuals)) if visuals else None
        steady, self._last_key = key is not None and key == self._last_key, key
        if not steady:
            self._drop_backdrop()
            return []
        if self._backdrop_for != key:
            self._draw_backdrop(visuals, h, w)
            self._backdrop_for = key
        return visuals

    def _draw_backdrop(self, visuals: list[Any], h: int, w: int) -> None:
        from vispy import gloo, scene
        from vispy.visuals.transforms import STTransform

        canvas = self.canvas
        self._drop_backdrop()
        fbo = gloo.FrameBuffer(color=gloo.RenderBuffer((h, w)), depth=gloo.RenderBuffer((h, w)))
        canvas.push_fbo(fbo, (0, 0), canvas.size)
        try:
            canvas.context.clear(color=canvas.bgcolor, depth=True)
            for visual in visuals:        # just these (draw_visual draws the whole scene)
                visual.draw()
            rgba = np.ascontiguousarray(fbo.read())
        finally:
            canvas.pop_fbo()
        rgba[..., 3] = 255
        self._backdrop_bgra = np.ascontiguousarray(rgba[..., [2, 1, 0, 3]])
        # Made while a frame is drawn: the redraw it asks for is this frame.
        image = scene.visuals.Image(rgba, interpolation="nearest", clim=(0, 255),
                                    parent=canvas.scene)
        image.set_gl_state(blend=False, depth_test=False, depth_mask=False)
        image.order = -1000
        set_visible_quietly(image, False)   # shown only in the frames drawn here
        ratio = canvas.size[0] / max(1, w)
        image.transform = STTransform(scale=(ratio, ratio))
        self._backdrop = image
        self.backdrops += 1

    # ------------------------------------------------------------ Qt
    def paintEvent(self, event) -> None:  # noqa: N802 - Qt API
        native = self.canvas.native
        if native.size() != self.size():
            native.resize(self.size())
        ratio = float(native.devicePixelRatioF())
        wanted = (max(1, round(self.height() * ratio)), max(1, round(self.width() * ratio)))
        if self._stale or self._image is None or self._fbo_shape != wanted:
            self.render_frame()
        painter = QPainter(self)
        if self._image is not None:
            painter.drawImage(QPoint(0, 0), self._image)
        painter.end()

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt API
        super().resizeEvent(event)
        self.canvas.native.resize(self.size())
        self._stale = True

    # The canvas handles input as if it were on screen (same size, same coordinates).
    def mousePressEvent(self, event) -> None:  # noqa: N802 - Qt API
        self.canvas.native.mousePressEvent(event)

    def mouseReleaseEvent(self, event) -> None:  # noqa: N802 - Qt API
        self.canvas.native.mouseReleaseEvent(event)

    def mouseDoubleClickEvent(self, event) -> None:  # noqa: N802 - Qt API
        self.canvas.native.mouseDoubleClickEvent(event)

    def mouseMoveEvent(self, event) -> None:  # noqa: N802 - Qt API
        self.canvas.native.mouseMoveEvent(event)

    def wheelEvent(self, event) -> None:  # noqa: N802 - Qt API
        self.canvas.native.wheelEvent(event)

    def keyPressEvent(self, event) -> None:  # noqa: N802 - Qt API
        self.canvas.native.keyPressEvent(event)

    def keyReleaseEvent(self, event) -> None:  # noqa: N802 - Qt API
        self.canvas.native.keyReleaseEvent(event)
