"""The Patching dock's heatmap: a causal trace's positions as rows, its groups as columns.

Each row shown is at least a token label tall, so each shown row's label is
drawn and read; when the plot is shorter than all the positions it shows a
window of consecutive rows, moved by a scroll bar beside it and the mouse
wheel (:class:`Heatmap`). Colours are the sequential colormap as drawn on
black (:func:`heatmap_colours`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, QSize, Qt, Signal
from PySide6.QtGui import QFontMetrics, QWheelEvent
from PySide6.QtWidgets import QScrollBar, QWidget

from flyviz.analysis.heatmap import bar_span, colour_index
from flyviz.app.base.plots import GraphicsLayoutWidget
from flyviz.render.colormaps import lut

__all__ = ["MAX_HEIGHT", "MIN_HEIGHT", "ROW_PIXELS", "Heatmap", "heatmap_colours"]

#: Pixels per heatmap row the heatmap asks for, and the most it asks for in all.
ROW_PIXELS = 20
MAX_HEIGHT = 900

#: The heatmap's least height: small enough for a short dock's viewport (the dock moved
#: beside the text on a 1280x800 screen); the rows beyond its height are scrolled to.
MIN_HEIGHT = 150


def heatmap_colours() -> np.ndarray:
    """``(256, 3)`` uint8: the sequential colormap as drawn on black (dark is the
    corrupted run's value, bright the clean run's); value ``v`` in ``[0, 1]`` is entry
    ``round(255 v)``."""
    table = lut("sequential")
    return np.clip(255.0 * table[:, :3] * table[:, 3:4], 0, 255).astype(np.uint8)


class _CellImage(pg.ImageItem):
    """The heatmap's image; a left click reports its (row, column), hovering names it."""

    def __init__(self, clicked: Callable[[int, int], None]) -> None:
        super().__init__()
        self._clicked = clicked
        #: ``describe(row, column) -> str``: the tooltip of a cell.
        self.describe: Callable[[int, int], str] | None = None
        self.setAcceptHoverEvents(True)

    def _cell(self, pos: Any) -> tuple[int, int] | None:
        if self.image is None:
            return None
        column, row = int(np.floor(pos.x())), int(np.floor(pos.y()))
        columns, rows = self.image.shape[:2]
        return (row, column) if 0 <= row < rows and 0 <= column < columns else None

    def hoverEvent(self, ev: Any) -> None:  # noqa: N802 - pyqtgraph API
        cell = None if ev.isExit() else self._cell(ev.pos())
        self.setToolTip("" if cell is None or self.describe is None
                        else self.describe(*cell))

    def mouseClickEvent(self, ev: Any) -> None:  # noqa: N802 - pyqtgraph API
        cell = self._cell(ev.pos()) if ev.button() == Qt.MouseButton.LeftButton else None
        if cell is not None:
            ev.accept()
            self._clicked(*cell)


