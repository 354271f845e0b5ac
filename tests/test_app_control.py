"""Run control without a window: runs, pauses, steps, replays, what the timeline says, back-pressure."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from app_conftest import expected_frames

from flyviz.app.runs.run_control import REPLAYING, RunController
from flyviz.app.runs.worker import IDLE, MAX_FRAMES_AHEAD, PAUSED, RUNNING
from flyviz.record.run import GenerationSettings
from flyviz.record.runner import Model

pytestmark = pytest.mark.gui


@pytest.fixture
def runs(qtbot, app_checkpoint):
    """A run controller on the test model, with no window anywhere."""
    controller = RunController()
    controller.set_model(Model(app_checkpoint, spec="test-brain"))
    yield controller
    controller.shutdown()


def _settings(tokens: int) -> GenerationSettings:
    return GenerationSettings(max_new_tokens=tokens, temperature=0.0, top_k=20)


def test_a_run_records_the_librarys_frames_and_says_how_it_ended(runs, qtbot, app_checkpoint):
    states: list[str] = []
    runs.state_changed.connect(states.append)
    with qtbot.waitSignal(runs.run_ended, timeout=10_000) as ended:
        assert runs.start("Tom and his dog", _settings(8))
    assert ended.args == ["done", len(runs.session)]
    qtbot.waitUntil(lambda: runs.state == IDLE, timeout=3000)
    oracle = expected_frames(app_checkpoint, "Tom and his dog", _settings(8))
    rec = runs.session.recording
    assert [f.input_token_id for f in rec] == [f.input_token_id for f in oracle]
    np.testing.assert_allclose(rec.state(len(rec) - 1), oracle[-1].state, atol=2e-3)
    assert RUNNING in states and states[-1] == IDLE
    # The timeline's words: how the run ended at its last frame, what a frame is elsewhere.
    assert runs.phase_label() == "done"
    runs.show(0)
    assert runs.phase_label() == "prompt"
    runs.show(len(rec) - 2)
    assert runs.phase_label() == "generated"


def test_pause_step_resume_stop_and_the_words_for_each(runs, qtbot):
    runs.set_speed_cap(40)
    runs.start("Once upon a time", _settings(5000))
    qtbot.waitUntil(lambda: len(runs.session) >= 8 and runs.session.current_frame().is_generation,
                    timeout=5000)
    assert runs.phase_label() == "generating"
    assert runs.toggle_play()
    qtbot.waitUntil(lambda: runs.state == PAUSED, timeout=3000)
    assert runs.phase_label() == "paused"
    paused_at = len(runs.session)
    runs.step_forward()                              # at the newest frame: one model step
    qtbot.waitUntil(lambda: len(runs.session) == paused_at + 1, timeout=3000)
    assert runs.worker_state == PAUSED
    runs.step_back()                                 # scrubbing: the model does not move
    assert runs.session.index == paused_at - 1 and not runs.session.live
    assert runs.phase_label() == "generated"
    assert runs.toggle_play()                        # resume, live again
    qtbot.waitUntil(lambda: len(runs.session) >= paused_at + 4, timeout=5000)
    assert runs.session.live and runs.state == RUNNING
    with qtbot.waitSignal(runs.run_ended, timeout=3000) as ended:
        runs.stop()
    assert ended.args[0] == "stopped"
    qtbot.waitUntil(lambda: runs.state == IDLE, timeout=3000)
    assert runs.phase_label() == "stopped"


def test_replay_walks_a_finished_recording_to_its_end(runs, qtbot):
    with qtbot.waitSignal(runs.run_ended, timeout=10_000):
        runs.start("Tom", _settings(6))
    qtbot.waitUntil(lambda: runs.state == IDLE, timeout=3000)
    runs.set_speed_cap(200)
    runs.show(0)
    assert runs.toggle_play() and runs.state == REPLAYING
    assert runs.phase_label() == "replaying"
    qtbot.waitUntil(lambda: runs.state == IDLE, timeout=5000)
    assert runs.session.index == len(runs.session) - 1 and runs.session.live
    assert not runs.toggle_play()                    # nothing left to play: the caller decides


def test_a_new_run_drops_the_frames_of_the_cancelled_one(runs, qtbot, app_checkpoint):
    runs.set_speed_cap(60)
    runs.start("Once upon a time", _settings(5000))
    qtbot.waitUntil(lambda: len(runs.session) >= 3, timeout=5000)
    runs.set_speed_cap(0)
    with qtbot.waitSignal(runs.run_ended, timeout=10_000,
                          check_params_cb=lambda reason, _n: reason == "done"):
        runs.start("Tom and his dog", _settings(5))
    oracle = expected_frames(app_checkpoint, "Tom and his dog", _settings(5))
    assert [f.input_token_id for f in runs.session.recording] == [f.input_token_id for f in oracle]


def test_a_stalled_ui_does_not_grow_the_workers_queue(runs, qtbot):
    worker = runs.engine_thread.worker
    runs.set_speed_cap(0)
    runs.start("Once upon a time", _settings(100_000))
    qtbot.waitUntil(lambda: len(runs.session) >= 10, timeout=5000)
    sent_before = worker.frames_sent
    # The UI thread is busy (it takes no frame) until the worker has filled the queue and
    # stopped itself to wait for the receiver: a state it says, not a while the clock
    # measures (unthrottled, the tiny model makes hundreds of frames a second, so a worker
    # that did not wait would never say it). The deadline only ends a broken run.
    deadline = time.monotonic() + 120.0
    while not worker._waiting_for_receiver and time.monotonic() < deadline:
        time.sleep(0.005)
    assert worker._waiting_for_receiver, "the worker never waited for the UI"
    sent_during = worker.frames_sent - sent_before
    assert sent_during <= MAX_FRAMES_AHEAD
    # The premise: the worker went on until the queue was full, and no further
    # (unthrottled, the tiny model makes hundreds of frames a second).
    assert worker.in_flight == MAX_FRAMES_AHEAD
    assert worker.peak_in_flight <= MAX_FRAMES_AHEAD
    # And the run goes on once the UI takes frames again.
    after = len(runs.session)
    qtbot.waitUntil(lambda: len(runs.session) >= after + 20, timeout=5000)
    with qtbot.waitSignal(runs.run_ended, timeout=3000):
        runs.stop()


def test_the_timeline_says_how_the_run_ended(window, qtbot):
    win = window
    win.state.run.max_new_tokens = 5
    win.state.run.speed_cap = 0
    with qtbot.waitSignal(win.run_ended, timeout=10_000):
        win.run_prompt("Tom")
    n = len(win.session)
    qtbot.waitUntil(lambda: win.timeline.counter.text() == f"token {n - 1} / {n - 1} · done", timeout=3000)
    win.state.run.speed_cap = 30
    win.state.run.max_new_tokens = 5000
    win.run_prompt("Once upon a time")
    qtbot.waitUntil(lambda: "generating" in win.timeline.counter.text(), timeout=5000)
    with qtbot.waitSignal(win.run_ended, timeout=3000):
        win.stop_run()
    qtbot.waitUntil(lambda: win.timeline.counter.text().endswith("· stopped"), timeout=3000)
    assert "generating" not in win.timeline.counter.text()


def test_the_graph_index_is_built_off_the_ui_thread(qtbot, app_checkpoint, monkeypatch):
    import scipy.sparse

    from flyviz.app.runs.model_control import ModelController

    built_on: list[str] = []
    original = scipy.sparse.csr_matrix.tocsc

    def recording_tocsc(self, *args, **kwargs):
        built_on.append(threading.current_thread().name)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(scipy.sparse.csr_matrix, "tocsc", recording_tocsc)
    models = ModelController(lambda spec, progress: app_checkpoint)
    with qtbot.waitSignal(models.loaded, timeout=10_000) as loaded:
        models.load("test")
    bundle = loaded.args[0]
    assert bundle.connectivity.ready                 # the loader built it
    with qtbot.waitSignal(models.graph_ready, timeout=10_000):
        in_memory = models.bundle_now(app_checkpoint)
    assert in_memory.connectivity.ready
    models.shutdown()
    bundle.engine.close()
    in_memory.engine.close()
    assert len(built_on) == 2 and threading.main_thread().name not in built_on


def test_a_loader_bug_is_named_as_one_and_logged_not_passed_off_as_a_missing_model(qtbot, caplog):
    """A missing model is a user's message; a bug in the loader says it is one, and the log
    keeps its traceback."""
    import logging

    from flyviz.app.runs.model_control import ModelController
    from flyviz.model.errors import ModelNotFoundError

    def missing(spec, progress):
        raise ModelNotFoundError(f"no model at {spec}")

    def buggy(spec, progress):
        return {}["anatomy"]  # a KeyError: a bug, not a missing model

    for load, expected in ((missing, "no model at nowhere"), (buggy, "KeyError")):
        models = ModelController(load)
        caplog.clear()
        with caplog.at_level(logging.ERROR, logger="flyviz.app.runs.model_control"):
            with qtbot.waitSignal(models.failed, timeout=10_000) as failed:
                models.load("nowhere")
        message = failed.args[1]
        assert expected in message
        if load is buggy:
            assert "unexpected error" in message and "not found" not in message
            assert any(r.exc_info and r.exc_info[0] is KeyError for r in caplog.records)
        else:
            assert "unexpected" not in message and not caplog.records
        models.shutdown()
