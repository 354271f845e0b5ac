"""The spiking brain in the window: File → Open as spiking brain, the Stimulus dock, live runs.

File → *Open as spiking brain* runs Shiu et al.'s LIF model on the loaded model's own graph
(:func:`flyviz.spiking.brain_from_checkpoint`: its neurons and soma positions, so the 3-D
brain is the one already drawn) and shows it as the spiking kind (:mod:`flyviz.kinds.spiking`):
the docks that serve only the language model (Text, Next token, Why?, patching...) are hidden,
the timeline counts 10 ms bins. A spiking recording opened with File → Open recording is shown
so too, on the brain it names.

The Stimulus dock (shown for the spiking kind alone) says which neurons are excited (a query;
empty: the brain's own sensory set; the **+** beside it adds the neuron picked on the brain),
at what rate, over how many trials (pooled: the brain shows their mean rate, and the
status line says so and counts a bin's spikes per trial), which are silenced (its **+** likewise), for how many bins, how fast,
and how the brain is coloured: each neuron's rate in the bin, or its spikes flashing and fading
(:func:`flyviz.viewer.layers.flash_layer`). Its fields are views of the spiking run settings
the viewer state keeps (:class:`~flyviz.kinds.spiking.SpikingRunSettings`,
``state.kind_settings.of(SPIKING)``): a script that sets them starts the same run.
*Run* (Ctrl+Return, Run → *Run simulation*, the keys that run a Fly LLM's prompt) starts the
run the state describes through the window's runs (:class:`flyviz.runs.Runs`,
the same controller and engine thread as the language model's runs; the kind steps
it, one bin at a time): each bin's frame goes into the shown recording as it is simulated,
so the brain, the timeline, the population dock and a movie export see it at once and
scrubbing works afterwards; each bin's spikes, at their ticks, go into the recording's
:attr:`~flyviz.record.recording.Recording.spikes` with it (the population dock's raster). *Pause*/*Play* hold and resume the simulation itself; the speed
caps it at a factor of real time (or lets it run as fast as it goes); the status line says the
real-time factor reached (biological seconds per wall second) and the engine's own.
"""

from __future__ import annotations

import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QEvent, QObject, Qt, QTimer
from PySide6.QtGui import QAction
from PySide6.QtWidgets import (QComboBox, QDoubleSpinBox, QGridLayout, QHBoxLayout, QLabel,
                               QLineEdit, QMainWindow, QProgressBar, QPushButton, QSizePolicy,
                               QSpinBox, QToolButton,
                               QVBoxLayout, QWidget)

from flyviz.app.base.labels import ElidedLines
from flyviz.app.base.background import BackgroundJob

from flyviz.kinds.spiking import (MAX_RATE_HZ, MAX_TRIALS, SPIKING, SPIKING_KEY,
                                  SpikingModel, SpikingRunSettings, Stimulus)
from flyviz.runs import PAUSED, RUNNING
from flyviz.viewer.layers import FLASH
from flyviz.viewer.state import STATE

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.app.base.host import WindowHost
    from flyviz.model.checkpoint import Anatomy
    from flyviz.record.recording import Recording
    from flyviz.runs import Run

__all__ = ["DISPLAY_MODES", "SPIKING_KINDS", "SpikingFeature", "StimulusPanel", "install"]

#: What the Stimulus dock serves.
SPIKING_KINDS = (SPIKING_KEY,)

#: The least share of its row's width the Spiking populations dock takes as a brain opens.
POPULATION_SHARE = 0.6

#: The Stimulus dock's colourings: its title and the *Colour by* entry it shows (the rate in
#: the bin is the recorded state itself, the kind's *Live state* in Hz).
DISPLAY_MODES = (("Show rates (Hz)", STATE), ("Show spikes", FLASH))


def _label(text: str, field: QWidget) -> QLabel:
    """A label naming ``field`` (its buddy: a screen reader says it with the field)."""
    label = QLabel(text)
    label.setBuddy(field)
    return label


