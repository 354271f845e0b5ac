"""The prompt box runs exactly what was typed; a suggestion runs only when picked."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from flyviz.app.window.controls import SUGGESTED_PROMPTS
from flyviz.record.run import encode_prompt

pytestmark = pytest.mark.gui


def _started(win) -> list[str]:
    prompts: list[str] = []
    win.runs.run_started.connect(prompts.append)
    return prompts


@pytest.mark.parametrize("typed", ["Once upon a time", "tom and his dog", "One day"])
def test_typed_prefix_of_a_suggestion_runs_as_typed(window, qtbot, typed):
    win = window
    assert any(s.lower().startswith(typed.lower()) and s != typed for s in SUGGESTED_PROMPTS)
    win.state.run.max_new_tokens = 2
    win.state.run.speed_cap = 0
    started = _started(win)
    qtbot.keyClicks(win.prompt_bar.line_edit, typed)
    assert win.prompt_bar.line_edit.text() == typed          # nothing completed inline
    with qtbot.waitSignal(win.run_ended, timeout=10_000):
        qtbot.keyClick(win.prompt_bar.line_edit, Qt.Key.Key_Return)
    assert started == [typed]                                # one run, of the typed text
    rec = win.session.recording
    assert rec.metadata["prompt"] == typed
    expected = encode_prompt(win.tokenizer, typed, win.checkpoint.config.bos_token_id)
    assert rec.prompt_ids == expected                        # what reached the engine
    assert win.prompt_bar.text() == typed


def test_a_suggestion_runs_when_picked_from_the_list(window, qtbot):
    win = window
    win.state.run.max_new_tokens = 2
    win.state.run.speed_cap = 0
    started = _started(win)
    box = win.prompt_bar.box
    box.showPopup()
    view = box.view()
    qtbot.waitUntil(view.isVisible, timeout=3000)
    rect = view.visualRect(view.model().index(2, 0))
    with qtbot.waitSignal(win.run_ended, timeout=10_000):
        qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    assert started == [SUGGESTED_PROMPTS[2]]
    assert win.session.recording.metadata["prompt"] == SUGGESTED_PROMPTS[2]


def test_the_keyboard_leaves_the_prompt_box_when_a_run_starts(window, qtbot):
    """After Enter the single-key shortcuts act on the window (M switched colours), they do
    not type into the prompt (W gave "namedw")."""
    win = window
    win.state.run.max_new_tokens = 2
    win.state.run.speed_cap = 0
    typed = "Once upon a time"
    win.prompt_bar.line_edit.setFocus()
    qtbot.keyClicks(win.prompt_bar.line_edit, typed)
    with qtbot.waitSignal(win.run_ended, timeout=10_000):
        qtbot.keyClick(win.prompt_bar.line_edit, Qt.Key.Key_Return)
    focus = win.focusWidget()
    assert focus is not None and focus is not win.prompt_bar.line_edit
    assert not win.prompt_bar.isAncestorOf(focus)
    mode = win.brain.mode
    qtbot.keyClick(focus, Qt.Key.Key_M)
    assert win.brain.mode != mode                            # the shortcut acted
    assert win.prompt_bar.text() == typed                    # and typed nothing
