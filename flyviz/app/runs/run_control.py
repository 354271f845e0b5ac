"""Run and replay control in the window: start, pause, step, stop, replay, scrub.

:class:`RunController` is the window's :class:`flyviz.runs.Runs` (the one way
every host starts a run of any kind of model, through the model's kind) over one engine
thread (:class:`~flyviz.app.runs.worker.EngineThread`), with what the window adds: the
:class:`~flyviz.app.base.session.Session` that says which frame is shown, the replay
timer that walks through a finished recording, and Qt signals. The window only forwards
user actions to it and shows what it reports; tests drive it with no window at all.

A run is what the viewer state describes (:meth:`ModelKind.run_request
<flyviz.kinds.ModelKind.run_request>`): the Fly LLM's prompt, settings, interventions and,
when the state compares, its comparison with the untouched run (an option of the run's
request, on the same engine thread: the model keeps the comparison's two engines, see
:meth:`Model.comparison <flyviz.record.runner.Model.comparison>`); the spiking brain's
stimulus and bins. Its recording is made by the kind, so a saved run carries what
replays it.

Frames carry the id of the run that produced them: frames of a cancelled run that are
still queued are dropped, never mixed into the new run. Every frame that arrives is
acknowledged to the worker, which never runs more than
:data:`~flyviz.app.runs.worker.MAX_FRAMES_AHEAD` frames ahead of what was taken.
"""

from __future__ import annotations

import dataclasses
import time
from collections import deque
from collections.abc import Iterable
from typing import Any

from PySide6.QtCore import QObject, QTimer, Signal

from flyviz.app.runs.worker import PAUSED, RUNNING, EngineThread
from flyviz.app.base.session import Session
from flyviz.model.errors import FlyvizError
from flyviz.model.interventions import ResolvedInterventions
from flyviz.record.compare import MODES
from flyviz.record.frame import Frame
from flyviz.record.recording import Recording
from flyviz.runs import Run, RunRequest
from flyviz.runs import Runs
from flyviz.viewer.parts import RESET
from flyviz.viewer.state import ViewerState

__all__ = ["DEFAULT_REPLAY_RATE", "MODE_TITLES", "REPLAYING", "RunController",
           "events_per_second"]

#: State reported while a finished recording is played back (no engine involved).
REPLAYING = "replaying"

#: Replay speed (frames per second) when the speed cap is "no limit".
DEFAULT_REPLAY_RATE = 12.0

_TITLES = {"forced": "teacher-forced on the untouched text",
           "free": "free-running, both sampling"}
#: What the comparison modes are called in the window, in the order of the one list of
#: them (:data:`flyviz.record.compare.MODES`; a mode without a title fails here, at import).
MODE_TITLES = {mode: _TITLES[mode] for mode in MODES}


def events_per_second(times: Iterable[float], now: float, window: float = 2.0) -> float:
    """Events per second over the last ``window`` seconds of the timestamps ``times``."""
    recent = [t for t in times if now - t <= window]
    if len(recent) < 2 or recent[-1] <= recent[0]:
        return 0.0
    return (len(recent) - 1) / (recent[-1] - recent[0])


