"""The *Patching* dock: a causal trace between two prompts, its heatmap, and one cell's patch.

Activation patching asks *where* in the brain, and *when*, a prompt keeps what
makes its answer: the corrupted prompt ("… a little boy named Tom") runs again
and again with one group of neurons restored, at one position, to the state it
had in the clean run ("… a little girl named Lily"), and each run's
probability of the clean answer (" She") says how much that group at that
position carried (:mod:`flyviz.analysis.causal`, ``flyviz patch``,
:func:`flyviz.causal_trace`).

In the dock (a tab of the window's left column, whose height the heatmap's
rows need):

* the clean prompt, the corrupted prompt and the answer token (and the token
  the logit difference is taken against, by default the corrupted run's most
  likely), and the groups (*by* superclass, cell type or side);
* *Trace* runs the causal trace off the UI thread with progress and Cancel
  (every (position, group) cell is one column of the batched engine); bad
  input (an empty prompt, prompts of different lengths in tokens, an answer
  that is not one token) is one line in the dock;
* the heatmap (:mod:`flyviz.app.language.patching_heatmap`): the corrupted prompt's
  positions as rows (labelled with their tokens; a window of them, scrolled,
  when they do not all fit at a label's height), the groups as columns,
  coloured on the sequential colormap from the corrupted run's value (dark)
  to the clean run's (bright), with its colour bar; p(answer) or the logit difference against the corrupted run's
  top token (or *versus*);
* clicking a cell lights its group in the brain (the state's ``patching``
  highlight) and runs the comparison with that patch: the corrupted prompt
  beside the untouched model, the group's state set to the clean run's at that
  position (a :class:`~flyviz.model.patching.Patch` with the clean prompt as
  its source), through the window's comparison (the Interventions dock's when
  the window wires it in, :attr:`PatchingFeature.compare`).
"""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (QComboBox, QFormLayout, QHBoxLayout, QLabel, QLineEdit,
                               QProgressBar, QPushButton, QVBoxLayout, QWidget)

from flyviz.app.base.background import CancellableProgress, Cancelled, JobFeature
from flyviz.app.base.comparing import compare_with_lent
from flyviz.app.language.patching_heatmap import Heatmap, heatmap_colours
from flyviz.model.errors import FlyvizError, InputError
from flyviz.viewer.run_config import InterventionLoan

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.analysis.causal import CausalTrace, TraceCell
    from flyviz.analysis.sweep import Group
    from flyviz.app.base.host import WindowHost
    from flyviz.model.checkpoint import Checkpoint
    from flyviz.model.patching import Patch

#: The :class:`~flyviz.app.base.background.BackgroundCalls` purpose of a trace.
PURPOSE = "patching"

#: The highlight source name of the clicked cell's group.
HIGHLIGHT = "patching"

#: The *by* choices: (label kind, title).
BY_CHOICES = (("superclass", "Superclass"), ("type", "Cell type"), ("side", "Side"))

#: The measures the heatmap shows: (measure, its normalised column, title).
MEASURES = (("logit_diff", "logit_diff_normalised", "logit difference"),
            ("p_answer", "p_normalised", "p(answer)"))

#: Group names listed under the heatmap up to this many columns (beyond: hover names them).
LISTED_GROUPS = 40

#: The example of issue 18 and the README, filled in at first.
EXAMPLE = ("Once upon a time, there was a little girl named Lily.",
           "Once upon a time, there was a little boy named Tom.", " She", " He")


def check_prompts(checkpoint: "Checkpoint", clean: str, corrupt: str, answer: str,
                  versus: str | None = None) -> Any:
    """The prompts tokenized (:class:`~flyviz.analysis.causal.TracePrompts`), or
    :class:`InputError` (one line) for an empty prompt, prompts of different lengths,
    an answer (or ``versus``) that is not one token."""
    from flyviz.analysis.causal import encode_prompts
    from flyviz.model.tokenizer import tokenizer_for

    return encode_prompts(tokenizer_for(checkpoint), checkpoint.config.bos_token_id, clean,
                          corrupt, answer, versus=versus)