class Heatmap(GraphicsLayoutWidget):
    """Positions as rows (token labels), groups as columns, one colour per cell.

    Every row shown is at least a token label tall (:meth:`row_pixels`), so each
    shown row's label is drawn and read. When the plot is too short for all the
    positions it shows a window of consecutive rows: :attr:`rows_bar` (beside the
    heatmap, shown only then) and the mouse wheel over the heatmap move it.

    Signals
    -------
    cell_clicked(row, column)
        A cell was clicked.
    """

    cell_clicked = Signal(int, int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setMinimumHeight(MIN_HEIGHT)
        self.plot = self.addPlot(enableMenu=False)   # no menu, none built
        self.plot.hideButtons()
        self.plot.invertY(True)                 # the first position at the top
        self.plot.getViewBox().setMouseEnabled(x=False, y=False)
        for side in ("left", "bottom"):
            # Every label that fits is drawn (pyqtgraph leaves some out past 80 % filled).
            self.plot.getAxis(side).setStyle(textFillLimits=[(0, 0.98)])
        self.image = _CellImage(self.cell_clicked.emit)
        self.plot.addItem(self.image)
        self.colours = heatmap_colours()
        self.colormap = pg.ColorMap(np.linspace(0.0, 1.0, self.colours.shape[0]), self.colours)
        self.bar = pg.ColorBarItem(values=(0.0, 1.0), colorMap=self.colormap,
                                   interactive=False, width=12)
        self.addItem(self.bar, row=0, col=1)
        self.values: np.ndarray | None = None
        #: The colour bar's ends, as fractions from the corrupted run's value (0) to the
        #: clean run's (1): ``(0, 1)``, extended to cells beyond them
        #: (:func:`flyviz.analysis.heatmap.bar_span`, as the written figure's).
        self.span = (0.0, 1.0)
        #: The first row shown, and how many rows are shown.
        self.first_row = 0
        self.shown_rows = 0
        #: Moves the window of rows when not all fit; the panel lays it out beside the heatmap.
        self.rows_bar = QScrollBar(Qt.Orientation.Vertical)
        self.rows_bar.setToolTip("More positions: scroll the rows (or the wheel over them)")
        self.rows_bar.setVisible(False)
        self.rows_bar.valueChanged.connect(self.show_rows_from)
        self.plot.getViewBox().sigResized.connect(lambda _vb: self._fit_rows())
        self.set_grid(None)

    def set_grid(self, values: np.ndarray | None, rows: list[str] | None = None,
                 columns: list[str] | None = None) -> None:
        """Show ``(rows, columns)`` values, 0 the corrupted run's and 1 the clean run's (NaN
        drawn as 0), rows and columns labelled; the colours and the bar span ``[0, 1]`` and
        any cell beyond (:attr:`span`), so that no cell takes a run's colour it does not
        have."""
        self.values = None if values is None else np.asarray(values, dtype=np.float64)
        self.span = (0.0, 1.0)
        if self.values is None or self.values.size == 0:
            self.values = None
            self.bar.setLevels((0.0, 1.0))
            self.image.clear()
            self.plot.getAxis("left").setTicks([[]])
            self.plot.getAxis("bottom").setTicks([[]])
            self.setMinimumHeight(MIN_HEIGHT)
            self._fit_rows()
            return
        self.span = bar_span(self.values)
        self.bar.setLevels(self.span)
        # The colours are looked up here (the colour of value v is entry round(255 v) of the
        # bar's span), and ImageItem's first index is x: the columns (groups) across, the
        # rows (positions) down.
        rgb = self.colours[colour_index(self.values, self.span)]
        shown = self.values
        self.image.setImage(np.ascontiguousarray(rgb.transpose(1, 0, 2)), levels=(0, 255),
                            autoLevels=False)
        n_rows, n_columns = shown.shape
        self.image.setRect(0, 0, n_columns, n_rows)
        # The columns are numbered (the names are listed below and on hover).
        every = max(1, int(np.ceil(n_columns * 22 / max(100, self.width() - 120))))
        left = self.plot.getAxis("left")
        left.setTicks([[(r + 0.5, text) for r, text in enumerate(rows or [])]])
        # Wide enough for the longest token now (it would widen only after a first paint
        # that leaves the wider labels out).
        metrics = QFontMetrics(left.style.get("tickFont") or self.font())
        left.setWidth(max([metrics.horizontalAdvance(t) for t in rows or []] + [20]) + 16)
        self.plot.getAxis("bottom").setTicks(
            [[(c + 0.5, str(c + 1)) for c in range(n_columns) if c % every == 0]])
        self.first_row = 0
        self.updateGeometry()               # the size hint follows the rows
        self._fit_rows()

    # ------------------------------------------------------------ the window of rows
    @property
    def n_rows(self) -> int:
        """The rows (positions) of the grid shown; 0 without one."""
        return 0 if self.values is None else int(self.values.shape[0])

    def row_pixels(self) -> int:
        """The least height of a shown row: a token label's."""
        left = self.plot.getAxis("left")
        return max(12, QFontMetrics(left.style.get("tickFont") or self.font()).height())

    def rows_that_fit(self) -> int:
        """How many rows the plot's height shows at :meth:`row_pixels` or more each."""
        height = self.plot.getViewBox().height()
        return max(1, int(height // self.row_pixels()))

    def _fit_rows(self) -> None:
        """Show every row if they fit, else a window of them and the scroll bar."""
        rows = self.n_rows
        fit = self.rows_that_fit() if rows else 0
        shown = min(rows, fit)
        bar = self.rows_bar
        bar.blockSignals(True)
        bar.setRange(0, max(0, rows - shown))
        bar.setPageStep(max(1, shown))
        bar.setSingleStep(1)
        bar.blockSignals(False)
        bar.setVisible(rows > shown)
        self.shown_rows = shown
        self.show_rows_from(self.first_row)

    def show_rows_from(self, first: int) -> None:
        """Show the window of rows that starts at row ``first`` (kept within the grid)."""
        rows = self.n_rows
        if rows == 0:
            self.first_row = 0
            return
        first = int(max(0, min(first, rows - self.shown_rows)))
        self.first_row = first
        if self.rows_bar.value() != first:
            self.rows_bar.setValue(first)       # comes back here with the same row
        n_columns = 0 if self.values is None else self.values.shape[1]
        self.plot.setRange(xRange=(0, n_columns), yRange=(first, first + self.shown_rows),
                           padding=0)
        # The view's transform follows at the next paint; clicks and cell_centre need it now.
        self.plot.getViewBox().updateMatrix()

    def show_row(self, row: int) -> None:
        """Scroll the rows (if they do not all fit) so that ``row`` is shown."""
        if row < self.first_row:
            self.show_rows_from(row)
        elif row >= self.first_row + self.shown_rows:
            self.show_rows_from(row - self.shown_rows + 1)

    def wheelEvent(self, event: QWheelEvent) -> None:  # noqa: N802 - Qt API
        # The wheel moves the rows when some are out of sight; else it scrolls the dock.
        steps = event.angleDelta().y() / 120
        if self.rows_bar.isVisible() and steps:
            self.show_rows_from(self.first_row - int(np.sign(steps) * max(1, abs(steps))))
            event.accept()
        else:
            event.ignore()

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt API
        # Room for every row's label when the dock has it (the axes take about 70 px).
        rows = self.n_rows
        height = 280 if rows == 0 else int(min(MAX_HEIGHT, ROW_PIXELS * rows + 70))
        return QSize(320, max(MIN_HEIGHT, height))

    def cell_centre(self, row: int, column: int) -> QPointF:
        """Where cell (row, column) is drawn, in this widget's coordinates."""
        # The image spans (0, 0)-(columns, rows) in the view's coordinates.
        scene = self.plot.getViewBox().mapViewToScene(QPointF(column + 0.5, row + 0.5))
        return QPointF(self.mapFromScene(scene))
