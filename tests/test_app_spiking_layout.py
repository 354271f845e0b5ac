"""A spiking brain's bottom row keeps its widths when the window swaps its docks for the Fly
LLM's and back (opening a Fly LLM, then the spiking brain again; the window swaps so as it
closes too): the Spiking populations dock came back ~130 px narrower, its groups field and
legend cut, the State raster beside it taking the width. And a dock the user closed stays
closed, the brain opened again and session after session, until View opens it."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import pytest
from PySide6.QtCore import Qt
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


def _pump_until(condition, timeout_s: float = 60.0) -> None:
    """Handle events as a loop that pumps them itself does (a progress loop, a screenshot
    script) until ``condition()`` holds."""
    end = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < end, "timed out"
        QApplication.processEvents()
        time.sleep(0.01)


@pytest.mark.parametrize("size", [(1280, 800), (1440, 900)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_no_tab_bar_of_the_fly_llms_docks_is_left_over_the_spiking_brains(qtbot, tmp_path, size):
    """Opening the demo's spiking brain where its Fly LLM was shown puts the Fly LLM's tab
    groups away with their bars, also while something pumps events itself (a progress loop,
    a screenshot): the "Traces | Trajectory" bar stayed drawn over the top of the Spiking
    populations dock at 1280×800, and "Text | Lesion map" under the brain view, until the
    user resized the window. And back: no bar of the spiking brain's is left over the Fly
    LLM's docks."""
    from PySide6.QtCore import QSettings
    from test_app_layout_presets import misplaced_tab_bars, pump_until_settled

    from flyviz.app.window.main_window import MainWindow
    from flyviz.kinds import LANGUAGE

    win = MainWindow(model_spec=None, settings=QSettings(
        str(tmp_path / "settings.ini"), QSettings.Format.IniFormat))
    qtbot.addWidget(win)
    win.resize(*size)
    win.show()
    try:
        ready: list[str] = []
        win.model_ready.connect(ready.append)
        win.load_model("demo")
        _pump_until(lambda: bool(ready))
        feature = win.features["spiking"]
        assert feature.open_loaded()        # the demo's graph, opened off the UI thread
        _pump_until(lambda: feature.model is not None and feature.dock.isVisible())
        spiking = win.state.kind
        for kind in (spiking, LANGUAGE, spiking):
            win.dock_kinds.apply(kind)
            pump_until_settled(win)
            stray = [[bar.tabText(i) for i in range(bar.count())]
                     for bar in misplaced_tab_bars(win)]
            assert not stray, (kind.key, stray)
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


@contextlib.contextmanager
def _brain_session(qtbot, tmp_path, settings: str = "sessions.ini") -> Iterator:
    """A session of the window on the demo spiking brain: a window with settings in
    ``settings`` (the same file for each session of a test), the brain opened and the
    window settled; closed at the end, which saves the layout the next session restores."""
    from app_conftest import make_window

    win = make_window(qtbot, None, tmp_path, settings)
    try:
        _open_demo_brain(qtbot, win)
        settle(qtbot, win)
        yield win
    finally:
        win.close()


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


# ------------------------------------------------------------ docks the user closed
def _close_from_title_bar(qtbot, win, key: str) -> None:
    """The user closes dock ``key`` with the close button of its title bar."""
    from PySide6.QtWidgets import QAbstractButton

    dock = win.docks[key]
    button = dock.findChild(QAbstractButton, "qt_dockwidget_closebutton")
    assert button is not None and button.isVisible(), key
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: dock.isHidden(), timeout=3000)


def _reopen(qtbot, win, key: str) -> None:
    """The user opens dock ``key`` from View: it is shown in its place in the window (in
    front once its tab is chosen: Qt opens a dock of a tab group behind the others)."""
    dock = win.docks[key]
    _entry(win, key).trigger()
    assert not dock.isHidden()
    dock.raise_()
    qtbot.waitUntil(lambda: dock.isVisible() and win.rect().contains(dock.geometry()),
                    timeout=3000)


def _entry(win, key: str):
    """Dock ``key``'s entry in the View menu (shown, and checked while the dock is)."""
    entry = win.docks[key].toggleViewAction()
    assert entry in win.actions_registry.menu("View").actions(), key
    return entry


