"""Runs of any kind of model, without Qt: what a run is given, and the one place it is stepped.

Every host starts a run the same way. A :class:`RunRequest` says what the run is given
(a prompt for the Fly LLM, a :class:`~flyviz.kinds.spiking.Stimulus` for the spiking
brain), its settings, interventions and options (``compare``: the Fly LLM's comparison with
the untouched run). A :class:`Run` checks it through the model's kind
(:meth:`~flyviz.kinds.ModelKind.prepare_run`: one line for a bad request, before anything
runs), holds the recording it fills, and steps it (:meth:`Run.stream` in the caller's thread,
:meth:`Run.staged_frames` on an engine's): it is the one place in flyviz (outside
``flyviz/kinds/``) that calls a kind's or a model's ``frames``
(``tests/test_architecture.py`` keeps it so).

A :class:`Runs` starts runs of the model a :class:`~flyviz.viewer.state.ViewerState`
shows (the state is the one owner of the loaded model) on an engine: the window's engine
thread (:class:`flyviz.app.runs.worker.EngineThread`), or a :class:`ThreadEngine` (a Python
thread: the notebook widget, napari, scripts). The engine steps the run between requests
(pause, resume, step, stop, a speed cap) and reports each frame; the controller tells the
state, so every view follows the run as it grows. A host asks the model's kind for the run
its state describes (:meth:`~flyviz.kinds.ModelKind.run_request`) and never which kind it is::

    state = ViewerState()
    state.set_model(flyviz.load("demo"))
    runs = Runs(state)
    runs.start(state.kind.run_request(state))   # the prompt and settings the state holds
    runs.wait()

    runs.record(RunRequest("Once upon a time"))      # or a request of its own, to the end

See ``docs/runs.md``.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

from psygnal import Signal, SignalGroup

from flyviz.errors import FlyvizError, InputError
from flyviz.kinds.request import RunRequest
from flyviz.record.recording import STATE_DTYPES, Recording

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.kinds import ModelKind
    from flyviz.record.frame import Frame
    from flyviz.viewer.state import ViewerState

__all__ = ["IDLE", "PAUSED", "RUNNING", "Run", "RunEngine", "RunEvents", "RunRequest", "Runs",
           "ThreadEngine", "request_for"]

#: What an engine is doing, as it reports it (:meth:`Runs.worker_changed`).
IDLE, RUNNING, PAUSED = "idle", "running", "paused"


class _Staging(Recording):
    """What a run stepped on another thread fills in place of its recording: its frames
    (and its untouched run's) queue here until the thread that shows the recording takes
    them (:meth:`Run.catch_up`), its spikes go to a log of their own; the metadata is the
    recording's own dict (the kind's entries, as it writes them)."""

    def __init__(self, shown: Recording) -> None:
        super().__init__(shown.neurons, None, states_dtype=str(shown.states_dtype))
        self.metadata = shown.metadata
        self.queue: deque[Frame] = deque()
        self.appended = 0
        #: The untouched run's frames, queued likewise (a comparison's).
        self.untouched = None if shown.baseline is None else _Staging(shown.baseline)
        self.baseline = self.untouched
        if shown.spikes is not None:
            from flyviz.record.spikes import SpikeLog

            self.spikes = SpikeLog(shown.spikes.tick_ms)

    def append(self, frame: "Frame") -> int:
        """Queue ``frame`` (in the run's thread); its index in the run."""
        self.queue.append(frame)
        self.appended += 1
        return self.appended - 1

    def __len__(self) -> int:
        return self.appended


class Run:
    """One run of ``model``, checked and ready to step: its request, recording and frames.

    Parameters
    ----------
    model
        A loaded model of any kind (:func:`flyviz.kinds.kind_of`).
    request
        What the run is given (default: the kind's defaults).

    Raises
    ------
    InputError
        For a request the model's kind refuses (:meth:`~flyviz.kinds.ModelKind.prepare_run`).
    """

    def __init__(self, model: Any, request: RunRequest | None = None) -> None:
        from flyviz.arguments import choice, shown
        from flyviz.kinds import kind_of

        # docs/runs.md promises one InputError line for a bad request, before anything runs:
        # a wrong dtype reached the recording as a ValueError, another object an AttributeError.
        if request is not None and not isinstance(request, RunRequest):
            raise InputError(f"a run's request is a flyviz.runs.RunRequest (or None), "
                             f"not {shown(request)}")
        if request is not None:
            choice("the request's states_dtype", request.states_dtype, STATE_DTYPES,
                   none="the kind's default")
        self.model = model
        self.kind: ModelKind = kind_of(model)
        #: The request as the kind checked it (its settings validated, a seed drawn).
        self.request, self.recording = self.kind.prepare_run(model, request or RunRequest())
        self._staging: _Staging | None = None

    def stream(self, keep: bool = True) -> Iterator["Frame"]:
        """Step the run in this thread: its frames, each appended to :attr:`recording` (with
        whatever the kind keeps beside it) before it is yielded (``keep=False``: not kept,
        for a caller that reads each frame once); stop iterating, or ``close()`` the
        iterator, to stop between two frames."""
        return self._frames(self.recording if keep else None)

    def staged_frames(self) -> Iterator["Frame"]:
        """Step the run on an engine's thread while another thread shows :attr:`recording`:
        the frames, each recorded in a staging area that :meth:`catch_up` (on the showing
        thread) moves into the recording, so that no view ever reads it half-grown."""
        self._staging = _Staging(self.recording)
        return self._frames(self._staging)

    def _frames(self, recording: Recording | None) -> Iterator["Frame"]:
        # The one call of a kind's frames in flyviz outside flyviz/kinds/.
        request = self.request
        options = {"compare": request.compare} if request.compare else {}
        return self.kind.frames(self.model, request.given, request.settings,
                                interventions=request.interventions or (),
                                recording=recording, **options)

    def catch_up(self, append: Callable[["Frame"], Any] | None = None) -> int:
        """Move what the engine recorded since the last call (:meth:`staged_frames`) into
        :attr:`recording`: the untouched run's frames, the spikes, then the frames, each
        through ``append`` (default: the recording's; a viewer state's ``append`` tells its
        views). Returns the frames moved. Call it on the thread that shows the recording."""
        staging = self._staging
        if staging is None:
            return 0
        shown = self.recording
        if staging.untouched is not None and shown.baseline is not None:
            while staging.untouched.queue:
                shown.baseline.append(staging.untouched.queue.popleft())
        count = len(staging.queue)
        if staging.spikes is not None and shown.spikes is not None:
            log = staging.spikes.snapshot()
            start, stop = len(shown.spikes), min(len(shown) + count, len(log))
            if stop > start:
                first, _last = log.span(start, stop)
                ends = log.frame_ends()[start:stop] - first
                shown.spikes.append_frames(*log.arrays(start, stop), ends)
        add = append or shown.append
        moved = 0
        while moved < count and staging.queue:   # a view told of a frame may catch up too
            add(staging.queue.popleft())
            moved += 1
        return moved

    def record(self, on_frame: Callable[["Frame"], Any] | None = None, *,
               keep: bool = True) -> Recording:
        """Run to the end in this thread (``on_frame`` sees each frame); the recording
        (empty with ``keep=False``: the frames were not kept)."""
        for frame in self.stream(keep):
            if on_frame is not None:
                on_frame(frame)
        return self.recording

    def describe(self) -> str:
        """What is starting, in a few words for a status line."""
        request = self.request
        words = f"running the {self.kind.title or self.kind.key}"
        if request.compare:
            words = f"comparing with the untouched run ({request.compare})"
        return words + (f", {request.note}" if request.note else "")


def request_for(model: Any, given: Any = None, *, kind_settings: Any = None,
                **run: Any) -> RunRequest:
    """The run a fresh viewer state of ``model`` describes (its kind reads it:
    :meth:`~flyviz.kinds.ModelKind.run_request`), given ``given`` (what the run reads; ``None``:
    the kind's default), with the state's run settings ``run`` set first (``max_new_tokens=``,
    ``seed=``...: :class:`~flyviz.viewer.settings.RunSettings`' fields, which a kind reads
    or not) and the kind's own run settings ``kind_settings`` (a mapping of their fields: a
    spiking brain's ``excite`` and ``bins``, what the window's Stimulus dock sets:
    :class:`~flyviz.kinds.spiking.SpikingRunSettings`). ``InputError`` for a setting out of
    range, or one the kind's runs do not have."""
    import dataclasses

    from flyviz.viewer.state import ViewerState

    described = ViewerState()
    described.set_model(model)
    for name, value in run.items():
        if value is not None:
            setattr(described.run, name, value)
    if kind_settings:
        own = described.kind_settings.of(described.kind)
        fields = {field.name for field in dataclasses.fields(own)} \
            if dataclasses.is_dataclass(own) else set()
        for name, value in dict(kind_settings).items():
            if name not in fields:
                raise InputError(f"a {described.kind.title}'s run has no setting {name!r}")
            if value is not None:
                setattr(own, name, value)
    request = described.kind.run_request(described)
    return request if given is None else dataclasses.replace(request, given=given)


class RunEngine(Protocol):
    """What steps a :class:`Runs`'s runs (the window's engine thread, a
    :class:`ThreadEngine`). Every request returns at once; the engine reports to the
    controller, in the controller's thread, through :meth:`Runs.frame_arrived`,
    :meth:`~Runs.run_finished`, :meth:`~Runs.run_failed` and
    :meth:`~Runs.worker_changed`."""

    def start(self, run_id: int, run: Run) -> None:
        """Stop the current run and step ``run`` (paused first if its request says so)."""

    def pause(self) -> None:
        """Stop stepping; the run can resume."""

    def resume(self) -> None:
        """Step a paused run again."""

    def step(self) -> None:
        """One more frame, then stay paused."""

    def stop(self) -> None:
        """End the current run (its frames stay recorded)."""

    def set_speed_cap(self, frames_per_second: float) -> None:
        """At most this many frames per second (``<= 0``: as fast as it goes)."""

    def set_model(self, model: Any) -> None:
        """A new model: the current run stops and the engine releases the previous one."""

    def close(self) -> Any:
        """Stop and release everything."""


class RunEvents(SignalGroup):
    """What a :class:`Runs` reports (psygnal, emitted in the controller's thread)."""

    #: What the engine does: :data:`IDLE`, :data:`RUNNING` or :data:`PAUSED`.
    worker = Signal(str)
    #: A run was handed to the engine (:class:`Run`).
    started = Signal(object)
    #: A frame of the current run was recorded: the recording's length.
    frame = Signal(int)
    #: The run ended: ``"done"``, ``"stopped"`` or ``"failed"``, and its frames.
    ended = Signal(str, int)
    #: The run could not continue: one line for the user.
    failed = Signal(str)
    #: Something to tell the user, and whether it went wrong.
    message = Signal(str, bool)


class Runs:
    """Starts runs of the model ``state`` shows, on ``engine``, and keeps the state following.

    Parameters
    ----------
    state
        The :class:`~flyviz.viewer.state.ViewerState` whose model runs (its ``model``: the
        one owner of the loaded model) and whose recording each run fills (default: a new
        one).
    engine
        What steps the runs (default: a :class:`ThreadEngine` reporting from its thread).

    Attributes
    ----------
    run
        The current (or last) :class:`Run`, or ``None``.
    worker_state
        What the engine reported last (:data:`IDLE`, :data:`RUNNING`, :data:`PAUSED`).
    end_reason
        Why the last run ended (``""`` while one is under way or before the first).
    compute_seconds
        The engine's time spent stepping the current run so far.
    """

    def __init__(self, state: "ViewerState | None" = None,
                 engine: RunEngine | None = None) -> None:
        if state is None:
            from flyviz.viewer.state import ViewerState

            state = ViewerState()
        self.state = state
        self.events = RunEvents()
        self.engine: RunEngine = engine if engine is not None else ThreadEngine(self)
        self.run: Run | None = None
        self.worker_state = IDLE
        self.end_reason = ""
        self.compute_seconds = 0.0
        self.run_id = 0
        self._closed = False

    # ------------------------------------------------------------ the model
    @property
    def model(self) -> Any:
        """The model runs start on: the state's."""
        return self.state.model

    @property
    def active(self) -> bool:
        """True while the engine holds a run (running or paused)."""
        return self.worker_state != IDLE

    def set_model(self, model: Any) -> None:
        """Runs start on ``model`` from now on (shown by the state, if it is not yet): the
        current run stops and the engine releases the previous model."""
        self.run_id += 1
        self.run = None
        self.end_reason = ""
        if self.state.model is not model:
            self.state.set_model(model)
        self.engine.set_model(model)

    # ------------------------------------------------------------ runs
    def request(self) -> RunRequest:
        """The run the state describes, as the shown model's kind reads it
        (:meth:`~flyviz.kinds.ModelKind.run_request`)."""
        return self.state.kind.run_request(self.state)

    def speed_cap(self) -> float:
        """The most frames per second the state's settings allow (the kind's
        :meth:`~flyviz.kinds.ModelKind.speed_cap`)."""
        return self.state.kind.speed_cap(self.state)

    def apply_speed_cap(self, *_: Any) -> None:
        """Give the engine the speed cap the state's settings say now."""
        self.engine.set_speed_cap(self.speed_cap())

    def prepare(self, request: RunRequest | None = None) -> Run:
        """A :class:`Run` of the state's model on ``request`` (default: :meth:`request`),
        checked; nothing starts. ``InputError`` when there is no model or the kind refuses."""
        if self.state.model is None:
            raise InputError("no model is loaded yet; wait for it or open one")
        return Run(self.state.model, self.request() if request is None else request)

    def start(self, request: RunRequest | None = None) -> Run | None:
        """Start ``request`` (default: the run the state describes), cancelling the current
        run: its recording becomes the state's and fills as the engine steps. ``None``,
        said through ``events.message``, when it cannot start."""
        if self._closed:
            return None
        try:
            run = self.prepare(request)
        except FlyvizError as exc:
            self.events.message.emit(str(exc), True)
            return None
        self.launch(run)
        return run

    def launch(self, run: Run) -> None:
        """Show ``run``'s recording (a new run, to the state's parts) and hand the run to
        the engine."""
        from flyviz.viewer.parts import NEW_RUN

        self.run_id += 1
        self.run = run
        self.end_reason = ""
        self.compute_seconds = 0.0
        self.state.set_recording(run.recording, cause=NEW_RUN)   # parts answer a new run
        if run.request.note and run.request.note == self.state.next_description:
            self.state.set_next_interventions(())     # they were for this run only
        self.apply_speed_cap()
        self.engine.start(self.run_id, run)
        self.events.message.emit(run.describe(), False)
        self.events.started.emit(run)

    def pause(self) -> None:
        """Pause the run."""
        self.engine.pause()

    def resume(self) -> None:
        """Resume a paused run."""
        self.engine.resume()

    def step(self) -> None:
        """One more frame of a paused run."""
        self.engine.step()

    def stop(self) -> None:
        """End the run; its frames stay for scrubbing and saving."""
        self.engine.stop()

    def forget(self) -> None:
        """Stop the run and drop what is still on its way (a reset, another recording)."""
        self.run_id += 1
        self.end_reason = ""
        self.engine.stop()

    def record(self, request: RunRequest | None = None) -> "Recording":
        """Run ``request`` to the end and return its recording (``InputError`` when it
        cannot start, :class:`~flyviz.errors.FlyvizError` when it fails)."""
        run = self.prepare(request)
        failures: list[str] = []
        self.events.failed.connect(failures.append)
        try:
            self.launch(run)
            self.wait()
        finally:
            self.events.failed.disconnect(failures.append)
        if failures:
            raise FlyvizError(failures[0])
        return run.recording

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the current run to end (engines that can wait); True when it ended."""
        waiter = getattr(self.engine, "wait", None)
        return True if waiter is None else bool(waiter(timeout))

    def close(self) -> None:
        """Stop the run and the engine; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self.run_id += 1
        self.engine.close()

    # ------------------------------------------------------------ what the engine reports
    def frame_arrived(self, run_id: int, frame: "Frame", compute_s: float = 0.0) -> bool:
        """A frame of run ``run_id`` was recorded (in the engine's thread): move what the run
        recorded into the state's recording (:meth:`Run.catch_up`, which tells the views),
        when it is the current run's and its recording is shown. True then."""
        run = self.run
        if run_id != self.run_id or self._closed or run is None or \
                self.state.recording is not run.recording:
            return False          # a cancelled run's frame, or another recording shown
        self.compute_seconds += float(compute_s)
        if run.catch_up(self.state.append):
            self.events.frame.emit(len(run.recording))
        return True

    def _catch_up(self) -> None:
        run = self.run
        if run is not None and self.state.recording is run.recording:
            run.catch_up(self.state.append)

    def run_finished(self, run_id: int, reason: str) -> None:
        """Run ``run_id`` ended (``"done"``, ``"stopped"``)."""
        if run_id == self.run_id and self.run is not None:
            self._catch_up()      # what it recorded with no frame of its own (free mode's end)
            self.end_reason = reason
            self.events.ended.emit(reason, len(self.run.recording))

    def run_failed(self, run_id: int, message: str) -> None:
        """Run ``run_id`` could not continue."""
        if run_id == self.run_id:
            self._catch_up()
            self.end_reason = "failed"
            self.events.failed.emit(message)
            self.events.ended.emit("failed", 0 if self.run is None else len(self.run.recording))

    def worker_changed(self, state: str) -> None:
        """The engine is now :data:`IDLE`, :data:`RUNNING` or :data:`PAUSED`."""
        self.worker_state = state
        self.events.worker.emit(state)


def step_frames(frames: Iterator["Frame"]) -> "tuple[Frame | None, float, str]":
    """The next frame of ``frames``, the seconds it took, and ``""``; at the end ``None``;
    when the run fails, ``None`` and one line saying why (never an exception: the engines
    report it and go on)."""
    import logging

    start = time.perf_counter()
    try:
        frame = next(frames)
    except StopIteration:
        return None, time.perf_counter() - start, ""
    except FlyvizError as exc:
        return None, 0.0, str(exc) or type(exc).__name__
    except Exception as exc:  # noqa: BLE001 - a bug: say so (with its traceback in the log)
        logging.getLogger(__name__).exception("the model stopped with an unexpected error")
        return None, 0.0, f"the model stopped with an unexpected error: {type(exc).__name__}: {exc}"
    return frame, time.perf_counter() - start, ""


#: The :class:`ThreadEngine` s with a run, stopped when the interpreter begins to exit.
_RUNNING_ENGINES: "weakref.WeakSet[ThreadEngine]" = weakref.WeakSet()
_exit_hook_registered = False


def _stop_engines_at_exit() -> None:
    """Stop every thread engine's run while the interpreter is still whole.

    A run still going when a script ends (``BrainWidget.live`` in a plain script) would
    otherwise step on after the engines' thread pools were shut down, fail with "cannot
    schedule new futures after shutdown" and print a traceback at exit: the interpreter
    ending is a stop, not an error."""
    for engine in list(_RUNNING_ENGINES):
        engine.stop()


def _register_exit_hook() -> None:
    """Stop the runs at exit before :mod:`concurrent.futures` shuts its pools down.

    Both use the hook :mod:`threading` runs first at exit, newest first; importing
    :mod:`concurrent.futures.thread` here registers its hook before this one, so this
    one runs before it. (``atexit`` would run after it, too late.)"""
    global _exit_hook_registered
    if _exit_hook_registered:
        return
    import atexit
    import concurrent.futures.thread  # noqa: F401 - its exit hook first, see above

    register = getattr(threading, "_register_atexit", None)
    try:
        if register is None:
            raise RuntimeError("no threading exit hook")
        register(_stop_engines_at_exit)
    except RuntimeError:  # none in this Python, or already shutting down
        atexit.register(_stop_engines_at_exit)
    _exit_hook_registered = True


class ThreadEngine:
    """Steps a :class:`Runs`'s runs on a Python thread (no Qt: notebooks, napari,
    scripts), one run at a time, with pause, step, stop and a speed cap. A run still
    going when the interpreter exits is stopped, as :meth:`stop` stops it.

    Parameters
    ----------
    controller
        Where it reports.
    deliver
        How a report reaches the controller's thread: ``deliver(callback, *args)``
        (default: called in the engine's thread; a notebook passes its event loop's
        ``call_soon_threadsafe``).
    """

    def __init__(self, controller: Runs,
                 deliver: Callable[..., Any] | None = None) -> None:
        self.controller = controller
        self.deliver = deliver or (lambda callback, *args: callback(*args))
        self._lock = threading.Condition()
        self._thread: threading.Thread | None = None
        self._cancel: threading.Event | None = None
        self._paused = False
        self._steps = 0
        self._interval = 0.0

    @property
    def thread(self) -> threading.Thread | None:
        """The thread of the current (or last) run."""
        return self._thread

    def _report(self, callback: Callable[..., Any], *args: Any) -> None:
        self.deliver(callback, *args)

    def start(self, run_id: int, run: Run) -> None:
        self.stop()
        cancel = threading.Event()
        with self._lock:
            self._cancel, self._paused, self._steps = cancel, run.request.start_paused, 0
        thread = threading.Thread(target=self._loop, args=(run_id, run, cancel),
                                  name="flyviz-run", daemon=True)
        self._thread = thread
        _register_exit_hook()
        _RUNNING_ENGINES.add(self)
        thread.start()

    def _loop(self, run_id: int, run: Run, cancel: threading.Event) -> None:
        c = self.controller
        frames = run.staged_frames()
        self._report(c.worker_changed, PAUSED if self._paused else RUNNING)
        reason, message = "done", ""
        try:
            while True:
                with self._lock:
                    while self._paused and not self._steps and not cancel.is_set():
                        self._lock.wait()
                    if cancel.is_set():
                        reason = "stopped"
                        break
                    stepping = self._paused
                    if stepping:
                        self._steps -= 1
                    interval = self._interval
                began = time.perf_counter()
                frame, seconds, message = step_frames(frames)
                if frame is None:
                    break
                self._report(c.frame_arrived, run_id, frame, seconds)
                if stepping:
                    self._report(c.worker_changed, PAUSED)
                wait = interval - (time.perf_counter() - began)
                if wait > 0 and cancel.wait(wait):
                    reason = "stopped"
                    break
        finally:
            close = getattr(frames, "close", None)
            if close is not None:
                close()
        if message:
            self._report(c.run_failed, run_id, message)
        else:
            self._report(c.run_finished, run_id, reason)
        self._report(c.worker_changed, IDLE)

    def pause(self) -> None:
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                self._paused = True
                self._report(self.controller.worker_changed, PAUSED)

    def resume(self) -> None:
        with self._lock:
            if self._paused:
                self._paused = False
                self._lock.notify_all()
                self._report(self.controller.worker_changed, RUNNING)

    def step(self) -> None:
        with self._lock:
            self._paused = True
            self._steps += 1
            self._lock.notify_all()

    def stop(self) -> None:
        thread, cancel = self._thread, self._cancel
        if cancel is not None:
            with self._lock:
                cancel.set()
                self._lock.notify_all()
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        self._thread = None

    def set_speed_cap(self, frames_per_second: float) -> None:
        with self._lock:
            self._interval = 0.0 if frames_per_second <= 0 else 1.0 / float(frames_per_second)

    def set_model(self, model: Any) -> None:
        self.stop()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the run to end; True when it did."""
        thread = self._thread
        if thread is None:
            return True
        thread.join(timeout)
        return not thread.is_alive()

    def close(self) -> bool:
        self.stop()
        return True
