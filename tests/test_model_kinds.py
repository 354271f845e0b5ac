"""Model kinds: the seam a second kind of model plugs into (flyviz.kinds).

A minimal in-test kind, stepped in 10 ms bins and carrying no text, is loaded into a
viewer state, rendered by ``FrameRenderer.for_state``, exported as a movie and drawn as
a figure, with its time axis in the captions; the window hides the docks that serve the
language model alone (Text, Next token, Why?) for it. And an AST scan keeps the viewer,
the renderer and the exporters free of the language model's words (tokenizer, logits,
top-k): they ask the shown model's kind.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
from gl_skip import skip_if_no_offscreen_gl

import flyviz
from flyviz.kinds import LANGUAGE, ModelKind, TimeAxis, kind_of, state_frame
from flyviz.model.errors import ExportError
from flyviz.model.layout import ball_layout
from flyviz.record.recording import Recording
from flyviz.viewer.settings import ViewerError
from flyviz.viewer.state import ViewerState

ROOT = Path(flyviz.__file__).parent

#: The packages that draw and export any kind's frames: they never name the language model's parts.
KIND_NEUTRAL = ("viewer", "render", "export")

#: The language model's words, as parts of names.
LANGUAGE_WORDS = re.compile(r"tokeni[sz]|logit|top_?k", re.IGNORECASE)

BINS = 3


# ---------------------------------------------------------------- the scan
def language_names(source: str) -> list[tuple[int, str]]:
    """``(line, name)`` of every identifier (or identifier-like string) of ``source`` that
    names a tokenizer, logits or top-k; prose (docstrings, messages) is not a name."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Name):
            names = [node.id]
        elif isinstance(node, ast.Attribute):
            names = [node.attr]
        elif isinstance(node, ast.arg):
            names = [node.arg]
        elif isinstance(node, ast.keyword) and node.arg:
            names = [node.arg]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names = [node.name]
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] + [a.asname for a in node.names if a.asname]
            if isinstance(node, ast.ImportFrom) and node.module:
                names.append(node.module)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.]*", node.value):
            names = [node.value]          # getattr(frame, "...") names a field too
        found += [(getattr(node, "lineno", 0), n) for n in names if LANGUAGE_WORDS.search(n)]
    return found


def test_the_scan_finds_the_language_models_names():
    """The scan can fail: each way of naming a tokenizer, logits or top-k is found."""
    source = ("from flyviz.model.tokenizer import FlyTokenizer\n"
              "def f(frame, top_k=3):\n"
              "    x = frame.top_k_text\n"
              "    y = getattr(frame, 'logits')\n"
              "    return g(topk=x)\n"
              "class Logits: pass\n"
              "'''A docstring about the tokenizer and its top-k is prose.'''\n")
    names = {name for _, name in language_names(source)}
    assert names == {"flyviz.model.tokenizer", "FlyTokenizer", "top_k", "top_k_text", "logits",
                     "topk", "Logits"}


def test_viewer_render_and_export_name_no_tokenizer_logits_or_top_k():
    offenders = []
    for package in KIND_NEUTRAL:
        files = sorted((ROOT / package).rglob("*.py"))
        assert files, package
        for path in files:
            for line, name in language_names(path.read_text(encoding="utf-8")):
                offenders.append(f"{path.relative_to(ROOT.parent)}:{line}: {name}")
    assert offenders == [], ("the language model's parts belong behind its kind "
                             "(flyviz/kinds/language.py):\n" + "\n".join(offenders))


# ---------------------------------------------------------------- a second kind
class BinnedKind(ModelKind):
    """A model stepped in 10 ms bins whose frames carry the neurons' state and nothing else."""

    key: ClassVar[str] = "binned-test"
    title: ClassVar[str] = "binned test model"
    time_axis: ClassVar[TimeAxis] = TimeAxis("bin", "ms", 10.0)

    def run_settings(self, run: Any, **options: Any) -> dict[str, int]:
        return {"bins": int(options.get("bins", BINS))}

    def frames(self, model: Any, request: Any, settings: Any = None, *,
               interventions: Any = (), recording: Recording | None = None) -> Iterator[Any]:
        # Bin i: a third of the neurons fire, a different third each bin.
        for i in range(int((settings or {}).get("bins", BINS))):
            values = np.zeros(model.neurons, np.float32)
            values[i::BINS] = 1.0
            frame = state_frame(i, values)
            if recording is not None:
                recording.append(frame)
            yield frame


