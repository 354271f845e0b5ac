"""Opening files off the UI thread: one call per purpose, only the newest one reported.

Opening an atlas or a lesion map reads metadata from disk, checks the model's
digests and builds lookup tables: tens to hundreds of milliseconds that must
not freeze the window. :class:`BackgroundCalls` runs such a call in a helper
thread and hands its result (or a one-line error) back on the UI thread. A
newer call for the same purpose makes the older one's result stale: it is
dropped when it arrives, so the user always sees what they asked for last.

Every background shutdown in the app waits through :func:`join_thread` or
:func:`wait_qthread`: at most :data:`JOIN_TIMEOUT_S`, then the thread is
logged as left running (and kept referenced, so Qt never destroys a running
thread) instead of hanging the window's close.
"""

from __future__ import annotations

import logging
import threading
import traceback
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, QThread, Signal

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
