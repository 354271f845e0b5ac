"""A label of a fixed number of lines that never grows its form: each line that does not fit
ends in "…", the whole text in the tooltip (:class:`ElidedLines`)."""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QPainter, QPaintEvent
from PySide6.QtWidgets import QLabel, QSizePolicy, QWidget

__all__ = ["ElidedLines"]


class ElidedLines(QLabel):
    """A :class:`QLabel` that draws each line of its text on one line, elided to its width.

    A word-wrapped label grows its form by a line whenever a line of its text outgrows its
    width (a run's figures, a longer caption): a dock fitted to its form then scrolled, its
    last row cut. This one is as tall as ``lines`` lines (or its text's lines, if more), and
    as narrow as its layout makes it; :meth:`text` stays the whole text, which the tooltip
    shows where a line is cut.

    Parameters
    ----------
    text
        The text; ``\\n`` starts a line.
    lines
        The lines the label holds room for however short its text.
    """

    def __init__(self, text: str = "", lines: int = 1, parent: QWidget | None = None) -> None:
        super().__init__(text, parent)
        self._lines = lines
        # As tall as its lines, whatever room its form has.
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed)
        self._update_tip()

    @property
    def lines(self) -> int:
        """The lines the label holds room for however short its text."""
        return self._lines

    def set_lines(self, lines: int) -> None:
        """Hold room for ``lines`` lines."""
        if lines != self._lines:
            self._lines = lines
            self.updateGeometry()

    def setText(self, text: str) -> None:  # noqa: N802 - Qt API
        """Show ``text``, its lines that do not fit elided (the whole of it in the tooltip)."""
        super().setText(text)
        self.updateGeometry()
        self._update_tip()

    def resizeEvent(self, event) -> None:  # noqa: N802, ANN001 - Qt API
        super().resizeEvent(event)
        self._update_tip()

    def shown_lines(self) -> list[str]:
        """The lines as drawn: each elided with "…" where wider than the label."""
        metrics, width = self.fontMetrics(), self.contentsRect().width()
        return [metrics.elidedText(line, Qt.TextElideMode.ElideRight, width)
                for line in self.text().split("\n")]

    def _update_tip(self) -> None:
        # The whole text where a line is cut; no tooltip repeating what is read already.
        cut = self.shown_lines() != self.text().split("\n")
        self.setToolTip(self.text() if cut else "")

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt API
        lines = max(self._lines, len(self.text().split("\n")) if self.text() else 0)
        margins = self.contentsMargins()
        # No wider than its least: a long line is elided, it does not widen the dock.
        return QSize(self.fontMetrics().horizontalAdvance("…") * 4,
                     lines * self.fontMetrics().lineSpacing() + margins.top() + margins.bottom())

    def minimumSizeHint(self) -> QSize:  # noqa: N802 - Qt API
        return self.sizeHint()

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802 - Qt API
        painter = QPainter(self)
        painter.setPen(self.palette().windowText().color())
        rect, spacing = self.contentsRect(), self.fontMetrics().lineSpacing()
        for i, line in enumerate(self.shown_lines()):
            painter.drawText(rect.left(), rect.top() + i * spacing, rect.width(), spacing,
                             int(Qt.AlignmentFlag.AlignLeading | Qt.AlignmentFlag.AlignVCenter
                                 | Qt.TextFlag.TextSingleLine), line)
        painter.end()