class BinnedModel:
    """The kind's model: neurons on a ball, a name, its kind."""

    kind = BinnedKind()

    def __init__(self, neurons: int = 240) -> None:
        self.neurons = neurons
        self.name = "binned brain"
        self.anatomy = ball_layout(neurons)

    def drawing_anatomy(self):
        return self.anatomy


def binned_state(model: BinnedModel | None = None) -> ViewerState:
    model = model or BinnedModel()
    state = ViewerState()
    state.set_model(model)
    recording = Recording(model.neurons, {"model_name": model.name})
    kind = state.kind
    for _ in kind.frames(model, "sugar", kind.run_settings(state.run), recording=recording):
        pass
    state.set_recording(recording, index=BINS - 1)
    state.display.auto_scale = False
    state.display.limit = 1.0
    state.display.mode = "abs"
    return state


def test_what_a_frame_is_is_said_by_its_kind():
    """The timeline's words after the counter: prompt or generated for the Fly LLM; a kind
    that reads no text said "bin 1 / 100 · 10 ms · generated" (and "generating")."""
    from flyviz.app._testing import make_frame
    from flyviz.kinds.spiking import SPIKING

    prompt, generated = (make_frame(0, np.zeros(3), generated=g) for g in (False, True))
    assert [LANGUAGE.frame_phase(f, streaming=False) for f in (prompt, generated)] == \
        ["prompt", "generated"]
    assert [LANGUAGE.frame_phase(f, streaming=True) for f in (prompt, generated)] == \
        ["reading the prompt", "generating"]
    for frame in (prompt, generated):
        assert SPIKING.frame_phase(frame, streaming=False) == ""
        assert SPIKING.frame_phase(frame, streaming=True) == "running"


def test_the_fly_llm_is_the_kind_of_every_model_that_names_none():
    assert kind_of(None) is LANGUAGE and kind_of(object()) is LANGUAGE
    assert ViewerState().kind is LANGUAGE
    axis = LANGUAGE.time_axis
    assert (axis.name, axis.unit, axis.step, axis.counted) == ("token", "token", 1.0, True)
    assert {c.key for c in LANGUAGE.side_channels} == {"text", "top-k"}
    assert axis.of(11, 40) == "token 11 of 0–39" and axis.counter(1, 2) == "token 1 / 1"
    assert axis.counter(0, 0) == "no tokens yet"
    # The language model's run settings are the Settings dock's, as before.
    state = ViewerState()
    state.run.max_new_tokens, state.run.seed = 7, 3
    settings = LANGUAGE.run_settings(state.run, top_k=4)
    assert (settings.max_new_tokens, settings.seed, settings.top_k) == (7, 3, 4)
    assert state.run.generation_settings(4) == settings


def test_the_words_name_a_frame_beside_the_last_index_not_the_count():
    """The last of 36 tokens read "token 35 / 36" and "token 35 of 36", which promised one
    more: the counter and the captions name the last index, as napari's slider does."""
    tokens, bins = TimeAxis("token", "token"), TimeAxis("bin", "ms", 10.0)
    # The last frame of a run.
    assert tokens.counter(35, 36) == "token 35 / 35"
    assert tokens.of(35, 36) == "token 35 of 0\u201335"
    assert bins.counter(39, 40) == "bin 39 / 39 \u00b7 400 ms"
    assert bins.of(39, 40) == "bin 39 of 0\u201339 \u00b7 400 ms"
    # Any frame: its index beside the last index.
    assert bins.counter(11, 40) == "bin 11 / 39 \u00b7 120 ms"
    assert bins.of(11, 40) == "bin 11 of 0\u201339 \u00b7 120 ms"
    # A run of one frame: its only frame is both the first and the last.
    assert tokens.counter(0, 1) == "token 0 / 0" and tokens.of(0, 1) == "token 0 of 0\u20130"
    assert bins.counter(0, 1) == "bin 0 / 0 \u00b7 10 ms"
    assert bins.of(0, 1) == "bin 0 of 0\u20130 \u00b7 10 ms"
    # No frame yet; the counter's digits are grouped.
    assert tokens.counter(-1, 0) == "no tokens yet" and bins.counter(0, 0) == "no bins yet"
    assert tokens.counter(1234, 5000) == "token 1,234 / 4,999"


