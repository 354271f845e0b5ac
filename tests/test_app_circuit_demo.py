"""The Circuit dock on the demo brain with its defaults: it names a faithful circuit or says
that there is none, never an overshoot as kept, and draws the tolerance band and the
overshoots where the result puts them."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
from app_conftest import make_window
from bench_circuit import names_task
from PySide6.QtCore import QPointF
from PySide6.QtGui import QColor
from qt_barriers import settle

from flyviz.app.circuit.circuit_panel import OVERSHOOT_COLOUR

pytestmark = [pytest.mark.gui, pytest.mark.slow]


def _rgb(widget, point: QPointF) -> np.ndarray:
    """The widget's pixel at a logical point, RGB."""
    ratio = widget.devicePixelRatioF()
    colour = widget.grab().toImage().pixelColor(int(round(point.x() * ratio)),
                                                int(round(point.y() * ratio)))
    return np.array([colour.red(), colour.green(), colour.blue()], dtype=np.float64)


def _at(plot, x: float, f: float) -> QPointF:
    vb = plot.getPlotItem().vb
    return plot.mapFromScene(vb.mapViewToScene(QPointF(x, f)))


def test_the_docks_defaults_on_the_demo_name_a_faithful_circuit_or_say_there_is_none(
        qtbot, tmp_path, monkeypatch):
    # Read before the test moves into its own folder, which a relative one is not under.
    folder = os.environ.get("FLYVIZ_SCREENSHOTS")
    shots = Path(folder).resolve() if folder else None
    win = make_window(qtbot, None, tmp_path)
    try:
        with qtbot.waitSignal(win.model_ready, timeout=120_000):
            win.load_model("demo")
        # Two prompts, a girl's and a boy's (names_task interleaves them): the search ends as
        # it does with four (no faithful circuit, an overshoot at 220 neurons), and each
        # prompt is a whole-brain run at every measured size. The task is named as a user in
        # its folder types it, so the documentation's picture shows that, not pytest's
        # temporary folder.
        monkeypatch.chdir(tmp_path)
        task = Path("names.jsonl")
        task.write_text("".join(json.dumps(e) + "\n" for e in names_task(2)), "utf-8")
        feature = win.features["circuit"]
        panel = feature.panel
        # The defaults: neurons, mean ablation, |1 - f| <= 0.1, flow scores.
        assert panel.units.currentData() == "neurons"
        assert panel.ablation.currentData() == "mean"
        assert panel.tolerance.value() == pytest.approx(0.1)
        assert panel.score.currentData() == "flow"
        with qtbot.waitSignal(feature.found, timeout=600_000) as found:
            assert feature.find(task), panel.message.text()
        result = found.args[0]
        message = panel.message.text()
        count = result.units.count
        assert count == 49_393 and "keep" not in message.lower()
        if result.faithful:
            assert 0 < result.size < count and abs(1.0 - result.faithfulness) <= 0.1
            assert message.startswith(f"Faithful circuit: {result.size:,} of 49,393 neurons, "
                                      f"f = {result.faithfulness:.3f} (|1 − f| ≤ 0.1); per "
                                      "prompt f ")
            assert result.spread()["within"] >= 0.9
        else:
            assert result.size == count
            assert message.startswith("No circuit below the whole brain is faithful")
        over = result.overshoot
        if over is not None:
            assert f"Overshoots: {over.faithfulness:.0%} at {over.size:,} neurons, not kept" \
                in message
            feature.show_k(over.size)
            assert panel.k_label.text().endswith(f"overshoots: {over.faithfulness:.0%}")
        feature.show_k(result.size)
        plot = panel.curve
        win.docks["circuit"].setFloating(True)
        win.docks["circuit"].resize(520, 760)
        qtbot.waitUntil(lambda: plot.width() > 300, timeout=3000)
        settle(qtbot, plot)
        # The tolerance band: shaded at f = 1 left of the first point (k = 2: no curve
        # there), the plain background at f = 0.5 beside it.
        x = math.log10(2)
        band, outside = _rgb(plot, _at(plot, x, 1.0)), _rgb(plot, _at(plot, x, 0.5))
        assert band.sum() > outside.sum() + 30, (band, outside)
        # Every overshooting point in violet at (k, f); the vertical line only on a faithful
        # circuit.
        violet = QColor(OVERSHOOT_COLOUR)
        want = np.array([violet.red(), violet.green(), violet.blue()], dtype=np.float64)
        drawn = [p for p in result.points if p.faithfulness > 1.1 and p.size > 0]
        assert (over is None) == (not drawn)
        for p in drawn:
            at = _at(plot, math.log10(p.size), p.faithfulness)
            ratio = plot.devicePixelRatioF()
            image = plot.grab().toImage()
            near = [image.pixelColor(int(round(at.x() * ratio)) + dx,
                                     int(round(at.y() * ratio)) + dy)
                    for dx in range(-2, 3) for dy in range(-2, 3)]
            rgb = np.array([[c.red(), c.green(), c.blue()] for c in near], dtype=np.float64)
            assert np.abs(rgb - want).max(axis=1).min() <= 12, (p.size, p.faithfulness)
        assert plot.k_line.isVisible() == result.faithful
        # The dock as a user sees it: its Task field names the file, never pytest's folder.
        assert panel.task.text() == "names.jsonl"
        if shots is not None:  # for the documentation
            panel.grab().save(str(shots / "circuit-dock-demo.png"))
    finally:
        win.close()
