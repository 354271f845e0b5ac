"""Colour layers in the window: the brain, its colourbar and screenshots follow the layer shown."""

from __future__ import annotations

import numpy as np
import pytest
from app_conftest import lit_neurons_far_apart
from PySide6.QtCore import Qt
from PySide6.QtGui import QImage

from flyviz.app._testing import one_hot_recording
from flyviz.render.colormaps import colorbar_image
from flyviz.render.picking import project_points
from flyviz.render.style import ColourLayer, ColourScale

pytestmark = pytest.mark.gui


def _lum(rgba: np.ndarray) -> np.ndarray:
    return rgba[..., :3].astype(np.float32).max(axis=-1)


def _at(img: np.ndarray, xy, radius: int = 4) -> np.ndarray:
    x, y = int(round(xy[0])), int(round(xy[1]))
    return img[max(0, y - radius):y + radius + 1, max(0, x - radius):x + radius + 1]


def _setup(win, count: int):
    win.state.display.smoothing_s = 0.0
    win.state.display.auto_scale = False
    win.state.display.limit = 1.0
    win.state.display.point_size = 4.0
    ratio = win.brain.canvas.native.devicePixelRatioF()
    xy, _, _ = project_points(win.brain.positions, win.brain.canvas_transform())
    neurons = lit_neurons_far_apart(xy, win.brain.visible, count, min_gap=14.0,
                                    size=win.brain.canvas.size)
    assert len(neurons) == count
    return neurons, xy * ratio


def _show(win, qtbot, index: int = 0) -> np.ndarray:
    win.show_token(index)
    qtbot.waitUntil(lambda: win.display.showing(index), timeout=3000)
    return win.brain.render_image()


def test_a_static_layer_replaces_the_state_with_its_colours_and_colourbar(window, qtbot,
                                                                          app_checkpoint):
    win = window
    (a, b), xy = _setup(win, 2)
    n = app_checkpoint.config.neurons
    win.session.replace(one_hot_recording(n, [a]))              # the state lights a
    state_img = _show(win, qtbot)
    assert _lum(_at(state_img, xy[a])).max() > 200 > 3 * _lum(_at(state_img, xy[b])).max()

    importance = np.zeros(n, np.float32)
    importance[b] = 0.6
    layer = ColourLayer.static("importance", importance, label="lesion ΔCE", units="nats",
                               scale=ColourScale.given(0.0, 1.0))
    win.display.set_colour_layer(layer)
    img = _show(win, qtbot)
    lit, quiet = _at(img, xy[b]), _at(img, xy[a])
    assert _lum(lit).max() > 150 and _lum(quiet).max() < _lum(lit).max() / 3
    r, g, bl = lit.reshape(-1, 4)[_lum(lit).argmax()][:3].astype(int)
    assert g > r + 40                                           # sequential teal-green at 0.6
    # The colourbar is the layer's: its colormap, caption and range.
    assert win.brain.colormap == "sequential" and win.brain.cloud.colormap == "sequential"
    assert win.brain.colorbar_caption.text() == "lesion ΔCE (nats)"
    assert (win.brain.colorbar_low.text(), win.brain.colorbar_high.text()) == ("0.00", "1.00")
    bar = win.brain.colorbar.pixmap().toImage().convertToFormat(QImage.Format.Format_RGBA8888)
    pixels = np.frombuffer(bar.constBits(), np.uint8).reshape(bar.height(), bar.width(), 4)
    np.testing.assert_array_equal(pixels, colorbar_image("sequential", bar.height(), bar.width()))

    # The colour key switches the state's colours; the layer stays shown meanwhile.
    mode = win.brain.mode
    qtbot.keyClick(win, Qt.Key.Key_M)
    assert win.brain.mode != mode and win.brain.cloud.colormap == "sequential"

    win.display.set_colour_layer(None)                          # back to the state
    img = _show(win, qtbot)
    assert _lum(_at(img, xy[a])).max() > 200 and win.brain.cloud.colormap == win.brain.mode
    assert "activation x" in win.brain.colorbar_caption.text()


