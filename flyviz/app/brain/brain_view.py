"""The embedded 3-D brain: a vispy ``SceneCanvas`` holding the :class:`NeuronCloud`.

The view eases toward the activity it is given: just before each draw the
shown activation moves a fraction ``1 - exp(-dt / tau)`` of the way to the
target state (exponential smoothing, ``dt`` the time since the last draw), so
a token rate of 5/s or 50/s both animate smoothly, each draw uploads the
activity once, and the canvas redraws only while something still moves.

With a software OpenGL (Mesa llvmpipe and the like) the view draws each
frame offscreen and shows it as plain pixels (:class:`~flyviz.app.brain.raster_canvas.RasterScreen`):
Qt composing an OpenGL widget into its window costs the CPU two full-window
fills a frame there. The cloud is then painted on the CPU whenever the frame
is the cloud over its outline (:mod:`flyviz.render.splat`: llvmpipe's per-point
set-up was most of a frame), and otherwise drawn with its lean shaders (the
same picture, fewer rasterised pixels: :mod:`flyviz.render.cloud`). The view is
a native child window too, so the rest of the window is flushed apart from it.
On a GPU the canvas is an ordinary OpenGL widget and nothing of this applies.

What the view draws is a :class:`~flyviz.render.style.CloudStyle` (its
:attr:`BrainView.style`): the same value screenshots and movies apply, so the
three show the same picture. Its colour layer is the recorded state as the
settings say (:attr:`BrainView.activation`), or another layer set with
:meth:`BrainView.set_layer` (a difference of two runs, importance, an atlas
statistic), with its own colormap and colourbar.

Neurons without a measured soma are hidden and the overlay says how many;
a layout computed from the graph and the demo's synthetic somata are named
as such, so nobody mistakes them for anatomy.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import time
from typing import Any
from collections import deque
from collections.abc import Callable

import numpy as np
from PySide6.QtCore import QEvent, QObject, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QImage, QPixmap
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget
from vispy import scene

from flyviz.model.checkpoint import Anatomy
from flyviz.render.camera import DEFAULT_FOV, CameraPose, frame_brain, positions_bounds
from flyviz.render.cloud import NeuronCloud, crowding_gain
from flyviz.render.colormaps import colorbar_image, is_diverging
from flyviz.render.gl_backend import (SOFTWARE_RENDERERS, current_renderer,  # noqa: F401
                                      is_software_renderer, screen_dpi)
from flyviz.render.picking import pick_neuron
from flyviz.app.brain.raster_canvas import RasterScreen
from flyviz.render.shell import BrainShell
from flyviz.render import splat
from flyviz.render.style import (CloudStyle, ColourLayer, activation_layer,
                                 apply_style)

#: A press and release closer than this (pixels) is a click, not a drag.
CLICK_SLOP_PX = 4.0

#: Longest easing step (s): after an idle spell a new frame still eases in.
MAX_EASE_STEP_S = 0.1

#: Fraction of the neurons drawn while the camera moves or the view is resized, with a
#: software OpenGL (see :meth:`flyviz.render.cloud.NeuronCloudVisual.set_detail`).
INTERACTION_DETAIL = 0.25

#: Every neuron is drawn again this long after the last camera move or resize (ms).
INTERACTION_SETTLE_MS = 250

log = logging.getLogger(__name__)


def anatomy_note(anatomy: Anatomy, neurons: int) -> str:
    """One line telling the user what the neuron positions are and how many are hidden."""
    shown = anatomy.n_valid
    hidden = neurons - shown
    if anatomy.kind == "layout":
        return "layout computed from the graph, not anatomy"
    if anatomy.kind == "synthetic":
        text = f"synthetic soma positions: {shown:,} of {neurons:,} neurons placed"
    else:
        text = f"{shown:,} of {neurons:,} neurons have a measured soma"
    return text + (f"; {hidden:,} hidden" if hidden else "")



def _rgba(values: Any) -> tuple[float, float, float, float]:
    """An RGBA colour as four floats."""
    r, g, b, a = (float(c) for c in values)
    return (r, g, b, a)

class _ResizeWatch(QObject):
    """Calls ``callback()`` when the watched widget is about to be resized.

    An event filter runs before the widget's layout resizes (and repaints) the
    OpenGL canvas, which :meth:`QWidget.resizeEvent` would be too late for.
    """

    def __init__(self, callback, parent: QObject) -> None:
        super().__init__(parent)
        self._callback = callback

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt API
        if event.type() == QEvent.Type.Resize:
            self._callback()
        return False


def scale_text(value: float, signed: bool) -> str:
    """A colourbar end as text: two decimals, or two significant figures below 0.1 (a
    comparison's difference of a few thousandths read "+0.00 / -0.00")."""
    sign = "+" if signed else ""
    if value == 0 or abs(value) >= 0.095:
        return f"{value:{sign}.2f}"
    return f"{value:{sign}.2g}"


class BrainView(QWidget):
    """Every neuron as a glowing point, coloured by the shown frame's state.

    Signals
    -------
    neuron_clicked(index)
        A click on the cloud hit neuron ``index`` (``-1``: empty space).
    pick_clicked(index, add)
        The same click for picking: ``add`` when Shift was held (add to the pick).
    camera_moved()
        The user moved the camera (after a drag or a scroll).
    """

    neuron_clicked = Signal(int)
    pick_clicked = Signal(int, bool)
    #: The user moved the camera (orbit, pan or zoom ended); :meth:`camera_pose` says where.
    camera_moved = Signal()

    def __init__(self, parent: QWidget | None = None, native_window: bool | None = None,
                 software_path: bool | None = None, cpu_cloud: bool | None = None) -> None:
        """``software_path``: present frames as pixels and draw the lean cloud (see the module
        notes); by default when the OpenGL renders on the CPU, ``False`` for the GPU path.
        ``cpu_cloud``: on the software path, paint the cloud on the CPU
        (:mod:`flyviz.render.splat`) when the frame allows; by default when numba is
        installed and ``FLYVIZ_CPU_CLOUD`` is not ``0``."""
        super().__init__(parent)
        # No buffer swap after drawing: the canvas is a QOpenGLWidget, which draws into
        # its own framebuffer that Qt composes into the window. vispy's swap of the
        # context's surface only waits for the frame and copies it where nobody looks
        # (about 10 ms a frame with software OpenGL at 1280x720). Made without a parent:
        # an OpenGL widget that was ever a child of a window makes Qt compose that window
        # through OpenGL for good, which the software path exists to avoid; the GPU path
        # puts it in the layout below.
        self.canvas = scene.SceneCanvas(keys=None, bgcolor=CloudStyle().background, show=False,
                                        parent=None, size=(800, 600), autoswap=False,
                                        dpi=screen_dpi())
        # vispy made its context current on an offscreen surface: ask who renders.
        self.renderer = current_renderer()
        self.software_gl = is_software_renderer(self.renderer)
        #: True when frames are shown as pixels and the cloud is lean (software OpenGL).
        self.software_path = self.software_gl if software_path is None else bool(software_path)
        #: Shows the canvas's frames as pixels on the software path, else None.
        self.raster_screen: RasterScreen | None = (
            RasterScreen(self.canvas, self) if self.software_path else None)
        if cpu_cloud is None:
            cpu_cloud = os.environ.get("FLYVIZ_CPU_CLOUD", "1") != "0"
        #: True when the cloud is painted on the CPU whenever a frame allows (software path).
        self.cpu_cloud = bool(cpu_cloud) and self.raster_screen is not None
        if self.cpu_cloud:
            splat.warm_up(background=True)      # compiles while the window opens
        shown = self.raster_screen if self.raster_screen is not None else self.canvas.native
        shown.setMinimumSize(QSize(240, 200))
        shown.setFocusPolicy(Qt.FocusPolicy.ClickFocus)
        if self.software_gl if native_window is None else native_window:
            self.setAttribute(Qt.WidgetAttribute.WA_NativeWindow, True)
        #: Fraction of the neurons drawn while the user moves the camera or resizes.
        self.interaction_detail = INTERACTION_DETAIL if self.software_gl else 1.0
        self._settle = QTimer(self)
        self._settle.setSingleShot(True)
        self._settle.setInterval(INTERACTION_SETTLE_MS)
        self._settle.timeout.connect(self._full_detail)
        # Tell the viewer state where the camera went once a drag or scroll ends.
        self._camera_settle = QTimer(self)
        self._camera_settle.setSingleShot(True)
        self._camera_settle.setInterval(0)
        self._camera_settle.timeout.connect(self.camera_moved.emit)
        self._resize_watch = _ResizeWatch(self._interacting, self)
        self.installEventFilter(self._resize_watch)
        self.view = self.canvas.central_widget.add_view()
        self.view.camera = scene.TurntableCamera(fov=DEFAULT_FOV, up="+y")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(shown)

        self.note = QLabel("", self)
        self.note.setObjectName("overlay")
        self.view_label = QLabel("", self)
        self.view_label.setObjectName("overlay")
        self.colorbar = QLabel(self)
        self.colorbar_caption = QLabel("", self)
        self.colorbar_high = QLabel("", self)
        self.colorbar_low = QLabel("", self)
        for label in (self.colorbar_caption, self.colorbar_high, self.colorbar_low):
            label.setObjectName("overlay")
        self._colorbar_map = ""
        self._overlays = (self.note, self.view_label, self.colorbar, self.colorbar_caption,
                          self.colorbar_high, self.colorbar_low)

        self.cloud: NeuronCloud | None = None
        #: Translucent meshes behind the cloud (outline, neuropils): set_meshes.
        self.shell: BrainShell | None = None
        self.meshes: tuple[Any, ...] = ()
        self.mesh_opacity = 0.12
        #: The viewer state shown (the window sets it): an enlarged screenshot is rendered
        #: from it (FrameRenderer.for_state), or ``None`` for a view on its own.
        self.state: Any = None
        self.positions = np.zeros((0, 3), np.float32)
        self.visible = np.zeros(0, bool)
        self.bounds = positions_bounds(np.zeros((1, 3)))
        #: The recorded state's colour layer, as the display settings say.
        self.activation: ColourLayer = activation_layer("signed")
        #: Another layer shown instead of the state (see :meth:`set_layer`), or None.
        self.layer_override: ColourLayer | None = None
        #: The colour range shown now (the layer's, resolved for the shown values).
        self.value_range: tuple[float, float] = (-1.0, 1.0)
        self.smoothing_s = 0.12
        self.view_name = "front"
        self.glow = 1.0
        self.point_size = 3.0
        #: Brightness gain setting: None for automatic (see :class:`CloudStyle`).
        self.gain_setting: float | None = None
        #: The gain applied now (the setting, or the automatic one).
        self.gain = 1.0
        #: ``activity_sample() -> values``: some of the values to be shown, for the
        #: automatic gain (the display controller sets it); None: a typical activity.
        self.activity_sample: Callable[[], np.ndarray | None] | None = None
        self.emphasis: np.ndarray | None = None
        self.selected: int | None = None
        self._target: np.ndarray | None = None
        self._shown: np.ndarray | None = None
        self._dirty = False
        self._press: tuple[float, float] | None = None
        self._last_draw = time.perf_counter()
        self.draw_times: deque[float] = deque(maxlen=240)
        self.canvas.events.draw.connect(self._before_draw, position="first")
        self.canvas.events.draw.connect(self._on_draw)
        self.canvas.events.mouse_press.connect(self._on_mouse_press)
        self.canvas.events.mouse_release.connect(self._on_mouse_release)
        self.canvas.events.mouse_move.connect(self._on_mouse_move)
        self.canvas.events.mouse_wheel.connect(lambda _event: self._on_wheel())
        self.canvas.events.resize.connect(lambda _event: self._on_canvas_resize())
        self._update_colorbar()

    # ------------------------------------------------------------ anatomy
    def set_anatomy(self, anatomy: Anatomy, neurons: int) -> None:
        """Show a new brain: one point per neuron at its soma (hidden where unknown)."""
        if self.cloud is not None:
            self.cloud.parent = None
            self.cloud = None
        self.positions = np.ascontiguousarray(anatomy.positions_um(), dtype=np.float32)
        self.visible = np.asarray(anatomy.valid, dtype=bool).copy()
        self.cloud = NeuronCloud(self.positions, self.visible, lean=self.software_path,
                                 parent=self.view.scene)
        self.emphasis = None
        self.selected = None
        self.bounds = positions_bounds(self.positions, self.visible)
        self._target = np.zeros(neurons, np.float32)
        self._shown = np.zeros(neurons, np.float32)
        self.cloud.set_activity(self._shown)
        # No state yet: the brain at rest, not zeros drawn as faint as the background.
        self.cloud.set_resting(True)
        self.note.setText(anatomy_note(anatomy, neurons))
        self.note.setToolTip("Neurons without a known soma position are not drawn: "
                             "flyviz never invents positions." if anatomy.kind == "measured"
                             else "")
        self._style_cloud(self.cloud, self._canvas_height())
        if self.cpu_cloud and self.raster_screen is not None:
            painter = splat.CloudPainter(self.cloud)
            self.raster_screen.set_cpu_layer(self.cloud, painter.paint, splat.splat_available)
        self.set_view(self.view_name)
        self._place_overlays()

    def set_meshes(self, meshes: Any, opacity: float) -> None:
        """Draw ``meshes`` (:class:`~flyviz.analysis.outline.Mesh`) behind the neurons."""
        self.meshes = tuple(meshes)
        self.mesh_opacity = float(opacity)
        if self.shell is None:
            self.shell = BrainShell(self.view.scene, self.meshes, self.mesh_opacity)
            if self.raster_screen is not None:
                # The outline changes only with the camera: drawn once while it holds still.
                self.raster_screen.set_backdrop(self._shell_visuals, self._shell_key)
        else:
            self.shell.opacity = self.mesh_opacity
            self.shell.set_meshes(self.meshes)
        self._dirty = True
        self.canvas.update()

    def _shell_visuals(self) -> list[Any]:
        return list(self.shell.visuals) if self.shell is not None else []

    def _shell_key(self) -> Any:
        """What the outline's picture depends on: camera, size, its look and meshes."""
        shell = self.shell
        look = (shell.opacity, shell.colour) if shell is not None else None
        return (CameraPose.of(self.view.camera), tuple(self.canvas.size), look,
                tuple(id(m) for m in self.meshes))

    # ------------------------------------------------------------ activity
    def set_target(self, state: np.ndarray | None) -> None:
        """The activity the view eases toward (``None``: no state; the resting brain is drawn).

        The resting brain (every neuron in one neutral tone,
        :meth:`~flyviz.render.cloud.NeuronCloudVisual.set_resting`) is shown while
        there is no state, as before the first run; a state is drawn as the colour
        layer says, exactly as without it.
        """
        if self._target is None:
            return
        if state is None:
            self._target.fill(0.0)
        else:
            self._target[:] = state
        if self.cloud is not None:
            self.cloud.set_resting(state is None)
        if self.auto:
            self._set_range(self.layer.value_range(self._target[self.visible]
                                                   if self.visible.any() else None))
        self._dirty = True

    def snap(self) -> None:
        """Show the target at once, skipping the easing."""
        if self._target is not None and self._shown is not None:
            self._shown[:] = self._target
            self._upload()
            self._dirty = False             # nothing left to ease
            if self.cloud is not None:
                self.canvas.update()

    def advance(self, dt: float) -> bool:
        """Ease the shown activity toward the target by ``dt`` seconds; True if it moved."""
        if self._target is None or self._shown is None or not self._dirty:
            return False
        if self.smoothing_s <= 0:
            self._shown[:] = self._target
            self._dirty = False
        else:
            alpha = np.float32(1.0 - math.exp(-max(dt, 0.0) / self.smoothing_s))
            self._shown += alpha * (self._target - self._shown)
            if float(np.max(np.abs(self._target - self._shown), initial=0.0)) < 1e-3 * self.span:
                self._shown[:] = self._target
                self._dirty = False
        self._upload()
        return True

    def tick(self) -> None:
        """One display tick: ask for a draw while the shown activity still moves."""
        if self._dirty and self.cloud is not None:
            self.canvas.update()

    @property
    def animating(self) -> bool:
        """True while the shown activity has not reached the target yet."""
        return self._dirty

    @property
    def shown_activity(self) -> np.ndarray | None:
        """The activation currently drawn (after easing)."""
        return self._shown

    def _upload(self) -> None:
        if self.cloud is not None and self._shown is not None:
            self.cloud.set_activity(self._shown)

    # ------------------------------------------------------------ appearance
    @property
    def layer(self) -> ColourLayer:
        """The colour layer shown: :attr:`layer_override` if set, else :attr:`activation`."""
        return self.layer_override or self.activation

    @property
    def style(self) -> CloudStyle:  # type: ignore[override]  # a view, not Qt's QStyle
        """Everything about how the cloud is drawn (what screenshots and movies start from)."""
        return CloudStyle(layer=self.layer, point_size=self.point_size, glow=self.glow,
                          gain=self.gain_setting,
                          background=_rgba(self.canvas.bgcolor.rgba))

    @property
    def mode(self) -> str:
        """The recorded state's colormap: ``"signed"`` or ``"abs"``."""
        return self.activation.colormap

    @property
    def colormap(self) -> str:
        """The colormap shown now (the layer's)."""
        return self.layer.colormap

    @property
    def auto(self) -> bool:
        """True when the shown layer's colour range follows the shown values."""
        return self.layer.scale.kind == "auto"

    @property
    def limit(self) -> float:
        """The largest magnitude of the shown colour range."""
        return max(abs(self.value_range[0]), abs(self.value_range[1]))

    @property
    def span(self) -> float:
        """The width of the shown colour range."""
        return self.value_range[1] - self.value_range[0]

    def apply_settings(self, activation: ColourLayer, point_size: float, glow: float) -> None:
        """The display settings at once: the state's layer, point size and glow.

        A layer set with :meth:`set_layer` stays shown; the state's layer is
        what the view shows again once it is cleared.
        """
        self.activation = activation
        self.point_size, self.glow = float(point_size), float(glow)
        if self.cloud is not None:
            self.cloud.set_glow(self.glow)
            self.cloud.set_point_size(self.style.point_px(self._canvas_height()))
        self._layer_changed()

    def set_layer(self, layer: ColourLayer | None) -> None:
        """Colour by ``layer`` instead of the recorded state (``None``: the state again).

        The view is handed the layer's values by whoever drives it
        (:meth:`flyviz.app.window.display.DisplayController.set_colour_layer`).
        """
        self.layer_override = layer
        self._layer_changed()

    def set_mode(self, mode: str) -> None:
        """The recorded state's colours: ``"signed"`` (diverging) or ``"abs"`` (|x|, sequential)."""
        self.activation = activation_layer(mode, self.activation.scale)
        self._layer_changed()

    def _layer_changed(self) -> None:
        layer = self.layer
        if self.cloud is not None:
            self.cloud.set_colormap(layer.colormap)
        if self.auto:
            shown = self._target[self.visible] if self._target is not None and self.visible.any() \
                else None
            self._set_range(layer.value_range(shown))
        else:
            self._set_range(layer.value_range(None))
        self._update_colorbar(force=True)
        self.update_gain()

    def _set_range(self, value_range: tuple[float, float]) -> None:
        lo, hi = (float(v) for v in value_range)
        if not (np.isfinite(lo) and np.isfinite(hi) and hi > lo):
            lo, hi = self.layer.value_range(None) if self.auto else (-1.0, 1.0)
        old_lo, old_hi = self.value_range
        tolerance = 1e-6 * max(hi - lo, 1e-6)
        if abs(lo - old_lo) > tolerance or abs(hi - old_hi) > tolerance or self.cloud is None:
            self.value_range = (lo, hi)
            if self.cloud is not None:
                self.cloud.set_range(lo, hi)
            self._update_colorbar()

    def set_glow(self, strength: float) -> None:
        """Halo strength, 0..2."""
        self.glow = float(strength)
        if self.cloud is not None:
            self.cloud.set_glow(self.glow)

    def set_point_size(self, px: float) -> None:
        """Diameter of a quiet neuron in pixels at 720 lines (scaled with the view's height)."""
        self.point_size = float(px)
        if self.cloud is not None:
            self.cloud.set_point_size(self.style.point_px(self._canvas_height()))
            self.update_gain()

    def set_gain(self, gain: float | None) -> None:
        """Brightness gain of every neuron; ``None``: automatic from the crowding on screen."""
        self.gain_setting = None if gain is None else float(gain)
        self.update_gain()

    def update_gain(self) -> None:
        """Set the automatic gain again for the view as the camera shows it now."""
        if self.cloud is None:
            return
        if self.gain_setting is not None:
            gain = self.gain_setting
        else:
            sample = self.activity_sample() if self.activity_sample is not None else None
            if sample is not None and not np.asarray(sample).size:
                sample = None
            layer = self.layer
            value_range = self.value_range if not self.auto or sample is None \
                else layer.value_range(sample)
            height = self._canvas_height()
            gain = crowding_gain(self.cloud, height, self.style.point_px(height), sample,
                                 layer.colormap, value_range)
        if gain != self.gain:
            self.gain = gain
        self.cloud.set_gain(gain)

    def set_emphasis(self, mask: np.ndarray | None) -> None:
        """Keep ``mask`` lit and dim the rest (``None``: everything lit)."""
        self.emphasis = None if mask is None else np.asarray(mask, dtype=bool)
        if self.cloud is not None:
            self.cloud.set_emphasis(self.emphasis)

    def set_selected(self, index: int | None) -> None:
        """Ring the neuron ``index`` (``None``: no selection)."""
        self.selected = None if index is None else int(index)
        if self.cloud is not None:
            self.cloud.set_selected(self.selected)

    def _canvas_height(self) -> float:
        return float(max(1, self.canvas.size[1]))

    def _on_canvas_resize(self) -> None:
        # Points keep their size relative to the view (see CloudStyle.point_size).
        if self.cloud is not None:
            self.cloud.set_point_size(self.style.point_px(self._canvas_height()))

    def _style_cloud(self, cloud: NeuronCloud, canvas_height: float, gain: float | None = None) -> None:
        """Apply the view's style (at its colour range and gain), emphasis and selection."""
        apply_style(cloud, self.style, canvas_height, self.value_range)
        cloud.set_gain(self.gain if gain is None else gain)
        if self.emphasis is not None:
            cloud.set_emphasis(self.emphasis)
        if self.selected is not None:
            cloud.set_selected(self.selected)

    def camera_pose(self) -> CameraPose:
        """Where the view looks from now (for screenshots and movies of the same view)."""
        return CameraPose.of(self.view.camera)

    def set_view(self, name: str) -> None:
        """Look from ``"front"``, ``"top"`` or ``"side"``."""
        self.view_name = name
        w, h = self.canvas.size
        frame_brain(self.view.camera, name, self.positions, self.visible,
                    aspect=w / max(1, h))
        self.view_label.setText(f"{name} view · drag to orbit, scroll to zoom, shift-drag to pan")
        self.view_label.adjustSize()
        self._place_overlays()
        self.update_gain()

    # ------------------------------------------------------------ overlays
    def _update_colorbar(self, force: bool = False) -> None:
        # Called whenever the automatic scale moves (every frame of a run): touch the
        # widgets only when what they show changes, since each repaint of an overlay
        # makes Qt compose the OpenGL view again.
        layer = self.layer
        if self._colorbar_map != layer.colormap:
            self._colorbar_map = layer.colormap
            height, width = 160, 12
            img = colorbar_image(layer.colormap, height, width)
            qimg = QImage(img.data, width, height, 4 * width, QImage.Format.Format_RGBA8888).copy()
            self.colorbar.setPixmap(QPixmap.fromImage(qimg))
            self.colorbar.setFixedSize(width, height)
        lo, hi = self.value_range
        signed = is_diverging(layer.colormap)
        high = scale_text(hi, signed)
        low = scale_text(lo, signed and lo != 0)
        caption = layer.caption
        if not force and (caption, high, low) == (self.colorbar_caption.text(),
                                                  self.colorbar_high.text(),
                                                  self.colorbar_low.text()):
            return
        self.colorbar_caption.setText(caption)
        self.colorbar_high.setText(high)
        self.colorbar_low.setText(low)
        for label in (self.colorbar_caption, self.colorbar_high, self.colorbar_low):
            label.adjustSize()
        self._place_overlays()

    def _place_overlays(self) -> None:
        w, h = self.width(), self.height()
        # A narrow view (side columns widened by hand) wraps the hint rather than cut it.
        self._fit_width(self.view_label, w - 20)
        self.view_label.move(10, max(10, h - self.view_label.height() - 10))
        cb_x = w - self.colorbar.width() - 16
        cb_y = max(40 + self.colorbar_caption.height(), (h - self.colorbar.height()) // 2)
        self.colorbar.move(cb_x, cb_y)
        high_y = cb_y - self.colorbar_high.height() - 4
        self.colorbar_high.move(w - self.colorbar_high.width() - 8, high_y)
        self.colorbar_caption.move(w - self.colorbar_caption.width() - 8,
                                   high_y - self.colorbar_caption.height())
        self.colorbar_low.move(w - self.colorbar_low.width() - 8, cb_y + self.colorbar.height() + 4)
        self._place_note()
        for label in self._overlays:
            label.raise_()

    def _place_note(self) -> None:
        """The anatomy note at the top left, wrapped to the room left of the colour bar's
        labels where they reach its height (a short view, as in the analysis layout, drew
        the caption over the note's end)."""
        note = self.note
        note.setWordWrap(False)
        note.adjustSize()
        note.move(10, 10)
        room = self.width() - 20         # a narrow view: the note's end was cut at its edge
        labels = [label for label in (self.colorbar_caption, self.colorbar_high) if label.text()]
        beside = [label for label in labels
                  if label.geometry().top() < note.geometry().bottom() + 4]
        if beside:
            room = min(room, min(label.x() for label in beside) - 12 - note.x())
        self._fit_width(note, room)

    @staticmethod
    def _fit_width(label: QLabel, room: int) -> None:
        """``label`` on one line when it fits in ``room`` pixels, else wrapped to that
        width (at least 80) and as tall as its lines."""
        label.setWordWrap(False)
        label.adjustSize()
        if label.width() <= room:
            return
        label.setWordWrap(True)
        room = max(room, 80)
        label.resize(room, label.heightForWidth(room))

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt API
        super().resizeEvent(event)
        self._place_overlays()

    # ------------------------------------------------------------ geometry
    def canvas_transform(self):
        """Transform from cloud coordinates to canvas pixels (for picking and tests)."""
        return self.view.scene.node_transform(self.canvas.scene)

    def project(self, neuron: int) -> tuple[float, float]:
        """Canvas pixel (logical, origin top-left) where neuron ``neuron`` is drawn."""
        from flyviz.render.picking import project_points

        xy, _, _ = project_points(self.positions[[int(neuron)]], self.canvas_transform())
        return float(xy[0, 0]), float(xy[0, 1])

    def pick(self, x: float, y: float, radius_px: float = 8.0) -> int | None:
        """The neuron drawn at canvas pixel ``(x, y)``, nearest the camera, or None."""
        if self.cloud is None:
            return None
        return pick_neuron(self.positions, self.visible, self.canvas_transform(), (x, y),
                           radius_px)

    # ------------------------------------------------------------ events
    def _before_draw(self, event) -> None:
        # Ease by the time since the last draw and upload once, just before drawing;
        # the upload must not ask for yet another draw.
        self._ease_to_now()

    def _ease_to_now(self) -> None:
        now = time.perf_counter()
        dt, self._last_draw = min(now - self._last_draw, MAX_EASE_STEP_S), now
        if self._dirty and self.cloud is not None:
            with self.cloud.events.update.blocker():
                self.advance(dt)

    def _on_draw(self, event) -> None:
        self.draw_times.append(time.perf_counter())

    def _on_wheel(self) -> None:
        self._interacting()
        self._camera_settle.start()

    def _on_mouse_move(self, event) -> None:
        if event.is_dragging:
            self._interacting()

    def _interacting(self) -> None:
        """The camera moves or the view resizes: draw fewer neurons until it settles."""
        if self.cloud is None or self.interaction_detail >= 1.0:
            return
        self.cloud.set_detail(self.interaction_detail)
        self._settle.start()

    def _full_detail(self) -> None:
        if self.cloud is not None:
            if self.cloud.detail < 1.0:
                # The camera or the size settled: the crowding on screen may have changed.
                self.update_gain()
            self.cloud.set_detail(1.0)

    def _on_mouse_press(self, event) -> None:
        self._press = (float(event.pos[0]), float(event.pos[1])) if event.button == 1 else None

    def _on_mouse_release(self, event) -> None:
        self._camera_settle.start()     # any button's drag may have moved the camera
        if self._press is None or event.button != 1:
            return
        x, y = float(event.pos[0]), float(event.pos[1])
        moved = math.hypot(x - self._press[0], y - self._press[1])
        self._press = None
        if moved <= CLICK_SLOP_PX:
            hit = self.pick(x, y)
            add = any(str(getattr(m, "name", m)).lower() == "shift"
                      for m in (event.modifiers or ()))
            if hit is not None or not add:     # a missed shift-click keeps the selection
                self.neuron_clicked.emit(-1 if hit is None else hit)
            self.pick_clicked.emit(-1 if hit is None else hit, add)

    # ------------------------------------------------------------ images
    def render_image(self) -> np.ndarray:
        """The canvas as ``(H, W, 4)`` uint8 RGBA at its physical pixel size, every neuron drawn."""
        self._settle.stop()
        self._full_detail()
        self._ease_to_now()     # render() draws without the draw event that eases
        rgba = np.array(self.canvas.render(alpha=True), dtype=np.uint8)
        rgba[..., 3] = 255
        return rgba

    def grab_image(self, scale: float = 1.0) -> QImage:
        """The brain view with its overlays (colourbar, notes) as a QImage.

        ``scale`` above 1 renders the scene again at a larger size (a sharper
        picture, not an enlarged one) and composites the overlays on top.
        """
        self._ease_to_now()
        if scale == 1.0:
            if self.raster_screen is not None:
                self.raster_screen.request_frame()     # as the OpenGL widget's grab draws anew
            return self.grab().toImage()
        from PySide6.QtGui import QPainter

        w, h = max(1, round(self.width() * scale)), max(1, round(self.height() * scale))
        rgba = self.render_at(w, h)
        image = QImage(rgba.data, w, h, 4 * w, QImage.Format.Format_RGBA8888).copy()
        painter = QPainter(image)
        painter.scale(scale, scale)
        for label in self._overlays:
            if label.isVisible() and (label.text() or label.pixmap() is not None):
                label.render(painter, label.pos())
        painter.end()
        return image

    def render_at(self, width: int, height: int) -> np.ndarray:
        """Render the scene on a canvas created at ``width x height`` (RGBA uint8).

        The same picture as the view at another resolution: the same style
        (points scale with the height), colour range, gain, highlight,
        selection and camera, drawn by the one offscreen scene builder movies
        and figures use (:class:`~flyviz.render.offscreen.FrameRenderer`), with
        the app's own OpenGL.
        """
        import vispy.app

        from flyviz.render.offscreen import FrameRenderer

        style = dataclasses.replace(self.style, gain=self.gain)
        state = self.state
        if state is not None and state.anatomy is not None \
                and state.neurons == self.positions.shape[0]:
            # What the view shows now: its eased range, gain and camera over the state.
            renderer = FrameRenderer.for_state(state, (width, height), style=style,
                                               camera=self.camera_pose(),
                                               value_range=self.value_range,
                                               app=vispy.app.use_app())
        else:
            renderer = FrameRenderer(self.positions, self.visible, (width, height),
                                     style=style, value_range=self.value_range,
                                     camera=self.camera_pose(), overlays=False,
                                     emphasis=self.emphasis, selected=self.selected,
                                     app=vispy.app.use_app(), meshes=self.meshes,
                                     mesh_opacity=self.mesh_opacity)
        try:
            shown = self._shown if self._shown is not None else \
                np.zeros(self.positions.shape[0], np.float32)
            rgb = renderer.render_state(shown)
        finally:
            renderer.close()
        rgba = np.full((rgb.shape[0], rgb.shape[1], 4), 255, dtype=np.uint8)
        rgba[..., :3] = rgb
        return rgba
