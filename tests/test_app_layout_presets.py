"""View → Layout: Default, Analysis and Presentation arrange the docks as they say, docks
the presets do not know are placed too, and the chosen layout is there at the next start."""

from __future__ import annotations

import time

import numpy as np
import pytest
from app_conftest import make_window
from PySide6.QtCore import QPoint, QSettings, QSize, Qt
from PySide6.QtGui import QImage
from PySide6.QtWidgets import (QAbstractButton, QApplication, QDockWidget, QLabel, QMainWindow,
                               QTabBar)

from test_app_window_fit import clipped_controls, wait_in_front
from qt_barriers import _geometry, settle

from flyviz.app.window import main_window
from flyviz.app.window.layout_presets import KNOWN_DOCKS, PRESETS, PRESENTATION_DOCKS


def at_size(win, qtbot, width: int = 1280, height: int = 800) -> None:
    win.resize(width, height)
    qtbot.waitUntil(lambda: win.size() == QSize(width, height), timeout=3000)
    settle(qtbot, win)


def in_front(dock) -> bool:
    """Shown, docked and not behind another tab."""
    return not dock.isHidden() and not dock.visibleRegion().isEmpty()


def arrangement(win) -> dict[str, tuple]:
    """Per dock: shown, area, floating, the docks tabbed with it, in front, geometry."""
    return {key: (not dock.isHidden(), win.dockWidgetArea(dock), dock.isFloating(),
                  frozenset(d.objectName() for d in win.tabifiedDockWidgets(dock)),
                  in_front(dock), dock.geometry().getRect() if in_front(dock) else None)
            for key, dock in win.docks.items()}


def test_each_preset_shows_the_docks_it_says_and_default_brings_the_default_back(window, qtbot):
    win = window
    at_size(win, qtbot)
    win.layouts.apply("default")
    settle(qtbot, win)
    default = arrangement(win)
    brain = win.brain.size()
    assert win.layouts.current == "default" and win.actions_by_name["layout_default"].isChecked()

    win.actions_by_name["layout_analysis"].trigger()
    settle(qtbot, win)
    assert win.layouts.current == "analysis"
    docks = win.docks
    for key in ("population", "cell_types", "graph"):
        assert in_front(docks[key]), key
    # Large: the raster and the cell types each a quarter of the height and the middle's
    # width, the graph most of the right column; the brain is smaller.
    for key in ("population", "cell_types"):
        assert docks[key].height() >= 0.25 * win.height(), key
        assert docks[key].width() >= 0.4 * win.width(), key
    assert docks["graph"].height() >= 0.5 * win.height()
    # The trajectory behind the cell types; Patching keeps the left column's height.
    assert docks["trajectory"] in win.tabifiedDockWidgets(docks["cell_types"])
    assert win.dockWidgetArea(docks["patching"]) == Qt.DockWidgetArea.LeftDockWidgetArea
    assert win.brain.height() < brain.height()
    assert in_front(docks["text"])                    # the run is still read
    assert all(not docks[k].isHidden() for k in default if default[k][0])
    problems = []
    for key, dock in docks.items():
        if not dock.isHidden():
            dock.raise_()
            wait_in_front(win, qtbot, key, dock)
            problems += clipped_controls(key, dock)
    assert not problems, "\n".join(problems)

    win.actions_by_name["layout_presentation"].trigger()
    settle(qtbot, win)
    shown = {key for key, dock in docks.items() if not dock.isHidden()}
    # The Fly LLM's of them (the spiking brain's population rates are not shown for it).
    presented = {k for k in PRESENTATION_DOCKS if win.dock_kinds.applies(k)}
    assert presented == {"text", "topk"} and shown == presented
    assert all(in_front(docks[k]) for k in presented)
    assert win.brain.width() > brain.width() and win.brain.height() > brain.height()

    win.actions_by_name["layout_default"].trigger()
    settle(qtbot, win)
    assert arrangement(win) == default
    assert win.brain.size() == brain


def shown_tab_bars(win) -> list[QTabBar]:
    """The dock tab bars on screen (Qt parks unused ones outside the window)."""
    return [bar for bar in win.findChildren(QTabBar, options=Qt.FindChildOption.FindDirectChildrenOnly)
            if bar.isVisible() and bar.geometry().intersects(win.rect())]


def dock_pointers(win) -> dict[int, QDockWidget]:
    """The window's docks by the address Qt keeps as their tabs' data."""
    import shiboken6

    return {shiboken6.getCppPointer(dock)[0]: dock for dock in win.findChildren(QDockWidget)}


