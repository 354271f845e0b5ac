"""A movie of a traced token: the lag sweep of the flow layer, one frame per step back.

:func:`export_flow` renders an :class:`~flyviz.model.explain.Attribution` as the
app's *Why?* view shows it while its lag slider moves: frame ``k`` shows lag
``k`` (position ``P - k``), from the explained position back to the window's
first (``reverse=True``: from the first forward to ``P``). Each frame colours
every neuron by its node flow at that step with the app's flow layer
(:func:`flyviz.viewer.flow.flow_layer`: the diverging ``difference`` colormap
over ± the step's largest ``|flow|``; ``scale="window"``: one range, the largest
``|flow|`` of the whole window, so that the signal is seen to fade). After the
sweep come ``round(hold_seconds * fps)`` frames holding the last one.

The overlays (:func:`flow_overlay`) say what is explained (the target token and
``L``), the step shown (the lag, the position and the token read there,
highlighted in the prompt) and, in the right-hand panel, the input tokens that
carry most of ``L`` (:func:`top_tokens`) with their flows.

Of :class:`~flyviz.export.options.ExportOptions` a flow movie uses the size,
frame rate, quality, speed, orbit, view, point size, glow, hold and overlays;
the token range, frames per token and the activation colours do not apply.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from flyviz.export.encoders import EmitFrame, encode_movie
from flyviz.export.options import ExportOptions, movie_format
from flyviz.model.checkpoint import Anatomy
from flyviz.model.errors import ExportError
from flyviz.render.overlay_content import OverlayContent, display_token
from flyviz.viewer.flow import flow_layer, flow_limit

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.model.explain import Attribution

#: ``progress(frames_done, frames_total)``.
ExportProgress = Callable[[int, int], None]

#: How a flow movie's colour range is chosen: each step's own, or the window's.
FLOW_SCALES = ("step", "window")

#: Input tokens listed in a flow movie's overlay.
TOP_TOKENS = 5


def flow_lags(attribution: "Attribution", reverse: bool = False) -> list[int]:
    """The lags a flow movie shows, in order: ``0 .. window - 1`` (reversed: back to 0)."""
    lags = list(range(len(attribution.positions)))
    return lags[::-1] if reverse else lags


def token_label(attribution: "Attribution", position: int) -> str:
    """The token read at ``position`` as a label (BOS as ``BOS``, spaces made visible)."""
    if position == 0:
        return "BOS"
    return display_token(attribution.token_texts[position])


def top_tokens(attribution: "Attribution", count: int = TOP_TOKENS) -> list[tuple[int, str, float]]:
    """``(position, label, flow)`` of the ``count`` input tokens with the largest ``|flow|``.

    The token flows of the attribution (what each word read at ``0..P`` brought to
    ``L``, :attr:`~flyviz.model.explain.Attribution.token_flows`), largest ``|flow|``
    first; ties keep the earlier position first. Tokens of no flow are left out.
    """
    flows = np.asarray(attribution.token_flows, dtype=np.float64)
    order = sorted((p for p in range(flows.size) if flows[p] != 0.0),
                   key=lambda p: (-abs(flows[p]), p))
    return [(p, token_label(attribution, p), float(flows[p])) for p in order[:max(0, count)]]


def flow_overlay(attribution: "Attribution", lag: int, top: int = TOP_TOKENS) -> OverlayContent:
    """What a flow movie's frame at ``lag`` says.

    The counter line: the target token, ``L`` and what it is measured against,
    the lag and the position shown with the token read there. The right-hand
    panel: :func:`top_tokens`, each with its flow and position (``+12.83 @7``;
    bars: ``|flow|`` over the largest, red adds to ``L``, blue takes from it). The bottom band: the
    prompt read up to the explained position, the token at the shown position
    highlighted.
    """
    att = attribution
    position = att.position - int(lag)
    if not att.window_start <= position <= att.position:
        raise ExportError(f"lag {lag} is outside the traced window (0..{len(att.positions) - 1})")
    versus = f" − logit[{att.versus_text!r}]" if att.versus is not None else " − mean"
    counter = (f"why {att.target_text!r} at {att.position}: L = {att.value:+.3f} "
               f"(logit{versus}) · lag {int(lag)}: position {position} "
               f"({token_label(att, position)})")
    tops = top_tokens(att, top)
    largest = max((abs(f) for _, _, f in tops), default=0.0) or 1.0
    texts = ["" if p == 0 else att.token_texts[p] for p in range(att.position + 1)]
    return OverlayContent(
        prompt="".join(texts[:position]), generated="", newest=texts[position] or " ",
        newest_in_prompt=True, counter=counter,
        bars=tuple((label, abs(f) / largest) for _, label, f in tops),
        after="".join(texts[position + 1:]), bars_title="input tokens carrying most of L",
        bar_labels=tuple(f"{f:+.2f} @{p}" for p, _, f in tops),
        bar_signs=tuple(1.0 if f > 0 else -1.0 for _, _, f in tops))


def _limits(attribution: "Attribution", lags: Sequence[int], scale: str) -> list[float]:
    """Each frame's colour limit: its step's largest |flow|, or the window's."""
    steps = [flow_limit(attribution.node_flow(attribution.position - lag)) for lag in lags]
    if scale == "window":
        return [max(steps, default=flow_limit(np.zeros(0)))] * len(steps)
    return steps


