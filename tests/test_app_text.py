"""The text panel shows whole characters, live and when scrubbing, even when a character's
bytes span several tokens (each of which alone decodes to U+FFFD)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from flyviz.app._testing import make_frame
from flyviz.app.language.text_panel import PieceBuilder, TextToken
from flyviz.model.tokenizer import tokenizer_for
from flyviz.record.recording import Recording

pytestmark = pytest.mark.gui

SPLIT = "é 🙂 … café"     # 2-, 4-, 3- and 2-token characters in the test tokenizer


def _split_ids(tokenizer, text: str) -> list[int]:
    ids = tokenizer.encode(text)
    assert sum("\ufffd" in tokenizer.token_text(i) for i in ids) >= 8, "nothing is split"
    return ids


def test_pieces_join_the_tokens_of_one_character(app_checkpoint):
    tokenizer = tokenizer_for(app_checkpoint)
    ids = _split_ids(tokenizer, SPLIT)
    builder = PieceBuilder(tokenizer.decode)
    pieces = []
    for k, tid in enumerate(ids):
        pieces += builder.add(k, TextToken(tokenizer.token_text(tid), True, k, k, tid))
    assert "".join(p.text for p in pieces) == SPLIT
    assert all("\ufffd" not in p.text for p in pieces)
    assert [(p.first, p.last) for p in pieces if p.text == "🙂"] != []
    emoji = next(p for p in pieces if "🙂" in p.text)
    assert emoji.last - emoji.first == 3 and emoji.appears_at == emoji.last


def test_a_typed_prompt_with_split_characters_shows_whole_while_running(window, qtbot):
    win = window
    win.state.run.max_new_tokens = 3
    win.state.run.speed_cap = 0
    prompt = f"Tom {SPLIT}"
    _split_ids(win.tokenizer, prompt)
    with qtbot.waitSignal(win.run_ended, timeout=10_000):
        assert win.run_prompt(prompt)
    # The prompt's characters are whole (the random test model may well continue with
    # bytes that are no character at all; those honestly show as U+FFFD).
    qtbot.waitUntil(lambda: win.text_panel.toPlainText().startswith(prompt), timeout=3000)


def _generated_recording(tokenizer, neurons: int, text: str) -> Recording:
    """Frame 0 reads BOS; frame 1 reads "Once", and frames 1.. generate ``text`` token by token."""
    rec = Recording(neurons)
    rec.append(make_frame(0, np.zeros(neurons), generated=False, token_text="<s>"))
    for i, tid in enumerate(tokenizer.encode(text), start=1):
        frame = make_frame(i, np.zeros(neurons), token_text="Once")
        rec.append(dataclasses.replace(frame, predicted_token_id=tid,
                                       predicted_text=tokenizer.token_text(tid)))
    return rec


def test_generated_split_characters_show_whole_live_and_when_scrubbing(window, qtbot,
                                                                     app_checkpoint):
    win = window
    tokenizer = win.tokenizer
    n = app_checkpoint.config.neurons
    full = _generated_recording(tokenizer, n, SPLIT)
    panel = win.text_panel

    # Live: frames arrive one at a time; the panel never shows half a character.
    live = Recording(n)
    win.session.replace(live)
    shown = []
    for frame in full:
        win.session.append(frame)
        win.refresh_panels()
        shown.append(panel.toPlainText())
    assert all("\ufffd" not in text for text in shown)
    assert shown[-1] == "Once" + SPLIT
    # Each prefix is the text of whole characters so far: a character appears with its last token.
    decoded = [""] + ["Once" + tokenizer.decode(tokenizer.encode(SPLIT)[:i]).rstrip("\ufffd")
                      for i in range(1, len(full))]
    assert shown == decoded

    # Scrubbing the finished recording, backwards and forwards, shows the same texts.
    win.session.replace(full)
    for index in [len(full) - 1, 3, 1, 2, 6, 5, len(full) - 2, 0, 4]:
        win.show_token(index)
        win.refresh_panels()
        assert panel.toPlainText() == decoded[index], index
    # Hovering the emoji describes its four tokens.
    k = next(i for i, p in enumerate(panel.pieces()) if p.text == "🙂")
    assert "4 tokens" in panel.piece_tooltip(k)


def test_a_long_text_shows_its_tail_and_follows_scrubbing(window, app_checkpoint):
    from flyviz.app.language.text_panel import MAX_TEXT_PIECES

    win = window
    n = app_checkpoint.config.neurons
    total = MAX_TEXT_PIECES + 120
    rec = Recording(n)
    rec.append(make_frame(0, np.zeros(n), generated=False, token_text="<s>"))
    for i in range(1, total):
        rec.append(make_frame(i, np.zeros(n), token_text=f"w{i} "))
    def expected(index: int) -> str:
        # Frame 0 reads BOS (no text); frame 1 reads the prompt "w1 " and predicts "w1 ".
        shown = [] if index == 0 else ["w1 "] + [f"w{j} " for j in range(1, index + 1)]
        tail = shown[-MAX_TEXT_PIECES:]
        return ("… " if len(shown) > MAX_TEXT_PIECES else "") + "".join(tail)

    win.session.replace(rec)
    panel = win.text_panel
    for index in [total - 1, total - 2, total - 40, 30, MAX_TEXT_PIECES, MAX_TEXT_PIECES + 5,
                  MAX_TEXT_PIECES + 6, total - 1, 0, 1]:
        win.show_token(index)
        win.refresh_panels()
        assert panel.toPlainText() == expected(index), index
        if index:
            # The newest piece, and only it, is highlighted.
            text = panel.toPlainText()
            lit = [i for i in range(len(text)) if _highlighted(panel, i)]
            assert "".join(text[i] for i in lit) == f"w{index} ", index


def _highlighted(panel, position: int) -> bool:
    from PySide6.QtGui import QColor, QTextCursor

    from flyviz.app.base import theme

    cursor = QTextCursor(panel.document())
    cursor.setPosition(position + 1)         # the format of the character before the cursor
    return cursor.charFormat().background().color() == QColor(theme.ACCENT)


def test_the_shown_token_stays_in_sight_when_the_text_dock_gets_shorter(window, qtbot,
                                                                        app_checkpoint):
    """Following the end of a long text, the panel keeps the shown (last) piece in sight
    when its dock is made shorter (Why? opening the Graph dock left it below the fold)."""
    from PySide6.QtCore import Qt
    from qt_barriers import settle

    win = window
    n = app_checkpoint.config.neurons
    rec = Recording(n)
    rec.append(make_frame(0, np.zeros(n), generated=False, token_text="<s>"))
    for i in range(1, 120):
        rec.append(make_frame(i, np.zeros(n), token_text=f"word{i} "))
    win.session.replace(rec)
    win.show_token(len(rec) - 1)
    win.refresh_panels()
    panel = win.text_panel
    settle(qtbot, win)
    bar = panel.verticalScrollBar()
    assert bar.maximum() > 0 and bar.value() == bar.maximum()
    tall = panel.viewport().height()
    dock = win.docks["text"]
    win.resizeDocks([dock], [dock.height() // 2], Qt.Orientation.Vertical)
    qtbot.waitUntil(lambda: panel.viewport().height() < 0.75 * tall, timeout=3000)
    settle(qtbot, win)
    text = panel.toPlainText()
    end = text.rindex("word119")
    cursor = panel.textCursor()
    cursor.setPosition(end)
    shown = panel.cursorRect(cursor)
    assert 0 <= shown.top() and shown.bottom() <= panel.viewport().height(), \
        (shown, panel.viewport().height())
