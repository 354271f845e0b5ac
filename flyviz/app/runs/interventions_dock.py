"""The Interventions dock: what to silence, clamp, stimulate, cut or scale, and *Compare*.

:class:`InterventionsPanel` is the dock's widget. An intervention is added

* from the query field (:mod:`flyviz.model.selection`), with a live count of
  the neurons the query selects, or a one-line error for a bad query;
* from the Settings dock's current superclass / cell-type highlight;
* from the neurons picked in the brain view (click, Shift+click to add,
  Ctrl+drag to draw an outline around many).

Each has a kind, a value where the kind takes one, and an optional token
window. The list shows every intervention with an on/off box; runs use the
ones switched on. *Compare with untouched* runs the intervened and the
untouched model together (:class:`~flyviz.app.runs.run_control.RunController`).

:class:`InterventionsFeature` wires the panel into the window through the
viewer state: the picked neurons (``state.picked``, which the brain view's click
and outline tool write), the neurons the interventions touch
(``state.intervened``, ringed in the brain view), the Δx colour layer of
comparisons, and recordings reopened with their interventions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from PySide6.QtCore import QObject, Qt, QTimer, Signal
from PySide6.QtWidgets import (QCheckBox, QComboBox, QDoubleSpinBox, QFormLayout, QHBoxLayout,
                               QLabel, QLineEdit, QListWidget, QListWidgetItem, QPushButton,
                               QSpinBox, QVBoxLayout, QWidget)

from flyviz.app.runs.run_control import MODE_TITLES
from flyviz.app.brain.colouring import STATE
from flyviz.model.checkpoint import Checkpoint
from flyviz.model.errors import FlyvizError
from flyviz.model.interventions import (KINDS, Intervention, ResolvedInterventions, from_json,
                                        parse_intervention, resolve, synapses_between)
from flyviz.model.selection import neuron_index
from flyviz.viewer.layers import DELTA

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.app.base.host import WindowHost

#: Kinds that take a number, with its label, range and default.
VALUES = {"clamp": ("value", -0.99, 0.99, 0.5), "stimulate": ("amount", -10.0, 10.0, 1.0),
          "scale": ("factor", -10.0, 10.0, 0.5)}

#: Kinds that act on synapses from one selection onto another.
PATHWAY_KINDS = ("cut", "scale")

#: Delay before the live count re-evaluates a query being typed (ms).
COUNT_DELAY_MS = 150



def quoted(value: str) -> str:
    """``value`` as a query value: bare when it can be, else in double quotes."""
    plain = value and not any(c.isspace() or c in "&|()!'\"," for c in value)
    return value if plain else '"' + value.replace('"', "") + '"'




class InterventionsPanel(QWidget):
    """The dock's widget: the form that adds interventions, their list, and *Compare*.

    Signals
    -------
    changed()
        The list changed (added, removed, switched on or off).
    compare_requested()
        The user asked to compare the prompt with the untouched run.
    """

    changed = Signal()
    compare_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._checkpoint: Checkpoint | None = None
        self._items: list[Intervention] = []
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        form = QFormLayout()
        self.kind = QComboBox()
        for kind in KINDS:
            self.kind.addItem(kind, kind)
        self.query = QLineEdit()
        self.query.setClearButtonEnabled(True)
        self.count = QLabel("")
        self.count.setObjectName("hint")
        self.count.setWordWrap(True)
        self.value = QDoubleSpinBox()
        self.value.setDecimals(3)
        self.value.setSingleStep(0.1)
        self.start = QSpinBox()
        self.stop = QSpinBox()
        for box, word in ((self.start, "start"), (self.stop, "end")):
            box.setRange(-1, 100_000)
            box.setValue(-1)
            box.setSpecialValueText(word)
        self.start.setToolTip("First token position it acts on (0 is the start of text)")
        self.stop.setToolTip("Token position where it stops acting (not included)")
        window = QHBoxLayout()
        window.addWidget(self.start)
        window.addWidget(QLabel("to"))
        window.addWidget(self.stop)
        form.addRow("Kind", self.kind)
        form.addRow("Neurons", self.query)
        form.addRow("", self.count)
        self.value_label = QLabel("value")
        form.addRow(self.value_label, self.value)
        form.addRow("Tokens", window)
        layout.addLayout(form)
        buttons = QHBoxLayout()
        self.add_button = QPushButton("Add")
        self.add_button.setToolTip("Add the intervention on the neurons of the query")
        self.highlight_button = QPushButton("Highlight")
        self.highlight_button.setToolTip("Fill the query from the Settings dock's superclass / "
                                         "cell type")
        self.pick_button = QPushButton("Pick")
        self.pick_button.setToolTip("Fill the query with the neurons picked in the view "
                                    "(Shift+click adds one, Ctrl+drag draws around many)")
        for button in (self.add_button, self.highlight_button, self.pick_button):
            buttons.addWidget(button)
        layout.addLayout(buttons)
        self.compare_box = QCheckBox("Compare with untouched")
        self.compare_box.setToolTip("Runs go with the untouched model beside them; the brain "
                                    "shows Δx (intervened − untouched)")
        self.mode = QComboBox()
        for mode, title in MODE_TITLES.items():
            self.mode.addItem(title.split(",")[0].replace(" on the untouched text", ""), mode)
            self.mode.setItemData(self.mode.count() - 1, title, Qt.ItemDataRole.ToolTipRole)
        self.delta_box = QCheckBox("Δx")
        self.delta_box.setToolTip("Colour the brain by intervened − untouched while a "
                                  "comparison is shown")
        self.delta_box.setChecked(True)
        self.compare_button = QPushButton("Compare")
        self.compare_button.setToolTip("Run the prompt intervened and untouched side by side")
        compare_row = QHBoxLayout()
        compare_row.addWidget(self.compare_box)
        compare_row.addWidget(self.delta_box)
        layout.addLayout(compare_row)
        mode_row = QHBoxLayout()
        mode_row.addWidget(self.mode, 1)
        mode_row.addWidget(self.compare_button)
        layout.addLayout(mode_row)
        self.list = QListWidget()
        self.list.setToolTip("Runs use the interventions switched on")
        self.list.setMinimumHeight(70)
        layout.addWidget(self.list, 1)
        row = QHBoxLayout()
        self.remove_button = QPushButton("Remove")
        self.clear_button = QPushButton("Clear")
        row.addWidget(self.remove_button)
        row.addWidget(self.clear_button)
        row.addStretch(1)
        layout.addLayout(row)
        self._count_timer = QTimer(self)
        self._count_timer.setSingleShot(True)
        self._count_timer.setInterval(COUNT_DELAY_MS)
        self._count_timer.timeout.connect(self.update_count)
        self.kind.currentIndexChanged.connect(self._on_kind)
        self.query.textChanged.connect(lambda _t: self._count_timer.start())
        self.query.returnPressed.connect(self.add_from_form)
        self.add_button.clicked.connect(self.add_from_form)
        self.list.itemChanged.connect(lambda _item: self.changed.emit())
        self.remove_button.clicked.connect(self._remove_current)
        self.clear_button.clicked.connect(self.clear)
        self.compare_button.clicked.connect(self.compare_requested)
        self._on_kind()

    # ------------------------------------------------------------ model
    def set_checkpoint(self, checkpoint: Checkpoint | None) -> None:
        """Select neurons of ``checkpoint`` from now on; the list is emptied."""
        self._checkpoint = checkpoint
        self.clear()
        self.update_count()

    # ------------------------------------------------------------ the form
    def _on_kind(self) -> None:
        kind = self.kind.currentData()
        spec = VALUES.get(kind)
        self.value.setEnabled(spec is not None)
        self.value_label.setText(spec[0] if spec else "value")
        if spec is not None:
            self.value.setRange(spec[1], spec[2])
            self.value.setValue(spec[3])
        self.query.setPlaceholderText("superclass:A -> type:B*" if kind in PATHWAY_KINDS
                                      else "e.g. sign:inhibitory, superclass:central & side:left")
        self.update_count()

    def form_text(self) -> str:
        """The form as the command line writes it: ``QUERY[=VALUE][@FROM:TO]``."""
        kind = self.kind.currentData()
        text = self.query.text().strip()
        if kind in VALUES:
            text += f"={self.value.value():g}"
        start, stop = self.start.value(), self.stop.value()
        if start >= 0 or stop >= 0:
            text += f"@{start if start >= 0 else ''}:{stop if stop >= 0 else ''}"
        return text

    def update_count(self) -> None:
        """Say how many neurons (or synapses) the query selects, or what is wrong with it."""
        self._count_timer.stop()
        text = self.query.text().strip()
        if self._checkpoint is None or not text:
            self.count.setText("" if self._checkpoint is not None else "no model yet")
            self.count.setStyleSheet("")
            return
        try:
            self.count.setText(self.describe_query(text))
            self.count.setStyleSheet("")
        except FlyvizError as exc:
            self.count.setText(str(exc).splitlines()[0])
            self.count.setStyleSheet("color: #ff7a7a")

    def describe_query(self, text: str) -> str:
        """What ``text`` selects, in words (raises :class:`FlyvizError` when it is bad)."""
        checkpoint = self._checkpoint
        if checkpoint is None:
            raise FlyvizError("no model yet")
        index = neuron_index(checkpoint)
        if self.kind.currentData() in PATHWAY_KINDS:
            if "->" not in text:
                raise FlyvizError("a cut or scale needs 'PRE -> POST'")
            pre_text, post_text = (t.strip() for t in text.split("->", 1))
            pre, post = index.select(pre_text), index.select(post_text)
            edges = synapses_between(checkpoint, pre, post)
            return f"{pre.size:,} → {post.size:,} neurons: {edges.size:,} synapses"
        return f"{index.count(text):,} neurons selected"

    def add_from_form(self) -> Intervention | None:
        """Add the form's intervention; ``None`` (and the reason under the query) if it is bad."""
        try:
            if self._checkpoint is None:
                raise FlyvizError("no model is loaded yet")
            self.describe_query(self.query.text().strip())
            item = parse_intervention(self.kind.currentData(), self.form_text())
            resolve(self._checkpoint, [item])
        except FlyvizError as exc:
            self.count.setText(str(exc).splitlines()[0])
            self.count.setStyleSheet("color: #ff7a7a")
            return None
        self.add(item)
        return item

    def fill_query(self, query: str) -> None:
        """Put ``query`` in the query field (for a cut or scale: as the presynaptic side)."""
        if self.kind.currentData() in PATHWAY_KINDS:
            current = self.query.text()
            post = current.split("->", 1)[1].strip() if "->" in current else ""
            query = f"{query} -> {post or 'all'}"
        self.query.setText(query)
        self.update_count()

    # ------------------------------------------------------------ the list
    def add(self, item: Intervention, enabled: bool = True) -> None:
        """Append ``item`` to the list, switched on or off."""
        self._items.append(item)
        row = QListWidgetItem(str(item))
        row.setFlags(row.flags() | Qt.ItemFlag.ItemIsUserCheckable)
        row.setCheckState(Qt.CheckState.Checked if enabled else Qt.CheckState.Unchecked)
        row.setToolTip(str(item))
        self.list.blockSignals(True)
        self.list.addItem(row)
        self.list.blockSignals(False)
        self.changed.emit()

    def set_interventions(self, items: list[Intervention]) -> None:
        """Replace the list with ``items``, all switched on."""
        self.list.blockSignals(True)
        self.list.clear()
        self._items = []
        self.list.blockSignals(False)
        for item in items:
            self.add(item)
        self.changed.emit()

    def set_enabled(self, row: int, enabled: bool) -> None:
        """Switch the intervention in ``row`` on or off."""
        self.list.item(row).setCheckState(Qt.CheckState.Checked if enabled
                                          else Qt.CheckState.Unchecked)

    def clear(self) -> None:
        """Remove every intervention."""
        had = bool(self._items)
        self.list.clear()
        self._items = []
        if had:
            self.changed.emit()

    def _remove_current(self) -> None:
        row = self.list.currentRow()
        if 0 <= row < len(self._items):
            self.list.takeItem(row)
            del self._items[row]
            self.changed.emit()

    def enabled(self) -> list[Intervention]:
        """The interventions switched on, in list order."""
        return [item for row, item in enumerate(self._items)
                if self.list.item(row).checkState() == Qt.CheckState.Checked]

    def resolved(self) -> ResolvedInterventions | None:
        """The switched-on interventions resolved for the model (``None``: none)."""
        items = self.enabled()
        if not items or self._checkpoint is None:
            return None
        return resolve(self._checkpoint, items)


