"""The flyviz main window: the brain in the middle, panels in docks around it.

The window assembles parts that each do one job and can be used without it:

* :class:`~flyviz.app.runs.model_control.ModelController` loads models off the UI thread;
* :class:`~flyviz.app.runs.run_control.RunController` runs the engine, records the
  frames and says which one is shown (run, pause, step, replay, scrub);
* :class:`~flyviz.app.window.display.DisplayController` keeps the brain and every
  panel on the shown frame at display rate;
* :class:`~flyviz.app.base.actions.ActionRegistry` holds the commands, shortcuts and menus;
* :class:`~flyviz.app.window.files.FileController` reads and writes recordings,
  screenshots and movies.

What is shown lives in one Qt-free :class:`~flyviz.viewer.state.ViewerState`
(:attr:`MainWindow.state`): the widgets show it and write the user's changes to
it; tests, scripts and features set it directly (features never drive a widget:
the picks and rings, the synapse lines, the text's shading and the atlas card are
the state's, and the window's widgets follow it).

What is left here is wiring: which widget goes in which dock, and which user
action goes to which part. A new dock is :meth:`MainWindow.add_dock` plus
:meth:`~flyviz.app.window.display.DisplayController.add_view` if it follows the shown frame.
A new feature (a dock with its menus, colourings and highlights) is one entry
in :data:`FEATURES`: ``install(host)`` gets the window as a
:class:`~flyviz.app.base.host.WindowHost` and nothing more; :meth:`MainWindow._wire_features`
connects features to each other.

About 950 lines on purpose: it is the one place that says which dock,
menu entry and shortcut goes where, and the members :class:`WindowHost` promises
features; each job behind them lives in its own module (the list above).
"""

from __future__ import annotations

import atexit
import importlib.util
import time
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from PySide6.QtCore import QSettings, Qt, QTimer, Signal
from PySide6.QtGui import QCloseEvent, QIcon, QShowEvent
from PySide6.QtWidgets import (QDockWidget, QInputDialog, QLabel, QMainWindow, QMessageBox,
                               QProgressBar, QPushButton, QToolBar, QWidget)

from flyviz import APP_NAME, ORGANIZATION
from flyviz.app.atlas import atlas_panel
from flyviz.app.circuit import circuit_panel
from flyviz.app.window.status_bar import Readout, StatusBar
from flyviz.app.base.wheel import DockWheelGuard
from flyviz.app.dynamics import dynamics_panel
from flyviz.app.runs import interventions_dock
from flyviz.app.lesion import lesion_panel
from flyviz.app.language import patching_panel, why_panel
from flyviz.app.population import population_panel, trajectory_panel
from flyviz.app.spiking import spiking_panel, spiking_screen_panel
from flyviz.app.window import window_layout
from flyviz.app.base.actions import SHORTCUTS, ActionRegistry, with_letter
from flyviz.app.base.background import BackgroundCalls
from flyviz.app.base.keys import KeyGuard
from flyviz.app.base.docks import FIT_HEIGHT, Docks
from flyviz.app.brain.brain_view import BrainView
from flyviz.app.brain.colouring import ColourBy
from flyviz.app.brain.connectivity import Connectivity
from flyviz.app.window.controls import (PromptBar, SettingsPanel, Timeline, restore_settings,
                                 save_settings)
from flyviz.app.window.dialogs import (CONNECTOME_CREDIT, about_text, demo_description,
                                install_excepthook, shortcuts_dialog, show_about)
from flyviz.app.window.display import DisplayController
from flyviz.app.window.dock_kinds import LANGUAGE_KINDS, DockKinds
from flyviz.app.window.files import FileController, save_screenshot
from flyviz.app.brain.inspector import NeuronInspector
from flyviz.app.window.layout_presets import LayoutPresets, prepare_window
from flyviz.app.runs.model_control import ModelBundle, ModelController, default_model_loader
from flyviz.app.runs.model_panel import ModelPanel
from flyviz.app.language.panels import TextPanel, TopKPanel, TracePanel
from flyviz.app.population.state_panels import RasterPanel
from flyviz.app.runs.run_control import RUNNING, RunController, events_per_second
from flyviz.app.runs.verification import VerificationController
from flyviz.app.brain.neuron_pick import BrainPicks
from flyviz.app.window.window_features import FeatureWindow, follow_feature_fields
from flyviz.kinds import LANGUAGE
from flyviz.model.checkpoint import Anatomy, Checkpoint
from flyviz.model.errors import FlyvizError
from flyviz.record.recording import Recording
from flyviz.viewer.highlight import filter_mask
from flyviz.viewer.state import ViewerState

__all__ = ["FEATURES", "CONNECTOME_CREDIT", "SHORTCUTS", "MainWindow", "demo_description",
           "install_excepthook"]

#: How much nicer than the UI the engine thread runs, so drawing wins a busy CPU.
ENGINE_NICENESS = 5

#: Refresh rate of the status bar's token and frame rates (Hz).
STATUS_HZ = 2

#: What a dock of the Fly LLM alone serves: the language model kind (:mod:`flyviz.kinds`).
LM = LANGUAGE_KINDS

#: The Alt letter of each dock's View entry: none shared with another entry the View menu
#: shows beside it (Front, Top, Side, Colours, Pick, Colour by, Clear, Outline, Mesh,
#: Remove meshes, Layout; the Fly LLM's docks with the docks of every kind, a spiking
#: brain's likewise). Model, Atlas, Patching, Circuit, Dynamics and Stimulus have no letter
#: left; the arrow keys reach them.
DOCK_LETTERS = {"text": "x", "topk": "k", "controls": "i", "inspector": "u", "raster": "a",
                "traces": "r", "lesions": "n", "interventions": "v", "population": "h",
                "cell_types": "y", "why": "w", "graph": "g", "trajectory": "j",
                "spiking_population": "k", "screen": "r"}