def misplaced_tab_bars(win) -> list[QTabBar]:
    """Shown tab bars whose current tab's dock is hidden, or that do not lie against it."""
    docks = dock_pointers(win)
    misplaced = []
    for bar in shown_tab_bars(win):
        dock = docks.get(bar.tabData(bar.currentIndex())) if bar.count() else None
        if dock is None or dock.isHidden() or dock.isFloating():
            misplaced.append(bar)
            continue
        rect, edge = bar.geometry(), dock.geometry()
        reach = min(rect.width(), rect.height()) + 4     # the bar's thickness, and a margin
        if not edge.adjusted(-reach, -reach, reach, reach).contains(rect) \
                or rect.intersects(edge.adjusted(4, 4, -4, -4)):
            misplaced.append(bar)
    return misplaced


@pytest.mark.parametrize("presets", [("default",), ("analysis", "presentation", "default")],
                         ids=["first start", "after every preset"])
def test_each_tab_group_shows_one_tab_bar_of_its_own_and_its_tabs_work(window, qtbot, presets):
    """One bar a group, against its dock, and a click on a tab brings that dock in front."""
    win = window
    at_size(win, qtbot, 1440, 900)
    for name in presets:
        if name != "default" or len(presets) > 1:
            win.actions_by_name[f"layout_{name}"].trigger()
        settle(qtbot, win)
        bars = shown_tab_bars(win)
        docks = dock_pointers(win)
        tabs = [tuple(bar.tabData(i) for i in range(bar.count())) for bar in bars]
        assert len(set(tabs)) == len(tabs), (name, [b.geometry() for b in bars])  # one a group
        assert not misplaced_tab_bars(win), name   # each against its current dock, which is shown
        # Every group of tabbed docks on screen has its bar.
        for dock in win.docks.values():
            behind = [d for d in win.tabifiedDockWidgets(dock) if not d.isHidden()]
            if dock.isHidden() or dock.isFloating() or not behind:
                continue
            assert any(docks.get(t) is dock for group in tabs for t in group), \
                (name, dock.objectName())
        # The bars are the groups' own: a click on another tab brings that dock in front.
        for bar in bars:
            target = (bar.currentIndex() + 1) % bar.count()
            dock = docks[bar.tabData(target)]
            qtbot.mouseClick(bar, Qt.MouseButton.LeftButton, pos=bar.tabRect(target).center())
            wait_in_front(win, qtbot, dock.objectName(), dock)
            assert bar.currentIndex() == target


def test_the_layout_menu_offers_every_preset_checked_one_at_a_time(window):
    win = window
    menu = win.findChild(type(win.actions_registry.menu("View")), "layoutMenu")
    assert menu is not None and menu.menuAction() in win.actions_registry.menu("View").actions()
    assert [a.text() for a in menu.actions()] == [title for title, _ in PRESETS.values()]
    win.layouts.apply("presentation")
    assert [a.isChecked() for a in menu.actions()] == [False, False, True]
    with pytest.raises(ValueError, match="no layout preset"):
        win.layouts.apply("cinema")


def _install_extra(host):
    """A feature the presets do not know: a dock in the Settings column's tabs."""
    dock = host.docks.add("extra_feature", "Extra feature", QLabel("extra"),
                          Qt.DockWidgetArea.LeftDockWidgetArea)
    host.docks.tabify("controls", dock)
    return dock


def test_a_dock_the_presets_do_not_know_is_placed_by_each_preset(qtbot, app_checkpoint,
                                                                  tmp_path, monkeypatch):
    monkeypatch.setattr(main_window, "FEATURES",
                        main_window.FEATURES + (("extra_feature", _install_extra),))
    win = make_window(qtbot, app_checkpoint, tmp_path, "extra.ini")
    try:
        assert "extra_feature" not in KNOWN_DOCKS
        at_size(win, qtbot)
        extra, docks = win.docks["extra_feature"], win.docks
        beside_controls = set(win.tabifiedDockWidgets(docks["controls"]))
        assert extra in beside_controls
        win.layouts.apply("analysis")
        settle(qtbot, win)
        assert extra in win.tabifiedDockWidgets(docks["cell_types"]) and not extra.isHidden()
        assert in_front(docks["cell_types"])
        win.layouts.apply("presentation")
        settle(qtbot, win)
        assert extra.isHidden()
        win.layouts.apply("default")
        settle(qtbot, win)
        assert not extra.isHidden()
        assert set(win.tabifiedDockWidgets(docks["controls"])) == beside_controls
        assert win.dockWidgetArea(extra) == Qt.DockWidgetArea.LeftDockWidgetArea
    finally:
        win.close()