def touched_neurons(resolved: ResolvedInterventions | None) -> np.ndarray:
    """Every neuron an intervention acts on: the selected ones, and both ends of a cut."""
    if not resolved:
        return np.zeros(0, dtype=np.int64)
    parts = [op.indices for op in resolved.post_state] + [op.indices for op in resolved.pre_add]
    parts += [np.concatenate([edit.pre, edit.post]) for edit in resolved.graph_edits]
    return np.unique(np.concatenate(parts).astype(np.int64)) if parts else \
        np.zeros(0, dtype=np.int64)


class InterventionsFeature(QObject):
    """The Interventions dock in the window, and everything it needs there.

    Parameters
    ----------
    host
        The window; its ``runs`` must be a
        :class:`~flyviz.app.runs.run_control.RunController`.

    The dock is a view of the viewer state: the interventions switched on and
    the comparison settings are written to ``state.interventions`` and
    ``state.set_comparing`` (the one copy runs start from), and what a script
    sets there shows here; the picked neurons go to ``state.picked``.
    """

    def __init__(self, host: "WindowHost") -> None:
        super().__init__(host.widget())
        from flyviz.app.brain.neuron_pick import NeuronPick

        self.host = host
        self.panel = InterventionsPanel()
        self.dock = host.docks.add("interventions", "Interventions", self.panel,
                                   Qt.DockWidgetArea.LeftDockWidgetArea, scroll=True)
        host.docks.tabify("controls", self.dock)
        #: The picked neurons (the state's ``picked``: the brain view's clicks and lasso
        #: write them there).
        self.pick = NeuronPick(self)
        # Δx is one of View → Colour by's entries: the state offers it while a comparison
        # is shown; the dock only chooses it (or not) as its box says.
        self.pick.changed.connect(self._on_pick_changed)
        self.panel.changed.connect(self.apply)
        self.panel.compare_requested.connect(lambda: self.compare_with(None))
        self.panel.compare_box.toggled.connect(self._on_compare_settings)
        self.panel.mode.currentIndexChanged.connect(self._on_compare_settings)
        self.panel.delta_box.toggled.connect(lambda _on: self.show_layer())
        self.panel.highlight_button.clicked.connect(self.fill_from_highlight)
        self.panel.pick_button.clicked.connect(self.fill_from_pick)
        host.models.ready.connect(self._on_model)
        host.state.events.recording.connect(self._on_recording_replaced)
        registry = host.actions_registry
        registry.add("compare", "&Compare with untouched", lambda: self.compare_with(None),
                     "Ctrl+Shift+C", "Run the prompt intervened and untouched side by side")
        registry.menu("Run").addAction(registry["compare"])
        # View → Colour by → Δx compares the runs this feature starts: its kinds' entry.
        host.colour_by.claim((DELTA,))
        # The state's interventions, comparison and picks show here when set elsewhere.
        self._syncing = False
        state = host.state
        state.events.interventions.connect(self._on_state_interventions)
        state.events.comparing.connect(self._on_state_comparing)
        state.events.picked.connect(self._on_state_picked)

    # ------------------------------------------------------------ public
    def compare_with(self, interventions: Any = None, mode: str | None = None,
                     prompt: str | None = None) -> bool:
        """Compare the prompt with the untouched run, with ``interventions``.

        ``interventions``: intervention objects (``Silence("superclass:X")``...)
        put in the list instead of what is there, or ``None`` for the list's
        switched-on ones. ``mode``: ``"forced"`` (default) or ``"free"``.
        Returns False (and says why in the status bar) when it cannot start.
        """
        panel = self.panel
        if interventions is not None:
            panel.set_interventions(list(interventions))
        if mode is not None:
            panel.mode.setCurrentIndex(max(0, panel.mode.findData(mode)))
        panel.compare_box.setChecked(True)
        if not self.apply():
            return False
        if prompt is not None:
            self.host.state.docks.prompt = prompt
        return self.host.runner.start() is not None

    def apply(self) -> bool:
        """Hand the switched-on interventions to the runs; False (and a message) if bad."""
        host = self.host
        try:
            resolved = self.panel.resolved()
        except FlyvizError as exc:
            host.show_message(str(exc), error=True)
            return False
        if not self._syncing:
            host.state.interventions = self.panel.enabled()   # what runs start from
        try:
            host.state.intervened = touched_neurons(resolved)    # ringed in the brain
        except FlyvizError:       # resolved on the model before: rings come with the next
            host.state.intervened = ()
        self._on_compare_settings()
        return True

    def fill_from_highlight(self) -> None:
        """Fill the query from the Settings dock's superclass / cell-type highlight."""
        terms = []
        state = self.host.state
        superclass, cell_type = state.filter_superclass, state.filter_cell_type
        if superclass:
            terms.append(f"superclass:{quoted(superclass)}")
        if cell_type:
            terms.append(f"type:{quoted(cell_type + '*')}")
        if not terms:
            self.host.show_message("nothing is highlighted: choose a superclass or cell type "
                                     "in Settings", error=True)
            return
        self.panel.fill_query(" & ".join(terms))

    def fill_from_pick(self) -> None:
        """Fill the query with the picked neurons."""
        neurons = self.pick.neurons
        if neurons.size == 0:
            self.host.show_message("no neurons picked: click one (Shift+click adds, "
                                     "Ctrl+drag draws around many)", error=True)
            return
        self.panel.fill_query("id:" + ",".join(str(int(i)) for i in neurons))

    def show_layer(self) -> None:
        """Colour the brain by Δx while a comparison is shown (and Δx is wanted)."""
        colour_by = self.host.colour_by
        comparing = self.host.state.recording.baseline is not None
        want = comparing and self.panel.delta_box.isChecked()
        if want and colour_by.current != DELTA:
            colour_by.choose(DELTA)
        elif not want and colour_by.current == DELTA:
            colour_by.choose(STATE)

    # ------------------------------------------------------------ events
    def _on_compare_settings(self, *_args: object) -> None:
        comparing, mode = self.panel.compare_box.isChecked(), self.panel.mode.currentData()
        self.host.state.set_comparing(comparing, mode)          # what runs start from

    def _on_state_interventions(self, items: tuple[Intervention, ...]) -> None:
        if self._syncing or tuple(self.panel.enabled()) == tuple(items):
            return
        self._syncing = True
        try:
            self.panel.set_interventions(list(items))
        finally:
            self._syncing = False
        self.apply()

    def _on_state_comparing(self, comparing: bool, mode: str) -> None:
        panel = self.panel
        if panel.mode.currentData() != mode:
            panel.mode.setCurrentIndex(max(0, panel.mode.findData(mode)))
        panel.compare_box.setChecked(comparing)

    def _on_state_picked(self, neurons: np.ndarray) -> None:
        if not np.array_equal(self.pick.neurons, neurons):
            self.pick.set(neurons)

    def _on_model(self, _name: str = "") -> None:
        self.panel.set_checkpoint(self.host.models.checkpoint)
        self.pick.clear()
        self.apply()

    def _on_pick_changed(self, count: int) -> None:
        self.host.state.picked = self.pick.neurons
        self.panel.pick_button.setText(f"Pick ({count})" if count else "Pick")

    def _on_recording_replaced(self) -> None:
        recording = self.host.state.recording
        stored = recording.metadata.get("interventions")
        if stored and len(recording) > 0:      # opened from a file (a new run starts empty)
            try:
                items = list(from_json(stored))
            except FlyvizError as exc:
                self.host.show_message(f"the recording's interventions: {exc}", error=True)
            else:
                self.panel.set_interventions(items)
                if recording.baseline is not None:
                    info = recording.metadata.get("comparison") or {}
                    mode = info.get("mode", "forced")
                    self.panel.mode.setCurrentIndex(max(0, self.panel.mode.findData(mode)))
        self.show_layer()


def install(host: "WindowHost") -> InterventionsFeature:
    """Add the Interventions dock to the window ``host`` (see :class:`InterventionsFeature`)."""
    return InterventionsFeature(host)
