"""The window's docks by key, as a feature uses them (:class:`Docks`: add one, put it beside
another, show it); the window that holds them is :class:`DockWindow` to them (in the app,
:class:`~flyviz.app.window.window_features.FeatureWindow`)."""

from __future__ import annotations

from typing import Protocol

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QDockWidget, QMainWindow, QScrollArea, QTabBar, QWidget

__all__ = ["FIT_HEIGHT", "DockWindow", "Docks", "fit_height", "hide_stale_tab_bars"]

#: A dock's property (``dock.setProperty(FIT_HEIGHT, True)``): the layouts make it as tall as
#: its content asks (:func:`fit_height`) when they arrange the window.
FIT_HEIGHT = "flyvizFitHeight"

#: The most of the window's height :func:`fit_height` gives a dock.
FIT_MOST = 0.5


class Resizing(Protocol):
    """What :func:`fit_height` needs of a window: Qt's ``resizeDocks`` and ``height``."""

    def resizeDocks(self, docks: list[QDockWidget], sizes: list[int],  # noqa: N802
                    orientation: Qt.Orientation, /) -> None:
        """Qt's: resize ``docks`` to ``sizes`` along ``orientation``."""

    def height(self) -> int:
        """Qt's: the window's height in pixels."""


class DockWindow(Protocol):
    """What :class:`Docks` needs of the window its docks live in (a ``QMainWindow``
    that adds docks its own way)."""

    def add_dock(self, key: str, title: str, widget: QWidget, area: Qt.DockWidgetArea,
                 scroll: bool = False) -> QDockWidget:
        """Put ``widget`` in a new dock ``key`` (listed in View)."""

    def tabifyDockWidget(self, first: QDockWidget, second: QDockWidget, /) -> None:  # noqa: N802
        """Qt's: put ``second`` in a tab beside ``first``."""

    def resizeDocks(self, docks: list[QDockWidget], sizes: list[int],  # noqa: N802
                    orientation: Qt.Orientation, /) -> None:
        """Qt's: resize ``docks`` to ``sizes`` along ``orientation``."""

    def height(self) -> int:
        """Qt's: the window's height in pixels."""

    def closed_by_user(self, key: str) -> bool:
        """True when the user closed dock ``key`` (and has not opened it again)."""

    def gives_size_back(self, key: str) -> bool:
        """True when dock ``key``, shown again, is given back the size it had when it was
        put away (in this session or the last)."""


class Docks(dict[str, QDockWidget]):
    """The window's docks by key, and what a feature does with docks: add one, put it in a
    tab beside another, show it (or show its model's docks as the model opens, unless the
    user closed them).

    Parameters
    ----------
    window
        The window the docks live in.
    """

    def __init__(self, window: "DockWindow") -> None:
        super().__init__()
        self._window = window

    def add(self, key: str, title: str, widget: QWidget, area: Qt.DockWidgetArea,
            scroll: bool = False) -> QDockWidget:
        """A new dock ``key`` holding ``widget`` (listed in View)."""
        return self._window.add_dock(key, title, widget, area, scroll)

    def tabify(self, beside: str, dock: QDockWidget, keep_front: bool = True) -> None:
        """Put ``dock`` in a tab beside the dock ``beside`` (which stays in front if
        ``keep_front``)."""
        self._window.tabifyDockWidget(self[beside], dock)
        if keep_front:
            self[beside].raise_()

    def show(self, dock: QDockWidget, height_fraction: float | None = None) -> None:
        """Show ``dock`` in front, as tall as ``height_fraction`` of the window if given."""
        dock.show()
        dock.raise_()
        if height_fraction is not None:
            window = self._window
            window.resizeDocks([dock], [int(window.height() * height_fraction)],
                               Qt.Orientation.Vertical)

    def show_unless_closed(self, key: str, front: bool = True) -> bool:
        """Show dock ``key`` (in front where ``front``), as a feature shows its docks when
        its model opens, unless the user closed it: a dock the user closed stays closed until
        they open it (View), whatever opens. True when it is shown."""
        if self._window.closed_by_user(key):
            return False
        dock = self[key]
        dock.show()
        if front:
            dock.raise_()
        return True

    def gives_size_back(self, key: str) -> bool:
        """True when dock ``key`` had a place in the window before, which it gets back as it
        is shown again (its kind's docks were put away, in this session or the last): a
        feature that sizes its dock as it first appears (:meth:`widen`) leaves that one
        alone, since the user may have made it so."""
        return self._window.gives_size_back(key)

    def widen(self, dock: QDockWidget, share: float) -> None:
        """Make ``dock`` at least ``share`` of the width of its row of docks (those shown
        beside it, across the same span); the others share the rest as they share it now.
        A wider dock is left as it is: the user made it so."""
        row = [other for other in self.values() if other.isVisible() and not other.isFloating()
               and (other.geometry().top(), other.geometry().bottom())
               == (dock.geometry().top(), dock.geometry().bottom())]
        if dock not in row or len(row) < 2:
            return
        total = sum(other.width() for other in row)
        wanted = int(total * share)
        if dock.width() >= wanted - 1:
            return
        others = [other for other in row if other is not dock]
        had = sum(other.width() for other in others)
        widths = [wanted if other is dock else other.width() * (total - wanted) // max(had, 1)
                  for other in row]
        self._window.resizeDocks(row, widths, Qt.Orientation.Horizontal)

    def fit(self, dock: QDockWidget) -> None:
        """Make ``dock`` as tall as its content asks, now and whenever a layout preset
        arranges the window (:func:`fit_height`, :data:`FIT_HEIGHT`)."""
        dock.setProperty(FIT_HEIGHT, True)
        fit_height(self._window, dock)


