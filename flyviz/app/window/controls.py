"""Input widgets: the prompt bar, generation and display settings, the timeline.

The Settings dock shows the viewer state's :class:`~flyviz.viewer.settings.RunSettings`
and :class:`~flyviz.viewer.settings.DisplaySettings` (:meth:`SettingsPanel.bind`);
:func:`save_settings` and :func:`restore_settings` keep them between sessions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QEvent, QObject, QSettings, Qt, Signal
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import (QCheckBox, QComboBox, QDoubleSpinBox, QFormLayout, QGroupBox,
                               QHBoxLayout, QLabel, QLineEdit, QPushButton, QSlider, QSpinBox,
                               QVBoxLayout, QWidget)

from flyviz.kinds import LANGUAGE, TimeAxis
from flyviz.model.checkpoint import SUPERCLASSES
from flyviz.model.errors import FlyvizError
from flyviz.record.run import MAX_NEW_TOKENS_LIMIT
from flyviz.viewer.settings import DisplaySettings, RunSettings
from flyviz.viewer.state import ViewerState

#: Prompt suggestions: the four golden prompts of the Fly LLM's parity test.
SUGGESTED_PROMPTS = (
    "Once upon a time, there was a",
    "One day, a little girl named Lily found a needle",
    "Tom and his dog",
    "The little bird was afraid of the rain. Its mother",
)


class _EnterKeyFilter(QObject):
    """Calls ``submit()`` on Enter or Return and swallows the key."""

    def __init__(self, submit, parent: QObject) -> None:
        super().__init__(parent)
        self._submit = submit

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt API
        if isinstance(event, QKeyEvent) and event.type() == QEvent.Type.KeyPress and \
                event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            self._submit()
            return True
        return False


class PromptBar(QWidget):
    """An editable prompt box with suggestions and a Run button.

    What the user types is what runs: the box never completes typed text to a
    suggestion (an editable combo box does by default, and Enter then ran the
    suggestion); a suggestion is used only when picked from the list.

    Signals
    -------
    submitted(text)
        Enter was pressed, Run clicked or a suggestion picked.
    """

    submitted = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.box = QComboBox()
        self.box.setObjectName("promptBox")
        self.box.setEditable(True)
        self.box.setInsertPolicy(QComboBox.InsertPolicy.NoInsert)
        self.box.setCompleter(None)  # type: ignore[arg-type]  # None removes it (Qt docs)
        self.box.addItems(SUGGESTED_PROMPTS)
        self.box.setCurrentIndex(-1)
        self.box.setMinimumWidth(380)
        self.line_edit.setPlaceholderText("Type a prompt and press Enter, or pick a suggestion")
        self.line_edit.setClearButtonEnabled(True)
        self.box.setToolTip("The text the model continues (suggestions in the list)")
        self.run_button = QPushButton("Run")
        self.run_button.setObjectName("runButton")
        self.run_button.setToolTip("Run the prompt (Enter)")
        layout.addWidget(self.box, 1)
        layout.addWidget(self.run_button)
        # Enter is handled here and never reaches the combo box, which would otherwise
        # replace the typed text by a matching suggestion and report it as picked.
        self._enter = _EnterKeyFilter(self._submit, self)
        self.box.installEventFilter(self._enter)
        self.line_edit.installEventFilter(self._enter)
        self.box.activated.connect(lambda _i: self._submit())
        self.run_button.clicked.connect(self._submit)

    @property
    def line_edit(self) -> QLineEdit:
        """The text field (tests type into it)."""
        edit = self.box.lineEdit()
        assert edit is not None  # the box is editable
        return edit

    def text(self) -> str:
        """The prompt as typed."""
        return self.box.currentText()

    def set_text(self, text: str) -> None:
        """Put ``text`` in the prompt box."""
        # Select a suggestion with the same text: otherwise the combo box reports it as
        # picked (and the prompt runs) as soon as the field loses focus, e.g. to a dialog.
        index = self.box.findText(text, Qt.MatchFlag.MatchExactly | Qt.MatchFlag.MatchCaseSensitive)
        if index >= 0:
            self.box.setCurrentIndex(index)
        self.box.setEditText(text)

    def focus_text(self) -> None:
        """Put the keyboard focus in the prompt box with its text selected."""
        self.line_edit.setFocus()
        self.line_edit.selectAll()

    def _submit(self) -> None:
        self.submitted.emit(self.text())


class SettingsPanel(QWidget):
    """Generation, speed and display settings, persisted with QSettings.

    Signals
    -------
    speed_changed(tokens_per_second)
    display_changed()
        Colour mode, scale, glow, point size or smoothing changed.
    filter_changed()
        The superclass or cell-type filter changed.
    """

    speed_changed = Signal(float)
    display_changed = Signal()
    filter_changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(6, 6, 6, 6)

        gen = QGroupBox("Generation")
        #: The language model's generation settings (hidden for a kind that reads no text).
        self.generation = gen
        form = QFormLayout(gen)
        self.temperature = QDoubleSpinBox()
        self.temperature.setRange(0.0, 2.0)
        self.temperature.setSingleStep(0.05)
        self.temperature.setValue(0.7)
        self.temperature.setToolTip("0 = greedy (always the most likely token)")
        self.top_p = QDoubleSpinBox()
        self.top_p.setRange(0.05, 1.0)
        self.top_p.setSingleStep(0.05)
        self.top_p.setValue(0.9)
        self.max_new_tokens = QSpinBox()
        self.max_new_tokens.setRange(1, MAX_NEW_TOKENS_LIMIT)
        self.max_new_tokens.setValue(80)
        self.seed = QSpinBox()
        self.seed.setRange(-1, 2**31 - 1)
        self.seed.setValue(-1)
        self.seed.setSpecialValueText("random")
        self.seed.setToolTip("Same seed, same text; 'random' draws a new one each run")
        self.speed_cap = QDoubleSpinBox()
        self.speed_cap.setRange(0.0, 1000.0)
        self.speed_cap.setDecimals(1)
        self.speed_cap.setValue(20.0)
        self.speed_cap.setSuffix(" tok/s")
        self.speed_cap.setSpecialValueText("no limit")
        self.speed_cap.setToolTip("Most tokens per second; 0 runs as fast as the engine can")
        form.addRow("Temperature", self.temperature)
        form.addRow("Top-p", self.top_p)
        form.addRow("Max new tokens", self.max_new_tokens)
        form.addRow("Seed", self.seed)
        form.addRow("Speed cap", self.speed_cap)
        self.states = QComboBox()
        self.states.setObjectName("statesPrecision")
        self.states.addItem("float16 (half the size)", "float16")
        self.states.addItem("float32 (exact)", "float32")
        self.states.setToolTip("How new recordings store the brain states: float16 keeps about "
                               "1e-3 relative precision in half the bytes; float32 is the "
                               "engine's states bit for bit, for analysis")
        form.addRow("Stored states", self.states)
        outer.addWidget(gen)

        disp = QGroupBox("Display")
        form = QFormLayout(disp)
        self.mode = QComboBox()
        self.mode.addItem("signed x", "signed")
        self.mode.addItem("|x|", "abs")
        self.mode.setToolTip("Diverging colours for signed activation, or magnitude only (M)")
        scale_row = QHBoxLayout()
        self.auto_scale = QCheckBox("auto")
        self.auto_scale.setChecked(True)
        self.auto_scale.setToolTip("Scale colours to each frame's 99th percentile of |x|")
        self.fixed_limit = QDoubleSpinBox()
        self.fixed_limit.setRange(0.01, 10.0)
        self.fixed_limit.setSingleStep(0.05)
        self.fixed_limit.setValue(1.0)
        self.fixed_limit.setEnabled(False)
        scale_row.addWidget(self.auto_scale)
        scale_row.addWidget(self.fixed_limit, 1)
        self.glow = QSlider(Qt.Orientation.Horizontal)
        self.glow.setRange(0, 200)
        self.glow.setValue(60)
        self.point_size = QDoubleSpinBox()
        self.point_size.setRange(0.5, 20.0)
        self.point_size.setValue(2.0)
        self.point_size.setSuffix(" px")
        self.smoothing = QSpinBox()
        self.smoothing.setRange(0, 1000)
        self.smoothing.setValue(120)
        self.smoothing.setSuffix(" ms")
        self.smoothing.setSpecialValueText("off")
        self.smoothing.setToolTip("Time constant of the easing between frames")
        form.addRow("Colours", self.mode)
        self._display_form = form
        form.addRow("Scale", scale_row)
        form.addRow("Glow", self.glow)
        form.addRow("Point size", self.point_size)
        form.addRow("Smoothing", self.smoothing)
        outer.addWidget(disp)

        filt = QGroupBox("Highlight")
        form = QFormLayout(filt)
        self.superclass = QComboBox()
        self.superclass.addItem("all neurons", "")
        self.cell_type = QLineEdit()
        self.cell_type.setPlaceholderText("cell type, e.g. T4")
        self.cell_type.setClearButtonEnabled(True)
        self.filter_note = QLabel("")
        self.filter_note.setObjectName("hint")
        form.addRow("Superclass", self.superclass)
        form.addRow("Cell type", self.cell_type)
        form.addRow("", self.filter_note)
        outer.addWidget(filt)
        outer.addStretch(1)

        self.speed_cap.valueChanged.connect(lambda v: self.speed_changed.emit(float(v)))
        self.auto_scale.toggled.connect(lambda on: self.fixed_limit.setEnabled(not on))
        for signal in (self.mode.currentIndexChanged, self.auto_scale.toggled,
                       self.fixed_limit.valueChanged, self.glow.valueChanged,
                       self.point_size.valueChanged, self.smoothing.valueChanged):
            signal.connect(lambda *_: self.display_changed.emit())
        self.superclass.currentIndexChanged.connect(lambda *_: self.filter_changed.emit())
        self.cell_type.textChanged.connect(lambda *_: self.filter_changed.emit())

    def show_colour_modes(self, modes: tuple[str, ...]) -> bool:
        """Offer the *Colours* row (signed x or |x|) only for a kind whose state has those
        modes (:attr:`ModelKind.state_quantities <flyviz.kinds.ModelKind.state_quantities>`):
        a spiking brain's rate has no sign, and the row did nothing there. True when shown."""
        shown = "signed" in modes and "abs" in modes
        self.mode.setVisible(shown)
        label = self._display_form.labelForField(self.mode)
        if label is not None:
            label.setVisible(shown)
        return shown

    # ------------------------------------------------------------ the state
    def bind(self, display: DisplaySettings, run: RunSettings) -> None:
        """Show ``display`` and ``run`` in the widgets and write the user's changes to them.

        The settings live in the viewer state, not here: code and tests set
        ``state.display.point_size = 4`` and the spin box follows; a spin box the
        user turns sets the state field (a value the state refuses is put back).
        """
        # (widget's value signal, read the widget, write it to the state, show the state)
        self._bindings: dict[str, tuple[Any, Callable[[], None], Callable[[], None]]] = {}

        def bind(group: Any, field: str, changed: Any, read: Callable[[], Any],
                 show: Callable[[Any], None]) -> None:
            def write(*_args: Any) -> None:
                try:
                    setattr(group, field, read())
                except FlyvizError:
                    show_state()

            def show_state(*_args: Any) -> None:
                if read() != getattr(group, field):
                    was = self.blockSignals(True)
                    try:
                        show(getattr(group, field))
                    finally:
                        self.blockSignals(was)

            changed.connect(write)
            getattr(group.events, field).connect(show_state)
            self._bindings[field] = (changed, write, show_state)
            show_state()

        def combo(box: QComboBox) -> tuple[Callable[[], Any], Callable[[Any], None]]:
            return (lambda: box.currentData(),
                    lambda value: box.setCurrentIndex(max(0, box.findData(value))))

        bind(run, "temperature", self.temperature.valueChanged, self.temperature.value,
             self.temperature.setValue)
        bind(run, "top_p", self.top_p.valueChanged, self.top_p.value, self.top_p.setValue)
        bind(run, "max_new_tokens", self.max_new_tokens.valueChanged, self.max_new_tokens.value,
             self.max_new_tokens.setValue)
        bind(run, "seed", self.seed.valueChanged, self.seed.value, self.seed.setValue)
        bind(run, "speed_cap", self.speed_cap.valueChanged, self.speed_cap.value,
             self.speed_cap.setValue)
        bind(run, "states_dtype", self.states.currentIndexChanged, *combo(self.states))
        bind(display, "mode", self.mode.currentIndexChanged, *combo(self.mode))
        bind(display, "auto_scale", self.auto_scale.toggled, self.auto_scale.isChecked,
             self.auto_scale.setChecked)
        bind(display, "limit", self.fixed_limit.valueChanged, self.fixed_limit.value,
             self.fixed_limit.setValue)
        bind(display, "point_size", self.point_size.valueChanged, self.point_size.value,
             self.point_size.setValue)
        bind(display, "glow", self.glow.valueChanged, lambda: self.glow.value() / 100.0,
             lambda glow: self.glow.setValue(int(round(glow * 100))))
        bind(display, "smoothing_s", self.smoothing.valueChanged,
             lambda: self.smoothing.value() / 1000.0,
             lambda s: self.smoothing.setValue(int(round(s * 1000))))
        self.fixed_limit.setEnabled(not display.auto_scale)

    @property
    def states_dtype(self) -> str:
        """How new recordings store their states: ``"float16"`` or ``"float32"``."""
        return str(self.states.currentData())

    def show_filter(self, superclass: str, cell_type: str) -> None:
        """Show the state's highlight filter (without announcing it as the user's change)."""
        for widget in (self.superclass, self.cell_type):
            widget.blockSignals(True)
        try:
            if self.superclass.currentData() != superclass:
                self.superclass.setCurrentIndex(max(0, self.superclass.findData(superclass)))
            if self.cell_type.text().strip() != cell_type:
                self.cell_type.setText(cell_type)
        finally:
            for widget in (self.superclass, self.cell_type):
                widget.blockSignals(False)

    def set_superclasses(self, names: list[str]) -> None:
        """Offer the superclasses present in the model (in the dataset's order)."""
        self.superclass.blockSignals(True)
        self.superclass.clear()
        self.superclass.addItem("all neurons", "")
        ordered = [s for s in SUPERCLASSES if s in names] + sorted(set(names) - set(SUPERCLASSES))
        for name in ordered:
            self.superclass.addItem(name.replace("_", " "), name)
        self.superclass.setEnabled(bool(names))
        self.superclass.blockSignals(False)