def test_the_chosen_layout_is_there_at_the_next_start(qtbot, app_checkpoint, tmp_path):
    win = make_window(qtbot, app_checkpoint, tmp_path, "layout.ini")
    win.layouts.apply("presentation")
    settle(qtbot, win)
    win.close()
    again = make_window(qtbot, app_checkpoint, tmp_path, "layout.ini")
    try:
        assert again.layouts.current == "presentation"
        assert again.actions_by_name["layout_presentation"].isChecked()
        assert {k for k, d in again.docks.items() if not d.isHidden()} == {"text", "topk"}
    finally:
        again.close()


def _widest_part_is_the_brain(win) -> bool:
    sides = [win.docks[key].width() for key in ("controls", "text")]
    return all(win.brain.width() > side for side in sides)


def test_a_layout_saved_at_another_window_size_takes_its_presets_sizes(qtbot, app_checkpoint,
                                                                       tmp_path):
    """A state saved with wide side columns (pixels) opened the brain view at its least,
    cut its captions and squeezed the Traces legend: at another window size the docks keep
    their places but take the preset's sizes; at the same size the user's widths stay."""
    path = tmp_path / "wide.ini"
    win = make_window(qtbot, app_checkpoint, tmp_path, "wide.ini")
    settle(qtbot, win)
    assert _widest_part_is_the_brain(win)                   # the first start's sizes
    win.resizeDocks([win.docks["controls"]], [420], Qt.Orientation.Horizontal)
    win.resizeDocks([win.docks["text"]], [520], Qt.Orientation.Horizontal)
    settle(qtbot, win)
    assert not _widest_part_is_the_brain(win)
    wide = win.docks["controls"].width()
    win.close()
    wide_state = QSettings(str(path), QSettings.Format.IniFormat).value("window/state")
    same = make_window(qtbot, app_checkpoint, tmp_path, "wide.ini")
    try:
        settle(qtbot, same)
        assert same.layouts.restored and same.docks["controls"].width() == wide
    finally:
        same.close()
    for saved in (QSize(936, 752), None):       # another size; a state of an older flyviz
        settings = QSettings(str(path), QSettings.Format.IniFormat)
        settings.setValue("window/state", wide_state)
        if saved is None:
            settings.remove("window/state_size")
        else:
            settings.setValue("window/state_size", saved)
        settings.sync()
        again = make_window(qtbot, app_checkpoint, tmp_path, "wide.ini")
        try:
            settle(qtbot, again)
            assert again.layouts.restored and again.layouts.current == "default"
            assert _widest_part_is_the_brain(again), (saved, again.brain.width(),
                                                      again.docks["controls"].width(),
                                                      again.docks["text"].width())
        finally:
            again.close()


def test_a_layout_saved_by_an_older_flyviz_is_not_restored(qtbot, app_checkpoint, tmp_path):
    path = tmp_path / "old.ini"
    win = make_window(qtbot, app_checkpoint, tmp_path, "old.ini")
    win.docks["traces"].hide()
    old_state = win.saveState()           # no version: what flyviz 0.3 wrote
    win.close()
    settings = QSettings(str(path), QSettings.Format.IniFormat)
    settings.setValue("window/state", old_state)
    settings.sync()
    again = make_window(qtbot, app_checkpoint, tmp_path, "old.ini")
    try:
        assert not again.layouts.restored and again.layouts.current == "default"
        assert not again.docks["traces"].isHidden()
    finally:
        again.close()


def test_the_user_can_move_tab_and_float_every_dock(window):
    win = window
    options = win.dockOptions()
    assert options & QMainWindow.DockOption.AllowTabbedDocks
    assert options & QMainWindow.DockOption.AllowNestedDocks
    wanted = (QDockWidget.DockWidgetFeature.DockWidgetMovable
              | QDockWidget.DockWidgetFeature.DockWidgetFloatable
              | QDockWidget.DockWidgetFeature.DockWidgetClosable)
    for key, dock in win.docks.items():
        assert dock.features() & wanted == wanted, key
        assert dock.allowedAreas() == Qt.DockWidgetArea.AllDockWidgetAreas, key
        assert dock.toggleViewAction() in win.actions_registry.menu("View").actions(), key




def widget_pixels(widget) -> np.ndarray:
    """The widget's own rendering, (height, width, 3) uint8."""
    return image_pixels(widget.grab().toImage())


def image_pixels(image) -> np.ndarray:
    image = image.convertToFormat(QImage.Format.Format_RGB888)
    rows = np.frombuffer(image.constBits(), np.uint8).reshape(image.height(), image.bytesPerLine())
    return rows[:, :image.width() * 3].reshape(image.height(), image.width(), 3).copy()