#: The window's features, installed in this order: ``(name, install(host) -> feature,
#: kinds)``, ``kinds`` the model kinds (:mod:`flyviz.kinds` keys) whose models its docks
#: serve (a row of two: the Fly LLM's). Each reaches the window only through
#: :class:`~flyviz.app.base.host.WindowHost`.
FEATURES = (("atlas", atlas_panel.install, LM), ("lesions", lesion_panel.install, LM),
            ("interventions", interventions_dock.install, LM),
            ("population", population_panel.install, LM), ("why", why_panel.install, LM),
            ("trajectory", trajectory_panel.install, LM),
            ("patching", patching_panel.install, LM), ("circuit", circuit_panel.install, LM),
            ("dynamics", dynamics_panel.install, LM),
            ("spiking", spiking_panel.install, spiking_panel.SPIKING_KINDS),
            ("screen", spiking_screen_panel.install, spiking_screen_panel.SCREEN_KINDS))


#: The windows not yet shut down (see :func:`_shut_down_open_windows`).
_OPEN_WINDOWS: "weakref.WeakSet[MainWindow]" = weakref.WeakSet()


@atexit.register
def _shut_down_open_windows() -> None:
    """Stop the threads of every window a script left open when Python exits.

    A script (or a notebook kernel) that makes a window and ends without closing it would
    otherwise have Qt destroy the engine thread while it runs, which aborts the process
    ("QThread: Destroyed while thread ... is still running"): its exit status and any
    output still buffered would be lost.
    """
    for window in list(_OPEN_WINDOWS):
        window.shutdown()


class TimelineFollower:
    """Keeps the :class:`~flyviz.app.window.controls.Timeline` on the shown frame (a frame view)."""

    def __init__(self, timeline: Timeline, runs: RunController) -> None:
        self.timeline = timeline
        self.runs = runs

    def show_frame(self, recording: Recording, index: int) -> None:
        """Slider position, token counter and what the model is doing."""
        session = self.runs.session
        self.timeline.update_position(index, len(recording), session.live,
                                      self.runs.phase_label())


def window_title(name: str, is_demo: bool) -> str:
    """The window's title for the model ``name``: a demo brain says it is not the fly
    connectome, once (the demo's own name already says "synthetic")."""
    if not is_demo:
        return f"flyviz — {name}"
    if "synthetic" in name.lower():
        return f"flyviz — {name}: not the fly connectome"
    return f"flyviz — {name} — synthetic demo brain, not the fly connectome"