@pytest.mark.parametrize("key", ["spiking_population", "screen", "stimulus"])
def test_a_spiking_dock_the_user_closed_stays_closed_until_opened_from_the_view_menu(
        qtbot, tmp_path, key):
    """The spiking brain showed its docks as it opened: one the user closed came back when the
    brain was opened again (its run reset, a recording of it opened), and in the next session
    (the layout saved it hidden with the Fly LLM's docks swapped in, and nothing said the user
    had closed it). It stays closed, session after session, until the user opens it from
    View; then it stays open."""
    with _brain_session(qtbot, tmp_path) as win:
        _close_from_title_bar(qtbot, win, key)
        _open_demo_brain(qtbot, win)                # the same brain, opened again
        settle(qtbot, win)
        assert win.docks[key].isHidden()

    with _brain_session(qtbot, tmp_path) as win:
        dock, entry = win.docks[key], _entry(win, key)
        assert dock.isHidden() and entry.isVisible() and not entry.isChecked()
        assert not win.docks["spiking_population" if key != "spiking_population"
                             else "stimulus"].isHidden()    # the others show as ever
        _reopen(qtbot, win, key)                    # View → the dock
        _open_demo_brain(qtbot, win)
        settle(qtbot, win)
        assert not dock.isHidden() and entry.isChecked()

    with _brain_session(qtbot, tmp_path) as win:
        assert not win.docks[key].isHidden()


def test_a_layout_preset_shows_again_a_spiking_dock_the_user_closed(qtbot, tmp_path):
    """View → Layout arranges every dock of the shown kind, one the user closed too (as
    before); the brain opened again then leaves it shown."""
    with _brain_session(qtbot, tmp_path, "settings.ini") as win:
        _close_from_title_bar(qtbot, win, "spiking_population")
        win.actions_by_name["layout_default"].trigger()
        settle(qtbot, win)
        assert not win.docks["spiking_population"].isHidden()
        _open_demo_brain(qtbot, win)
        settle(qtbot, win)
        assert not win.docks["spiking_population"].isHidden()


@pytest.mark.parametrize("key", ["traces", "raster"])
def test_a_fly_llm_dock_the_user_closed_stays_closed_across_a_session_closed_with_the_brain(
        qtbot, tmp_path, app_checkpoint, key):
    """Traces (the Fly LLM's) or the State raster (every kind's) closed under the Fly LLM, the
    spiking brain shown and the window closed with it: the next session showed the dock again
    (Qt restores a dock closed with its close button, not one hidden, shown again, where the
    window is restored before it is shown). It stays closed, after a spiking brain too, until
    View opens it, in its place."""
    from app_conftest import make_window

    from flyviz.kinds import LANGUAGE

    win = make_window(qtbot, app_checkpoint, tmp_path, "sessions.ini")
    try:
        qtbot.waitUntil(lambda: win.state.kind is LANGUAGE and win.state.model is not None,
                        timeout=10_000)
        settle(qtbot, win)
        _close_from_title_bar(qtbot, win, key)
        _open_demo_brain(qtbot, win)
        settle(qtbot, win)
    finally:
        win.close()

    win = make_window(qtbot, app_checkpoint, tmp_path, "sessions.ini")
    try:
        qtbot.waitUntil(lambda: win.state.kind is LANGUAGE and win.state.model is not None,
                        timeout=10_000)
        settle(qtbot, win)
        dock, entry = win.docks[key], _entry(win, key)
        assert dock.isHidden() and entry.isVisible() and not entry.isChecked()
        _open_demo_brain(qtbot, win)
        settle(qtbot, win)
        win.set_checkpoint(app_checkpoint)
        qtbot.waitUntil(lambda: win.state.kind is LANGUAGE, timeout=10_000)
        settle(qtbot, win)
        assert dock.isHidden() and not entry.isChecked()
        _reopen(qtbot, win, key)
    finally:
        win.close()


@pytest.mark.parametrize("key", ["stimulus", "screen"])
def test_a_dock_opened_from_the_view_menu_comes_in_front_of_its_tabs_at_its_forms_height(
        qtbot, tmp_path, key):
    """Stimulus and Screen share a tab group: one the user closed, opened again from View the
    next session, came back behind the other's tab (Qt's place for a dock shown into a tab
    group), to be looked for, and Stimulus as tall as Qt left it, its Speed row out of sight
    (it is fitted to its form as the brain opens, and it was closed then). View brings it in
    front, the Stimulus dock fitted to its form."""
    with _brain_session(qtbot, tmp_path) as win:
        _close_from_title_bar(qtbot, win, key)

    with _brain_session(qtbot, tmp_path) as win:
        dock = win.docks[key]
        assert dock.isHidden()
        _entry(win, key).trigger()
        settle(qtbot, win)
        assert win.rect().contains(dock.geometry()), dock.geometry()
        assert not dock.visibleRegion().isEmpty()
        speed = win.features["spiking"].panel.speed
        shown = speed.visibleRegion().boundingRect()
        in_sight = (shown.height(), shown.width()) == (speed.height(), speed.width())
        assert in_sight == (key == "stimulus")    # the Screen dock in front hides it


