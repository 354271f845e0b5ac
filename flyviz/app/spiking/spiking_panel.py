"""The spiking brain in the window: File → Open as spiking brain, the Stimulus dock, live runs.

File → *Open as spiking brain* runs Shiu et al.'s LIF model on the loaded model's own graph
(:func:`flyviz.spiking.brain_from_checkpoint`: its neurons and soma positions, so the 3-D
brain is the one already drawn) and shows it as the spiking kind (:mod:`flyviz.kinds.spiking`):
the docks that serve only the language model (Text, Next token, Why?, patching...) are hidden,
the timeline counts 10 ms bins. A spiking recording opened with File → Open recording is shown
so too, on the brain it names.

The Stimulus dock (shown for the spiking kind alone) says which neurons are excited (a query;
empty: the brain's own sensory set; *Excite selected* adds the neuron picked on the brain), at
what rate, which are silenced (*Silence selected* likewise), for how many bins, how fast, and
how the brain is coloured: each neuron's rate in the bin, or its spikes flashing and fading
(:func:`flyviz.viewer.layers.flash_layer`). *Run* starts a live run on the engine's worker
thread (:class:`SpikingWorker`, an :class:`~flyviz.app.runs.worker.EngineWorker` stepping
:class:`~flyviz.kinds.spiking.LiveRun` one bin at a time): each bin's frame goes into the
shown recording as it is simulated (the one Frame → Recording path of the language model's
runs), so the brain, the timeline, the population dock and a movie export see it at once and
scrubbing works afterwards; each bin's spikes, at their ticks, go into the recording's
:attr:`~flyviz.record.recording.Recording.spikes` with it (the population dock's raster). *Pause*/*Play* hold and resume the simulation itself; the speed
caps it at a factor of real time (or lets it run as fast as it goes); the status line says the
real-time factor reached (biological seconds per wall second) and the engine's own.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from PySide6.QtCore import QEvent, QObject, Qt, Slot
from PySide6.QtWidgets import (QComboBox, QDoubleSpinBox, QFormLayout, QHBoxLayout, QLabel,
                               QLineEdit, QPushButton, QSpinBox, QVBoxLayout, QWidget)

from flyviz.app.runs.worker import PAUSED, RUNNING, EngineThread, EngineWorker
from flyviz.kinds.spiking import (SPIKING, SPIKING_KEY, BinSettings, LiveRun, SpikingModel,
                                  Stimulus)
from flyviz.viewer.layers import FLASH, RATE, flash_layer, rate_layer
from flyviz.viewer.parts import NEW_RUN

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from flyviz.app.window.host import WindowHost
    from flyviz.record.frame import Frame
    from flyviz.record.recording import Recording

__all__ = ["DISPLAY_MODES", "SPIKING_KINDS", "SpikingBin", "SpikingFeature", "SpikingRequest",
           "SpikingWorker", "StimulusPanel", "install"]

#: What the Stimulus dock serves.
SPIKING_KINDS = (SPIKING_KEY,)

#: The Stimulus dock's colourings: its title and the *Colour by* entry it shows.
DISPLAY_MODES = (("Rate in the bin (Hz)", RATE), ("Spikes flash and fade", FLASH))


class StimulusPanel(QWidget):
    """Which neurons are excited, at what rate, which silenced; Run, Pause/Play, Stop, speed,
    and how the brain is coloured."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.excite = QLineEdit()
        self.excite.setPlaceholderText("the brain's own set (e.g. superclass:sensory)")
        self.excite_selected = QPushButton("Excite selected")
        self.excite_selected.setToolTip("Add the neuron selected on the brain to the excited")
        self.rate = QDoubleSpinBox()
        self.rate.setRange(0.0, 10000.0)
        self.rate.setValue(150.0)
        self.rate.setSuffix(" Hz")
        self.silence = QLineEdit()
        self.silence.setPlaceholderText("none (e.g. type:MN9)")
        self.silence_selected = QPushButton("Silence selected")
        self.silence_selected.setToolTip("Add the neuron selected on the brain to the silenced")
        self.bins = QSpinBox()
        self.bins.setRange(1, 1000000)
        self.bins.setValue(100)
        self.bins.setSuffix(" bins of 10 ms")
        self.speed = QDoubleSpinBox()
        self.speed.setRange(0.0, 100.0)
        self.speed.setDecimals(2)
        self.speed.setValue(1.0)
        self.speed.setSuffix("x real time")
        self.speed.setSpecialValueText("as fast as it runs")
        self.speed.setToolTip("Biological time per wall time, at most (0: no cap)")
        self.display = QComboBox()
        for title, key in DISPLAY_MODES:
            self.display.addItem(title, key)
        self.run_button = QPushButton("Run")
        self.play_button = QPushButton("Pause")
        self.play_button.setEnabled(False)
        self.stop_button = QPushButton("Stop")
        self.stop_button.setEnabled(False)
        self.status = QLabel("not run yet")
        self.status.setWordWrap(True)
        excite_row = QHBoxLayout()
        excite_row.addWidget(self.excite, 1)
        excite_row.addWidget(self.excite_selected)
        silence_row = QHBoxLayout()
        silence_row.addWidget(self.silence, 1)
        silence_row.addWidget(self.silence_selected)
        form = QFormLayout()
        form.addRow("Excite", excite_row)
        form.addRow("Rate", self.rate)
        form.addRow("Silence", silence_row)
        form.addRow("Length", self.bins)
        form.addRow("Speed", self.speed)
        form.addRow("Colour", self.display)
        buttons = QHBoxLayout()
        buttons.addWidget(self.run_button)
        buttons.addWidget(self.play_button)
        buttons.addWidget(self.stop_button)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addLayout(buttons)
        layout.addWidget(self.status)
        layout.addStretch(1)

    def stimulus(self) -> Stimulus:
        """The stimulus the fields say."""
        return Stimulus(excite=self.excite.text().strip() or None, rate=self.rate.value(),
                        silence=self.silence.text().strip() or None)

    @staticmethod
    def add_neuron(field: QLineEdit, neuron: int) -> None:
        """Add ``id:neuron`` to the query in ``field`` (``what it says | id:neuron``)."""
        term = f"id:{int(neuron)}"
        text = field.text().strip()
        if term in text.replace("(", " ").replace(")", " ").replace("|", " ").split():
            return
        field.setText(f"{text} | {term}" if text else term)


