"""The Trajectory dock: the run's states on their first three principal axes, as a 3-D path.

Issue 19, part 3. A run of ``T`` tokens is ``T`` points in a 49,393-dimensional
space; :func:`~flyviz.analysis.population.principal_trajectory` finds the three
directions along which the run moves most, and the dock draws the run as a path
through them:

* the shown token is marked (it follows the timeline), hover names the nearest
  vertex's token, a click on a vertex shows that token everywhere;
* a comparison draws the untouched and the intervened run on the untouched
  run's axes (as ``flyviz figure --kind trajectory`` does), in two colours
  with a legend;
* the label says how much of the run's variance the three axes hold (and, for
  a comparison, how much of the intervened run's they keep);
* *Axes: keep these* freezes the axes shown, so the next runs of the model are
  drawn in the same space and can be compared with this one.

Fitting costs seconds for a long run of the whole brain (the ``T x T`` Gram
matrix of ``T x 49,393`` states), so it runs off the UI thread on a frozen
:meth:`~flyviz.record.recording.Recording.snapshot`. While a run streams in,
each new token is projected on the axes fitted so far (a ``(3, N)`` product),
and the axes are fitted again only when the run has grown by half since
the last fit (the total work stays proportional to the run) and once more
when frames stop arriving; a run longer than :data:`MAX_FIT_TOKENS` is fitted
on that many tokens spaced evenly, and projected whole. Nothing is computed
while the dock is hidden.

The 3-D view is painted with ``QPainter`` in an orthographic projection that a
drag turns: a few hundred vertices need no OpenGL, and a second OpenGL canvas
beside the brain would take CPU from it under a software OpenGL (llvmpipe).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from PySide6.QtCore import QLineF, QObject, QPointF, QRectF, Qt, QTimer, Signal
from PySide6.QtGui import (QBrush, QColor, QMouseEvent, QPainter, QPaintEvent, QPen, QPixmap,
                           QWheelEvent)
from PySide6.QtWidgets import (QComboBox, QHBoxLayout, QLabel, QSizePolicy, QToolTip,
                               QVBoxLayout, QWidget)

from flyviz.analysis.population import Trajectory, principal_trajectory
from flyviz.app import theme
from flyviz.app.population_panel import _Coalescer
from flyviz.record.recording import Recording

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.app.host import WindowHost
    from flyviz.viewer.state import ViewerState

__all__ = ["AXES_CHOICES", "MARKER_COLOUR", "MAX_FIT_TOKENS", "PATH_COLOURS", "PathView",
           "TrajectoryFeature", "TrajectoryFit", "TrajectoryPanel", "TrajectoryPath",
           "fit_trajectory", "install"]

#: Each path's colour by its label (a plain run, or the two runs of a comparison).
PATH_COLOURS = {"run": theme.WARM, "untouched": "#63b3ed", "intervened": theme.WARM}

#: The shown token's marker.
MARKER_COLOUR = theme.ACCENT

#: Most redraws per second while a run streams in (the token marker moves at this rate).
REFRESH_HZ = 8

#: The axes are fitted again once the run has grown by this fraction since the last fit
#: (a fit costs ~T^2: all the fits of a growing run cost under twice the last one)...
REFIT_GROWTH = 0.5
#: ...and by at least this many tokens.
MIN_REFIT_TOKENS = 8

#: Once no frame has arrived for this long (ms), the axes are fitted on the whole run.
SETTLE_MS = 400

#: A longer run is fitted on this many of its tokens, spaced evenly (all are drawn): the
#: fit of 400 tokens of 49,393 neurons takes a few seconds of one core.
MAX_FIT_TOKENS = 400

#: Hover and click find the nearest vertex within this distance (logical pixels).
PICK_RADIUS_PX = 12.0

#: The axes a trajectory is drawn on: the shown run's own, or the axes kept from a run before.
AXES_CHOICES = (("run", "This run's PCA"), ("kept", "Keep these axes"))

#: Rows projected at once (a long run is never converted to float64 whole).
_PROJECT_BLOCK = 256


@dataclass(frozen=True)
class TrajectoryPath:
    """One run drawn as a path: its legend label, colour and ``(T, 3)`` coordinates."""

    label: str
    colour: str
    coordinates: np.ndarray


@dataclass(frozen=True)
class TrajectoryFit:
    """Axes fitted to a run (off the UI thread) and the runs' coordinates on them.

    Attributes
    ----------
    trajectory
        The axes (:class:`~flyviz.analysis.population.Trajectory`).
    labels
        The paths' labels: ``("run",)`` or ``("untouched", "intervened")``.
    coordinates
        Each path's ``(T, 3)`` coordinates for the frames of the snapshot.
    explained
        ``(k,)``: the share of the first path's variance each axis holds (what
        its PCA explains, or what kept axes keep of it).
    others
        The share of each further path's variance the axes keep (one number each).
    fitted_on
        Tokens of the first run the axes were fitted on (all of the snapshot's,
        or :data:`MAX_FIT_TOKENS` spaced evenly); 0 for kept axes.
    kept
        True when the axes are kept ones (not fitted on this run).
    """

    trajectory: Trajectory
    labels: tuple[str, ...]
    coordinates: tuple[np.ndarray, ...]
    explained: np.ndarray
    others: tuple[float, ...]
    fitted_on: int
    kept: bool


def _runs(recording: Recording) -> list[tuple[str, Recording]]:
    """The runs a recording draws: itself, or a comparison's untouched and intervened run."""
    if recording.baseline is None:
        return [("run", recording)]
    return [("untouched", recording.baseline), ("intervened", recording)]


