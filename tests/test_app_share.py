"""File → Share as web page: the window's view as one page, written in the background."""

from __future__ import annotations

import json
import re

import pytest
from PySide6.QtWidgets import QFileDialog

pytestmark = pytest.mark.gui


def test_share_as_web_page_writes_what_the_window_shows(window, qtbot, tmp_path, monkeypatch):
    win = window
    action = win.actions_by_name["share_page"]
    assert action in win.actions_registry.menu("File").actions()
    action.trigger()                                      # nothing recorded: a message only
    assert "nothing to share" in win.last_error
    win.state.run.max_new_tokens = 3
    win.state.run.speed_cap = 0
    with qtbot.waitSignal(win.run_ended, timeout=10_000):
        win.run_prompt("Tom and his dog")
    win.show_token(2)
    win.state.display.mode = "abs"
    target = tmp_path / "shared.html"
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(target), ""))
    action.trigger()
    qtbot.waitUntil(lambda: "saved" in win.statusBar().currentMessage(), timeout=20_000)
    assert str(target) in win.statusBar().currentMessage()
    page = target.read_text(encoding="utf-8")
    header = json.loads(re.search(r'id="flyviz-data">(.*?)</script>', page, re.S).group(1))
    # The page opens on the window's token, in its colours, with its whole recording.
    assert header["index"] == 2 == win.state.index
    assert len(header["tokens"]) == len(win.session.recording)
    # Each step's word, BOS (the run's first step) as no word, as the movie shows the text.
    texts = win.session.recording.token_texts
    assert texts[0] == "<s>" and [t["text"] for t in header["tokens"]] == ["", *texts[1:]]
    assert header["layers"][0]["colormap"] == "abs"
    assert header["look"]["point_size"] == win.state.display.point_size
