"""A spiking brain's bottom row keeps its widths when the window swaps its docks for the Fly
LLM's and back (opening a Fly LLM, then the spiking brain again; the window swaps so as it
closes too): the Spiking populations dock came back ~130 px narrower, its groups field and
legend cut, the State raster beside it taking the width."""

from __future__ import annotations

import pytest
from PySide6.QtWidgets import QApplication
from qt_barriers import settle
from test_app_spiking_keyboard import _spiking_window

pytestmark = [pytest.mark.gui, pytest.mark.usefixtures("spiking_kernels")]


def _widths(win) -> dict[str, int]:
    QApplication.processEvents()
    return {key: dock.width() for key, dock in win.docks.items()
            if dock.isVisible() and not dock.isFloating()}


@pytest.mark.parametrize("size", [(1280, 800), (1440, 900)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_the_populations_dock_keeps_its_width_when_the_docks_are_swapped_and_back(
        qtbot, tmp_path, size):
    from flyviz.kinds import LANGUAGE

    win = _spiking_window(qtbot, tmp_path)
    try:
        win.resize(*size)
        qtbot.waitUntil(lambda: (win.width(), win.height()) == size, timeout=3000)
        settle(qtbot, win)
        spiking = win.state.kind
        before = _widths(win)
        assert {"raster", "spiking_population"} <= before.keys()
        win.dock_kinds.apply(LANGUAGE)      # as the window does before saving its layout
        settle(qtbot, win)
        win.dock_kinds.apply(spiking)       # as the next session does, opening the brain
        settle(qtbot, win)
        after = _widths(win)
        for key in ("raster", "spiking_population"):
            assert abs(after[key] - before[key]) <= 3, (key, before, after)
    finally:
        win.close()