@dataclass(frozen=True)
class SpikingRequest:
    """Everything the worker needs to start a live spiking run (what
    :meth:`EngineWorker.start` reads: ``run_id``, ``start_paused``)."""

    run_id: int
    model: SpikingModel
    stimulus: Stimulus
    settings: BinSettings
    start_paused: bool = False


@dataclass(frozen=True)
class SpikingBin:
    """One simulated bin as the worker hands it over: its frame, spike count, how long the
    engine took for it (wall seconds) and its spikes, ``(ticks, neurons, trials)``
    (:attr:`LiveRun.last_spikes <flyviz.kinds.spiking.LiveRun.last_spikes>`)."""

    frame: "Frame"
    spikes: int
    compute_s: float
    events: "tuple[np.ndarray, np.ndarray, np.ndarray] | None" = None


class SpikingWorker(EngineWorker):
    """The engine's worker stepping a :class:`~flyviz.kinds.spiking.LiveRun` one bin per
    tick, with the worker's pause, stop, speed cap and back-pressure."""

    def _open_run(self, request: Any) -> Iterator[Any]:
        run = LiveRun(request.model, request.stimulus, request.settings)  # InputError: failed

        def bins() -> Iterator[SpikingBin]:
            for _ in range(run.settings.bins):
                start = time.perf_counter()
                frame, spikes = run.next_bin()
                yield SpikingBin(frame, spikes, time.perf_counter() - start, run.last_spikes)

        return bins()


