"""Opening files off the UI thread: one call per purpose, only the newest one reported.

Opening an atlas or a lesion map reads metadata from disk, checks the model's
digests and builds lookup tables: tens to hundreds of milliseconds that must
not freeze the window. :class:`BackgroundCalls` runs such a call in a helper
thread and hands its result (or a one-line error) back on the UI thread. A
newer call for the same purpose makes the older one's result stale: it is
dropped when it arrives, so the user always sees what they asked for last.

A computation the user starts and may cancel (a trace, an estimate) is a
:class:`BackgroundJob`: one purpose of those calls with a stop flag, a
progress bar and Cancel in its dock, and one outcome reported. A feature whose
dock runs one is a :class:`JobFeature`. Esc (Run → Stop) cancels every such job running,
whichever dock started it: :meth:`BackgroundCalls.cancel_jobs`, the one place it is wired.

Every background shutdown in the app waits through :func:`join_thread` or
:func:`wait_qthread`: at most :data:`JOIN_TIMEOUT_S`, then the thread is
logged as left running (and kept referenced, so Qt never destroys a running
thread) instead of hanging the window's close.
"""

from __future__ import annotations

import logging
import threading
import traceback
import weakref
from collections.abc import Callable
from typing import Any, Protocol

from PySide6.QtCore import QEvent, QObject, QThread, Signal
from PySide6.QtWidgets import QProgressBar

from flyviz.model.errors import FlyvizError

log = logging.getLogger(__name__)

#: Longest wait for one background thread when the window closes (s). Loading a model or
#: building its graph index cannot be interrupted; past this the close goes on without it.
JOIN_TIMEOUT_S = 30.0

#: Threads a shutdown gave up waiting for, kept referenced until the process ends.
LEFT_RUNNING: list[Any] = []


def join_thread(thread: threading.Thread, what: str, timeout_s: float = JOIN_TIMEOUT_S) -> bool:
    """Wait for ``thread`` at most ``timeout_s``; False (and a warning) if it is still running."""
    thread.join(timeout_s)
    if thread.is_alive():
        log.warning("%s (thread %s) still runs after %.0f s; closing without it",
                    what, thread.name, timeout_s)
        LEFT_RUNNING.append(thread)
        return False
    return True


def wait_qthread(thread: QThread, what: str, timeout_s: float = JOIN_TIMEOUT_S) -> bool:
    """Wait for ``thread`` at most ``timeout_s``; False (and a warning) if it is still running.

    A thread still running is detached from its parent and kept referenced:
    a QThread destroyed while it runs aborts the process.
    """
    if thread.wait(int(timeout_s * 1000)):
        return True
    log.warning("%s still runs after %.0f s; closing without it", what, timeout_s)
    thread.setParent(None)
    LEFT_RUNNING.append(thread)
    return False


def one_line_error(exc: BaseException) -> str:
    """What to tell the user about ``exc``: a :class:`FlyvizError`'s own line, else its type."""
    if isinstance(exc, FlyvizError):
        return str(exc)
    if isinstance(exc, MemoryError):
        return "out of memory; close other programs and try again"
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:200]}" if text else type(exc).__name__


class Cancelled(Exception):
    """Raised inside a background computation when the user pressed Cancel."""


class CancellableProgress:
    """A progress sink for :func:`flyviz.analysis.cluster.run_tree` (in place of its
    :class:`~flyviz.analysis.cluster.ProgressBar`) that a Cancel button can stop.

    ``report(fraction)`` gets how far the run is (from the helper thread); once
    ``stop`` is set, the next report raises :class:`Cancelled`, which ends the
    run there (a task reports after every step or window).
    """

    def __init__(self, total: int, stop: threading.Event,
                 report: Callable[[float], None]) -> None:
        self.total = max(1, int(total))
        self.stop = stop
        self.report = report

    def update(self, done: int, force: bool = False) -> None:
        """``done`` of :attr:`total` units are done (``force`` as for the progress bar)."""
        if self.stop.is_set():
            raise Cancelled
        self.report(min(1.0, done / self.total))


