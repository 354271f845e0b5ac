"""The window's plots build no context menu they never offer.

pyqtgraph builds each plot's right-click menu (its own small form of widgets) when the plot
is made; most of the docks' plots then turn the menu off, which threw it away: work at every
window's start that nobody could ever see.
"""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")
pytest.importorskip("pyqtgraph")

from app_conftest import make_window  # noqa: E402

pytestmark = pytest.mark.gui


def test_every_plot_menu_the_window_builds_is_one_it_offers(qtbot, app_checkpoint, tmp_path,
                                                             monkeypatch):
    import importlib

    import pyqtgraph as pg

    # The module (the package's name ``ViewBox`` is the class): ViewBox.__init__ looks the
    # menu's class up there.
    view_box_module = importlib.import_module("pyqtgraph.graphicsItems.ViewBox.ViewBox")

    built = []

    class CountedMenu(view_box_module.ViewBoxMenu):
        def __init__(self, view):
            built.append(view)
            super().__init__(view)

    monkeypatch.setattr(view_box_module, "ViewBoxMenu", CountedMenu)
    win = make_window(qtbot, app_checkpoint, tmp_path)
    try:
        assert built                                   # the plots that offer one have it
        # pyqtgraph's own colour bar makes its plot and turns the menu off itself.
        ours = [view for view in built
                if not isinstance(view.parentItem(), pg.ColorBarItem)]
        thrown_away = [type(view.parentItem()).__name__ for view in ours
                       if not view.menuEnabled()]
        assert not thrown_away, thrown_away
    finally:
        win.close()
