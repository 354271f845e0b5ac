"""The window from the keyboard alone: the keys reach the control that has the focus, every
command has a key or a menu entry, menus open by their Alt letters, and the shortcut list
is what works.
"""

from __future__ import annotations

import re

import pytest
from app_conftest import focus_by_tab, make_window, tab_round
from qt_barriers import settle

pytestmark = pytest.mark.gui

from PySide6.QtCore import Qt  # noqa: E402
from PySide6.QtWidgets import (QApplication, QCheckBox, QComboBox, QPushButton,  # noqa: E402
                               QSlider)


def _counter(action) -> list[int]:
    fired: list[int] = []
    action.triggered.connect(lambda *_: fired.append(1))
    return fired


def _space_presses_the_load_button(qtbot, win) -> None:
    """Tab to the Model dock's Load button and press Space: the button is pressed."""
    load = next(b for b in win.model_panel.findChildren(QPushButton) if b.text() == "Load")
    pressed: list[int] = []
    load.clicked.connect(lambda *_: pressed.append(1))
    focus_by_tab(qtbot, load)
    qtbot.keyClick(load, Qt.Key.Key_Space)
    qtbot.waitUntil(lambda: pressed == [1])


def test_the_focused_control_keeps_space_and_the_arrows(qtbot, app_checkpoint, tmp_path):
    """Tabbed to, a dock's button is pressed by Space, a box ticked, a slider moved by →;
    the window's one-key shortcuts (Space plays, → steps) do not take those keys from them,
    and still act from the brain view."""
    win = make_window(qtbot, app_checkpoint, tmp_path)
    try:
        settle(qtbot, win)
        played = _counter(win.actions_by_name["play"])
        stepped = _counter(win.actions_by_name["step_forward"])
        win.docks["model"].raise_()
        settle(qtbot, win)
        _space_presses_the_load_button(qtbot, win)
        assert played == []

        win.docks["controls"].raise_()
        settle(qtbot, win)
        box = next(b for b in win.controls.findChildren(QCheckBox) if b.isVisible())
        ticked = box.isChecked()
        focus_by_tab(qtbot, box)
        qtbot.keyClick(box, Qt.Key.Key_Space)
        qtbot.waitUntil(lambda: box.isChecked() != ticked)
        assert played == []

        slider = next(s for s in win.controls.findChildren(QSlider) if s.isVisible())
        slider.setValue(slider.minimum())
        focus_by_tab(qtbot, slider)
        qtbot.keyClick(slider, Qt.Key.Key_Right)
        qtbot.waitUntil(lambda: slider.value() == slider.minimum() + slider.singleStep())
        assert stepped == []

        # From the brain view the same keys are the window's shortcuts.
        focus_by_tab(qtbot, win.brain)
        qtbot.keyClick(win.brain, Qt.Key.Key_Right)
        qtbot.waitUntil(lambda: stepped == [1])
        qtbot.keyClick(win.brain, Qt.Key.Key_Space)
        qtbot.waitUntil(lambda: played == [1])
        win.runs.stop()
    finally:
        win.close()