class BackgroundCalls(QObject):
    """Runs ``work()`` in helper threads; results come back on the UI thread.

    Parameters
    ----------
    parent
        Owner (the window); call :meth:`shutdown` before it goes.
    """

    _finished = Signal(object)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._serial: dict[str, int] = {}
        self._threads: list[threading.Thread] = []
        self._callbacks: dict[tuple[str, int], tuple[Callable, Callable]] = {}
        self._closed = False
        #: The jobs the user may cancel (:class:`BackgroundJob`), which Esc cancels.
        self._jobs: weakref.WeakSet[BackgroundJob] = weakref.WeakSet()
        self._finished.connect(self._deliver)

    def run(self, purpose: str, work: Callable[[], Any], done: Callable[[Any], None],
            failed: Callable[[str], None]) -> None:
        """Start ``work()``; later ``done(result)`` or ``failed(message)`` on the UI thread.

        An earlier call with the same ``purpose`` that has not finished is
        forgotten: its result or error is never reported.
        """
        if self._closed:
            return
        serial = self._serial.get(purpose, 0) + 1
        self._serial[purpose] = serial
        self._callbacks = {k: v for k, v in self._callbacks.items() if k[0] != purpose}
        self._callbacks[(purpose, serial)] = (done, failed)

        def call() -> None:
            try:
                outcome = (True, work())
            except Exception as exc:  # every failure becomes a message, never a crash
                if not isinstance(exc, (FlyvizError, MemoryError)):
                    traceback.print_exc()
                outcome = (False, one_line_error(exc))
            if not self._closed:
                self._finished.emit((purpose, serial, *outcome))

        thread = threading.Thread(target=call, name=f"flyviz-open-{purpose}", daemon=True)
        self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()

    def cancel(self, purpose: str) -> None:
        """Forget the pending call for ``purpose`` (its outcome is dropped)."""
        self._serial[purpose] = self._serial.get(purpose, 0) + 1
        self._callbacks = {k: v for k, v in self._callbacks.items() if k[0] != purpose}

    def busy(self, purpose: str) -> bool:
        """True while a call for ``purpose`` has not reported yet."""
        return (purpose, self._serial.get(purpose, 0)) in self._callbacks

    def add_job(self, job: BackgroundJob) -> None:
        """Let :meth:`cancel_jobs` cancel ``job`` (kept as long as its owner keeps it)."""
        self._jobs.add(job)

    def cancel_jobs(self) -> int:
        """Cancel every job the user may cancel that is running, as its Cancel button does
        (Esc, Run → Stop: a keyboard user stops a long computation without a Tab to its
        dock's Cancel); how many were running."""
        running = [job for job in list(self._jobs) if job.busy]
        for job in running:
            job.cancel()
        return len(running)

    def shutdown(self) -> None:
        """Drop every pending outcome and wait for the helper threads; safe to call twice."""
        self._closed = True
        self._callbacks.clear()
        for thread in self._threads:
            join_thread(thread, "a background call")
        self._threads = []

    def _deliver(self, outcome: tuple[str, int, bool, Any]) -> None:
        purpose, serial, ok, value = outcome
        callbacks = self._callbacks.pop((purpose, serial), None)
        if callbacks is None or self._closed:
            return
        done, failed = callbacks
        (done if ok else failed)(value)


class BusyView(Protocol):
    """The part of a dock that shows a job running: its progress bar and ``set_busy``
    (which shows the bar and Cancel, and holds the start button, while it runs)."""

    progress: QProgressBar

    def set_busy(self, busy: bool) -> None: ...


