"""A run as one self-contained web page: the brain, the text and the why, offline.

:func:`share` writes what a :class:`~flyviz.viewer.state.ViewerState` shows as
one HTML file that any browser opens with no network and no server: a WebGL2
point cloud at the somas in flyviz's look (the state's colour layer, colour
range, point size, glow, gain, highlight, selection and camera), a token
slider and play at the state's run rate, the text with the shown token marked,
the top-k bars, hover for a neuron's id, cell type, superclass and value, and
optional layers (a comparison's Δ, a trace's flows with a lag slider and the
words shaded by their flow). The view (token, camera, layer, lag) lives in the
URL's hash (``#token=12&layer=delta``), so a link points at a view.

The page's code is in files of its own in ``flyviz/export/page/`` (``page.html``,
``page.js``, ``page.css``: plain WebGL2, no library); this module only packs
the data. Its vertex shader is the app's lean cloud shader
(:mod:`flyviz.render.cloud`) in WebGL2's dialect, the colormaps' control
points and the automatic brightness gain (:func:`~flyviz.render.cloud.density_gain`)
come from flyviz, so the page draws the still that
:meth:`FrameRenderer.for_state <flyviz.render.offscreen.FrameRenderer.for_state>`
draws.

Small and quick: positions are float16 (relative to the brain's centre), each
layer's values are 8-bit per frame with a per-frame scale
(``value = (q - 128) * scale``), and every array is compressed with zlib and
base64-encoded inside the page, which inflates them with the browser's
``DecompressionStream``. Only neurons with a known soma are stored.

Nothing here imports Qt or vispy.
"""

from __future__ import annotations

import base64
import html
import json
import os
import zlib
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from flyviz.errors import ExportError, InputError
from flyviz.fileio import missing_folder
from flyviz.render.camera import DEFAULT_FOV, FRAMING_MARGIN, VIEW_PRESETS, brain_bounds
from flyviz.render.colormaps import QUIET_ALPHA, display_curve, is_diverging, magnitude
from flyviz.render.style import ColourLayer
from flyviz.viewer.flow import FLOW, flow_layer, flow_limit
from flyviz.viewer.layers import DELTA, STATE

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.model.explain import Attribution
    from flyviz.viewer.state import ViewerState

__all__ = ["PAGE_FILES", "SHARE_SUFFIX", "page_data", "page_path", "render_page",
           "share"]

#: The page's own files, in ``flyviz/export/page/``.
PAGE_FILES = ("page.html", "page.js", "page.css")

#: What a shared page's file name ends with.
SHARE_SUFFIX = ".html"

#: Replay speed (tokens per second) of a state whose run has no speed cap (as the app's).
UNCAPPED_RATE = 12.0

#: Frames sampled for a layer's automatic brightness gain (as a still's).
GAIN_SAMPLES = 16

#: The cloud's dimming of neurons outside a highlight (its ``u_dim``).
DIM = 0.1

#: The lean shader's invisible level (:data:`flyviz.render.cloud.INVISIBLE_LEVEL`, kept here
#: as a number so that building a page does not import vispy).
INVISIBLE_LEVEL = 0.25 / 255.0


def _stops(colormap: str) -> list[list[float]]:
    from flyviz.render import colormaps

    return [[float(c) for c in stop] for stop in colormaps.control_points(colormap)]


def _pack(data: np.ndarray | bytes) -> str:
    raw = data if isinstance(data, bytes) else np.ascontiguousarray(data).tobytes()
    return base64.b64encode(zlib.compress(raw, 6)).decode("ascii")


def _quantise(values: np.ndarray) -> tuple[np.ndarray, float]:
    """8-bit codes ``q`` and the scale with ``value ≈ (q - 128) * scale`` (0 is exact)."""
    v = np.nan_to_num(np.asarray(values, np.float32), nan=0.0, posinf=0.0, neginf=0.0)
    top = float(np.abs(v).max()) if v.size else 0.0
    scale = top / 127.0 if top > 0.0 else 1.0
    q = np.clip(np.rint(v / scale) + 128.0, 1.0, 255.0).astype(np.uint8)
    return q, scale