def test_a_neuron_is_picked_and_a_partner_followed_from_the_keyboard(qtbot, app_checkpoint,
                                                                     tmp_path):
    """Ctrl+K asks for a neuron's index: typed and Enter, it is selected and inspected, and
    the keyboard is back where it was; Enter on a row of the inspector's inputs selects that
    partner; Ctrl+D clears the selection."""
    from PySide6.QtWidgets import QInputDialog

    win = make_window(qtbot, app_checkpoint, tmp_path)
    try:
        settle(qtbot, win)
        focus_by_tab(qtbot, win.brain)
        qtbot.keyClick(win.brain, Qt.Key.Key_K, Qt.KeyboardModifier.ControlModifier)
        qtbot.waitUntil(lambda: isinstance(QApplication.activeModalWidget(), QInputDialog))
        dialog = QApplication.activeModalWidget()
        qtbot.waitUntil(lambda: QApplication.focusWidget() is not None
                        and QApplication.focusWidget().window() is dialog)
        field = QApplication.focusWidget()
        qtbot.keyClick(field, Qt.Key.Key_A, Qt.KeyboardModifier.ControlModifier)
        qtbot.keyClicks(field, "7")
        qtbot.keyClick(field, Qt.Key.Key_Return)
        qtbot.waitUntil(lambda: win.state.selected == 7)
        qtbot.waitUntil(lambda: QApplication.activeModalWidget() is None)
        assert win.inspector.neuron == 7
        # The window's focus is where it was (the window manager makes it active again;
        # the test's display has none, so the test does).
        assert win.focusWidget() is win.brain
        win.activateWindow()
        qtbot.waitUntil(win.isActiveWindow)
        assert QApplication.focusWidget() is win.brain

        table = win.inspector.inputs_table
        settle(qtbot, win)
        win.inspector.tabs.setCurrentWidget(table)
        qtbot.waitUntil(lambda: table.rowCount() > 0 and table.isVisible())
        partner = int(table.item(0, 0).data(Qt.ItemDataRole.UserRole))
        assert partner != 7
        table.setCurrentCell(0, 0)
        focus_by_tab(qtbot, table)
        qtbot.keyClick(table, Qt.Key.Key_Return)
        qtbot.waitUntil(lambda: win.state.selected == partner)

        qtbot.keyClick(table, Qt.Key.Key_D, Qt.KeyboardModifier.ControlModifier)
        qtbot.waitUntil(lambda: win.state.selected is None)
    finally:
        win.close()


def _mnemonic(text: str) -> str | None:
    """The letter after a single ``&`` of a menu text (Alt+letter, or the letter in an open
    menu), lower-cased; ``None`` without one."""
    found = re.search(r"&([^&])", text.replace("&&", ""))
    return found.group(1).lower() if found else None


def _menus(menu) -> list:
    """``menu`` and every submenu in it."""
    found = [menu]
    for action in menu.actions():
        if action.menu() is not None and action.isVisible():
            found.extend(_menus(action.menu()))
    return found


def _dock_entries_without_a_letter_left(win) -> list[str]:
    """The View menu's dock entries shown without an Alt letter though a letter of their
    title is not taken by another item shown there (none, when each dock has a letter
    where one fits)."""
    shown = [a for a in win.actions_registry.menu("View").actions()
             if not a.isSeparator() and a.isVisible()]
    entries = {dock.toggleViewAction() for dock in win.docks.values()}
    taken = {_mnemonic(a.text()) for a in shown} - {None}
    return [a.text() for a in shown if a in entries and _mnemonic(a.text()) is None
            and any(c.isalpha() and c not in taken for c in a.text().lower())]


