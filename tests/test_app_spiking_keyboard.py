"""A spiking brain's docks from the keyboard alone: Tab stops only where a control is, every
control has a name a screen reader says, Ctrl+Return runs, Space pauses and Esc stops a live
run, Esc cancels a screen, and the shortcut list holds only keys that act on a spiking brain.
"""

from __future__ import annotations

import pytest
from app_conftest import focus_by_tab, make_window, tab_round
from qt_barriers import background_delivered, settle

pytestmark = [pytest.mark.gui, pytest.mark.usefixtures("spiking_kernels")]

from PySide6.QtCore import Qt  # noqa: E402
from PySide6.QtWidgets import (QAbstractButton, QAbstractSpinBox, QApplication,  # noqa: E402
                               QComboBox, QGraphicsView, QLabel, QLineEdit, QWidget)

#: The docks a spiking brain shows that are its own.
SPIKING_DOCKS = ("stimulus", "screen", "spiking_population")


def _spiking_window(qtbot, tmp_path):
    """A window showing the two-sided test brain (the test model's neurons and places)."""
    from test_spiking_app import _two_sided_brain

    from flyviz.app._testing import make_app_checkpoint
    from flyviz.kinds.spiking import SpikingModel

    checkpoint = make_app_checkpoint(tmp_path / "model")
    win = make_window(qtbot, checkpoint, tmp_path)
    win.features["spiking"].open(SpikingModel(
        _two_sided_brain(checkpoint.config.neurons, win.state.anatomy.positions), "two-sided"))
    settle(qtbot, win)
    return win


def _type(qtbot, field: QWidget, text: str) -> None:
    """Tab to ``field``, replace what it holds by ``text`` from the keyboard."""
    focus_by_tab(qtbot, field)
    qtbot.keyClick(field, Qt.Key.Key_A, Qt.KeyboardModifier.ControlModifier)
    qtbot.keyClicks(field, text)


def test_tab_stops_only_at_controls_and_reads_the_stimulus_dock_in_order(qtbot, tmp_path):
    """Tab round the window reaches the Stimulus dock's controls in the order they are shown
    (Run, then the form row by row) and stops at no dock's scroll area nor plot: a stop there
    showed no mark and did nothing (its arrows stepped the run), one more press each."""
    win = _spiking_window(qtbot, tmp_path)
    try:
        reached = tab_round(qtbot, win)
        holders = [dock.widget() for dock in win.docks.values() if dock.isVisible()]
        assert [type(w).__name__ for w in reached if any(w is h for h in holders)] == []
        # nor at a plot: it takes no key and shows no mark
        assert [type(w).__name__ for w in reached if isinstance(w, QGraphicsView)] == []
        panel = win.features["spiking"].panel
        order = [panel.run_button, panel.excite, panel.silence, panel.rate, panel.trials,
                 panel.bins, panel.speed, panel.display]
        at = [next(i for i, w in enumerate(reached) if w is control) for control in order]
        assert at == sorted(at)
    finally:
        win.close()


def _unnamed(dock) -> list[str]:
    """The controls of ``dock`` Tab can reach that a screen reader could not name: no label
    is their buddy, they have no accessible name, and (a button) their text is no word."""
    buddies = {id(label.buddy()) for label in dock.findChildren(QLabel)
               if label.buddy() is not None and label.isVisible()}
    found = []
    for widget in dock.findChildren(QWidget):
        if not widget.isVisible() or not widget.focusPolicy() & Qt.FocusPolicy.TabFocus:
            continue
        if isinstance(widget.parentWidget(), (QAbstractSpinBox, QComboBox)):
            continue                            # a spin box's own line edit: the box is named
        if not isinstance(widget, (QAbstractButton, QLineEdit, QAbstractSpinBox, QComboBox)):
            continue
        worded = isinstance(widget, QAbstractButton) and any(c.isalpha() for c in widget.text())
        if id(widget) in buddies or widget.accessibleName() or worded:
            continue
        text = getattr(widget, "placeholderText", lambda: "")() or widget.toolTip()
        found.append(f"{type(widget).__name__} {text[:30]!r}")
    return found


def test_each_control_of_the_spiking_docks_has_a_name(qtbot, tmp_path):
    """Every control of the Stimulus, Screen and Spiking populations docks is named by its
    label (a buddy) or an accessible name: the Excite field, the rate, the '+' and '…'
    buttons were announced as "edit" and "button" alone."""
    win = _spiking_window(qtbot, tmp_path)
    try:
        win.select_neuron(3)                    # the '+' buttons are enabled with a neuron
        for key in SPIKING_DOCKS:
            win.docks[key].raise_()
        win.features["screen"].panel.source.setCurrentIndex(1)   # the '…' button enabled
        settle(qtbot, win)
        assert {key: _unnamed(win.docks[key]) for key in SPIKING_DOCKS} == \
            {key: [] for key in SPIKING_DOCKS}
    finally:
        win.close()


