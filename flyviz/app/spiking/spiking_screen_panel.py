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

from flyviz.app.window.background import BackgroundJob, CancellableProgress, Cancelled
from flyviz.kinds.spiking import SPIKING_KEY, SpikingModel
from flyviz.viewer.layers import SCREEN, ScreenEffect

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.app.window.host import WindowHost
    from flyviz.spiking.brain import SpikingBrain
    from flyviz.spiking.screen import NeuronSet, ScreenResult, ScreenSettings

__all__ = ["EACH_NEURON", "SCREEN_KINDS", "SETS_FILE", "ScreenFeature", "ScreenPanel",
           "effect_of", "install"]

#: What the Screen dock serves.
SCREEN_KINDS = (SPIKING_KEY,)
#: The two sources of a screen's sets.
EACH_NEURON = "each neuron of"
SETS_FILE = "sets file"
#: The :class:`~flyviz.app.window.background.BackgroundCalls` purpose of a screen.
PURPOSE = "spiking-screen"


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
        form = QFormLayout()
        sets_row = QHBoxLayout()
        sets_row.addWidget(self.source)
        sets_row.addWidget(self.sets, 1)
        sets_row.addWidget(self.browse)
        form.addRow("Sets", sets_row)
        form.addRow("Mode", self.mode)
        form.addRow("Stimulus", self.excite)
        form.addRow("Rate", self.rate)
        form.addRow("Length", self.duration)
        form.addRow("Trials", self.trials)
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
        layout = QVBoxLayout(self)
        layout.addWidget(heading)
        layout.addWidget(self.target)
        layout.addLayout(form)
        layout.addLayout(buttons)
        layout.addLayout(busy)
        layout.addWidget(self.status)
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


def run_job(brain: "SpikingBrain", sets: list["NeuronSet"], settings: "ScreenSettings",
            target: int, stop: threading.Event, report: Callable[[float], None]
            ) -> Outcome | None:
    """Run the screen off the UI thread (``None`` when Cancel stopped it)."""
    from flyviz.spiking.screen import run_screen

    progress = CancellableProgress(len(sets) + 1, stop, report)
    try:
        result = run_screen(brain, sets, settings, workers=0, progress=progress,
                            columns=np.array([target]))
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
        self._runs = 0
        p = self.panel
        p.run_button.clicked.connect(lambda: self.run())
        p.cancel_button.clicked.connect(lambda: self.job.cancel())
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
            self.dock.show()
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
            sets = screen_sets(brain, p.source.currentText(), p.sets.text())
        except FlyvizError as exc:
            self._say(str(exc), error=True)
            return False
        self._say(f"running {len(sets):,} set(s) and the baseline, "
                  f"{settings.trials} x {settings.duration_s * 1000:g} ms each…")
        self.job.start(lambda stop, report: run_job(brain, sets, settings, int(target), stop,
                                                    report))
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
        change = outcome.result.change_of(outcome.target)
        top = int(np.argmax(np.abs(change))) if change.size else 0
        moved = change.size and change[top] != 0
        self._say(f"{len(outcome.result.sets):,} set(s): target "
                  f"{outcome.effect.baseline_hz:.1f} Hz in the baseline; "
                  + (f"largest change {change[top]:+.1f} Hz ({outcome.result.sets[top].name})"
                     if moved else "no set changes its rate"))
        self.colour(outcome.effect)

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
        if error:
            self.host.show_message(f"screen: {message}", True)


def install(host: "WindowHost") -> ScreenFeature:
    """Add the Screen dock to ``host``."""
    return ScreenFeature(host)
