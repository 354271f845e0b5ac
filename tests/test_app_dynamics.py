"""The Dynamics dock: a measurement draws the library's spectral radii and memory curve,
its summary says the library's numbers, nulls add their band, bad input is one line."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QPointF
from PySide6.QtGui import QColor
from qt_barriers import settle

from flyviz.analysis.dynamics import DynamicsSettings, portrait_of_checkpoint
from flyviz.app.dynamics.dynamics_panel import MEMORY_COLOUR, RADIUS_COLOUR
from flyviz.model.tokenizer import FlyTokenizer
from flyviz.record.run import encode_prompt

pytestmark = pytest.mark.gui

PROMPT = "the cat saw a big dog"


def _pixels_near(widget, point: QPointF, radius: int = 2) -> np.ndarray:
    ratio = widget.devicePixelRatioF()
    image = widget.grab().toImage()
    cx, cy = int(round(point.x() * ratio)), int(round(point.y() * ratio))
    return np.array([(c.red(), c.green(), c.blue()) for c in
                     (image.pixelColor(cx + dx, cy + dy) for dy in range(-radius, radius + 1)
                      for dx in range(-radius, radius + 1))], dtype=np.float64)


def _at(plot, x: float, y: float) -> QPointF:
    vb = plot.getPlotItem().vb
    return plot.mapFromScene(vb.mapViewToScene(QPointF(x, y)))


def _near(pixels: np.ndarray, colour: str, tolerance: float = 60) -> bool:
    c = QColor(colour)
    target = np.array([c.red(), c.green(), c.blue()], dtype=np.float64)
    return bool((np.abs(pixels - target).sum(axis=1) < tolerance).any())


def _measure(window, qtbot, **values):
    feature = window.features["dynamics"]
    with qtbot.waitSignal(feature.measured, timeout=120_000) as measured:
        assert feature.measure(**values), feature.panel.message.text()
    return feature, measured.args[0]


def test_a_measurement_draws_the_librarys_radii_and_memory_and_says_its_numbers(
        window, qtbot, app_checkpoint):
    feature, found = _measure(window, qtbot, prompt=PROMPT, eigenvalues=3)
    ck = app_checkpoint
    ids = encode_prompt(FlyTokenizer(ck.tokenizer_path), PROMPT, ck.config.bos_token_id)
    expected = portrait_of_checkpoint(ck, ids, DynamicsSettings(eigenvalues=3))
    assert np.allclose(found.spectral_radius, expected.spectral_radius, atol=1e-9)
    assert np.allclose(found.memory_norms, expected.memory_norms)
    panel = feature.panel
    feature.dock.raise_()
    qtbot.waitUntil(lambda: panel.radius.isVisible() and panel.radius.width() > 100,
                    timeout=5000)
    # The plot laid out before a point is mapped and the pixels are read: the width above is
    # reached while the axes and the view box are still being placed (a point moved 9-15 px
    # after it), and a fixed wait proves nothing on a loaded machine.
    settle(qtbot, window)
    # Every position's radius is a teal point where the plot maps it; none at radius 0.
    for t, r in enumerate(found.spectral_radius):
        assert _near(_pixels_near(panel.radius, _at(panel.radius, t, r)), RADIUS_COLOUR)
    assert not _near(_pixels_near(panel.radius, _at(panel.radius, 1, 0.02), 1), RADIUS_COLOUR)
    # The memory curve starts at log10 1 = 0 and ends where the library's norm does.
    memory = panel.memory
    end = found.memory_norms.size - 1
    assert _near(_pixels_near(memory, _at(memory, 0, 0.0)), MEMORY_COLOUR)
    assert _near(_pixels_near(memory, _at(memory, end, np.log10(found.memory_norms[-1]))),
                 MEMORY_COLOUR)
    half = expected.half_life_tokens
    text = panel.summary.text()
    assert (f"half-life {half:.2f} tokens" if half is not None else "half-life >") in text
    assert f"(leak only {expected.leak_only_half_life_tokens:.2f})" in text
    assert not panel.radius.band.isVisible()


def test_nulls_add_their_band_and_z_scores(window, qtbot):
    feature, found = _measure(window, qtbot, prompt=PROMPT, eigenvalues=2, nulls=2,
                              kind="degree")
    row = found.nulls["properties"]["spectral_radius_mean"]
    assert row["n"] == 2
    band = feature.panel.radius.band
    assert band.isVisible()
    low, high = band.getRegion()
    assert low == pytest.approx(row["mean"] - row["sd"]) and high == pytest.approx(
        row["mean"] + row["sd"])
    assert "vs 2 degree null(s)" in feature.panel.summary.text()


@pytest.mark.parametrize("values, says", [
    (dict(prompt="   "), "the prompt is empty"),
    (dict(prompt="a"), "at least two tokens"),
    (dict(prompt=PROMPT, kind="nothing"), "null kind 'nothing'"),
])
def test_bad_input_is_one_line_in_the_dock(window, values, says):
    feature = window.features["dynamics"]
    window.state.docks.prompt = ""
    assert not feature.measure(**values)
    message = feature.panel.message.text()
    assert says in message and "\n" not in message
    assert not feature.busy


def test_cancel_during_a_null_stops_it_there(app_checkpoint):
    """Cancel was heard only between nulls, and one null of the demo brain took minutes."""
    import threading

    from flyviz.app.dynamics.dynamics_panel import measure

    tokenizer = FlyTokenizer(app_checkpoint.tokenizer_path)
    ids = encode_prompt(tokenizer, PROMPT, app_checkpoint.config.bos_token_id)
    stop = threading.Event()
    told: list[float] = []

    def report(share: float) -> None:
        told.append(share)
        if share > 0.5:   # past the real portrait (half of the work with one null)
            stop.set()

    found = measure(app_checkpoint, ids, [str(i) for i in ids],
                    DynamicsSettings(eigenvalues=2), 1, "degree", None, stop, report)
    assert found is None and stop.is_set()
    assert 0.5 < told[-1] < 1.0   # within the null, not after it
