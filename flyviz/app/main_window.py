"""The flyviz main window: the brain in the middle, panels in docks around it.

Data flow (one direction, one place for "now"):

* the :class:`~flyviz.app.worker.EngineWorker` thread produces frames;
* :meth:`MainWindow._on_frame` appends them to the :class:`~flyviz.app.session.Session`'s
  recording (cheap: a float16 copy of the state);
* a display-rate timer (:meth:`MainWindow._on_display_tick`) looks at the
  session's shown index and, only when it changed, hands that frame to the
  brain view and the panels; the brain then eases toward it on every tick.

So the engine never waits for drawing, drawing never queues one redraw per
token, and scrubbing a recording is the same code path as watching live.
"""

from __future__ import annotations

import html
import importlib.util
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

import numpy as np
from PySide6.QtCore import QSettings, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QCloseEvent, QIcon, QKeySequence
from PySide6.QtWidgets import (QApplication, QComboBox, QDialog, QDialogButtonBox, QDockWidget,
                               QFileDialog, QFormLayout, QHBoxLayout, QInputDialog, QLabel,
                               QLineEdit,
                               QMainWindow, QMessageBox, QProgressBar, QPushButton,
                               QTableWidget, QTableWidgetItem, QToolBar, QVBoxLayout, QWidget)

from flyviz import APP_NAME, ORGANIZATION, __version__
from flyviz.app.brain_view import BrainView
from flyviz.app.connectivity import Connectivity
from flyviz.app.controls import PromptBar, SettingsPanel, Timeline
from flyviz.app.inspector import NeuronInspector
from flyviz.app.panels import RasterPanel, TextPanel, TopKPanel, TracePanel
from flyviz.app.session import Session
from flyviz.app.worker import (IDLE, PAUSED, RUNNING, EngineThread, ModelLoader, RunRequest,
                               default_model_loader, engine_threads, layout_for)
from flyviz.model.checkpoint import Anatomy, Checkpoint
from flyviz.model.engine import Engine
from flyviz.model.errors import FlyvizError, RecordingError
from flyviz.model.tokenizer import FlyTokenizer, tokenizer_for
from flyviz.record.recording import FILE_SUFFIX, Recording
from flyviz.record.run import encode_prompt

#: Redraw rate of the display timer (Hz); the engine's token rate is independent.
DISPLAY_HZ = 30

#: How much nicer than the UI the engine thread runs, so drawing wins a busy CPU.
ENGINE_NICENESS = 5

#: Most refreshes per second of the 2-D panels while a run streams in.
PANEL_HZ = 4

#: Licence and credit of the real connectome, shown when a real model is loaded.
CONNECTOME_CREDIT = (
    "The wiring is the MaleCNS v1.0 connectome of the fruit fly central nervous system "
    "(Janelia FlyEM), released under CC BY 4.0; cite its authors when you publish images or "
    "movies of it. Soma positions: MaleCNS somaLocation (8 nm voxels).")

#: (action name, shortcut, description): every shortcut, in the order the help lists them.
SHORTCUTS: tuple[tuple[str, str, str], ...] = (
    ("run", "Ctrl+Return", "Run the prompt (Enter in the prompt box)"),
    ("play", "Space", "Play / pause (replays a finished recording)"),
    ("step_back", "Left", "One token back"),
    ("step_forward", "Right", "One token forward (steps the model at the newest token)"),
    ("first", "Home", "First token"),
    ("last", "End", "Newest token (live)"),
    ("stop", "Esc", "Stop the run"),
    ("reset", "Ctrl+R", "Reset: stop and clear the recording"),
    ("view_front", "1", "Front view"),
    ("view_top", "2", "Top view"),
    ("view_side", "3", "Side view"),
    ("toggle_mode", "M", "Switch colours: signed h / |h|"),
    ("clear_selection", "Ctrl+D", "Clear the selected neuron"),
    ("focus_prompt", "Ctrl+L", "Go to the prompt box"),
    ("open_model", "Ctrl+O", "Open a model folder"),
    ("open_recording", "Ctrl+Shift+O", "Open a recording (.flyrec)"),
    ("save_recording", "Ctrl+S", "Save the recording"),
    ("export_movie", "Ctrl+E", "Export a movie"),
    ("screenshot", "Alt+S", "Save a screenshot"),
    ("shortcuts", "F1", "This list"),
    ("quit", "Ctrl+Q", "Quit"),
)


def _demo_description() -> str:
    try:
        from flyviz.demo import DEMO_DESCRIPTION
    except ImportError:
        return ("The demo brain has synthetic wiring made by flyviz, not the fly connectome. "
                "Open a real checkpoint with File → Open model.")
    return str(DEMO_DESCRIPTION)


def is_demo_model(spec: str, checkpoint: Checkpoint) -> bool:
    """True for the embedded demo brain (synthetic wiring)."""
    return spec == "demo" or checkpoint.name == "demo" or bool(checkpoint.metadata.get("demo"))