class SpikingFeature(QObject):
    """Opens a spiking brain, runs it live from the Stimulus dock, shows its populations."""

    def __init__(self, host: "WindowHost") -> None:
        super().__init__(host.widget())
        from flyviz.app.spiking.spiking_population import SpikingPopulationPanel

        self.host = host
        self.panel = StimulusPanel()
        self.dock = host.docks.add("stimulus", "Stimulus", self.panel,
                                   Qt.DockWidgetArea.LeftDockWidgetArea, scroll=True)
        self.dock.hide()
        self.population = SpikingPopulationPanel(host.state)
        self.population_dock = host.docks.add("spiking_population", "Spiking populations",
                                             self.population,
                                             Qt.DockWidgetArea.BottomDockWidgetArea)
        self.population_dock.hide()
        self.model: SpikingModel | None = None
        #: The live run's recording (the one the window shows while it runs).
        self.recording: Recording | None = None
        #: The engine's speed over the run: biological time over compute time.
        self.engine_factor = 0.0
        #: The real-time factor reached: biological seconds per wall second, recently.
        self.realtime_factor = 0.0
        self.engine: EngineThread | None = None
        self._run_id = 0
        self._arrivals: deque[float] = deque(maxlen=64)
        self._compute_s = 0.0
        self.state = "idle"
        self.finished = True
        self._ended = ""
        host.state.offer_layer(RATE, rate_layer, available=False)
        host.state.offer_layer(FLASH, flash_layer, available=False)
        self.panel.run_button.clicked.connect(lambda: self.run())
        self.panel.play_button.clicked.connect(self.toggle_play)
        self.panel.stop_button.clicked.connect(self.stop)
        self.panel.speed.valueChanged.connect(self._set_speed)
        self.panel.display.currentIndexChanged.connect(lambda _i: self._apply_display())
        self.panel.excite_selected.clicked.connect(lambda: self.add_selected("excite"))
        self.panel.silence_selected.clicked.connect(lambda: self.add_selected("silence"))
        host.state.events.selected.connect(self._on_selected)
        host.state.events.model.connect(self._on_model)
        self._on_selected(host.state.selected)
        action = host.actions_registry.menu("File").addAction("Open as spiking brain")
        action.setToolTip("Run the loaded model's graph as Shiu et al.'s spiking brain")
        action.triggered.connect(lambda: self.open_loaded())
        self.open_action = action
        host.widget().installEventFilter(self)

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

    def open(self, model: SpikingModel, recording: "Recording | None" = None) -> None:
        """Show ``model``: the spiking kind's docks, and ``recording`` (default: empty)."""
        from flyviz.record.recording import Recording

        self.stop()
        state = self.host.state
        same = state.anatomy is not None and state.neurons == model.neurons
        state.set_model(model, state.anatomy if same else model.drawing_anatomy())
        self.model = model
        state.set_available([RATE, FLASH], True)
        if recording is None:
            recording = Recording(model.neurons, {"kind": SPIKING_KEY},
                                  states_dtype="float32")
        self.recording = recording
        state.set_recording(recording, index=0 if len(recording) else None)
        self.host.docks.show(self.dock)
        self.population_dock.show()
        self.population.set_brain(model.brain)
        self._apply_display()
        if len(recording):
            self.panel.status.setText(f"{model.name}: {len(recording):,} bins recorded")
        else:
            self.panel.status.setText(f"{model.name}: {model.neurons:,} neurons; press Run")

    def show_recording(self, recording: "Recording") -> SpikingModel:
        """Show a spiking recording (a ``.flyrec`` of ``flyviz simulate --record``) on the
        brain it names (a stand-in ball when that does not load); returns the model."""
        model, note = SPIKING.shown_model(recording)
        self.open(model, recording)
        if note:
            self.host.show_message(note)
        return model

    def _on_model(self) -> None:
        """Another model is shown: a live run of the spiking one ends, and its colouring is
        no longer offered unless the new one is spiking too."""
        if not self.host.state.kind.shows(SPIKING_KINDS):
            self.stop()
            self.model = None
            self.host.state.set_available([RATE, FLASH], False)

    # ------------------------------------------------------------ the stimulus
    def _on_selected(self, neuron: int | None) -> None:
        for button in (self.panel.excite_selected, self.panel.silence_selected):
            button.setEnabled(neuron is not None)

    def add_selected(self, which: str) -> bool:
        """Add the neuron selected on the brain to the excited (``"excite"``) or silenced
        (``"silence"``) query; False when none is selected."""
        neuron = self.host.state.selected
        if neuron is None:
            return False
        field = self.panel.excite if which == "excite" else self.panel.silence
        self.panel.add_neuron(field, neuron)
        return True

    def _apply_display(self) -> None:
        key = self.panel.display.currentData()
        state = self.host.state
        if state.kind.shows(SPIKING_KINDS) and key in state.colour_layers:
            state.colour_by = key

    # ------------------------------------------------------------ running
    def run(self) -> bool:
        """Start a live run of the stimulus (a running one stops); False if it cannot."""
        if self.model is None:
            self.host.show_message("open a spiking brain first (File → Open as spiking brain)",
                                   True)
            return False
        from flyviz.errors import FlyvizError
        from flyviz.record.recording import Recording

        model, stimulus = self.model, self.panel.stimulus()
        settings = BinSettings(bins=self.panel.bins.value())
        try:
            excite, silence = stimulus.indices(model.brain)
        except FlyvizError as exc:
            self._failed(self._run_id, str(exc))
            return False
        self.stop()
        from flyviz.record.spikes import SpikeLog
        from flyviz.spiking.engine import LIFParams

        meta = SPIKING.metadata(model, stimulus, settings, [], excite, silence)
        recording = Recording(model.neurons, meta, states_dtype="float32")
        recording.spikes = SpikeLog(LIFParams().dt)   # each bin's spikes, as they arrive
        self.recording = recording
        self.host.state.set_recording(recording, cause=NEW_RUN)
        self._apply_display()
        thread = self._engine()
        self._run_id += 1
        self._arrivals.clear()
        self._compute_s = 0.0
        self.engine_factor = self.realtime_factor = 0.0
        self.finished = False
        self._set_speed()
        # the worker reads what SpikingRequest shares with RunRequest (run_id, start_paused)
        thread.start(cast(Any, SpikingRequest(self._run_id, model, stimulus, settings)))
        self.panel.run_button.setText("Run again")
        self.panel.play_button.setEnabled(True)
        self.panel.stop_button.setEnabled(True)
        self.panel.status.setText(f"starting {settings.bins * settings.bin_ms:g} ms…")
        return True

    def _engine(self) -> EngineThread:
        if self.engine is None:
            thread = EngineThread(self, SpikingWorker(max_ahead=4), name="flyviz-spiking")
            thread.worker.frame_ready.connect(self._on_bin)
            thread.worker.run_finished.connect(self._on_finished)
            thread.worker.run_failed.connect(self._failed)
            thread.worker.state_changed.connect(self._on_state)
            self.engine = thread
        return self.engine

    def _set_speed(self) -> None:
        """The speed cap in bins per wall second (0: none)."""
        factor = self.panel.speed.value()
        if self.engine is not None:
            bin_s = SPIKING.time_axis.step / 1000.0
            self.engine.set_speed_cap(factor / bin_s if factor > 0 else 0.0)
        self._say()

    @Slot(int, object)
    def _on_bin(self, run_id: int, item: SpikingBin) -> None:
        if self.engine is not None:
            self.engine.frame_taken()
        if run_id != self._run_id or self.recording is None or \
                self.host.state.recording is not self.recording:
            return          # a stopped run's bin still in the queue, or another recording shown
        now = time.perf_counter()
        self._arrivals.append(now)
        self._compute_s += item.compute_s
        self.recording.metadata.setdefault("spiking", {}).setdefault(
            "bin_spikes", []).append(int(item.spikes))
        if self.recording.spikes is not None and item.events is not None:
            self.recording.spikes.append(*item.events)
        self.host.state.append(item.frame)
        bin_s = SPIKING.time_axis.step / 1000.0
        done = len(self.recording) * bin_s
        self.engine_factor = done / self._compute_s if self._compute_s > 0 else float("inf")
        if len(self._arrivals) >= 2 and self._arrivals[-1] > self._arrivals[0]:
            self.realtime_factor = (len(self._arrivals) - 1) * bin_s / (
                self._arrivals[-1] - self._arrivals[0])
        self._say()

    def _on_finished(self, run_id: int, reason: str) -> None:
        if run_id == self._run_id:
            self.finished = True
            self.panel.play_button.setEnabled(False)
            self.panel.stop_button.setEnabled(False)
            self._ended = " (done)" if reason == "done" else " (stopped)"
            self._say()

    def _failed(self, run_id: int, message: str) -> None:
        if run_id != self._run_id:
            return
        self.finished = True
        self.panel.status.setText(f"not run: {message}")
        self.host.show_message(f"spiking run: {message}", True)

    def _on_state(self, state: str) -> None:
        self.state = state
        self.panel.play_button.setText("Play" if state == PAUSED else "Pause")
        self._say()

    @property
    def playing(self) -> bool:
        """True while the live run is simulating (not paused, not over)."""
        return self.state == RUNNING

    def toggle_play(self) -> None:
        """Pause the live run's simulation, or resume it."""
        if self.engine is None or self.finished:
            return
        if self.state == PAUSED:
            self.engine.resume()
        else:
            self.engine.pause()

    def stop(self) -> None:
        """End the live run; its bins stay recorded."""
        if self.engine is not None and not self.finished:
            self.engine.stop()

    def stepping(self) -> bool:
        """Whether the worker will simulate more bins without being asked (it answers once
        it has handled every request sent before: a pause has taken effect when False)."""
        return self.engine is not None and self.engine.stepping()

    def _say(self) -> None:
        recording = self.recording
        if recording is None or not len(recording):
            return
        index = self.host.state.index if 0 <= self.host.state.index < len(recording) else \
            len(recording) - 1
        words = SPIKING.counter(recording, index)
        speed = self.panel.speed.value()
        cap = f"{speed:g}x" if speed > 0 else "no cap"
        paused = " (paused)" if self.state == PAUSED and not self.finished else ""
        self.panel.status.setText(
            f"{words}\nreal time factor: {self.realtime_factor:.3g}x (cap {cap}); engine: "
            f"{self.engine_factor:.3g}x real time{paused}{self._ended if self.finished else ''}")

    # ------------------------------------------------------------ closing
    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt API
        if event.type() == QEvent.Type.Close:
            self.close()
        return False

    def close(self) -> None:
        """End the run and the engine's thread (the window is closing)."""
        if self.engine is not None:
            self.engine.close()
            self.engine = None


def install(host: "WindowHost") -> SpikingFeature:
    """Add File → Open as spiking brain, the Stimulus and Spiking populations docks."""
    return SpikingFeature(host)