def check_flow_request(attribution: "Attribution", anatomy: Anatomy | None, scale: str) -> None:
    """Raise :class:`ExportError` for what a flow movie cannot show."""
    if scale not in FLOW_SCALES:
        raise ExportError(f"flow scale {scale!r} must be one of {', '.join(FLOW_SCALES)}")
    if anatomy is None:
        raise ExportError("this model has no neuron positions; compute a layout with "
                          "flyviz.model.layout.graph_layout(checkpoint)")
    if anatomy.positions.shape[0] != attribution.neurons:
        raise ExportError(f"the anatomy has {anatomy.positions.shape[0]:,} neurons but the "
                          f"trace has {attribution.neurons:,}; load the model it was made with")


def flow_style(attribution: "Attribution", options: ExportOptions, style: Any = None) -> Any:
    """The movie's :class:`~flyviz.render.style.CloudStyle`: ``style`` (default: the
    options' point size and glow, automatic gain) colouring by the flow layer."""
    from flyviz.render.style import CloudStyle

    base = style or CloudStyle(point_size=options.point_size, glow=options.glow)
    return dataclasses.replace(base, layer=flow_layer(attribution, 0))


def make_flow_renderer(attribution: "Attribution", anatomy: Anatomy, options: ExportOptions,
                       *, scale: str = "step", reverse: bool = False, style: Any = None,
                       camera: Any = None, app: Any = None, gl: str | None = None,
                       meshes: Sequence[Any] = (), mesh_opacity: float = 0.12,
                       model_name: str | None = None) -> Any:
    """The :class:`~flyviz.render.offscreen.FrameRenderer` a flow movie draws with.

    With ``scale="step"`` each frame is drawn as the app's brain view draws the flow
    layer at that lag: its colour range and (with an automatic ``style.gain``)
    its brightness gain are set again from that step's flows. With
    ``scale="window"`` one range and one gain hold for the whole movie. The rest
    as :func:`flyviz.export.movie.make_renderer`.
    """
    from flyviz.render.offscreen import FrameRenderer, offscreen_app

    check_flow_request(attribution, anatomy, scale)
    options = options.validate()
    if app is None:
        app, _ = offscreen_app(backend=gl)
    lags = flow_lags(attribution, reverse)
    limits = _limits(attribution, lags, scale)
    sample = np.stack([attribution.node_flow(attribution.position - lag) / limit
                       for lag, limit in zip(lags, limits)]).astype(np.float32)
    return FrameRenderer(anatomy.positions_um(), anatomy.valid, options.size,
                         style=flow_style(attribution, options, style),
                         value_range=(-limits[0], limits[0]), view=options.view, camera=camera,
                         orbit=options.orbit != 0.0, overlays=options.overlays,
                         model_name=attribution.model_name if model_name is None else model_name,
                         activity_sample=sample, gain_range=(-1.0, 1.0), app=app,
                         meshes=meshes, mesh_opacity=mesh_opacity,
                         gain_per_frame=scale == "step")


