"""The window's status bar: a message that does not fit ends in "…" (the whole of it in the
tooltip) and the permanent readouts (state, rate, frame rate, model) keep their width.

Qt's own status bar draws a long temporary message cut at the first permanent widget,
mid-word and without a sign that it goes on ("…Overshoo"). Here the message is elided to
the room left of the permanent widgets, and the labels that show changing figures
(:class:`Readout`) are as wide as the widest figure they show, so a rate going from
"— tok/s" to "123.4 tok/s" neither moves the others nor is drawn cut.
"""

from __future__ import annotations

from PySide6.QtCore import QRect, QSize, Qt
from PySide6.QtGui import QPainter, QPaintEvent
from PySide6.QtWidgets import QLabel, QSizeGrip, QStatusBar, QStyle, QStyleOption, QWidget

#: Qt's own inset of the message from the bar's left end, and the gap it leaves before
#: the first permanent widget (qstatusbar.cpp's messageRect).
MESSAGE_LEFT = 6
MESSAGE_GAP = 2


class StatusBar(QStatusBar):
    """A :class:`QStatusBar` whose temporary message is elided to the room it has."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        # The whole message, for when it is elided.
        self.messageChanged.connect(self.setToolTip)

    def message_rect(self) -> QRect:
        """Where the temporary message is drawn: from the left end to the first shown
        permanent widget (or the size grip)."""
        right = self.width() - 12
        for child in self.findChildren(QWidget, options=Qt.FindChildOption.FindDirectChildrenOnly):
            if child.isVisible() and not child.isWindow():
                right = min(right, child.x() - MESSAGE_GAP)
        return QRect(MESSAGE_LEFT, 0, max(0, right - MESSAGE_LEFT), self.height())

    def shown_message(self) -> str:
        """The message as drawn: elided with "…" when it is wider than its room."""
        return self.fontMetrics().elidedText(self.currentMessage(), Qt.TextElideMode.ElideRight,
                                             self.message_rect().width())

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802 (Qt's name)
        """Qt's painting (the panel, the permanent widgets' frames) with the message elided."""
        if not self.currentMessage():
            super().paintEvent(event)
            return
        painter = QPainter(self)
        style = self.style()
        option = QStyleOption()
        option.initFrom(self)
        style.drawPrimitive(QStyle.PrimitiveElement.PE_PanelStatusBar, option, painter, self)
        for child in self.findChildren(QWidget, options=Qt.FindChildOption.FindDirectChildrenOnly):
            if child.isVisible() and not isinstance(child, QSizeGrip) and not child.isWindow():
                frame = QStyleOption()
                frame.rect = child.geometry().adjusted(-2, -1, 2, 1)
                frame.palette = self.palette()
                style.drawPrimitive(QStyle.PrimitiveElement.PE_FrameStatusBarItem, frame, painter,
                                    child)
        painter.setPen(self.palette().windowText().color())
        painter.drawText(self.message_rect(), Qt.AlignmentFlag.AlignLeading
                         | Qt.AlignmentFlag.AlignVCenter | Qt.TextFlag.TextSingleLine,
                         self.shown_message())
        painter.end()


class Readout(QLabel):
    """A status-bar label as wide as the widest text it shows (``widest``), in whatever font
    and style it has: its figure changes several times a second and never needs more room
    than it was given, so it is never drawn cut while the bar waits to lay out again."""

    def __init__(self, text: str, widest: tuple[str, ...] = ()) -> None:
        super().__init__(text)
        self.widest = widest

    def set_widest(self, *texts: str) -> None:
        """The widest texts the label will show."""
        self.widest = texts
        self.updateGeometry()

    def text_width(self, text: str) -> int:
        """How wide QLabel lays ``text`` out (its text rectangle, as its size hint measures
        it), in this label's font and alignment."""
        flags = int(self.alignment().value) | int(Qt.TextFlag.TextExpandTabs.value)
        return self.fontMetrics().boundingRect(0, 0, 2000, 2000, flags, text).width()

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        """QLabel's hint for its text, widened to the widest of :attr:`widest`.

        The widening is measured as QLabel measures its text: a text's advance is a pixel
        off its laid-out width for some figures, and the label grew or shrank by that pixel
        as its figure changed, moving the readouts beside it.
        """
        hint = super().sizeHint()
        extra = max((self.text_width(t) for t in self.widest), default=0) \
            - self.text_width(self.text())
        return QSize(hint.width() + max(0, extra), hint.height())

    def minimumSizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        """As wide as :meth:`sizeHint`: the bar never squeezes a figure."""
        return QSize(self.sizeHint().width(), super().minimumSizeHint().height())