class ScreenshotDialog(QDialog):
    """Choose what to capture (brain view or whole window) and at what scale."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Save screenshot")
        form = QFormLayout(self)
        self.target = QComboBox()
        self.target.addItem("Brain view", "brain")
        self.target.addItem("Whole window", "window")
        self.scale = QComboBox()
        for s in (1, 2, 3, 4):
            self.scale.addItem(f"{s}×", float(s))
        form.addRow("Capture", self.target)
        form.addRow("Scale", self.scale)
        note = QLabel("The brain view is rendered again at the chosen scale;\n"
                      "the whole window is enlarged from screen pixels.")
        note.setObjectName("hint")
        form.addRow(note)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Save
                                   | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form.addRow(buttons)


class MainWindow(QMainWindow):
    """The flyviz desktop app.

    Parameters
    ----------
    model_spec
        Model to load at start (``"demo"``, a folder or a hub id); ``None``
        loads nothing (tests hand a checkpoint to :meth:`set_checkpoint`).
    model_loader
        ``load(spec, progress) -> Checkpoint``, run off the UI thread.
    settings
        Where layout and settings persist; default: the user's flyviz settings.
    start_prompt
        Run this prompt as soon as the model is ready.
    """

    #: Emitted when a model is ready (its name).
    model_ready = Signal(str)
    #: Emitted when a run ends: (reason, frames recorded).
    run_ended = Signal(str, int)
    #: Emitted with each message the window shows the user (tests read it).
    message_shown = Signal(str)

    def __init__(self, model_spec: str | None = "demo",
                 model_loader: Callable[..., Checkpoint] = default_model_loader,
                 settings: QSettings | None = None, start_prompt: str | None = None) -> None:
        super().__init__()
        self.settings = settings if settings is not None else QSettings(ORGANIZATION, APP_NAME)
        self.model_loader = model_loader
        self.checkpoint: Checkpoint | None = None
        self.tokenizer: FlyTokenizer | None = None
        self.anatomy: Anatomy | None = None
        self.connectivity: Connectivity | None = None
        self.model_spec = ""
        self.model_name = ""
        self.selected_neuron: int | None = None
        self.worker_state = IDLE
        self.last_error = ""
        self._run_id = 0
        self._pending_prompt = start_prompt
        self._loader: ModelLoader | None = None
        self._old_loaders: list[ModelLoader] = []
        self._closing = False
        self._drawn: tuple[int, int] | None = None
        self._display_dirty = True
        self._frame_times: deque[float] = deque(maxlen=240)
        self._last_tick = time.perf_counter()
        self._last_status = 0.0
        self._last_panels = 0.0
        self._brain_index = -2
        self._brain_recording: Recording | None = None
        self.canvas_fps = 0.0

        self.setWindowTitle("flyviz")
        self.setDockOptions(QMainWindow.DockOption.AnimatedDocks
                            | QMainWindow.DockOption.AllowTabbedDocks)
        try:
            from flyviz.resources import asset_path

            self.setWindowIcon(QIcon(str(asset_path("icons", "flyviz.svg"))))
        except (ImportError, FileNotFoundError):
            pass

        self.session = Session(parent=self)
        self.engine_thread = EngineThread(self)
        worker = self.engine_thread.worker
        worker.frame_ready.connect(self._on_frame)
        worker.run_finished.connect(self._on_run_finished)
        worker.run_failed.connect(self._on_run_failed)
        worker.state_changed.connect(self._on_worker_state)

        self._build_widgets()
        self._build_actions()
        self._build_menus()
        self._restore_layout()
        self._apply_display_settings()

        self.session.index_changed.connect(self._on_index_changed)
        self.session.recording_replaced.connect(self._on_recording_replaced)
        self.session.live_changed.connect(lambda live: self._update_timeline())

        self.display_timer = QTimer(self)
        self.display_timer.setInterval(int(1000 / DISPLAY_HZ))
        self.display_timer.timeout.connect(self._on_display_tick)
        self.display_timer.start()
        self.replay_timer = QTimer(self)
        self.replay_timer.timeout.connect(self._on_replay_tick)

        self.engine_thread.set_speed_cap(self.controls.speed_cap.value())
        self.engine_thread.lower_priority(ENGINE_NICENESS)
        self._update_buttons()
        if model_spec:
            QTimer.singleShot(0, lambda: self.load_model(model_spec))

    # ================================================================= building
    def _build_widgets(self) -> None:
        self.brain = BrainView(self)
        self.setCentralWidget(self.brain)
        self.brain.neuron_clicked.connect(self._on_neuron_clicked)

        bar = QToolBar("Prompt", self)
        bar.setObjectName("promptToolbar")
        bar.setMovable(False)
        self.prompt_bar = PromptBar()
        self.prompt_bar.submitted.connect(self.run_prompt)
        bar.addWidget(self.prompt_bar)
        self.play_button = QPushButton("▶ Play")
        self.play_button.setToolTip("Play / pause (Space)")
        self.step_button = QPushButton("Step ▷|")
        self.step_button.setToolTip("One token forward (→)")
        self.stop_button = QPushButton("■ Stop")
        self.stop_button.setToolTip("Stop the run (Esc)")
        self.reset_button = QPushButton("Reset")
        self.reset_button.setToolTip("Stop and clear the recording (Ctrl+R)")
        for button in (self.play_button, self.step_button, self.stop_button, self.reset_button):
            bar.addWidget(button)
        self.play_button.clicked.connect(self.toggle_play)
        self.step_button.clicked.connect(self.step_forward)
        self.stop_button.clicked.connect(self.stop_run)
        self.reset_button.clicked.connect(self.reset_run)
        self.addToolBar(Qt.ToolBarArea.TopToolBarArea, bar)

        timeline_bar = QToolBar("Timeline", self)
        timeline_bar.setObjectName("timelineToolbar")
        timeline_bar.setMovable(False)
        self.timeline = Timeline()
        timeline_bar.addWidget(self.timeline)
        self.timeline.scrubbed.connect(self.show_token)
        self.timeline.live_requested.connect(self.go_live)
        self.addToolBar(Qt.ToolBarArea.BottomToolBarArea, timeline_bar)

        self.text_panel = TextPanel()
        self.topk_panel = TopKPanel()
        self.raster_panel = RasterPanel()
        self.trace_panel = TracePanel()
        self.trace_panel.token_clicked.connect(self.show_token)
        self.controls = SettingsPanel()
        self.controls.restore(self.settings)
        self.controls.speed_changed.connect(self._on_speed_changed)
        self.controls.display_changed.connect(self._apply_display_settings)
        self.controls.filter_changed.connect(self._apply_filter)
        self.inspector = NeuronInspector()
        self.inspector.neuron_requested.connect(self.select_neuron)
        self.model_panel = self._build_model_panel()

        self.docks: dict[str, QDockWidget] = {}
        area = Qt.DockWidgetArea
        for key, title, widget, where in (
                ("text", "Text", self.text_panel, area.RightDockWidgetArea),
                ("topk", "Next token", self.topk_panel, area.RightDockWidgetArea),
                ("model", "Model", self.model_panel, area.LeftDockWidgetArea),
                ("controls", "Settings", self.controls, area.LeftDockWidgetArea),
                ("inspector", "Neuron", self.inspector, area.LeftDockWidgetArea),
                ("raster", "State raster", self.raster_panel, area.BottomDockWidgetArea),
                ("traces", "Traces", self.trace_panel, area.BottomDockWidgetArea)):
            dock = QDockWidget(title, self)
            dock.setObjectName(f"dock_{key}")
            dock.setWidget(widget)
            self.addDockWidget(where, dock)
            self.docks[key] = dock
        self.tabifyDockWidget(self.docks["controls"], self.docks["inspector"])
        self.docks["controls"].raise_()
        self.splitDockWidget(self.docks["raster"], self.docks["traces"], Qt.Orientation.Horizontal)
        self.resizeDocks([self.docks["text"], self.docks["topk"]], [330, 260], Qt.Orientation.Vertical)
        self.resizeDocks([self.docks["text"]], [380], Qt.Orientation.Horizontal)
        self.resizeDocks([self.docks["controls"]], [270], Qt.Orientation.Horizontal)
        self.resizeDocks([self.docks["raster"]], [190], Qt.Orientation.Vertical)
        self._default_state = self.saveState()

        status = self.statusBar()
        self.status_model = QLabel("no model")
        self.status_rate = QLabel("— tok/s")
        self.status_fps = QLabel("— fps")
        self.status_state = QLabel("idle")
        self.progress = QProgressBar()
        self.progress.setMaximumWidth(180)
        self.progress.setRange(0, 100)
        self.progress.setVisible(False)
        status.addPermanentWidget(self.progress)
        for label in (self.status_state, self.status_rate, self.status_fps, self.status_model):
            status.addPermanentWidget(label)

    def _build_model_panel(self) -> QWidget:
        panel = QWidget()
        layout = QVBoxLayout(panel)
        layout.setContentsMargins(6, 6, 6, 6)
        self.model_label = QLabel("no model loaded")
        self.model_label.setWordWrap(True)
        layout.addWidget(self.model_label)
        spec_row = QHBoxLayout()
        self.model_field = QLineEdit()
        self.model_field.setPlaceholderText("hub id, folder or 'demo'")
        self.model_field.setToolTip("e.g. ngxson/fly-llm-hf, fernandofernandes/fly-wordbrain-rank64, "
                                    "a downloaded folder, or demo")
        self.model_field.setText(str(self.settings.value("paths/hub", "")))
        load = QPushButton("Load")
        self.model_field.returnPressed.connect(lambda: self._load_from_field())
        load.clicked.connect(lambda: self._load_from_field())
        spec_row.addWidget(self.model_field, 1)
        spec_row.addWidget(load)
        layout.addLayout(spec_row)
        row = QHBoxLayout()
        demo = QPushButton("Demo brain")
        demo.setToolTip("The embedded demo brain (synthetic wiring, works offline)")
        demo.clicked.connect(lambda: self.load_model("demo"))
        folder = QPushButton("Open folder…")
        folder.clicked.connect(self.open_model_dialog)
        for button in (demo, folder):
            row.addWidget(button)
        layout.addLayout(row)
        return panel

    def _load_from_field(self) -> None:
        spec = self.model_field.text().strip()
        if spec:
            self.settings.setValue("paths/hub", spec)
        self.load_model(spec)

    def _build_actions(self) -> None:
        handlers: dict[str, Callable[[], object]] = {
            "run": lambda: self.run_prompt(self.prompt_bar.text()),
            "play": self.toggle_play, "step_back": lambda: self.step_back(),
            "step_forward": self.step_forward, "first": lambda: self.show_token(0),
            "last": self.go_live, "stop": self.stop_run, "reset": self.reset_run,
            "view_front": lambda: self.brain.set_view("front"),
            "view_top": lambda: self.brain.set_view("top"),
            "view_side": lambda: self.brain.set_view("side"),
            "toggle_mode": self.toggle_colour_mode,
            "clear_selection": lambda: self.select_neuron(None),
            "focus_prompt": lambda: (self.prompt_bar.line_edit.setFocus(),
                                     self.prompt_bar.line_edit.selectAll()),
            "open_model": self.open_model_dialog, "open_recording": self.open_recording_dialog,
            "save_recording": self.save_recording_dialog, "export_movie": self.export_movie,
            "screenshot": self.screenshot_dialog, "shortcuts": self.show_shortcuts,
            "quit": self.close,
        }
        titles = {"run": "&Run prompt", "play": "&Play / pause", "step_back": "Step &back",
                  "step_forward": "Step &forward", "first": "&First token",
                  "last": "&Newest token (live)", "stop": "&Stop", "reset": "R&eset",
                  "view_front": "&Front view", "view_top": "&Top view", "view_side": "&Side view",
                  "toggle_mode": "Toggle &colours (h / |h|)",
                  "clear_selection": "C&lear selected neuron", "focus_prompt": "&Go to prompt",
                  "open_model": "Open &model folder…", "open_recording": "&Open recording…",
                  "save_recording": "&Save recording…", "export_movie": "&Export movie…",
                  "screenshot": "Save scree&nshot…", "shortcuts": "&Keyboard shortcuts",
                  "quit": "&Quit"}
        self.actions_by_name: dict[str, QAction] = {}
        for name, keys, description in SHORTCUTS:
            action = QAction(titles[name], self)
            action.setShortcut(QKeySequence(keys))
            action.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
            action.setStatusTip(description)
            action.triggered.connect(lambda _checked=False, f=handlers[name]: f())
            self.addAction(action)
            self.actions_by_name[name] = action
        export = self.actions_by_name["export_movie"]
        if importlib.util.find_spec("flyviz.app.export_dialog") is None:
            export.setEnabled(False)
            export.setToolTip("Movie export is not available in this installation yet; "
                              "use 'flyviz export' on the command line")
            export.setStatusTip(export.toolTip())

    def _build_menus(self) -> None:
        a = self.actions_by_name
        menu = self.menuBar()
        file_menu = menu.addMenu("&File")
        file_menu.addAction(a["open_model"])
        hub = file_menu.addAction("Open model from the &Hub…")
        hub.triggered.connect(self.open_hub_dialog)
        demo = file_menu.addAction("Open the &demo brain")
        demo.triggered.connect(lambda: self.load_model("demo"))
        file_menu.addSeparator()
        file_menu.addAction(a["open_recording"])
        file_menu.addAction(a["save_recording"])
        file_menu.addSeparator()
        file_menu.addAction(a["export_movie"])
        file_menu.addAction(a["screenshot"])
        file_menu.addSeparator()
        file_menu.addAction(a["quit"])
        run_menu = menu.addMenu("&Run")
        for name in ("run", "play", "step_back", "step_forward", "first", "last", "stop", "reset",
                     "focus_prompt"):
            run_menu.addAction(a[name])
        view_menu = menu.addMenu("&View")
        for name in ("view_front", "view_top", "view_side", "toggle_mode", "clear_selection"):
            view_menu.addAction(a[name])
        view_menu.addSeparator()
        for dock in self.docks.values():
            view_menu.addAction(dock.toggleViewAction())
        view_menu.addSeparator()
        reset_layout = view_menu.addAction("Reset &layout")
        reset_layout.triggered.connect(lambda: self.restoreState(self._default_state))
        help_menu = menu.addMenu("&Help")
        help_menu.addAction(a["shortcuts"])
        about = help_menu.addAction("&About flyviz")
        about.triggered.connect(self.show_about)

    def _restore_layout(self) -> None:
        geometry = self.settings.value("window/geometry")
        state = self.settings.value("window/state")
        if geometry is not None:
            self.restoreGeometry(geometry)
        else:
            screen = QApplication.primaryScreen()
            room = screen.availableGeometry() if screen is not None else None
            width, height = 1440, 900
            if room is not None:   # first start on a small screen: fit, leave a margin
                width, height = min(width, room.width() - 40), min(height, room.height() - 60)
            self.resize(width, height)
        if state is not None:
            self.restoreState(state)

    # ================================================================= messages
    def show_message(self, message: str, error: bool = False, dialog: bool = False) -> None:
        """Tell the user something: in the status bar, and in a dialog for errors if asked."""
        self.last_error = message if error else self.last_error
        self.statusBar().showMessage(message, 10_000 if not error else 20_000)
        self.message_shown.emit(message)
        if dialog and not self._closing:
            box = QMessageBox(QMessageBox.Icon.Warning if error else QMessageBox.Icon.Information,
                              "flyviz", message, QMessageBox.StandardButton.Ok, self)
            box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
            box.open()

    # ================================================================= model
    def load_model(self, spec: str) -> None:
        """Load ``spec`` in the background; the window stays usable meanwhile."""
        spec = spec.strip()
        if not spec:
            self.show_message("give a model folder, a hub id or 'demo'", error=True)
            return
        if self._loader is not None and self._loader.isRunning():
            # The earlier load finishes unseen: only the newest request counts.
            self._old_loaders.append(self._loader)
        loader = ModelLoader(spec, self.model_loader, self)
        loader.progress.connect(self._on_load_progress)
        loader.loaded.connect(self._on_model_loaded)
        loader.failed.connect(self._on_model_failed)
        loader.finished.connect(self._forget_finished_loaders)
        self._loader = loader
        self.progress.setVisible(True)
        self.progress.setValue(0)
        self.show_message(f"loading {spec}…")
        self.model_label.setText(f"loading <b>{html.escape(spec)}</b>…")
        loader.start()

    def _forget_finished_loaders(self) -> None:
        self._old_loaders = [ld for ld in self._old_loaders if ld.isRunning()]

    def _on_load_progress(self, label: str, fraction: float) -> None:
        if self.sender() is not self._loader:
            return
        self.progress.setValue(int(round(100 * max(0.0, min(1.0, fraction)))))
        self.statusBar().showMessage(f"loading {self._loader.spec}: {label}")

    def _on_model_failed(self, spec: str, message: str) -> None:
        if self.sender() is not self._loader:
            return
        self.progress.setVisible(False)
        self.model_label.setText(f"could not load <b>{html.escape(spec)}</b>" if self.checkpoint is None
                                 else self._model_description())
        self.show_message(f"cannot load model {spec!r}: {message}", error=True, dialog=True)

    def _on_model_loaded(self, spec: str, checkpoint: Checkpoint, engine: Engine,
                         tokenizer: FlyTokenizer, anatomy: Anatomy) -> None:
        if self.sender() is not self._loader or self._closing:
            engine.close()
            return
        self.progress.setVisible(False)
        self._install_model(spec, checkpoint, engine, tokenizer, anatomy)

    def set_checkpoint(self, checkpoint: Checkpoint, spec: str | None = None) -> None:
        """Use an in-memory checkpoint at once (scripts and tests)."""
        tokenizer = tokenizer_for(checkpoint)
        self._install_model(spec or checkpoint.name, checkpoint,
                            Engine(checkpoint, threads=engine_threads()), tokenizer,
                            checkpoint.anatomy or layout_for(checkpoint))

    def _install_model(self, spec: str, checkpoint: Checkpoint, engine: Engine,
                       tokenizer: FlyTokenizer, anatomy: Anatomy) -> None:
        self._run_id += 1
        self.engine_thread.set_model(engine, tokenizer)
        self.checkpoint, self.tokenizer = checkpoint, tokenizer
        self.model_spec, self.model_name = spec, checkpoint.name or spec
        self.connectivity = Connectivity(checkpoint)
        neurons = checkpoint.config.neurons
        self.anatomy = anatomy
        self.brain.set_anatomy(anatomy, neurons)
        self._apply_display_settings()
        self.raster_panel.set_neurons(np.flatnonzero(anatomy.valid) if anatomy.valid.any()
                                      else np.arange(neurons))
        self.controls.set_superclasses(sorted(set(anatomy.superclass)) if anatomy.superclass else [])
        self.inspector.set_model(anatomy, self.connectivity)
        self.selected_neuron = None
        self.session.new_recording(neurons, self._run_metadata(""))
        demo = is_demo_model(spec, checkpoint)
        self.setWindowTitle(f"flyviz — {self.model_name}"
                            + (" — synthetic demo brain, not the fly connectome" if demo else ""))
        self.status_model.setText(self.model_name + (" · demo" if demo else ""))
        self.model_label.setText(self._model_description())
        self.text_panel.show_text_placeholder("Type a prompt above and press Enter.")
        self.show_message(f"model {self.model_name} ready: {neurons:,} neurons, "
                          f"{checkpoint.n_edges:,} synapses")
        self.model_ready.emit(self.model_name)
        if self._pending_prompt:
            prompt, self._pending_prompt = self._pending_prompt, None
            self.prompt_bar.set_text(prompt)
            self.run_prompt(prompt)

    def _model_description(self) -> str:
        ck = self.checkpoint
        if ck is None:
            return "no model loaded"
        cfg = ck.config
        anat = self.anatomy
        lines = [f"<b>{html.escape(self.model_name)}</b>",
                 f"{cfg.neurons:,} neurons · {ck.n_edges:,} synapses",
                 f"vocabulary {cfg.vocabulary:,} · {cfg.delay_k} delay slots · {cfg.readout_kind} readout",
                 f"layout: {html.escape(ck.layout)}"]
        if anat is not None:
            lines.append(html.escape(self.brain.note.text()))
        if is_demo_model(self.model_spec, ck):
            lines.append("<i>synthetic demo brain: not the fly connectome</i>")
        return "<br>".join(lines)

    def _run_metadata(self, prompt: str) -> dict:
        ck = self.checkpoint
        return {"model": self.model_spec, "model_name": self.model_name, "prompt": prompt,
                "neurons": 0 if ck is None else ck.config.neurons,
                "layout": "" if ck is None else ck.layout}

    def open_model_dialog(self) -> None:
        """Pick a model folder and load it."""
        folder = QFileDialog.getExistingDirectory(self, "Open a Fly LLM model folder",
                                                  str(self.settings.value("paths/models", "")))
        if folder:
            self.settings.setValue("paths/models", folder)
            self.load_model(folder)

    def open_hub_dialog(self) -> None:
        """Ask for a Hugging Face repo id and load it."""
        spec, ok = QInputDialog.getText(self, "Open a model from the Hugging Face Hub",
                                        "Repo id (e.g. ngxson/fly-llm-hf or "
                                        "fernandofernandes/fly-wordbrain-rank64):",
                                        text=str(self.settings.value("paths/hub", "ngxson/fly-llm-hf")))
        if ok and spec.strip():
            self.settings.setValue("paths/hub", spec.strip())
            self.load_model(spec.strip())

    # ================================================================= running
    def run_prompt(self, text: str | None = None) -> bool:
        """Start a run on ``text`` (default: the prompt box); False if it could not start."""
        text = self.prompt_bar.text() if text is None else text
        if self._closing:
            return False
        if self.checkpoint is None or self.tokenizer is None:
            self._pending_prompt = text
            self.show_message("the model is still loading; the prompt runs when it is ready")
            return False
        try:
            settings = self.controls.generation_settings(TopKPanel.MAX_K)
            prompt_ids = encode_prompt(self.tokenizer, text, self.checkpoint.config.bos_token_id)
        except FlyvizError as exc:
            self.show_message(str(exc), error=True)
            return False
        self.replay_timer.stop()
        self._run_id += 1
        meta = self._run_metadata(text)
        meta.update(temperature=settings.temperature, top_p=settings.top_p, seed=settings.seed,
                    max_new_tokens=settings.max_new_tokens)
        self.session.new_recording(self.checkpoint.config.neurons, meta)
        self._frame_times.clear()
        self.engine_thread.start(RunRequest(self._run_id, text, tuple(prompt_ids), settings))
        self.show_message(f"running: {len(prompt_ids) - 1} prompt tokens, "
                          f"up to {settings.max_new_tokens} new")
        return True

    def toggle_play(self) -> None:
        """Space: pause or resume the run; replay a finished recording; or start the prompt."""
        if self.worker_state == RUNNING:
            self.engine_thread.pause()
        elif self.worker_state == PAUSED:
            self.session.go_live()
            self.engine_thread.resume()
        elif self.replay_timer.isActive():
            self.replay_timer.stop()
            self._update_buttons()
        elif len(self.session) and self.session.index < len(self.session) - 1:
            cap = self.controls.speed_cap.value()
            self.replay_timer.start(int(1000 / (cap if cap > 0 else 12.0)))
            self._update_buttons()
        else:
            self.run_prompt()

    def step_forward(self) -> None:
        """→: one token forward; at the newest token of a paused run, step the model once."""
        self.replay_timer.stop()
        at_end = self.session.index >= len(self.session) - 1
        if self.worker_state == RUNNING:
            self.engine_thread.pause()
        elif at_end and self.worker_state == PAUSED:
            self.session.go_live()
            self.engine_thread.step()
        else:
            self.session.step(+1)

    def step_back(self) -> None:
        """←: one token back (the run, if any, goes on)."""
        self.replay_timer.stop()
        self.session.step(-1)

    def show_token(self, index: int) -> None:
        """Show frame ``index`` everywhere in the window."""
        self.session.set_index(index)

    def go_live(self) -> None:
        """Follow the newest frame."""
        self.replay_timer.stop()
        self.session.go_live()

    def stop_run(self) -> None:
        """End the run; its frames stay for scrubbing and saving."""
        self.replay_timer.stop()
        self.engine_thread.stop()

    def reset_run(self) -> None:
        """Stop and start over with an empty recording."""
        self.replay_timer.stop()
        self._run_id += 1
        self.engine_thread.stop()
        if self.checkpoint is not None:
            self.session.new_recording(self.checkpoint.config.neurons, self._run_metadata(""))
        self.show_message("reset")

    def _on_speed_changed(self, tokens_per_second: float) -> None:
        self.engine_thread.set_speed_cap(tokens_per_second)
        if self.replay_timer.isActive():
            self.replay_timer.setInterval(int(1000 / (tokens_per_second or 12.0)))

    def _on_replay_tick(self) -> None:
        if self.session.index >= len(self.session) - 1:
            self.replay_timer.stop()
            self._update_buttons()
            return
        self.session.step(+1)

    # ------------------------------------------------------------ worker signals
    def _on_frame(self, run_id: int, frame) -> None:
        if run_id != self._run_id or self._closing:
            return  # a frame of a cancelled run, still in the queue
        if frame.state.shape[0] != self.session.recording.neurons:
            return
        self.session.append(frame)
        self._frame_times.append(time.perf_counter())

    def _on_run_finished(self, run_id: int, reason: str) -> None:
        if run_id != self._run_id:
            return
        n = len(self.session)
        # Show the finished run at once; during the run the panels were throttled.
        self._display_dirty = False
        self.refresh_panels()
        if reason == "done":
            self.show_message(f"done: {n:,} tokens recorded")
        else:
            self.show_message(f"stopped after {n:,} tokens")
        self.run_ended.emit(reason, n)

    def _on_run_failed(self, run_id: int, message: str) -> None:
        if run_id != self._run_id:
            return
        self.show_message(message, error=True, dialog=True)
        self.run_ended.emit("failed", len(self.session))

    def _on_worker_state(self, state: str) -> None:
        self.worker_state = state
        self._update_buttons()

    def _update_buttons(self) -> None:
        playing = self.worker_state == RUNNING or self.replay_timer.isActive()
        self.play_button.setText("❚❚ Pause" if playing else "▶ Play")
        self.status_state.setText({RUNNING: "running", PAUSED: "paused"}.get(
            self.worker_state, "replaying" if self.replay_timer.isActive() else "idle"))
        self.stop_button.setEnabled(self.worker_state != IDLE)

    # ================================================================= display
    def _on_index_changed(self, index: int) -> None:
        self._display_dirty = True

    def _on_recording_replaced(self) -> None:
        self._display_dirty = True
        self._drawn = None
        self._brain_index = -2

    def _update_timeline(self) -> None:
        frame = self.session.current_frame()
        phase = "" if frame is None else ("reading the prompt" if not frame.is_generation
                                          else "generating")
        self.timeline.update_position(self.session.index, len(self.session), self.session.live,
                                      phase)

    def _on_display_tick(self) -> None:
        now = time.perf_counter()
        dt, self._last_tick = now - self._last_tick, now
        if self._display_dirty:
            # The brain follows every tick; the 2-D panels at most PANEL_HZ while a run
            # streams in, since each of their repaints costs the UI thread real time.
            running = self.worker_state == RUNNING and self.session.live
            if not running or now - self._last_panels >= 1.0 / PANEL_HZ:
                self._display_dirty = False
                self._last_panels = now
                self.refresh_panels()
            else:
                self._refresh_brain()
        self.brain.advance(dt)
        if now - self._last_status > 0.5:
            self._last_status = now
            self._update_status(now)

    def _refresh_brain(self) -> None:
        index = self.session.index
        if index != self._brain_index or self.session.recording is not self._brain_recording:
            self._brain_index, self._brain_recording = index, self.session.recording
            frame = self.session.current_frame()
            self.brain.set_target(None if frame is None else frame.state)

    def refresh_panels(self) -> None:
        """Show the session's current frame in every view (normally from the display timer)."""
        rec, index = self.session.recording, self.session.index
        key = (id(rec), index, len(rec))
        self._update_timeline()
        self._refresh_brain()
        if key == self._drawn:
            return
        moved = self._drawn is None or self._drawn[:2] != key[:2]
        self._drawn = key
        if moved:
            self.text_panel.show_frame(rec, index)
            self.topk_panel.show_frame(rec, index)
            self.raster_panel.set_mode(self.brain.mode, self.brain.limit)
            self.raster_panel.show_frame(rec, index)
        self.trace_panel.show_frame(rec, index)
        self.inspector.update_moment(rec, index)

    def _update_status(self, now: float) -> None:
        rate = self._rate_of(self._frame_times, now)
        self.status_rate.setText(f"{rate:5.1f} tok/s" if self.worker_state == RUNNING else "— tok/s")
        self.canvas_fps = self._rate_of(self.brain.draw_times, now)
        self.status_fps.setText(f"{self.canvas_fps:4.1f} fps" if self.canvas_fps else "— fps")

    @staticmethod
    def _rate_of(times: deque[float], now: float, window: float = 2.0) -> float:
        """Events per second over the last ``window`` seconds of ``times``."""
        recent = [t for t in times if now - t <= window]
        if len(recent) < 2 or recent[-1] <= recent[0]:
            return 0.0
        return (len(recent) - 1) / (recent[-1] - recent[0])

    def _apply_display_settings(self) -> None:
        c = self.controls
        self.brain.set_mode(c.colour_mode)
        self.brain.set_auto_scale(c.auto_scale.isChecked(), c.fixed_limit.value())
        self.brain.set_glow(c.glow.value() / 100.0)
        self.brain.set_point_size(c.point_size.value())
        self.brain.smoothing_s = c.smoothing.value() / 1000.0
        self.raster_panel.set_mode(self.brain.mode, self.brain.limit)
        self._drawn = None
        self._brain_index = -2
        self._display_dirty = True

    def toggle_colour_mode(self) -> None:
        """Switch between signed h and |h|."""
        box = self.controls.mode
        box.setCurrentIndex(1 - box.currentIndex())

    # ================================================================= neurons
    def _on_neuron_clicked(self, index: int) -> None:
        self.select_neuron(None if index < 0 else index)

    def select_neuron(self, index: int | None) -> None:
        """Highlight neuron ``index`` and describe it in the inspector (None clears)."""
        if index is not None and (self.checkpoint is None
                                  or not 0 <= index < self.checkpoint.config.neurons):
            return
        self.selected_neuron = index
        self.brain.set_selected(index)
        self.inspector.show_neuron(index, self.session.recording, self.session.index)
        if index is not None:
            self.docks["inspector"].show()
            self.docks["inspector"].raise_()
            self.statusBar().showMessage(f"neuron #{index} selected", 5000)

    def _apply_filter(self) -> None:
        anat = self.anatomy
        if anat is None:
            return
        superclass = str(self.controls.superclass.currentData() or "")
        cell_type = self.controls.cell_type.text().strip().lower()
        mask = None
        if superclass and anat.superclass is not None:
            mask = np.fromiter((s == superclass for s in anat.superclass), bool, len(anat.superclass))
        if cell_type and anat.cell_type is not None:
            types = np.fromiter((str(t).lower().startswith(cell_type) for t in anat.cell_type), bool,
                                len(anat.cell_type))
            mask = types if mask is None else mask & types
        self.brain.set_emphasis(mask)
        if mask is None:
            self.controls.filter_note.setText("")
        else:
            shown = int(np.count_nonzero(mask & anat.valid))
            self.controls.filter_note.setText(f"{shown:,} drawn neurons match")

    # ================================================================= recordings
    def save_recording(self, path: str | Path) -> Path:
        """Write the current recording to ``path`` (``.flyrec`` added if missing)."""
        path = Path(path)
        if path.suffix != FILE_SUFFIX:
            path = path.with_name(path.name + FILE_SUFFIX)
        if not len(self.session):
            raise RecordingError("the recording is empty; run a prompt first")
        return self.session.recording.save(path)

    def open_recording(self, path: str | Path) -> Recording:
        """Load a recording of the current model and show its last frame."""
        rec = Recording.load(path)
        if self.checkpoint is None:
            raise RecordingError("load the model this recording was made with first")
        n = self.checkpoint.config.neurons
        if rec.neurons != n:
            made_with = rec.metadata.get("model_name") or rec.metadata.get("model") or "another model"
            raise RecordingError(
                f"{Path(path).name} was recorded with {made_with} ({rec.neurons:,} neurons) but "
                f"{self.model_name} has {n:,}; open that model first")
        self.replay_timer.stop()
        self._run_id += 1
        self.engine_thread.stop()
        self.session.replace(rec)
        prompt = rec.metadata.get("prompt")
        if prompt:
            self.prompt_bar.set_text(str(prompt))
        other = rec.metadata.get("model_name")
        note = "" if not other or other == self.model_name else f" (recorded with {other})"
        self.show_message(f"opened {Path(path).name}: {len(rec):,} tokens{note}")
        return rec

    def save_recording_dialog(self) -> None:
        """Ask where to save the recording."""
        if not len(self.session):
            self.show_message("nothing to save yet: run a prompt first", error=True)
            return
        start = str(Path(str(self.settings.value("paths/recordings", ""))) / f"run{FILE_SUFFIX}")
        path, _ = QFileDialog.getSaveFileName(self, "Save recording", start,
                                              f"flyviz recordings (*{FILE_SUFFIX})")
        if path:
            try:
                saved = self.save_recording(path)
            except FlyvizError as exc:
                self.show_message(str(exc), error=True, dialog=True)
                return
            self.settings.setValue("paths/recordings", str(saved.parent))
            self.show_message(f"saved {saved}")

    def open_recording_dialog(self) -> None:
        """Ask for a recording and open it."""
        path, _ = QFileDialog.getOpenFileName(self, "Open recording",
                                              str(self.settings.value("paths/recordings", "")),
                                              f"flyviz recordings (*{FILE_SUFFIX});;All files (*)")
        if path:
            try:
                self.open_recording(path)
            except FlyvizError as exc:
                self.show_message(str(exc), error=True, dialog=True)
                return
            self.settings.setValue("paths/recordings", str(Path(path).parent))

    def export_movie(self) -> None:
        """File → Export movie: the export dialog on the current recording."""
        if not len(self.session) or self.anatomy is None:
            self.show_message("nothing to export yet: run a prompt first", error=True)
            return
        try:
            from flyviz.app.export_dialog import run_export_dialog
        except ImportError as exc:
            self.show_message(f"movie export is unavailable: {exc}", error=True, dialog=True)
            return
        self.replay_timer.stop()
        if self.worker_state == RUNNING:
            self.engine_thread.pause()   # the movie shows the recording as it is now
        run_export_dialog(self, self.session.recording, self.anatomy, self.model_name)

    # ================================================================= screenshots
    def save_screenshot(self, path: str | Path, target: str = "brain", scale: float = 1.0) -> Path:
        """Save the brain view (re-rendered at ``scale``) or the whole window as PNG."""
        path = Path(path)
        if path.suffix.lower() != ".png":
            path = path.with_name(path.name + ".png")
        if target == "brain":
            image = self.brain.grab_image(scale)
        else:
            pixmap = self.grab()
            if scale != 1.0:
                pixmap = pixmap.scaled(round(pixmap.width() * scale), round(pixmap.height() * scale),
                                       Qt.AspectRatioMode.KeepAspectRatio,
                                       Qt.TransformationMode.SmoothTransformation)
            image = pixmap.toImage()
        if not image.save(str(path), "PNG"):
            from flyviz.model.errors import ExportError

            raise ExportError(f"cannot write {path}; choose a folder you can write to")
        return path

    def screenshot_dialog(self) -> None:
        """Alt+S: choose what and how large, then where."""
        dialog = ScreenshotDialog(self)
        if dialog.exec() != QDialog.DialogCode.Accepted:
            return
        target, scale = dialog.target.currentData(), float(dialog.scale.currentData())
        start = str(Path(str(self.settings.value("paths/screenshots", ""))) / "flyviz.png")
        path, _ = QFileDialog.getSaveFileName(self, "Save screenshot", start, "PNG images (*.png)")
        if not path:
            return
        try:
            saved = self.save_screenshot(path, target, scale)
        except FlyvizError as exc:
            self.show_message(str(exc), error=True, dialog=True)
            return
        self.settings.setValue("paths/screenshots", str(saved.parent))
        self.show_message(f"saved {saved}")

    # ================================================================= help
    def show_shortcuts(self) -> QDialog:
        """Help → Keyboard shortcuts: every shortcut in one table."""
        dialog = QDialog(self)
        dialog.setWindowTitle("Keyboard shortcuts")
        layout = QVBoxLayout(dialog)
        table = QTableWidget(len(SHORTCUTS), 2)
        table.setObjectName("shortcutTable")
        table.setHorizontalHeaderLabels(["Keys", "Action"])
        table.verticalHeader().setVisible(False)
        table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        for row, (name, _keys, description) in enumerate(SHORTCUTS):
            keys = self.actions_by_name[name].shortcut().toString(
                QKeySequence.SequenceFormat.NativeText)
            table.setItem(row, 0, QTableWidgetItem(keys))
            table.setItem(row, 1, QTableWidgetItem(description))
        table.resizeColumnsToContents()
        table.horizontalHeader().setStretchLastSection(True)
        layout.addWidget(table)
        extra = QLabel("Mouse: drag to orbit, scroll to zoom, Shift+drag to pan, "
                       "click a neuron to inspect it.")
        extra.setObjectName("hint")
        layout.addWidget(extra)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(dialog.reject)
        layout.addWidget(buttons)
        dialog.resize(520, 600)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.open()
        return dialog

    def about_text(self) -> str:
        """The About box's text: version, the model's provenance and licences."""
        parts = [f"<h3>flyviz {html.escape(__version__)}</h3>",
                 "<p>Watch a connectome language model think: the Fly LLM's recurrent layer is "
                 "the fruit-fly central brain, stepped once per text token.</p>"]
        ck = self.checkpoint
        if ck is None:
            parts.append("<p>No model loaded.</p>")
        else:
            parts.append(f"<p><b>Model:</b> {html.escape(self.model_name)} "
                         f"({html.escape(ck.layout)} layout)<br>"
                         f"<b>Source:</b> {html.escape(str(ck.source or self.model_spec))}</p>")
            shown = {k: v for k, v in ck.metadata.items()
                     if isinstance(v, (str, int, float)) and len(str(v)) < 300}
            if shown:
                parts.append("<p>" + "<br>".join(f"<b>{html.escape(str(k))}:</b> {html.escape(str(v))}"
                                                 for k, v in sorted(shown.items())) + "</p>")
            if is_demo_model(self.model_spec, ck):
                parts.append(f"<p>{html.escape(_demo_description())}</p>")
            else:
                parts.append(f"<p>{html.escape(CONNECTOME_CREDIT)}</p>")
        parts.append("<p>flyviz is MIT-licensed. It uses Qt (PySide6, LGPL), vispy and pyqtgraph "
                     "(BSD/MIT), NumPy and SciPy (BSD) and Hugging Face tokenizers (Apache 2.0).</p>")
        return "".join(parts)

    def show_about(self) -> None:
        """Help → About."""
        box = QMessageBox(QMessageBox.Icon.NoIcon, "About flyviz", self.about_text(),
                          QMessageBox.StandardButton.Ok, self)
        box.setTextFormat(Qt.TextFormat.RichText)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.open()

    # ================================================================= closing
    def shutdown(self) -> None:
        """Stop the timers, the run and the threads; safe to call twice."""
        if self._closing:
            return
        self._closing = True
        self.display_timer.stop()
        self.replay_timer.stop()
        self._run_id += 1
        self.engine_thread.close()
        for loader in [self._loader, *self._old_loaders]:
            if loader is not None and loader.isRunning():
                # A load cannot be interrupted; wait for it so no thread outlives the window.
                loader.wait()

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 - Qt API
        if not self._closing:
            self.settings.setValue("window/geometry", self.saveGeometry())
            self.settings.setValue("window/state", self.saveState())
            self.controls.save(self.settings)
            self.settings.sync()
        self.shutdown()
        super().closeEvent(event)


def install_excepthook(window: MainWindow | None = None) -> Callable:
    """Show unexpected exceptions in a dialog instead of aborting the app.

    Returns the hook, which is also installed as :data:`sys.excepthook`.
    """
    import sys
    import traceback

    previous = sys.excepthook

    def hook(exc_type, exc, tb) -> None:
        if issubclass(exc_type, KeyboardInterrupt):
            previous(exc_type, exc, tb)
            return
        details = "".join(traceback.format_exception(exc_type, exc, tb))
        sys.stderr.write(details)
        if QApplication.instance() is None:
            return
        if isinstance(exc, FlyvizError):
            text = str(exc)
        else:
            text = (f"Something went wrong inside flyviz ({exc_type.__name__}: {exc}). "
                    "The app keeps running; please report this with the details below.")
        parent = window if window is not None and not window._closing else None
        if window is not None:
            window.statusBar().showMessage(text, 20_000)
        box = QMessageBox(QMessageBox.Icon.Critical, "flyviz", text, QMessageBox.StandardButton.Ok,
                          parent)
        box.setDetailedText(details)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.open()
        hook.last_box = box  # type: ignore[attr-defined]

    sys.excepthook = hook
    return hook