def _three(coordinates: np.ndarray) -> np.ndarray:
    """``(T, k)`` coordinates padded with zeros to three columns (a 2-token run has 2 axes)."""
    out = np.zeros((coordinates.shape[0], 3), dtype=np.float64)
    k = min(3, coordinates.shape[1])
    out[:, :k] = coordinates[:, :k]
    return out


def project_frames(trajectory: Trajectory, recording: Recording, start: int = 0,
                   stop: int | None = None) -> np.ndarray:
    """Frames ``start:stop`` of ``recording`` on ``trajectory``'s axes, ``(T, 3)``, in blocks."""
    stop = len(recording) if stop is None else min(stop, len(recording))
    blocks = [trajectory.project(recording.states(None, first, min(first + _PROJECT_BLOCK, stop)))
              for first in range(start, stop, _PROJECT_BLOCK)]
    if not blocks:
        return np.zeros((0, 3))
    return _three(np.concatenate(blocks))


def _fit_rows(tokens: int, most: int) -> np.ndarray:
    """The tokens a fit uses: all of them, or ``most`` spaced evenly."""
    if tokens <= most:
        return np.arange(tokens)
    return np.unique(np.linspace(0, tokens - 1, most).round().astype(np.int64))


def fit_trajectory(recording: Recording, kept: Trajectory | None = None,
                   most: int = MAX_FIT_TOKENS) -> TrajectoryFit:
    """Axes for ``recording`` (a frozen snapshot: this runs off the UI thread) and its paths.

    Without ``kept`` the axes are the first run's three principal axes (the
    untouched run of a comparison); with ``kept`` those axes are used as they are.
    """
    runs = _runs(recording)
    first = runs[0][1]
    rows = _fit_rows(len(first), most)
    if rows.size < 2:
        raise ValueError("a trajectory needs at least two tokens")
    sample = first.states() if rows.size == len(first) else \
        np.stack([first.state(int(i)) for i in rows])
    if kept is None:
        trajectory = principal_trajectory(sample, components=3)
        explained = trajectory.explained
        fitted_on = int(rows.size)
    else:
        trajectory = kept
        explained = kept.captured(sample)
        fitted_on = 0
    coordinates: list[np.ndarray] = []
    others: list[float] = []
    for i, (_label, run) in enumerate(runs):
        if i == 0 and kept is None and rows.size == len(first):
            coordinates.append(_three(trajectory.coordinates))
        else:
            coordinates.append(project_frames(trajectory, run))
        if i > 0:
            other_rows = _fit_rows(len(run), most)
            if other_rows.size < 2:
                others.append(0.0)
                continue
            other = run.states() if other_rows.size == len(run) else \
                np.stack([run.state(int(j)) for j in other_rows])
            others.append(float(trajectory.captured(other).sum()))
    return TrajectoryFit(trajectory, tuple(label for label, _run in runs), tuple(coordinates),
                         np.asarray(explained, dtype=np.float64), tuple(others), fitted_on,
                         kept is not None)