def test_a_second_kind_loads_into_a_viewer_state():
    model = BinnedModel()
    state = binned_state(model)
    assert state.kind == model.kind and state.kind != LANGUAGE
    assert state.anatomy is model.anatomy and state.neurons == model.neurons
    assert len(state.recording) == BINS and state.index == BINS - 1
    np.testing.assert_array_equal(state.values(1), (np.arange(model.neurons) % BINS == 1))
    assert state.frozen().kind == model.kind
    with pytest.raises(ViewerError, match=r"^bin 5 is out of range: the recording has 3 bins"):
        state.index = 5
    # Its overlays say its time axis and carry no text and no bars.
    contents = list(state.kind.overlays(state.recording))
    assert [c.counter for c in contents] == ["bin 0 of 0–2 · 10 ms", "bin 1 of 0–2 · 20 ms",
                                             "bin 2 of 0–2 · 30 ms"]
    assert all(c.bars == () and c.prompt == c.generated == c.newest == "" for c in contents)
    # A kind given with the model wins over the model's own; a bad one is refused.
    state.set_model(model, kind=LANGUAGE)
    assert state.kind is LANGUAGE
    with pytest.raises(ViewerError, match="ModelKind"):
        state.set_model(model, kind="spiking")


def _lit(image: np.ndarray) -> np.ndarray:
    from flyviz.render.style import BACKGROUND

    background = np.round(np.asarray(BACKGROUND[:3]) * 255).astype(int)
    return np.abs(image.astype(int) - background).max(axis=-1) > 40


def test_frame_renderer_draws_a_second_kinds_state_with_its_time_axis():
    from flyviz.render.offscreen import FrameRenderer, render_state_image

    state = binned_state()
    size = (320, 200)
    try:
        with FrameRenderer.for_state(state, size) as renderer:
            bins = [renderer.render_token(state, i) for i in range(BINS)]
    except ExportError as exc:
        skip_if_no_offscreen_gl(str(exc))   # any other export error fails
        raise
    lit = [_lit(image) for image in bins]
    assert all(mask.sum() > 100 for mask in lit)
    # Each bin lights its own third of the neurons.
    assert (lit[0] & lit[1]).sum() < 0.5 * min(lit[0].sum(), lit[1].sum())

    # With overlays the picture differs from the same state shown as a language model's
    # only in the counter line of the header (the kind's time axis): the brain is the same.
    binned = render_state_image(state, size, overlays=True)
    as_tokens = state.frozen()
    as_tokens.set_model(state.model, state.anatomy, kind=LANGUAGE)
    as_tokens.set_recording(state.recording, index=state.index)
    as_tokens.display.auto_scale, as_tokens.display.limit = False, 1.0
    as_tokens.display.mode = "abs"
    tokens = render_state_image(as_tokens, size, overlays=True)
    # (Text shares one glyph atlas: other words shift other glyphs' sampling by a level or two.)
    changed = np.abs(binned.astype(int) - tokens.astype(int)).max(axis=-1) > 8
    rows = np.flatnonzero(changed.any(axis=-1))
    assert rows.size, "the counter does not follow the kind"
    with FrameRenderer.for_state(state, size, overlays=True) as renderer:
        header = renderer.overlays.margin + renderer.overlays.px_title \
            + 2.6 * renderer.overlays.px_small
        x0, _, width, _ = renderer.overlays.cloud_rect
    # Over the brain's rectangle (the colourbar's numbers beside it are glyphs of the shared
    # atlas too: a pixel of its "1" moved 10 levels once the counters' digits changed).
    rows = np.flatnonzero(changed[:, int(x0):int(x0 + width)].any(axis=-1))
    assert rows.size and rows.max() < header, (rows.min(), rows.max(), header)


class _Captions:
    """A renderer that keeps what each movie frame's overlay says (and draws nothing)."""

    size = (320, 200)
    base_azimuth = 0.0

    def __init__(self) -> None:
        self.counters: list[str] = []

    def render_state(self, values: np.ndarray, overlay: Any, azimuth: float,
                     *more: Any) -> np.ndarray:
        self.counters.append(overlay.counter)
        return np.zeros((200, 320, 3), np.uint8)


