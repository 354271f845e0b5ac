"""The app's threading rules hold (see :mod:`flyviz.viewer`): the UI thread never steps or
resets the model a worker runs, exports read a frozen snapshot, shutdowns never hang."""

from __future__ import annotations

import logging
import threading

import pytest

pytestmark = pytest.mark.gui

#: The Engine calls that change its state: only the engine worker may make them during a run.
STEPPING = ("step", "reset", "set_interventions", "drive", "readout")


def test_only_the_engine_worker_steps_the_model(window, qtbot, monkeypatch):
    from flyviz.model.engine import Engine

    calls: list[tuple[str, str]] = []
    for name in STEPPING:
        original = getattr(Engine, name)

        def spy(self, *args, _original=original, _name=name, **kwargs):
            calls.append((_name, threading.current_thread().name))
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(Engine, name, spy)
    win = window
    win.state.run.max_new_tokens = 4
    win.state.run.speed_cap = 0
    with qtbot.waitSignal(win.run_ended, timeout=20_000):
        assert win.run_prompt("Tom and his dog")
    assert len(win.session.recording) > 4
    assert {name for name, _ in calls} >= {"step"}
    on_ui = [name for name, thread in calls if thread == threading.main_thread().name]
    assert on_ui == [], f"the UI thread called Engine.{on_ui[0]} during a run"


def test_a_shutdown_gives_up_on_a_stuck_thread_and_says_so(qtbot, caplog):
    from PySide6.QtCore import QThread

    from flyviz.app.base import background

    release = threading.Event()
    stuck = threading.Thread(target=release.wait, name="flyviz-stuck", daemon=True)
    stuck.start()

    class Stuck(QThread):
        def run(self) -> None:
            release.wait()

    qstuck = Stuck()
    qstuck.start()
    try:
        with caplog.at_level(logging.WARNING, logger="flyviz.app.base.background"):
            assert not background.join_thread(stuck, "a stuck helper", timeout_s=0.05)
            assert not background.wait_qthread(qstuck, "a stuck loader", timeout_s=0.05)
        assert stuck in background.LEFT_RUNNING and qstuck in background.LEFT_RUNNING
        assert qstuck.parent() is None          # detached: its owner's end cannot destroy it
        text = caplog.text
        assert "a stuck helper" in text and "a stuck loader" in text
    finally:
        release.set()
        assert background.join_thread(stuck, "a released helper")
        assert background.wait_qthread(qstuck, "a released loader")
        background.LEFT_RUNNING.clear()
