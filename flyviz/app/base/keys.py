"""The window's one-key shortcuts give way to the focused control that needs that key.

The window has shortcuts on bare keys (Space plays, ←/→ step, Home/End go to the first and
newest token, M, O, W, 1/2/3), so that they work wherever the keyboard is. Qt asks the
focused widget first (a ``ShortcutOverride`` event) and only a text field says it wants
the key: a button or check box given Space, a slider or tab bar given ← or →, a list
given Home or a letter, a result's text selectable from the keyboard given an arrow, all
lost the key to the window's shortcut. Tabbing to a dock's
button and pressing Space played the run instead of pressing the button; a keyboard user
could press no button and tick no box. :class:`KeyGuard` answers for those controls.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import (QAbstractButton, QAbstractItemView, QAbstractSlider,
                               QApplication, QComboBox, QDockWidget, QLabel, QTabBar,
                               QWidget)

K = Qt.Key

#: The property that leaves a control's keys to the window (:meth:`KeyGuard.leave`).
WINDOW_KEYS = "flyvizWindowKeys"

#: Keys that move within a control (a slider, a tab bar, a list).
MOVING = frozenset({K.Key_Left, K.Key_Right, K.Key_Up, K.Key_Down, K.Key_Home, K.Key_End,
                    K.Key_PageUp, K.Key_PageDown})


def takes_key(widget: QWidget, event: QKeyEvent) -> bool:
    """Whether ``widget``, focused, acts on the key of ``event`` itself.

    Only keys with no modifier but Shift are answered for (Ctrl+…, Alt+… shortcuts stay
    the window's); Esc always stays the window's (it stops a run).
    """
    extra = event.modifiers() & ~(Qt.KeyboardModifier.ShiftModifier
                                  | Qt.KeyboardModifier.KeypadModifier)
    if extra or not widget.isEnabled() or widget.property(WINDOW_KEYS):
        return False
    key = event.key()
    if isinstance(widget, QAbstractButton):
        return key == K.Key_Space                 # press the button, tick the box
    if isinstance(widget, (QAbstractSlider, QTabBar)):
        return key in MOVING
    printable = bool(event.text()) and event.text().isprintable()
    if isinstance(widget, QAbstractItemView):
        # Move through the rows, select with Space, type a row's first letters.
        return key in MOVING or printable
    if isinstance(widget, QComboBox) and not widget.isEditable():
        return key in MOVING or printable     # Space opens the list, letters pick an item
    if isinstance(widget, QLabel) and \
            widget.textInteractionFlags() & Qt.TextInteractionFlag.TextSelectableByKeyboard:
        return key in MOVING                  # move in a result's text, Shift selects
    return False


class KeyGuard(QObject):
    """Lets the focused control of ``window`` keep the keys it acts on (see the module).

    It watches the focused widget only (one event filter, moved as the focus moves), so
    the events of the rest of the window do not pass through Python.

    Parameters
    ----------
    window
        The top-level window whose controls are guarded.
    """

    def __init__(self, window: QWidget) -> None:
        super().__init__(window)
        self.window = window
        self._watched: QWidget | None = None
        app = QApplication.instance()
        if isinstance(app, QApplication):
            app.focusChanged.connect(self._focus_changed)
            self._focus_changed(None, QApplication.focusWidget())

    @staticmethod
    def leave(widget: QWidget) -> None:
        """Leave ``widget``'s keys to the window's shortcuts: a control whose keys mean what
        the shortcuts do, and less (the timeline's slider: → there stops at the newest
        token, the shortcut steps the model on)."""
        widget.setProperty(WINDOW_KEYS, True)

    def _focus_changed(self, _old: QWidget | None, new: QWidget | None) -> None:
        if self._watched is not None:
            try:
                self._watched.removeEventFilter(self)
            except RuntimeError:            # the widget is already deleted
                pass
            self._watched = None
        if new is not None and self._inside(new):
            new.installEventFilter(self)
            self._watched = new

    def _inside(self, widget: QWidget) -> bool:
        """Whether ``widget`` is in the window or in one of its docks, floating ones too
        (a floating dock is a window of its own, but the window's shortcuts act in it)."""
        current: QWidget | None = widget
        while current is not None:
            if current is self.window:
                return True
            if current.isWindow() and not isinstance(current, QDockWidget):
                return False            # a dialog: the window's shortcuts do not act there
            current = current.parentWidget()
        return False

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt API
        if event.type() == QEvent.Type.ShortcutOverride and isinstance(event, QKeyEvent) \
                and isinstance(watched, QWidget) and takes_key(watched, event):
            # Accepted, the key goes to the control as a key press, not to the shortcut.
            event.accept()
            return True
        return False
