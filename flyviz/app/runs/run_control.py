"""Run and replay control, without a window: start, pause, step, stop, replay, scrub.

:class:`RunController` owns the three things a run is made of: the engine
worker thread that produces frames, the :class:`~flyviz.app.window.session.Session`
that records them and says which one is shown, and the replay timer that
walks through a finished recording. The window only forwards user actions
to it and shows what it reports; tests drive it with no window at all, and a
second controller can run a second engine beside the first.

Every run goes through the one orchestration, :class:`~flyviz.record.runner.Model`:
its recording is made by :meth:`~flyviz.record.runner.Model.new_recording`, so
a saved run carries the prompt, the settings with the seed actually used, the
model's identity and the interventions, and the worker steps
:meth:`~flyviz.record.runner.Model.frames` on the model's one engine.

Frames carry the id of the run that produced them: frames of a cancelled run
that are still queued are dropped here, never mixed into the new run. Every
frame that arrives is acknowledged to the worker, which never runs more than
:data:`~flyviz.app.runs.worker.MAX_FRAMES_AHEAD` frames ahead of what was taken.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from PySide6.QtCore import QObject, QTimer, Signal

from flyviz.app.window.session import Session
from flyviz.viewer.parts import NEW_RUN, RESET
from flyviz.viewer.state import ViewerState
from flyviz.app.runs.worker import IDLE, PAUSED, RUNNING, EngineThread, RunRequest
from flyviz.model.errors import FlyvizError
from flyviz.record.frame import Frame
from flyviz.record.recording import Recording
from flyviz.record.run import GenerationSettings, encode_prompt
from flyviz.record.runner import Model

#: State reported while a finished recording is played back (no engine involved).
REPLAYING = "replaying"

#: Replay speed (tokens per second) when the speed cap is "no limit".
DEFAULT_REPLAY_RATE = 12.0


def events_per_second(times: Iterable[float], now: float, window: float = 2.0) -> float:
    """Events per second over the last ``window`` seconds of the timestamps ``times``."""
    recent = [t for t in times if now - t <= window]
    if len(recent) < 2 or recent[-1] <= recent[0]:
        return 0.0
    return (len(recent) - 1) / (recent[-1] - recent[0])


class RunController(QObject):
    """The engine worker, the recording it fills and the replay of finished recordings.

    Parameters
    ----------
    parent
        Owner of the controller (the window, or nothing in tests).
    engine_niceness
        How much nicer than the caller the engine thread runs (see
        :meth:`~flyviz.app.runs.worker.EngineWorker.lower_priority`).
    state
        The :class:`~flyviz.viewer.state.ViewerState` whose recording and token the
        runs fill and move (default: a new one, for tests without a window).

    Signals
    -------
    state_changed(state)
        :data:`~flyviz.app.runs.worker.IDLE`, ``RUNNING``, ``PAUSED`` or :data:`REPLAYING`.
    run_started(prompt)
        A run was handed to the worker.
    run_ended(reason, frames)
        ``"done"``, ``"stopped"`` or ``"failed"``, and how many frames were recorded.
    run_failed(message)
        The run could not continue; one line for the user.
    message(text, error)
        Something to tell the user (``error``: it went wrong).
    """

    state_changed = Signal(str)
    run_started = Signal(str)
    run_ended = Signal(str, int)
    run_failed = Signal(str)
    message = Signal(str, bool)

    def __init__(self, parent: QObject | None = None, engine_niceness: int = 0,
                 state: ViewerState | None = None) -> None:
        super().__init__(parent)
        self.session = Session(parent=self, state=state)
        self.engine_thread = self._attach(EngineThread(self), self._on_frame,
                                          self._on_worker_state, engine_niceness)
        self.replay_timer = QTimer(self)
        self.replay_timer.timeout.connect(self._on_replay_tick)
        self.worker_state = IDLE
        #: Why the last run ended (``""`` while one is under way or before the first).
        self.end_reason = ""
        self.frame_times: deque[float] = deque(maxlen=240)
        self._run_id = 0
        self._model: Model | None = None
        self._replay_rate = DEFAULT_REPLAY_RATE
        self._closed = False

    # ------------------------------------------------------------ state
    @property
    def state(self) -> str:
        """What is going on: idle, running, paused (a run) or replaying (a recording)."""
        if self.replay_timer.isActive():
            return REPLAYING
        return self.worker_state

    @property
    def has_model(self) -> bool:
        """True once :meth:`set_model` gave the controller a model."""
        return self._model is not None

    @property
    def model(self) -> Model | None:
        """The model runs use (its engine lives in the worker thread)."""
        return self._model

    @property
    def active(self) -> bool:
        """True while the worker holds a run (running or paused)."""
        return self.worker_state != IDLE

    def phase_label(self, frame: Frame | None = None) -> str:
        """A few words on what the shown frame is, for the timeline.

        While a run streams in, what the model is doing ("reading the prompt",
        "generating", "paused"); once it ended, how it ended at the last frame
        ("done", "stopped") and what the shown frame is elsewhere.
        """
        frame = self.session.current_frame() if frame is None else frame
        if frame is None:
            return ""
        at_end = self.session.index == len(self.session) - 1
        if self.worker_state == PAUSED and at_end:
            return "paused"
        if self.worker_state == RUNNING and at_end:
            return "generating" if frame.is_generation else "reading the prompt"
        if self.state == REPLAYING:
            return "replaying"
        if at_end and self.end_reason and not self.active:
            return self.end_reason
        return "generated" if frame.is_generation else "prompt"

    def token_rate(self, now: float | None = None) -> float:
        """Frames per second arriving from the engine over the last two seconds."""
        if self.worker_state != RUNNING:
            return 0.0
        return events_per_second(self.frame_times, time.perf_counter() if now is None else now)

    # ------------------------------------------------------------ model
    def set_model(self, model: Model) -> None:
        """Run ``model`` from now on; the current run stops and the recording empties.

        The worker thread owns ``model`` from now on: it closes the model's
        engine when another model replaces it or the controller shuts down.
        """
        self.replay_timer.stop()
        self._run_id += 1
        self.engine_thread.set_model(model)
        self._model = model
        self.end_reason = ""
        self.session.new_recording(model.neurons)
        self._emit_state()

    # ------------------------------------------------------------ runs
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

        ``description`` says what they do, for the user (e.g. "group T4 silenced"). They
        are written to the state, the one copy runs start from.
        """
        self.session.state.set_next_interventions(tuple(interventions or ()), description)

    def start(self, prompt: str, settings: GenerationSettings, *, interventions: Any = (),
              states_dtype: str = "float16") -> bool:
        """Run ``prompt``, cancelling the current run; False (and a message) if it cannot start.

        Parameters
        ----------
        prompt
            The text to continue.
        settings
            Generation settings; a random seed is drawn here, so that the
            recording stores the seed the run uses.
        interventions
            Interventions for this run, in any form
            :meth:`~flyviz.record.runner.Model.resolve_interventions` accepts.
        states_dtype
            ``"float16"`` (the default) or ``"float32"``: how the recording
            stores the states (and how a saved recording carries them).

        Without ``interventions``, those set with :meth:`set_next_interventions`
        apply to this run, then are forgotten.
        """
        model = self._startable_model()
        if model is None:
            return False
        note = ""
        if not interventions and self.next_interventions:
            interventions, note = self.next_interventions, self.next_description
        try:
            settings = settings.validate()
            prompt_ids = encode_prompt(model.tokenizer, prompt,
                                       model.checkpoint.config.bos_token_id)
            resolved = model.resolve_interventions(interventions)
            recording = model.new_recording(prompt, settings, resolved,
                                            states_dtype=states_dtype)
        except FlyvizError as exc:
            self.message.emit(str(exc), True)
            return False
        if note:
            self.set_next_interventions(())
        self.replay_timer.stop()
        self._run_id += 1
        self.end_reason = ""
        self.session.replace(recording, cause=NEW_RUN)
        self.frame_times.clear()
        self.engine_thread.start(RunRequest(self._run_id, prompt, tuple(prompt_ids), settings,
                                            interventions=resolved or None))
        self.message.emit(f"running: {len(prompt_ids) - 1} prompt tokens, "
                          f"up to {settings.max_new_tokens} new"
                          + (f", {note}" if note else ""), False)
        self.run_started.emit(prompt)
        return True

    def toggle_play(self) -> bool:
        """Pause or resume the run, or replay a scrubbed-back recording.

        Returns False when there is nothing to pause, resume or replay (the
        window then runs the prompt).
        """
        if self.worker_state == RUNNING:
            self.engine_thread.pause()
        elif self.worker_state == PAUSED:
            self.session.go_live()
            self.engine_thread.resume()
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
        """One token forward; at the newest token of a paused run, step the model once."""
        self.stop_replay()
        at_end = self.session.index >= len(self.session) - 1
        if self.worker_state == RUNNING:
            self.engine_thread.pause()
        elif at_end and self.worker_state == PAUSED:
            self.session.go_live()
            self.engine_thread.step()
        else:
            self.session.step(+1)

    def step_back(self) -> None:
        """One token back (the run, if any, goes on)."""
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
        self.engine_thread.stop()

    def pause(self) -> None:
        """Pause the run (nothing happens when none is running)."""
        self.stop_replay()
        if self.worker_state == RUNNING:
            self.engine_thread.pause()

    def reset(self) -> None:
        """Stop and start over with an empty recording."""
        self.stop_replay()
        self._run_id += 1
        self.engine_thread.stop()
        self.end_reason = ""
        if self._model is not None:
            self.session.new_recording(self._model.neurons, cause=RESET)
        self._emit_state()

    def show_recording(self, recording: Recording) -> None:
        """Stop any run and show ``recording`` (an opened file) at its last frame."""
        self.stop_replay()
        self._run_id += 1
        self.engine_thread.stop()
        self.end_reason = "done"
        self.session.replace(recording)
        self._emit_state()

    def stop_replay(self) -> None:
        """Stop playing back a recording (runs are not affected)."""
        if self.replay_timer.isActive():
            self.replay_timer.stop()
            self._emit_state()

    def set_speed_cap(self, tokens_per_second: float) -> None:
        """Most tokens per second for runs and replays (``<= 0``: no limit, replay at 12/s)."""
        self.engine_thread.set_speed_cap(tokens_per_second)
        self._replay_rate = tokens_per_second if tokens_per_second > 0 else DEFAULT_REPLAY_RATE
        if self.replay_timer.isActive():
            self.replay_timer.setInterval(int(1000 / self._replay_rate))

    def shutdown(self) -> None:
        """Stop the replay, the run and the engine thread; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self.replay_timer.stop()
        self._run_id += 1
        self.engine_thread.close()

    # ------------------------------------------------------------ worker signals
    def _on_frame(self, run_id: int, frame: Frame) -> None:
        # Every frame taken from the queue frees a place, whether it is kept or not.
        self.engine_thread.frame_taken()
        if run_id != self._run_id or self._closed:
            return  # a frame of a cancelled run, still in the queue
        if frame.state.shape[0] != self.session.recording.neurons:
            return
        self.session.append(frame)
        self.frame_times.append(time.perf_counter())

    def _on_run_finished(self, run_id: int, reason: str) -> None:
        if run_id != self._run_id:
            return
        self.end_reason = reason
        self.run_ended.emit(reason, len(self.session))

    def _on_run_failed(self, run_id: int, message: str) -> None:
        if run_id != self._run_id:
            return
        self.end_reason = "failed"
        self.run_failed.emit(message)
        self.run_ended.emit("failed", len(self.session))

    def _startable_model(self) -> Model | None:
        """The model a new run can start on; ``None`` (said to the user) when there is none."""
        if self._closed:
            return None
        if self._model is None:
            self.message.emit("no model is loaded yet; wait for it or open one", True)
        return self._model

    def _attach(self, thread: EngineThread, on_frame: Callable[..., None],
                on_state: Callable[[str], None], niceness: int) -> EngineThread:
        """Connect an engine thread's worker to this controller (its frames, end, state)."""
        worker = thread.worker
        worker.frame_ready.connect(on_frame)
        worker.run_finished.connect(self._on_run_finished)
        worker.run_failed.connect(self._on_run_failed)
        worker.state_changed.connect(on_state)
        if niceness > 0:
            thread.lower_priority(niceness)
        return thread

    def _on_worker_state(self, state: str) -> None:
        self.worker_state = state
        self._emit_state()

    def _on_replay_tick(self) -> None:
        if self.session.index >= len(self.session) - 1:
            self.stop_replay()
            return
        self.session.step(+1)

    def _emit_state(self) -> None:
        self.state_changed.emit(self.state)
