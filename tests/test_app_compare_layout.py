"""Starting a comparison leaves the window's layout alone: the brain view keeps its width,
and the Traces plot (its legend now three curves long) still fits its dock."""

from __future__ import annotations

import pytest
from PySide6.QtWidgets import QApplication
from test_app_window_fit import clipped_controls, wait_in_front
from qt_barriers import settle

from flyviz.model.interventions import Silence


def _widths(win) -> dict[str, int]:
    QApplication.processEvents()
    widths = {"brain": win.brain.width()}
    widths.update({key: dock.width() for key, dock in win.docks.items()
                   if dock.isVisible() and not dock.isFloating()})
    return widths


@pytest.mark.parametrize("size", [(1280, 800), (1440, 900)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_the_brain_view_keeps_its_width_when_a_comparison_starts(window, qtbot, size):
    win = window
    win.resize(*size)
    qtbot.waitUntil(lambda: (win.width(), win.height()) == size, timeout=3000)
    win.state.run.temperature = 0.0
    win.state.run.max_new_tokens = 8
    win.state.run.speed_cap = 0
    with qtbot.waitSignal(win.run_ended, timeout=20_000):
        assert win.run_prompt("Tom and his dog"), win.last_error
    settle(qtbot, win)
    before = _widths(win)
    superclass = win.controls.superclass.itemData(1)
    with qtbot.waitSignal(win.run_ended, timeout=20_000):
        assert win.interventions.compare_with([Silence(f"superclass:{superclass}")],
                                              prompt="Tom and his dog"), win.last_error
    qtbot.waitUntil(lambda: "untouched" in win.text_panel.toPlainText(), timeout=3000)
    settle(qtbot, win)
    after = _widths(win)
    assert after["brain"] == before["brain"], (before, after)
    assert {k: after.get(k) for k in before} == before
    win.docks["traces"].raise_()
    wait_in_front(win, qtbot, "traces", win.docks["traces"])   # painted and laid out
    assert "KL" in win.trace_panel.legend.text
    assert clipped_controls("traces", win.docks["traces"]) == []
