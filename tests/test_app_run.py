"""The app runs the model in its worker thread: prompt, pause, step, stop, reset, close."""

from __future__ import annotations

import numpy as np
import pytest
from app_conftest import expected_frames, flyviz_threads, live_flyviz_threads, make_window
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication

from flyviz.app.runs.worker import IDLE, PAUSED, RUNNING
from flyviz.record.run import GenerationSettings

pytestmark = pytest.mark.gui


def _settle(win, qtbot, state: str) -> None:
    qtbot.waitUntil(lambda: win.worker_state == state, timeout=5000)


def test_prompt_typed_and_enter_produces_the_librarys_frames_and_text(window, qtbot,
                                                                       app_checkpoint):
    win = window
    win.state.run.temperature = 0.0
    win.state.run.max_new_tokens = 12
    win.state.run.speed_cap = 0
    qtbot.keyClicks(win.prompt_bar.line_edit, "Tom and his dog")
    with qtbot.waitSignal(win.run_ended, timeout=10_000) as ended:
        qtbot.keyClick(win.prompt_bar.line_edit, Qt.Key.Key_Return)
    assert ended.args[0] == "done"

    oracle = expected_frames(app_checkpoint, "Tom and his dog",
                             GenerationSettings(max_new_tokens=12, temperature=0.0, top_k=20))
    rec = win.session.recording
    assert len(rec) == len(oracle)
    assert rec.generated_ids == [f.predicted_token_id for f in oracle if f.is_generation]
    np.testing.assert_allclose(rec.state(len(rec) - 1), oracle[-1].state, atol=2e-3)

    qtbot.waitUntil(lambda: win.text_panel.toPlainText().startswith("Tom and his dog"))
    tokens = win.text_panel.tokens()
    assert "".join(t.text for t in tokens if not t.generated) == "Tom and his dog"
    assert [t.text for t in tokens if t.generated] == [f.predicted_text for f in oracle
                                                       if f.is_generation]
    # Live mode: the shown frame is the newest, and the timeline says so.
    assert win.session.index == len(rec) - 1
    assert win.timeline.counter.text().startswith(f"token {len(rec) - 1:,} / {len(rec) - 1:,}")


def test_pause_step_resume_stop_and_reset(window, qtbot):
    win = window
    win.state.run.max_new_tokens = 5000
    win.state.run.speed_cap = 40
    assert win.run_prompt("Once upon a time")
    qtbot.waitUntil(lambda: len(win.session) >= 5, timeout=5000)

    win.toggle_play()                       # Space: pause
    _settle(win, qtbot, PAUSED)
    assert not win.engine_thread.stepping()  # nothing more will come...
    QApplication.processEvents()             # ...once what was on its way arrived
    paused_at = len(win.session)
    sent = win.engine_thread.worker.frames_sent
    assert sent == paused_at                 # the window has every frame the worker made
    # Another round trip through the worker's queue and back: it made nothing new.
    assert not win.engine_thread.stepping()
    QApplication.processEvents()
    assert win.engine_thread.worker.frames_sent == sent and len(win.session) == paused_at

    qtbot.keyClick(win, Qt.Key.Key_Right)   # →: one model step at the newest token
    qtbot.waitUntil(lambda: len(win.session) == paused_at + 1, timeout=3000)
    assert not win.engine_thread.stepping()
    QApplication.processEvents()
    assert len(win.session) == paused_at + 1
    assert win.worker_state == PAUSED

    qtbot.keyClick(win, Qt.Key.Key_Left)    # ←: scrub back, the model does not move
    assert win.session.index == paused_at - 1 and not win.session.live
    assert len(win.session) == paused_at + 1

    qtbot.keyClick(win, Qt.Key.Key_Space)   # resume, back to live
    _settle(win, qtbot, RUNNING)
    qtbot.waitUntil(lambda: len(win.session) >= paused_at + 4, timeout=5000)
    assert win.session.live

    with qtbot.waitSignal(win.run_ended, timeout=3000) as ended:
        qtbot.keyClick(win, Qt.Key.Key_Escape)
    assert ended.args[0] == "stopped"
    _settle(win, qtbot, IDLE)
    assert not win.engine_thread.stepping()
    QApplication.processEvents()
    stopped_at = len(win.session)
    QApplication.processEvents()
    assert len(win.session) == stopped_at

    win.reset_run()
    assert len(win.session) == 0 and win.session.index == -1


