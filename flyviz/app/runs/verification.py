"""Verifying the loaded model in the background, and remembering which models passed.

:class:`VerificationController` runs :func:`flyviz.model.verify.verify_checkpoint`
(every file's SHA-256, the dataset's checks, the graph binding, shapes and
values, the golden traces) in a :class:`VerifyThread`, so that the window
never waits for it; the verification can be cancelled, and it is cancelled
when another model loads or the window closes. A model that passed is
remembered in QSettings by its identity (the digests of its weights and
graph, :func:`identity_key`) with the verdict, the first failed check, the
date and the flyviz version, so that it shows as verified (or as failed, and
why) the next time it is loaded; a model whose weights or graph changed has
another identity and shows as not verified.

:class:`VerificationStatus` is the status line of the Model dock:
not verified, verifying (progress, Cancel), verified (when, how long, a
summary) or failed (the first failed check; every check in
:func:`report_dialog`).
"""

from __future__ import annotations

import hashlib
import html
import json
import time
import traceback
from dataclasses import asdict, dataclass
from datetime import datetime

from PySide6.QtCore import QObject, QSettings, Qt, QThread, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from flyviz.app.base.background import wait_qthread
from flyviz import __version__
from flyviz.model.checkpoint import Checkpoint
from flyviz.model.checks import FAIL, PASS
from flyviz.model.errors import FlyvizError
from flyviz.model.verify import VerificationReport, verify_checkpoint

#: States of :class:`VerificationController`.
NOT_VERIFIED, VERIFYING, VERIFIED, FAILED = "not verified", "verifying", "verified", "failed"

#: Colours of the status line's mark, by state (green, amber, red, muted).
STATE_COLOURS = {NOT_VERIFIED: "#7d8595", VERIFYING: "#f6ad55", VERIFIED: "#48bb78",
                 FAILED: "#f56565"}
STATE_MARKS = {NOT_VERIFIED: "○", VERIFYING: "◔", VERIFIED: "✔", FAILED: "✘"}


