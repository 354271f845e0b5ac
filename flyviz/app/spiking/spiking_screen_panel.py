"""The Screen dock of the spiking brain: what silencing or activating each set does to one neuron.

For the spiking kind only (declared in its :data:`~flyviz.app.window.main_window.FEATURES` row). The
target is the selected neuron (click one in the brain); the screen is every set of a sets file
(``NAME: QUERY`` lines, as ``flyviz screen --sets`` reads them) or every single neuron a query
selects. *Run* runs the screen in the background (:func:`flyviz.spiking.screen.run_screen`
in this process, progress and Cancel as the lesion and circuit docks' jobs), silencing each
set under the base stimulus or activating each set alone; then the brain is coloured by the
change in the target's rate when each neuron's set was run: the *Screen* colour layer
(:func:`flyviz.viewer.layers.screen_layer`), whose values live in the viewer state
(:attr:`flyviz.viewer.state.ViewerState.screen`), so a script that sets ``state.screen`` and
``state.colour_by = "screen"`` draws the same picture, as movies and stills of the state do.
The dock lists the single sets' effects on the target with their p- and q-values, and with
*Pairs of top N* runs every pair of the N strongest sets and draws the pair matrix
(:func:`pair_matrix_image`: each pair's effect, the single sets' on the diagonal).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from PySide6.QtCore import Qt
from PySide6.QtWidgets import (QComboBox, QDoubleSpinBox, QFileDialog, QFormLayout, QHBoxLayout,
                               QLabel, QLineEdit, QProgressBar, QPushButton, QSpinBox,
                               QVBoxLayout, QWidget)

from flyviz.app.base.background import BackgroundJob, CancellableProgress, Cancelled
from flyviz.kinds.spiking import SPIKING_KEY, SpikingModel
from flyviz.viewer.layers import SCREEN, ScreenEffect

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.app.base.host import WindowHost
    from flyviz.spiking.brain import SpikingBrain
    from flyviz.spiking.screen import NeuronSet, ScreenResult, ScreenSettings, StimulusWords

__all__ = ["EACH_NEURON", "SCREEN_KINDS", "SETS_FILE", "ScreenFeature", "ScreenPanel",
           "effect_of", "install", "pair_matrix_image", "stimulus_field_words"]

#: What the Screen dock serves.
SCREEN_KINDS = (SPIKING_KEY,)
#: The two sources of a screen's sets.
EACH_NEURON = "each neuron of"
SETS_FILE = "sets file"
#: The :class:`~flyviz.app.base.background.BackgroundCalls` purpose of a screen.
PURPOSE = "spiking-screen"
#: The most sets whose pairs the dock runs (50: 1,225 pairs).
MAX_PAIRS_OF = 50
#: Pixels a side of a pair matrix cell, and the most the matrix image spans.
CELL_PX = 24
MATRIX_PX = 360
#: Rows of single effects the dock lists.
EFFECT_ROWS = 8
#: A pair matrix cell with no value (no pair run).
EMPTY_RGB = (40, 40, 40)


def pair_matrix_image(matrix: np.ndarray, cell: int = CELL_PX) -> np.ndarray:
    """The ``(N * cell, N * cell, 3)`` uint8 picture of a pair matrix (effects, Hz): each cell
    in the brain's *difference* colours (blue below 0, grey at 0, crimson above) over
    ``±`` the largest effect, as the Screen layer colours neurons; a NaN cell dark grey."""
    from flyviz.app.population.population_plots import colour_table

    values = np.asarray(matrix, np.float64)
    size = values.shape[0]
    finite = np.isfinite(values)
    limit = float(np.abs(values[finite]).max()) if finite.any() else 0.0
    limit = limit if limit > 0 else 1e-3
    index = np.clip(np.round((np.where(finite, values, 0.0) / limit + 1.0) * 127.5), 0, 255)
    rgb = colour_table("difference")[index.astype(np.int64)]
    rgb[~finite] = EMPTY_RGB
    image = np.repeat(np.repeat(rgb, cell, axis=0), cell, axis=1)
    return np.ascontiguousarray(image.reshape(size * cell, size * cell, 3), np.uint8)


class ScreenPanel(QWidget):
    """The target, the sets, the mode and stimulus, Run; progress and Cancel while it runs."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        heading = QLabel("<b>Screen</b>: what silencing or activating each set does to the "
                         "selected neuron's rate")
        heading.setWordWrap(True)
        self.target = QLabel("")
        self.target.setWordWrap(True)
        self.source = QComboBox()
        self.source.addItems([EACH_NEURON, SETS_FILE])
        self.source.setToolTip("a screen of single neurons (every neuron the query selects), "
                               "or of the sets of a file of 'NAME: QUERY' lines")
        self.sets = QLineEdit()
        self.browse = QPushButton("…")
        self.browse.setToolTip("Choose a sets file")
        self.mode = QComboBox()
        self.mode.addItems(["silence", "activate"])
        self.excite = QLineEdit()
        self.excite.setPlaceholderText("the brain's own set (e.g. superclass:sensory)")
        self.rate = QDoubleSpinBox()
        self.rate.setRange(0.0, 10000.0)
        self.rate.setValue(150.0)
        self.rate.setSuffix(" Hz")
        self.duration = QSpinBox()
        self.duration.setRange(1, 100000)
        self.duration.setValue(200)
        self.duration.setSuffix(" ms")
        self.trials = QSpinBox()
        self.trials.setRange(1, 1000)
        self.trials.setValue(1)
        self.pairs = QSpinBox()
        self.pairs.setRange(0, MAX_PAIRS_OF)
        self.pairs.setValue(0)
        self.pairs.setSpecialValueText("none")
        self.pairs.setToolTip("then run every pair of this many sets of largest effect on the "
                              "target (both sets at once): redundancy the single sets hide")
        form = QFormLayout()
        sets_row = QHBoxLayout()
        sets_row.addWidget(self.source)
        sets_row.addWidget(self.sets, 1)
        sets_row.addWidget(self.browse)
        # A row of three: its label names the first (a buddy), the others name themselves.
        sets_label = QLabel("Sets")
        sets_label.setBuddy(self.source)
        form.addRow(sets_label, sets_row)
        self.sets.setAccessibleName("Sets: the query or the sets file")
        self.browse.setAccessibleName("Choose a sets file")
        form.addRow("Mode", self.mode)
        form.addRow("Stimulus", self.excite)
        form.addRow("Rate", self.rate)
        form.addRow("Length", self.duration)
        form.addRow("Trials", self.trials)
        form.addRow("Pairs of top", self.pairs)
        self.run_button = QPushButton("Run screen")
        self.colour_button = QPushButton("Colour by it")
        self.colour_button.setToolTip("Colour every neuron by the change in the target's rate")
        self.colour_button.setEnabled(False)
        buttons = QHBoxLayout()
        buttons.addWidget(self.run_button)
        buttons.addWidget(self.colour_button)
        buttons.addStretch(1)
        busy = QHBoxLayout()
        self.progress = QProgressBar()
        self.progress.setRange(0, 100)
        self.cancel_button = QPushButton("Cancel")
        busy.addWidget(self.progress, 1)
        busy.addWidget(self.cancel_button)
        self.status = QLabel("")
        self.status.setWordWrap(True)
        #: The single sets' effects on the target (largest first), p and q values.
        self.effects = QLabel("")
        self.effects.setTextFormat(Qt.TextFormat.PlainText)
        self.effects.setStyleSheet("font-family: monospace")
        # Read from the keyboard too: Tab reaches it, the arrows move, Shift selects rows
        # and Ctrl+C copies them (it was text no key reached). Hidden until a screen fills
        # it: an empty list is no Tab stop.
        self.effects.setObjectName("result")
        self.effects.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse
                                             | Qt.TextInteractionFlag.TextSelectableByKeyboard)
        self.effects.setFocusPolicy(Qt.FocusPolicy.StrongFocus)  # Qt leaves it at clicks
        self.effects.setAccessibleName("The sets' effects on the target")
        self.effects.setVisible(False)
        #: The pair matrix: each pair's effect, the single sets' on the diagonal.
        self.matrix = QLabel("")
        self.matrix.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)
        self.matrix_caption = QLabel("")
        self.matrix_caption.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.addWidget(heading)
        layout.addWidget(self.target)
        layout.addLayout(form)
        layout.addLayout(buttons)
        layout.addLayout(busy)
        layout.addWidget(self.status)
        layout.addWidget(self.effects)
        layout.addWidget(self.matrix)
        layout.addWidget(self.matrix_caption)
        layout.addStretch(1)
        self.source.currentTextChanged.connect(self._on_source)
        self.mode.currentTextChanged.connect(self._on_mode)
        self._on_source(self.source.currentText())
        self._on_mode(self.mode.currentText())
        self.set_busy(False)

    def _on_source(self, source: str) -> None:
        file = source == SETS_FILE
        self.browse.setEnabled(file)
        self.sets.setPlaceholderText("a sets file (NAME: QUERY lines)" if file else
                                     "a query, e.g. superclass:cb_sensory & side:left")

    def _on_mode(self, mode: str) -> None:
        self.excite.setEnabled(mode == "silence")

    def set_busy(self, busy: bool) -> None:
        """Show the progress and Cancel while a screen runs."""
        self.progress.setVisible(busy)
        self.cancel_button.setVisible(busy)
        self.run_button.setEnabled(not busy)
        if busy:
            self.progress.setValue(0)

    def settings(self) -> "ScreenSettings":
        """The screen's settings the fields say (checked)."""
        from flyviz.spiking.screen import ScreenSettings

        mode = self.mode.currentText()
        excite = (self.excite.text().strip() or None) if mode == "silence" else None
        return ScreenSettings(mode=mode, excite=excite, rate=self.rate.value(),
                              trials=self.trials.value(),
                              duration_s=self.duration.value() / 1000.0).validate()


