"""Where things go in the window: docks, their default sizes, and a window that fits the screen.

A new dock is one :func:`add_dock` call; it gets its View-menu toggle and is
part of the saved layout. The window's first size is the preferred size or the
screen's available area, whichever is smaller, and a saved size is used again
only while it still fits the screen it would open on.
"""

from __future__ import annotations

from PySide6.QtCore import QByteArray, QEvent, QObject, QRect, QSettings, QSize, Qt
from PySide6.QtGui import QGuiApplication, QResizeEvent
from PySide6.QtWidgets import QDockWidget, QFrame, QMainWindow, QScrollArea, QWidget

#: Size of the window on first start when the screen has room for it.
PREFERRED_SIZE = QSize(1440, 900)

#: Room left around a fitted window for its frame and title bar, which the
#: window manager adds outside the window's own geometry.
FRAME_ROOM = QSize(16, 48)


def add_dock(window: QMainWindow, docks: dict[str, QDockWidget], key: str, title: str,
             widget: QWidget, area: Qt.DockWidgetArea, scroll: bool = False) -> QDockWidget:
    """Put ``widget`` in a new dock named ``key`` (its object name is ``dock_<key>``).

    ``scroll`` wraps a tall form in a scroll area, so the dock can be shorter
    than the form and the window still fits a small screen.
    """
    if key in docks:
        raise ValueError(f"a dock named {key!r} already exists")
    dock = QDockWidget(title, window)
    dock.setObjectName(f"dock_{key}")
    dock.setWidget(scrolling(widget) if scroll else widget)
    window.addDockWidget(area, dock)
    docks[key] = dock
    return dock


def scrolling(widget: QWidget) -> QScrollArea:
    """``widget`` in a frameless vertical scroll area that keeps its width."""
    return FittingScrollArea(widget)


class FittingScrollArea(QScrollArea):
    """A vertical scroll area that scrolls only when the viewport is shorter than the
    content's *minimum* height.

    Qt's resizable scroll area takes the content's size hint as its minimum as soon
    as a word-wrapped label makes the layout height-for-width, so a form with a list
    (whose size hint is 192 px) scrolled in a dock that had room for it at its
    minimum, and buttons below the list were out of sight. Here the content is as
    wide as the viewport and as tall as the viewport or its minimum, whichever is more.
    """

    def __init__(self, widget: QWidget, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setFrameShape(QFrame.Shape.NoFrame)
        # No Tab stop of its own: focused, it showed no mark and its arrow keys stepped the
        # run (the window's shortcuts), one blank press per dock. Tab still scrolls it: the
        # control Tab reaches inside is scrolled into sight (QScrollArea's own doing).
        self.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.setWidgetResizable(False)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
        self.setWidget(widget)
        self.setMinimumWidth(widget.minimumSizeHint().width() + 16)
        widget.installEventFilter(self)
        self._fitting = False

    def minimum_content_height(self, width: int) -> int:
        """The content's smallest height at ``width`` (wrapped labels take more rows)."""
        widget = self.widget()
        if widget is None:
            return 0
        layout = widget.layout()
        height = widget.minimumSizeHint().height()
        if layout is not None and layout.hasHeightForWidth():
            height = max(height, layout.totalMinimumHeightForWidth(width))
        return max(height, widget.minimumHeight())

    def fit(self) -> None:
        """Size the content to the viewport (or to its minimum, and scroll)."""
        widget = self.widget()
        if widget is None or self._fitting:
            return
        self._fitting = True
        try:
            room = self.maximumViewportSize()
            width = room.width()
            height = self.minimum_content_height(width)
            if height > room.height():       # a scroll bar will take part of the width
                width = max(1, width - self.verticalScrollBar().sizeHint().width())
                height = self.minimum_content_height(width)
            widget.resize(width, max(height, room.height()))
        finally:
            self._fitting = False

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt API
        # As a resizable scroll area's: from the content's size hint, not its current size
        # (which is whatever the last fit made it, or Qt's 640 x 480 before the first).
        widget = self.widget()
        line = self.fontMetrics().height()
        frame = 2 * self.frameWidth()
        size = widget.sizeHint() if widget is not None else QSize(12 * line, 8 * line)
        return (size + QSize(frame, frame)).boundedTo(QSize(36 * line, 24 * line))

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt API
        super().resizeEvent(event)
        self.fit()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt API
        if watched is self.widget() and event.type() == QEvent.Type.LayoutRequest:
            self.fit()
        return super().eventFilter(watched, event)


def available_area(window: QWidget) -> QRect | None:
    """Available geometry (without panels and task bars) of the screen ``window`` is on."""
    screen = window.screen() if window.windowHandle() is not None else None
    screen = screen or QGuiApplication.screenAt(window.geometry().center()) \
        or QGuiApplication.primaryScreen()
    return None if screen is None else screen.availableGeometry()


def fitted_rect(available: QRect, preferred: QSize = PREFERRED_SIZE,
                minimum: QSize | None = None) -> QRect:
    """The window's rectangle: ``preferred``, shrunk to fit ``available``, centred on it.

    ``minimum`` (the window's smallest usable size) wins over the screen when the
    screen is smaller still; the window then starts at the screen's top left.
    """
    room = QSize(max(1, available.width() - FRAME_ROOM.width()),
                 max(1, available.height() - FRAME_ROOM.height()))
    size = preferred.boundedTo(room)
    if minimum is not None:
        size = size.expandedTo(minimum)
    x = available.x() + max(0, (available.width() - size.width()) // 2)
    y = available.y() + max(0, (available.height() - FRAME_ROOM.height() - size.height()) // 2)
    return QRect(x, y, size.width(), size.height())


def fits(rect: QRect, available: QRect) -> bool:
    """True when ``rect`` lies wholly inside ``available``."""
    return available.contains(rect)


def place_window(window: QMainWindow, settings: QSettings) -> None:
    """Restore the saved geometry if it fits the screen; else fit the window to the screen."""
    saved = settings.value("window/geometry")
    layout = window.layout()
    if layout is not None:
        # The minimum size Qt last took from the layout may be from before the docks were
        # tabbed (side by side: wider than a laptop); restoreGeometry would widen to it.
        layout.invalidate()
        layout.activate()
    if isinstance(saved, (bytes, bytearray, QByteArray)) and window.restoreGeometry(saved):
        area = available_area(window)
        if area is None or fits(window.geometry(), area):
            return
    fit_to_screen(window)


def fit_to_screen(window: QMainWindow, preferred: QSize = PREFERRED_SIZE) -> None:
    """Give ``window`` its first-start size and place it on the available screen area."""
    area = available_area(window)
    if area is None:
        window.resize(preferred)
        return
    window.setGeometry(fitted_rect(area, preferred, window.minimumSizeHint()))


def keep_on_screen(window: QMainWindow) -> None:
    """Once shown (frame known): shrink and move the window so its frame is on the screen."""
    area = available_area(window)
    if area is None or window.isMaximized() or window.isFullScreen():
        return
    frame = window.frameGeometry()
    if fits(frame, area):
        return
    extra_w = frame.width() - window.width()
    extra_h = frame.height() - window.height()
    width = min(window.width(), area.width() - extra_w)
    height = min(window.height(), area.height() - extra_h)
    window.resize(max(width, window.minimumWidth()), max(height, window.minimumHeight()))
    frame = window.frameGeometry()
    x = min(max(frame.x(), area.x()), area.right() + 1 - frame.width())
    y = min(max(frame.y(), area.y()), area.bottom() + 1 - frame.height())
    window.move(max(x, area.x()), max(y, area.y()))
