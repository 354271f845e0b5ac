"""The mouse wheel over a dock scrolls the dock, not a value box the user has not chosen.

Qt gives the wheel to the spin box, combo box or slider under the pointer, so scrolling a
long dock (the Stimulus dock of the spiking brain) changed whatever value passed under the
pointer. A box the user has clicked into (it has the keyboard focus) still takes the wheel.

Only an application event filter sees a wheel event before the box under the pointer does,
and such a filter is called (in Python) for every event of every widget: it made a window
half again as slow to build and show, and every repaint of a running brain paid it. So the
guard filters the whole application only while the pointer is over one of the window's docks
(between the dock's Enter and Leave events, which Qt sends to a dock whatever child of it the
pointer is over); elsewhere it watches the docks alone.
"""

from __future__ import annotations

import weakref

from PySide6.QtCore import QEvent, QObject
from PySide6.QtWidgets import (QAbstractScrollArea, QAbstractSlider, QAbstractSpinBox,
                               QApplication, QComboBox, QDockWidget, QScrollBar, QWidget)

#: The value widgets the wheel changes.
VALUE_WIDGETS = (QAbstractSpinBox, QComboBox, QAbstractSlider)


def _scroll_area_of(widget: QWidget, stop: QWidget) -> QAbstractScrollArea | None:
    parent = widget.parentWidget()
    while parent is not None and parent is not stop:
        if isinstance(parent, QAbstractScrollArea) and parent.verticalScrollBar().maximum() > 0:
            return parent
        parent = parent.parentWidget()
    return None


class DockWheelGuard(QObject):
    """A wheel turned over an unfocused value widget inside one of ``window``'s docks (floating
    or not) scrolls the scroll area around it instead (none around it: as Qt does).

    It watches the docks given to :meth:`watch` and filters the application's events only
    while the pointer is over one of them (:attr:`app_wide`).
    """

    def __init__(self, window: QWidget) -> None:
        super().__init__(window)  # goes with the window
        self._docks: weakref.WeakSet[QWidget] = weakref.WeakSet()
        self._under_pointer: weakref.WeakSet[QWidget] = weakref.WeakSet()
        self._app_wide = False
        self._released = False

    @property
    def app_wide(self) -> bool:
        """Whether the guard is filtering every event of the application now (the pointer is
        over a watched dock)."""
        return self._app_wide

    def watch(self, dock: QWidget) -> None:
        """Guard the value widgets inside ``dock`` (whatever is added to it later too)."""
        if dock not in self._docks:
            self._docks.add(dock)
            dock.installEventFilter(self)

    def _set_app_wide(self, on: bool) -> None:
        app = QApplication.instance()
        on = on and not self._released
        if on == self._app_wide or app is None:
            return
        if on:
            app.installEventFilter(self)
        else:
            app.removeEventFilter(self)
        self._app_wide = on

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt's name)
        kind = event.type()
        if kind in (QEvent.Type.Enter, QEvent.Type.Leave, QEvent.Type.Hide):
            if isinstance(watched, QDockWidget) and watched in self._docks:
                if kind == QEvent.Type.Enter:
                    self._under_pointer.add(watched)
                else:
                    self._under_pointer.discard(watched)
                self._set_app_wide(len(self._under_pointer) > 0)
            return False
        if kind != QEvent.Type.Wheel or not isinstance(watched, VALUE_WIDGETS) \
                or isinstance(watched, QScrollBar):
            return False
        dock = None if watched.hasFocus() else self._dock_of(watched)
        if dock is None:
            return False
        area = _scroll_area_of(watched, dock)
        if area is None:
            return False
        QApplication.sendEvent(area.verticalScrollBar(), event)
        return True

    def _dock_of(self, widget: QWidget) -> QWidget | None:
        """The watched dock ``widget`` is in, floating or not (a floating dock is a window of
        its own: the main window is no longer its ancestor), or ``None``."""
        parent = widget.parentWidget()
        while parent is not None:
            if isinstance(parent, QDockWidget) and parent in self._docks:
                return parent
            parent = parent.parentWidget()
        return None

    def release(self) -> None:
        """Stop filtering the application for good (the window is closing)."""
        self._released = True
        self._under_pointer.clear()
        self._set_app_wide(False)