def test_the_trials_box_is_named_and_reached_by_tab_from_the_rate(qtbot, tmp_path):
    """The Stimulus dock's Trials box (the settings' trials, which only a script or the CLI
    set before) is named by its label for a screen reader and is the next Tab stop after
    the rate, as it is the next field under it."""
    win = _spiking_window(qtbot, tmp_path)
    try:
        panel = win.features["spiking"].panel
        named = [label.text() for label in panel.findChildren(QLabel)
                 if label.buddy() is panel.trials]
        assert named == ["Trials"]
        focus_by_tab(qtbot, panel.rate)
        qtbot.keyClick(panel.rate, Qt.Key.Key_Tab)
        qtbot.waitUntil(lambda: QApplication.focusWidget() is not panel.rate)
        assert QApplication.focusWidget() is panel.trials
    finally:
        win.close()


def test_an_out_of_range_trial_count_cannot_be_typed(qtbot, tmp_path):
    """The Trials box holds the settings' bounds, 1 to MAX_TRIALS: a digit past the most is
    refused as it is typed, 0 is put back to the last count when the box is left, and the
    settings never hold either."""
    from flyviz.kinds.spiking import MAX_TRIALS

    win = _spiking_window(qtbot, tmp_path)
    try:
        feature = win.features["spiking"]
        panel = feature.panel
        _type(qtbot, panel.trials, str(MAX_TRIALS))
        assert (panel.trials.value(), feature.settings.trials) == (MAX_TRIALS, MAX_TRIALS)
        typed = (MAX_TRIALS + 1) // 10                        # 1001: the last 1 is refused
        _type(qtbot, panel.trials, str(MAX_TRIALS + 1))
        assert (panel.trials.value(), feature.settings.trials) == (typed, typed)
        _type(qtbot, panel.trials, "0")
        focus_by_tab(qtbot, panel.bins)                             # leave the box
        assert (panel.trials.value(), feature.settings.trials) == (typed, typed)
        assert panel.trials.text() == f"{typed} trials"
    finally:
        win.close()


