"""Asking where to save, and asking before a file is replaced: the one rule of every save
dialog of the app (File → Save recording, Share as web page, Save screenshot, Export movie;
the Why? dock's Export movie, the Circuit dock's Export graph and Export interventions).

Qt's save dialog asks whether to replace a file, but about the name the user typed: ``run``.
Each writer then adds its suffix and writes ``run.flyrec``, ``run.html``, ``run.png`` or
``run.mp4``, another file, which it would replace without a word (a recording may be the only
copy of a run). :func:`ask_save_path` asks the same question about the file actually
written; :func:`ask_to_replace` is the question itself, for a name typed into a form with no
file dialog at all (Export movie's "Save to"). A dialog offering several formats (the Why?
dock's movie, Export movie's Browse…) gives the name the suffix of the filter chosen, unless
it names a format of its own: :func:`ask_save_path_as`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from PySide6.QtWidgets import QFileDialog, QMessageBox, QWidget


def add_suffix(path: str | Path, suffix: str) -> Path:
    """``path`` with ``suffix`` added when its name does not end in it (in any case):
    ``run`` → ``run.png``, ``run.PNG`` stays, ``run.v2`` → ``run.v2.png``."""
    path = Path(path)
    return path if path.name.lower().endswith(suffix.lower()) else \
        path.with_name(path.name + suffix)


def ask_to_replace(parent: QWidget | None, title: str, path: str | Path,
                   question: str | None = None) -> bool:
    """Ask whether to replace ``path``, in the words of Qt's own save dialog; True for yes.
    No is the default: Enter pressed by habit keeps the file.

    Parameters
    ----------
    question
        Other words than "NAME already exists. Do you want to replace it?" (a folder's
        earlier frames).
    """
    text = question or f"{Path(path).name} already exists.\nDo you want to replace it?"
    answer = QMessageBox.question(
        parent, title, text,
        QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
        QMessageBox.StandardButton.No)
    return answer == QMessageBox.StandardButton.Yes


def filter_suffix(selected: str) -> str | None:
    """The suffix a save dialog's filter names first: ``".webm"`` for ``"WebM (*.webm)"``;
    ``None`` for a filter naming none (``"All files (*)"``, or ``""`` where no filter came
    back)."""
    match = re.search(r"\*(\.[^\s;()*]+)", selected)
    return match.group(1) if match else None


def ask_save_path(parent: QWidget | None, title: str, start: str | Path, filters: str,
                  written: Callable[[Path], Path]) -> Path | None:
    """Ask where to save (Qt's save dialog), and return the file that will be written.

    Parameters
    ----------
    parent, title, start, filters
        As :meth:`QFileDialog.getSaveFileName` takes them.
    written
        The file the writer writes for a name chosen: the very function it applies (it
        adds its suffix), so that the question is about that file.

    Returns
    -------
    pathlib.Path or None
        ``written(chosen)``; ``None`` when the dialog is cancelled, or when that file is
        not the name chosen (its suffix was added), exists, and the user does not want it
        replaced. The dialog itself asked about the name chosen; nothing asks twice.
    """
    return ask_save_path_as(parent, title, start, filters,
                            lambda chosen, _selected: written(chosen))


def ask_save_path_as(parent: QWidget | None, title: str, start: str | Path, filters: str,
                     written: Callable[[Path, str], Path]) -> Path | None:
    """:func:`ask_save_path` for a dialog whose filters are formats to choose from: the file
    written depends on the filter chosen too.

    Parameters
    ----------
    written
        ``written(chosen, selected_filter)``: the file written for the name chosen with
        that filter selected (``"GIF (*.gif)"``; ``""`` where the dialog says none); see
        :func:`filter_suffix`.

    Returns
    -------
    pathlib.Path or None
        As :func:`ask_save_path` returns.
    """
    chosen, selected = QFileDialog.getSaveFileName(parent, title, str(start), filters)
    if not chosen:
        return None
    target = written(Path(chosen), selected or "")
    # A folder of that name is no file to replace: the writer refuses it, in its own words.
    if target != Path(chosen) and target.exists() and not target.is_dir() \
            and not ask_to_replace(parent, title, target):
        return None
    return target


def movie_file(chosen: Path, selected_filter: str = "", default: str = ".mp4") -> Path:
    """The movie a dialog offering movies writes for a name chosen in it (the ``written`` of
    :func:`ask_save_path_as`): the name as it is when it ends in a movie's suffix
    (``why.webm``, ``why.M4V``), else with the movie suffix the chosen filter names first,
    ``default`` where it names none: ``why`` → ``why.mp4``, never the folder of PNG frames
    the export makes of a name without one (the dialogs offer movies only)."""
    from flyviz.export.options import MOVIE_EXTENSIONS    # the export loads when it is used

    if chosen.suffix.lower() in MOVIE_EXTENSIONS:
        return chosen
    offered = filter_suffix(selected_filter)
    if offered is None or offered.lower() not in MOVIE_EXTENSIONS:
        offered = default
    return add_suffix(chosen, offered)


__all__ = ["add_suffix", "ask_save_path", "ask_save_path_as", "ask_to_replace",
           "filter_suffix", "movie_file"]
