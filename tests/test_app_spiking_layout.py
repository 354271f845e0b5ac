"""A spiking brain's bottom row keeps its widths when the window swaps its docks for the Fly
LLM's and back (opening a Fly LLM, then the spiking brain again; the window swaps so as it
closes too): the Spiking populations dock came back ~130 px narrower, its groups field and
legend cut, the State raster beside it taking the width."""

from __future__ import annotations

import pytest
from PySide6.QtWidgets import QApplication
from qt_barriers import settle
from test_app_spiking_keyboard import _spiking_window

pytestmark = [pytest.mark.gui, pytest.mark.usefixtures("spiking_kernels")]


def _widths(win) -> dict[str, int]:
    QApplication.processEvents()
    return {key: dock.width() for key, dock in win.docks.items()
            if dock.isVisible() and not dock.isFloating()}


@pytest.mark.parametrize("size", [(1280, 800), (1440, 900)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_the_populations_dock_keeps_its_width_when_the_docks_are_swapped_and_back(
        qtbot, tmp_path, size):
    from flyviz.kinds import LANGUAGE

    win = _spiking_window(qtbot, tmp_path)
    try:
        win.resize(*size)
        qtbot.waitUntil(lambda: (win.width(), win.height()) == size, timeout=3000)
        settle(qtbot, win)
        spiking = win.state.kind
        before = _widths(win)
        assert {"raster", "spiking_population"} <= before.keys()
        win.dock_kinds.apply(LANGUAGE)      # as the window does before saving its layout
        settle(qtbot, win)
        win.dock_kinds.apply(spiking)       # as the next session does, opening the brain
        settle(qtbot, win)
        after = _widths(win)
        for key in ("raster", "spiking_population"):
            assert abs(after[key] - before[key]) <= 3, (key, before, after)
    finally:
        win.close()


def _sizes(win) -> dict[str, tuple[int, int]]:
    """Width and height of each dock shown in the window (not floating, not a tab behind
    another: Qt keeps those outside the window, at whatever size they last had)."""
    QApplication.processEvents()
    return {key: (dock.width(), dock.height()) for key, dock in win.docks.items()
            if dock.isVisible() and not dock.isFloating()
            and win.rect().contains(dock.geometry())}


def _open_demo_brain(qtbot, win) -> None:
    from flyviz.kinds.spiking import SPIKING, SpikingModel
    from flyviz.spiking.demo import demo_brain

    win.features["spiking"].open(SpikingModel(demo_brain(), "demo"))
    qtbot.waitUntil(lambda: win.state.kind is SPIKING, timeout=10_000)


def _sessions(qtbot, tmp_path, checkpoint, open_model, before_close=None, rounds: int = 3
              ) -> list[dict[str, tuple[int, int]]]:
    """The docks' sizes in ``rounds`` sessions of one settings file: each session opens a
    window, opens its model (``open_model``), measures the docks, does ``before_close`` and
    closes the window (which saves the layout the next session restores)."""
    from app_conftest import make_window

    seen = []
    for _ in range(rounds):
        win = make_window(qtbot, checkpoint, tmp_path, "sessions.ini")
        try:
            open_model(qtbot, win)
            settle(qtbot, win)
            seen.append(_sizes(win))
            if before_close is not None:
                before_close(qtbot, win)
                settle(qtbot, win)
        finally:
            win.close()
    return seen


def _assert_same_sizes(seen: list[dict[str, tuple[int, int]]], keys: set[str]) -> None:
    first = seen[0]
    assert keys <= first.keys(), first
    for later in seen[1:]:
        assert later.keys() == first.keys(), (first, later)
        for key in first:
            (w0, h0), (w, h) = first[key], later[key]
            assert abs(w - w0) <= 3 and abs(h - h0) <= 3, (key, [s.get(key) for s in seen])


def test_the_spiking_brains_docks_keep_their_sizes_from_session_to_session(qtbot, tmp_path):
    """The window closed with the demo spiking brain shown and opened again, three times,
    shows the brain's docks at the sizes they had: Spiking populations lost width each
    session (321, 235, 185 px), the State raster beside it taking it, as Qt restores a
    dock the saved layout holds hidden (the window saves the Fly LLM's docks) squeezed."""
    seen = _sessions(qtbot, tmp_path, None, _open_demo_brain)
    _assert_same_sizes(seen, {"raster", "spiking_population", "stimulus"})


def test_the_fly_llms_docks_keep_their_sizes_from_session_to_session(qtbot, tmp_path,
                                                                      app_checkpoint):
    """The same for the Fly LLM's docks, in sessions that show the Fly LLM and close with
    the spiking brain shown (the window swaps the Fly LLM's docks back in as it closes, and
    saved the layout before it had placed them): Traces lost width each session (454, 286,
    210, 180 px). The first session is the one before the spiking brain was ever shown: its
    Stimulus form widens the left column once (313 → 349 px), and the column keeps that."""
    from flyviz.kinds import LANGUAGE

    def shown(qtbot, win) -> None:
        qtbot.waitUntil(lambda: win.state.kind is LANGUAGE and win.state.model is not None,
                        timeout=10_000)

    seen = _sessions(qtbot, tmp_path, app_checkpoint, shown, _open_demo_brain, rounds=4)
    _assert_same_sizes(seen[1:], {"raster", "traces", "text", "topk", "controls"})