@dataclass(frozen=True)
class Outcome:
    """A finished screen and the target it was run for."""

    result: "ScreenResult"
    target: int
    effect: ScreenEffect


def target_name(brain: "SpikingBrain", neuron: int) -> str:
    """A neuron as the dock and the caption name it: its root id, and its cell type."""
    name = str(int(brain.root_ids[neuron]))
    if brain.cell_type is not None and brain.cell_type[neuron]:
        name += f" ({brain.cell_type[neuron]})"
    return name


def effect_of(result: "ScreenResult", brain: "SpikingBrain", target: int) -> ScreenEffect:
    """What the screen did to ``target``, per neuron (the Screen layer's values)."""
    return ScreenEffect(result.neuron_values(target), int(target), target_name(brain, target),
                        result.settings.mode, float(result.baseline[int(target)]))


def screen_sets(brain: "SpikingBrain", source: str, text: str) -> list["NeuronSet"]:
    """The sets of a screen: every neuron of the query ``text``, or the sets of the file."""
    from flyviz.errors import InputError
    from flyviz.spiking.screen import each_neuron, read_sets_file, resolve_sets

    text = text.strip()
    if not text:
        raise InputError("give the query whose neurons to screen, or a sets file")
    if source == SETS_FILE:
        return resolve_sets(brain, read_sets_file(Path(text)))
    return each_neuron(brain, text)


