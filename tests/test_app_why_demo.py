"""Why? on the demo brain, in the whole window: the README's picture comes from here.

The window is drawn as a user sees it after asking why the demo brain named the girl in
"there was a little girl named"; the test asserts what the picture must show (the flow
colours in the brain, the words shaded by their flow, the graph's nodes), that the Why?
dock's movie shows the brain view's picture at each lag, and, when
``FLYVIZ_SCREENSHOTS`` names a folder, writes the window there as ``why.png``
(``FLYVIZ_SCREENSHOTS=docs/images`` makes the README's ``docs/images/why.png``).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest
from app_conftest import make_window
from qt_barriers import settle

from flyviz.app.language.graph_panel import NEGATIVE, POSITIVE

pytestmark = [pytest.mark.gui, pytest.mark.slow]

iio = pytest.importorskip("imageio.v3")

PROMPT = "there was a little girl named"

#: The window's size in the picture (logical pixels).
SIZE = (1500, 950)


def _region(image: np.ndarray, win, widget) -> np.ndarray:
    """The part of the window's picture that ``widget`` covers."""
    top_left = widget.mapTo(win, widget.rect().topLeft())
    ratio = image.shape[1] / win.width()
    x, y = int(top_left.x() * ratio), int(top_left.y() * ratio)
    w, h = int(widget.width() * ratio), int(widget.height() * ratio)
    return image[y:y + h, x:x + w, :3].astype(int)


def _near(region: np.ndarray, colour: tuple[int, int, int], tolerance: int = 40) -> int:
    """How many pixels of ``region`` are within ``tolerance`` of ``colour`` in every channel."""
    return int((np.abs(region - np.array(colour)).max(axis=-1) <= tolerance).sum())


def test_why_on_the_demo_brain_in_the_window(qtbot, tmp_path, dark_theme):
    win = make_window(qtbot, None, tmp_path)
    try:
        win.resize(*SIZE)
        with qtbot.waitSignal(win.model_ready, timeout=120_000):
            win.load_model("demo")
        assert "demo brain" in win.windowTitle()
        win.state.run.seed = 7
        win.state.run.max_new_tokens = 2
        win.state.run.speed_cap = 0
        with qtbot.waitSignal(win.run_ended, timeout=60_000):
            assert win.run_prompt(PROMPT)
        recording = win.state.recording
        # The last prompt token's frame: its prediction is the name.
        frame = next(i for i in range(len(recording)) if recording[i].generation_index == 0)
        win.state.index = frame
        feature = win.features["why"]
        started = time.perf_counter()
        with qtbot.waitSignal(feature.traced, timeout=120_000) as traced:
            assert feature.why()
        took = time.perf_counter() - started
        att = traced.args[0]
        assert att.position == frame and att.target == recording[frame].predicted_token_id
        assert abs(att.completeness_error) <= 1e-4 * max(1.0, abs(att.value))
        assert win.colour_by.current == "flow"
        assert win.brain.colorbar_caption.text() == "flow (units of L)"
        settle(qtbot, win)          # the docks shown for the result settle
        qtbot.waitUntil(lambda: win.display.brain_at is not None and not win.brain.animating,
                        timeout=5000)
        path = win.save_screenshot(tmp_path / "why.png", target="window")
        image = iio.imread(path)
        assert image.shape[0] >= SIZE[1] * 0.9 and image.shape[1] >= SIZE[0] * 0.9

        # The brain view: neurons and synapses of both signs, in the flow colours.
        brain = _region(image, win, win.brain.canvas.native)
        red = ((brain[..., 0] > brain[..., 2] + 80) & (brain[..., 0] > 120)).sum()
        blue = ((brain[..., 2] > brain[..., 0] + 80) & (brain[..., 2] > 120)).sum()
        assert red > 200 and blue > 200, (red, blue)
        # The Graph dock: the kept nodes, red and blue.
        plot = _region(image, win, feature.graph_panel.plot)
        assert feature.graph is not None and len(feature.graph.neurons) > 0
        signs = np.sign(feature.graph.flows)
        assert (_near(plot, POSITIVE) > 20) == bool((signs > 0).any())
        assert (_near(plot, NEGATIVE) > 20) == bool((signs < 0).any())
        # The Text panel: the word that carries most is shaded in its sign's hue.
        text = _region(image, win, win.text_panel.viewport())
        strongest = int(np.argmax(np.abs(att.token_flows[1:]))) + 1
        hue = (text[..., 0] - text[..., 2]) if att.token_flows[strongest] > 0 else \
            (text[..., 2] - text[..., 0])
        assert (hue > 60).sum() > 100
        # What the README says beside the picture (-s shows it).
        print(f"\nwhy {att.target_text!r} at {att.position}: L = {att.value:+.4f} (traced in "
              f"{took:.1f} s); token flows "
              + ", ".join(f"{att.token_texts[p]!r} {att.token_flows[p]:+.2f}"
                          for p in np.argsort(-np.abs(att.token_flows))[:3]))
        folder = os.environ.get("FLYVIZ_SCREENSHOTS")
        if folder:      # for the README
            Path(folder).mkdir(parents=True, exist_ok=True)
            iio.imwrite(Path(folder) / "why.png", image[..., :3])
        _the_movie_looks_like_the_view(win, qtbot, feature, tmp_path)
    finally:
        win.close()


def _the_movie_looks_like_the_view(win, qtbot, feature, tmp_path) -> None:
    """On the full brain: the dock's movie's frames at lag 0 and 2 are the brain view at those
    lags (the same neurons lit, the same colours)."""
    from flyviz.export import ExportOptions

    feature.panel.synapses.setChecked(False)        # the movie draws the neurons only
    win.state.display.smoothing_s = 0.0             # the view shows each lag at once
    views = {}
    for lag in (0, 2):
        feature.panel.lag.setValue(lag)
        # The brain has this lag's layer (a new one each lag) and has drawn it.
        qtbot.waitUntil(lambda: win.brain.layer_override is win.state.layer_override
                        and win.display.brain_at is not None and not win.brain.animating,
                        timeout=5000)
        views[lag] = win.brain.render_image()[..., :3]
    size = (views[0].shape[1], views[0].shape[0])
    out = feature.export_movie(tmp_path / "frames", ExportOptions(size=size, overlays=False))
    frames = [iio.imread(p)[..., :3] for p in sorted(out.glob("*.png"))]
    background = np.round(np.asarray(win.brain.style.background[:3]) * 255).astype(int)
    for lag, view in views.items():
        movie = frames[lag]
        lit_view = np.abs(view.astype(int) - background).max(axis=-1) > 40
        lit_movie = np.abs(movie.astype(int) - background).max(axis=-1) > 40
        iou = (lit_view & lit_movie).sum() / (lit_view | lit_movie).sum()
        difference = np.abs(view.astype(int) - movie.astype(int)).max(axis=-1)
        assert lit_view.sum() > 1000 and iou > 0.95, (lag, iou)
        assert np.percentile(difference[lit_view | lit_movie], 99) <= 12, lag
