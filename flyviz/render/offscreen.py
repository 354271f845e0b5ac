"""Render frames to RGB arrays of an exact size, with or without a display.

:class:`FrameRenderer` draws the neuron cloud on a canvas created at the
requested size (rendering a differently sized canvas would leave the scene
unscaled in a corner) and, optionally, the overlays a shared movie needs:
the model's name, a colourbar and what the model's kind says of the frame
(:meth:`flyviz.kinds.ModelKind.overlays`): its time axis's counter and, for a
language model, the next-token candidates as bars and the text so far with the
newest token highlighted. Everything is drawn
with vispy visuals in the same OpenGL pass; nothing else rasterises text.

The cloud is set up from a :class:`~flyviz.render.style.CloudStyle`, as the
app's brain view and screenshots set theirs up, so a movie frame shows what
the window shows. The pieces live next door: :mod:`flyviz.render.gl_backend`
(which OpenGL, ``--gl``), :mod:`flyviz.render.overlay_layout` (the words and
bars), :mod:`flyviz.render.resample` (back to the exact size).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
from vispy import gloo, scene

from flyviz.model.errors import ExportError
from flyviz.render.vispy_compat import update_view_clipper
from flyviz.render.camera import DEFAULT_FOV, VIEW_PRESETS, CameraPose, frame_brain
from flyviz.render.cloud import NeuronCloud, crowding_gain
from flyviz.render.gl_backend import (BACKENDS, current_renderer, egl_current,
                                      initialise_hidden_qt_canvas, is_software_renderer,
                                      offscreen_app)
from flyviz.render.overlay_content import OverlayContent
from flyviz.render.overlay_layout import OverlayLayout, colorbar_labels
from flyviz.render.resample import AreaResampler
from flyviz.render.shell import BrainShell
from flyviz.render.style import (BACKGROUND, REFERENCE_HEIGHT, CloudStyle, ColourScale,
                                 activation_layer, apply_style)

__all__ = ["BACKENDS", "BACKGROUND", "MAX_EDGE", "FrameRenderer", "check_size", "colorbar_labels",
           "offscreen_app", "parse_size", "render_state_image"]

#: Frames of a recording sampled for a still's automatic brightness gain (as the app's view).
GAIN_SAMPLES = 16

#: Largest frame edge, in pixels (8K); larger sizes exceed what GL drivers allow.
MAX_EDGE = 7680


def parse_size(text: str) -> tuple[int, int]:
    """``"1280x720"`` -> ``(1280, 720)``; raises :class:`ExportError` when malformed."""
    parts = str(text).lower().replace("\u00d7", "x").split("x")
    try:
        w, h = (int(p) for p in parts)
    except ValueError:
        raise ExportError(f"size {text!r} must look like WIDTHxHEIGHT, e.g. 1280x720") from None
    return check_size((w, h))


def check_size(size: "tuple[int, int] | str") -> tuple[int, int]:
    """A ``(width, height)`` pair, or a ``"1280x720"`` str (:func:`parse_size`), as two
    ints of pixels; :class:`ExportError` in one line for anything else (a str was read
    character by character, a NaN side failed in a bare ``ValueError``)."""
    import math
    import numbers

    from flyviz.arguments import shown

    if isinstance(size, str):
        return parse_size(size)
    rule = "must be (width, height) in pixels or 'WIDTHxHEIGHT', e.g. (1280, 720) or '1280x720'"
    try:
        sides = tuple(size)
    except TypeError:
        raise ExportError(f"size {shown(size)} {rule}") from None
    if len(sides) != 2 or not all(
            isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)
            and float(v).is_integer() for v in sides):
        raise ExportError(f"size {shown(size)} {rule}, two whole numbers")
    w, h = int(sides[0]), int(sides[1])
    if not (16 <= w <= MAX_EDGE and 16 <= h <= MAX_EDGE):
        raise ExportError(f"size {w}x{h} is out of range: each side must be 16 to {MAX_EDGE} pixels")
    return w, h


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
        Draw the header, colourbar, bars and text.
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
    emphasis
        ``(N,)`` bool: keep these neurons lit and dim the rest (a highlight), or ``None``.
    selected
        A neuron to ring (the selection), or ``None``.
    gain_range
        The colour range the automatic gain is computed with (default:
        ``value_range``); the app's view computes its gain over a sample of
        the recording, not over the shown frame's range.
    meshes, mesh_opacity
        Translucent meshes drawn behind the neurons (the brain's outline,
        neuropils: :mod:`flyviz.analysis.outline`) and their alpha.
    picked, intervened
        Neurons to ring as picked and as touched by an intervention (the window's
        rings, :mod:`flyviz.render.marks`), or ``None``.
    lines
        Synapses drawn as lines over the cloud: ``(points, colours)``, ``(2k, 3)``
        segments and an RGBA per point (a viewer state's
        :meth:`~flyviz.viewer.state.ViewerState.lines`), or ``None``.
    gain_per_frame
        With an automatic ``style.gain``: set the gain again for every frame
        from the frame's own values over its colour range, as the app's brain
        view does when the layer it shows changes (a flow movie's lag sweep,
        whose steps differ in how many neurons carry flow). Default: once.
    """

    def __init__(self, positions: np.ndarray, visible: np.ndarray | None = None,
                 size: tuple[int, int] = (1280, 720), *, style: CloudStyle | None = None,
                 value_range: tuple[float, float] | None = None, mode: str = "signed",
                 scale: float = 1.0, view: str = "front", camera: CameraPose | None = None,
                 orbit: bool = False, overlays: bool = True, model_name: str = "",
                 point_size: float | None = None, glow: float = 1.0,
                 activity_sample: np.ndarray | None = None, app: Any = None,
                 emphasis: np.ndarray | None = None, selected: int | None = None,
                 gain_range: tuple[float, float] | None = None,
                 meshes: Sequence[Any] = (), mesh_opacity: float = 0.12,
                 gain_per_frame: bool = False, picked: Any = None, intervened: Any = None,
                 lines: tuple[np.ndarray, np.ndarray] | None = None) -> None:
        self.size = check_size(size)
        self._rings = {kind: np.zeros(0, np.int64) if neurons is None
                       else np.asarray(neurons, np.int64).ravel()
                       for kind, neurons in (("picked", picked), ("intervened", intervened))}
        self._lines = lines
        self._gain_per_frame = bool(gain_per_frame)
        self._meshes = tuple(meshes)
        self._mesh_opacity = float(mesh_opacity)
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
        self._fit = AreaResampler(self.size)
        self._emphasis = None if emphasis is None else np.asarray(emphasis, dtype=bool)
        self._selected = None if selected is None else int(selected)
        self._gain_range = self.value_range if gain_range is None else \
            (float(gain_range[0]), float(gain_range[1]))
        with egl_current(app):
            self._build(positions, visible, model_name, overlays, view, camera, orbit,
                        activity_sample)

    def _build(self, positions: np.ndarray, visible: np.ndarray | None, model_name: str,
               overlays: bool, view: str, camera: CameraPose | None, orbit: bool,
               activity_sample: np.ndarray | None) -> None:
        """Set up the one offscreen scene every still, movie frame and re-rendered view uses."""
        style, layer = self.style, self.style.layer
        w, h = self.size
        self.canvas = scene.SceneCanvas(size=(w, h), show=False, app=self._app,
                                        bgcolor=style.background, dpi=96.0)
        initialise_hidden_qt_canvas(self.canvas)
        self.canvas.set_current()
        self._fbo: Any = None
        self.overlays = (OverlayLayout(self.canvas, self.size, layer.colormap, self.value_range,
                                       layer.caption, model_name) if overlays else None)
        x, y, vw, vh = self.overlays.cloud_rect if self.overlays else (0.0, 0.0, float(w), float(h))
        self.view = scene.widgets.ViewBox(parent=self.canvas.scene, pos=(x, y), size=(vw, vh),
                                          border_color=None)
        self.view.camera = scene.TurntableCamera(fov=DEFAULT_FOV)
        # Software OpenGL draws the lean cloud, as the app's view does there: the same picture.
        self.lean = is_software_renderer(current_renderer())
        self.cloud = NeuronCloud(positions, visible, lean=self.lean, parent=self.view.scene)
        apply_style(self.cloud, style, h, self.value_range)
        self.shell = BrainShell(self.view.scene, self._meshes, self._mesh_opacity)
        if self._emphasis is not None:
            self.cloud.set_emphasis(self._emphasis)
        if self._selected is not None:
            self.cloud.set_selected(self._selected)
        self._draw_marks(positions, visible)
        if camera is not None:
            camera.apply(self.view.camera)
        else:
            frame_brain(self.view.camera, view, self.cloud.positions, self.cloud.shown,
                        aspect=vw / vh, orbit=orbit)
        self.base_azimuth = float(self.view.camera.azimuth)
        # The view clips the cloud to its rectangle in framebuffer pixels, a rectangle
        # vispy computes when the view moves, not when the canvas's framebuffer
        # transform settles; a Qt canvas's settles after the view is made (it was
        # a 1x1 pixel rectangle: Qt movies had no brain). Compute it now.
        update_view_clipper(self.view)
        if style.gain is None:
            # Brightness gain from how crowded the brain is on screen in this view.
            self._draw()
            self.gain = crowding_gain(self.cloud, h, style.point_px(h), activity_sample,
                                      layer.colormap, self._gain_range)
        else:
            self.gain = float(style.gain)
        self.cloud.set_gain(self.gain)

    def _draw_marks(self, positions: np.ndarray, visible: np.ndarray | None) -> None:
        """The rings and lines the window draws over its cloud, drawn the same way."""
        from flyviz.render.marks import (INTERVENED_COLOR, INTERVENED_SIZE, PICK_COLOR,
                                         PICK_SIZE, draw_lines, draw_rings)

        points = np.asarray(positions, np.float32)
        shown = np.ones(points.shape[0], bool) if visible is None else np.asarray(visible, bool)
        self.marks: dict[str, Any] = {}
        for kind, color, size in (("picked", PICK_COLOR, PICK_SIZE),
                                  ("intervened", INTERVENED_COLOR, INTERVENED_SIZE)):
            neurons = self._rings[kind]
            neurons = neurons[(neurons >= 0) & (neurons < shown.size)]
            neurons = neurons[shown[neurons]]
            if neurons.size:
                self.marks[kind] = draw_rings(None, self.view.scene, points[neurons], color,
                                              size)
        if self._lines is not None:
            self.marks["lines"] = draw_lines(None, self.view.scene, *self._lines)

    @classmethod
    def for_state(cls, state: Any, size: tuple[int, int], *, index: int | None = None,
                  frames: tuple[int, int] | None = None, style: CloudStyle | None = None,
                  camera: Any = "state", view: str | None = None, orbit: bool = False,
                  overlays: bool = False, value_range: tuple[float, float] | None = None,
                  gain: float | None = None, app: Any = None,
                  gl: str | None = None) -> "FrameRenderer":
        """The renderer of what a :class:`~flyviz.viewer.state.ViewerState` shows: the one
        path from a state to pixels (stills, figures, movies, the window's enlarged
        screenshot, the notebook widget).

        Everything the picture needs comes from the state: neuron positions, its
        style (colour layer, point size, glow, gain, background), colour range,
        highlight, selection, rings (picked and intervened neurons), synapse lines,
        meshes, camera (its pose, else its view preset) and model name: what the
        window draws. The colour range and the automatic gain:

        * a movie (``frames=(start, stop)``): one range over those frames, and the
          gain from 16 of them, so every frame has the same exposure;
        * else as the state says (:attr:`~flyviz.viewer.state.ViewerState.range_scope`):
          the shown token's (``index``, default the state's) range with the gain
          computed as the window's view computes it (over 16 frames of the
          recording), or one range over the whole recording.

        Parameters
        ----------
        state
            The viewer state (a model with neuron positions must be shown).
        size
            ``(width, height)`` in pixels.
        style, camera, view, orbit
            A movie's own look where it differs from the state's (the export
            form's): ``camera=None`` frames the ``view`` preset.
        value_range, gain
            What a live view shows now instead of the state's range and
            automatic gain (the window's enlarged screenshot).
        overlays, app, gl
            As for the constructor; ``gl`` picks the offscreen OpenGL when no
            ``app`` is given.
        """
        anatomy = state.anatomy
        if anatomy is None:
            raise ExportError("the viewer state shows no model with neuron positions; "
                              "state.set_model(model) first")
        style = state.style() if style is None else style
        if gain is not None:
            style = dataclasses.replace(style, gain=float(gain))
        layer = style.layer
        recording = state.recording
        start, stop = (0, len(recording)) if frames is None else (int(frames[0]), int(frames[1]))
        sample = layer.sample(recording, start, stop, GAIN_SAMPLES)
        sample = sample if sample.size else None
        gain_range = None
        if value_range is None:
            if frames is not None:
                value_range = layer.recording_range(recording, start, stop)
            else:
                value_range = state.value_range(index, layer)
                if state.range_scope == "token" and layer.scale.kind == "auto" \
                        and sample is not None:
                    # The window's view sets its gain over a sample of the recording,
                    # not over the shown frame's range.
                    gain_range = layer.value_range(sample)
        if app is None:
            app, _ = offscreen_app(backend=gl)
        return cls(anatomy.positions_um(), anatomy.valid, size, style=style,
                   value_range=value_range, view=view or state.view,
                   camera=state.camera if isinstance(camera, str) else camera, orbit=orbit,
                   overlays=overlays, model_name=state.model_name, activity_sample=sample,
                   app=app, emphasis=state.highlight, selected=state.selected,
                   gain_range=gain_range, meshes=state.shown_meshes(),
                   mesh_opacity=state.mesh.mesh_opacity, picked=state.picked,
                   intervened=state.intervened,
                   lines=None if state.shown_lines is None else state.lines(state.shown_lines))

    def render_token(self, state: Any, index: int | None = None,
                     overlay: OverlayContent | None = None,
                     azimuth: float | None = None,
                     value_range: tuple[float, float] | None = None) -> np.ndarray:
        """Render the state's token ``index`` (default: the shown one) in this renderer's
        colour layer; nothing to show (no frame, no untouched frame) draws the brain at rest.
        ``value_range``: the colour range of this frame and the next (see
        :meth:`set_value_range`; default: as before)."""
        values = state.values(index, self.style.layer)
        values = np.zeros(state.neurons, np.float32) if values is None else \
            np.asarray(values, np.float32)
        return self.render_state(values, overlay, azimuth, value_range)

    def set_value_range(self, low: float, high: float) -> None:
        """Colour the next frames over ``low .. high`` (the colourbar's labels follow).

        For a layer whose range moves from frame to frame (a flow movie's, each
        step over its own largest ``|flow|``); the brightness gain stays.
        """
        value_range = (float(low), float(high))
        if value_range == self.value_range:
            return
        self.value_range = value_range
        with egl_current(self._app):
            self.cloud.set_range(*value_range)
            if self.overlays is not None:
                self.overlays.value_range = value_range
                self.overlays.update(None)    # forget the words drawn: the labels change

    def render_state(self, state: np.ndarray, overlay: OverlayContent | None = None,
                     azimuth: float | None = None,
                     value_range: tuple[float, float] | None = None) -> np.ndarray:
        """Render one activation state.

        Parameters
        ----------
        state
            ``(N,)`` values of the style's colour layer (activations by default).
        overlay
            Words to draw (ignored when the renderer has no overlays).
        azimuth
            Camera azimuth in degrees (default: the view preset's).
        value_range
            The colour range of this frame and the next (see
            :meth:`set_value_range`); default: as before.

        Returns
        -------
        numpy.ndarray
            ``(height, width, 3)`` uint8 RGB, exactly the requested size.
        """
        if value_range is not None:
            self.set_value_range(*value_range)
        with egl_current(self._app):
            self.canvas.set_current()
            self.cloud.set_activity(state)
            self.view.camera.azimuth = self.base_azimuth if azimuth is None else float(azimuth)
            if self._gain_per_frame and self.style.gain is None:
                h = self.size[1]
                self.gain = crowding_gain(self.cloud, h, self.style.point_px(h), state,
                                          self.style.layer.colormap, self.value_range)
                self.cloud.set_gain(self.gain)
            if self.overlays is not None:
                self.overlays.update(overlay)
            image = self._draw()
        return np.ascontiguousarray(self._fit(image)[..., :3])

    def _draw(self) -> np.ndarray:
        """Draw into a framebuffer kept for the renderer's life and read it back.

        ``canvas.render()`` would allocate (and clear) a new colour and depth
        buffer for every frame; at 1080p that is 16 MB of memory traffic per
        frame for nothing.
        """
        if self._fbo is None:
            # At the canvas's physical size: vispy lays the scene out for it. On
            # a high-DPI screen (Qt backend) that is larger than the movie and
            # the resampler brings it back to size.
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

    def close(self) -> None:
        """Release the canvas and its OpenGL resources."""
        with egl_current(self._app):
            self.canvas.close()

    def __enter__(self) -> "FrameRenderer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def render_state_image(state: Any, size: tuple[int, int] = (1280, 720), index: int | None = None,
                       *, overlays: bool = False, app: Any = None,
                       gl: str | None = None) -> np.ndarray:
    """What a :class:`~flyviz.viewer.state.ViewerState` shows, rendered offscreen to an image.

    The picture the app's brain view shows for the same state at the same
    size, with no window: the state's colour layer and range at token
    ``index`` (default: the shown one; the exact frame, not eased), its
    display settings, highlight, selection and camera (its pose, else its
    view preset), and the automatic brightness gain computed as the view
    computes it. The base of ``flyviz figure``.

    Parameters
    ----------
    state
        The viewer state (a model with neuron positions must be shown).
    size
        ``(width, height)`` in pixels.
    index
        The token to show (default: the state's).
    overlays
        Draw the movie overlays (header, colourbar and what the model's kind says:
        a language model's next-token bars and text) too.
    app, gl
        The vispy application to render with, else the offscreen OpenGL to use
        (see :func:`~flyviz.render.gl_backend.offscreen_app`).

    Returns
    -------
    numpy.ndarray
        ``(height, width, 3)`` uint8 RGB.
    """
    recording = state.recording
    index = state.index if index is None else int(index)
    if len(recording) and not 0 <= index < len(recording):
        axis = state.kind.time_axis
        raise ExportError(f"{axis.name} {index} is out of range: the recording has "
                          f"{len(recording):,} {axis.names}")
    with FrameRenderer.for_state(state, size, index=index, overlays=overlays, app=app,
                                 gl=gl) as renderer:
        overlay = None
        if overlays and 0 <= index < len(recording):
            # The words are the model kind's: a language model's text and candidates.
            overlay = next(iter(state.kind.overlays(recording, index, index + 1)), None)
        return renderer.render_token(state, index, overlay)