class BackgroundJob(QObject):
    """One cancellable computation of a feature: off the UI thread through
    :class:`BackgroundCalls`, with its progress in ``view``'s bar and Cancel.

    :meth:`start` runs ``work(stop, report)`` in a helper thread: ``work`` calls
    ``report(fraction)`` as it goes (the bar follows, on the UI thread) and ends
    early, returning ``None``, once ``stop`` is set. ``view`` is shown busy from
    the start to the outcome, whichever it is. The window's close sets ``stop``
    (the close waits for background calls, so a long job must end first).

    Parameters
    ----------
    calls
        Where it runs.
    purpose
        Its :class:`BackgroundCalls` purpose (one job at a time per purpose).
    view
        The dock's progress bar and busy state.
    parent
        Owner (the feature).
    window
        The window whose close stops the job (``None``: none).
    user_cancels
        Esc (Run → Stop, :meth:`BackgroundCalls.cancel_jobs`) cancels it, as the Cancel of
        its dock does; False for a job with no Cancel (opening a file).

    Signals
    -------
    progressed(fraction)
        How far it is (0..1), on the UI thread.
    finished(result)
        ``work`` returned ``result`` (not ``None``).
    cancelled()
        Cancel stopped it (or ``work`` returned ``None``).
    failed(message)
        ``work`` raised (one line).
    """

    progressed = Signal(float)
    finished = Signal(object)
    cancelled = Signal()
    failed = Signal(str)

    def __init__(self, calls: BackgroundCalls, purpose: str, view: BusyView,
                 parent: QObject | None = None, window: QObject | None = None,
                 user_cancels: bool = True) -> None:
        super().__init__(parent)
        self._calls = calls
        if user_cancels:
            calls.add_job(self)
        self.purpose = purpose
        self.view = view
        self._stop: threading.Event | None = None
        #: Set while a job's thread runs (what it uses must not be closed under it).
        self.running = threading.Event()
        self.progressed.connect(self._on_progress)
        if window is not None:
            window.installEventFilter(self)

    @property
    def busy(self) -> bool:
        """True while a job has not reported."""
        return self._calls.busy(self.purpose)

    def start(self, work: Callable[[threading.Event, Callable[[float], None]], Any]) -> None:
        """Run ``work(stop, report)`` off the UI thread (a job going on is dropped first)."""
        self.cancel(quiet=True)
        stop = threading.Event()
        self._stop = stop
        running = self.running
        running.set()
        report = self.progressed.emit

        def call() -> Any:
            try:
                return work(stop, report)
            finally:
                running.clear()

        self.view.set_busy(True)
        self._calls.run(self.purpose, call, self._done, self._failed)

    def stop(self) -> None:
        """Ask the job going on to end (its outcome is still reported)."""
        if self._stop is not None:
            self._stop.set()

    def cancel(self, quiet: bool = False) -> None:
        """Stop the job going on; its outcome is dropped (``quiet``: no :attr:`cancelled`)."""
        self.stop()
        if self.busy:
            self._calls.cancel(self.purpose)
            self.view.set_busy(False)
            if not quiet:
                self.cancelled.emit()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt API
        if event.type() == QEvent.Type.Close:
            self.stop()
        return False

    def _on_progress(self, fraction: float) -> None:
        if self.busy:
            self.view.progress.setValue(int(round(100 * fraction)))

    def _done(self, result: Any) -> None:
        self.view.set_busy(False)
        if result is None:
            self.cancelled.emit()
        else:
            self.finished.emit(result)

    def _failed(self, message: str) -> None:
        self.view.set_busy(False)
        self.failed.emit(message)


