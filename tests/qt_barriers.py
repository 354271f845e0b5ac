"""Barriers for GUI tests: wait until something provably happened, never for a fixed time.

A fixed ``qtbot.wait(ms)`` before a check proves nothing on a slow machine: the layout may
not have settled, a result may not have arrived yet, and an "it did not happen" check passes
because it looked too early. These wait on the condition itself.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtWidgets import QApplication, QWidget


def _geometry(widget: QWidget) -> tuple:
    """Where ``widget`` and every widget inside it are, and which are shown."""
    return tuple((w.isVisible(), w.geometry().getRect())
                 for w in (widget, *widget.findChildren(QWidget)))


def settle(qtbot: Any, widget: QWidget, timeout: int = 5000) -> None:
    """Wait until ``widget``'s layout has settled.

    Settled: after the posted events (layout requests, resizes, shows) are handled, no widget
    inside ``widget`` moved, resized, appeared or disappeared, for two rounds in a row.
    """
    last: list[Any] = [None]
    still = [0]

    def settled() -> bool:
        QApplication.sendPostedEvents()
        QApplication.processEvents()
        now = _geometry(widget)
        still[0] = still[0] + 1 if now == last[0] else 0
        last[0] = now
        return still[0] >= 2

    qtbot.waitUntil(settled, timeout=timeout)


def background_delivered(calls: Any, timeout_s: float = 10.0) -> None:
    """A barrier after which every outcome of :class:`flyviz.app.base.background.BackgroundCalls`
    ``calls`` started so far has been handled on the UI thread (or dropped).

    Each helper thread ends right after it emits its outcome, so once all have ended every
    outcome is posted to the UI thread; sending the posted events delivers them. An "it did
    not arrive" check after this is a fact, not a guess about timing.
    """
    for thread in list(calls._threads):
        thread.join(timeout_s)
        assert not thread.is_alive(), f"{thread.name} did not end within {timeout_s} s"
    QApplication.sendPostedEvents()


def deferred_deletes_delivered() -> None:
    """A barrier after which every widget that asked to be deleted later (``deleteLater``:
    napari's layer controls, when their layer is removed) is deleted: Qt delivers these only
    to an explicit request or back in the event loop, and until then they hold what they showed.
    """
    from PySide6.QtCore import QEvent

    QApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
