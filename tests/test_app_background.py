"""A background job (the trace, the estimate): its bar, Cancel and each way it can end."""

from __future__ import annotations

import threading

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtWidgets import QProgressBar  # noqa: E402
from qt_barriers import background_delivered  # noqa: E402

from flyviz.app.base.background import BackgroundCalls, BackgroundJob  # noqa: E402

pytestmark = pytest.mark.gui


class _View:
    """A dock's busy part: the bar and what ``set_busy`` was last told."""

    def __init__(self) -> None:
        self.progress = QProgressBar()
        self.progress.setRange(0, 100)
        self.busy: list[bool] = []

    def set_busy(self, busy: bool) -> None:
        self.busy.append(busy)
        if busy:
            self.progress.setValue(0)


@pytest.fixture
def job(qtbot):
    calls = BackgroundCalls()
    view = _View()
    made = BackgroundJob(calls, "test", view)
    outcomes: list[tuple[str, object]] = []
    made.finished.connect(lambda result: outcomes.append(("finished", result)))
    made.cancelled.connect(lambda: outcomes.append(("cancelled", None)))
    made.failed.connect(lambda message: outcomes.append(("failed", message)))
    yield made, view, outcomes
    made.stop()
    calls.shutdown()


def test_a_job_reports_progress_to_the_bar_then_its_result(job, qtbot):
    made, view, outcomes = job
    reported, go_on = threading.Event(), threading.Event()

    def work(stop, report):
        report(0.42)
        reported.set()
        go_on.wait(10)
        return "result"

    made.start(work)
    assert made.busy and view.busy == [True]
    assert reported.wait(10)
    qtbot.waitUntil(lambda: view.progress.value() == 42, timeout=5000)
    go_on.set()
    qtbot.waitUntil(lambda: len(outcomes) == 1, timeout=5000)
    assert outcomes == [("finished", "result")]
    assert not made.busy and view.busy == [True, False]
    qtbot.waitUntil(lambda: not made.running.is_set(), timeout=5000)


def test_a_job_that_stops_early_is_cancelled_and_one_that_raises_fails_in_one_line(job, qtbot):
    made, view, outcomes = job
    made.start(lambda stop, report: None)
    qtbot.waitUntil(lambda: len(outcomes) == 1, timeout=5000)
    made.start(lambda stop, report: 1 / 0)
    qtbot.waitUntil(lambda: len(outcomes) == 2, timeout=5000)
    assert outcomes[0] == ("cancelled", None)
    assert outcomes[1][0] == "failed" and "ZeroDivisionError" in str(outcomes[1][1])
    assert view.busy == [True, False, True, False]


@pytest.mark.parametrize("quiet", [False, True])
def test_cancel_sets_stop_drops_the_result_and_ends_the_busy_view(job, qtbot, quiet):
    """Cancel (and a quiet cancel, as when the model changes) stops the thread at its next
    check, reports nothing but ``cancelled`` (quiet: nothing), and hides the bar."""
    made, view, outcomes = job
    started = threading.Event()

    def work(stop, report):
        started.set()
        assert stop.wait(10)
        return "too late"

    made.start(work)
    assert started.wait(10)
    made.cancel(quiet=quiet)
    background_delivered(made._calls)           # the dropped result has come and gone
    assert outcomes == ([] if quiet else [("cancelled", None)])
    assert not made.busy and view.busy == [True, False]