def stimulus_field_words() -> "StimulusWords":
    """How the dock's refusals of a stimulus read (its Stimulus field, where the command
    line says ``--excite``): :func:`~flyviz.spiking.screen.base_stimulus` checks a screen
    for both."""
    from flyviz.spiking.screen import StimulusWords

    return StimulusWords(
        not_a_query="the Stimulus field: {why}",
        selects_none="the Stimulus {query} selects no neuron of {brain}: type a query that "
                     "does (e.g. superclass:sensory)",
        missing="a silencing screen needs a stimulus and {brain} has none of its own: type "
                "the neurons to excite in the Stimulus field (e.g. superclass:sensory), or "
                "choose Mode activate")


def run_job(brain: "SpikingBrain", sets: list["NeuronSet"], settings: "ScreenSettings",
            target: int, stop: threading.Event, report: Callable[[float], None],
            pairs: int = 0) -> Outcome | None:
    """Run the screen off the UI thread (``None`` when Cancel stopped it); ``pairs``: then
    every pair of that many sets of largest effect on ``target``."""
    from flyviz.spiking.screen import run_screen

    progress = CancellableProgress(len(sets) + 1, stop, report)
    try:
        result = run_screen(brain, sets, settings, workers=0, progress=progress,
                            columns=np.array([target]), pairs=pairs, target=target)
    except Cancelled:
        return None
    return Outcome(result, target, effect_of(result, brain, target))