def test_a_second_kind_exports_as_a_movie_with_its_time_axis_in_the_captions(tmp_path):
    from flyviz.export import export_state
    from flyviz.export.options import ExportOptions

    state = binned_state()
    options = ExportOptions(size=(320, 200), fps=10, frames_per_token=1, overlays=True)
    captions = _Captions()
    export_state(state, tmp_path / "captions", options, renderer=captions)
    assert captions.counters == ["bin 0 of 0–2 · 10 ms", "bin 1 of 0–2 · 20 ms",
                                 "bin 2 of 0–2 · 30 ms"]

    iio = pytest.importorskip("imageio.v3")
    try:
        out = export_state(state, tmp_path / "frames", options)
    except ExportError as exc:
        skip_if_no_offscreen_gl(str(exc))   # any other export error fails
        raise
    frames = [iio.imread(p)[..., :3] for p in sorted(out.glob("*.png"))]
    assert len(frames) == BINS and all(f.shape == (200, 320, 3) for f in frames)
    # The bins light different neurons, and the header's counter changes with them.
    assert (_lit(frames[0]) != _lit(frames[2])).sum() > 50
    assert (frames[0][:40] != frames[2][:40]).any()


def test_a_second_kinds_figure_is_captioned_by_its_time_axis(tmp_path):
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    from flyviz import figures

    model = BinnedModel()
    state = binned_state(model)
    figure = Figure(figsize=(6.4, 4.8), dpi=100)
    try:
        figures._brain(figure, state.recording, model,
                       figures.FigureOptions(kind="brain", size=(640, 480), token=1).checked())
    except ExportError as exc:
        skip_if_no_offscreen_gl(str(exc))   # any other export error fails
        raise
    assert [a.get_title() for a in figure.axes if a.get_title()] == ["bin 1 of 0–2 · 20 ms"]


# ---------------------------------------------------------------- the window
@pytest.mark.gui
def test_the_window_shows_only_the_docks_that_serve_the_kind(qtbot, tmp_path):
    pytest.importorskip("pytestqt")
    pytest.importorskip("vispy")
    from app_conftest import make_window

    from flyviz.app._testing import make_app_checkpoint

    checkpoint = make_app_checkpoint(tmp_path / "model")
    win = make_window(qtbot, checkpoint, tmp_path)
    try:
        # (Traces plots the top-1 probability and mean |x| per token: the Fly LLM's.)
        language_only = ("text", "topk", "why", "traces")
        every_kind = ("model", "controls", "inspector", "raster")
        shown_before = {key: not dock.isHidden() for key, dock in win.docks.items()}
        # The Fly LLM: every dock applies, as before kinds existed, but those of other kinds
        # alone (the spiking brain's Stimulus dock).
        other_kinds = [k for k in win.docks if not LANGUAGE.shows(win.dock_kinds.serves(k))]
        assert other_kinds == ["stimulus", "spiking_population", "screen"]
        assert win.dock_kinds.shown_keys() == [k for k in win.docks if k not in other_kinds]
        assert all(shown_before[key] for key in ("text", "topk"))
        assert all(win.docks[k].toggleViewAction().isVisible() != (k in other_kinds)
                   for k in win.docks)
        assert win.timeline.counter.text() == "no tokens yet"
        assert win._prompt_action.isVisible()   # the Fly LLM reads a prompt
        assert not win.controls.generation.isHidden()
        assert win.inspector.tabs.tabText(2) == "Currents now" and win.inspector.tabs.isTabVisible(2)
        assert win.raster_panel.plot.getAxis("bottom").labelText == "token"
        # A Fly LLM's states are signed activations, not rates: that is a spiking brain's.
        caption = win.raster_panel.caption.text()
        assert "(activations x)" in caption and "rate" not in caption, caption

        neurons = checkpoint.config.neurons
        model = BinnedModel(neurons)
        win.state.set_model(model, win.anatomy)
        state = win.state
        recording = Recording(neurons)
        for _ in model.kind.frames(model, "sugar", recording=recording):
            pass
        state.set_recording(recording)
        win.refresh_panels()
        for key in language_only:
            dock = win.docks[key]
            assert dock.isHidden() and not dock.isVisible(), key
            assert not dock.toggleViewAction().isVisible(), key
        for key in every_kind:
            assert win.docks[key].isHidden() == (not shown_before[key]), key
        assert win.timeline.counter.text().startswith("bin 2 / 2 · 30 ms")
        assert "bins" in win.timeline.slider.toolTip()

        # The Fly LLM again: its docks come back as they were.
        win.set_checkpoint(checkpoint)
        for key in language_only:
            assert win.docks[key].isHidden() == (not shown_before[key]), key
            assert win.docks[key].toggleViewAction().isVisible(), key
        win.refresh_panels()
        assert win.timeline.counter.text() == "no tokens yet"
        assert "tokens" in win.timeline.slider.toolTip()
    finally:
        win.close()