def dock_words(message: str) -> str:
    """A library message about the prompts in the dock's words (its fields, not options)."""
    message = (message.replace("--clean", "the clean prompt")
               .replace("--corrupt", "the corrupted prompt").replace("--answer", "the answer")
               .replace("--versus", "versus"))
    if "tokens long" in message:        # the lengths, and what to do, without --align
        message = message.split("; a causal trace")[0] + ": give prompts of the same length"
    return message


def trace_groups(checkpoint: "Checkpoint", by: str) -> list["Group"]:
    """The groups of label kind ``by`` (:func:`flyviz.analysis.sweep.sweep_groups`)."""
    from flyviz.analysis.sweep import sweep_groups

    return sweep_groups(checkpoint, by)


def compute_trace(checkpoint: "Checkpoint", clean: str, corrupt: str, answer: str,
                  groups: list["Group"], by: str, stop: threading.Event,
                  report: Callable[[float], None], spec: str = "", kernel: str | None = None,
                  versus: str | None = None) -> "CausalTrace | None":
    """The causal trace of ``groups`` in this process (runs off the UI thread); ``None``
    when ``stop`` was set (the run ends at its next progress report). ``versus``: the
    token the logit difference is taken against (default the corrupted run's top one)."""
    from flyviz.analysis.causal import TraceSettings, run_causal_trace

    settings = TraceSettings(kernel=kernel)
    prompts = check_prompts(checkpoint, clean, corrupt, answer, versus)
    lo, hi = prompts.covered
    # Every cell reports once per step of the corrupted prompt.
    progress = CancellableProgress((hi - lo) * len(groups) * len(prompts.corrupt), stop, report)
    with tempfile.TemporaryDirectory(prefix="flyviz-app-trace-") as folder:
        try:
            run = run_causal_trace(spec, checkpoint, clean, corrupt, answer, groups,
                                   Path(folder) / "trace.csv", settings, by=by, workers=0,
                                   versus=versus, progress=progress)  # type: ignore[arg-type]  # duck-typed
        except Cancelled:
            return None
    return run.trace


def cell_patch(trace: "CausalTrace", cell: "TraceCell") -> "Patch":
    """The patch of one cell: its group restored to the clean run's state over its window."""
    from flyviz.model.patching import Patch, PatchSource

    clean = str(trace.info.get("clean", ""))
    align = str(trace.info.get("align", "start"))
    return Patch(cell.query, PatchSource.from_prompt(clean, align), cell.position,
                 cell.position + max(1, cell.window))