def _load(values: np.ndarray | None, colormap: str,
          value_range: tuple[float, float]) -> tuple[float, float]:
    """Mean brightness and disc size of ``values`` as the shader draws them
    (:func:`flyviz.render.cloud.activity_load`, without importing vispy)."""
    if values is None:
        return 0.4, 1.0
    vals = np.asarray(values, np.float32).ravel()
    vals = vals[np.isfinite(vals)]
    if vals.size == 0:
        return 0.4, 1.0
    mags = magnitude(vals, colormap, *value_range)
    return float(display_curve(mags).mean()), float((0.8 + 0.7 * np.sqrt(mags)).mean())


class _Layer:
    """One layer of the page: its look, its frames of values (shown neurons) and ranges."""

    def __init__(self, key: str, title: str, layer: ColourLayer, per: str) -> None:
        self.key, self.title, self.layer, self.per = key, title, layer, per
        self.codes: list[np.ndarray] = []
        self.scales: list[float] = []
        self.ranges: list[tuple[float, float]] = []
        self.load = (0.4, 1.0)
        #: Each frame's step of the values (a spike rate's one spike), or None: the page's
        #: hover rounds an 8-bit value to it ("100", not "99", for one spike in 10 ms).
        self.steps: list[float] | None = None

    def add(self, values: np.ndarray | None, shown: np.ndarray, n_shown: int,
            value_range: tuple[float, float]) -> None:
        if values is None:
            q, scale = np.full(n_shown, 128, np.uint8), 1.0
        else:
            q, scale = _quantise(np.asarray(values, np.float32)[shown])
        self.codes.append(q)
        self.scales.append(scale)
        self.ranges.append((float(value_range[0]), float(value_range[1])))

    def header(self, blob: str) -> dict[str, Any]:
        colormap = self.layer.colormap
        return {"key": self.key, "title": self.title, "colormap": colormap,
                "stops": _stops(colormap), "fold": colormap == "abs",
                "diverging": is_diverging(colormap), "caption": self.layer.caption,
                "per": self.per, "frames": len(self.codes), "scales": self.scales,
                "ranges": self.ranges, "steps": self.steps, "typical_alpha": self.load[0],
                "size_factor": self.load[1], "blob": blob}


def _is_static(layer: ColourLayer, recording: Any) -> bool:
    """True for a layer with the same values at every frame (an atlas statistic...)."""
    if layer.is_state or len(recording) < 2:
        return not layer.is_state
    first = layer.values(recording, 0)
    return first is not None and first is layer.values(recording, 1)


def _state_layer(state: "ViewerState", key: str, title: str, shown: np.ndarray) -> _Layer:
    """A colour layer of the state, one frame per token (one in all for a fixed one)."""
    layer = state.layer_of(key)
    recording = state.recording
    n = len(recording)
    static = _is_static(layer, recording)
    out = _Layer(key, title, layer, "static" if static else "token")
    for i in range(1 if static else n):
        values = state.values(i, layer) if n else layer.values(recording, 0)
        out.add(values, shown, shown.size, state.value_range(i if n else None, layer))
    sample = layer.sample(recording, 0, n, GAIN_SAMPLES) if n else None
    sample = sample if sample is not None and sample.size else None
    if state.range_scope == "token" and layer.scale.kind == "auto" and sample is not None:
        gain_range = layer.value_range(sample)     # the window's rule (FrameRenderer.for_state)
    else:
        gain_range = state.value_range(None if state.index < 0 else state.index, layer)
    if sample is None and static:
        sample = np.asarray(layer.values(recording, 0), np.float32)[None]
    out.load = _load(sample, layer.colormap, gain_range)
    if key == STATE and not static and n:
        steps = [float(state.kind.state_step(recording, i)) for i in range(n)]
        out.steps = steps if all(step > 0.0 for step in steps) else None
    return out


