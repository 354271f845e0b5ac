"""The user at the app's save dialogs, for the tests of what they write and ask
(:class:`DialogAnswers`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtWidgets import QFileDialog, QMessageBox


class DialogAnswers:
    """Qt's save dialog and the app's "replace it?" question answered as a user would.

    Parameters
    ----------
    monkeypatch
        The test's; both dialogs are put back after the test.
    chosen, selected_filter
        The file name chosen in the save dialog (as typed: maybe without its suffix) and
        the filter chosen with it; ``None``: the save dialog is not stubbed.
    replace
        The answer to every question whether to replace a file (set it between calls).

    Attributes
    ----------
    asked
        The questions' texts, in the order asked.
    """

    def __init__(self, monkeypatch: Any, chosen: str | Path | None = None,
                 selected_filter: str = "", replace: bool = False) -> None:
        self.asked: list[str] = []
        self.replace = replace
        self.chosen = chosen
        self.selected_filter = selected_filter
        monkeypatch.setattr(QMessageBox, "question", self._question)
        if chosen is not None:
            monkeypatch.setattr(QFileDialog, "getSaveFileName", self._save_file_name)

    def _question(self, parent, title, text, *args) -> QMessageBox.StandardButton:
        self.asked.append(text)
        return QMessageBox.StandardButton.Yes if self.replace else QMessageBox.StandardButton.No

    def _save_file_name(self, *args, **kwargs) -> tuple[str, str]:
        return str(self.chosen), self.selected_filter