class PatchingPanel(QWidget):
    """The Patching dock: the prompts, the answer and the groups, Trace and Cancel, the
    heatmap, and what the clicked cell is.

    Signals
    -------
    trace_requested(), cancel_requested()
        Trace with the fields' values; stop the trace going on.
    measure_changed()
        The heatmap's measure was switched.
    """

    trace_requested = Signal()
    cancel_requested = Signal()
    measure_changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        form = QFormLayout()
        self.clean = QLineEdit(EXAMPLE[0])
        self.clean.setToolTip("The prompt whose answer is right")
        self.corrupt = QLineEdit(EXAMPLE[1])
        self.corrupt.setToolTip("The same number of tokens, changed where it matters")
        self.answer = QLineEdit(EXAMPLE[2])
        self.answer.setToolTip("The clean answer: one token (mind the leading space)")
        self.versus = QLineEdit(EXAMPLE[3])
        self.versus.setPlaceholderText("the corrupted run's most likely token")
        self.versus.setToolTip("The token the logit difference is taken against (one token; "
                               "empty: the corrupted run's most likely)")
        self.by = QComboBox()
        for key, title in BY_CHOICES:
            self.by.addItem(title, key)
        self.by.setToolTip("The groups of neurons restored one at a time")
        form.addRow("Clean", self.clean)
        form.addRow("Corrupted", self.corrupt)
        form.addRow("Answer", self.answer)
        form.addRow("Versus", self.versus)
        form.addRow("By", self.by)
        layout.addLayout(form)
        row = QHBoxLayout()
        self.trace_button = QPushButton("Trace")
        self.trace_button.setToolTip("Restore each group at each position to the clean run "
                                     "and measure how much of the answer comes back")
        self.trace_button.clicked.connect(self.trace_requested.emit)
        self.progress = QProgressBar()
        self.progress.setRange(0, 100)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setToolTip("Stop the trace (Esc)")
        self.cancel_button.clicked.connect(self.cancel_requested.emit)
        self.measure = QComboBox()
        for key, _column, title in MEASURES:
            self.measure.addItem(title, key)
        self.measure.setToolTip("What the heatmap shows, from the corrupted run's value to "
                                "the clean run's")
        self.measure.currentIndexChanged.connect(lambda _i: self.measure_changed.emit())
        row.addWidget(self.trace_button)
        row.addWidget(self.progress, 1)
        row.addWidget(self.cancel_button)
        row.addWidget(self.measure)
        layout.addLayout(row)
        self.message = QLabel("")
        self.message.setWordWrap(True)
        layout.addWidget(self.message)
        self.heatmap = Heatmap()
        heatmap_row = QHBoxLayout()
        heatmap_row.setSpacing(2)
        heatmap_row.addWidget(self.heatmap, 1)
        heatmap_row.addWidget(self.heatmap.rows_bar)
        layout.addLayout(heatmap_row, 1)
        self.ends = QLabel("")
        self.ends.setObjectName("hint")
        self.ends.setWordWrap(True)
        layout.addWidget(self.ends)
        self.selected = QLabel("")
        self.selected.setWordWrap(True)
        self.selected.setObjectName("hint")
        layout.addWidget(self.selected)
        self.set_busy(False)
        self.say("Where does the brain keep what makes the answer? Give two prompts of the "
                 "same length and press Trace.")

    def say(self, text: str, error: bool = False) -> None:
        """Show one line above the heatmap (red for a problem)."""
        self.message.setText(text)
        self.message.setStyleSheet("color: #ff7a7a;" if error else "")

    def set_busy(self, busy: bool) -> None:
        """Show the progress and Cancel while a trace runs."""
        self.progress.setVisible(busy)
        self.cancel_button.setVisible(busy)
        self.trace_button.setEnabled(not busy)
        if busy:
            self.progress.setValue(0)

    @property
    def busy_shown(self) -> bool:
        """True while the progress is shown (a trace runs)."""
        return not self.trace_button.isEnabled()

    @property
    def measure_key(self) -> str:
        """The measure shown: ``p_answer`` or ``logit_diff``."""
        return str(self.measure.currentData())