def test_each_menu_opens_by_its_alt_letter_and_no_two_items_share_a_letter(qtbot,
                                                                           app_checkpoint,
                                                                           tmp_path):
    """Alt+F, Alt+R, Alt+V, Alt+H open their menus; in each menu (and submenu) the items
    shown have distinct letters (two on one letter only take turns being highlighted: the
    letter no longer chooses); each dock's View entry has a letter where one is left (they
    had none: only the arrow keys reached them), its title bar without an '&'; Alt+V then P
    opens Pick neuron, Alt+V then X shows the Text dock."""
    from PySide6.QtWidgets import QInputDialog, QMenu

    win = make_window(qtbot, app_checkpoint, tmp_path)
    try:
        settle(qtbot, win)
        titles = {key: dock.windowTitle() for key, dock in win.docks.items()}
        assert _dock_entries_without_a_letter_left(win) == []
        # the letter is the entry's: the title a dock shows (bar, tab) is the same
        assert {key: dock.windowTitle() for key, dock in win.docks.items()} == titles
        assert all("&" not in title for title in titles.values())
        for key, dock in win.docks.items():
            assert dock.toggleViewAction().text().replace("&", "") == titles[key]
        # a dock retitled keeps its letter in the menu, and its title bar shows no '&'
        text = win.docks["text"]
        text.setWindowTitle("Text of the run")
        assert text.windowTitle() == "Text of the run"
        assert text.toggleViewAction().text() == "Te&xt of the run"
        text.setWindowTitle(titles["text"])
        bar = win.menuBar()
        tops = [a for a in bar.actions() if a.isVisible()]
        letters = [_mnemonic(a.text()) for a in tops]
        assert None not in letters and len(set(letters)) == len(letters), letters
        clashes = []
        for top in tops:
            for menu in _menus(top.menu()):
                seen: dict[str, str] = {}
                for action in menu.actions():
                    if action.isSeparator() or not action.isVisible():
                        continue
                    letter = _mnemonic(action.text())
                    if letter is not None and letter in seen:
                        clashes.append((menu.title(), seen[letter], action.text()))
                    if letter is not None:
                        seen[letter] = action.text()
        assert clashes == []

        focus_by_tab(qtbot, win.brain)
        for top, letter in zip(tops, letters):
            qtbot.keyClick(win.brain, getattr(Qt.Key, f"Key_{letter.upper()}"),
                           Qt.KeyboardModifier.AltModifier)
            qtbot.waitUntil(lambda: isinstance(QApplication.activePopupWidget(), QMenu))
            assert QApplication.activePopupWidget() is top.menu()
            qtbot.keyClick(top.menu(), Qt.Key.Key_Escape)
            qtbot.waitUntil(lambda: QApplication.activePopupWidget() is None)
            qtbot.keyClick(bar, Qt.Key.Key_Escape)     # leave the menu bar
            focus_by_tab(qtbot, win.brain)
        view = win.actions_registry.menu("View")
        qtbot.keyClick(win.brain, Qt.Key.Key_V, Qt.KeyboardModifier.AltModifier)
        qtbot.waitUntil(lambda: QApplication.activePopupWidget() is view)
        qtbot.keyClick(view, Qt.Key.Key_P)
        qtbot.waitUntil(lambda: isinstance(QApplication.activeModalWidget(), QInputDialog))
        QApplication.activeModalWidget().reject()
        qtbot.waitUntil(lambda: QApplication.activeModalWidget() is None)
        text.hide()
        focus_by_tab(qtbot, win.brain)
        qtbot.keyClick(win.brain, Qt.Key.Key_V, Qt.KeyboardModifier.AltModifier)
        qtbot.waitUntil(lambda: QApplication.activePopupWidget() is view)
        qtbot.keyClick(view, Qt.Key.Key_X)
        qtbot.waitUntil(lambda: not text.isHidden())
    finally:
        win.close()


def test_the_shortcut_list_is_the_keys_that_work_now(qtbot, app_checkpoint, tmp_path):
    """F1 lists each key once, each an action shown now; for a spiking brain
    Ctrl+Return is its simulation's and the prompt's keys are gone."""
    from PySide6.QtWidgets import QTableWidget

    from flyviz.kinds.spiking import SPIKING

    win = make_window(qtbot, app_checkpoint, tmp_path)
    try:
        settle(qtbot, win)
        focus_by_tab(qtbot, win.brain)
        qtbot.keyClick(win.brain, Qt.Key.Key_F1)
        qtbot.waitUntil(lambda: win.findChild(QTableWidget, "shortcutTable") is not None)
        table = win.findChild(QTableWidget, "shortcutTable")
        rows = [(table.item(r, 0).text(), table.item(r, 1).text())
                for r in range(table.rowCount())]
        keys = [k for k, _ in rows]
        assert len(set(keys)) == len(keys), keys
        working = {a.statusTip() for a in win.actions_by_name.values()
                   if a.isVisible() and not a.shortcut().isEmpty()}
        assert {d for _, d in rows} == working
        assert dict(rows)["Ctrl+Return"] == win.actions_by_name["run"].statusTip()
        table.window().close()

        win.actions_registry.apply(SPIKING)
        listed = dict(win.actions_registry.shortcut_rows())
        assert listed["Ctrl+Return"] == win.actions_by_name["run_spiking"].statusTip()
        assert "Ctrl+L" not in listed          # Go to prompt: a spiking brain reads none
    finally:
        win.close()