class ScreenFeature:
    """The Screen dock: runs screens of the shown spiking brain and colours by their effect."""

    def __init__(self, host: "WindowHost") -> None:
        self.host = host
        self.panel = ScreenPanel()
        self.dock = host.docks.add("screen", "Screen", self.panel,
                                   Qt.DockWidgetArea.LeftDockWidgetArea, scroll=True)
        if "stimulus" in host.docks:   # a tab behind the Stimulus dock: the brain keeps its width
            host.docks.tabify("stimulus", self.dock)
        self.dock.hide()
        self.job = BackgroundJob(host.background, PURPOSE, self.panel, host.widget(),
                                 window=host.widget())
        self.job.progressed.connect(self._on_progress)
        self.job.finished.connect(self._finished)
        self.job.cancelled.connect(lambda: self._say("screen cancelled"))
        self.job.failed.connect(self._failed)
        #: The last finished screen, or ``None``.
        self.outcome: Outcome | None = None
        #: The pair matrix drawn in the dock (RGB), or ``None``.
        self.matrix_rgb: np.ndarray | None = None
        self._runs = 0
        p = self.panel
        p.run_button.clicked.connect(lambda: self.run())
        p.cancel_button.clicked.connect(lambda: self.job.cancel())
        # Esc (Run → Stop) cancels the screen as it cancels every dock's job
        # (BackgroundCalls.cancel_jobs): a screen of minutes needs no Tab to Cancel.
        p.cancel_button.setToolTip("Stop the screen (Esc); its result is dropped")
        p.colour_button.clicked.connect(lambda: self.colour())
        p.browse.clicked.connect(self._browse)
        state = host.state
        state.events.selected.connect(lambda _index: self._show_target())
        state.events.model.connect(self._on_model)
        state.events.screen.connect(lambda effect: p.colour_button.setEnabled(
            effect is not None))
        self._show_target()

    # ------------------------------------------------------------ the brain
    def brain(self) -> "SpikingBrain | None":
        """The spiking brain shown, or ``None``."""
        model = self.host.state.model
        return model.brain if isinstance(model, SpikingModel) else None

    def _on_model(self) -> None:
        self.job.cancel(quiet=True)
        if self.brain() is not None:
            # Behind the Stimulus dock, as ever; not where the user closed it.
            self.host.docks.show_unless_closed("screen", front=False)
            self.panel.status.setText("select the target neuron, choose the sets, press Run")
        self._show_target()

    def _show_target(self) -> None:
        brain, selected = self.brain(), self.host.state.selected
        if brain is None:
            self.panel.target.setText("open a spiking brain (File → Open as spiking brain)")
        elif selected is None:
            self.panel.target.setText("Target: none; select a neuron in the brain")
        else:
            self.panel.target.setText(f"Target: {target_name(brain, selected)}")

    def _browse(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self.host.widget(), "Sets file", "",
                                              "Sets (*.txt *.tsv);;All files (*)")
        if path:
            self.panel.source.setCurrentText(SETS_FILE)
            self.panel.sets.setText(path)

    # ------------------------------------------------------------ running
    def run(self) -> bool:
        """Run the screen the fields say for the selected neuron, in the background; False
        (and why, in the dock) when it cannot start."""
        from flyviz.errors import FlyvizError
        from flyviz.spiking.screen import base_stimulus, check_pairs

        brain, target = self.brain(), self.host.state.selected
        if brain is None:
            self._say("open a spiking brain first", error=True)
            return False
        if target is None:
            self._say("select the target neuron in the brain first", error=True)
            return False
        p = self.panel
        try:
            settings = p.settings()
            # said here, in the dock's words, not once the job has started
            base_stimulus(brain, settings, stimulus_field_words())
            sets = screen_sets(brain, p.source.currentText(), p.sets.text())
            pairs = check_pairs(p.pairs.value(), len(sets), brain.neurons)
        except FlyvizError as exc:
            self._say(str(exc), error=True)
            return False
        self._say(f"running {len(sets):,} set(s) and the baseline"
                  + (f", then the pairs of the top {pairs}" if pairs else "")
                  + f", {settings.trials} x {settings.duration_s * 1000:g} ms each…")
        self.job.start(lambda stop, report: run_job(brain, sets, settings, int(target), stop,
                                                    report, pairs))
        return True

    def wait(self, timeout_s: float = 60.0) -> None:
        """Wait for the running screen to report (scripts), handling the window's events."""
        import time

        from PySide6.QtCore import QCoreApplication

        end = time.monotonic() + timeout_s
        while self.job.busy and time.monotonic() < end:
            QCoreApplication.processEvents()
            time.sleep(0.01)

    def _on_progress(self, fraction: float) -> None:
        self.panel.status.setText(f"screening… {fraction:.0%}")

    def _failed(self, message: str) -> None:
        self._say(f"screen failed: {message}", error=True)

    def _finished(self, outcome: Outcome) -> None:
        if outcome.effect.values.shape[0] != self.host.state.neurons:
            return                      # another brain is shown now
        self.outcome = outcome
        self._runs += 1
        result = outcome.result
        singles = result.singles
        change = result.change_of(outcome.target)[singles]
        top = int(np.argmax(np.abs(change))) if change.size else 0
        moved = change.size and change[top] != 0
        self._say(f"{len(singles):,} set(s)"
                  + (f" and {len(result.sets) - len(singles):,} pairs" if result.top else "")
                  + f": target {outcome.effect.baseline_hz:.1f} Hz in the baseline; "
                  + (f"largest change {change[top]:+.1f} Hz ({result.sets[singles[top]].name})"
                     if moved else "no set changes its rate")
                  + (f"; {result.pruned:,} answered from the baseline" if result.pruned
                     else ""))
        self._show_effects(outcome)
        self.colour(outcome.effect)

    def _show_effects(self, outcome: Outcome) -> None:
        """List the single sets' effects (p, q) and draw the pair matrix."""
        from PySide6.QtGui import QImage, QPixmap

        from flyviz.spiking.screen import ALPHA

        result, p = outcome.result, self.panel
        effect, p_value, q_value = result.effects(outcome.target)
        singles = result.singles
        order = sorted(singles, key=lambda i: -abs(effect[i]))[:EFFECT_ROWS]
        width = max([3] + [len(result.sets[i].name[:24]) for i in order])
        lines = [f"{'set':<{width}}  {'Δ Hz':>8}  {'p':>7}  {'q':>7}"]
        lines += [f"{result.sets[i].name[:24]:<{width}}  {effect[i]:>+8.2f}  "
                  f"{p_value[i]:>7.2g}  {q_value[i]:>7.2g}"
                  + (" *" if q_value[i] <= ALPHA else "") for i in order]
        found = int((q_value[singles] <= ALPHA).sum())
        lines.append(f"{found} of {len(singles)} set(s) with q <= {ALPHA:g} (Benjamini-Hochberg "
                     f"over the sets)")
        pairs = [i for i, pair in enumerate(result.pair_of) if pair is not None]
        if pairs:
            # the pairs were chosen from the sets' effects: q over the pairs alone
            lines.append(f"{int((q_value[pairs] <= ALPHA).sum())} of {len(pairs)} pair(s) with "
                         f"q <= {ALPHA:g} (over the pairs alone: chosen from the sets' "
                         "effects)")
        p.effects.setText("\n".join(lines))
        p.effects.setVisible(True)
        if not result.top:
            p.matrix.clear()
            p.matrix.setFixedSize(0, 0)
            p.matrix_caption.setText("")
            self.matrix_rgb = None
            p.adjustSize()
            return
        names, matrix = result.pair_matrix(outcome.target)
        cell = max(4, min(CELL_PX, MATRIX_PX // len(names)))
        self.matrix_rgb = pair_matrix_image(matrix, cell)
        height, width_px, _ = self.matrix_rgb.shape
        image = QImage(self.matrix_rgb.data, width_px, height, 3 * width_px,
                       QImage.Format.Format_RGB888).copy()
        p.matrix.setPixmap(QPixmap.fromImage(image))
        p.matrix.setFixedSize(width_px, height)   # never squeezed: a cell is a cell
        p.matrix.setToolTip("\n".join(f"{k + 1}. {name}" for k, name in enumerate(names)))
        p.matrix_caption.setText(
            f"pairs of the top {len(names)} ({', '.join(names[:6])}"
            + (", …" if len(names) > 6 else "") + f"): Δ rate of the target, ±"
            f"{np.nanmax(np.abs(matrix)):.2f} Hz, blue less, crimson more; the sets alone "
            "on the diagonal")
        p.adjustSize()   # the scroll area shows all of the longer panel

    def colour(self, effect: ScreenEffect | None = None) -> bool:
        """Colour the brain by ``effect`` (default: the last screen's), through the state."""
        if effect is None:
            effect = self.outcome.effect if self.outcome is not None else None
        if effect is None:
            return False
        self.host.state.screen = effect
        return self.host.colour_by.choose(SCREEN)

    def _say(self, message: str, error: bool = False) -> None:
        self.panel.status.setText(message)
        if error:   # "screen failed: ..." names the screen already
            self.host.show_message(message if message.startswith("screen")
                                   else f"screen: {message}", True)


def install(host: "WindowHost") -> ScreenFeature:
    """Add the Screen dock to ``host``."""
    return ScreenFeature(host)