#: The viewer state's settings kept between sessions: (QSettings key, group, field, how
#: the value was stored). Glow and smoothing keep the units the Settings dock showed.
PERSISTED: tuple[tuple[str, str, str, float], ...] = (
    ("temperature", "run", "temperature", 1.0), ("top_p", "run", "top_p", 1.0),
    ("max_new_tokens", "run", "max_new_tokens", 1.0), ("seed", "run", "seed", 1.0),
    ("speed_cap", "run", "speed_cap", 1.0), ("fixed_limit", "display", "limit", 1.0),
    ("point_size", "display", "point_size", 1.0), ("smoothing", "display", "smoothing_s", 1000.0),
    ("glow", "display", "glow", 100.0))


def save_settings(state: ViewerState, settings: QSettings) -> None:
    """Store the state's display and run settings under ``settings/``."""
    for key, group, field, unit in PERSISTED:
        value = getattr(getattr(state, group), field) * unit
        settings.setValue(f"settings/{key}", int(round(value)) if unit != 1.0 or
                          isinstance(value, int) else value)
    settings.setValue("settings/mode", state.display.mode)
    settings.setValue("settings/states", state.run.states_dtype)
    settings.setValue("settings/auto_scale", state.display.auto_scale)


def restore_settings(state: ViewerState, settings: QSettings) -> None:
    """Read the values :func:`save_settings` stored into the state (missing or bad ones are
    ignored)."""
    for key, group, field, unit in PERSISTED:
        value = settings.value(f"settings/{key}")
        if value is None:
            continue
        target = getattr(state, group)
        try:
            number = float(value) / unit
            if isinstance(getattr(target, field), int):
                number = int(round(number))
            setattr(target, field, number)
        except (TypeError, ValueError, FlyvizError):
            continue
    for group, field, key in (("display", "mode", "settings/mode"),
                              ("run", "states_dtype", "settings/states")):
        value = settings.value(key)
        if value is not None:
            try:
                setattr(getattr(state, group), field, str(value))
            except FlyvizError:
                pass
    auto = settings.value("settings/auto_scale")
    if auto is not None:
        state.display.auto_scale = str(auto).lower() in ("true", "1")