# ------------------------------------------------------------ the brain's plots in view
#: The least height each of the Spiking populations plots shows at a laptop size: its time
#: axis and its label take about 45 px, so under 90 px the rates of five groups or the rows
#: of their cells are a few pixels each.
PLOT_PX = 90


def _fully_shown(widget) -> bool:
    """True when ``widget`` is painted whole: nothing of it cut by its dock's edge or
    scrolled out of its scroll area's view."""
    from PySide6.QtWidgets import QAbstractScrollArea

    # A plot paints in its viewport, which covers the widget itself.
    surface = widget.viewport() if isinstance(widget, QAbstractScrollArea) else widget
    shown = surface.visibleRegion().boundingRect()
    return (shown.width(), shown.height()) == (surface.width(), surface.height())


@pytest.mark.parametrize("size", [(1280, 800), (1440, 900)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_the_demo_brains_plots_and_stimulus_form_show_without_scrolling_after_a_run(
        qtbot, tmp_path, size):
    """The demo spiking brain opened in the default layout at a laptop size and run: the
    Spiking populations dock showed its groups field, a two-line caption and the legend,
    its rates plot cut and its raster below the fold of a 208 px dock; and the Stimulus
    dock, fitted to its form, scrolled (its Speed row cut) once its status's second line
    wrapped ("0.213x real time (uncapped), engine 0.151x (done)"). Both plots are shown
    whole, each at least :data:`PLOT_PX` high, and the whole Stimulus form with them."""
    from app_conftest import make_window

    win = make_window(qtbot, None, tmp_path)
    try:
        win.resize(*size)
        qtbot.waitUntil(lambda: (win.width(), win.height()) == size, timeout=3000)
        _open_demo_brain(qtbot, win)
        settle(qtbot, win)
        feature = win.features["spiking"]
        panel = feature.panel
        panel.bins.setValue(2)
        panel.speed.setValue(0.0)
        assert feature.run()
        qtbot.waitUntil(lambda: feature.finished and len(feature.recording) == 2,
                        timeout=60_000)
        # Figures a run says (a faster machine's are shorter, and fit a line), wider than
        # the status line at the dock's width.
        first = panel.status.text().splitlines()[0]
        line = "0.0213x real time (cap 0.25x), engine 0.0151x (stopped)"
        assert panel.status.fontMetrics().horizontalAdvance(line) > panel.status.width()
        panel.status.setText(f"{first}\n{line}")
        settle(qtbot, win)
        assert panel.status.toolTip() == panel.status.text()    # all of it, where cut
        population = feature.population
        for plot in (population.rates_plot, population.raster_plot):
            assert _fully_shown(plot) and plot.height() >= PLOT_PX, \
                (plot.viewport().visibleRegion().boundingRect(), plot.size(),
                 feature.population_dock.size())
        for control in (panel.run_button, panel.status, panel.excite, panel.rate,
                        panel.trials, panel.speed, panel.display):
            assert _fully_shown(control), (control, control.visibleRegion().boundingRect(),
                                           control.size(), feature.dock.size())
    finally:
        win.close()


def test_the_populations_dock_keeps_the_width_the_user_gave_it_as_the_brain_opens_again(
        qtbot, tmp_path):
    """As it appears, the Spiking populations dock takes the larger part of its row; one the
    user made narrower, shown already, stays so as the brain is opened again (its run reset,
    its recording opened): it was widened back each time."""
    from test_app_spiking_keyboard import _spiking_window

    win = _spiking_window(qtbot, tmp_path)
    try:
        win.resize(1280, 800)
        qtbot.waitUntil(lambda: (win.width(), win.height()) == (1280, 800), timeout=3000)
        settle(qtbot, win)
        feature = win.features["spiking"]
        dock = feature.population_dock
        row = [d for d in _widths(win) if win.docks[d].geometry().top() == dock.geometry().top()]
        total = sum(win.docks[d].width() for d in row)
        assert dock.width() >= 0.6 * total - 3       # as it appeared: the larger part
        others = [win.docks[d] for d in row if win.docks[d] is not dock]
        win.resizeDocks([*others, dock], [*(int(0.65 * total) // len(others) for _ in others),
                                          int(0.35 * total)], Qt.Orientation.Horizontal)
        settle(qtbot, win)
        narrowed = dock.width()
        assert narrowed < 0.45 * total
        feature.open(feature.model)                  # the same brain, opened again
        settle(qtbot, win)
        assert abs(dock.width() - narrowed) <= 3, (narrowed, dock.width())
    finally:
        win.close()


def test_the_populations_dock_keeps_the_width_the_user_gave_it_past_the_fly_llm_and_sessions(
        qtbot, tmp_path, app_checkpoint):
    """The Spiking populations dock takes the larger part of its row the first time it
    appears only: one the user made narrower stays so when the brain is opened again after
    the Fly LLM was shown (its docks put away and back), and in the next session; it was
    widened back to 0.6 of the row each time it appeared."""
    from flyviz.kinds import LANGUAGE

    def row_total(win, dock) -> int:
        return sum(win.docks[d].width() for d in _widths(win)
                   if win.docks[d].geometry().top() == dock.geometry().top())

    with _brain_session(qtbot, tmp_path) as win:
        dock = win.docks["spiking_population"]
        total = row_total(win, dock)
        assert dock.width() >= 0.6 * total - 3            # as it first appeared
        others = [win.docks[d] for d in _widths(win) if win.docks[d] is not dock
                  and win.docks[d].geometry().top() == dock.geometry().top()]
        win.resizeDocks([*others, dock], [*(int(0.65 * total) // len(others) for _ in others),
                                          int(0.35 * total)], Qt.Orientation.Horizontal)
        settle(qtbot, win)
        narrowed = dock.width()
        assert narrowed < 0.45 * total
        win.set_checkpoint(app_checkpoint)                 # the Fly LLM shown
        qtbot.waitUntil(lambda: win.state.kind is LANGUAGE, timeout=10_000)
        settle(qtbot, win)
        assert dock.isHidden()
        _open_demo_brain(qtbot, win)                       # and the brain again
        settle(qtbot, win)
        assert abs(dock.width() - narrowed) <= 3, (narrowed, dock.width())

    with _brain_session(qtbot, tmp_path) as win:
        dock = win.docks["spiking_population"]
        assert abs(dock.width() - narrowed) <= 3, (narrowed, dock.width())


def test_the_fly_llms_bottom_row_is_as_deep_as_before_after_a_spiking_brain(
        qtbot, tmp_path, app_checkpoint):
    """The spiking brain deepens the bottom row for its plots; shown again, the Fly LLM's row
    is as deep as it was and the brain view as tall: the row stayed 100 px deeper (182 →
    282 px at 1280×800), taken from the brain view and the Text dock (208 → 147 px). The
    spiking brain's row, shown again, is as deep as the brain's plots had it."""
    from app_conftest import make_window

    from flyviz.kinds import LANGUAGE

    win = make_window(qtbot, app_checkpoint, tmp_path)
    try:
        win.resize(1280, 800)
        qtbot.waitUntil(lambda: (win.width(), win.height()) == (1280, 800), timeout=3000)
        settle(qtbot, win)

        def depths() -> dict[str, int]:
            QApplication.processEvents()
            return {"brain": win.brain.height(), "raster": win.docks["raster"].height(),
                    "traces": win.docks["traces"].height(), "text": win.docks["text"].height()}

        before = depths()
        _open_demo_brain(qtbot, win)
        settle(qtbot, win)
        populations = win.docks["spiking_population"].height()
        assert win.docks["raster"].height() > before["raster"] + 50   # deepened for its plots
        win.set_checkpoint(app_checkpoint)
        qtbot.waitUntil(lambda: win.state.kind is LANGUAGE, timeout=10_000)
        settle(qtbot, win)
        after = depths()
        for key in ("brain", "raster", "traces", "text"):
            assert abs(after[key] - before[key]) <= 3, (key, before, after)
        # And the spiking brain's row as deep again as the brain opens again.
        _open_demo_brain(qtbot, win)
        settle(qtbot, win)
        assert abs(win.docks["spiking_population"].height() - populations) <= 3, \
            (populations, win.docks["spiking_population"].height())
    finally:
        win.close()