class JobFeature(QObject):
    """A feature whose dock runs one cancellable computation at a time (its :attr:`job`):
    what the Why?, Patching and Circuit docks share. Busy while it runs, Cancel, a start
    refused (or a computation failed) in one line in the dock and the status bar, and a
    cancel said in both.

    A subclass calls :meth:`install_job` once its dock's view exists, says how its lines
    read (:attr:`refused_prefix`, :attr:`cancelled_words`) and shows a line in its dock
    with :meth:`say`.

    Parameters
    ----------
    host
        The window host (the feature's parent is its window).

    Signals
    -------
    cancelled()
        Cancel stopped the computation.
    """

    cancelled = Signal()
    #: The status bar's words before a refusal or a failure ("cannot trace: ...").
    refused_prefix = "cannot run"
    #: What is said once cancelled: ``(in the dock, in the status bar)``.
    cancelled_words = ("cancelled", "cancelled")

    def __init__(self, host: Any) -> None:
        super().__init__(host.widget())
        self.host = host
        self.job: BackgroundJob

    def install_job(self, purpose: str, view: BusyView, done: Callable[[Any], None]) -> None:
        """Make :attr:`job` (of ``purpose``, its progress and Cancel in ``view``; the
        window's close stops it), whose result goes to ``done``."""
        self.job = BackgroundJob(self.host.background, purpose, view, self, self.host.widget())
        self.job.finished.connect(done)
        self.job.cancelled.connect(self._on_cancelled)
        self.job.failed.connect(self._refuse)

    @property
    def busy(self) -> bool:
        """True while the computation runs."""
        return self.job.busy

    def cancel(self) -> None:
        """Stop the computation going on (its thread ends at its next progress report; a
        result that still comes is dropped)."""
        self.job.cancel()

    def say(self, line: str, error: bool = False) -> None:
        """Show ``line`` in the dock (red for a problem)."""
        raise NotImplementedError

    def _refuse(self, message: str) -> bool:
        """Say why the computation cannot start (or failed), in the dock and the status
        bar; False, for a start to return."""
        self.say(message, error=True)
        self.host.show_message(f"{self.refused_prefix}: {message}", error=True)
        return False

    def _on_cancelled(self) -> None:
        in_dock, in_status = self.cancelled_words
        self.say(in_dock)
        self.host.show_message(in_status)
        self.cancelled.emit()


class ModelFileController(QObject):
    """The open file of one kind that belongs to the loaded model (an atlas, a lesion map).

    Opening runs off the UI thread through :class:`BackgroundCalls`; a result
    that arrives after the model changed is dropped, since it was checked
    against the previous model. Subclasses set :attr:`PURPOSE` and
    :attr:`NO_MODEL`, implement :meth:`read`, declare their own ``failed``
    signal and call :meth:`open_file` with how a failure is reported.

    Parameters
    ----------
    calls
        Where the opening runs (off the UI thread).
    checkpoint
        ``checkpoint()``: the loaded model (``None`` before one is loaded).

    Signals
    -------
    opened(item)
        A file is open (it was made with the loaded model).
    closed(note)
        No file is open any more (``note``: why, or ``""``).
    """

    opened = Signal(object)
    closed = Signal(str)

    #: The :class:`BackgroundCalls` purpose (one open at a time per kind).
    PURPOSE = ""
    #: What the user is told when no model is loaded yet.
    NO_MODEL = ""

    def __init__(self, calls: BackgroundCalls, checkpoint: Callable[[], Any],
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._calls = calls
        self._checkpoint = checkpoint
        self.current: Any = None

    def read(self, path: Any, checkpoint: Any) -> Any:
        """Open ``path`` and check it against ``checkpoint`` (runs off the UI thread)."""
        raise NotImplementedError

    def open_file(self, path: Any, failed: Callable[[str], None]) -> None:
        """Open ``path`` for the loaded model: :attr:`opened`, or ``failed(message)``."""
        checkpoint = self._checkpoint()
        if checkpoint is None:
            failed(self.NO_MODEL)
            return

        def done(item: Any) -> None:
            if checkpoint is not self._checkpoint():
                return                      # the model changed meanwhile: not its file
            self.current = item
            self.opened.emit(item)

        self._calls.run(self.PURPOSE, lambda: self.read(path, checkpoint), done, failed)

    def close(self, note: str = "") -> None:
        """Close the file (and forget one being opened)."""
        self._calls.cancel(self.PURPOSE)
        if self.current is not None:
            self.current = None
            self.closed.emit(note)