class Timeline(QWidget):
    """A slider over the recorded tokens, the token counter and a Live button.

    Signals
    -------
    scrubbed(index)
        The user moved the slider.
    live_requested()
        The Live button was pressed.
    """

    scrubbed = Signal(int)
    live_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(8, 2, 8, 2)
        self.slider = QSlider(Qt.Orientation.Horizontal)
        self.slider.setRange(0, 0)
        self.slider.setEnabled(False)
        self.slider.setToolTip("Scrub through the recorded tokens (←/→, Home/End)")
        self.counter = QLabel("no tokens yet")
        self.counter.setMinimumWidth(210)
        self.counter.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        self.live = QPushButton("● Live")
        self.live.setCheckable(True)
        self.live.setChecked(True)
        self.live.setToolTip("Follow the newest token (End)")
        layout.addWidget(self.slider, 1)
        layout.addWidget(self.counter)
        layout.addWidget(self.live)
        self.slider.valueChanged.connect(self._on_slider)
        self.live.clicked.connect(lambda: self.live_requested.emit())
        self._updating = False
        self.axis = LANGUAGE.time_axis
        self._shown = (-1, 0, "")      # what the counter says: index, length, phase

    def set_time_axis(self, axis: TimeAxis) -> None:
        """Say the frames as the shown model's kind calls them (:class:`~flyviz.kinds.TimeAxis`)."""
        if axis == self.axis:
            return
        self.axis = axis
        self.slider.setToolTip(f"Scrub through the recorded {axis.names} (←/→, Home/End)")
        self.live.setToolTip(f"Follow the newest {axis.name} (End)")
        self._show_counter(*self._shown)

    def _show_counter(self, index: int, length: int, phase: str) -> None:
        self._shown = (index, length, phase)
        self.counter.setText(self.axis.counter(index, length)
                             + (f" · {phase}" if phase and length else ""))

    def _on_slider(self, value: int) -> None:
        if not self._updating:
            self.scrubbed.emit(int(value))

    def update_position(self, index: int, length: int, live: bool, phase: str = "") -> None:
        """Reflect the session without emitting :attr:`scrubbed`."""
        self._updating = True
        try:
            self.slider.setEnabled(length > 0)
            self.slider.setRange(0, max(length - 1, 0))
            self.slider.setValue(max(index, 0))
        finally:
            self._updating = False
        self.live.setChecked(live)
        self._show_counter(index, length, phase)