def test_new_prompt_cancels_the_current_run(window, qtbot, app_checkpoint):
    win = window
    win.state.run.temperature = 0.0
    win.state.run.max_new_tokens = 5000
    win.state.run.speed_cap = 50
    win.run_prompt("Once upon a time")
    qtbot.waitUntil(lambda: len(win.session) >= 3, timeout=5000)
    first = win.session.recording
    win.state.run.max_new_tokens = 6
    win.state.run.speed_cap = 0
    with qtbot.waitSignal(win.run_ended, timeout=10_000,
                          check_params_cb=lambda reason, n: reason == "done"):
        win.run_prompt("Tom and his dog")
    rec = win.session.recording
    assert rec is not first
    oracle = expected_frames(app_checkpoint, "Tom and his dog",
                             GenerationSettings(max_new_tokens=6, temperature=0.0, top_k=20))
    # Only the new run's frames, none left over from the cancelled one.
    assert [f.input_token_id for f in rec] == [f.input_token_id for f in oracle]
    assert rec.metadata["prompt"] == "Tom and his dog"


def test_bad_prompts_are_reported_and_the_app_keeps_running(window, qtbot):
    win = window
    assert not win.run_prompt("   ")
    assert "empty" in win.last_error
    assert not win.run_prompt("x" * 20_001)
    assert "limit" in win.last_error
    assert win.worker_state == IDLE and len(win.session) == 0
    win.state.run.max_new_tokens = 3
    with qtbot.waitSignal(win.run_ended, timeout=10_000):
        assert win.run_prompt("Tom")
    assert len(win.session) > 0


def test_closing_during_a_run_stops_every_thread(qtbot, app_checkpoint, tmp_path):
    earlier = live_flyviz_threads()
    win = make_window(qtbot, app_checkpoint, tmp_path)
    win.state.run.max_new_tokens = 5000
    win.state.run.speed_cap = 0
    win.run_prompt("Once upon a time")
    qtbot.waitUntil(lambda: len(win.session) >= 5, timeout=5000)
    assert win.engine_thread.qthread.isRunning()
    win.close()
    assert not win.engine_thread.qthread.isRunning()
    assert flyviz_threads(ignore=earlier) == []
    count = len(win.session)
    QApplication.processEvents()            # frames still queued are not taken after close
    assert len(win.session) == count


def test_model_loads_in_the_background_and_a_failure_is_a_message(qtbot, app_checkpoint,
                                                                  tmp_path):
    from flyviz.model.errors import ModelNotFoundError

    earlier = live_flyviz_threads()

    def loader(spec, progress):
        progress("reading", 0.5)
        if spec == "missing":
            raise ModelNotFoundError("no model named 'missing'; give a folder or a hub id")
        return app_checkpoint

    from flyviz.app.window.main_window import MainWindow
    from PySide6.QtCore import QSettings

    win = MainWindow(model_spec="good", model_loader=loader, start_prompt="Tom",
                     settings=QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    qtbot.addWidget(win)
    win.state.run.max_new_tokens = 3
    with qtbot.waitSignal(win.run_ended, timeout=10_000):   # --prompt runs once loaded
        win.show()
    assert win.checkpoint is app_checkpoint and len(win.session) > 0
    assert "test-brain" in win.windowTitle()
    win.load_model("missing")
    qtbot.waitUntil(lambda: "missing" in win.last_error, timeout=5000)
    assert win.checkpoint is app_checkpoint          # the old model stays usable
    assert "synthetic demo brain" not in win.windowTitle()
    with qtbot.waitSignal(win.model_ready, timeout=10_000):
        win.load_model("demo")
    assert "synthetic demo brain" in win.windowTitle()
    win.close()
    assert flyviz_threads(ignore=earlier) == []


def test_the_title_says_a_demo_brain_is_synthetic_once():
    from flyviz.app.window.main_window import window_title
    from flyviz.demo.names import DEMO_NAME

    for name in (DEMO_NAME, "test-brain"):
        title = window_title(name, True)
        assert title.lower().count("synthetic") == 1 and "not the fly connectome" in title
    assert window_title("fly-llm-hf", False) == "flyviz — fly-llm-hf"
