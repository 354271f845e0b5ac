"""The status bar at 1280×800 during a run, with a message longer than its room: the rate
and frame-rate readouts show their whole text, and the message ends in "…" before them
instead of being cut mid-word under Qt's own painting ("…Overshoo")."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QImage

pytestmark = pytest.mark.gui

LONG = ("circuit: No circuit below the whole brain is faithful: none of the 11 measured sizes has "
        "|1 - f| <= 0.1 on the task and on 90% of its prompts. Overshoots: 210% at 220 "
        "neurons, not kept. CPR 1.194, CMD 0.195; m(M) +14.19, m(empty) +1.402 (mean ablation)")


def _pixels(image: QImage) -> np.ndarray:
    image = image.convertToFormat(QImage.Format.Format_RGB888)
    rows = np.frombuffer(image.constBits(), np.uint8).reshape(image.height(),
                                                               image.bytesPerLine())
    return rows[:, :image.width() * 3].reshape(image.height(), image.width(), 3).copy()


def _whole_text_shown(label) -> bool:
    return label.contentsRect().width() >= label.fontMetrics().horizontalAdvance(label.text())


def test_a_long_message_is_elided_before_the_readouts_during_a_run(window, qtbot, dark_theme):
    win = window
    win.resize(1280, 800)
    qtbot.waitUntil(lambda: win.size() == QSize(1280, 800), timeout=3000)
    win.state.run.max_new_tokens = 400
    win.state.run.speed_cap = 20            # a run that lasts while the bar is looked at
    assert win.run_prompt("Once upon a time")
    try:
        qtbot.waitUntil(lambda: any(c.isdigit() for c in win.status_rate.text()),
                        timeout=10_000)
        bar = win.statusBar()
        bar.showMessage(LONG)
        qtbot.waitUntil(lambda: bar.currentMessage() == LONG, timeout=1000)
        readouts = (win.status_state, win.status_rate, win.status_fps, win.status_model)
        for label in readouts:
            assert label.isVisible() and _whole_text_shown(label), (label.text(), label.width())
        # A figure that grows between two ticks is whole at once, not after the bar's next
        # layout pass (the readouts are as wide as their widest figure).
        for label, wide in ((win.status_rate, "999.9 tok/s"), (win.status_fps, "99.9 fps")):
            label.setText(wide)
            assert _whole_text_shown(label), (wide, label.width())
        room = min(label.x() for label in readouts)
        # What a user reads: the message as its elided form, "…" and all, in the room left
        # of the readouts; the readouts' texts whole beside it.
        # (Qt's message room: 6 px from the left end to 2 px before the first readout.)
        fitted = bar.fontMetrics().elidedText(LONG, Qt.TextElideMode.ElideRight, room - 2 - 6)
        assert fitted.endswith("…") and len(fitted) < len(LONG)
        drawn_long = _pixels(bar.grab().toImage())
        bar.showMessage(fitted)
        drawn_fitted = _pixels(bar.grab().toImage())
        # The readouts may have ticked between the two pictures: compare the message's part.
        message = np.s_[:, :room]
        assert (drawn_long[message] != drawn_fitted[message]).any(axis=-1).sum() == 0, \
            "the long message is not drawn as its elided form"
        assert bar.toolTip() == fitted        # the tooltip follows the message shown
        bar.showMessage(LONG)
        assert bar.toolTip() == LONG          # the whole of a long one
    finally:
        win.runs.stop()


def test_a_readout_is_as_wide_whatever_figure_it_shows(qapp):
    """The rate readout was a pixel wider for some figures ("999.9 tok/s") than for others
    ("12.3 tok/s"): its widening was measured by the text's advance, QLabel's own width by
    its laid-out text, and the two differ by a pixel for some figures. Each tick that
    changed that pixel moved the readouts beside it and laid the bar out again."""
    from flyviz.app.window.status_bar import Readout

    for unit, widest in (("tok/s", f"{9999.9:5.1f} tok/s"), ("fps", f"{999.9:4.1f} fps")):
        label = Readout(f"— {unit}", (f"— {unit}", widest))
        widths = {}
        for figure in [f"— {unit}", widest] + [f"{v:.1f} {unit}" for v in np.linspace(0, 999.9, 97)]:
            label.setText(figure)
            widths.setdefault(label.sizeHint().width(), figure)
        assert len(widths) == 1, f"{unit}: widths {widths} (width: first figure that had it)"
