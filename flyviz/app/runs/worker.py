"""The engine's background thread: the worker that steps runs, and its handle.

The engine never runs on the UI thread and never waits for the screen. An
:class:`EngineWorker` lives in its own :class:`~PySide6.QtCore.QThread` and
steps a :class:`~flyviz.runs.Run` of any kind of model (:meth:`Run.staged_frames
<flyviz.runs.Run.staged_frames>`, which records the run through the model's kind),
from a timer *inside that thread*, one frame per tick, so that every request from the UI
(pause, step, stop, a new run, a new speed cap) is an ordinary queued slot call handled
between two frames: the longest any request waits is one model step.
:class:`EngineThread` is the :class:`~flyviz.runs.RunEngine` of the window's
:class:`~flyviz.runs.Runs`.

Each frame leaves the worker tagged with the id of the run that produced it,
so frames of a cancelled run still in the event queue are recognised and
dropped by the window instead of being mixed into the new run.

The worker never runs more than :data:`MAX_FRAMES_AHEAD` frames ahead of what
the UI thread has taken (:meth:`EngineThread.frame_taken`): when the window
falls behind, the engine waits instead of queueing frames (each holds a full
state) without bound, and the window always shows a recent frame.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from PySide6.QtCore import QCoreApplication, QObject, Qt, QThread, QTimer, Signal, Slot

from flyviz.runs import IDLE, PAUSED, RUNNING, Run, step_frames

__all__ = ["IDLE", "MAX_FRAMES_AHEAD", "PAUSED", "RUNNING", "EngineThread", "EngineWorker",
           "engine_threads"]

#: Most frames the worker produces that the UI thread has not taken yet.
MAX_FRAMES_AHEAD = 8


class EngineWorker(QObject):
    """Steps a :class:`~flyviz.runs.Run` through its :meth:`~flyviz.runs.Run.staged_frames`.

    Create it on the UI thread, then :meth:`QObject.moveToThread` it; call it
    only through queued signals (see :class:`EngineThread`).

    Signals
    -------
    frame_ready(run_id, frame, seconds)
        One per frame the run recorded, with the seconds the engine took for it; the
        frame owns a private copy of the state. The receiver acknowledges each with
        :meth:`frames_taken`.
    run_finished(run_id, reason)
        ``"done"`` (EOS or the token limit) or ``"stopped"``.
    run_failed(run_id, message)
        The run could not continue; the message is one line for the user.
    state_changed(state)
        :data:`IDLE`, :data:`RUNNING` or :data:`PAUSED`.
    """

    frame_ready = Signal(int, object, float)
    run_finished = Signal(int, str)
    run_failed = Signal(int, str)
    state_changed = Signal(str)

    def __init__(self, max_ahead: int = MAX_FRAMES_AHEAD) -> None:
        super().__init__()
        self.max_ahead = max(1, int(max_ahead))
        #: Frames emitted and frames the receiver took, over the worker's life.
        self.frames_sent = 0
        self.frames_acknowledged = 0
        #: Most frames that were ever in flight at once (for tests and diagnostics).
        self.peak_in_flight = 0
        self._waiting_for_receiver = False
        #: Set by :meth:`report_stepping` (see :meth:`EngineThread.stepping`).
        self.stepping = False
        self._model: Any = None
        self._frames: Iterator[Any] | None = None
        self._run_id = -1
        self._state = IDLE
        # Child of the worker, so it moves to the worker's thread with it.
        self._timer = QTimer(self)
        self._timer.setSingleShot(False)
        self._timer.timeout.connect(self._tick)
        self._interval_ms = 0

    # ------------------------------------------------------------ requests
    @Slot(object)
    def set_model(self, model: Any) -> None:
        """Run ``model`` from now on; any current run stops."""
        self._end_run("stopped")
        self._install(model)

    def _install(self, model: Any) -> None:
        """Take ``model`` as the one runs use from now on (``None``: release the current
        one): the previous one is closed here, in the engine's thread, where its engines ran."""
        if self._model is not None and self._model is not model:
            close = getattr(self._model, "close", None)
            if close is not None:
                close()  # its engine's helper threads would otherwise outlive it
        self._model = model

    @Slot(int)
    def lower_priority(self, niceness: int) -> None:
        """Run this thread at a lower CPU priority (Linux; elsewhere nothing happens).

        On a machine with few cores the window's drawing (software OpenGL in
        particular) and the engine compete for the same cores; a nicer engine
        thread lets the picture stay fluid and takes every cycle left over.
        """
        import os
        import threading

        setpriority = getattr(os, "setpriority", None)
        if setpriority is None or niceness <= 0:
            return
        try:
            tid = threading.get_native_id()
            setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + niceness)
        except OSError:
            pass

    @Slot(int, object)
    def start(self, run_id: int, run: Run) -> None:
        """Cancel the current run and step ``run`` (paused first if its request says so)."""
        self._end_run("stopped")
        self._run_id = run_id
        self._frames = run.staged_frames()
        if run.request.start_paused:
            self._set_state(PAUSED)
        else:
            self._play()

    @Slot()
    def pause(self) -> None:
        """Stop stepping; the run can resume where it stopped."""
        if self._frames is not None:
            self._timer.stop()
            self._set_state(PAUSED)

    @Slot()
    def resume(self) -> None:
        """Continue a paused run."""
        if self._frames is not None:
            self._play()

    @Slot()
    def step(self) -> None:
        """Produce exactly one more frame, then stay paused."""
        if self._frames is None:
            return
        self._timer.stop()
        self._set_state(PAUSED)
        self._advance()

    @Slot()
    def stop(self) -> None:
        """End the current run (its frames stay recorded)."""
        self._end_run("stopped")

    @Slot(int)
    def frames_taken(self, count: int) -> None:
        """The receiver took ``count`` frames off the queue: room for as many more."""
        self.frames_acknowledged += int(count)
        if self._waiting_for_receiver and self.in_flight < self.max_ahead:
            self._waiting_for_receiver = False
            if self._frames is not None and self._state == RUNNING:
                self._timer.start()

    @Slot()
    def report_stepping(self) -> None:
        """Note in :attr:`stepping` whether the worker will produce frames on its own."""
        self.stepping = self._timer.isActive() or (
            self._waiting_for_receiver and self._frames is not None and self._state == RUNNING)

    @property
    def in_flight(self) -> int:
        """Frames emitted that the receiver has not taken yet."""
        return self.frames_sent - self.frames_acknowledged

    @Slot(float)
    def set_speed_cap(self, tokens_per_second: float) -> None:
        """Limit the token rate; ``<= 0`` means as fast as the engine goes."""
        self._interval_ms = 0 if tokens_per_second <= 0 else int(round(1000.0 / tokens_per_second))
        if self._timer.isActive():
            self._timer.setInterval(self._interval_ms)

    @Slot()
    def shutdown(self) -> None:
        """Stop everything and release the engine's helper threads."""
        self._end_run("stopped")
        self._install(None)
        # Hand the worker (and its timer) back to the UI thread, which deletes it
        # after this thread has ended; Qt timers must die in their own thread.
        app = QCoreApplication.instance()
        if app is not None:
            self.moveToThread(app.thread())

    # ------------------------------------------------------------ internals
    def _set_state(self, state: str) -> None:
        if state != self._state:
            self._state = state
            self.state_changed.emit(state)

    def _play(self) -> None:
        self._timer.setInterval(self._interval_ms)
        self._waiting_for_receiver = False
        self._timer.start()
        self._set_state(RUNNING)

    def _end_run(self, reason: str) -> None:
        self._timer.stop()
        if self._frames is not None:
            frames, self._frames = self._frames, None
            close = getattr(frames, "close", None)
            if close is not None:
                close()
            self.run_finished.emit(self._run_id, reason)
        self._set_state(IDLE)

    @Slot()
    def _tick(self) -> None:
        if self.in_flight >= self.max_ahead:
            # The receiver is behind: wait (without spinning) until it takes a frame.
            self._timer.stop()
            self._waiting_for_receiver = True
            return
        self._advance()

    def _advance(self) -> None:
        frames = self._frames
        if frames is None:
            return
        frame, seconds, failure = step_frames(frames)
        if failure:
            self._fail(failure)
            return
        if frame is None:
            self._frames = None
            self._timer.stop()
            self.run_finished.emit(self._run_id, "done")
            self._set_state(IDLE)
            return
        self.frames_sent += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        self.frame_ready.emit(self._run_id, frame, seconds)

    def _fail(self, message: str) -> None:
        self._frames = None
        self._timer.stop()
        self.run_failed.emit(self._run_id, message)
        self._set_state(IDLE)


