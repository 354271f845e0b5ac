"""The brain view's overlays in a short view (the analysis layout at 1280×800): the anatomy
note at the top left and the colour scale's caption (after Why?, "flow (units of L)") and top value at the right do not
overlap, and the note is shown whole (wrapped to the room it has)."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QSize, Qt
from qt_barriers import settle
from test_app_why import _run, _why

pytestmark = pytest.mark.gui

#: The demo brain's note, the longest the window writes there.
DEMO_NOTE = "synthetic soma positions: 44,370 of 49,393 neurons placed; 5,023 hidden"


def test_the_note_and_the_colour_scale_labels_do_not_overlap_in_a_short_view(window, qtbot,
                                                                               dark_theme):
    win = window
    brain = win.brain
    _run(win, qtbot)
    _why(win, qtbot)                   # the flows' caption, "flow (units of L)", the longest
    assert brain.colorbar_caption.text() == "flow (units of L)"
    brain.note.setText(DEMO_NOTE)
    win.layouts.apply("analysis")
    win.resize(1280, 800)
    qtbot.waitUntil(lambda: win.size() == QSize(1280, 800), timeout=3000)
    settle(qtbot, win)
    assert brain.height() < 300, "the analysis layout's brain view should be short"
    note = brain.note
    for label in (brain.colorbar_caption, brain.colorbar_high):
        assert label.isVisible() and label.text()
        assert not note.geometry().intersects(label.geometry()), \
            f"the note {note.geometry()} runs under {label.text()!r} at {label.geometry()}"
    # The note's text is all shown: on one line, or wrapped into lines its height holds.
    if note.wordWrap():
        assert note.height() >= note.heightForWidth(note.width())
    else:
        assert note.width() >= note.fontMetrics().horizontalAdvance(DEMO_NOTE)
    assert note.geometry().right() < brain.width()


def test_in_a_narrow_view_the_note_and_the_view_hint_wrap_instead_of_being_cut(window, qtbot):
    """Side columns widened by hand left the view about 290 px wide, and its captions read
    "...49,393 r" and "...shif", cut at its right edge."""
    win = window
    brain = win.brain
    brain.note.setText(DEMO_NOTE)
    win.resizeDocks([win.docks["controls"]], [420], Qt.Orientation.Horizontal)
    win.resizeDocks([win.docks["text"]], [520], Qt.Orientation.Horizontal)
    settle(qtbot, win)
    assert brain.width() < 320, brain.width()
    for label in (brain.note, brain.view_label):
        assert label.text() and label.isVisible()
        assert 0 <= label.geometry().left() and label.geometry().right() < brain.width(), \
            (label.text(), label.geometry(), brain.width())
        if label.wordWrap():
            assert label.height() >= label.heightForWidth(label.width())
        else:
            assert label.width() >= label.fontMetrics().horizontalAdvance(label.text())
    assert brain.note.wordWrap() and brain.view_label.wordWrap()     # each too long for a line
    assert brain.view_label.geometry().bottom() < brain.height()
