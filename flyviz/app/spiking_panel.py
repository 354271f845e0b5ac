"""The spiking brain in the window: File → Open as spiking brain, and the Stimulus dock.

File → *Open as spiking brain* runs Shiu et al.'s LIF model on the loaded model's own graph
(:func:`flyviz.spiking.brain_from_checkpoint`: its neurons and soma positions, so the 3-D
brain is the one already drawn) and shows it as the spiking kind (:mod:`flyviz.kinds.spiking`):
the docks that serve only the language model (Text, Next token, Why?...) are hidden, the
timeline counts 10 ms bins. The Stimulus dock (shown for the spiking kind alone) says which
neurons are excited (a query; empty: the brain's own sensory set), at what rate, which are
silenced, and for how many bins; *Run* simulates off the UI thread, then the bins play at the
chosen real-time factor, *Pause* stops and resumes them. The status line says how fast the
engine ran (simulated time over wall time) and the playback's real-time factor.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Qt, QTimer, Signal
from PySide6.QtWidgets import (QDoubleSpinBox, QFormLayout, QHBoxLayout, QLabel, QLineEdit,
                               QPushButton, QSpinBox, QVBoxLayout, QWidget)

from flyviz.kinds.spiking import SPIKING, SPIKING_KEY, BinSettings, SpikingModel, Stimulus

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.app.host import WindowHost
    from flyviz.record.recording import Recording

__all__ = ["SPIKING_KINDS", "SpikingFeature", "StimulusPanel", "install"]

#: What the Stimulus dock serves.
SPIKING_KINDS = (SPIKING_KEY,)


class StimulusPanel(QWidget):
    """Which neurons are excited, at what rate, which silenced; Run, Play/Pause, speed."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.excite = QLineEdit()
        self.excite.setPlaceholderText("the brain's own set (e.g. superclass:sensory)")
        self.rate = QDoubleSpinBox()
        self.rate.setRange(0.0, 10000.0)
        self.rate.setValue(150.0)
        self.rate.setSuffix(" Hz")
        self.silence = QLineEdit()
        self.silence.setPlaceholderText("none (e.g. type:MN9)")
        self.bins = QSpinBox()
        self.bins.setRange(1, 100000)
        self.bins.setValue(50)
        self.bins.setSuffix(" bins of 10 ms")
        self.speed = QDoubleSpinBox()
        self.speed.setRange(0.01, 100.0)
        self.speed.setValue(0.1)
        self.speed.setSuffix("x real time")
        self.run_button = QPushButton("Run")
        self.play_button = QPushButton("Pause")
        self.play_button.setEnabled(False)
        self.status = QLabel("not run yet")
        self.status.setWordWrap(True)
        form = QFormLayout()
        form.addRow("Excite", self.excite)
        form.addRow("Rate", self.rate)
        form.addRow("Silence", self.silence)
        form.addRow("Length", self.bins)
        form.addRow("Playback", self.speed)
        buttons = QHBoxLayout()
        buttons.addWidget(self.run_button)
        buttons.addWidget(self.play_button)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addLayout(buttons)
        layout.addWidget(self.status)
        layout.addStretch(1)

    def stimulus(self) -> Stimulus:
        """The stimulus the fields say."""
        return Stimulus(excite=self.excite.text().strip() or None, rate=self.rate.value(),
                        silence=self.silence.text().strip() or None)


class _Done(QObject):
    """Carries a finished run from the simulating thread to the UI thread."""

    finished = Signal(object, float)
    failed = Signal(str)