def test_tab_leaves_the_text_panel_and_the_brain_view(qtbot, app_checkpoint, tmp_path):
    """After a run the Text panel's words are links (hover, Why?): Tab leaves the panel for
    the next control instead of stepping from word to word (it took as many presses as the
    text had words); from the brain view, where Enter leaves the keyboard, Tab goes on."""
    win = make_window(qtbot, app_checkpoint, tmp_path)
    try:
        settle(qtbot, win)
        win.state.run.max_new_tokens = 6
        win.prompt_bar.focus_text()
        qtbot.waitUntil(win.prompt_bar.line_edit.hasFocus)
        qtbot.keyClicks(win.prompt_bar.line_edit, "Tom and his dog")
        with qtbot.waitSignal(win.run_ended, timeout=30_000):
            qtbot.keyClick(win.prompt_bar.line_edit, Qt.Key.Key_Return)
        qtbot.waitUntil(lambda: "dog" in win.text_panel.toPlainText())
        qtbot.waitUntil(win.brain.hasFocus)
        qtbot.keyClick(win.brain, Qt.Key.Key_Tab)
        qtbot.waitUntil(lambda: QApplication.focusWidget() is not win.brain)
        panel = win.text_panel
        focus_by_tab(qtbot, panel)
        qtbot.keyClick(panel, Qt.Key.Key_Tab)
        qtbot.waitUntil(lambda: QApplication.focusWidget() is not panel)
        assert QApplication.focusWidget().window() is win
    finally:
        win.close()


def _pixels(widget):
    """``widget`` drawn as it is now, as bytes."""
    image = widget.grab().toImage()
    return bytes(image.constBits())[:image.sizeInBytes()]


def test_the_focused_control_is_marked(qtbot, app_checkpoint, tmp_path, dark_theme):
    """In the app's theme a button, the Run button, a check box, a slider and a list box are
    drawn otherwise when Tab has reached them than when it has not."""
    win = make_window(qtbot, app_checkpoint, tmp_path)
    try:
        win.docks["controls"].raise_()
        settle(qtbot, win)
        controls = win.controls
        shown = [
            win.prompt_bar.run_button,
            next(b for b in win.model_panel.findChildren(QPushButton)),
            next(b for b in controls.findChildren(QCheckBox) if b.isVisible()),
            next(s for s in controls.findChildren(QSlider) if s.isVisible()),
            next(c for c in controls.findChildren(QComboBox)
                 if c.isVisible() and not c.isEditable()),
        ]
        unmarked = []
        for widget in shown:
            focus_by_tab(qtbot, win.brain)
            settle(qtbot, win)
            before = _pixels(widget)
            focus_by_tab(qtbot, widget)
            settle(qtbot, win)
            if _pixels(widget) == before:
                unmarked.append(type(widget).__name__)
        assert unmarked == []
    finally:
        win.close()


def test_the_arrows_on_the_timeline_still_step_the_model(window, qtbot):
    """The timeline's slider, clicked or tabbed to, leaves ← and → to the window: → at the
    newest token of a paused run steps the model once (the slider alone stops there)."""
    from flyviz.app.runs.run_control import PAUSED

    win = window
    win.state.run.max_new_tokens = 5000
    win.state.run.speed_cap = 40
    assert win.run_prompt("Once upon a time")
    qtbot.waitUntil(lambda: len(win.session) >= 5, timeout=5000)
    win.toggle_play()
    qtbot.waitUntil(lambda: win.worker_state == PAUSED and not win.engine_thread.stepping())
    QApplication.processEvents()
    paused_at = len(win.session)
    slider = win.timeline.slider
    focus_by_tab(qtbot, slider)
    qtbot.keyClick(slider, Qt.Key.Key_Right)
    qtbot.waitUntil(lambda: len(win.session) == paused_at + 1)
    qtbot.keyClick(slider, Qt.Key.Key_Left)
    qtbot.waitUntil(lambda: win.session.index == paused_at - 1)
    win.runs.stop()


