"""The window's docks by key, as a feature uses them (:class:`Docks`: add one, put it beside
another, show it); the window that holds them is :class:`DockWindow` to them (in the app,
:class:`~flyviz.app.window.window_features.FeatureWindow`)."""

from __future__ import annotations

from typing import Protocol

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDockWidget, QWidget

__all__ = ["DockWindow", "Docks"]


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


class Docks(dict[str, QDockWidget]):
    """The window's docks by key, and what a feature does with docks: add one, put it in a
    tab beside another, show it.

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