def describe(fit: TrajectoryFit, tokens: int) -> str:
    """The explained-variance label for ``fit`` with ``tokens`` tokens drawn (short: a dock
    is narrow; the label's tooltip says what the numbers mean)."""
    share = " · ".join(f"{100 * v:.1f}" for v in fit.explained)
    axes = "kept axes hold" if fit.kept else "PC1–3 explain"
    text = f"{axes} {100 * fit.explained.sum():.1f} %"
    if fit.others:
        text += f" of the untouched run ({share}), {100 * fit.others[0]:.1f} % of the intervened"
    else:
        text += f" ({share})"
    if not fit.kept and fit.fitted_on < tokens:
        text += f" · fitted on {fit.fitted_on:,} of {tokens:,} tokens"
    return text


# ----------------------------------------------------------------------------- the 3-D view
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
        for x, y in xy:
            painter.drawEllipse(QPointF(x, y), 2.6, 2.6)
        if len(xy):
            # The first token: a ring, so the direction of time reads at a glance.
            painter.setPen(QPen(colour, 1.5))
            painter.setBrush(Qt.BrushStyle.NoBrush)
            painter.drawEllipse(QPointF(*xy[0]), 5.0, 5.0)

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


# ----------------------------------------------------------------------------- the dock
class TrajectoryPanel(QWidget):
    """The dock's contents: the axes choice, the explained variance, hover text and the view.

    Signals
    -------
    axes_requested(name)
        The user chose the axes: ``"run"`` (the shown run's PCA) or ``"kept"``.
    """

    axes_requested = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        bar = QHBoxLayout()
        bar.addWidget(QLabel("Axes:"))
        self.axes_box = QComboBox()
        for key, title in AXES_CHOICES:
            self.axes_box.addItem(title, key)
        self.axes_box.setToolTip("This run's own principal axes (fitted again as it grows), or "
                                 "the axes shown now kept for the next runs, so that runs of "
                                 "this model are drawn in the same space. In the view: drag "
                                 "to turn, scroll to zoom, double-click for the first view; "
                                 "hover names a token, a click shows it")
        bar.addWidget(self.axes_box)
        # Long lines are cut, not allowed to widen the dock (the full text is the tooltip).
        self.explained = QLabel("")
        self.explained.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        bar.addWidget(self.explained, 1)
        layout.addLayout(bar)
        self.view = PathView()
        layout.addWidget(self.view, 1)
        #: The share of the (first) run's variance the axes hold (what the label says).
        self.explained_fraction: float | None = None
        self.axes_box.currentIndexChanged.connect(
            lambda _i: self.axes_requested.emit(str(self.axes_box.currentData())))

    def show_explained(self, text: str) -> None:
        """Say how much variance the axes hold (cut to the dock's width; whole as a tooltip)."""
        self.explained.setText(text)
        self.explained.setToolTip(
            text + "\n\nThe share of the run's variance on the three axes (each axis's share in "
            "brackets): how much of its movement the picture shows. For a comparison the axes "
            "are the untouched run's; the second share is the intervened run's variance on them.")

    def show_axes_choice(self, name: str) -> None:
        """Show ``name`` as the axes choice without asking for it again."""
        self.axes_box.blockSignals(True)
        self.axes_box.setCurrentIndex(max(0, self.axes_box.findData(name)))
        self.axes_box.blockSignals(False)


