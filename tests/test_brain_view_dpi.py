"""A brain view's canvas takes the screen's DPI without starting a program each time.

vispy asks the X server for it at every canvas it makes by running ``xdpyinfo`` as a child
process; every window (and every brain view in it) started one and waited for it.
"""

from __future__ import annotations

import os
import subprocess

import pytest

pytest.importorskip("pytestqt")
pytest.importorskip("vispy")

pytestmark = pytest.mark.gui

#: The programs vispy runs to read the screen's DPI on Linux.
DPI_PROGRAMS = ("xdpyinfo", "xrandr")


def test_brain_views_ask_for_the_screens_dpi_at_most_once_and_get_vispys_answer(
        qtbot, monkeypatch):
    from vispy.util.dpi import get_dpi

    from flyviz.app.brain.brain_view import BrainView

    expected = float(get_dpi(raise_error=False))       # vispy's own answer, asked here
    started: list[str] = []

    class CountingPopen(subprocess.Popen):
        def __init__(self, args, *more, **options):
            first = args[0] if isinstance(args, (list, tuple)) else str(args).split()[0]
            started.append(os.path.basename(str(first)))
            super().__init__(args, *more, **options)

    monkeypatch.setattr(subprocess, "Popen", CountingPopen)
    views = []
    for _ in range(3):
        view = BrainView()
        qtbot.addWidget(view)
        views.append(view)
    asked = [name for name in started if name in DPI_PROGRAMS]
    assert len(asked) <= 1, asked                       # the first view's, if no earlier one
    assert [view.canvas.dpi for view in views] == [expected] * 3


def test_a_dpi_in_vispys_configuration_is_the_one_a_brain_view_takes(qtbot):
    """The remembered answer never overrides a DPI the user set in vispy's configuration."""
    from vispy import config

    from flyviz.app.brain.brain_view import BrainView

    before = config["dpi"]
    config["dpi"] = 123
    try:
        view = BrainView()
        qtbot.addWidget(view)
    finally:
        config["dpi"] = before
    assert view.canvas.dpi == 123.0
