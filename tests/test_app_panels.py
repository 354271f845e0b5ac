"""The 2-D plots repaint themselves whenever what they show changes."""

from __future__ import annotations

from app_conftest import app_checkpoint, window  # noqa: F401
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
    qtbot.wait(120)
    plots = {"top-k": win.topk_panel.plot, "raster": win.raster_panel.plot,
             "traces": win.trace_panel.plot, "inspector": win.inspector.trace}
    counters = dict(zip(plots, _counters(plots.values())))
    win.show_token(2)
    qtbot.waitUntil(lambda: all(c.paints for c in counters.values()), timeout=3000)
    assert win.trace_panel.cursor.value() == 2
    assert win.inspector.trace_cursor.value() == 2


def test_mouse_wheel_on_the_traces_repaints_them(window, qtbot, app_checkpoint):
    win = window
    win.session.replace(one_hot_recording(app_checkpoint.config.neurons, [1, 2, 3, 4]))
    win.show_token(1)
    qtbot.wait(120)
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