class TrajectoryFeature(QObject):
    """The Trajectory dock wired to the window's viewer state (see the module's notes)."""

    #: The :class:`~flyviz.app.background.BackgroundCalls` purpose of a fit.
    FIT = "trajectory-fit"

    def __init__(self, host: "WindowHost") -> None:
        super().__init__(host.widget())
        self.host = host
        self.state: ViewerState = host.state
        self.panel = TrajectoryPanel()
        self.view = self.panel.view
        self.dock = host.add_dock("trajectory", "Trajectory", self.panel,
                                  Qt.DockWidgetArea.BottomDockWidgetArea)
        host.tabify_dock("traces", self.dock)
        #: The fit drawn, and what it was made for.
        self.fit: TrajectoryFit | None = None
        self._fit_for: Recording | None = None
        self._fit_length = 0
        #: Axes kept for the next runs (*Keep these axes*), or None.
        self.kept: Trajectory | None = None
        #: Each path's coordinates so far (the fit's, then frames projected as they came).
        self.coordinates: list[np.ndarray] = []
        self._recording: Recording | None = None
        self._failed_for: Recording | None = None
        self.refresher = _Coalescer(self.refresh, REFRESH_HZ, self)
        self.settle = QTimer(self)
        self.settle.setSingleShot(True)
        self.settle.setInterval(SETTLE_MS)
        self.settle.timeout.connect(self._settled)
        events = self.state.events
        events.model.connect(self._on_model)
        for signal in (events.recording, events.frames_appended, events.index):
            signal.connect(lambda *_: self.refresher.poke())
        events.frames_appended.connect(lambda *_: self.settle.start())
        self.dock.visibilityChanged.connect(self._on_visibility)
        self.view.token_clicked.connect(self._on_token_clicked)
        self.view.hovered.connect(self._on_hovered)
        self.panel.axes_requested.connect(self.choose_axes)

    # ------------------------------------------------------------ following the state
    def refresh(self) -> None:
        """Show the state's recording and token now (nothing while the dock is hidden)."""
        if not self.panel.isVisible():
            return              # shown again, the dock catches up (visibilityChanged)
        recording = self.state.recording
        if recording is not self._recording:
            self._recording = recording
            self._start_fit()
        elif self.fit is not None and self._fit_for is recording:
            self._follow(recording)
        elif self._failed_for is not recording and not self.host.background.busy(self.FIT) \
                and len(_runs(recording)[0][1]) >= 2:
            self._start_fit()       # a run that started empty has its second token now
        self.view.set_marker(self.state.index)

    def _on_visibility(self, shown: bool) -> None:
        if shown:
            self.refresh()

    def _on_model(self) -> None:
        self.host.background.cancel(self.FIT)
        if self.kept is not None:
            self.kept = None       # another model's axes mean nothing for its neurons
            self.panel.show_axes_choice("run")
        self._recording = None
        self.refresh()

    def _start_fit(self) -> None:
        recording = self.state.recording
        self.fit, self._fit_for, self.coordinates = None, None, []
        first = _runs(recording)[0][1]
        if len(first) < 2:
            self.host.background.cancel(self.FIT)
            self._fit_length = 0
            self.view.placeholder = ("A trajectory needs two tokens or more." if len(recording)
                                     else "Run a prompt: its states are drawn here as a path.")
            self.view.set_paths([])
            self.panel.show_explained("")
            self.panel.explained_fraction = None
            return
        # The last run's path would be read as this one's: nothing until the axes come.
        self.view.placeholder = "Fitting the run's principal axes…"
        self.view.set_paths([])
        self.panel.show_explained("")
        self._request_fit(recording)

    def _request_fit(self, recording: Recording) -> None:
        snapshot = recording.snapshot()
        kept = self.kept
        self._fit_length = len(_runs(snapshot)[0][1])
        def failed(message: str) -> None:
            self._failed_for = recording        # not tried again for this recording
            self.host.show_message(f"trajectory: {message}", True)

        self.host.background.run(self.FIT, lambda: fit_trajectory(snapshot, kept),
                                 lambda fit: self._fitted(recording, fit), failed)

    def _fitted(self, recording: Recording, fit: TrajectoryFit) -> None:
        if recording is not self.state.recording:
            return                      # a fit of an earlier recording
        self.fit, self._fit_for = fit, recording
        self.coordinates = list(fit.coordinates)
        self.panel.explained_fraction = float(fit.explained.sum())
        self._follow(recording, fitted=True)

    def _follow(self, recording: Recording, fitted: bool = False) -> None:
        """Project the frames that came after the fit; fit again when the run has grown."""
        fit = self.fit
        assert fit is not None
        changed = fitted
        for p, (_label, run) in enumerate(_runs(recording)):
            have = len(self.coordinates[p])
            if len(run) > have:
                new = project_frames(fit.trajectory, run, have)
                self.coordinates[p] = np.concatenate([self.coordinates[p], new])
                changed = True
        if changed:
            self.view.set_paths([TrajectoryPath(label, PATH_COLOURS[label], coords)
                                 for label, coords in zip(fit.labels, self.coordinates)])
            self.panel.show_explained(describe(fit, len(self.coordinates[0])))
        tokens = len(self.coordinates[0])
        grown = tokens - self._fit_length
        if not fit.kept and not self.host.background.busy(self.FIT) \
                and grown >= max(MIN_REFIT_TOKENS, REFIT_GROWTH * self._fit_length):
            self._request_fit(recording)

    def _settled(self) -> None:
        # No frame for a while: the run has ended or paused; fit its axes on all of it.
        recording = self.state.recording
        if not self.panel.isVisible() or self.fit is None or self._fit_for is not recording:
            return
        if self.host.background.busy(self.FIT):
            self.settle.start()         # the fit under way is of fewer tokens: look again
            return
        if not self.fit.kept and len(_runs(recording)[0][1]) > self._fit_length:
            self._request_fit(recording)

    # ------------------------------------------------------------ user actions
    def choose_axes(self, name: str) -> None:
        """Draw on ``"run"`` (the shown run's own PCA) or ``"kept"`` (the axes shown now,
        kept for the runs to come)."""
        if name == "kept":
            if self.fit is None:
                self.host.show_message("there are no axes to keep yet: run a prompt of two "
                                       "tokens or more first")
                self.panel.show_axes_choice("run")
                return
            self.kept = self.fit.trajectory
            self.host.show_message("trajectory axes kept: the next runs are drawn on them")
        else:
            self.kept = None
        self.panel.show_axes_choice(name)
        self._recording = None
        self.refresh()

    def _on_token_clicked(self, token: int) -> None:
        if 0 <= token < len(self.state.recording):
            self.state.index = token

    def _on_hovered(self, path: int, token: int) -> None:
        if path < 0 or self.fit is None:
            self.view.hover_text = ""
            self.view.update()
            QToolTip.hideText()
            return
        label = self.fit.labels[path] if path < len(self.fit.labels) else ""
        run = dict(_runs(self.state.recording)).get(label)
        text = ""
        if run is not None and token < len(run):
            text = repr(run[token].input_text)
        line = f"token {token} {text}" + (f" · {label}" if len(self.fit.labels) > 1 else "")
        self.view.hover_text = line
        self.view.update()
        xy = self.view.screen_positions()[path][token]
        QToolTip.showText(self.view.mapToGlobal(QPointF(*xy).toPoint()), line, self.view)


def install(host: "WindowHost") -> TrajectoryFeature:
    """Add the Trajectory dock to the window ``host``."""
    return TrajectoryFeature(host)
