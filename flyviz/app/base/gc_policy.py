"""The app's one garbage-collection policy, set at app entry: collect on the UI thread only.

The engine, the loaders and the exports run in worker threads. A cyclic
garbage collection that Python starts in one of them (at any allocation) and
that frees a Qt object aborts the process: Qt objects must die on the thread
that owns them. So the app switches Python's automatic collection off and
collects on the UI thread, once a second, from a Qt timer (pyqtgraph's
``GarbageCollector``). The test suite applies the same policy
(``tests/conftest.py``: collection off, one collection between tests on the
main thread).
"""

from __future__ import annotations

from typing import Any

#: Seconds between collections on the UI thread.
GC_INTERVAL_S = 1.0


def install_gc_policy(app: Any, interval_s: float = GC_INTERVAL_S) -> Any:
    """Collect garbage on ``app``'s (the UI) thread only, every ``interval_s``; returns the
    collector, which ``app`` keeps alive. Call once, at app entry, before any worker starts."""
    from pyqtgraph.util.garbage_collector import GarbageCollector

    collector = getattr(app, "_flyviz_gc", None)
    if collector is None:
        collector = GarbageCollector(interval=interval_s)
        app._flyviz_gc = collector
    return collector