class MainWindow(FeatureWindow):
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

    def __init__(self, model_spec: str | None = "demo", model_loader=default_model_loader,
                 settings: QSettings | None = None, start_prompt: str | None = None) -> None:
        super().__init__()
        self.settings = settings if settings is not None else QSettings(ORGANIZATION, APP_NAME)
        #: What the window shows (the widgets bind to it; tests and scripts set it).
        self.state = ViewerState()
        restore_settings(self.state, self.settings)
        self._drawn_anatomy: Anatomy | None = None
        #: The installed features by name (see :data:`FEATURES`).
        self.features: dict[str, Any] = {}
        self.feature_kinds: dict[str, tuple[str, ...]] = {}
        self.last_error = ""
        self.closing = False
        self.canvas_fps = 0.0
        self._pending_prompt = start_prompt
        self._placed = False

        self.setWindowTitle("flyviz")
        self.setDockOptions(QMainWindow.DockOption.AnimatedDocks
                            | QMainWindow.DockOption.AllowTabbedDocks)
        try:
            from flyviz.resources import asset_path

            self.setWindowIcon(QIcon(str(asset_path("icons", "flyviz.svg"))))
        except FileNotFoundError:  # an installation without the icon still works
            pass

        self.models = ModelController(model_loader, self, state=self.state)
        self.verifier = VerificationController(self.settings, self)
        self.runs = RunController(self, engine_niceness=ENGINE_NICENESS, state=self.state)
        #: The runs as features start them (:class:`flyviz.runs.Runs`, a WindowHost member).
        self.runner = self.runs.runner
        self.files = FileController(self)
        self.actions_registry = ActionRegistry(self)
        self.background = BackgroundCalls(self)
        self.docks = Docks(self)
        self.dock_kinds = DockKinds(self.docks, window=self)
        # The wheel scrolls a dock rather than the value box passing under the pointer
        # (add_dock gives it each dock).
        self._wheel_guard = DockWheelGuard(self)
        # The focused button, box, slider or list keeps Space, the arrows and letters (the
        # one-key shortcuts would otherwise take them: no button could be pressed by key).
        self._key_guard = KeyGuard(self)

        self._build_central()
        self._build_docks()
        self._build_status_bar()
        self._build_actions()
        self.colour_by = ColourBy(self.state, self.actions_registry, self.show_message, self)
        for name, install, *kinds in FEATURES:
            self.register_feature(name, install, *kinds)
        # The actions of the kind shown from the start (the Fly LLM's until a model is): a
        # feature's action of another kind, on the same keys as one of these (Ctrl+Return),
        # would otherwise make both keys ambiguous until a model is shown.
        self.actions_registry.apply(self.state.kind)
        self._wire_features()
        #: View → Layout and the saved arrangement of the docks.
        self.layouts = LayoutPresets(self, self.docks, self.settings, self.actions_registry,
                                     self.dock_kinds)
        self.display = DisplayController(self.runs.session, self.brain, self._streaming, self)
        self.display.add_view(TimelineFollower(self.timeline, self.runs), every_tick=True)
        for view in (self.text_panel, self.topk_panel, self.raster_panel, self.trace_panel,
                     self.inspector):
            self.display.add_view(view)
        self.state.events.layer.connect(self.display.set_colour_layer)
        self.raster_panel.follow_scale(lambda: (self.brain.mode, self.brain.limit))
        self._connect()
        window_layout.place_window(self, self.settings)
        self.layouts.restore()
        self._apply_display_settings()

        self.status_timer = QTimer(self)
        self.status_timer.setInterval(int(1000 / STATUS_HZ))
        self.status_timer.timeout.connect(self._update_status)
        self.status_timer.start()
        self.runs.apply_speed_cap()
        self._update_buttons()
        _OPEN_WINDOWS.add(self)
        if model_spec:
            QTimer.singleShot(0, lambda: self.load_model(model_spec))

    # ================================================================= building
    def _build_central(self) -> None:
        self.brain = BrainView(self)
        self.brain.state = self.state
        self.setCentralWidget(self.brain)
        #: Picking in the brain view (click, Shift+click, Ctrl+drag) and the rings of the
        #: state's picked and intervened neurons.
        self.picking = BrainPicks(self.brain, self.state)
        self.highlights = self.state.highlights

        bar = QToolBar("Prompt", self)
        bar.setObjectName("promptToolbar")
        bar.setMovable(False)
        self.prompt_bar = PromptBar()
        #: The prompt box's place in the bar (hidden for a kind that reads no text).
        self._prompt_action = bar.addWidget(self.prompt_bar)
        self.play_button = QPushButton("▶ Play")
        self.play_button.setToolTip("Play / pause (Space)")
        self.step_button = QPushButton("Step ▷|")
        self.step_button.setToolTip("One token forward (→)")
        self.stop_button = QPushButton("■ Stop")
        self.stop_button.setToolTip("Stop the run (Esc)")
        self.reset_button = QPushButton("Reset")
        self.reset_button.setToolTip("Stop and clear the recording (Ctrl+R)")
        for button in (self.play_button, self.step_button, self.stop_button, self.reset_button):
            # Tab reaches them, a click leaves the keyboard where it was: Space after
            # clicking Reset plays (the shortcut) rather than pressing Reset again.
            button.setFocusPolicy(Qt.FocusPolicy.TabFocus)
            bar.addWidget(button)
        self.addToolBar(Qt.ToolBarArea.TopToolBarArea, bar)

        timeline_bar = QToolBar("Timeline", self)
        timeline_bar.setObjectName("timelineToolbar")
        timeline_bar.setMovable(False)
        self.timeline = Timeline()
        timeline_bar.addWidget(self.timeline)
        # ←/→/Home/End on the focused timeline are the window's (→ at the newest token
        # steps the model, End goes live), as when the brain view has the keyboard.
        KeyGuard.leave(self.timeline.slider)
        self.addToolBar(Qt.ToolBarArea.BottomToolBarArea, timeline_bar)

    def _build_docks(self) -> None:
        self.text_panel = TextPanel()
        self.topk_panel = TopKPanel()
        self.raster_panel = RasterPanel()
        self.trace_panel = TracePanel()
        self.controls = SettingsPanel()
        self.controls.bind(self.state.display, self.state.run)
        self.inspector = NeuronInspector()
        self.model_panel = ModelPanel(str(self.settings.value("paths/hub", "")))
        area = Qt.DockWidgetArea
        self.add_dock("text", "Text", self.text_panel, area.RightDockWidgetArea, kinds=LM)
        self.add_dock("topk", "Next token", self.topk_panel, area.RightDockWidgetArea, kinds=LM)
        self.add_dock("model", "Model", self.model_panel, area.LeftDockWidgetArea, scroll=True)
        self.add_dock("controls", "Settings", self.controls, area.LeftDockWidgetArea, scroll=True)
        self.add_dock("inspector", "Neuron", self.inspector, area.LeftDockWidgetArea, scroll=True)
        self.add_dock("raster", "State raster", self.raster_panel, area.BottomDockWidgetArea)
        # Top-1 probability and mean |x| per token: the Fly LLM's (a spiking brain's rates
        # are in its Spiking populations dock).
        self.add_dock("traces", "Traces", self.trace_panel, area.BottomDockWidgetArea, kinds=LM)
        docks = self.docks
        # One column of tabs on the left (sizes: LayoutPresets.default_sizes, once shown).
        prepare_window(self)
        self.tabifyDockWidget(docks["model"], docks["controls"])
        self.tabifyDockWidget(docks["controls"], docks["inspector"])
        docks["controls"].raise_()
        self.splitDockWidget(docks["raster"], docks["traces"], Qt.Orientation.Horizontal)

    def add_dock(self, key: str, title: str, widget: QWidget, area: Qt.DockWidgetArea,
                 scroll: bool = False, kinds: tuple[str, ...] | None = None) -> QDockWidget:
        """Put ``widget`` in a new dock (listed in View once the menus exist); ``kinds``:
        the model kinds it serves (default: every kind; a feature's: its FEATURES row's)."""
        dock = window_layout.add_dock(self, self.docks, key, title, widget, area, scroll)
        self._wheel_guard.watch(dock)
        self.dock_kinds.watch(key)      # a dock the user closes stays closed
        dock.toggleViewAction().triggered.connect(
            lambda checked, dock=dock: self._opened_from_view(dock) if checked else None)
        letter = DOCK_LETTERS.get(key)
        if letter:
            # The entry's text only: Qt copies a dock's title to its entry on every change
            # (which comes before windowTitleChanged), and an '&' in the title itself would
            # show in its title bar and tab.
            entry = dock.toggleViewAction()

            def label(shown: str, entry=entry, letter=letter) -> None:
                entry.setText(with_letter(shown, letter))

            label(dock.windowTitle())
            dock.windowTitleChanged.connect(label)
        if kinds is not None:
            self.dock_kinds.declare(key, kinds)
        if "View" in self.actions_registry.menus:
            self.actions_registry.menu("View").insertAction(self._dock_menu_end,
                                                            dock.toggleViewAction())
        return dock

    def _opened_from_view(self, dock: QDockWidget) -> None:
        """A dock the user opens from View comes in front of its tab group (Qt shows it
        behind the tab in front, to be looked for), as tall as its form where it is fitted
        to one (its height was the group's, its last rows out of sight)."""
        dock.raise_()
        if dock.property(FIT_HEIGHT):
            self.docks.fit(dock)

    def _build_status_bar(self) -> None:
        status = StatusBar(self)
        self.setStatusBar(status)
        self.status_model = QLabel("no model")
        self._rate_unit = "tok/s"
        self.status_rate = Readout("— tok/s")
        self.status_fps = Readout("— fps", ("— fps", f"{999.9:4.1f} fps"))
        self.status_state = QLabel("idle")
        self.progress = QProgressBar()
        self.progress.setMaximumWidth(180)
        self.progress.setRange(0, 100)
        self.progress.setVisible(False)
        status.addPermanentWidget(self.progress)
        for label in (self.status_state, self.status_rate, self.status_fps, self.status_model):
            status.addPermanentWidget(label)
        self._fit_rate_readout()

    def _fit_rate_readout(self) -> None:
        # The rate's widest texts in the shown kind's unit.
        self.status_rate.set_widest(f"— {self._rate_unit}", f"{9999.9:5.1f} {self._rate_unit}")

    def _build_actions(self) -> None:
        runs, files = self.runs, self.files
        registry = self.actions_registry
        registry.add_shortcuts({
            "run": lambda: self.run_prompt(),
            "play": self.toggle_play, "step_back": runs.step_back,
            "step_forward": runs.step_forward, "first": lambda: self.show_token(0),
            "last": runs.go_live, "stop": self.stop_and_cancel, "reset": self.reset_run,
            "view_front": lambda: self.set_view("front"),
            "view_top": lambda: self.set_view("top"),
            "view_side": lambda: self.set_view("side"),
            "toggle_mode": self.toggle_colour_mode,
            "pick_neuron": self.pick_neuron_dialog,
            "clear_selection": lambda: self.select_neuron(None),
            "focus_prompt": self.prompt_bar.focus_text,
            "open_model": files.open_model_dialog, "open_recording": files.open_recording_dialog,
            "save_recording": files.save_recording_dialog, "export_movie": files.export_movie,
            "screenshot": files.screenshot_dialog, "shortcuts": self.show_shortcuts,
            "quit": self.close,
        })
        registry.add("open_hub", "Open model from the &Hub…", files.open_hub_dialog)
        registry.add("open_demo", "Open the &demo brain", lambda: self.load_model("demo"))
        registry.add("share_page", "Share as &web page…", files.share_page, "",
                     "Write what the window shows as one web page that plays the run, offline")
        registry.add("about", "&About flyviz", lambda: show_about(self, self.about_text()))
        outline = registry.add("toggle_outline", "Brain &outline", self._toggle_outline, "O",
                               "Show the brain's outline, computed from the somas, behind the "
                               "neurons")
        outline.setCheckable(True)
        outline.setChecked(self.state.mesh.outline_shown)
        registry.add("add_mesh", "Add &mesh…", self.files.add_mesh_dialog, "",
                     "Draw a mesh file (.obj, .ply, .stl: a brain outline or neuropils) behind "
                     "the neurons")
        registry.add("clear_meshes", "Remove mesh&es", self.state.clear_meshes, "",
                     "Forget the mesh files added")
        export = registry["export_movie"]
        if importlib.util.find_spec("flyviz.app.window.export_dialog") is None:
            export.setEnabled(False)
            export.setToolTip("Movie export is not available in this installation yet; "
                              "use 'flyviz export' on the command line")
            export.setStatusTip(export.toolTip())
        # The prompt's actions serve the language model alone (a spiking brain reads none).
        for name in ("run", "focus_prompt"):
            registry.declare(name, LM)
        registry.build_menus()
        view = registry.menu("View")
        view.addSeparator()
        for name in ("toggle_outline", "add_mesh", "clear_meshes"):
            view.addAction(registry[name])
        view.addSeparator()
        for dock in self.docks.values():
            view.addAction(dock.toggleViewAction())
        self._dock_menu_end = view.addSeparator()

    @property
    def actions_by_name(self):
        """Every named action (menus and shortcuts)."""
        return self.actions_registry.by_name

    def _connect(self) -> None:
        runs = self.runs
        self.prompt_bar.submitted.connect(self._run_submitted_prompt)
        # The prompt is the state's (a script sets it there); the box is its view.
        docks = self.state.docks
        self.prompt_bar.box.currentTextChanged.connect(
            lambda text: setattr(docks, "prompt", text))
        docks.events.prompt.connect(self._on_prompt)
        self.play_button.clicked.connect(self.toggle_play)
        self.step_button.clicked.connect(runs.step_forward)
        self.stop_button.clicked.connect(runs.stop)
        self.reset_button.clicked.connect(self.reset_run)
        self.timeline.scrubbed.connect(self.show_token)
        self.timeline.live_requested.connect(runs.go_live)
        self.trace_panel.token_clicked.connect(self.show_token)
        self.brain.neuron_clicked.connect(lambda i: self.select_neuron(None if i < 0 else i))
        self.inspector.neuron_requested.connect(self.select_neuron)
        self.controls.filter_changed.connect(self._filter_from_dock)
        state = self.state
        state.run.events.speed_cap.connect(runs.apply_speed_cap)
        state.display.events.connect(lambda *_: self._apply_display_settings())
        state.events.highlight.connect(self.brain.set_emphasis)
        state.events.selected.connect(self._on_selected)
        state.events.view.connect(self.brain.set_view)
        state.events.camera.connect(self._on_camera)
        state.events.filter.connect(self._apply_filter)
        state.events.meshes.connect(self._apply_meshes)
        state.events.model.connect(self._apply_kind)
        state.events.camera_wanted.connect(self._camera_from_view)
        follow_feature_fields(state, self.brain, self.text_panel, self.inspector)
        self.models.ready.connect(lambda _name: self.picking.refresh())
        self.models.ready.connect(self.model_ready)     # after the features' own handlers
        self.brain.camera_moved.connect(self._camera_from_view)
        self.model_panel.load_requested.connect(self.load_model)
        self.model_panel.spec_entered.connect(self._load_entered_spec)
        self.model_panel.open_folder_requested.connect(self.files.open_model_dialog)
        self.model_panel.verification.bind(self.verifier)
        self.verifier.finished.connect(lambda line: self.show_message(f"{self.model_name}: {line}"))

        runs.state_changed.connect(self._on_run_state)
        runs.run_ended.connect(self._on_run_ended)
        runs.run_failed.connect(lambda text: self.show_message(text, error=True, dialog=True))
        runs.message.connect(lambda text, error: self.show_message(text, error=error))

        models = self.models
        models.loading.connect(self._on_model_loading)
        models.progress.connect(self._on_load_progress)
        models.failed.connect(self._on_model_failed)
        models.dataset_needed.connect(self._on_dataset_needed)
        models.loaded.connect(self._install_model)
        models.graph_ready.connect(self.inspector.graph_ready)

    # ================================================================= state, for tests and tools
    @property
    def session(self):
        """The :class:`~flyviz.app.base.session.Session` every view reads."""
        return self.runs.session

    @property
    def engine_thread(self):
        """The engine's thread handle."""
        return self.runs.engine_thread

    @property
    def worker_state(self) -> str:
        """The engine worker's state: idle, running or paused."""
        return self.runs.worker_state

    @property
    def selected_neuron(self) -> int | None:
        """The selected neuron (the state's), or None."""
        return self.state.selected

    @property
    def bundle(self) -> ModelBundle | None:
        """The loaded model with its tokenizer, anatomy and connectivity, or None."""
        return self.models.bundle

    @property
    def checkpoint(self) -> Checkpoint | None:
        """The loaded model, or None."""
        return self.models.checkpoint

    @property
    def anatomy(self) -> Anatomy | None:
        """Positions of the loaded model's neurons (anatomy or graph layout)."""
        return None if self.bundle is None else self.bundle.anatomy

    @property
    def tokenizer(self):
        """The loaded model's tokenizer, or None."""
        return None if self.bundle is None else self.bundle.tokenizer

    @property
    def model_name(self) -> str:
        """The loaded model's name (``""`` before one is loaded)."""
        return "" if self.bundle is None else self.bundle.name

    @property
    def model_spec(self) -> str:
        """What was asked for to load the current model."""
        return "" if self.bundle is None else self.bundle.spec

    # ================================================================= messages
    def show_message(self, message: str, error: bool = False, dialog: bool = False) -> None:
        """Tell the user something: in the status bar, and in a dialog for errors if asked."""
        self.last_error = message if error else self.last_error
        self.statusBar().showMessage(message, 10_000 if not error else 20_000)
        self.message_shown.emit(message)
        if dialog and not self.closing:
            box = QMessageBox(QMessageBox.Icon.Warning if error else QMessageBox.Icon.Information,
                              "flyviz", message, QMessageBox.StandardButton.Ok, self)
            box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
            box.open()

    # ================================================================= model
    def load_model(self, spec: str) -> None:
        """Load ``spec`` in the background; the window stays usable meanwhile. A folder that
        holds a spiking brain and no model (:func:`flyviz.spiking.brain.is_brain_folder`: the
        authors' layout, the whole MaleCNS, a ConnecTorch brain) opens as that brain."""
        spec = spec.strip()
        if not spec:
            self.show_message("give a model folder, a hub id or 'demo'", error=True)
            return
        if not self.open_if_brain(spec):
            self.models.load(spec)

    def open_if_brain(self, spec: str) -> bool:
        """Open ``spec`` as a spiking brain if it is a folder holding one and no model (the
        authors' layout, the whole MaleCNS, a ConnecTorch brain: a graph without a language
        model; :func:`flyviz.spiking.brain.is_brain_folder`, napari's rule too); whether it
        was."""
        from flyviz.spiking.brain import is_brain_folder

        opener = getattr(self.features.get("spiking"), "open_brain_folder", None)
        if opener is None or not is_brain_folder(spec):
            return False
        opener(spec)
        return True

    def set_checkpoint(self, checkpoint: Checkpoint, spec: str | None = None) -> None:
        """Use an in-memory checkpoint at once (scripts and tests)."""
        self._install_model(self.models.bundle_now(checkpoint, spec))

    def _load_entered_spec(self, spec: str) -> None:
        if spec:
            self.settings.setValue("paths/hub", spec)
        self.load_model(spec)

    def _on_model_loading(self, spec: str) -> None:
        self.verifier.cancel("verification cancelled: another model is loading")
        self.progress.setVisible(True)
        self.progress.setValue(0)
        self.show_message(f"loading {spec}…")
        self.model_panel.show_loading(spec)

    def _on_load_progress(self, spec: str, label: str, fraction: float) -> None:
        self.progress.setValue(int(round(100 * max(0.0, min(1.0, fraction)))))
        self.statusBar().showMessage(f"loading {spec}: {label}")

    def _on_model_failed(self, spec: str, message: str) -> None:
        self._show_load_ended(spec)
        self.show_message(f"cannot load model {spec!r}: {message}", error=True, dialog=True)

    def _on_dataset_needed(self, spec: str, message: str) -> None:
        self._show_load_ended(spec)
        self.files.ask_for_dataset(spec, message)

    def _show_load_ended(self, spec: str) -> None:
        self.progress.setVisible(False)
        if self.bundle is not None:
            self.model_panel.describe(self.bundle, self.brain.note.text())
        elif self.state.model is not None:
            self._describe_shown()              # a spiking brain shown stays, and is said
        else:
            self.model_panel.show_failed(spec)

    def _toggle_outline(self) -> None:
        self.state.mesh.outline_shown = self.actions_registry["toggle_outline"].isChecked()

    def _apply_meshes(self) -> None:
        """Draw what the state shows behind the cloud (the outline is computed once per model)."""
        action = self.actions_registry.by_name.get("toggle_outline")
        if action is not None and action.isChecked() != self.state.mesh.outline_shown:
            action.setChecked(self.state.mesh.outline_shown)
        if self.state.anatomy is None:
            return
        try:
            meshes = self.state.shown_meshes()
        except FlyvizError as exc:
            self.show_message(str(exc), error=True)
            return
        self.brain.set_meshes(meshes, self.state.mesh.mesh_opacity)

    def _apply_kind(self) -> None:
        """Show the docks and the time axis of the shown model's kind (:mod:`flyviz.kinds`)."""
        kind = self.state.kind
        self.dock_kinds.apply(kind)
        self.actions_registry.apply(kind)
        self.timeline.set_time_axis(kind.time_axis)
        self.raster_panel.set_kind(kind)
        self.step_button.setToolTip(f"One {kind.time_axis.name} forward (→)")
        self.inspector.set_kind(kind)
        display = self.state.display                        # the recorded state is the kind's
        self.brain.apply_settings(self.state.state_layer(), display.point_size, display.glow)
        self._prompt_action.setVisible(kind.reads_text)     # a spiking brain reads no prompt
        self.controls.generation.setVisible(kind.reads_text)
        # M switches the Colours row: with the row it goes from the menu, the shortcut list
        # and the keys (for a spiking brain it listed a switch that changed nothing shown).
        modes = self.controls.show_colour_modes(tuple(kind.state_quantities))
        self.actions_registry["toggle_mode"].setVisible(modes)
        self._rate_unit = kind.rate_unit()
        self.status_rate.setText(f"— {self._rate_unit}")
        self._fit_rate_readout()
        anatomy = self.state.anatomy
        if anatomy is not None and anatomy is not self._drawn_anatomy:
            # the state's model is the one drawn, whoever gave it the state
            self._draw_anatomy(anatomy, self.state.neurons)
        if anatomy is not None and self.models.loaded_here(self.state.model):
            bundle = self.models.bundle          # the model the window loaded, shown again
            if bundle is not None:
                self.inspector.set_model(anatomy, bundle.connectivity, bundle.checkpoint)
        elif anatomy is not None:
            # a model the window did not load itself (another kind's): its neurons and its
            # own synapses (a spiking brain's counts), not the LLM's
            wiring = kind.wiring(self.state.model) if self.state.model is not None else None
            connectivity = None if wiring is None else Connectivity(wiring)
            self.inspector.set_model(anatomy, connectivity)
            if connectivity is not None:
                self.models.index_graph(connectivity)
        self._describe_shown()

    def _describe_shown(self) -> None:
        """Name a model the window did not load itself (a spiking brain) in the title, the
        status bar and the Model dock, as its kind describes it; the loaded language model
        is described when it is installed (:meth:`_install_model`)."""
        model = self.state.model
        if model is None or self.bundle is not None:
            return
        description = self.state.kind.describe(model)
        self.setWindowTitle(window_title(description.name, False))
        self.status_model.setText(description.name)
        self.model_panel.describe_model(description)

    def _draw_anatomy(self, anatomy: Anatomy, neurons: int) -> None:
        """Draw ``anatomy``'s neurons in the brain view and the state raster."""
        self._drawn_anatomy = anatomy
        self.brain.set_anatomy(anatomy, neurons)
        self.raster_panel.set_neurons(np.flatnonzero(anatomy.valid) if anatomy.valid.any()
                                      else np.arange(neurons))

    def _install_model(self, bundle: ModelBundle) -> None:
        if self.closing:
            bundle.close()
            return
        self.progress.setVisible(False)
        self.models.install(bundle)
        checkpoint, anatomy = bundle.checkpoint, bundle.anatomy
        neurons = checkpoint.config.neurons
        self.state.set_model(bundle.model, anatomy, bundle.name, neurons=neurons)
        self.runs.set_model(bundle.model)
        self.verifier.set_model(checkpoint, bundle.name)
        # (the state's model change, above, drew the anatomy and gave the inspector the
        # model: _apply_kind)
        self._apply_meshes()
        self.text_panel.set_decoder(bundle.tokenizer.decode)
        self._apply_display_settings()
        self.controls.set_superclasses(sorted(set(anatomy.superclass)) if anatomy.superclass else [])
        self.setWindowTitle(window_title(bundle.name, bundle.is_demo))
        self.status_model.setText(bundle.name + (" · demo" if bundle.is_demo else ""))
        self.model_panel.describe(bundle, self.brain.note.text())
        self.text_panel.show_text_placeholder("Type a prompt above and press Enter.")
        self.show_message(f"model {bundle.name} ready: {neurons:,} neurons, "
                          f"{checkpoint.n_edges:,} synapses")
        self.models.ready.emit(bundle.name)        # the features', then model_ready
        if self._pending_prompt:
            prompt, self._pending_prompt = self._pending_prompt, None
            self.prompt_bar.set_text(prompt)
            self.run_prompt(prompt)

    # ================================================================= running
    def _on_prompt(self, text: str) -> None:
        if self.prompt_bar.text() != text:
            self.prompt_bar.set_text(text)

    def run_prompt(self, text: str | None = None) -> bool:
        """Start a run on ``text``, or by default the run the state describes (the shown
        model's kind reads it: the prompt box's text...); False if it could not start."""
        if self.closing:
            return False
        if self.state.model is None:        # the model shown runs, whatever its kind
            self._pending_prompt = self.state.docks.prompt if text is None else text
            self.show_message("the model is still loading; the prompt runs when it is ready")
            return False
        return self.runs.start(text)

    def _run_submitted_prompt(self, text: str) -> None:
        """Enter / Run in the prompt box: start the run and take the keyboard from the box,
        so that the single-key shortcuts (Space, W, M, 1/2/3) act instead of typing."""
        if self.run_prompt(text):
            self.brain.setFocus(Qt.FocusReason.OtherFocusReason)

    def toggle_play(self) -> None:
        """Space: pause or resume the run; replay a finished recording; or start the prompt."""
        if not self.runs.toggle_play():
            self.run_prompt()

    def step_forward(self) -> None:
        """→: one token forward; at the newest token of a paused run, step the model once."""
        self.runs.step_forward()

    def step_back(self) -> None:
        """←: one token back (the run, if any, goes on)."""
        self.runs.step_back()

    def show_token(self, index: int) -> None:
        """Show frame ``index`` everywhere in the window."""
        self.runs.show(index)

    def go_live(self) -> None:
        """Follow the newest frame."""
        self.runs.go_live()

    def stop_run(self) -> None:
        """End the run; its frames stay for scrubbing and saving."""
        self.runs.stop()

    def stop_and_cancel(self) -> None:
        """Esc (Run → Stop): end the run and cancel whichever dock's computation runs (an
        estimate, a circuit search, a screen...), each as its own Cancel would."""
        self.runs.stop()
        self.background.cancel_jobs()

    def reset_run(self) -> None:
        """Stop and start over with an empty recording."""
        self.runs.reset()
        self.show_message("reset")

    def _streaming(self) -> bool:
        return self.runs.worker_state == RUNNING and self.runs.session.live

    def _on_run_state(self, _state: str) -> None:
        self._update_buttons()
        self.display.mark_dirty()

    def _on_run_ended(self, reason: str, frames: int) -> None:
        # Show the finished run at once; during the run the panels were throttled.
        self.refresh_panels()
        if reason == "done":
            self.show_message(f"done: {frames:,} {self.state.kind.time_axis.names} recorded")
        elif reason == "stopped":
            self.show_message(f"stopped after {frames:,} {self.state.kind.time_axis.names}")
        self.run_ended.emit(reason, frames)

    def _update_buttons(self) -> None:
        state = self.runs.state
        playing = state in (RUNNING, "replaying")
        self.play_button.setText("❚❚ Pause" if playing else "▶ Play")
        self.status_state.setText(state)
        self.stop_button.setEnabled(self.runs.active)

    # ================================================================= display
    def refresh_panels(self) -> None:
        """Show the session's current frame in every view now (normally at display rate)."""
        self.display.refresh()

    def _update_status(self) -> None:
        now = time.perf_counter()
        rate = self.runs.token_rate(now)
        self.status_rate.setText(f"{rate:5.1f} {self._rate_unit}" if rate else f"— {self._rate_unit}")
        self.canvas_fps = events_per_second(self.brain.draw_times, now)
        self.status_fps.setText(f"{self.canvas_fps:4.1f} fps" if self.canvas_fps else "— fps")

    def _apply_display_settings(self) -> None:
        d = self.state.display
        self.brain.apply_settings(self.state.state_layer(), d.point_size, d.glow)
        self.brain.smoothing_s = d.smoothing_s
        self.brain.set_gain(d.gain)
        self.display.redraw_brain()

    def toggle_colour_mode(self) -> None:
        """Switch between signed x and |x|."""
        display = self.state.display
        display.mode = "abs" if display.mode == "signed" else "signed"

    def set_view(self, name: str) -> None:
        """Look from ``"front"``, ``"top"`` or ``"side"`` (the state's camera preset)."""
        self.state.view = name

    def _on_camera(self, pose: Any) -> None:
        if pose is not None and pose != self.brain.camera_pose():
            pose.apply(self.brain.view.camera)
            self.brain.update_gain()

    def _camera_from_view(self) -> None:
        self.state.camera = self.brain.camera_pose()

    def sync_camera(self) -> None:
        """Write where the brain view looks from now into the state (before exports read it)."""
        self._camera_from_view()

    def _wire_features(self) -> None:
        super()._wire_features()
        # Requests made in the window's own widgets, answered by features.
        why, atlas = self.features.get("why"), self.features.get("atlas")
        if why is not None:
            self.text_panel.why_requested.connect(why.why_at)
        if atlas is not None:
            self.inspector.atlas_card.token_requested.connect(atlas.find_token)

    # ================================================================= neurons
    def select_neuron(self, index: int | None) -> None:
        """Highlight neuron ``index`` and describe it in the inspector (None clears; the
        state's :meth:`~flyviz.viewer.state.ViewerState.select`)."""
        self.state.select(index)

    def pick_neuron_dialog(self) -> QInputDialog | None:
        """View → Pick neuron (Ctrl+K): ask for a neuron's index and select it, as a click
        in the brain does (the keyboard's way to a neuron). ``None`` when no model is shown."""
        count = self.state.neurons
        if count <= 0:
            self.show_message("no model is shown: open one to pick its neurons")
            return None
        dialog = QInputDialog(self)
        dialog.setWindowTitle("Pick neuron")
        dialog.setInputMode(QInputDialog.InputMode.IntInput)
        dialog.setLabelText(f"Neuron index (0 to {count - 1:,}):")
        dialog.setIntRange(0, count - 1)
        dialog.setIntValue(self.state.selected or 0)
        dialog.intValueSelected.connect(self.select_neuron)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.open()
        return dialog

    def _on_selected(self, index: int | None) -> None:
        self.brain.set_selected(index)
        self.inspector.show_neuron(index, self.session.recording, self.session.index)
        if index is not None:
            self.docks["inspector"].show()
            self.docks["inspector"].raise_()
            self.statusBar().showMessage(f"neuron #{index} selected", 5000)

    def _filter_from_dock(self) -> None:
        try:
            self.state.set_filter(str(self.controls.superclass.currentData() or ""),
                                  self.controls.cell_type.text())
        except FlyvizError as exc:
            self.show_message(str(exc), error=True)

    def _apply_filter(self, superclass: str = "", cell_type: str = "") -> None:
        """Show the state's filter in the Settings dock and light its neurons."""
        self.controls.show_filter(superclass, cell_type)
        anat = self.anatomy
        if anat is None:
            return
        mask = filter_mask(anat, superclass, cell_type)
        self.highlights.set("filter", mask)
        if mask is None:
            self.controls.filter_note.setText("")
        else:
            shown = int(np.count_nonzero(mask & anat.valid))
            self.controls.filter_note.setText(f"{shown:,} drawn neurons match")

    # ================================================================= files
    def save_recording(self, path: str | Path) -> Path:
        """Write the current recording to ``path`` (``.flyrec`` added if missing)."""
        return self.files.save_recording(path)

    def open_recording(self, path: str | Path) -> Recording:
        """Load a recording of the current model and show its last frame."""
        return self.files.open_recording(path)

    def save_recording_dialog(self) -> None:
        """Ask where to save the recording."""
        self.files.save_recording_dialog()

    def open_recording_dialog(self) -> None:
        """Ask for a recording and open it."""
        self.files.open_recording_dialog()

    def export_movie(self) -> None:
        """File → Export movie: the export dialog on the current recording."""
        self.files.export_movie()

    def save_screenshot(self, path: str | Path, target: str = "brain", scale: float = 1.0) -> Path:
        """Save the brain view (re-rendered at ``scale``) or the whole window as PNG."""
        return save_screenshot(self, path, target, scale)

    # ================================================================= help
    def show_shortcuts(self):
        """Help → Keyboard shortcuts: every shortcut in one table."""
        return shortcuts_dialog(self, self.actions_registry.shortcut_rows())

    def about_text(self) -> str:
        """The About box's text: version, the model's provenance and licences."""
        model = self.state.model
        if self.bundle is None and model is not None:
            return about_text(None, self.state.kind.describe(model))
        return about_text(self.bundle)

    # ================================================================= window
    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802 - Qt API
        super().showEvent(event)
        if not self._placed:
            # The frame the window manager adds is known only now: keep all of it on screen.
            self._placed = True
            QTimer.singleShot(0, self._first_shown)

    def _first_shown(self) -> None:
        window_layout.keep_on_screen(self)
        self.layouts.first_shown()

    def shutdown(self) -> None:
        """Stop the timers, the run and the threads; safe to call twice."""
        if self.closing:
            return
        self.closing = True
        _OPEN_WINDOWS.discard(self)
        self.setProperty("closing", True)   # for the exception dialog (no reach-in)
        self.display.stop()
        self.status_timer.stop()
        self._wheel_guard.release()
        self.runs.shutdown()
        self.verifier.shutdown()
        self.models.shutdown()
        self.background.shutdown()

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 - Qt API
        if not self.closing:
            self.settings.setValue("window/geometry", self.saveGeometry())
            self.dock_kinds.apply(LANGUAGE)     # save the layout with every dock it has
            self.layouts.save()
            save_settings(self.state, self.settings)
            self.settings.sync()
        self.shutdown()
        super().closeEvent(event)


if TYPE_CHECKING:  # pragma: no cover
    from flyviz.app.base.host import WindowHost

    def _a_main_window_is_a_host(window: MainWindow) -> WindowHost:
        """mypy checks here that the window has every member the feature protocol names."""
        return window