class SpikingFeature:
    """Opens the loaded model as a spiking brain and runs it from the Stimulus dock."""

    def __init__(self, host: "WindowHost") -> None:
        self.host = host
        self.panel = StimulusPanel()
        self.dock = host.docks.add("stimulus", "Stimulus", self.panel,
                                   Qt.DockWidgetArea.LeftDockWidgetArea, scroll=True)
        self.dock.hide()
        self.model: SpikingModel | None = None
        self.recording: Recording | None = None
        #: How fast the engine ran the last run: simulated time over wall time.
        self.engine_factor = 0.0
        self._done = _Done()
        self._done.finished.connect(self._finished)
        self._done.failed.connect(self._failed)
        self._thread: threading.Thread | None = None
        self.timer = QTimer(host.widget())
        self.timer.timeout.connect(self._step)
        self.playing = False
        self.panel.run_button.clicked.connect(self.run)
        self.panel.play_button.clicked.connect(self.toggle_play)
        self.panel.speed.valueChanged.connect(self._set_interval)
        action = host.actions_registry.menu("File").addAction("Open as spiking brain")
        action.setToolTip("Run the loaded model's graph as Shiu et al.'s spiking brain")
        action.triggered.connect(lambda: self.open_loaded())
        self.open_action = action

    # ------------------------------------------------------------ opening
    def open_loaded(self) -> bool:
        """Show the loaded model's graph as a spiking brain; False when none is loaded."""
        checkpoint = self.host.models.checkpoint
        if checkpoint is None:
            self.host.show_message("load a model first: its graph is the spiking brain", True)
            return False
        from flyviz.spiking import BrainError, brain_from_checkpoint

        try:
            brain = brain_from_checkpoint(checkpoint)
        except BrainError as exc:  # weights that are not synapse counts
            self.host.show_message(str(exc), True)
            return False
        brain.name = f"{getattr(checkpoint, 'name', '') or 'model'} (spiking)"
        if brain.default_excite is None and brain.synapses:
            from flyviz.spiking.demo import strongest_sensory

            brain.default_excite = strongest_sensory(brain)  # as `flyviz simulate demo`
        self.open(SpikingModel(brain))
        return True

    def open(self, model: SpikingModel) -> None:
        """Show ``model``: the spiking kind's docks, an empty timeline."""
        from flyviz.record.recording import Recording

        self.stop_playback()
        state = self.host.state
        same = state.anatomy is not None and state.neurons == model.neurons
        state.set_model(model, state.anatomy if same else model.drawing_anatomy())
        self.model = model
        state.set_recording(Recording(model.neurons, {"kind": SPIKING_KEY}))
        self.host.docks.show(self.dock)
        self.panel.status.setText(f"{model.name}: {model.neurons:,} neurons; press Run")

    # ------------------------------------------------------------ running
    def run(self) -> bool:
        """Simulate the stimulus off the UI thread; its bins play when it is done."""
        if self.model is None or (self._thread is not None and self._thread.is_alive()):
            return False
        from flyviz.kinds.spiking import record_run

        model, stimulus = self.model, self.panel.stimulus()
        settings = BinSettings(bins=self.panel.bins.value())
        self.stop_playback()
        self.panel.run_button.setEnabled(False)
        self.panel.status.setText(f"simulating {settings.bins * settings.bin_ms:g} ms…")

        def work() -> None:
            start = time.perf_counter()
            try:
                recording = record_run(model, stimulus, settings)
            except Exception as exc:  # shown as one line, the run is not started
                self._done.failed.emit(str(exc).splitlines()[0] if str(exc) else repr(exc))
                return
            self._done.finished.emit(recording, time.perf_counter() - start)

        self._thread = threading.Thread(target=work, name="flyviz-spiking", daemon=True)
        self._thread.start()
        return True

    def wait(self, timeout: float = 60.0) -> None:
        """Wait for a run's simulation to end (scripts and tests)."""
        if self._thread is not None:
            self._thread.join(timeout)

    def _failed(self, message: str) -> None:
        self.panel.run_button.setEnabled(True)
        self.panel.status.setText(f"not run: {message}")
        self.host.show_message(f"spiking run: {message}", True)

    def _finished(self, recording: "Recording", wall_s: float) -> None:
        self.panel.run_button.setEnabled(True)
        self.recording = recording
        simulated = len(recording) * SPIKING.time_axis.step / 1000.0
        self.engine_factor = simulated / wall_s if wall_s > 0 else float("inf")
        self.host.state.set_recording(recording, index=0)
        self.host.state.index = 0
        self.panel.play_button.setEnabled(True)
        self.playing = True
        self._set_interval()
        self.timer.start()
        self._say()

    # ------------------------------------------------------------ playback
    def _set_interval(self) -> None:
        self.timer.setInterval(max(1, int(round(SPIKING.time_axis.step
                                                / self.panel.speed.value()))))
        self._say()

    def _say(self) -> None:
        if self.recording is None:
            return
        words = SPIKING.counter(self.recording, self.host.state.index)
        self.panel.status.setText(
            f"{words}\nengine: {self.engine_factor:.3g}x real time; playback "
            f"{self.panel.speed.value():g}x real time" + ("" if self.playing else " (paused)"))

    def _step(self) -> None:
        if self.recording is None:
            return
        index = self.host.state.index + 1
        if index >= len(self.recording):
            self.stop_playback()
            return
        self.host.state.index = index
        self._say()

    def toggle_play(self) -> None:
        """Pause the bins' playback, or resume it (from the start once it ended)."""
        if self.playing:
            self.stop_playback()
        elif self.recording is not None:
            if self.host.state.index >= len(self.recording) - 1:
                self.host.state.index = 0
            self.playing = True
            self.timer.start()
            self.panel.play_button.setText("Pause")
            self._say()

    def stop_playback(self) -> None:
        """Stop the playback where it is."""
        self.timer.stop()
        self.playing = False
        self.panel.play_button.setText("Play")
        self._say()


def install(host: "WindowHost") -> SpikingFeature:
    """Add File → Open as spiking brain and the Stimulus dock to ``host``."""
    return SpikingFeature(host)