def identity_key(checkpoint: Checkpoint) -> str:
    """A key for the model's identity: SHA-256 over its weights digest and its five
    frozen-graph digests (:mod:`flyviz.model.identity`); the same model in any layout
    has the same key, a changed weight or synapse another one."""
    from flyviz.model.identity import graph_digests, weights_digest

    lines = [f"weights:{weights_digest(checkpoint)}"]
    lines += [f"{name}:{digest}" for name, digest in sorted(graph_digests(checkpoint).items())]
    return hashlib.sha256("\n".join(lines).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class VerificationRecord:
    """What is remembered of a model's last verification.

    Parameters
    ----------
    model
        The model's name when it was verified.
    verified_at
        When, as ISO 8601 local time (seconds).
    flyviz_version
        The flyviz that verified it.
    seconds
        How long the verification took.
    summary
        :meth:`VerificationReport.summary` of that verification.
    passed
        Whether every check passed.
    first_failure
        The first failed check, ``"name: detail"`` (empty when it passed).
    """

    model: str
    verified_at: str
    flyviz_version: str
    seconds: float
    summary: str
    passed: bool = True
    first_failure: str = ""

    @property
    def date(self) -> str:
        """The day it was verified (``YYYY-MM-DD``)."""
        return self.verified_at[:10]


class VerificationMemory:
    """How each model identity's last verification went, kept in QSettings under ``verified/``.

    Parameters
    ----------
    settings
        The app's settings (tests give a temporary file).
    """

    GROUP = "verified"

    def __init__(self, settings: QSettings) -> None:
        self.settings = settings

    def recall(self, key: str) -> VerificationRecord | None:
        """The record of ``key``, or ``None`` (also for an unreadable entry)."""
        raw = self.settings.value(f"{self.GROUP}/{key}")
        if not raw:
            return None
        try:
            data = json.loads(str(raw))
            return VerificationRecord(model=str(data["model"]),
                                      verified_at=str(data["verified_at"]),
                                      flyviz_version=str(data["flyviz_version"]),
                                      seconds=float(data["seconds"]),
                                      summary=str(data["summary"]),
                                      passed=bool(data.get("passed", True)),
                                      first_failure=str(data.get("first_failure", "")))
        except (ValueError, TypeError, KeyError):
            return None

    def remember(self, key: str, record: VerificationRecord) -> None:
        """Store ``record`` for ``key``."""
        self.settings.setValue(f"{self.GROUP}/{key}", json.dumps(asdict(record)))
        self.settings.sync()

    def forget(self, key: str) -> None:
        """Drop what is remembered of ``key``."""
        self.settings.remove(f"{self.GROUP}/{key}")
        self.settings.sync()


class VerifyThread(QThread):
    """Runs :func:`~flyviz.model.verify.verify_checkpoint` on one checkpoint.

    Signals
    -------
    progress(label, fraction)
        Before each stage.
    done(report, seconds)
        The report (``report.cancelled`` when :meth:`cancel` ended it) and
        how long it took.
    failed(message)
        The verification itself could not run; one line.
    """

    progress = Signal(str, float)
    done = Signal(object, float)
    failed = Signal(str)

    def __init__(self, checkpoint: Checkpoint, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("flyviz-verify")
        self.checkpoint = checkpoint
        self._stop = False

    def cancel(self) -> None:
        """Ask the verification to stop at its next check."""
        self._stop = True

    @property
    def cancelled(self) -> bool:
        """True once :meth:`cancel` was called."""
        return self._stop

    def run(self) -> None:  # noqa: D401 - QThread API
        """Verify; report the outcome by signal."""
        start = time.perf_counter()
        try:
            report = verify_checkpoint(
                self.checkpoint, golden=True,
                progress=lambda label, f: self.progress.emit(str(label), float(f)),
                should_stop=lambda: self._stop)
        except FlyvizError as exc:
            self.failed.emit(str(exc))
            return
        except MemoryError:
            self.failed.emit("out of memory while verifying; close other programs and try again")
            return
        except Exception as exc:  # a bug must not take the app down
            traceback.print_exc()
            self.failed.emit(f"verification stopped with an unexpected error: "
                             f"{type(exc).__name__}: {exc}")
            return
        self.done.emit(report, time.perf_counter() - start)


class VerificationController(QObject):
    """The loaded model's verification: state, progress, the background thread, memory.

    Parameters
    ----------
    settings
        Where verified identities are remembered (:class:`VerificationMemory`).

    Signals
    -------
    changed()
        The state, the progress or the text changed.
    finished(line)
        A verification ended with a verdict (passed or failed): the report's
        summary and how long it took, or why it could not run.
    """

    changed = Signal()
    finished = Signal(str)

    def __init__(self, settings: QSettings, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.memory = VerificationMemory(settings)
        self.state = NOT_VERIFIED
        #: What is known of the loaded model's verification, one line to show after the state.
        self.text = "no model loaded"
        #: How far a running verification is (0..1).
        self.fraction = 0.0
        #: The report of the last verification of this model in this session, if any.
        self.report: VerificationReport | None = None
        #: What is remembered of this model's identity, if it passed before.
        self.record: VerificationRecord | None = None
        self.checkpoint: Checkpoint | None = None
        self.model_name = ""
        self.key = ""
        self._thread: VerifyThread | None = None
        self._old_threads: list[VerifyThread] = []
        self._closed = False

    @property
    def busy(self) -> bool:
        """True while a verification runs."""
        return self._thread is not None and self._thread.isRunning()


    # ------------------------------------------------------------ model
    def set_model(self, checkpoint: Checkpoint | None, name: str = "") -> None:
        """Follow ``checkpoint`` (``None``: no model): cancel any verification of the
        previous one and say whether this one was verified before."""
        self.cancel()
        self.checkpoint, self.model_name = checkpoint, name or (
            checkpoint.name if checkpoint is not None else "")
        self.report = None
        if checkpoint is None:
            self.key, self.record = "", None
            self._set(NOT_VERIFIED, "no model loaded")
            return
        self.key = identity_key(checkpoint)
        self.record = self.memory.recall(self.key)
        record = self.record
        if record is None:
            self._set(NOT_VERIFIED, "never verified: Verify checks every file's SHA-256, the "
                                    "graph and the golden traces")
        elif record.passed:
            self._set(VERIFIED, f"on {record.date} with flyviz {record.flyviz_version} (took "
                                f"{_duration(record.seconds)}): {_without_verdict(record.summary)}")
        else:
            self._set(FAILED, f"on {record.date} with flyviz {record.flyviz_version}, the first "
                              f"failed check: {record.first_failure}")

    # ------------------------------------------------------------ running
    def verify(self) -> bool:
        """Start verifying the model in the background; False when there is none or it
        is already being verified."""
        if self._closed or self.checkpoint is None or self.busy:
            return False
        thread = VerifyThread(self.checkpoint, self)
        thread.progress.connect(self._on_progress)
        thread.done.connect(self._on_done)
        thread.failed.connect(self._on_failed)
        thread.finished.connect(self._forget_finished)
        self._thread = thread
        self.fraction = 0.0
        self._set(VERIFYING, "starting (0%)")
        thread.start()
        return True

    def cancel(self, reason: str = "verification cancelled") -> bool:
        """Stop a running verification (it ends at its next check); False if none ran.

        The model then shows as not verified, with ``reason``.
        """
        thread = self._thread
        if thread is None:
            return False
        self._thread = None
        thread.cancel()
        if thread.isRunning():
            self._old_threads.append(thread)
        if self.checkpoint is not None and self.state == VERIFYING:
            self._set(NOT_VERIFIED, reason)
        return True

    def shutdown(self) -> None:
        """Cancel and wait for every verification thread; safe to call twice."""
        self._closed = True
        self.cancel("the window closed")
        for thread in self._old_threads:
            wait_qthread(thread, "verifying a model")
        self._old_threads = []

    # ------------------------------------------------------------ thread signals
    def _forget_finished(self) -> None:
        self._old_threads = [t for t in self._old_threads if t.isRunning()]
        if self._thread is not None and self._thread is self.sender() \
                and not self._thread.isRunning() and self.state == VERIFYING:
            # Ended without a report or a failure (it should not happen): say so.
            self._thread = None
            self._set(NOT_VERIFIED, "the verification ended early")

    def _on_progress(self, label: str, fraction: float) -> None:
        if self.sender() is not self._thread:
            return
        self.fraction = fraction
        self._set(VERIFYING, f"{label} ({100 * fraction:.0f}%)")

    def _on_done(self, report: VerificationReport, seconds: float) -> None:
        if self.sender() is not self._thread:
            return  # a cancelled verification of this or an earlier model
        self._thread = None
        if report.cancelled:
            self._set(NOT_VERIFIED, "verification cancelled")
            return
        self.report = report
        first = report.failures[0] if report.failures else None
        self.record = VerificationRecord(
            model=self.model_name, verified_at=datetime.now().isoformat(timespec="seconds"),
            flyviz_version=__version__, seconds=round(seconds, 3), summary=report.summary(),
            passed=report.passed,
            first_failure="" if first is None else f"{first.name}: {first.detail}")
        self.memory.remember(self.key, self.record)
        if first is None:
            self._set(VERIFIED, f"took {_duration(seconds)}: {_without_verdict(report.summary())}")
        else:
            self._set(FAILED, f"{len(report.failures)} of {len(report.checks)} checks failed, "
                              f"the first: {first.name}: {first.detail}")
        self.finished.emit(f"{report.summary()} (took {_duration(seconds)})")

    def _on_failed(self, message: str) -> None:
        if self.sender() is not self._thread:
            return
        self._thread = None
        self.record = None
        self._set(FAILED, f"the verification could not run: {message}")
        self.finished.emit(self.text)

    def _set(self, state: str, text: str) -> None:
        self.state, self.text = state, text
        self.changed.emit()


def _duration(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def _without_verdict(summary: str) -> str:
    """A report summary without its leading ``verified:``."""
    return summary.split(":", 1)[1].strip() if summary.startswith("verified:") else summary


class VerificationStatus(QWidget):
    """The Model dock's verification line: the coloured state with Verify / Cancel and
    Details, a progress bar while it runs, and what is known, word-wrapped.

    Call :meth:`bind` with the window's :class:`VerificationController`.
    """

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.controller: VerificationController | None = None
        self._dialog: QDialog | None = None
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 4, 0, 0)
        layout.setSpacing(3)
        row = QHBoxLayout()
        self.state_label = QLabel()
        self.state_label.setObjectName("verificationState")
        self.state_label.setTextFormat(Qt.TextFormat.RichText)
        self.action = QPushButton("Verify")
        self.action.setObjectName("verifyButton")
        self.action.setToolTip("Check every file's SHA-256, the dataset, the graph digests and "
                               "the golden traces, in the background (as 'flyviz verify')")
        self.details = QPushButton("Details…")
        self.details.setObjectName("verifyDetails")
        self.details.setToolTip("Every check of the last verification")
        row.addWidget(self.state_label, 1)
        row.addWidget(self.action)
        row.addWidget(self.details)
        layout.addLayout(row)
        self.progress = QProgressBar()
        self.progress.setRange(0, 100)
        self.progress.setMaximumHeight(12)
        self.progress.setTextVisible(False)
        self.progress.setVisible(False)
        layout.addWidget(self.progress)
        self.label = QLabel()
        self.label.setObjectName("verificationStatus")
        self.label.setWordWrap(True)
        self.label.setStyleSheet("color: #9aa3b2;")
        layout.addWidget(self.label)
        self.action.clicked.connect(self._on_action)
        self.details.clicked.connect(self.show_details)
        self.refresh()

    def bind(self, controller: VerificationController) -> None:
        """Show ``controller``'s state from now on."""
        self.controller = controller
        controller.changed.connect(self.refresh)
        self.refresh()

    def refresh(self) -> None:
        """Show the controller's state."""
        c = self.controller
        state = c.state if c is not None else NOT_VERIFIED
        text = c.text if c is not None else "no model loaded"
        has_model = c is not None and c.checkpoint is not None
        self.state_label.setText(f"<span style='color:{STATE_COLOURS[state]}; font-weight:600'>"
                                 f"{STATE_MARKS[state]} {html.escape(state.capitalize())}</span>")
        self.label.setText(text)
        self.label.setToolTip(text)
        self.progress.setVisible(state == VERIFYING)
        if c is not None:
            self.progress.setValue(int(round(100 * c.fraction)))
        self.action.setText({VERIFYING: "Cancel", VERIFIED: "Verify again",
                             FAILED: "Verify again"}.get(state, "Verify"))
        self.action.setEnabled(has_model)
        self.details.setVisible(c is not None and c.report is not None and state != VERIFYING)

    @property
    def text(self) -> str:
        """The state and the text, as shown (plain)."""
        return f"{self.state_label.text()} {self.label.text()}"

    def _on_action(self) -> None:
        c = self.controller
        if c is None:
            return
        if c.state == VERIFYING:
            c.cancel()
        else:
            c.verify()

    def show_details(self) -> QDialog | None:
        """Every check of the last verification, in a table (shown non-modally)."""
        c = self.controller
        if c is None or c.report is None:
            return None
        if self._dialog is not None:
            self._dialog.close()
        self._dialog = report_dialog(self.window(), c.report, c.model_name)
        return self._dialog


def report_dialog(parent: QWidget | None, report: VerificationReport,
                  model_name: str = "") -> QDialog:
    """A table of every check of ``report`` (group, check, result, detail), shown non-modally."""
    dialog = QDialog(parent)
    dialog.setWindowTitle(f"Verification of {model_name or report.model}")
    dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    layout = QVBoxLayout(dialog)
    summary = QLabel(report.summary())
    summary.setWordWrap(True)
    summary.setObjectName("verificationSummary")
    layout.addWidget(summary)
    table = QTableWidget(len(report.checks), 4)
    table.setObjectName("verificationTable")
    table.setHorizontalHeaderLabels(["Group", "Check", "Result", "Detail"])
    table.verticalHeader().setVisible(False)
    table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
    colours = {PASS: STATE_COLOURS[VERIFIED], FAIL: STATE_COLOURS[FAILED]}
    for row, check in enumerate(report.checks):
        cells = (check.group, check.name, check.status.upper(), check.detail)
        for column, value in enumerate(cells):
            item = QTableWidgetItem(value)
            item.setToolTip(check.detail)
            if column == 2:
                item.setForeground(QColor(colours.get(check.status, STATE_COLOURS[NOT_VERIFIED])))
            table.setItem(row, column, item)
    table.resizeColumnsToContents()
    table.horizontalHeader().setStretchLastSection(True)
    failed_rows = [row for row, check in enumerate(report.checks) if check.status == FAIL]
    if failed_rows:
        table.selectRow(failed_rows[0])
        first = table.item(failed_rows[0], 0)
        if first is not None:
            table.scrollToItem(first)
    layout.addWidget(table)
    buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
    buttons.rejected.connect(dialog.reject)
    layout.addWidget(buttons)
    dialog.resize(860, 480)
    dialog.open()
    return dialog
