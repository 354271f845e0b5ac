"""The neuron inspector: who one neuron is, what it did, and who it talks to."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (QFormLayout, QHeaderView, QLabel, QTableWidget,
                               QTableWidgetItem, QTabWidget, QVBoxLayout, QWidget)

from flyviz.app.base import theme
from flyviz.app.base.plots import PlotWidget
from flyviz.app.atlas.atlas_card import AtlasCard
from flyviz.app.brain.connectivity import Connectivity, Partner
from flyviz.app.population.plot_axes import paint_on_demand
from flyviz.kinds import LANGUAGE, ModelKind
from flyviz.model.attribution import incoming_currents
from flyviz.model.checkpoint import Anatomy, Checkpoint
from flyviz.model.interventions import ResolvedInterventions
from flyviz.record.recording import Recording

#: Partners listed per direction.
PARTNER_ROWS = 12


def _label(values: list[str] | None, index: int) -> str:
    if values is None:
        return "—"
    text = str(values[index]).strip()
    return text if text else "—"


class NeuronInspector(QWidget):
    """Index, labels, activation over the recording and strongest partners of one neuron.

    Signals
    -------
    neuron_requested(index)
        The user clicked a partner: select that neuron.
    """

    neuron_requested = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        self.hint = QLabel("Click a neuron in the brain to inspect it.")
        self.hint.setObjectName("hint")
        self.hint.setWordWrap(True)
        layout.addWidget(self.hint)
        form = QFormLayout()
        form.setLabelAlignment(Qt.AlignmentFlag.AlignRight)
        self.fields: dict[str, QLabel] = {}
        for key, title in (("index", "Neuron"), ("body_id", "Body id"),
                           ("superclass", "Superclass"), ("side", "Side"),
                           ("cell_type", "Cell type"), ("position", "Soma"),
                           ("degree", "Synapses"), ("activation", LANGUAGE.state_name)):
            label = QLabel("—")
            label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            self.fields[key] = label
            form.addRow(title, label)
        layout.addLayout(form)
        self._form = form
        self.atlas_card = AtlasCard()       # shown while an atlas is open and a neuron picked
        layout.addWidget(self.atlas_card)
        self.trace = PlotWidget(enableMenu=False)   # no menu, none built
        self.trace.setMinimumHeight(70)
        self.trace.hideButtons()
        self.trace.getAxis("bottom").setLabel("token")
        self.trace.getAxis("left").setLabel("x")
        self._kind: ModelKind = LANGUAGE     # its time axis names the trace's frames
        self._currents_apply = True
        self.trace.getAxis("left").enableAutoSIPrefix(False)
        # Time reads in whole tokens or bins: a run of one has a span under one, which
        # pyqtgraph would relabel "(x0.001)" and number in thousandths.
        self.trace.getAxis("bottom").enableAutoSIPrefix(False)
        self.trace_curve = self.trace.plot([], [], pen=pg.mkPen(theme.ACCENT, width=2))
        self.trace_cursor = pg.InfiniteLine(angle=90, movable=False,
                                            pen=pg.mkPen(theme.MUTED, style=Qt.PenStyle.DashLine))
        self.trace.addItem(self.trace_cursor)
        self.trace.addItem(pg.InfiniteLine(angle=0, pos=0, pen=pg.mkPen(theme.BORDER)))
        self._frame_empty_trace()
        paint_on_demand(self.trace)
        # Two fifths of the free height (the tables three): in a column shared with the
        # spiking brain's Stimulus dock at 1280×800, a third left the trace too short for its
        # axis's numbers.
        layout.addWidget(self.trace, 2)
        self.tabs = QTabWidget()
        self.inputs_table = self._make_table()
        self.outputs_table = self._make_table()
        # Short titles: "Strongest inputs / outputs" left the third tab cut to "C" in a
        # dock a quarter of a laptop screen wide (what they list is in their tooltips).
        self.tabs.addTab(self.inputs_table, "Inputs")
        self.tabs.setTabToolTip(0, "The strongest inputs of this neuron, strongest first")
        self.tabs.addTab(self.outputs_table, "Outputs")
        self.tabs.setTabToolTip(1, "The strongest outputs of this neuron, strongest first")
        self.currents_table = self._make_table(
            ["Neuron", "Weight", "Activation", "Weight × act."])
        self.currents_table.setToolTip("The strongest currents into this neuron at the shown "
                                       "token: weight × the presynaptic neuron's activation "
                                       "one token earlier, with the weights the run used (cut "
                                       "or scaled where it did). Click a row to inspect it")
        self.tabs.addTab(self.currents_table, "Currents now")
        self._currents_key: tuple[int, int, int] | None = None
        layout.addWidget(self.tabs, 3)

        self.neuron: int | None = None
        self.anatomy: Anatomy | None = None
        self.connectivity: Connectivity | None = None
        self.checkpoint: Checkpoint | None = None
        self._trace_key: tuple[int, int, int] | None = None
        # The shown recording's interventions, resolved once per recording.
        self._resolved_key: tuple[int, str] | None = None
        self._resolved: ResolvedInterventions | None = None

    def _make_table(self, headers: list[str] | None = None) -> QTableWidget:
        headers = headers or ["Neuron", "Weight", "Superclass / type"]
        table = QTableWidget(0, len(headers))
        table.setHorizontalHeaderLabels(headers)
        table.verticalHeader().setVisible(False)
        table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        table.setSelectionBehavior(QTableWidget.SelectionBehavior.SelectRows)
        # The leading columns as wide as their title or widest entry, the last one the rest:
        # with Qt's default 100 pixels for each leading column, an empty table in a dock at a
        # 1280x800 window left "Superclass / type" 87 pixels and drew it cut ("uperclass /
        # typ"); and sizing the columns to their contents after each fill stopped the last
        # one stretching to the table's edge.
        header = table.horizontalHeader()
        for column in range(len(headers) - 1):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(len(headers) - 1, QHeaderView.ResizeMode.Stretch)
        table.setToolTip("Click a partner, or press Enter on it, to inspect it")
        table.cellClicked.connect(lambda row, _col, t=table: self._on_partner_clicked(t, row))
        # Enter on a row (or a double click): the keyboard's way to a partner.
        table.cellActivated.connect(lambda row, _col, t=table: self._on_partner_clicked(t, row))
        return table

    def set_kind(self, kind: ModelKind) -> None:
        """Name the trace's axes as the shown model's kind does (token and h; bin and Hz)."""
        self._kind = kind
        label = self._form.labelForField(self.fields["activation"])
        if isinstance(label, QLabel):
            label.setText(kind.state_name)      # Activation; a spiking brain's Rate
        self.trace.getAxis("bottom").setLabel(kind.time_axis.name)
        self.trace.getAxis("left").setLabel(kind.state_label)
        # "Currents now" is a step of weight x the state one frame earlier (the language
        # model's); another kind's states are not what its synapses carry.
        self._currents_apply = kind.steps_its_wiring
        self.tabs.setTabVisible(self.tabs.indexOf(self.currents_table), self._currents_apply)

    def set_model(self, anatomy: Anatomy | None, connectivity: Connectivity | None,
                  checkpoint: Checkpoint | None = None) -> None:
        """Inspect neurons of a new model (clears the selection).

        ``checkpoint`` lets *Currents now* resolve a run's cuts and scales; without it
        the currents are those of the uncut weights.
        """
        self.anatomy = anatomy
        self.connectivity = connectivity
        self.checkpoint = checkpoint
        weight = "Weight" if connectivity is None else connectivity.weight_name
        for table in (self.inputs_table, self.outputs_table):
            table.setHorizontalHeaderItem(1, QTableWidgetItem(weight))
        self._resolved_key = self._resolved = None
        self.show_neuron(None, None, -1)

    def _model_checkpoint(self) -> Checkpoint | None:
        """The checkpoint of the inspected model (given to :meth:`set_model`), if it has the
        size of the connectivity shown."""
        checkpoint = self.checkpoint
        if checkpoint is None or self.connectivity is None:
            return None
        return checkpoint if checkpoint.config.neurons == self.connectivity.neurons else None

    def _interventions(self, recording: Recording, checkpoint: Checkpoint
                       ) -> ResolvedInterventions | None:
        """The recording's interventions resolved against ``checkpoint`` (once per recording),
        or ``None`` when it ran without any or they cannot be resolved here."""
        stored: Any = recording.metadata.get("interventions") or []
        key = (id(recording), json.dumps(stored, sort_keys=True, default=str))
        if key != self._resolved_key:
            self._resolved_key, self._resolved = key, None
            if stored:
                from flyviz.errors import FlyvizError
                from flyviz.model.interventions import from_json, resolve

                try:
                    self._resolved = resolve(checkpoint, from_json(stored))
                except FlyvizError:
                    self._resolved = None
        return self._resolved

    def show_neuron(self, neuron: int | None, recording: Recording | None, index: int) -> None:
        """Describe ``neuron`` (None clears) with its trace over ``recording``."""
        self.neuron = neuron
        self._trace_key = None
        self.atlas_card.show_neuron(neuron)
        if neuron is None:
            self.hint.setVisible(True)
            for label in self.fields.values():
                label.setText("—")
            self.inputs_table.setRowCount(0)
            self.outputs_table.setRowCount(0)
            self.currents_table.setRowCount(0)
            self._currents_key = None
            self.trace_curve.setData([], [])
            self._frame_empty_trace()
            self.trace.viewport().update()
            return
        self.hint.setVisible(False)
        anat = self.anatomy
        self.fields["index"].setText(f"#{neuron}")
        if anat is not None:
            self.fields["body_id"].setText("—" if anat.body_id is None else str(int(anat.body_id[neuron])))
            self.fields["superclass"].setText(_label(anat.superclass, neuron))
            self.fields["side"].setText(_label(anat.side, neuron))
            self.fields["cell_type"].setText(_label(anat.cell_type, neuron))
            if anat.kind == "layout":
                self.fields["position"].setText("graph layout (no anatomy)")
            elif bool(anat.valid[neuron]):
                x, y, z = (float(v) for v in anat.positions_um()[neuron])
                kind = " (synthetic)" if anat.kind == "synthetic" else ""
                self.fields["position"].setText(f"{x:.0f}, {-y:.0f}, {z:.0f} µm{kind}")
            else:
                self.fields["position"].setText("unknown (not drawn)")
        self._show_partners(neuron)
        self.trace.viewport().update()
        self.update_moment(recording, index)

    def _show_partners(self, neuron: int) -> None:
        graph = self.connectivity
        if graph is None:
            return
        # A direction still being indexed off the UI thread (graph_ready) waits for it.
        degrees = []
        for tab, (table, direction) in enumerate(((self.inputs_table, "inputs"),
                                                  (self.outputs_table, "outputs"))):
            name = direction.capitalize()
            if graph.has(direction):
                lookup = graph.inputs if direction == "inputs" else graph.outputs
                degree = graph.in_degree if direction == "inputs" else graph.out_degree
                self._fill(table, lookup(neuron, PARTNER_ROWS))
                degrees.append(f"{degree(neuron):,}")
            else:
                table.setRowCount(0)
                name += " …"                    # still being indexed
                degrees.append("…")
            self.tabs.setTabText(tab, name)
        self.fields["degree"].setText(f"{degrees[0]} in · {degrees[1]} out")

    def graph_ready(self, connectivity: Connectivity) -> None:
        """The transposed graph of ``connectivity`` is built: show the outputs too."""
        if connectivity is self.connectivity and self.neuron is not None:
            self._show_partners(self.neuron)

    def show_frame(self, recording: Recording | None, index: int) -> None:
        """Follow the shown frame (the display calls this; see :meth:`update_moment`)."""
        self.update_moment(recording, index)

    def _fill(self, table: QTableWidget, partners: list[Partner]) -> None:
        table.setRowCount(len(partners))
        anat = self.anatomy
        for row, partner in enumerate(partners):
            who = QTableWidgetItem(f"#{partner.neuron}")
            who.setData(Qt.ItemDataRole.UserRole, partner.neuron)
            weight = QTableWidgetItem(f"{partner.weight:+,.0f}" if self.connectivity is not None
                                      and self.connectivity.whole else f"{partner.weight:+.3f}")
            weight.setForeground(pg.mkColor(theme.WARM if partner.weight > 0 else "#63b3ed"))
            kind = "—" if anat is None else " / ".join(
                t for t in (_label(anat.superclass, partner.neuron),
                            _label(anat.cell_type, partner.neuron)) if t != "—") or "—"
            table.setItem(row, 0, who)
            table.setItem(row, 1, weight)
            table.setItem(row, 2, QTableWidgetItem(kind))

    def show_currents(self, recording: Recording | None, index: int) -> None:
        """The strongest currents into the neuron at frame ``index``: from the state one
        frame earlier (zero before the first), as the step of fly-formats §1.5 reads it,
        through the synapses as that step used them (the run's cuts and scales applied:
        :func:`flyviz.model.attribution.incoming_currents`, the computation of a trace's
        edge flows)."""
        table, graph = self.currents_table, self.connectivity
        if not self._currents_apply or self.neuron is None or recording is None or graph is None \
                or not 0 <= index < len(recording) or self.neuron >= recording.neurons:
            self._currents_key = None
            table.setRowCount(0)
            return
        key = (id(recording), index, self.neuron)
        if key == self._currents_key:
            return
        self._currents_key = key
        previous = recording.state(index - 1) if index > 0 else np.zeros(recording.neurons,
                                                                          np.float32)
        checkpoint = self._model_checkpoint()
        if checkpoint is not None:
            found = incoming_currents(checkpoint, self.neuron, previous,
                                      interventions=self._interventions(recording, checkpoint),
                                      position=index, limit=PARTNER_ROWS)
            rows = list(zip(found.pre.tolist(), found.weights.tolist(),
                            found.activations.tolist(), found.currents.tolist()))
        else:
            rows = [(c.neuron, c.weight, c.activation, c.current)
                    for c in graph.currents(self.neuron, previous, PARTNER_ROWS)]
        table.setRowCount(len(rows))
        for row, (neuron, weight, activation, current) in enumerate(rows):
            who = QTableWidgetItem(f"#{neuron}")
            who.setData(Qt.ItemDataRole.UserRole, neuron)
            cells = [who] + [QTableWidgetItem(f"{v:+.3f}") for v in (weight, activation, current)]
            cells[3].setForeground(pg.mkColor(theme.WARM if current > 0 else "#63b3ed"))
            for col, cell in enumerate(cells):
                table.setItem(row, col, cell)

    def _on_partner_clicked(self, table: QTableWidget, row: int) -> None:
        item = table.item(row, 0)
        if item is not None:
            self.neuron_requested.emit(int(item.data(Qt.ItemDataRole.UserRole)))

    def _frame_empty_trace(self) -> None:
        """With no neuron picked, the trace's axis reads from frame 0: pyqtgraph centres an
        empty plot on 0 and numbered it -0.4 to 0.4."""
        self.trace.setXRange(0.0, 10.0, padding=0.02)
        self.trace.setYRange(0.0, 1.0, padding=0.02)
        self.trace.enableAutoRange(axis="y")

    def update_moment(self, recording: Recording | None, index: int) -> None:
        """Refresh the activation trace and the value at the shown frame."""
        if self.neuron is None or recording is None:
            return
        n = len(recording)
        key = (id(recording), n, self.neuron)
        if key != self._trace_key and self.neuron < recording.neurons:
            self._trace_key = key
            trace = recording.neuron_trace(self.neuron)
            self.trace_curve.setData(np.arange(n, dtype=float), trace)
            # Framed on the run's steps (at least one step wide), not on pyqtgraph's guess.
            self.trace.setXRange(0.0, float(max(n - 1, 1)), padding=0.02)
        self.trace_cursor.setPos(max(index, 0))
        self.trace.viewport().update()
        self.show_currents(recording, index)
        if 0 <= index < n and self.neuron < recording.neurons:
            value = float(recording.state(index)[self.neuron])
            self.fields["activation"].setText(
                f"{self._kind.state_text(value)} at {self._kind.time_axis.at(index)}")
        else:
            self.fields["activation"].setText("—")
