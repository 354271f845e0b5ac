"""Turn a :class:`~flyviz.record.recording.Recording` into a movie, one frame at a time.

Frame schedule: for every exported token ``i`` there are ``K =
frames_per_token`` frames; frame ``j`` (``1..K``) shows the state eased from
the previous token's state to token ``i``'s with ``t = j / K`` (smoothstep), so
the last frame of each token shows its state exactly. Before the first
exported token the brain is at rest (zeros, as after ``Engine.reset``), or at
the preceding token's state when the range starts later. "State" is the
values of the style's colour layer (:class:`~flyviz.render.style.ColourLayer`):
the recorded state by default, or e.g. a difference of two runs. After the last token
come ``round(hold_seconds * fps)`` hold frames (none by default). The camera
turns ``orbit`` degrees per second of movie time throughout.

Nothing is cached: each frame is rendered, piped to the encoder and dropped.

:func:`export_state` makes the movie of what a
:class:`~flyviz.viewer.state.ViewerState` shows (the window's, a notebook's):
its recording (a frozen snapshot), colours, display settings and camera.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from flyviz.export.encoders import EmitFrame, encode_movie
from flyviz.export.options import ExportOptions, movie_format
from flyviz.model.checkpoint import Anatomy
from flyviz.model.errors import ExportError
from flyviz.record.recording import Recording

#: ``progress(frames_done, frames_total)``.
ExportProgress = Callable[[int, int], None]


def sample_states(recording: Recording, start: int = 0, stop: int | None = None,
                  samples: int = 48) -> np.ndarray:
    """Up to ``samples`` evenly spaced states of frames ``start:stop``, stacked (float32)."""
    from flyviz.render.style import ColourLayer

    return ColourLayer().sample(recording, start, stop, samples)


def recording_scale(recording: Recording, start: int = 0, stop: int | None = None,
                    samples: int = 48, percentile: float = 99.0) -> float:
    """A colour limit for a range of frames: a high percentile of |x| over up to ``samples`` frames."""
    from flyviz.render.style import percentile_limit

    values = sample_states(recording, start, stop, samples)
    return percentile_limit(values if values.size else None, percentile)


def _ease(t: float) -> float:
    return t * t * (3.0 - 2.0 * t)


def model_name_of(recording: Recording, fallback: str = "") -> str:
    """The model name stored with a recording, for the movie's header; a recording of
    another kind than the language model's says which (a spiking run of the demo was
    titled just "demo")."""
    meta = recording.metadata or {}
    name = str(meta.get("model_name") or meta.get("model") or fallback)
    kind = meta.get("kind")
    if isinstance(kind, str) and kind not in ("", "language"):
        from flyviz.kinds import kind_of_recording

        title = kind_of_recording(recording).title
        if title and title not in name:
            name = f"{name} · {title}"
    return name


def recording_state(recording: Recording, anatomy: Anatomy, model_name: str = "", *,
                    kind: Any = None, meshes: Sequence[Any] = (), mesh_opacity: float = 0.12,
                    emphasis: Any = None, selected: int | None = None) -> Any:
    """A :class:`~flyviz.viewer.state.ViewerState` showing ``recording`` on ``anatomy``:
    what a movie of a recording without a window draws (its highlight ``emphasis``,
    ``selected`` neuron and ``meshes`` as given), so that every movie goes through
    :meth:`FrameRenderer.for_state <flyviz.render.offscreen.FrameRenderer.for_state>`."""
    from flyviz.kinds import kind_of_recording
    from flyviz.viewer.state import ViewerState

    state = ViewerState()
    state.set_model(None, anatomy, name=model_name, neurons=recording.neurons,
                    kind=kind_of_recording(recording) if kind is None else kind)
    state.set_recording(recording, cause=None)
    state.mesh.mesh_opacity = mesh_opacity
    for mesh in meshes:
        state.add_mesh_object(mesh)
    if emphasis is not None:
        state.highlights.set("shown", np.asarray(emphasis, bool))
    if selected is not None:
        state.selected = int(selected)
    return state


def make_renderer(recording: Recording, anatomy: Anatomy, options: ExportOptions,
                  model_name: str, *, style: Any = None, camera: Any = None,
                  app: Any = None, gl: str | None = None, emphasis: Any = None,
                  selected: int | None = None, meshes: Sequence[Any] = (),
                  mesh_opacity: float = 0.12) -> Any:
    """The :class:`~flyviz.render.offscreen.FrameRenderer` an export of ``recording`` uses:
    :func:`state_renderer` of the :func:`recording_state` of it.

    It renders with ``app`` (a vispy application), else with the offscreen
    OpenGL ``gl`` names (see :func:`~flyviz.render.gl_backend.offscreen_app`).
    Its colour range is fixed for the whole movie: the layer's fixed or given
    range, or its automatic policy over up to 48 frames of the exported range;
    its automatic brightness gain comes from 16 of them. ``emphasis`` and
    ``selected``: a highlight mask and a ringed neuron, as the window shows them;
    ``meshes``: the brain's outline or mesh files drawn behind the neurons.
    """
    state = recording_state(recording, anatomy, model_name, meshes=meshes,
                            mesh_opacity=mesh_opacity, emphasis=emphasis, selected=selected)
    return state_renderer(state, options, style=style or options.cloud_style(),
                          camera=camera, app=app, gl=gl)


def export_recording(recording: Recording, anatomy: Anatomy | None, out_path: str | Path,
                     options: ExportOptions | None = None, progress: ExportProgress | None = None,
                     cancelled: Callable[[], bool] | None = None, *, model_name: str | None = None,
                     renderer: Any = None, style: Any = None, camera: Any = None,
                     overlay_contents: Iterable[Any] | None = None,
                     gl: str | None = None, meshes: Sequence[Any] = (), kind: Any = None) -> Path:
    """Render frames ``options.start:options.stop`` of ``recording`` into a movie.

    Parameters
    ----------
    recording
        The run to show.
    anatomy
        Neuron positions for the recording's model (a graph layout for models
        without anatomy, see :func:`flyviz.model.layout.graph_layout`).
    out_path
        ``.mp4`` (H.264), ``.webm`` (VP9), ``.gif``, or a folder for PNG frames
        (a name without extension or ending in ``/``).
    options
        Size, frame rate, easing, quality, orbit, colours, range, overlays.
    progress
        Called after every frame with ``(done, total)``.
    cancelled
        Polled before every frame; returning True stops the export.
    model_name
        Header text; defaults to the name stored in the recording.
    renderer
        An object with ``render_state(state, overlay, azimuth)``,
        ``base_azimuth`` and ``size`` to draw with instead of a new
        :class:`~flyviz.render.offscreen.FrameRenderer` (the app passes one
        that renders on its GUI thread). The caller closes it.
    style
        A :class:`~flyviz.render.style.CloudStyle`: what colours the neurons
        (its colour layer's values replace the recorded state) and how the
        cloud looks. It replaces ``options.mode``, ``options.scale``,
        ``options.point_size`` and ``options.glow``, which only make the
        default style (:meth:`ExportOptions.cloud_style`). With ``renderer``,
        give the style that renderer was made with.
    camera
        A :class:`~flyviz.render.camera.CameraPose` to look from instead of
        ``options.view`` (e.g. the app's current view).
    overlay_contents
        What the overlays say at each exported token, in order
        (:class:`~flyviz.render.overlay.OverlayContent`, e.g. two runs' texts
        for a comparison); default: what ``kind`` says of ``recording``'s frames
        (:func:`~flyviz.render.overlay.iter_overlays`).
    gl
        The offscreen OpenGL to render with: ``"egl"``, ``"default"``,
        ``"osmesa"``, or ``None``/``"auto"`` (``FLYVIZ_OFFSCREEN_GL``, else the
        first that works; see :func:`~flyviz.render.gl_backend.offscreen_app`).
        Ignored with ``renderer``.
    meshes
        Drawn behind the neurons (:mod:`flyviz.analysis.outline`: the brain's
        outline, mesh files). Ignored with ``renderer``.
    kind
        The :class:`~flyviz.kinds.ModelKind` of the recording's model (default: the one
        :func:`~flyviz.kinds.kind_of_recording` reads from it): what the
        overlays say and what the time axis is called.

    Returns
    -------
    pathlib.Path
        ``out_path``, written completely.

    Raises
    ------
    ExportCancelled
        When ``cancelled()`` returned True; nothing is left at ``out_path``.
    ExportError
        For bad options, a mismatched anatomy, an unwritable path or an
        encoder failure; nothing is left at ``out_path``.
    """
    from flyviz.render.overlay import iter_overlays

    options = (options or ExportOptions()).validate()
    out = Path(out_path)
    fmt = movie_format(out_path)
    start, stop = options.token_range(len(recording))
    if anatomy is None:
        raise ExportError("this model has no neuron positions; compute a layout with "
                          "flyviz.model.layout.graph_layout(checkpoint)")
    if anatomy.positions.shape[0] != recording.neurons:
        raise ExportError(f"the anatomy has {anatomy.positions.shape[0]:,} neurons but the "
                          f"recording has {recording.neurons:,}; load the model it was made with")
    crf = options.crf(fmt)
    k = int(options.frames_per_token)
    total = options.frame_count(stop - start)
    name = model_name if model_name is not None else model_name_of(recording, "flyviz")
    if kind is None:                    # the kind that made it says how its frames look
        from flyviz.kinds import kind_of_recording

        kind = kind_of_recording(recording)
    style = style or options.cloud_style(kind)
    layer = style.layer

    def values_at(index: int) -> np.ndarray:
        values = layer.values(recording, index)
        if values is None:
            return np.zeros(recording.neurons, np.float32)
        values = np.asarray(values, dtype=np.float32)
        if values.shape != (recording.neurons,):
            raise ExportError(f"colour layer {layer.name!r} gave {values.shape} values at token "
                              f"{index}; it must give one per neuron ({recording.neurons:,})")
        return values

    own_renderer = renderer is None
    if own_renderer:
        # The one path to pixels: a viewer state of the recording, drawn as the window would.
        renderer = state_renderer(recording_state(recording, anatomy, name, kind=kind,
                                                  meshes=meshes), options, style=style,
                                  camera=camera, gl=gl)

    def frames(emit: EmitFrame) -> None:
        overlays = None
        if options.overlays:
            overlays = iter(overlay_contents if overlay_contents is not None
                            else iter_overlays(recording, start, stop, kind=kind))
        prev = values_at(start - 1) if start > 0 else np.zeros(recording.neurons, np.float32)
        state = np.empty(recording.neurons, dtype=np.float32)
        overlay = None
        for i in range(start, stop):
            cur = values_at(i)
            overlay = next(overlays, None) if overlays is not None else None
            for j in range(1, k + 1):
                a = np.float32(_ease(j / k))
                np.subtract(cur, prev, out=state)
                state *= a
                state += prev
                emit(state, overlay)
            prev = cur
        for _ in range(options.hold_frames()):
            emit(prev, overlay)

    return encode_movie(out, fmt, crf, options, renderer, frames, total, progress, cancelled,
                        close_renderer=own_renderer)


def state_renderer(state: Any, options: ExportOptions, *, style: Any = None,
                   camera: Any = "state", app: Any = None, gl: str | None = None) -> Any:
    """The :class:`~flyviz.render.offscreen.FrameRenderer` a movie of ``state`` uses
    (:meth:`~flyviz.render.offscreen.FrameRenderer.for_state` over the exported frames).

    ``style`` and ``camera`` are the movie's own look where it differs from the
    state's (the export form's colours, point size, glow; ``camera=None``: the
    options' view preset); the highlight, selection and meshes are the state's.
    """
    from flyviz.render.offscreen import FrameRenderer

    options = options.validate()
    return FrameRenderer.for_state(state, options.size,
                                   frames=options.token_range(len(state.recording)),
                                   style=style, camera=camera, view=options.view,
                                   orbit=options.orbit != 0.0, overlays=options.overlays,
                                   app=app, gl=gl)


def export_state(state: Any, out_path: str | Path, options: ExportOptions | None = None,
                 progress: ExportProgress | None = None,
                 cancelled: Callable[[], bool] | None = None, *,
                 overlay_contents: Iterable[Any] | None = None, renderer: Any = None,
                 gl: str | None = None, style: Any = None, camera: Any = "state") -> Path:
    """Render what the viewer ``state`` shows into a movie.

    The state gives everything but the movie's own settings: a frozen
    snapshot of its recording (a run still appending to it does not reach the
    movie), the neuron positions, the model's name, the colour layer and
    display settings (:meth:`~flyviz.viewer.state.ViewerState.style`), its
    highlight and selection, and the camera (its pose; else its view preset,
    when ``options`` is not given).
    ``options`` says the size, frame rate, easing, range, quality and
    overlays; its colour fields are not used. ``style`` and ``camera`` replace
    the state's look (the window's export form: its colours, point size and
    glow; ``camera=None`` frames ``options.view``). ``renderer``: one made by
    :func:`state_renderer` (the app's, drawing on its GUI thread); the caller
    closes it. The overlays say what the state's model kind says of its frames
    (:attr:`~flyviz.viewer.state.ViewerState.kind`). The rest as for
    :func:`export_recording`.
    """
    if state.anatomy is None:
        raise ExportError("the viewer state shows no model with neuron positions; "
                          "state.set_model(model) first")
    options = (options or ExportOptions(view=state.view)).validate()
    recording = state.snapshot()
    style = state.style() if style is None else style
    name = state.model_name or model_name_of(recording, "flyviz")
    own_renderer = renderer is None
    if own_renderer:
        # The state's highlight and selection are part of the picture, as in the window.
        renderer = state_renderer(state, options, style=style, camera=camera, gl=gl)
    try:
        return export_recording(recording, state.anatomy, out_path, options, progress,
                                cancelled, model_name=name, renderer=renderer, style=style,
                                overlay_contents=overlay_contents, kind=state.kind)
    finally:
        if own_renderer:
            renderer.close()