def test_the_arrows_switch_the_tabs_of_a_dock_column(qtbot, app_checkpoint, tmp_path):
    """Tabbed to, the bar of a column of docks in tabs (Model, Settings, Neuron, ...) takes
    → to show the next dock: the keyboard's one way between them (→ stepped the run)."""
    from PySide6.QtWidgets import QTabBar

    win = make_window(qtbot, app_checkpoint, tmp_path)
    try:
        settle(qtbot, win)
        stepped = _counter(win.actions_by_name["step_forward"])
        bars = [b for b in win.findChildren(QTabBar)
                if b.parent() is win and b.isVisible() and b.count() > 1]
        assert bars
        bar = bars[0]
        bar.setCurrentIndex(0)
        focus_by_tab(qtbot, bar)
        qtbot.keyClick(bar, Qt.Key.Key_Right)
        qtbot.waitUntil(lambda: bar.currentIndex() == 1)
        assert stepped == []
    finally:
        win.close()


def test_a_floating_docks_button_is_pressed_by_space(qtbot, app_checkpoint, tmp_path):
    """A dock dragged out of the window is a window of its own, yet the main window's
    shortcuts act in it: its focused button keeps Space there too."""
    win = make_window(qtbot, app_checkpoint, tmp_path)
    try:
        settle(qtbot, win)
        played = _counter(win.actions_by_name["play"])
        dock = win.docks["model"]
        dock.setFloating(True)
        dock.show()
        qtbot.waitExposed(dock)
        dock.activateWindow()
        qtbot.waitUntil(dock.isActiveWindow)
        _space_presses_the_load_button(qtbot, win)
        assert played == []
    finally:
        win.close()


def _tabbable_plots(win) -> list[str]:
    """The plots of any dock, shown or not, that Tab stops at (a stop with no mark whose
    arrow keys stepped the run)."""
    from PySide6.QtWidgets import QGraphicsView

    return [f"{name}: {type(view).__name__}" for name, dock in win.docks.items()
            for view in dock.findChildren(QGraphicsView)
            if view.focusPolicy() & Qt.FocusPolicy.TabFocus]


def test_no_plot_of_any_dock_is_a_tab_stop(qtbot, app_checkpoint, tmp_path):
    """The Top-k, graph, atlas, circuit, dynamics and patching plots are clicked to, never
    tabbed to, as the spiking docks' plots are; and Tab round the window stops at none."""
    from PySide6.QtWidgets import QGraphicsView

    win = make_window(qtbot, app_checkpoint, tmp_path)
    try:
        settle(qtbot, win)
        docks_with_plots = {name for name, dock in win.docks.items()
                            if dock.findChildren(QGraphicsView)}
        assert {"topk", "graph", "inspector", "circuit", "dynamics"} <= docks_with_plots, sorted(docks_with_plots)
        assert _tabbable_plots(win) == []
        reached = tab_round(qtbot, win)
        assert [type(w).__name__ for w in reached if isinstance(w, QGraphicsView)] == []
    finally:
        win.close()


#: The Fly LLM's docks whose computation runs in the background with a Cancel of its own.
JOB_DOCKS = ("lesions", "circuit", "dynamics", "patching", "why")


def test_escape_cancels_the_computation_running_in_any_dock(qtbot, app_checkpoint, tmp_path):
    """Esc (Run → Stop) cancels whichever dock's computation runs, as it cancels a spiking
    screen: before, an estimate, a circuit search, a dynamics measure or a patching run
    stopped only at a Tab to its Cancel button, and Esc let it run on."""
    import threading

    win = make_window(qtbot, app_checkpoint, tmp_path)
    try:
        settle(qtbot, win)
        for name in JOB_DOCKS:
            job = win.features[name].job
            told_to_stop = threading.Event()

            def work(stop, report, told=told_to_stop):
                # Runs until stopped, as a long search does between its progress reports.
                stop.wait(120)
                told.set()

            job.start(work)
            assert job.busy, name
            focus_by_tab(qtbot, win.brain)
            qtbot.keyClick(win.brain, Qt.Key.Key_Escape)
            qtbot.waitUntil(lambda job=job: not job.busy)
            qtbot.waitUntil(told_to_stop.is_set)
            assert "cancelled" in win.statusBar().currentMessage(), name
    finally:
        win.close()
