"""The Spiking populations dock: rate traces of chosen cell types and a raster of their cells.

For a spiking brain (:mod:`flyviz.kinds.spiking`) the shown recording's frames are each
neuron's rate per bin. The dock takes groups — cell types or superclasses, comma-separated
(``type:MN9, superclass:sensory``, or bare names: a cell type where one is so named, else a
superclass); empty: the brain's largest superclasses — and draws

* the **rates**: each group's mean rate (Hz) in every bin, against time in ms;
* the **raster**: a mark for every bin in which one of the group's cells fired (up to
  :data:`RASTER_CELLS` cells a group, one row each), rows grouped by group.

Both are read from the recording (the one path of live runs and opened files) and redrawn as
bins arrive; a line marks the bin shown.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QLabel, QLineEdit, QVBoxLayout, QWidget

from flyviz.app.population.population_plots import population_plot

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.spiking.brain import SpikingBrain
    from flyviz.viewer.state import ViewerState

__all__ = ["DEFAULT_GROUPS", "RASTER_CELLS", "REDRAW_MS", "SpikingPopulationPanel", "resolve_groups"]

#: Most cells of one group in the raster (the first by index).
RASTER_CELLS = 40
#: Groups shown when none are named: the brain's largest superclasses, this many.
DEFAULT_GROUPS = 5
#: Bins that arrive within this many ms of each other are drawn in one go.
REDRAW_MS = 100

_PENS = ("#f28e2b", "#4e79a7", "#59a14f", "#e15759", "#b07aa1", "#76b7b2", "#edc948",
         "#ff9da7", "#9c755f", "#bab0ac")


def resolve_groups(brain: "SpikingBrain", text: str) -> list[tuple[str, np.ndarray]]:
    """``(name, model indices)`` of each group ``text`` names (see the module notes); a
    query that selects nothing is left out, one that does not parse raises
    :class:`~flyviz.errors.InputError`."""
    from flyviz.spiking.run import select

    groups: list[tuple[str, np.ndarray]] = []
    words = [w.strip() for w in text.split(",") if w.strip()]
    if not words:
        if brain.superclass is None:
            return [("all neurons", np.arange(brain.neurons, dtype=np.int64))]
        names, counts = np.unique(np.asarray(brain.superclass, dtype=object).astype(str),
                                  return_counts=True)
        order = np.argsort(-counts, kind="stable")
        words = [f"superclass:{names[i]}" for i in order if names[i]][:DEFAULT_GROUPS]
    for word in words:
        if ":" in word or "|" in word or "&" in word:
            found = select(brain, word)
        else:
            found = select(brain, f"type:{word}") if brain.cell_type is not None else \
                np.zeros(0, np.int64)
            if not found.size and brain.superclass is not None:
                found = select(brain, f"superclass:{word}")
        if found.size:
            groups.append((word, np.asarray(found, np.int64)))
    return groups


class SpikingPopulationPanel(QWidget):
    """Rates of groups of cells over time, and a raster of their cells (see the module)."""

    def __init__(self, state: "ViewerState", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self.brain: SpikingBrain | None = None
        self.groups_edit = QLineEdit()
        self.groups_edit.setPlaceholderText("cell types or superclasses, comma-separated "
                                            "(empty: the largest superclasses)")
        self.groups_edit.editingFinished.connect(self._regroup)
        self.note = QLabel("")
        self.rates_plot = population_plot()
        self.rates_plot.getAxis("bottom").setLabel("time (ms)")
        self.rates_plot.getAxis("left").setLabel("rate (Hz)")
        self.legend = self.rates_plot.addLegend(offset=(5, 5))
        self.raster_plot = population_plot()
        self.raster_plot.getAxis("bottom").setLabel("time (ms)")
        self.raster_plot.getAxis("left").setLabel("cells")
        self.raster_plot.setXLink(self.rates_plot)
        self.raster = pg.ScatterPlotItem(size=4, pen=None, pxMode=True)
        self.raster_plot.addItem(self.raster)
        self._cursors = [pg.InfiniteLine(angle=90, pen=pg.mkPen("#888", width=1))
                         for _ in range(2)]
        self.rates_plot.addItem(self._cursors[0])
        self.raster_plot.addItem(self._cursors[1])
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.groups_edit)
        layout.addWidget(self.note)
        layout.addWidget(self.rates_plot, 1)
        layout.addWidget(self.raster_plot, 1)
        #: ``(name, indices)`` of the groups drawn.
        self.groups: list[tuple[str, np.ndarray]] = []
        #: Per group, its rate trace as drawn: ``(times_ms, rates_hz)``.
        self.traces: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        #: The raster's marks as drawn: ``(times_ms, rows)``, and each row's neuron.
        self.raster_marks: tuple[np.ndarray, np.ndarray] = (np.zeros(0), np.zeros(0))
        self.raster_neurons = np.zeros(0, np.int64)
        self._curves: dict[str, Any] = {}
        # bins arriving fast are drawn together, at most every REDRAW_MS
        self._pending = QTimer(self)
        self._pending.setSingleShot(True)
        self._pending.setInterval(REDRAW_MS)
        self._pending.timeout.connect(self.redraw)
        events = state.events
        events.recording.connect(self.redraw)
        events.frames_appended.connect(lambda _n: self._pending.start()
                                       if not self._pending.isActive() else None)
        events.index.connect(self._move_cursor)

    # ------------------------------------------------------------ groups
    def set_brain(self, brain: "SpikingBrain | None") -> None:
        """Draw groups of ``brain``'s cells (its labels name them)."""
        self.brain = brain
        self._regroup()

    def set_groups(self, text: str) -> None:
        """Draw the groups ``text`` names (see the module notes)."""
        self.groups_edit.setText(text)
        self._regroup()

    def _regroup(self) -> None:
        from flyviz.errors import FlyvizError

        self.groups = []
        if self.brain is not None:
            try:
                self.groups = resolve_groups(self.brain, self.groups_edit.text())
            except FlyvizError as exc:
                self.note.setText(str(exc))
            else:
                self.note.setText("" if self.groups else "no neurons in these groups")
        for curve in self._curves.values():
            self.rates_plot.removeItem(curve)
        self.legend.clear()
        self._curves = {}
        for i, (name, members) in enumerate(self.groups):
            curve = self.rates_plot.plot([], [], pen=pg.mkPen(_PENS[i % len(_PENS)], width=2),
                                         name=f"{name} ({members.size:,})")
            self._curves[name] = curve
        rows = [members[:RASTER_CELLS] for _, members in self.groups]
        self.raster_neurons = np.concatenate(rows) if rows else np.zeros(0, np.int64)
        self._row_colours = [pg.mkBrush(_PENS[i % len(_PENS)])
                             for i, r in enumerate(rows) for _ in range(r.size)]
        self.redraw()

    # ------------------------------------------------------------ drawing
    def _spiking(self) -> bool:
        return self.state.kind.has("spikes") and self.brain is not None and \
            self.state.recording.neurons == self.brain.neurons

    def redraw(self) -> None:
        """Draw the traces and the raster of the shown recording as it is now."""
        recording = self.state.recording
        n = len(recording) if self._spiking() else 0
        axis = self.state.kind.time_axis
        meta = recording.metadata.get("spiking") or {}
        step = float(meta.get("bin_ms", axis.step))
        times = (np.arange(n) + 1) * step
        self.traces = {}
        for name, members in self.groups:
            rates = recording.states(members).mean(axis=1) if n else np.zeros(0)
            self.traces[name] = (times, np.asarray(rates, np.float64))
            self._curves[name].setData(times, rates)
        if n and self.raster_neurons.size:
            fired = recording.states(self.raster_neurons) > 0      # (bins, rows)
            bins, rows = np.nonzero(fired)
            self.raster_marks = (times[bins], rows.astype(np.float64))
            self.raster.setData(x=self.raster_marks[0], y=self.raster_marks[1],
                                brush=[self._row_colours[r] for r in rows])
        else:
            self.raster_marks = (np.zeros(0), np.zeros(0))
            self.raster.setData(x=[], y=[])
        self._move_cursor(self.state.index)

    def _move_cursor(self, index: int) -> None:
        meta = self.state.recording.metadata.get("spiking") or {}
        step = float(meta.get("bin_ms", self.state.kind.time_axis.step))
        for line in self._cursors:
            line.setVisible(index >= 0)
            line.setValue((index + 1) * step if index >= 0 else 0.0)
