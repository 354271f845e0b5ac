"""The Trajectory dock's 3-D view: paths turned by a drag, the marked token, hover and click.

:class:`PathView` paints a few paths of a few hundred vertices with ``QPainter``
in an orthographic projection (drag turns it, the wheel zooms, a double click
goes back to the first view): no OpenGL, so it costs the software-rendered
brain beside it nothing and draws the same under Xvfb. The paths, legend and
axes are painted into a cached layer once per change; moving the marker or the
hover paints only those over it. Used by :mod:`flyviz.app.population.trajectory_panel`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from PySide6.QtCore import QLineF, QPointF, QRectF, Qt, Signal
from PySide6.QtGui import (QBrush, QColor, QMouseEvent, QPainter, QPaintEvent, QPen, QPixmap,
                           QWheelEvent)
from PySide6.QtWidgets import QWidget

from flyviz.app.base import theme

__all__ = ["MARKER_COLOUR", "PICK_RADIUS_PX", "PathView", "TrajectoryPath"]

#: The shown token's marker.
MARKER_COLOUR = theme.ACCENT

#: Hover and click find the nearest vertex within this distance (logical pixels).
PICK_RADIUS_PX = 12.0


@dataclass(frozen=True)
class TrajectoryPath:
    """One run drawn as a path: its legend label, colour and ``(T, 3)`` coordinates."""

    label: str
    colour: str
    coordinates: np.ndarray


class PathView(QWidget):
    """Paths in 3-D, orthographic, turned by a drag; the marked token and hover on top.

    Signals
    -------
    token_clicked(token)
        A click landed within :data:`PICK_RADIUS_PX` of a vertex: its token.
    hovered(path, token)
        The vertex nearest the pointer (``-1, -1``: none near).
    """

    token_clicked = Signal(int)
    hovered = Signal(int, int)

    #: Where the view looks from at first (degrees) and after a double click.
    HOME = (-50.0, 25.0)
    #: Room on the left for the legend and the axes (at most a quarter of the width).
    LEFT = 112.0
    #: Margin around the paths (logical pixels).
    MARGIN = 12.0

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setMouseTracking(True)
        self.setMinimumSize(160, 120)
        self.paths: list[TrajectoryPath] = []
        #: The marked token (-1: none).
        self.marker = -1
        #: The vertex under the pointer, ``(path, token)``, or None.
        self.hover: tuple[int, int] | None = None
        self.azimuth, self.elevation = self.HOME
        self.zoom = 1.0
        self._centre = np.zeros(3)
        self._points = np.zeros((0, 3))
        self._frame: tuple[float, float, float] | None = None
        self._screen: list[np.ndarray] | None = None
        self._layer: QPixmap | None = None
        self._press: QPointF | None = None
        self._dragged = False
        #: The hovered token, said in the top right corner.
        self.hover_text = ""
        #: What is said when there is nothing to draw.
        self.placeholder = "Run a prompt: its states are drawn here as a path."

    # ------------------------------------------------------------ what is drawn
    def set_paths(self, paths: list[TrajectoryPath]) -> None:
        """Draw ``paths``, framed to fill the view."""
        self.paths = paths
        points = [p.coordinates for p in paths if len(p.coordinates)]
        self._points = np.concatenate(points) if points else np.zeros((0, 3))
        if len(self._points):
            self._centre = (self._points.min(axis=0) + self._points.max(axis=0)) / 2
        self._changed()

    def set_marker(self, token: int) -> None:
        """Mark ``token`` on every path that has it."""
        if token != self.marker:
            self.marker = token
            self.update()

    def rotation(self) -> np.ndarray:
        """``(3, 3)``: rows are the screen's right, up and towards-the-viewer directions."""
        a, e = math.radians(self.azimuth), math.radians(self.elevation)
        right = np.array([math.cos(a), -math.sin(a), 0.0])
        up = np.array([math.sin(e) * math.sin(a), math.sin(e) * math.cos(a), math.cos(e)])
        return np.stack([right, up, np.cross(right, up)])

    def drawing_area(self) -> QRectF:
        """Where the paths are drawn: right of the legend and the axes, inside a margin."""
        left = min(self.LEFT, 0.25 * self.width())
        return QRectF(left, self.MARGIN, max(10.0, self.width() - left - self.MARGIN),
                      max(10.0, self.height() - 2 * self.MARGIN))

    def _framing(self) -> tuple[float, float, float]:
        """``(scale, x0, y0)``: the paths' extent at this turn fitted into the drawing area
        (kept while a drag turns the view, so the picture does not breathe)."""
        if self._frame is None:
            area = self.drawing_area()
            scale, mid = 1.0, np.zeros(2)
            if len(self._points):
                turned = (self._points - self._centre) @ self.rotation()[:2].T
                low, high = turned.min(axis=0), turned.max(axis=0)
                mid = (low + high) / 2
                extent = np.maximum(high - low, 1e-12)
                scale = min(area.width() / extent[0], area.height() / extent[1])
                if not np.isfinite(scale) or scale <= 0 or (high - low).max() <= 1e-12:
                    scale = 1.0
            scale *= self.zoom
            self._frame = (scale, area.center().x() - scale * mid[0],
                           area.center().y() + scale * mid[1])
        return self._frame

    def _changed(self, keep_frame: bool = False) -> None:
        self._screen = self._layer = None
        if not keep_frame:
            self._frame = None
        self.update()

    def project(self, coordinates: np.ndarray) -> np.ndarray:
        """``(T, 3)`` coordinates to ``(T, 2)`` widget positions (logical pixels)."""
        if len(coordinates) == 0:
            return np.zeros((0, 2))
        turned = (np.asarray(coordinates, dtype=np.float64) - self._centre) @ self.rotation().T
        scale, x0, y0 = self._framing()
        return np.stack([x0 + scale * turned[:, 0], y0 - scale * turned[:, 1]], axis=1)

    def screen_positions(self) -> list[np.ndarray]:
        """Every path's vertices on the widget (cached until the view or the paths change)."""
        if self._screen is None:
            self._screen = [self.project(p.coordinates) for p in self.paths]
        return self._screen

    def vertex_at(self, pos: QPointF) -> tuple[int, int] | None:
        """``(path, token)`` of the vertex nearest ``pos`` within :data:`PICK_RADIUS_PX`."""
        best: tuple[float, int, int] | None = None
        # The last path is drawn on top: it wins a tie.
        for p, xy in reversed(list(enumerate(self.screen_positions()))):
            if len(xy) == 0:
                continue
            distance = np.hypot(xy[:, 0] - pos.x(), xy[:, 1] - pos.y())
            k = int(np.argmin(distance))
            if distance[k] <= PICK_RADIUS_PX and (best is None or distance[k] < best[0]):
                best = (float(distance[k]), p, k)
        return None if best is None else (best[1], best[2])

    # ------------------------------------------------------------ painting
    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802 - Qt API
        painter = QPainter(self)
        painter.fillRect(self.rect(), QColor(theme.PANEL))
        if not any(len(p.coordinates) for p in self.paths):
            painter.setPen(QColor(theme.MUTED))
            painter.drawText(self.rect(), Qt.AlignmentFlag.AlignCenter, self.placeholder)
            painter.end()
            return
        painter.drawPixmap(0, 0, self._path_layer())
        painter.setRenderHint(QPainter.RenderHint.Antialiasing, True)
        for xy in self.screen_positions():
            if 0 <= self.marker < len(xy):
                x, y = xy[self.marker]
                painter.setPen(QPen(QColor(theme.TEXT), 1.5))
                painter.setBrush(QBrush(QColor(MARKER_COLOUR)))
                painter.drawEllipse(QPointF(x, y), 5.5, 5.5)
        if self.hover_text:
            painter.setPen(QColor(theme.TEXT))
            painter.drawText(QRectF(self.width() / 2, 2.0, self.width() / 2 - 8.0, 18.0),
                             Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter,
                             self.hover_text)
        if self.hover is not None and self.hover[0] < len(self.paths):
            xy = self.screen_positions()[self.hover[0]]
            if self.hover[1] < len(xy):
                painter.setPen(QPen(QColor(theme.TEXT), 1.0))
                painter.setBrush(Qt.BrushStyle.NoBrush)
                painter.drawEllipse(QPointF(*xy[self.hover[1]]), 8.0, 8.0)
        painter.end()

    def _path_layer(self) -> QPixmap:
        """The paths, legend and axes, painted once per change of the paths or the view:
        moving the marker or the hover paints only those over it."""
        ratio = self.devicePixelRatioF()
        if self._layer is None or self._layer.size() != self.size() * ratio:
            layer = QPixmap(self.size() * ratio)
            layer.setDevicePixelRatio(ratio)
            layer.fill(QColor(theme.PANEL))
            painter = QPainter(layer)
            painter.setRenderHint(QPainter.RenderHint.Antialiasing, True)
            self._paint_axes(painter)
            self._paint_legend(painter)
            # Every line first, then every vertex: a line crossing a vertex never hides it.
            for path, xy in zip(self.paths, self.screen_positions()):
                self._paint_lines(painter, path, xy)
            for path, xy in zip(self.paths, self.screen_positions()):
                self._paint_vertices(painter, path, xy)
            painter.end()
            self._layer = layer
        return self._layer

    def _paint_lines(self, painter: QPainter, path: TrajectoryPath, xy: np.ndarray) -> None:
        # An opaque one-pixel cosmetic pen, the path's colour dimmed towards the background,
        # in one call: Qt's fast line path (a translucent or wider antialiased polyline of
        # 500 segments took ~100 ms to paint here, this takes ~2 ms).
        colour, background = QColor(path.colour), QColor(theme.PANEL)
        line = QColor.fromRgbF(0.7 * colour.redF() + 0.3 * background.redF(),
                               0.7 * colour.greenF() + 0.3 * background.greenF(),
                               0.7 * colour.blueF() + 0.3 * background.blueF())
        pen = QPen(line, 1.0)
        pen.setCosmetic(True)
        painter.setPen(pen)
        points = [QPointF(x, y) for x, y in xy]
        painter.drawLines([QLineF(points[k - 1], points[k]) for k in range(1, len(points))])

    def _paint_vertices(self, painter: QPainter, path: TrajectoryPath, xy: np.ndarray) -> None:
        colour = QColor(path.colour)
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(QBrush(colour))
        for (x, y), radius in zip(xy, self._vertex_radii(path.coordinates)):
            painter.drawEllipse(QPointF(x, y), radius, radius)
        if len(xy):
            # The first token: a ring, so the direction of time reads at a glance.
            painter.setPen(QPen(colour, 1.5))
            painter.setBrush(Qt.BrushStyle.NoBrush)
            painter.drawEllipse(QPointF(*xy[0]), 5.0, 5.0)

    def _vertex_radii(self, coordinates: np.ndarray) -> np.ndarray:
        """A depth cue: vertices nearer the viewer drawn larger (2 to 3.4 pixels), on the
        depth range of every path so the paths of a comparison share the scale."""
        if len(coordinates) == 0 or len(self._points) == 0:
            return np.zeros(0)
        towards = self.rotation()[2]
        every = (self._points - self._centre) @ towards
        low, span = float(every.min()), float(np.ptp(every))
        depth = ((np.asarray(coordinates) - self._centre) @ towards - low) / max(span, 1e-12)
        return 2.0 + 1.4 * np.clip(depth, 0.0, 1.0)

    def _paint_legend(self, painter: QPainter) -> None:
        for row, path in enumerate(self.paths):
            y = 12.0 + 18.0 * row
            colour = QColor(path.colour)
            painter.setPen(QPen(colour, 2.0))
            painter.drawLine(QPointF(10.0, y), QPointF(28.0, y))
            painter.setPen(QColor(theme.TEXT))
            painter.drawText(QRectF(34.0, y - 8.0, 200.0, 16.0),
                             Qt.AlignmentFlag.AlignVCenter, path.label)

    def _paint_axes(self, painter: QPainter) -> None:
        # A small triad in the corner: which way PC1, PC2 and PC3 point now.
        origin = QPointF(44.0, self.height() - 34.0)
        turned = self.rotation()      # columns: each PC's direction on screen
        painter.setPen(QPen(QColor(theme.MUTED), 1.0))
        for k, name in enumerate(("PC1", "PC2", "PC3")):
            dx, dy = turned[0, k], -turned[1, k]
            painter.drawLine(origin, QPointF(origin.x() + 16 * dx, origin.y() + 16 * dy))
            # The name beyond the tip, centred on the axis's direction.
            label = QRectF(origin.x() + 26 * dx - 14, origin.y() + 26 * dy - 7, 28, 14)
            painter.drawText(label, Qt.AlignmentFlag.AlignCenter, name)

    # ------------------------------------------------------------ pointing
    def mousePressEvent(self, event: QMouseEvent) -> None:  # noqa: N802 - Qt API
        if event.button() == Qt.MouseButton.LeftButton:
            self._press = event.position()
            self._dragged = False

    def mouseMoveEvent(self, event: QMouseEvent) -> None:  # noqa: N802 - Qt API
        pos = event.position()
        if self._press is not None and event.buttons() & Qt.MouseButton.LeftButton:
            delta = pos - self._press
            if self._dragged or abs(delta.x()) + abs(delta.y()) > 4:
                self._dragged = True
                self.azimuth = (self.azimuth - 0.5 * delta.x()) % 360.0
                self.elevation = float(np.clip(self.elevation + 0.5 * delta.y(), -89.0, 89.0))
                self._press = pos
                self._changed(keep_frame=True)
            return
        hover = self.vertex_at(pos)
        if hover != self.hover:
            self.hover = hover
            self.update()
            self.hovered.emit(*(hover if hover is not None else (-1, -1)))

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:  # noqa: N802 - Qt API
        if event.button() != Qt.MouseButton.LeftButton:
            return
        clicked = not self._dragged
        self._press = None
        self._dragged = False
        if not clicked:
            self._changed()         # framed again for where the drag left it
        if clicked:
            vertex = self.vertex_at(event.position())
            if vertex is not None:
                self.token_clicked.emit(vertex[1])

    def mouseDoubleClickEvent(self, event: QMouseEvent) -> None:  # noqa: N802 - Qt API
        self.azimuth, self.elevation = self.HOME
        self.zoom = 1.0
        self._changed()

    def wheelEvent(self, event: QWheelEvent) -> None:  # noqa: N802 - Qt API
        steps = event.angleDelta().y() / 120.0
        self.zoom = float(np.clip(self.zoom * 1.15 ** steps, 0.2, 20.0))
        self._changed()

    def leaveEvent(self, event: Any) -> None:  # noqa: N802 - Qt API
        if self.hover is not None:
            self.hover = None
            self.update()
            self.hovered.emit(-1, -1)

    def resizeEvent(self, event: Any) -> None:  # noqa: N802 - Qt API
        self._screen = self._frame = self._layer = None
        super().resizeEvent(event)