class RunController(QObject):
    """The window's runs of any kind of model, and the replay of finished recordings.

    Parameters
    ----------
    parent
        Owner of the controller (the window, or nothing in tests).
    engine_niceness
        How much nicer than the caller the engine thread runs (see
        :meth:`~flyviz.app.runs.worker.EngineWorker.lower_priority`).
    state
        The :class:`~flyviz.viewer.state.ViewerState` whose model runs and whose recording
        and index the runs fill and move (default: a new one, for tests without a window).

    Attributes
    ----------
    runner
        The Qt-free :class:`flyviz.runs.Runs` this one drives.

    Signals
    -------
    state_changed(state)
        :data:`~flyviz.app.runs.worker.IDLE`, ``RUNNING``, ``PAUSED`` or :data:`REPLAYING`.
    run_started(given)
        A run was handed to the worker: what it was given, in words (the prompt).
    frame_recorded(frames)
        A frame of the current run was recorded; the recording's length.
    run_ended(reason, frames)
        ``"done"``, ``"stopped"`` or ``"failed"``, and how many frames were recorded.
    run_failed(message)
        The run could not continue; one line for the user.
    message(text, error)
        Something to tell the user (``error``: it went wrong).
    """

    state_changed = Signal(str)
    run_started = Signal(str)
    frame_recorded = Signal(int)
    run_ended = Signal(str, int)
    run_failed = Signal(str)
    message = Signal(str, bool)

    def __init__(self, parent: QObject | None = None, engine_niceness: int = 0,
                 state: ViewerState | None = None) -> None:
        super().__init__(parent)
        self.session = Session(parent=self, state=state)
        self.engine_thread = EngineThread(self)
        self.runner = Runs(self.session.state, engine=self.engine_thread)
        worker = self.engine_thread.worker
        # Each through a method of this QObject: Qt queues the call to this (the window's)
        # thread; a plain Python callable would be called in the worker's.
        worker.frame_ready.connect(self._on_frame)
        worker.run_finished.connect(self._on_run_finished)
        worker.run_failed.connect(self._on_run_failed)
        worker.state_changed.connect(self._on_worker_reported)
        if engine_niceness > 0:
            self.engine_thread.lower_priority(engine_niceness)
        events = self.runner.events
        events.worker.connect(self._on_worker_state)
        events.started.connect(self._on_started)
        events.ended.connect(self.run_ended.emit)
        events.failed.connect(self.run_failed.emit)
        events.message.connect(self.message.emit)
        events.frame.connect(self._on_recorded)
        self.replay_timer = QTimer(self)
        self.replay_timer.timeout.connect(self._on_replay_tick)
        self.frame_times: deque[float] = deque(maxlen=240)
        self._replay_rate = DEFAULT_REPLAY_RATE
        self._closed = False
        self._blas_limit: Any = None
        self._hold_single_threaded_blas(True)   # see there: comparisons ran ~30% slower

    # ------------------------------------------------------------ state
    @property
    def state(self) -> str:
        """What is going on: idle, running, paused (a run) or replaying (a recording)."""
        if self.replay_timer.isActive():
            return REPLAYING
        return self.runner.worker_state

    @property
    def worker_state(self) -> str:
        """What the engine does: idle, running or paused."""
        return self.runner.worker_state

    @property
    def end_reason(self) -> str:
        """Why the last run ended (``""`` while one is under way or before the first)."""
        return self.runner.end_reason

    @property
    def has_model(self) -> bool:
        """True once the state has a model to run."""
        return self.model is not None

    @property
    def model(self) -> Any:
        """The model runs use: the state's (its engine lives in the worker thread)."""
        return self.session.state.model

    @property
    def active(self) -> bool:
        """True while the worker holds a run (running or paused)."""
        return self.runner.active

    @property
    def is_comparison(self) -> bool:
        """True while the current (or last) run compares with the untouched run."""
        run = self.runner.run
        return run is not None and bool(run.request.compare)

    def phase_label(self, frame: Frame | None = None) -> str:
        """A few words on what the shown frame is, for the timeline.

        While a run streams in, what the model is doing ("reading the prompt",
        "generating", "paused"); once it ended, how it ended at the last frame
        ("done", "stopped") and what the shown frame is elsewhere. The words on a
        frame itself are its kind's (:meth:`~flyviz.kinds.ModelKind.frame_phase`): a
        spiking brain's bins are neither prompt nor generated.
        """
        frame = self.session.current_frame() if frame is None else frame
        if frame is None:
            return ""
        at_end = self.session.index == len(self.session) - 1
        if self.worker_state == PAUSED and at_end:
            return "paused"
        kind = self.session.state.kind
        if self.worker_state == RUNNING and at_end:
            return kind.frame_phase(frame, streaming=True)
        if self.state == REPLAYING:
            return "replaying"
        if at_end and self.end_reason and not self.active:
            return self.end_reason
        return kind.frame_phase(frame, streaming=False)

    def token_rate(self, now: float | None = None) -> float:
        """Frames per second arriving from the engine over the last two seconds."""
        if self.worker_state != RUNNING:
            return 0.0
        return events_per_second(self.frame_times, time.perf_counter() if now is None else now)

    # ------------------------------------------------------------ model
    def set_model(self, model: Any) -> None:
        """Run ``model`` from now on; the current run stops and the recording empties.

        The worker thread owns ``model``'s engines from now on: it closes them when
        another model replaces it or the controller shuts down.
        """
        self.replay_timer.stop()
        self.runner.set_model(model)
        self.session.new_recording(self.session.state.kind.neurons(model))
        self._emit_state()

    # ------------------------------------------------------------ what runs start from
    @property
    def next_interventions(self) -> tuple:
        """Interventions for the next run only: the state's
        (:meth:`~flyviz.viewer.state.ViewerState.set_next_interventions`)."""
        return self.session.state.next_interventions

    @property
    def next_description(self) -> str:
        """What :attr:`next_interventions` do, in words."""
        return self.session.state.next_description

    def set_next_interventions(self, interventions: Any, description: str = "") -> None:
        """Apply ``interventions`` (Silence, Cut...) to the next run only; ``()`` clears them.
        They are written to the state, the one copy runs start from."""
        self.session.state.set_next_interventions(tuple(interventions or ()), description)

    @property
    def interventions(self) -> ResolvedInterventions | None:
        """The state's interventions resolved for the model (``None``: none, or no model)."""
        items = self.session.state.interventions
        resolve = getattr(self.model, "resolve_interventions", None)
        if not items or resolve is None:
            return None
        return resolve(items) or None

    @property
    def comparing(self) -> bool:
        """True when runs compare with the untouched run (the state's)."""
        return bool(self.session.state.comparing)

    @property
    def mode(self) -> str:
        """How a comparison runs, ``"forced"`` or ``"free"`` (the state's)."""
        return str(self.session.state.compare_mode)

    def set_interventions(self, interventions: Any) -> None:
        """Use ``interventions`` from the next run on: they are written to the state."""
        self.session.state.interventions = tuple(interventions or ())

    def set_comparing(self, comparing: bool, mode: str | None = None) -> None:
        """Compare the next runs with the untouched run (or not), in ``mode`` (the state's)."""
        if mode is not None and mode not in MODES:
            raise ValueError(f"comparison mode {mode!r} must be one of {', '.join(MODES)}")
        self.session.state.set_comparing(comparing, mode)

    # ------------------------------------------------------------ runs
    def request(self) -> RunRequest:
        """The run the state describes (:meth:`flyviz.runs.Runs.request`)."""
        return self.runner.request()

    def start(self, request: RunRequest | str | None = None, settings: Any = None, *,
              interventions: Any = None, states_dtype: str | None = None) -> bool:
        """Start a run, cancelling the current one; False (and a message) if it cannot.

        Parameters
        ----------
        request
            A :class:`~flyviz.runs.RunRequest`; ``None``: the run the state describes;
            else what the run is given (the prompt), with the rest of the state's run.
        settings, interventions, states_dtype
            With a prompt: replace the state's (interventions, if given, in any form the
            model accepts).
        """
        if self._closed:
            return False
        if not isinstance(request, RunRequest):
            if self.model is None:
                self.message.emit("no model is loaded yet; wait for it or open one", True)
                return False
            try:
                base = self.request()
            except FlyvizError as exc:          # settings the kind refuses
                self.message.emit(str(exc), True)
                return False
            changes: dict[str, Any] = {}
            if request is not None:
                changes["given"] = request
            if settings is not None:
                changes["settings"] = settings
            if interventions is not None:
                changes.update(interventions=interventions, note="")
            if states_dtype is not None:
                changes["states_dtype"] = states_dtype
            request = dataclasses.replace(base, **changes)
        return self.runner.start(request) is not None

    def apply_speed_cap(self, *_: Any) -> None:
        """Give the engine the speed cap the state's settings say (the shown model's kind
        reads them: tokens per second, a factor of real time...)."""
        self._set_rates(self.runner.speed_cap())

    def toggle_play(self) -> bool:
        """Pause or resume the run, or replay a scrubbed-back recording.

        Returns False when there is nothing to pause, resume or replay (the
        window then runs the prompt).
        """
        if self.worker_state == RUNNING:
            self.runner.pause()
        elif self.worker_state == PAUSED:
            self.session.go_live()
            self.runner.resume()
        elif self.replay_timer.isActive():
            self.replay_timer.stop()
            self._emit_state()
        elif len(self.session) and self.session.index < len(self.session) - 1:
            self.replay_timer.start(int(1000 / self._replay_rate))
            self._emit_state()
        else:
            return False
        return True

    def step_forward(self) -> None:
        """One frame forward; at the newest frame of a paused run, step the model once."""
        self.stop_replay()
        at_end = self.session.index >= len(self.session) - 1
        if self.worker_state == RUNNING:
            self.runner.pause()
        elif at_end and self.worker_state == PAUSED:
            self.session.go_live()
            self.runner.step()
        else:
            self.session.step(+1)

    def step_back(self) -> None:
        """One frame back (the run, if any, goes on)."""
        self.stop_replay()
        self.session.step(-1)

    def show(self, index: int) -> None:
        """Show frame ``index`` (scrubbing; leaves live mode unless it is the newest)."""
        self.session.set_index(index)

    def go_live(self) -> None:
        """Follow the newest frame."""
        self.stop_replay()
        self.session.go_live()

    def stop(self) -> None:
        """End the run; its frames stay for scrubbing and saving."""
        self.stop_replay()
        self.runner.stop()

    def pause(self) -> None:
        """Pause the run (nothing happens when none is running)."""
        self.stop_replay()
        if self.worker_state == RUNNING:
            self.runner.pause()

    def reset(self) -> None:
        """Stop and start over with an empty recording."""
        self.stop_replay()
        self.runner.forget()
        if self.model is not None:
            self.session.new_recording(self.session.state.kind.neurons(self.model), cause=RESET)
        self._emit_state()

    def show_recording(self, recording: Recording) -> None:
        """Stop any run and show ``recording`` (an opened file) at its last frame."""
        self.stop_replay()
        self.runner.forget()
        self.runner.end_reason = "done"
        self.session.replace(recording)
        self._emit_state()

    def stop_replay(self) -> None:
        """Stop playing back a recording (runs are not affected)."""
        if self.replay_timer.isActive():
            self.replay_timer.stop()
            self._emit_state()

    def set_speed_cap(self, frames_per_second: float) -> None:
        """Most frames per second for runs and replays (``<= 0``: no limit, replay at 12/s)."""
        self._set_rates(frames_per_second)

    def _set_rates(self, frames_per_second: float) -> None:
        self.engine_thread.set_speed_cap(frames_per_second)
        self._replay_rate = frames_per_second if frames_per_second > 0 else DEFAULT_REPLAY_RATE
        if self.replay_timer.isActive():
            self.replay_timer.setInterval(int(1000 / self._replay_rate))

    def shutdown(self) -> None:
        """Stop the replay, the run and the engine thread; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self.replay_timer.stop()
        self.runner.close()
        self._hold_single_threaded_blas(False)

    # ------------------------------------------------------------ worker signals
    def _on_frame(self, run_id: int, frame: Frame, seconds: float) -> None:
        # Every frame taken from the queue frees a place, whether it is kept or not.
        self.engine_thread.frame_taken()
        if not self._closed:
            self.runner.frame_arrived(run_id, frame, seconds)

    def _on_run_finished(self, run_id: int, reason: str) -> None:
        self.runner.run_finished(run_id, reason)

    def _on_run_failed(self, run_id: int, message: str) -> None:
        self.runner.run_failed(run_id, message)

    def _on_worker_reported(self, state: str) -> None:
        self.runner.worker_changed(state)

    def _on_recorded(self, frames: int) -> None:
        self.frame_times.append(time.perf_counter())
        self.frame_recorded.emit(frames)

    def _on_started(self, run: Run) -> None:
        # A run started here or by a feature (through the runner): a replay ends.
        self.replay_timer.stop()
        self.frame_times.clear()
        self.run_started.emit(str(run.request.given))

    def _on_worker_state(self, _state: str) -> None:
        self._emit_state()

    def _on_replay_tick(self) -> None:
        if self.session.index >= len(self.session) - 1:
            self.stop_replay()
            return
        self.session.step(+1)

    def _emit_state(self) -> None:
        self.state_changed.emit(self.state)

    def _hold_single_threaded_blas(self, hold: bool) -> None:
        """Keep BLAS in one thread in this process while the window's runs exist (or not).

        Each engine limits BLAS to one thread only during its own step; set back
        between steps from the engine threads, OpenBLAS's worker thread kept
        running and spinning during comparisons, taking about a core-second per
        60-token run from the two engines on two cores (``python -m
        tests.bench_app --compare``: ~22 compared tokens/s with it, ~30 without;
        plain runs unchanged). Set once, from the window's thread, for the
        controller's life, the engines' own limits then find one thread and
        leave it so. The window's BLAS work (small matrices) loses nothing.
        """
        if hold == (self._blas_limit is not None):
            return
        if not hold:
            limit, self._blas_limit = self._blas_limit, None
            limit.restore_original_limits()
            return
        try:
            from threadpoolctl import threadpool_limits

            self._blas_limit = threadpool_limits(limits=1, user_api="blas")
        except Exception:  # noqa: BLE001 - no threadpoolctl or an unknown BLAS: run as is
            self._blas_limit = None