class PatchingFeature(JobFeature):
    """The Patching dock wired into the window: the trace job, the heatmap, a cell's patch.

    Signals
    -------
    traced(trace)
        A trace finished (its :class:`~flyviz.analysis.causal.CausalTrace`).
    cancelled()
        A trace was cancelled.
    cell_chosen(cell, patch)
        A heatmap cell was clicked: its :class:`~flyviz.analysis.causal.TraceCell` and
        the :class:`~flyviz.model.patching.Patch` compared.
    """

    traced = Signal(object)
    cell_chosen = Signal(object, object)
    refused_prefix = "cannot trace"
    cancelled_words = ("trace cancelled", "causal trace cancelled")

    def __init__(self, host: "WindowHost") -> None:
        super().__init__(host)
        #: ``compare(interventions, prompt) -> started``: runs the comparison instead of the
        #: window's runs (a test's or an embedding's); ``None``: the window's runs, with
        #: the patch lent to the state's list (:attr:`loan`).
        self.compare: Callable[[tuple[Any, ...], str], bool] | None = None
        #: A clicked cell's group lit and its patch compared with the untouched model: the
        #: state's part ``"patching"``, lent until Reset, a model or an opened recording
        #: (taking the patch out of the Interventions list unticks *Compare* again).
        self.loan = host.state.add_part(InterventionLoan(HIGHLIGHT))
        self.trace: "CausalTrace | None" = None
        self._groups: dict[str, np.ndarray] = {}
        self.panel = PatchingPanel()
        # The trace going on is self.job (its ``running`` is set while its thread runs).
        self.install_job(PURPOSE, self.panel, self.show)
        # A tab of the left column: the column's full height gives the heatmap's rows room
        # (beside the text the form alone filled a laptop's dock), and the Text dock stays
        # in sight for the comparison a cell's click runs.
        self.dock = host.docks.add("patching", "Patching", self.panel,
                                   Qt.DockWidgetArea.LeftDockWidgetArea, scroll=True)
        host.docks.tabify("controls", self.dock)
        p = self.panel
        p.trace_requested.connect(lambda: self.run_trace())
        p.cancel_requested.connect(self.cancel)
        # The measure is the state's (a script sets it there); the menu is its view.
        docks = host.state.docks
        self._show_measure(docks.patching_measure)
        p.measure_changed.connect(lambda: setattr(docks, "patching_measure", p.measure_key))
        docks.events.patching_measure.connect(self._on_measure)
        p.heatmap.cell_clicked.connect(self.choose_cell)
        host.models.ready.connect(lambda _name: self._forget("a new model is loaded"))

    # ------------------------------------------------------------ tracing
    def run_trace(self, clean: str | None = None, corrupt: str | None = None,
                  answer: str | None = None, by: str | None = None,
                  versus: str | None = None) -> bool:
        """Trace (off the UI thread) with these values (default: the dock's fields, which
        are set to them); False, and one line in the dock, when it cannot start."""
        p = self.panel
        if clean is not None:
            p.clean.setText(clean)
        if corrupt is not None:
            p.corrupt.setText(corrupt)
        if answer is not None:
            p.answer.setText(answer)
        if versus is not None:
            p.versus.setText(versus)
        if by is not None:
            index = p.by.findData(by)
            if index < 0:
                return self._refuse(f"by {by!r}: choose one of "
                                    f"{', '.join(k for k, _ in BY_CHOICES)}")
            p.by.setCurrentIndex(index)
        checkpoint = self.host.models.checkpoint
        bundle = self.host.models.bundle
        if checkpoint is None or bundle is None:
            return self._refuse("load a model first")
        if self.busy:
            return False
        clean, corrupt, answer = p.clean.text(), p.corrupt.text(), p.answer.text()
        versus = p.versus.text() or None
        by = str(p.by.currentData())
        try:
            check_prompts(checkpoint, clean, corrupt, answer, versus)
            groups = trace_groups(checkpoint, by)
        except FlyvizError as exc:
            return self._refuse(dock_words(str(exc)))
        self._groups = {g.name: g.neurons for g in groups}
        spec, kernel = bundle.model.spec, bundle.model.kernel_request

        def work(stop: threading.Event, report: Callable[[float], None]) -> Any:
            return compute_trace(checkpoint, clean, corrupt, answer, groups, by, stop, report,
                                 spec=spec or "", kernel=kernel, versus=versus)

        p.say(f"tracing {len(groups):,} groups by {p.by.currentText().lower()} at every "
              "position…")
        self.host.show_message("causal trace running…")
        self.job.start(work)
        return True

    def say(self, line: str, error: bool = False) -> None:
        self.panel.say(line, error)

    # ------------------------------------------------------------ showing
    def show(self, trace: "CausalTrace") -> None:
        """Show ``trace``'s heatmap."""
        self.trace = trace
        self.panel.selected.setText("Click a cell: its group lights in the brain and the "
                                    "corrupted prompt runs beside the untouched model with "
                                    "that patch.")
        self._draw()
        line = self._summary()
        self.panel.say(line)
        self.host.docks.show(self.dock, 0.6)
        self.host.show_message(f"causal trace: {len(trace.positions)} positions × "
                               f"{len(trace.groups)} groups; {line}")
        self.traced.emit(trace)

    def _show_measure(self, key: str) -> None:
        """Choose ``key`` in the measure menu (without telling the state back)."""
        menu = self.panel.measure
        blocked = menu.blockSignals(True)
        menu.setCurrentIndex(menu.findData(key))
        menu.blockSignals(blocked)

    def _on_measure(self, key: str) -> None:
        self._show_measure(key)
        self._draw()

    def _measure(self) -> tuple[str, str, str]:
        """The shown measure: (its key, its normalised column, its title)."""
        key = self.host.state.docks.patching_measure
        return next(m for m in MEASURES if m[0] == key)

    def _summary(self) -> str:
        trace = self.trace
        if trace is None:
            return ""
        key, column, title = self._measure()
        low, high = trace.span(key)
        line = f"{title} of {trace.info.get('answer', '')!r}: clean {high:.3g}, corrupted {low:.3g}"
        best = trace.best(column, 1)
        if best:
            b = best[0]
            line += (f"; restores most: {b.group} at {b.position} {b.token!r} "
                     f"({getattr(b, column):.0%})")
        return line

    def _draw(self) -> None:
        trace = self.trace
        p = self.panel
        if trace is None:
            p.heatmap.set_grid(None)
            p.ends.setText("")
            return
        key, column, title = self._measure()
        low, high = trace.span(key)
        p.heatmap.set_grid(trace.grid(column), trace.token_labels(), list(trace.groups))
        p.heatmap.bar.axis.setLabel(f"{title}: 0 corrupted, 1 clean")
        p.heatmap.image.describe = self._describe_cell
        groups = list(trace.groups)
        listed = (": " + ", ".join(f"{i} {name}" for i, name in enumerate(groups, start=1))
                  if len(groups) <= LISTED_GROUPS else " (hover names them)")
        first, last = p.heatmap.span
        beyond = ("" if (first, last) == (0.0, 1.0) else
                  f" Some cells lie beyond them: the bar runs from {first:.3g} to "
                  f"{last:.3g} (0 corrupted, 1 clean).")
        p.ends.setText(f"dark: the corrupted run's {title} {low:.3g}; bright: the clean "
                       f"run's {high:.3g}.{beyond} Rows: positions; columns: groups{listed}")
        if p.message.text() and not p.busy_shown:
            p.say(self._summary())

    def _describe_cell(self, row: int, column: int) -> str:
        cell = self.cell(row, column)
        return (f"{cell.group} ({cell.neurons:,} neurons) at {cell.position} {cell.token!r}: "
                f"p(answer) {cell.p_answer:.3g} ({cell.p_normalised:.0%}), logit difference "
                f"{cell.logit_diff:+.3g} ({cell.logit_diff_normalised:.0%}); click to compare")

    def cell(self, row: int, column: int) -> "TraceCell":
        """The cell drawn at (row, column)."""
        if self.trace is None:
            raise InputError("trace first")
        return self.trace.rows[row * len(self.trace.groups) + column]

    def choose_cell(self, row: int, column: int) -> bool:
        """Light the group of cell (row, column) and run the comparison with its patch;
        False (and a message) when it cannot start."""
        if self.trace is None:
            return False
        cell = self.cell(row, column)
        neurons = self._groups.get(cell.group)
        checkpoint = self.host.models.checkpoint
        if neurons is None and checkpoint is not None:
            from flyviz.model.selection import neuron_index

            neurons = neuron_index(checkpoint).select(cell.query)
        self.loan.emphasise(neurons)
        patch = cell_patch(self.trace, cell)
        said = self._describe_cell(row, column).replace("; click to compare", "")
        self.panel.selected.setText(f"{said}; compared with this patch (the corrupted prompt "
                                    "beside the untouched model)")
        self.cell_chosen.emit(cell, patch)
        corrupt = str(self.trace.info.get("corrupt", ""))
        started = self._compare((patch,), corrupt)
        if started:
            self.host.show_message(f"comparing the corrupted prompt with {cell.group} restored "
                                   f"at position {cell.position} ({cell.token!r})")
        return started

    def _compare(self, interventions: tuple[Any, ...], prompt: str) -> bool:
        if self.compare is not None:
            return self.compare(interventions, prompt)
        try:
            return compare_with_lent(self.host, self.loan, interventions, prompt)
        except FlyvizError as exc:
            self.host.show_message(str(exc), error=True)
            return False

    def _forget(self, note: str) -> None:
        self.cancel()
        # Said only when a heatmap goes (a fresh launch's first model replaces nothing).
        note = note if self.trace is not None else self.panel.message.text()
        self.trace = None
        self._groups = {}
        self.host.state.highlights.set(HIGHLIGHT, None)
        self._draw()
        self.panel.selected.setText("")
        self.panel.say(note)


def install(host: "WindowHost") -> PatchingFeature:
    """Add the Patching dock to the window ``host`` (see :class:`PatchingFeature`)."""
    return PatchingFeature(host)


__all__ = ["BY_CHOICES", "EXAMPLE", "HIGHLIGHT", "Heatmap", "MEASURES", "PURPOSE",
           "PatchingFeature", "PatchingPanel", "cell_patch", "check_prompts", "compute_trace",
           "dock_words",
           "heatmap_colours", "install", "trace_groups"]