def flow_frame_count(attribution: "Attribution", options: ExportOptions) -> int:
    """Frames a flow movie of ``attribution`` has: one per lag, then the hold frames."""
    return len(attribution.positions) + options.hold_frames()


def export_flow(attribution: "Attribution", anatomy: Anatomy | None, out_path: str | Path,
                options: ExportOptions | None = None, progress: ExportProgress | None = None,
                cancelled: Callable[[], bool] | None = None, *, reverse: bool = False,
                scale: str = "step", top: int = TOP_TOKENS, renderer: Any = None,
                style: Any = None, camera: Any = None, gl: str | None = None,
                meshes: Sequence[Any] = ()) -> Path:
    """Render the lag sweep of ``attribution``'s flow layer into a movie.

    Parameters
    ----------
    attribution
        A trace (:func:`flyviz.trace`).
    anatomy
        Neuron positions of its model (``model.drawing_anatomy()``).
    out_path
        ``.mp4``, ``.webm``, ``.gif`` or a folder for PNG frames.
    options
        Size, frame rate, quality, orbit, view, point size, glow, hold, overlays
        (the rest does not apply to a flow movie).
    progress, cancelled
        As for :func:`flyviz.export.export_recording`.
    reverse
        Sweep from the window's first position forward to the explained one
        (default: from the explained one back).
    scale
        ``"step"``: each frame over ± its step's largest ``|flow|``, as the app's
        flow layer; ``"window"``: one range for the whole movie.
    top
        Input tokens listed in the overlay.
    renderer
        Draw with this (see :func:`make_flow_renderer`; the app passes one that
        renders on its GUI thread, with ``render_state(state, overlay, azimuth,
        value_range)``); the caller closes it.
    style, camera, gl, meshes
        The look of the cloud (its layer is replaced by the flow layer), the
        camera, the offscreen OpenGL and meshes behind the neurons; with
        ``renderer`` only ``style`` matters and should be the one it was made with.

    Returns
    -------
    pathlib.Path
        ``out_path``, written completely.

    Raises
    ------
    ExportCancelled
        When ``cancelled()`` returned True; nothing is left at ``out_path``.
    ExportError
        For bad options, a mismatched anatomy, an unwritable path or an encoder
        failure; nothing is left at ``out_path``.
    """
    options = (options or ExportOptions(fps=4.0)).validate()
    check_flow_request(attribution, anatomy, scale)
    assert anatomy is not None
    out = Path(out_path)
    fmt = movie_format(out_path)
    crf = options.crf(fmt)
    lags = flow_lags(attribution, reverse)
    limits = _limits(attribution, lags, scale)
    total = flow_frame_count(attribution, options)
    own_renderer = renderer is None
    if own_renderer:
        renderer = make_flow_renderer(attribution, anatomy, options, scale=scale,
                                      reverse=reverse, style=style, camera=camera, gl=gl,
                                      meshes=meshes)

    def frames(emit: EmitFrame) -> None:
        values = np.zeros(attribution.neurons, np.float32)
        overlay: OverlayContent | None = None
        limit = limits[0]
        for lag, limit in zip(lags, limits):
            values = np.asarray(attribution.node_flow(attribution.position - lag), np.float32)
            overlay = flow_overlay(attribution, lag, top) if options.overlays else None
            emit(values, overlay, (-limit, limit))
        for _ in range(options.hold_frames()):
            emit(values, overlay, (-limit, limit))

    return encode_movie(out, fmt, crf, options, renderer, frames, total, progress, cancelled,
                        close_renderer=own_renderer)


__all__ = ["FLOW_SCALES", "TOP_TOKENS", "check_flow_request", "export_flow", "flow_frame_count",
           "flow_lags", "flow_overlay", "flow_style", "make_flow_renderer", "token_label",
           "top_tokens"]
