"""The 2-D plots repaint themselves whenever what they show changes."""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QEvent, QObject, QPoint, QPointF, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import QApplication

from flyviz.app._testing import one_hot_recording


class _PaintCounter(QObject):
    def __init__(self) -> None:
        super().__init__()
        self.paints = 0

    def eventFilter(self, watched, event) -> bool:  # noqa: N802 - Qt API
        if event.type() == QEvent.Type.Paint:
            self.paints += 1
        return False


def _counters(plots):
    counters = []
    for plot in plots:
        counter = _PaintCounter()
        plot.viewport().installEventFilter(counter)
        counters.append(counter)
    return counters


def test_plots_repaint_when_the_shown_token_changes(window, qtbot, app_checkpoint):
    win = window
    n = app_checkpoint.config.neurons
    win.session.replace(one_hot_recording(n, [1, 2, 3, 4]))
    win.select_neuron(2)
    win.show_token(0)
    qtbot.waitUntil(lambda: win.display.showing(0), timeout=3000)
    QApplication.processEvents()             # their repaints for frame 0 are done
    plots = {"top-k": win.topk_panel.plot, "raster": win.raster_panel.plot,
             "traces": win.trace_panel.plot, "inspector": win.inspector.trace}
    counters = dict(zip(plots, _counters(plots.values())))
    win.show_token(2)
    qtbot.waitUntil(lambda: all(c.paints for c in counters.values()), timeout=3000)
    assert win.trace_panel.token_line.value() == 2
    assert win.inspector.trace_cursor.value() == 2


def test_mouse_wheel_on_the_traces_repaints_them(window, qtbot, app_checkpoint):
    win = window
    win.session.replace(one_hot_recording(app_checkpoint.config.neurons, [1, 2, 3, 4]))
    win.show_token(1)
    qtbot.waitUntil(lambda: win.display.showing(1), timeout=3000)
    QApplication.processEvents()
    plot = win.trace_panel.plot
    (counter,) = _counters([plot])
    before = plot.getPlotItem().vb.viewRange()[0]
    centre = QPointF(plot.viewport().width() / 2, plot.viewport().height() / 2)
    wheel = QWheelEvent(centre, QPointF(plot.viewport().mapToGlobal(centre.toPoint())),
                        QPoint(0, 0), QPoint(0, 120), Qt.MouseButton.NoButton,
                        Qt.KeyboardModifier.NoModifier, Qt.ScrollPhase.NoScrollPhase, False)
    QApplication.sendEvent(plot.viewport(), wheel)
    qtbot.waitUntil(lambda: counter.paints > 0, timeout=3000)
    assert plot.getPlotItem().vb.viewRange()[0] != before      # the wheel zoomed the x axis


def _near(colour, rgb, tolerance: int = 40) -> bool:
    return all(abs(c - v) <= tolerance for c, v in zip((colour.red(), colour.green(), colour.blue()),
                                                      rgb))


def test_the_traces_legend_keeps_off_the_curves(window, qtbot, app_checkpoint):
    from PySide6.QtCore import QPointF
    from PySide6.QtGui import QColor

    from flyviz.app.base import theme
    from flyviz.app._testing import make_frame
    from flyviz.record.recording import Recording

    win = window
    n = app_checkpoint.config.neurons
    rec = Recording(n)
    for i in range(60):    # top-1 probability 1.0 throughout: the curve runs along the top
        frame = make_frame(i, np.zeros(n), top_k=1)
        frame.top_k_probabilities[:] = 1.0
        rec.append(frame)
    win.docks["traces"].setFloating(True)
    win.docks["traces"].resize(700, 260)
    win.session.replace(rec)
    win.refresh_panels()
    panel = win.trace_panel
    plot = panel.plot
    qtbot.waitUntil(lambda: plot.viewport().width() >= 600, timeout=3000)
    vb = plot.getPlotItem().vb
    violet = QColor(theme.VIOLET)
    rgb = (violet.red(), violet.green(), violet.blue())
    image = plot.grab().toImage()
    covered = 0
    xs = np.linspace(1, 58, 200)
    for x in xs:
        point = plot.mapFromScene(vb.mapViewToScene(QPointF(float(x), 1.0)))
        column = [image.pixelColor(point.x(), y) for y in range(point.y() - 3, point.y() + 4)]
        if not any(_near(c, rgb) for c in column):
            covered += 1
    assert covered == 0, f"{covered} of {len(xs)} points of the curve are hidden"
    # The legend is shown, outside the data area.
    legend = panel.legend
    assert legend.isVisible() and "top-1 probability" in legend.text
    assert not legend.sceneBoundingRect().intersects(vb.sceneBoundingRect())


def test_an_empty_neuron_trace_reads_from_frame_0(qapp):
    """The Neuron dock's trace before a neuron is picked numbered its frames -0.4 to 0.4."""
    from flyviz.app.brain.inspector import NeuronInspector

    inspector = NeuronInspector()
    try:
        inspector.resize(300, 600)
        (x_low, x_high), _ = inspector.trace.getViewBox().viewRange()
        assert -0.5 < x_low <= 0.0 and x_high >= 9.0
        inspector.show_neuron(None, None, 0)
        (x_low, x_high), _ = inspector.trace.getViewBox().viewRange()
        assert -0.5 < x_low <= 0.0 and x_high >= 9.0
    finally:
        inspector.deleteLater()


def test_the_state_raster_says_its_rows_are_a_sample_and_names_their_neurons(qapp):
    """On a brain of more neurons than rows the raster shows an evenly spaced sample: the
    caption says so ("256 of 300 neurons") and the row axis labels each row by its neuron's
    index (row 250 is neuron 293, not 250); a brain that fits is labelled as it is."""
    from flyviz.app.population.state_panels import RasterPanel

    panel = RasterPanel(rows=256, window=96)
    panel.set_neurons(np.arange(300))
    caption = panel.caption.text()
    assert "256 of 300 neurons, evenly spaced" in caption and "× last 96" in caption
    expected = np.linspace(0, 299, 256).round().astype(int)
    assert np.array_equal(panel.neurons, expected)
    assert panel.row_axis.tickStrings([0.0, 250.0, 255.0, 0.5], 1.0, 1.0) == [
        "0", str(expected[250]), "299", ""]
    assert expected[250] == 293
    # Rows beyond the ones shown name nothing (the axis's range has room around them).
    assert panel.row_axis.tickStrings([-1.0, 256.0], 1.0, 1.0) == ["", ""]
    # The neurons with positions, all shown: no sample, each row its own neuron.
    panel.set_neurons(np.array([4, 9, 17]))
    assert "3 neurons ×" in panel.caption.text() and " of " not in panel.caption.text()
    assert panel.row_axis.tickStrings([0.0, 1.0, 2.0], 1.0, 1.0) == ["4", "9", "17"]
    # A full-size brain's indices are shortened to the width of a row number, so the axis
    # (and the docks beside the raster) keep their width.
    panel.set_neurons(np.arange(49_393))
    assert panel.row_axis.tickStrings([0.0, 128.0, 255.0], 1.0, 1.0) == ["0", "25k", "49k"]