def _flow_layer(attribution: "Attribution", shown: np.ndarray) -> _Layer:
    """A trace's flows, one frame per lag (0: the explained step), each over its largest |f|."""
    lags = len(attribution.positions)
    first = flow_layer(attribution, 0)
    out = _Layer(FLOW, "Flow (Why?)", first, "lag")
    for lag in range(lags):
        flows = attribution.node_flow(attribution.position - lag)
        limit = flow_limit(flows)
        out.add(flows, shown, shown.size, (-limit, limit))
    zero = attribution.node_flow(attribution.position)
    out.load = _load(zero[None], first.colormap, out.ranges[0])
    return out


def _labels(values: Sequence[str] | None, shown: np.ndarray) -> tuple[list[str], np.ndarray]:
    if values is None:
        return [""], np.zeros(shown.size, np.uint16)
    names, codes = np.unique(np.asarray(values, dtype=object)[shown].astype(str),
                             return_inverse=True)
    return [str(n) for n in names], codes.astype(np.uint16)


def _camera(state: "ViewerState") -> dict[str, Any] | None:
    pose = state.camera
    if pose is None:
        return None
    return {"azimuth": pose.azimuth, "elevation": pose.elevation, "center": list(pose.center),
            "scale_factor": pose.scale_factor, "fov": pose.fov, "distance": pose.distance}


def page_data(state: "ViewerState", *, attribution: "Attribution | None" = None,
              layers: Sequence[str] | None = None, title: str | None = None
              ) -> tuple[dict[str, Any], dict[str, str]]:
    """What a page of ``state`` holds: the header (JSON) and the packed arrays by name.

    See :func:`share` for the parameters.
    """
    anatomy = state.anatomy
    if anatomy is None:
        raise ExportError("the viewer state shows no model with neuron positions; "
                          "state.set_model(model) first")
    recording = state.recording
    if not len(recording) and state.layer.is_state:
        raise ExportError("the recording is empty: nothing to share yet (run a prompt first)")
    positions = np.asarray(anatomy.positions_um(), np.float64)
    valid = np.asarray(anatomy.valid, bool) & np.isfinite(positions).all(axis=1)
    shown = np.flatnonzero(valid)
    if not shown.size:
        raise ExportError("no neuron of this model has a position to draw")
    keys = _layer_keys(state, attribution, layers)
    bounds = brain_bounds(positions, valid)
    centre = (bounds[0] + bounds[1]) / 2.0
    blobs: dict[str, str] = {
        "positions": _pack((positions[shown] - centre).astype(np.float16)),
        "ids": _pack(shown.astype(np.uint32)),
    }
    # The connectome's own ids (MaleCNS body ids, FlyWire root ids) for the hover, as int64:
    # a root id (7.2e17) is past what a JavaScript number holds exactly.
    body_ids = None if anatomy.body_id is None else np.asarray(anatomy.body_id, np.int64)
    if body_ids is not None and body_ids.shape == (positions.shape[0],) and \
            not np.array_equal(body_ids, np.arange(body_ids.size)):
        blobs["body_ids"] = _pack(body_ids[shown])
    else:
        body_ids = None
    cell_names, cell_codes = _labels(anatomy.cell_type, shown)
    super_names, super_codes = _labels(anatomy.superclass, shown)
    blobs["cell_type"] = _pack(cell_codes)
    blobs["superclass"] = _pack(super_codes)
    layer_headers: list[dict[str, Any]] = []
    for key in keys:
        if key == FLOW:
            assert attribution is not None
            layer = _flow_layer(attribution, shown)
        else:
            entry = state.colour_layers[key]
            layer = _state_layer(state, key, entry.title.replace("&", ""), shown)
        name = f"layer-{len(layer_headers)}"
        blobs[name] = _pack(np.concatenate(layer.codes))
        layer_headers.append(layer.header(name))
    highlight = state.highlight
    if highlight is not None:
        blobs["emphasis"] = _pack(np.asarray(highlight, bool)[shown].astype(np.uint8))
    selected = -1
    if state.selected is not None and valid[state.selected]:
        selected = int(np.searchsorted(shown, state.selected))
    display = state.display
    rate = float(state.run.speed_cap) or UNCAPPED_RATE
    kind = state.kind
    # What the page says of each frame is the kind's: its words, its counter ("bin 2 / 9 ·
    # 30 ms · 412 spikes"), and whether a text line and bars apply (page_axis).
    steps = kind.page_steps(recording)
    for i, step in enumerate(steps):
        step.setdefault("counter", kind.page_counter(recording, i))
    header: dict[str, Any] = {
        "format": "flyviz-share", "version": 1,
        "title": title or _title(state),
        "model": state.model_name, "neurons": int(state.neurons or positions.shape[0]),
        "shown": int(shown.size), "centre": [float(c) for c in centre],
        "bounds": [[float(c) - float(m) for c, m in zip(row, centre)] for row in bounds],
        "view": state.view, "views": {k: list(v) for k, v in VIEW_PRESETS.items()},
        "fov": DEFAULT_FOV, "margin": FRAMING_MARGIN, "camera": _camera(state),
        "rate": rate, "index": max(0, state.index), "tokens": steps,
        "axis": kind.page_axis(recording),
        "layers": layer_headers, "layer": keys[0],
        "labels": {"cell_type": cell_names, "superclass": super_names},
        "has_emphasis": highlight is not None, "has_body_ids": body_ids is not None,
        "selected": selected,
        "look": {"point_size": display.point_size, "glow": display.glow,
                 "gain": display.gain, "dim": DIM, "background": list(state.background[:3]),
                 "invisible": INVISIBLE_LEVEL, "quiet": QUIET_ALPHA,
                 "reference_height": 720.0, "cell_px": 8.0},
        "trace": None if attribution is None else _trace(attribution),
    }
    return header, blobs