class EngineThread(QObject):
    """The UI thread's handle on an :class:`EngineWorker` in its own thread.

    Every method returns at once; the request runs in the worker thread
    between two tokens.
    """

    _request_model = Signal(object)
    _request_start = Signal(int, object)
    _request_pause = Signal()
    _request_resume = Signal()
    _request_step = Signal()
    _request_stop = Signal()
    _request_speed = Signal(float)
    _request_shutdown = Signal()
    _request_niceness = Signal(int)
    _frames_taken = Signal(int)
    _request_report = Signal()

    def __init__(self, parent: QObject | None = None, worker: "EngineWorker | None" = None,
                 name: str = "flyviz-engine") -> None:
        super().__init__(parent)
        self.qthread = QThread()
        self.qthread.setObjectName(name)
        self.worker = worker if worker is not None else EngineWorker()
        self.worker.moveToThread(self.qthread)
        self._request_model.connect(self.worker.set_model)
        self._request_start.connect(self.worker.start)
        self._request_pause.connect(self.worker.pause)
        self._request_resume.connect(self.worker.resume)
        self._request_step.connect(self.worker.step)
        self._request_stop.connect(self.worker.stop)
        self._request_speed.connect(self.worker.set_speed_cap)
        self._request_niceness.connect(self.worker.lower_priority)
        self._frames_taken.connect(self.worker.frames_taken)
        self._request_report.connect(self.worker.report_stepping,
                                     Qt.ConnectionType.BlockingQueuedConnection)
        # Blocking: close() returns only once the worker has let go of the engine.
        self._request_shutdown.connect(self.worker.shutdown,
                                       Qt.ConnectionType.BlockingQueuedConnection)
        self.qthread.start()
        self._closed = False

    def set_model(self, model: Any) -> None:
        """Hand a new model to the worker (the previous one stops and its engine closes)."""
        self._request_model.emit(model)

    def start(self, run_id: int, run: Run) -> None:
        """Start ``run``, cancelling the current one."""
        self._request_start.emit(int(run_id), run)

    def pause(self) -> None:
        """Pause the current run."""
        self._request_pause.emit()

    def resume(self) -> None:
        """Resume a paused run."""
        self._request_resume.emit()

    def step(self) -> None:
        """Produce one more frame and stay paused."""
        self._request_step.emit()

    def stop(self) -> None:
        """End the current run."""
        self._request_stop.emit()

    def stepping(self) -> bool:
        """Whether the worker will produce more frames without being asked (step, resume).

        Waits until the worker has handled every request sent before this call,
        so a test can check that a pause or stop took effect without sleeping.
        """
        if not self.qthread.isRunning():
            return False
        self._request_report.emit()
        return bool(self.worker.stepping)

    def frame_taken(self, count: int = 1) -> None:
        """Tell the worker the UI took ``count`` frames (see :data:`MAX_FRAMES_AHEAD`)."""
        self._frames_taken.emit(int(count))

    def lower_priority(self, niceness: int) -> None:
        """Make the engine thread yield the CPU to drawing (see :meth:`EngineWorker.lower_priority`)."""
        self._request_niceness.emit(int(niceness))

    def set_speed_cap(self, tokens_per_second: float) -> None:
        """Limit the token rate (``<= 0``: no limit)."""
        self._request_speed.emit(float(tokens_per_second))

    def close(self, timeout_ms: int = 10_000) -> bool:
        """Stop the run, free the engine and end the thread; True when it ended."""
        if self._closed:
            return True
        self._closed = True
        if self.qthread.isRunning():
            self._request_shutdown.emit()
        else:
            self.worker.shutdown()
        self.qthread.quit()
        from flyviz.app.base.background import wait_qthread

        return wait_qthread(self.qthread, f"the engine thread {self.qthread.objectName()!r}",
                            timeout_ms / 1000.0)


def engine_threads() -> int:
    """Threads for the engine inside the app: every usable core but one, at least one.

    The window draws 49,393 points in (often software) OpenGL on the UI thread;
    an engine that takes every core starves the drawing, and a smooth picture
    matters more here than the last tokens per second (``flyviz bench`` and
    ``flyviz generate`` still use every core).
    """
    from flyviz.model.engine import default_threads

    return max(1, default_threads() - 1)