def pump_until_settled(win, rounds: int = 2000) -> None:
    """Handle posted events as a loop that pumps them itself does (a progress loop, the
    screenshot tour): objects scheduled for deletion stay alive, as they do there; until
    no widget moved, appeared or disappeared for two rounds."""
    last, still = None, 0
    for _ in range(rounds):
        QApplication.sendPostedEvents()
        QApplication.processEvents()
        now = _geometry(win)
        still = still + 1 if now == last else 0
        last = now
        if still >= 2:
            return
    raise AssertionError("the window's layout did not settle")


@pytest.mark.parametrize("preset", [None, "default", "analysis", "presentation"],
                         ids=["as it opens", "default", "analysis", "presentation"])
def test_no_tab_bar_of_a_replaced_arrangement_is_drawn_over_a_dock(qtbot, tmp_path, preset):
    """A preset restores the default arrangement first; the tab bars of the arrangement it
    replaced must go with it at once, not stay drawn over the docks now in their place (a
    stray "Traces | Trajectory" bar covered the Next token plot at 1280×800). So must
    those of the arrangement the window starts from, before its first sizes (the same bar
    there, as the window opened with no preset chosen)."""
    # The window as the app opens it, the demo brain loaded once it is shown.
    win = main_window.MainWindow(model_spec="demo", settings=QSettings(
        str(tmp_path / "settings.ini"), QSettings.Format.IniFormat))
    qtbot.addWidget(win)
    win.resize(1280, 800)
    win.show()
    # Loaded while events are pumped as a script's loop does (deleted objects stay alive
    # there: a tab bar Qt put away is deleted later, and was drawn until then).
    end = time.monotonic() + 300
    while win.bundle is None:
        assert time.monotonic() < end, "the demo brain did not load"
        QApplication.processEvents()
        time.sleep(0.01)
    names = () if preset is None else ("default", preset) if preset != "default" \
        else ("default",)
    for name in names:
        win.layouts.apply(name)
        pump_until_settled(win)
    pump_until_settled(win)
    shown = [dock for dock in win.docks.values() if in_front(dock)]
    over = [(bar.tabText(bar.currentIndex()), bar.geometry().getRect(), dock.objectName())
            for bar in shown_tab_bars(win) for dock in shown
            if bar.geometry().intersects(dock.geometry().adjusted(2, 2, -2, -2))]
    assert not over, (over, [(d.objectName(), d.geometry().getRect()) for d in shown])
    # What the window shows where the Next token plot is, is the plot itself.
    if win.docks["topk"] not in shown:
        return                              # behind the graph, in Analysis
    plot = win.topk_panel.plot
    corner = plot.mapTo(win, QPoint(0, 0))
    drawn = image_pixels(win.grab().toImage())[corner.y():corner.y() + plot.height(),
                                               corner.x():corner.x() + plot.width()]
    own = widget_pixels(plot)
    differs = np.abs(drawn.astype(int) - own.astype(int)).max(axis=-1) > 40
    assert differs.mean() < 0.005, float(differs.mean())


def test_the_left_columns_tab_titles_are_whole_on_a_laptop_screen(qtbot, app_checkpoint,
                                                                   tmp_path, dark_theme):
    """In a window 700 px tall (a 1366×768 laptop screen less its panel) the left column's
    nine tabs did not fit and Qt abridged every title ("Mo…", "At…", "W…"): each is drawn
    whole now, the bar scrolling to the ones below (its arrows shown), and every dock's tab
    can still be reached."""
    win = make_window(qtbot, app_checkpoint, tmp_path)
    try:
        win.resize(1264, 700)
        qtbot.waitUntil(lambda: (win.width(), win.height()) == (1264, 700), timeout=3000)
        settle(qtbot, win)
        bars = [bar for bar in win.findChildren(QTabBar) if bar.isVisible()
                and "Settings" in [bar.tabText(i) for i in range(bar.count())]]
        assert len(bars) == 1
        bar = bars[0]
        titles = [bar.tabText(i) for i in range(bar.count())]
        assert {"Model", "Settings", "Why?", "Dynamics"} <= set(titles), titles
        wanted = sum(bar.tabSizeHint(i).height() for i in range(bar.count()))
        assert wanted > bar.height()          # they do not all fit: the case this is about
        for i, title in enumerate(titles):
            assert bar.tabRect(i).height() >= bar.tabSizeHint(i).height(), title
        arrows = [button for button in bar.findChildren(QAbstractButton) if button.isVisible()]
        assert len(arrows) == 2
        # The last tab is reached: chosen, it is scrolled into the bar and its dock shown.
        last = bar.count() - 1
        bar.setCurrentIndex(last)
        settle(qtbot, win)
        assert bar.rect().contains(bar.tabRect(last)), (bar.rect(), bar.tabRect(last))
    finally:
        win.close()
