"""How a run on Dask stays quiet: signals, log lines and warnings.

A corpus run (:mod:`flyviz.analysis.cluster`) that fails or is stopped says so
in one line of flyviz's own. Left alone, a local cluster would add lines of its
own before it: each worker process's KeyboardInterrupt traceback when Ctrl+C
in a terminal reaches the whole process group, a leaked-semaphore warning when
SIGTERM kills flyviz before it closes the cluster, and distributed's log lines
and warnings (a KilledWorker, a port in use). The pieces here prevent each.
"""

from __future__ import annotations

import threading
from typing import Any


class quiet_dask:
    """A context in which Dask's and distributed's log lines and warnings stay off stderr
    (flyviz says in one line what went wrong; theirs would come first)."""

    _LOGGERS = ("distributed", "dask", "tornado", "asyncio", "bokeh")

    def __enter__(self) -> "quiet_dask":
        import logging
        import warnings

        self._levels = [(logging.getLogger(n), logging.getLogger(n).level)
                        for n in self._LOGGERS]
        for logger, _ in self._levels:
            logger.setLevel(logging.CRITICAL + 1)
        self._warnings = warnings.catch_warnings()
        self._warnings.__enter__()
        warnings.filterwarnings("ignore", module=r"(distributed|dask|tornado|bokeh)(\..*)?$")
        return self

    def __exit__(self, *exc: Any) -> None:
        self._warnings.__exit__(*exc)
        for logger, level in self._levels:
            logger.setLevel(level)


class signals_ignored:
    """Ignore SIGINT and SIGTERM while the local worker processes are started.

    A spawned process inherits an ignored signal through ``exec``, and Python then
    leaves it ignored, so a Ctrl+C in the terminal (sent to the whole process group)
    never interrupts a worker halfway through its imports (a traceback each) or this
    process halfway through starting the cluster (a traceback at exit). The price: a
    Ctrl+C in those few seconds is dropped; the next one stops the run. Workers started
    later (replacing one that died) ignore them through
    :class:`~flyviz.analysis._worker_plugin.QuietWorkerSignals`.
    """

    def __enter__(self) -> None:
        import signal

        self._saved: list[tuple[int, Any]] = []
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in (signal.SIGINT, signal.SIGTERM):
            self._saved.append((signum, signal.signal(signum, signal.SIG_IGN)))

    def __exit__(self, *exc: Any) -> None:
        import signal

        for signum, handler in self._saved:
            signal.signal(signum, handler)


#: Set by the run's signal handlers: a Ctrl+C or SIGTERM arrived. The KeyboardInterrupt a
#: handler raises lands in whatever the main thread runs at that moment, and a library's
#: ``except BaseException`` there (a callback, a wait) can swallow it; the run's loop asks
#: :func:`raise_if_interrupted` between waits, so a stop is never lost.
_interrupt_requested = threading.Event()


def _interrupt(signum: int, frame: Any) -> None:
    _interrupt_requested.set()
    raise KeyboardInterrupt


def term_as_interrupt() -> Any:
    """Make SIGTERM stop a run as Ctrl+C does (the cluster is closed, finished chunks are
    kept, no semaphore leaks), and remember either signal for :func:`raise_if_interrupted`;
    return what to give :func:`restore_term` (None off the main thread).

    A SIGINT that the process was started with ignored (``nohup``) stays ignored."""
    import signal

    if threading.current_thread() is not threading.main_thread():
        return None
    _interrupt_requested.clear()
    saved = []
    try:
        saved.append((signal.SIGTERM, signal.signal(signal.SIGTERM, _interrupt)))
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            saved.append((signal.SIGINT, signal.signal(signal.SIGINT, _interrupt)))
    except (ValueError, OSError):  # pragma: no cover - no signals here
        pass
    return saved


def raise_if_interrupted() -> None:
    """Raise KeyboardInterrupt if a stop arrived since :func:`term_as_interrupt` (and was
    swallowed on its way)."""
    if _interrupt_requested.is_set():
        raise KeyboardInterrupt


def restore_term(previous: Any) -> None:
    """Put back the handlers :func:`term_as_interrupt` replaced."""
    import signal

    if previous is not None and threading.current_thread() is threading.main_thread():
        for signum, handler in previous:
            signal.signal(signum, handler)
        _interrupt_requested.clear()