def test_a_layer_of_each_frame_follows_scrubbing_and_shows_in_screenshots(window, qtbot,
                                                                         app_checkpoint, tmp_path):
    win = window
    (a, b), xy = _setup(win, 2)
    n = app_checkpoint.config.neurons
    win.session.replace(one_hot_recording(n, [a, b]))
    # A difference-like layer: minus the state, on the diverging difference map.
    negative = ColourLayer(name="delta", colormap="difference", label="Δh",
                           source=lambda recording, i: -recording.state(i))
    win.display.set_colour_layer(negative)
    for index, lit, other in ((0, a, b), (1, b, a)):
        img = _show(win, qtbot, index)
        spot = _at(img, xy[lit])
        r, g, bl = spot.reshape(-1, 4)[_lum(spot).argmax()][:3].astype(int)
        assert _lum(spot).max() > 150 and bl > r + 40 and bl > g + 40  # negative: blue-violet
        assert _lum(_at(img, xy[other])).max() < _lum(spot).max() / 3
    lo, hi = win.brain.value_range
    assert win.brain.auto and lo == -hi                          # symmetric automatic scale
    path = win.save_screenshot(tmp_path / "layer.png", "brain", 2.0)
    shot = QImage(str(path))
    x, y = win.brain.project(b)
    colour = shot.pixelColor(int(round(2 * x)), int(round(2 * y)))
    assert colour.blue() > colour.red() + 40                     # re-rendered with the layer


def test_another_layer_is_shown_at_once_not_eased_into(window, qtbot, app_checkpoint):
    """Switching the colour layer shows the new layer's values on the brain at once, even
    with easing on: easing from the old quantity's values to the new one's would show the
    old values on the new scale (a dark brain, for a rate layer after spike flashes).
    Moving between frames of one layer still eases."""
    win = window
    (a, b), xy = _setup(win, 2)
    win.state.display.smoothing_s = 1.0                         # the longest easing
    n = app_checkpoint.config.neurons
    win.session.replace(one_hot_recording(n, [a, b]))           # frame 0 lights a, 1 lights b
    _show(win, qtbot, 0)
    qtbot.waitUntil(lambda: not win.brain.animating, timeout=10_000)
    values = np.zeros(n, np.float32)
    values[b] = 0.8
    win.display.set_colour_layer(ColourLayer.static("other", values, label="other",
                                                    scale=ColourScale.given(0.0, 1.0)))
    assert not win.brain.animating
    np.testing.assert_array_equal(win.brain.shown_activity, values)
    img = win.brain.render_image()
    assert _lum(_at(img, xy[b])).max() > 150 > 3 * _lum(_at(img, xy[a])).max()
    win.display.set_colour_layer(None)                          # the state again, at once
    assert not win.brain.animating and win.brain.shown_activity[a] == pytest.approx(1.0)
    win.show_token(1)                                           # another frame: eased
    # The easing moves at the brain's draws: once it has begun, a is on its way down (a
    # 1 s easing takes seconds to arrive), not switched off at once.
    qtbot.waitUntil(lambda: win.brain.shown_activity[a] < 1.0, timeout=5000)
    assert win.brain.animating and win.brain.shown_activity[a] > 0.05


@pytest.mark.parametrize("high", [0.0042, 0.03, 0.6])
def test_a_small_scale_reads_as_its_numbers_not_zero(window, qtbot, high):
    """A comparison's difference layer of a few thousandths read "+0.00 / −0.00" while
    tokens differed: the colourbar's ends keep two significant figures."""
    win = window
    n = win.checkpoint.config.neurons
    values = np.linspace(-high, high, n).astype(np.float32)
    win.session.replace(one_hot_recording(n, [0]))
    win.display.set_colour_layer(ColourLayer.static(
        "delta", values, colormap="difference", label="Δh",
        scale=ColourScale.given(-high, high)))
    _show(win, qtbot)
    low_text, high_text = win.brain.colorbar_low.text(), win.brain.colorbar_high.text()
    assert float(high_text) == pytest.approx(high, rel=0.05), high_text
    assert float(low_text.replace("−", "-")) == pytest.approx(-high, rel=0.05), low_text
    assert high_text.startswith("+") and len(high_text) <= 7
