"""Plot axes whose tick labels never overlap, however short the plot.

pyqtgraph always labels its major ticks, so a 0–1 axis 40 pixels tall wrote
"1.0 0.8 0.6 0.4 0.2 0.0" on top of each other. :class:`SpacedAxis` takes the
labels' size from the font: tick levels whose labels would touch are dropped,
and when even the major ticks are too close it steps up the 1–2–5 series until
the labels fit (a short axis shows 0 and 1, a tall one every 0.2).
"""

from __future__ import annotations

import math

import pyqtgraph as pg
from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtGui import QFont, QFontMetricsF, QMouseEvent
from PySide6.QtWidgets import QApplication, QGraphicsView, QWidget

__all__ = ["SpacedAxis", "next_step", "paint_on_demand", "spaced_axes"]

#: Empty room between two neighbouring labels, in units of the font's height.
LABEL_GAP = 0.4


def next_step(step: float) -> float:
    """The next larger value of the 1–2–5 series (0.2 → 0.5 → 1 → 2 ...)."""
    exponent = math.floor(math.log10(step) + 1e-9)
    unit = 10.0 ** exponent
    mantissa = step / unit
    for factor in (2.0, 5.0, 10.0):
        if factor > mantissa * (1 + 1e-9):
            return factor * unit
    return 20.0 * unit


class SpacedAxis(pg.AxisItem):
    """A :class:`pyqtgraph.AxisItem` that spaces its ticks so their labels do not overlap."""

    def label_font(self) -> QFont:
        """The font the labels are drawn in."""
        font = self.style.get("tickFont")
        return QFont(font) if font is not None else QApplication.font()

    def label_extent(self, low: float, high: float, spacing: float) -> float:
        """Pixels along the axis one label needs (with the gap to its neighbour)."""
        metrics = QFontMetricsF(self.label_font())
        gap = LABEL_GAP * metrics.height()
        if self.orientation in ("left", "right"):
            return metrics.height() + gap
        scale = self.autoSIPrefixScale * self.scale
        strings = self.tickStrings([low / self.scale, high / self.scale,
                                    (low + high) / 2 / self.scale], scale, spacing / self.scale)
        return max(metrics.horizontalAdvance(s) for s in strings) + gap

    def tickSpacing(self, minVal: float, maxVal: float, size: float):  # noqa: N802, N803
        levels = super().tickSpacing(minVal, maxVal, size)
        span = abs(maxVal - minVal)
        if not levels or self._tickSpacing is not None or size <= 0 or span == 0:
            return levels
        per_unit = size / span
        kept = [(spacing, offset) for spacing, offset in levels
                if spacing * per_unit >= self.label_extent(minVal, maxVal, spacing)]
        if kept:
            return kept
        step = levels[0][0]
        for _ in range(64):         # a step as long as the axis is reached long before
            if step * per_unit >= self.label_extent(minVal, maxVal, step) or step > span:
                break
            step = next_step(step)
        return [(step, 0)]


def spaced_axes(*orientations: str) -> dict[str, SpacedAxis]:
    """``axisItems`` for :class:`pyqtgraph.PlotWidget`: spaced left and bottom axes by default."""
    return {name: SpacedAxis(name) for name in (orientations or ("left", "bottom"))}


# ------------------------------------------------------------ plot repaints
_INPUT_EVENTS = frozenset({QEvent.Type.MouseButtonPress, QEvent.Type.MouseButtonRelease,
                           QEvent.Type.MouseButtonDblClick, QEvent.Type.Wheel})


class _RepaintOnInput(QObject):
    """Event filter repainting a plot's viewport when the mouse may have changed it."""

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt API
        kind = event.type()
        if kind in _INPUT_EVENTS or (isinstance(event, QMouseEvent) and kind == QEvent.Type.MouseMove
                                     and event.buttons() != Qt.MouseButton.NoButton):
            if isinstance(watched, QWidget):
                watched.update()
        return False


def paint_on_demand(plot: pg.PlotWidget) -> None:
    """Repaint ``plot`` only when asked (``plot.viewport().update()``) or used with the mouse.

    Parameters
    ----------
    plot
        A plot whose owner calls ``plot.viewport().update()`` after changing what it shows.

    Notes
    -----
    After handling its changed items, a ``QGraphicsScene`` at once flushes the whole
    window's pending repaints. In a window holding an OpenGL view every flush composes
    the full window (about 20 ms with software OpenGL at 1730x980), so each plot that
    changes in a display tick cost one more composition. A view that leaves its
    viewport alone on scene changes adds only a dirty region, and the window is
    composed once per tick with everything that changed.
    """
    plot.setViewportUpdateMode(QGraphicsView.ViewportUpdateMode.NoViewportUpdate)
    viewport = plot.viewport()
    viewport_filter = _RepaintOnInput(plot)
    viewport.installEventFilter(viewport_filter)
    plot._repaint_on_input = viewport_filter   # keep the filter alive with the plot