def _title(state: "ViewerState") -> str:
    summary = state.kind.run_summary(state.recording)
    name = state.model_name or "flyviz"
    # Whole: the page shortens its heading at a word and keeps this in the tooltip.
    return f"{name}: {summary}" if summary else name


def _trace(attribution: "Attribution") -> dict[str, Any]:
    return {"position": attribution.position, "window_start": attribution.window_start,
            "target": attribution.target_text, "value": attribution.value,
            "token_flows": [float(f) for f in attribution.token_flows],
            "token_texts": list(attribution.token_texts[:attribution.position + 1])}


def _layer_keys(state: "ViewerState", attribution: "Attribution | None",
                layers: Sequence[str] | None) -> list[str]:
    """The layers of the page, the one shown first: the asked ones (a trace's flows after
    them when not among them), else a trace's flows, the state's shown layer, the state and
    a comparison's Δ."""
    # A comparison's Δ is offered by the state itself while its recording is shown.
    offered = {key for key, entry in state.colour_layers.items() if entry.available}
    if attribution is not None:
        offered.add(FLOW)
    if layers is None:
        # A page made with a trace opens on its flows: what it was made to show.
        wanted = [FLOW] if attribution is not None else []
        wanted += [state.colour_by, STATE, DELTA, FLOW]
        keys = [k for k in wanted if k in offered and (k != STATE or len(state.recording))]
    else:
        keys = []
        for key in layers:
            if key not in offered:
                why = (" (give a trace for the flows)" if key == FLOW else
                       " (it needs a comparison)" if key == DELTA else "")
                raise InputError(f"no colour layer {key!r} to share{why}; this state has "
                                 f"{', '.join(sorted(offered))}")
            if key not in keys:
                keys.append(key)
        # A trace is given to be shown: its flows come after the layers named (a page whose
        # trace had no flow layer said its words were shaded by flows it did not have).
        if attribution is not None and FLOW not in keys:
            keys.append(FLOW)
    return list(dict.fromkeys(keys)) or [STATE]


def _resource(name: str) -> str:
    return resources.files("flyviz.export").joinpath("page", name).read_text(encoding="utf-8")


def _script_text(text: str) -> str:
    """The page's script safe inside a ``<script>`` element (no ``</script>`` or ``<!--``
    in it)."""
    return text.replace("</", "<\\/").replace("<!--", "<\\!--")