def test_trials_typed_in_the_dock_run_that_many_and_the_status_says_what_is_shown(
        qtbot, tmp_path):
    """3 typed into Trials and Ctrl+Return record a run of 3 trials; the brain's colour of a
    bin is the trials' mean rate (their spikes over 3 bins' lengths), which the status line
    says, in a third line the dock is fitted to (the Speed row was pushed out of sight)."""
    import numpy as np

    from flyviz.kinds.spiking import SPIKING

    win = _spiking_window(qtbot, tmp_path)
    try:
        feature = win.features["spiking"]
        panel = feature.panel
        _type(qtbot, panel.bins, "4")
        _type(qtbot, panel.excite, "side:left")
        _type(qtbot, panel.trials, "3")
        qtbot.keyClick(panel.trials, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
        qtbot.waitUntil(lambda: feature.finished and len(feature.recording) == 4,
                        timeout=60_000)
        recording = feature.recording
        assert SPIKING.run_metadata(recording)["trials"] == 3
        tick, neuron, trial = recording.spikes.arrays()
        assert set(np.unique(trial).tolist()) == {0, 1, 2}
        # the colour of a bin: each neuron's spikes in all 3 trials over 3 bins' lengths
        ends = recording.spikes.frame_ends()
        bin_s = SPIKING.recording_axis(recording).step / 1000.0
        for i in range(len(recording)):
            first = ends[i - 1] if i else 0
            spikes = np.bincount(neuron[first:ends[i]], minlength=recording.neurons)
            np.testing.assert_allclose(win.state.values(i), spikes / (3 * bin_s), rtol=1e-5)
        assert panel.status.text().splitlines()[-1] == \
            "3 trials: the brain shows their mean rate"
        settle(qtbot, win)
        shown = panel.speed.visibleRegion().boundingRect()
        assert (shown.height(), shown.width()) == (panel.speed.height(), panel.speed.width())
        panel.display.setCurrentIndex(panel.display.findText("Show spikes"))
        assert panel.status.text().splitlines()[-1] == \
            "3 trials: the brain flashes their mean spikes"
    finally:
        win.close()


def _start_by_keys_and_pause(qtbot, win):
    """Start a long run of the left side from the Stimulus dock by Ctrl+Return, then pause
    it by Space on the brain view; returns the spiking feature once paused (the engine
    stepping no more and its last bin in the window)."""
    from flyviz.runs import PAUSED

    feature = win.features["spiking"]
    panel = feature.panel
    _type(qtbot, panel.bins, "100000")
    _type(qtbot, panel.excite, "side:left")
    qtbot.keyClick(panel.excite, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(lambda: not feature.finished and len(feature.recording) >= 2,
                    timeout=30_000)
    focus_by_tab(qtbot, win.brain)
    qtbot.keyClick(win.brain, Qt.Key.Key_Space)
    qtbot.waitUntil(lambda: feature.state == PAUSED and not feature.stepping())
    return feature


def test_a_live_run_is_started_paused_and_stopped_from_the_keyboard(qtbot, tmp_path):
    """Typed into the Stimulus dock, Ctrl+Return (from the field) starts the run, Space on
    the brain view pauses it, Esc from the rate box stops it."""

    win = _spiking_window(qtbot, tmp_path)
    try:
        feature = _start_by_keys_and_pause(qtbot, win)
        panel = feature.panel
        assert feature.settings.bins == 100000
        focus_by_tab(qtbot, panel.rate)
        qtbot.keyClick(panel.rate, Qt.Key.Key_Escape)
        qtbot.waitUntil(lambda: feature.finished)
        assert "(stopped)" in panel.status.text()
    finally:
        win.close()


def _start_left_side_screen(qtbot, win, duration: str | None = None):
    """Typed into the Screen dock (neuron 3 picked, the left side as the sets and as the
    excited neurons, ``duration`` if given), Space on Run screen starts it; returns the
    screen feature."""
    screen = win.features["screen"]
    panel = screen.panel
    win.docks["screen"].raise_()
    settle(qtbot, win)
    focus_by_tab(qtbot, win.brain)
    win.select_neuron(3)
    _type(qtbot, panel.sets, "side:left")
    _type(qtbot, panel.excite, "side:left")
    if duration is not None:
        _type(qtbot, panel.duration, duration)
    focus_by_tab(qtbot, panel.run_button)
    qtbot.keyClick(panel.run_button, Qt.Key.Key_Space)
    return screen


def test_escape_cancels_a_running_screen(qtbot, tmp_path):
    """A screen started from the keyboard (Space on Run screen) stops at Esc, as a live run
    does: before, only Tab to its Cancel button did, Esc let a long screen run on."""
    win = _spiking_window(qtbot, tmp_path)
    try:
        screen = _start_left_side_screen(qtbot, win, duration="20000")
        panel = screen.panel
        qtbot.waitUntil(lambda: screen.job.busy)
        widget = QApplication.focusWidget()
        assert widget is not None and widget.window() is win
        qtbot.keyClick(widget, Qt.Key.Key_Escape)
        qtbot.waitUntil(lambda: not screen.job.busy)
        assert panel.status.text() == "screen cancelled"
        assert panel.run_button.isEnabled()
        background_delivered(win.background)
        assert screen.outcome is None            # the cancelled screen's result is dropped
    finally:
        win.close()


def test_the_shortcut_list_of_a_spiking_brain_holds_keys_that_act(qtbot, tmp_path):
    """A spiking brain's rate has no sign: its Colours row is hidden, and M (signed x / |x|)
    is neither listed by F1 nor changes the hidden setting behind the user's back."""
    win = _spiking_window(qtbot, tmp_path)
    try:
        assert win.controls.mode.isHidden()
        listed = dict(win.actions_registry.shortcut_rows())
        assert "M" not in listed
        mode = win.state.display.mode
        focus_by_tab(qtbot, win.brain)
        qtbot.keyClick(win.brain, Qt.Key.Key_M)
        QApplication.processEvents()
        assert win.state.display.mode == mode
    finally:
        win.close()


def _pixels(widget: QWidget) -> bytes:
    """``widget`` drawn as it is now, as bytes."""
    image = widget.grab().toImage()
    return bytes(image.constBits())[:image.sizeInBytes()]


def test_a_screens_effects_are_reached_and_read_from_the_keyboard(qtbot, tmp_path, dark_theme):
    """After a screen, Tab from Colour by it reaches the list of effects, scrolled into
    sight and marked when it has the keyboard; Shift+↓ selects its header row, for Ctrl+C, and → moves in the
    list rather than stepping the run: the list was text no key reached."""
    win = _spiking_window(qtbot, tmp_path)
    try:
        screen = _start_left_side_screen(qtbot, win)
        panel = screen.panel
        qtbot.waitUntil(lambda: screen.outcome is not None, timeout=60_000)
        settle(qtbot, win)
        effects = panel.effects
        unfocused = _pixels(effects)
        focus_by_tab(qtbot, panel.colour_button)
        qtbot.keyClick(panel.colour_button, Qt.Key.Key_Tab)
        qtbot.waitUntil(lambda: QApplication.focusWidget() is not panel.colour_button)
        assert QApplication.focusWidget() is effects
        settle(qtbot, win)
        # scrolled into the dock's sight (the dock's scroll area is no Tab stop, yet follows)
        assert effects.visibleRegion().boundingRect().height() == effects.height()
        assert _pixels(effects) != unfocused
        stepped: list[int] = []
        win.actions_by_name["step_forward"].triggered.connect(lambda *_: stepped.append(1))
        qtbot.keyClick(effects, Qt.Key.Key_Home, Qt.KeyboardModifier.ControlModifier)
        qtbot.keyClick(effects, Qt.Key.Key_Down, Qt.KeyboardModifier.ShiftModifier)
        assert effects.selectedText().split()[:2] == ["set", "Δ"]
        qtbot.keyClick(effects, Qt.Key.Key_Right)
        assert stepped == []
    finally:
        win.close()


def _frame_words(win) -> str:
    """Every line that names a frame: F1's list, the Run menu's titles, the toolbar's and
    the timeline's tooltips."""
    names = ("step_back", "step_forward", "first", "last")
    registry = win.actions_registry
    lines = [text for _keys, text in registry.shortcut_rows()]
    lines += [registry[name].text() for name in names]
    lines += [win.step_button.toolTip(), win.timeline.slider.toolTip(),
              win.timeline.live.toolTip()]
    return "\n".join(lines)


def test_the_shortcuts_and_tooltips_name_the_shown_kinds_frames(qtbot, tmp_path):
    """A spiking brain counts bins: F1's list, the Run menu and the toolbar's and timeline's
    tooltips said "One token back", "Newest token"...; they name the kind's frame, and name
    tokens again once the Fly LLM is back."""
    win = _spiking_window(qtbot, tmp_path)
    try:
        words = _frame_words(win)
        assert "token" not in words.lower(), words
        listed = dict(win.actions_registry.shortcut_rows())
        assert listed["Left"] == "One bin back" and listed["Home"] == "First bin"
        assert listed["End"] == "Newest bin (live)"
        assert win.actions_registry["first"].text().replace("&", "") == "First bin"
        assert win.step_button.toolTip() == "One bin forward (→)"

        from flyviz.app._testing import make_app_checkpoint

        win.set_checkpoint(make_app_checkpoint(tmp_path / "fly-llm"))
        qtbot.waitUntil(lambda: win.state.kind.reads_text, timeout=10_000)
        words = _frame_words(win)
        assert "bin" not in words, words
        listed = dict(win.actions_registry.shortcut_rows())
        assert listed["Left"] == "One token back" and listed["End"] == "Newest token (live)"
        assert win.step_button.toolTip() == "One token forward (→)"
    finally:
        win.close()


def test_right_arrow_at_the_newest_bin_of_a_paused_run_simulates_one_more_bin(qtbot,
                                                                              tmp_path):
    """F1 says → "steps the model at the newest bin": on a paused spiking run, → at the
    newest bin simulates exactly one bin more (the run stays paused and the view on the
    newest bin), as it generates one token more for a Fly LLM; away from the newest bin it
    only moves the view one bin on."""
    from flyviz.runs import PAUSED

    win = _spiking_window(qtbot, tmp_path)
    try:
        assert "steps the model at the newest bin" in \
            dict(win.actions_registry.shortcut_rows())["Right"]
        feature = _start_by_keys_and_pause(qtbot, win)
        settle(qtbot, win)
        recording = feature.recording
        qtbot.keyClick(win.brain, Qt.Key.Key_End)
        bins = len(recording)
        assert win.state.index == bins - 1
        for more in (1, 2):
            qtbot.keyClick(win.brain, Qt.Key.Key_Right)
            qtbot.waitUntil(lambda n=bins + more: len(recording) == n, timeout=30_000)
            qtbot.waitUntil(lambda: not feature.stepping())
            settle(qtbot, win)
            assert len(recording) == bins + more            # one bin, not a resumed run
            assert win.state.index == bins + more - 1       # shown: the bin just simulated
            assert feature.state == PAUSED and not feature.finished
        # Away from the newest bin, → moves the view and simulates nothing.
        qtbot.keyClick(win.brain, Qt.Key.Key_Home)
        qtbot.keyClick(win.brain, Qt.Key.Key_Right)
        settle(qtbot, win)
        assert win.state.index == 1 and len(recording) == bins + 2
    finally:
        win.close()