def fit_height(window: Resizing, dock: QDockWidget, most: float = FIT_MOST,
               tries: int = 3) -> None:
    """Resize ``dock`` to the height its content asks at its width (inside a scroll area too;
    a wrapped label's lines counted), at most ``most`` of the window's: a form stacked under
    a taller dock opened at the column's default share, its lower rows out of sight.

    Qt applies ``resizeDocks`` in the window's next layout pass and gives the dock only part
    of a change: so the dock is measured again after each pass and asked for what it still
    lacks, ``tries`` times at most."""
    widget = dock.widget()
    if widget is None or not dock.isVisible() or dock.isFloating():
        return
    inner: QWidget = widget
    shown = widget.height()
    if isinstance(widget, QScrollArea) and widget.widget() is not None:
        inner = widget.widget()  # type: ignore[assignment]  # not None: tested
        shown = widget.viewport().height()
    width = max(inner.width(), inner.minimumSizeHint().width())
    needed = inner.heightForWidth(width) if inner.hasHeightForWidth() else -1
    needed = max(needed, inner.sizeHint().height(), inner.minimumSizeHint().height())
    most_px = int(window.height() * most)
    lacking = needed - shown
    if lacking <= 0 or dock.height() >= most_px:
        return
    # Qt shares a change in a column between its docks: about three quarters of what is
    # asked reaches this one, so it is asked for half as much again. A dock in the top or
    # bottom row sets the row's height, all of the change its own (asked for more, the
    # Spiking populations dock took the most, half the window).
    in_row = isinstance(window, QMainWindow) and window.dockWidgetArea(dock) in (
        Qt.DockWidgetArea.TopDockWidgetArea, Qt.DockWidgetArea.BottomDockWidgetArea)
    asked = lacking if in_row else (3 * lacking + 1) // 2 + 2
    window.resizeDocks([dock], [min(dock.height() + asked, most_px)], Qt.Orientation.Vertical)
    if tries > 1:
        # With the dock as context: a dock gone with its window by then is not touched.
        QTimer.singleShot(0, dock, lambda: fit_height(window, dock, most, tries - 1))


def hide_stale_tab_bars(window: QMainWindow) -> None:
    """Hide every dock tab bar of ``window`` and ask for a layout pass, which shows again
    the bars of the tab groups it arranges, each in its place.

    Qt leaves the tab bar of a tab group drawn where it was when the group goes (its docks
    hidden for another kind of model, or an arrangement replaced by ``restoreState``) while
    something pumps events itself, as a progress loop or a screenshot does: a "Traces |
    Trajectory" bar stayed over the top of the docks shown in its place until the user
    resized the window.
    """
    for bar in window.findChildren(QTabBar, options=Qt.FindChildOption.FindDirectChildrenOnly):
        bar.hide()
    layout = window.layout()
    if layout is not None:
        layout.invalidate()