def _json_text(value: Any) -> str:
    """``value`` as JSON safe inside a ``<script>`` element, that ``JSON.parse`` reads back
    whole: every ``<``, ``>`` and ``&`` written as ``\\u003c``, ``\\u003e``, ``\\u0026``
    (they are only ever inside JSON's strings), so no ``</script>``, ``<!--`` or
    ``<script`` can end or change the element. ``<\\!--``, the script's own escape, is no
    JSON escape: a title holding ``<!--`` made a page that never opened."""
    text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def render_page(header: dict[str, Any], blobs: dict[str, str]) -> str:
    """The page's HTML: the template with its style, script, header and arrays in it."""
    data = _json_text(header)
    arrays = "\n".join(f'<script type="application/octet-stream" data-name="{name}">{text}'
                       "</script>" for name, text in blobs.items())
    values = {"{{title}}": html.escape(str(header["title"])),
              "/*{{css}}*/": _resource("page.css"), "{{data}}": data, "{{arrays}}": arrays,
              "/*{{js}}*/": _script_text(_resource("page.js"))}
    return fill_template(_resource("page.html"), values)


def fill_template(template: str, values: dict[str, str]) -> str:
    """``template`` with each of its marks (the keys of ``values``) replaced by its value, in
    one pass over the template: a value is never searched for marks, so a title, a prompt or
    an array that holds ``{{data}}`` or ``/*{{js}}*/`` stays text where it was put.

    Raises
    ------
    ValueError
        If a mark is not in the template exactly once (the page would lack a part).
    """
    import re

    for mark in values:
        if template.count(mark) != 1:
            raise ValueError(f"the page template holds {mark} {template.count(mark)} times")
    pattern = re.compile("|".join(re.escape(mark) for mark in
                                  sorted(values, key=len, reverse=True)))
    return pattern.sub(lambda match: values[match.group(0)], template)


def page_path(path: str | Path) -> Path:
    """The page :func:`share` writes for ``path``: itself where it ends in ``.html`` or
    ``.htm`` (in any case), else ``path`` with ``.html`` added (the app's save dialog asks
    before replacing that file)."""
    out = Path(path)
    return out if out.suffix.lower() in (SHARE_SUFFIX, ".htm") else \
        out.with_name(out.name + SHARE_SUFFIX)


def share(state: "ViewerState", path: str | Path, *, attribution: "Attribution | None" = None,
          layers: Sequence[str] | None = None, title: str | None = None) -> Path:
    """Write what ``state`` shows as one self-contained web page.

    Parameters
    ----------
    state
        The viewer state: its model's neuron positions and labels, recording,
        colour layer and range, display settings, highlight, selection and
        camera (see the module's notes).
    path
        The page to write (``.html``; a missing suffix is added).
    attribution
        A trace (:func:`flyviz.trace`) whose flows become the ``"flow"`` layer
        (a lag slider, the words shaded by their flow).
    layers
        The colour layers of the page, the first shown on opening: keys of the
        state's *Colour by* entries (``"state"``, ``"delta"``, ``"atlas:mean"``...)
        or ``"flow"`` with an ``attribution`` (whose flows come after the layers named
        when they are not among them). Default: the flows (with an ``attribution``), the
        state's shown layer, the state and a comparison's Δ.
        The page opens at the state's shown frame (a trace's step: show it first).
    title
        The page's title (default: the model's name and the prompt).

    Returns
    -------
    pathlib.Path
        The page written (whole or not at all).

    Raises
    ------
    ExportError
        A state with no positions or no recording, or a page that cannot be written.
    InputError
        An unknown layer.

    Examples
    --------
    >>> state = flyviz.brain_source.open_state("run.flyrec")   # doctest: +SKIP
    >>> flyviz.share(state, "run.html")                         # doctest: +SKIP
    """
    out = page_path(path)
    if out.is_dir():
        raise ExportError(f"{out} is a folder; give the page's file name, e.g. run.html")
    if not out.parent.is_dir():
        raise ExportError(f"cannot write {out}: {missing_folder(out.parent)}")
    header, blobs = page_data(state, attribution=attribution, layers=layers, title=title)
    text = render_page(header, blobs)
    partial = out.with_name(f".{out.name}.part")
    try:
        partial.write_text(text, encoding="utf-8")
        os.replace(partial, out)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise ExportError(f"cannot write {out}: {exc.strerror or exc}") from None
    return out

