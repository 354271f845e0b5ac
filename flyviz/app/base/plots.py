"""The plots every dock shows: pyqtgraph's widgets, clicked to but never tabbed to.

pyqtgraph's views take the focus from Tab (``StrongFocus``): in a dock such a stop showed
no mark and took no key of its own, so its arrow keys stepped the run (the window's
shortcuts), one blank press per plot between a dock's controls. Every dock builds its plots
from :class:`PlotWidget` and :class:`GraphicsLayoutWidget` here (tests/test_architecture.py
refuses pyqtgraph's own in :mod:`flyviz.app`), so a new dock's plot is no Tab stop either.
"""

from __future__ import annotations

from typing import Any

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QGraphicsView


def takes_no_tab(view: QGraphicsView) -> None:
    """Make ``view`` a plot the mouse focuses (to drag or zoom it) and Tab passes by."""
    view.setFocusPolicy(Qt.FocusPolicy.ClickFocus)


class PlotWidget(pg.PlotWidget):
    """:class:`pyqtgraph.PlotWidget` that is no Tab stop (:func:`takes_no_tab`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        takes_no_tab(self)


class GraphicsLayoutWidget(pg.GraphicsLayoutWidget):
    """:class:`pyqtgraph.GraphicsLayoutWidget` that is no Tab stop (:func:`takes_no_tab`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        takes_no_tab(self)


__all__ = ["GraphicsLayoutWidget", "PlotWidget", "takes_no_tab"]