class StimulusPanel(QWidget):
    """Which neurons are excited, at what rate, over how many trials, which silenced; Run,
    Pause/Play, Stop, speed, and how the brain is coloured."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.excite = QLineEdit()
        self.excite.setPlaceholderText("the brain's own set (e.g. superclass:sensory)")
        # "+" beside each query: the column is a quarter of a laptop screen wide, and the
        # words "Excite selected" beside the field widened it at the brain's expense.
        self.excite_selected = QToolButton()
        self.excite_selected.setText("+")
        self.excite_selected.setToolTip("Excite the neuron selected on the brain too (adds "
                                        "| id:N to the query)")
        self.rate = QDoubleSpinBox()
        # The settings' bounds (0 Hz, which drives nothing, is refused there): the smallest
        # rate one decimal shows, up to one event a tick.
        self.rate.setRange(0.1, MAX_RATE_HZ)
        self.rate.setDecimals(1)
        self.rate.setValue(150.0)
        self.rate.setSuffix(" Hz")
        self.trials = QSpinBox()
        self.trials.setRange(1, MAX_TRIALS)        # the settings' bounds, as napari's box
        self.trials.setSuffix(" trials")
        self.trials.setSpecialValueText("1 trial")  # the minimum, in words ("1 trials")
        self.trials.setToolTip("Runs of the same stimulus pooled into each bin: the brain "
                               "shows their mean rate")
        self.silence = QLineEdit()
        self.silence.setPlaceholderText("none (e.g. type:MN9)")
        self.silence_selected = QToolButton()
        self.silence_selected.setText("+")
        self.silence_selected.setToolTip("Silence the neuron selected on the brain too (adds "
                                         "| id:N to the query)")
        self.bins = QSpinBox()
        self.bins.setRange(1, 1000000)
        self.bins.setValue(100)
        self.bins.setPrefix("for ")
        self.bins.setSuffix(" bins")
        self.bins.setToolTip("The run's length, in bins of 10 ms")
        self.speed = QDoubleSpinBox()
        self.speed.setRange(0.0, 100.0)
        self.speed.setDecimals(2)
        self.speed.setValue(1.0)
        self.speed.setSuffix("x")
        self.speed.setSpecialValueText("no cap")
        self.speed.setToolTip("Biological time per wall time, at most: 1x is real time; "
                              "0 (no cap) runs as fast as it can")
        self.display = QComboBox()
        for title, key in DISPLAY_MODES:
            self.display.addItem(title, key)
        self.run_button = QPushButton("Run")
        self.play_button = QPushButton("Pause")
        self.play_button.setEnabled(False)
        self.stop_button = QPushButton("Stop")
        self.stop_button.setEnabled(False)
        # Two lines held from the start (a run's status has two): the dock is fitted to its
        # form when it opens, and a second line later pushed the last row below its edge. A
        # line wider than the dock is elided, not wrapped (the whole of it in the tooltip):
        # wrapped, "0.213x real time (uncapped), engine 0.151x (done)" took a third line
        # after a run, and the form scrolled, its Speed row cut.
        self.status = ElidedLines("not run yet", lines=2)
        self.display.setToolTip("The brain's colours: each neuron's rate in the shown bin (the "
                                "live state), or its spikes flashing and fading")
        # Five rows (the length beside the trials, the colours beside the speed): the dock
        # shares the left column with the Neuron dock, and at 1280×800 a row for each field
        # put the last ones below its edge.
        form = QGridLayout()
        form.setVerticalSpacing(4)
        form.setColumnStretch(1, 1)
        form.setColumnStretch(2, 1)
        # Each field is named for a screen reader: by its label (a buddy), or, beside
        # another field in the label's row or a "+" button, by an accessible name (they
        # were announced as "edit", "spin box" and "button" alone).
        for row, (label, field, button) in enumerate((
                ("Excite", self.excite, self.excite_selected),
                ("Silence", self.silence, self.silence_selected))):
            query = QHBoxLayout()
            query.setSpacing(2)
            query.addWidget(field, 1)
            query.addWidget(button)
            form.addWidget(_label(label, field), row, 0)
            form.addLayout(query, row, 1, 1, 2)
            button.setAccessibleName(f"{label} the selected neuron too")
        self.bins.setAccessibleName("Length in bins")
        self.display.setAccessibleName("Colour the brain by")
        for box in (self.rate, self.trials, self.bins, self.speed):
            # As narrow as their usual values need, not their largest (10000.0 Hz).
            box.setSizePolicy(QSizePolicy.Policy.Preferred, box.sizePolicy().verticalPolicy())
        # The trials on a row of their own under the rate, the length beside them: a third
        # box in the rate's row was cramped at the dock's default width (about 350 px), and
        # Tab, which follows the rows, reaches Trials right after Rate.
        form.addWidget(_label("Rate", self.rate), 2, 0)
        form.addWidget(self.rate, 2, 1)
        form.addWidget(_label("Trials", self.trials), 3, 0)
        form.addWidget(self.trials, 3, 1)
        form.addWidget(self.bins, 3, 2)             # "3 trials  for 100 bins"
        form.addWidget(_label("Speed", self.speed), 4, 0)
        form.addWidget(self.speed, 4, 1)
        form.addWidget(self.display, 4, 2)          # "1.00x  Show rates (Hz)"
        buttons = QHBoxLayout()
        buttons.addWidget(self.run_button)
        buttons.addWidget(self.play_button)
        buttons.addWidget(self.stop_button)
        layout = QVBoxLayout(self)
        layout.setSpacing(4)
        # Run, Play and Stop first: in the default layout at 1280×800 the dock is about
        # 150 px high, and below the form they were out of sight until scrolled to.
        layout.addLayout(buttons)
        layout.addWidget(self.status)       # what Run did, beside it
        layout.addLayout(form)
        layout.addStretch(1)
        self.bind(SpikingRunSettings())

    def bind(self, settings: SpikingRunSettings) -> None:
        """Show ``settings`` and keep them and the fields in step, both ways."""
        self.settings = settings
        fields: list[tuple[str, Any, Any, Any]] = [
            ("excite", self.excite, self.excite.setText, self.excite.textChanged),
            ("silence", self.silence, self.silence.setText, self.silence.textChanged),
            ("rate", self.rate, self.rate.setValue, self.rate.valueChanged),
            ("trials", self.trials, self.trials.setValue, self.trials.valueChanged),
            ("bins", self.bins, self.bins.setValue, self.bins.valueChanged),
            ("speed", self.speed, self.speed.setValue, self.speed.valueChanged)]
        for name, widget, show, changed in fields:
            show(getattr(settings, name))

            def write(value: Any, name: str = name) -> None:
                if getattr(settings, name) != (value.strip() if isinstance(value, str)
                                               else value):
                    setattr(settings, name, value)
            changed.connect(write)

            def follow(value: Any, _old: Any = None, widget: Any = widget, show: Any = show
                       ) -> None:
                current = widget.text().strip() if isinstance(widget, QLineEdit) \
                    else widget.value()
                if current != value:
                    show(value)
            getattr(settings.events, name).connect(follow)

    def stimulus(self) -> Stimulus:
        """The stimulus the fields say (the settings' :meth:`~SpikingRunSettings.stimulus`)."""
        return self.settings.stimulus()

    @staticmethod
    def add_neuron(field: QLineEdit, neuron: int) -> None:
        """Add ``id:neuron`` to the query in ``field`` (``what it says | id:neuron``)."""
        term = f"id:{int(neuron)}"
        text = field.text().strip()
        if term in text.replace("(", " ").replace(")", " ").replace("|", " ").split():
            return
        field.setText(f"{text} | {term}" if text else term)


class SpikingFeature(QObject):
    """Opens a spiking brain, runs it live from the Stimulus dock, shows its populations."""

    def __init__(self, host: "WindowHost") -> None:
        super().__init__(host.widget())
        from flyviz.app.spiking.spiking_population import SpikingPopulationPanel

        self.host = host
        #: The spiking runs' settings, kept by the state (the dock's fields show them).
        self.settings: SpikingRunSettings = host.state.kind_settings.of(SPIKING)
        self.panel = StimulusPanel()
        self.panel.bind(self.settings)
        self.dock = host.docks.add("stimulus", "Stimulus", self.panel,
                                   Qt.DockWidgetArea.LeftDockWidgetArea, scroll=True)
        self.dock.hide()
        self.population = SpikingPopulationPanel(host.state)
        # Scrolled when shorter than its plots (at 1280×800 its two plots were cut by the
        # dock's bottom edge).
        self.population_dock = host.docks.add("spiking_population", "Spiking populations",
                                             self.population,
                                             Qt.DockWidgetArea.BottomDockWidgetArea, scroll=True)
        self.population_dock.hide()
        #: The live run's recording (the one the window shows while it runs).
        self.recording: Recording | None = None
        #: Trials of :attr:`recording`'s run, read from its metadata once when it is shown
        #: (the status line says them at every bin).
        self.recorded_trials = 1
        #: The engine's speed over the run: biological time over compute time.
        self.engine_factor = 0.0
        #: The real-time factor reached: biological seconds per wall second, recently.
        self.realtime_factor = 0.0
        self._run: Run | None = None
        self._arrivals: deque[float] = deque(maxlen=64)
        self.state = "idle"
        self.finished = True
        self._ended = ""
        self.panel.run_button.clicked.connect(lambda: self.run())
        self.panel.play_button.clicked.connect(self.toggle_play)
        self.panel.stop_button.clicked.connect(self.stop)
        self.settings.events.speed.connect(self._set_speed)
        self.settings.events.bin_ms.connect(self._set_speed)
        self.panel.display.currentIndexChanged.connect(lambda _i: self._apply_display())
        self.panel.excite_selected.clicked.connect(lambda: self.add_selected("excite"))
        self.panel.silence_selected.clicked.connect(lambda: self.add_selected("silence"))
        host.state.events.selected.connect(self._on_selected)
        host.state.events.index.connect(self._on_index)
        host.state.events.model.connect(self._on_model)
        runner = host.runner
        runner.events.started.connect(self._on_started)
        runner.events.frame.connect(self._on_bin)
        runner.events.ended.connect(self._on_ended)
        runner.events.failed.connect(self._failed)
        runner.events.worker.connect(self._on_state)
        self._on_selected(host.state.selected)
        # Ctrl+Return runs what the shown kind runs: the prompt's action serves the Fly LLM,
        # this one (the Run button's) a spiking brain; the window's registry shows one of
        # the two for the kind shown (ActionRegistry.apply), so the keys are never ambiguous.
        registry = host.actions_registry
        self.run_action = registry.add(
            "run_spiking", "&Run simulation", lambda: self.run(), "Ctrl+Return",
            "Run the spiking brain's simulation (the Stimulus dock's Run)")
        run_menu = registry.menu("Run")
        after = run_menu.actions().index(registry["run"]) + 1
        run_menu.insertAction(run_menu.actions()[after], self.run_action)
        # Among the File menu's openers, above Quit (its last item).
        file_menu = host.actions_registry.menu("File")
        action = QAction("Open as spi&king brain", file_menu)
        items = file_menu.actions()
        at = items.index(host.actions_registry["quit"])
        while at > 0 and items[at - 1].isSeparator():
            at -= 1                         # above the separator that sets Quit apart
        file_menu.insertAction(items[at], action)
        action.setToolTip("Run the loaded model's graph as Shiu et al.'s spiking brain")
        action.triggered.connect(lambda: self.open_loaded())
        self.open_action = action
        # Reading a model's graph as synapse counts takes seconds on a full brain: it runs
        # off the UI thread, with a busy bar in the status bar (one call, no steps to count).
        self.opening_bar = QProgressBar()
        self.opening_bar.setRange(0, 0)
        self.opening_bar.setMaximumWidth(140)
        self.opening_bar.setToolTip("opening the loaded model as a spiking brain")
        self.opening_bar.setVisible(False)
        window = host.widget()
        if isinstance(window, QMainWindow):
            window.statusBar().addPermanentWidget(self.opening_bar)
        # No Cancel: Esc, which cancels the docks' computations, leaves an opening alone.
        self.opening = BackgroundJob(host.background, "spiking-open", _OpeningView(self),
                                     self, window, user_cancels=False)
        self.opening.finished.connect(self._opened)
        self.opening.failed.connect(self._open_failed)
        self._opening_from: Any = None
        self._opening_spec = ""
        #: Where the brain being opened is drawn: the loaded model's anatomy when the brain is
        #: that model's own graph (File → Open as spiking brain), else ``None`` (its own).
        self._opening_anatomy: Anatomy | None = None
        #: What loads the brain the dock last showed (``None``: none yet): another brain
        #: starts from a clean stimulus, the same one keeps it.
        self._shown_spec: str | None = None
        host.widget().installEventFilter(self)

    @property
    def model(self) -> SpikingModel | None:
        """The spiking brain shown (the state's model, when it is one), else ``None``."""
        model = self.host.state.model
        return model if isinstance(model, SpikingModel) else None

    # ------------------------------------------------------------ opening
    def open_loaded(self) -> bool:
        """Start showing the loaded model's graph as a spiking brain, off the UI thread (the
        status bar shows it opening; a graph that is not synapse counts is said there);
        False when no model is loaded."""
        checkpoint = self.host.models.checkpoint
        if checkpoint is None:
            if self.model is not None:   # the state shows a spiking brain, not a model
                self.host.show_message(f"{self.model.name or 'a spiking brain'} is shown: open "
                                       "a model (File → Open) to see its graph as a spiking "
                                       "brain", True)
            else:
                self.host.show_message("load a model first: its graph is the spiking brain",
                                       True)
            return False
        name = f"{getattr(checkpoint, 'name', '') or 'model'} (spiking)"

        def work(_stop: Any, _report: Any) -> Any:
            from flyviz.spiking import brain_from_checkpoint

            brain = brain_from_checkpoint(checkpoint)  # BrainError: not synapse counts
            brain.name = name
            if brain.default_excite is None and brain.synapses:
                from flyviz.spiking.demo import strongest_sensory

                brain.default_excite = strongest_sensory(brain)  # as `flyviz simulate demo`
            return brain

        self._opening_from = checkpoint
        self._opening_spec = ""
        # The brain is this model's graph: drawn where the model's neurons already are, with
        # its labels (the same neurons, in the same order).
        bundle = self.host.models.bundle
        self._opening_anatomy = bundle.anatomy if bundle is not None and \
            bundle.checkpoint is checkpoint else None
        self.opening.start(work)
        self.host.show_message(f"opening {name}…")
        return True

    def open_brain_folder(self, folder: str | Path) -> None:
        """Start showing the spiking brain in ``folder`` (the authors' layout, a ConnecTorch
        ``.ct`` brain or the whole MaleCNS, fly-connectome-malecns-166k:
        :func:`flyviz.spiking.brain.is_brain_folder`;
        read and checked by :func:`flyviz.spiking.load_brain`), off the UI thread as
        :meth:`open_loaded`; a brain that does not load is one line in the status bar."""
        spec = str(folder)

        def work(_stop: Any, _report: Any) -> Any:
            from flyviz.spiking import load_brain

            return load_brain(spec)   # ConnecTorchError: a damaged brain, one line

        self._opening_from = self.host.models.checkpoint  # dropped if a model loads meanwhile
        self._opening_spec = spec                          # what its recordings name
        self._opening_anatomy = None                       # a brain of its own: its anatomy
        self.opening.start(work)
        self.host.show_message(f"opening {Path(spec).name} as a spiking brain…")

    @property
    def opening_busy(self) -> bool:
        """True while File → Open as spiking brain reads the model's graph."""
        return self.opening.busy

    def _opened(self, brain: Any) -> None:
        if self._opening_from is not self.host.models.checkpoint:
            return                          # another model was loaded meanwhile
        self._opening_from = None
        anatomy, self._opening_anatomy = self._opening_anatomy, None
        self.open(SpikingModel(brain, self._opening_spec), anatomy=anatomy)
        self.host.show_message(f"{brain.name} opened; press Run in the Stimulus dock")

    def _open_failed(self, message: str) -> None:
        """A brain that does not open is said as a model that does not load: a dialog, and
        the Model dock's "could not load" line (a status-bar line alone vanished, leaving
        the window as it was with nothing saying the load failed)."""
        spec, self._opening_spec, self._opening_anatomy = self._opening_spec, "", None
        if self._opening_from is not self.host.models.checkpoint:
            return                          # another model was loaded meanwhile
        self._opening_from = None
        if spec:
            self.host.models.report_failed(spec, message)
        else:
            self.host.show_message(message, True, dialog=True)

    def open(self, model: SpikingModel, recording: "Recording | None" = None, *,
             anatomy: "Anatomy | None" = None) -> None:
        """Show ``model``: the spiking kind's docks, and ``recording`` (default: empty).

        ``anatomy`` is where its neurons are drawn when it is not the model's own: the loaded
        model's, for that model's graph opened as a spiking brain. It is never guessed from
        the number of neurons: two brains of the same size are not the same neurons. The
        brain shown opened again (the same spec: a recording of it, a reset) keeps the
        anatomy and the view it is drawn with.
        """
        from flyviz.errors import InputError
        from flyviz.record.recording import Recording

        if anatomy is not None and len(anatomy.positions) != model.neurons:
            raise InputError(f"the anatomy has {len(anatomy.positions):,} neurons, the brain "
                             f"{model.neurons:,}")
        self.stop()
        state = self.host.state
        if (anatomy is None and model.spec and model.spec == self._shown_spec
                and state.kind.shows(SPIKING_KINDS) and state.anatomy is not None
                and state.neurons == model.neurons):
            anatomy = state.anatomy             # the brain shown, opened again
        self._forget_other_brains_stimulus(model)
        state.set_model(model, anatomy if anatomy is not None else model.drawing_anatomy())
        self.host.runner.set_model(model)      # runs start on it from now on
        if recording is None:
            recording = Recording(model.neurons, {"kind": SPIKING_KEY},
                                  states_dtype="float32")
        self.recording = recording
        self.recorded_trials = SPIKING.run_trials(recording)
        state.set_recording(recording, index=0 if len(recording) else None)
        # The brain's docks, but one the user closed (they open it from View): the Stimulus
        # dock too, the brain's controls: Run and Stop stay in the Run menu and on their keys.
        docks = self.host.docks
        docks.show_unless_closed("stimulus")
        self._hold_status_lines()
        # Fitted once, its status lines held first: its whole form, under the taller Neuron
        # dock (holding them fitted it too, a second fit of the same dock).
        docks.fit(self.dock)
        appears = self.population_dock.isHidden()
        # Its width of before, put away with the Fly LLM shown or saved with the last
        # session's layout, comes back with it (the user may have made it so).
        widen = not docks.gives_size_back("spiking_population")
        if docks.show_unless_closed("spiking_population", front=False) and appears:
            # Its header and both plots in view, once the window has placed it beside the
            # State raster: at the bottom row's share (208 px at 1280×800, a third of the
            # row's width) its raster was below the fold. The row grows to the panel's least
            # height and, the first time, the dock takes the larger part of its width (the
            # State raster's sample of a few hundred neurons' rates says less of a spiking
            # brain). A dock shown already (the brain opened again) keeps the size the user
            # gave it.
            QTimer.singleShot(0, self.population_dock, lambda: self._place_population(widen))
        self.population.set_brain(model.brain)
        self._apply_display()
        if len(recording):
            self.panel.status.setText(f"{model.name}: {len(recording):,} bins recorded"
                                      f"{self._trials_note()}")
        else:
            self.panel.status.setText(f"{model.name}: {model.neurons:,} neurons; press Run")

    def _place_population(self, widen: bool = True) -> None:
        """The Spiking populations dock tall enough for its plots and, where ``widen``, wide
        enough (see :meth:`open`); a user's wider or taller dock stays so."""
        docks = self.host.docks
        if self.population_dock.isVisible() and not self.population_dock.isFloating():
            if widen:
                docks.widen(self.population_dock, POPULATION_SHARE)
            # Fitted at its new width, once the window has laid it out (at its old width its
            # legend took more lines, and the row stayed as tall).
            QTimer.singleShot(0, self.population_dock, lambda: docks.fit(self.population_dock))

    def _forget_other_brains_stimulus(self, model: SpikingModel) -> None:
        """A brain other than the one shown last starts from its own stimulus: the old
        brain's Excite and Silence queries (neuron ids, cell types of that brain) are
        cleared, and Run reads Run, not Run again. The same brain opened again (its run
        reset, its recording opened) keeps them; a script's queries set before the first
        brain opens are kept too."""
        if model.spec == self._shown_spec:
            return
        if self._shown_spec is not None:
            self.settings.excite = ""
            self.settings.silence = ""
        self._shown_spec = model.spec
        self.panel.run_button.setText("Run")

    def show_recording(self, recording: "Recording") -> SpikingModel:
        """Show a spiking recording (a ``.flyrec`` of ``flyviz simulate --record``) on the
        brain it names (a stand-in ball when that does not load); returns the model."""
        model, note = SPIKING.shown_model(recording)
        self.open(model, recording)
        if note:
            self.host.show_message(note)
        return model

    def _on_model(self) -> None:
        """Another model is shown: unless it is spiking too, the runs stopped with the model
        (its colourings come and go with the kind: :meth:`SpikingKind.colour_layers
        <flyviz.kinds.spiking.SpikingKind.colour_layers>`)."""
        if not self.host.state.kind.shows(SPIKING_KINDS):
            self._run = None
            self.finished = True

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
        if self._run is not None and self._run.recording is self.recording:
            self._say()                     # a run's trials' line names the colouring

    # ------------------------------------------------------------ running
    def run(self) -> bool:
        """Start a live run of the state's spiking settings (a running one stops); False if
        it cannot."""
        if self.model is None:
            self.host.show_message("open a spiking brain first (File → Open as spiking brain)",
                                   True)
            return False
        from flyviz.errors import FlyvizError

        runner = self.host.runner
        try:
            run = runner.prepare()
        except FlyvizError as exc:
            self.panel.status.setText(f"not run: {exc}")
            self.host.show_message(f"spiking run: {exc}", True)
            return False
        runner.launch(run)
        return True

    def _mine(self) -> bool:
        run = self.host.runner.run
        return run is not None and run is self._run

    def _on_started(self, run: "Run") -> None:
        if not run.kind.shows(SPIKING_KINDS):
            return
        self._run, self.recording = run, run.recording
        self.recorded_trials = SPIKING.run_trials(run.recording)
        self._apply_display()
        self._arrivals.clear()
        self.engine_factor = self.realtime_factor = 0.0
        self.finished = False
        self._ended = ""
        self.panel.run_button.setText("Run again")
        self.panel.play_button.setEnabled(True)
        self.panel.stop_button.setEnabled(True)
        settings = run.request.settings
        if self._hold_status_lines() and self.dock.isVisible():
            self.host.docks.fit(self.dock)
        self.panel.status.setText(f"starting {settings.bins * settings.bin_ms:g} ms…"
                                  f"{self._trials_note()}")

    def _set_speed(self, *_: Any) -> None:
        """The speed cap, for the shown spiking model's runs."""
        if self.model is not None:
            self.host.runner.apply_speed_cap()
        self._say()

    def _on_bin(self, frames: int) -> None:
        if not self._mine() or self.recording is None:
            return
        bin_s = self._run.request.settings.bin_ms / 1000.0 if self._run is not None else 0.01
        self._arrivals.append(time.perf_counter())
        done = frames * bin_s
        compute = self.host.runner.compute_seconds
        self.engine_factor = done / compute if compute > 0 else float("inf")
        if len(self._arrivals) >= 2 and self._arrivals[-1] > self._arrivals[0]:
            self.realtime_factor = (len(self._arrivals) - 1) * bin_s / (
                self._arrivals[-1] - self._arrivals[0])
        self._say()

    def _on_index(self, _index: int) -> None:
        """The status line's counter follows the bin shown: scrubbed back once the run was
        paused or over, it still said the last bin beside the timeline's. (A live bin is
        said as it arrives, by :meth:`_on_bin`.)"""
        if self._run is not None and self._run.recording is self.recording \
                and not (self.playing and self.host.state.live):
            self._say()

    def _on_ended(self, reason: str, _frames: int) -> None:
        if not self._mine():
            return
        self.finished = True
        self.panel.play_button.setEnabled(False)
        self.panel.stop_button.setEnabled(False)
        if reason != "failed":
            self._ended = " (done)" if reason == "done" else " (stopped)"
            self._say()

    def _failed(self, message: str) -> None:
        if not self._mine():
            return
        self.finished = True
        self.panel.status.setText(f"not run: {message}")
        self.host.show_message(f"spiking run: {message}", True)

    def _on_state(self, state: str) -> None:
        if not self._mine():
            return
        self.state = state
        self.panel.play_button.setText("Play" if state == PAUSED else "Pause")
        self._say()

    @property
    def playing(self) -> bool:
        """True while the live run is simulating (not paused, not over)."""
        return self.state == RUNNING and not self.finished

    def toggle_play(self) -> None:
        """Pause the live run's simulation, or resume it."""
        if self.finished or not self._mine():
            return
        if self.state == PAUSED:
            self.host.runner.resume()
        else:
            self.host.runner.pause()

    def stop(self) -> None:
        """End the live run; its bins stay recorded."""
        if not self.finished and self._mine():
            self.host.runner.stop()

    def stepping(self) -> bool:
        """Whether the engine will simulate more bins without being asked (it answers once
        it has handled every request sent before: a pause has taken effect when False)."""
        stepping = getattr(self.host.runner.engine, "stepping", None)
        return bool(stepping()) if callable(stepping) and self._mine() else False

    def _say(self) -> None:
        recording = self.recording
        if recording is None or not len(recording) or self.host.state.recording is not recording:
            return
        index = self.host.state.index if 0 <= self.host.state.index < len(recording) else \
            len(recording) - 1
        words = SPIKING.counter(recording, index)
        speed = self.settings.speed
        cap = f"cap {speed:g}x" if speed > 0 else "uncapped"
        paused = " (paused)" if self.state == PAUSED and not self.finished else ""
        self.panel.status.setText(
            f"{words}\n{self.realtime_factor:.3g}x real time ({cap}), engine "
            f"{self.engine_factor:.3g}x{paused}{self._ended if self.finished else ''}"
            f"{self._trials_note()}")

    def _trials_note(self) -> str:
        """A line saying what the brain shows of a run of several trials (``""`` for one):
        each bin's state is the spikes of all trials over the bin's length and the trials
        (:meth:`~flyviz.kinds.spiking.LiveRun.next_bin`), their mean rate, and the spikes
        colouring flashes that rate times the bin (:func:`~flyviz.viewer.layers.flash_state`),
        their mean spikes; the counter above it says the bin's spikes per trial. The trials
        are :attr:`recorded_trials`, read once per recording, not at every bin."""
        if self.recorded_trials < 2:
            return ""
        shown = "flashes their mean spikes" if self.panel.display.currentData() == FLASH \
            else "shows their mean rate"
        return f"\n{self.recorded_trials:,} trials: the brain {shown}"

    def _hold_status_lines(self) -> bool:
        """Hold the status line's height for the lines the shown recording's runs say (three
        with the trials' line); True when it changed, and the dock, fitted to its form, is
        to be fitted again (the third line, added after a fit, pushed the Speed row below
        its edge)."""
        status = self.panel.status
        lines = 3 if self.recorded_trials > 1 else 2     # _trials_note says a line then
        if status.lines == lines:
            return False
        status.set_lines(lines)
        return True

    # ------------------------------------------------------------ closing
    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt API
        if event.type() == QEvent.Type.Close:
            self.close()
        return False

    def close(self) -> None:
        """End the live run (the window is closing; its runs' engine closes with it)."""
        self.stop()


class _OpeningView:
    """The spiking brain's opening as a job's view: the status bar's busy bar, and File →
    Open as spiking brain held while it runs."""

    def __init__(self, feature: SpikingFeature) -> None:
        self.feature = feature
        self.progress = feature.opening_bar

    def set_busy(self, busy: bool) -> None:
        self.progress.setVisible(busy)
        self.feature.open_action.setEnabled(not busy)


def install(host: "WindowHost") -> SpikingFeature:
    """Add File → Open as spiking brain, the Stimulus and Spiking populations docks."""
    return SpikingFeature(host)
