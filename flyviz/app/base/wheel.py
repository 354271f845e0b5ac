"""The mouse wheel over a dock scrolls the dock, not a value box the user has not chosen.

Qt gives the wheel to the spin box, combo box or slider under the pointer, so scrolling a
long dock (the Stimulus dock of the spiking brain) changed whatever value passed under the
pointer. A box the user has clicked into (it has the keyboard focus) still takes the wheel.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject
from PySide6.QtWidgets import (QAbstractScrollArea, QAbstractSlider, QAbstractSpinBox,
                               QApplication, QComboBox, QScrollBar, QWidget)

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
    """An application event filter: a wheel turned over an unfocused value widget inside
    ``window`` scrolls the scroll area around it instead (none around it: as Qt does)."""

    def __init__(self, window: QWidget) -> None:
        super().__init__(window)
        self.window = window

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt's name)
        if event.type() != QEvent.Type.Wheel or not isinstance(watched, VALUE_WIDGETS) \
                or isinstance(watched, QScrollBar):
            return False
        if watched.hasFocus() or not self.window.isAncestorOf(watched):
            return False
        area = _scroll_area_of(watched, self.window)
        if area is None:
            return False
        QApplication.sendEvent(area.verticalScrollBar(), event)
        return True


def guard_dock_wheels(window: QWidget) -> DockWheelGuard:
    """Install a :class:`DockWheelGuard` for ``window`` (removed with the window)."""
    guard = DockWheelGuard(window)
    app = QApplication.instance()
    if app is not None:
        app.installEventFilter(guard)
    return guard
