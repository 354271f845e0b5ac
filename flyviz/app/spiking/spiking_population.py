"""The Spiking populations dock: rate traces of chosen cell types and a raster of their cells.

For a spiking brain (:mod:`flyviz.kinds.spiking`) the shown recording's frames are each
neuron's rate per bin. The dock takes groups — cell types or superclasses, comma-separated
(``type:MN9, superclass:sensory``, or bare names: a cell type where one is so named, else a
superclass); empty: the brain's largest superclasses — and draws

* the **rates**: each group's mean rate (Hz) in every bin, against time in ms (a step over
  each bin);
* the **raster**: a tick for every spike of the group's cells (up to :data:`RASTER_CELLS`
  cells a group, one row each, rows grouped by group) at its exact time (0.1 ms), up to the
  end of the bin shown. A run of several trials splits each cell's row into a lane a trial
  (the first lowest; :func:`lane_offsets`), so one cell's trials are seen apart and side
  by side, and a gap wider than the lanes' keeps the cells apart. The spikes are the recording's
  (:attr:`~flyviz.record.recording.Recording.spikes`: kept by a live run as its bins
  arrive and by ``flyviz simulate --record``); a recording that kept none (written before
  flyviz kept them) falls back to a mark for every bin in which a cell fired, and the
  caption under the groups says which it is.

Both are read from the recording (the one path of live runs and opened files) and redrawn as
bins arrive; a line marks the bin shown. The spikes of the raster's cells are picked out of
the recording's once, bin by bin as they arrive (a long run is not searched again at every
redraw), and kept as a :class:`~flyviz.record.spikes.SpikeLog` of marks; a group's marks are
drawn as one path of ticks (``tests/bench_spiking_raster.py`` measures a long run).
"""

from __future__ import annotations

import html
from collections import Counter
from typing import TYPE_CHECKING, Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QSize, Qt, QTimer
from PySide6.QtWidgets import QLabel, QLineEdit, QVBoxLayout, QWidget

from flyviz.app.base.labels import ElidedLines
from flyviz.app.population.population_plots import population_plot
from flyviz.kinds.spiking import SPIKING, SPIKING_KEY
from flyviz.record.spikes import SpikeLog

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.record.recording import Recording
    from flyviz.spiking.brain import SpikingBrain
    from flyviz.viewer.state import ViewerState

__all__ = ["BIN_RASTER_CAPTION", "DEFAULT_GROUPS", "PLOT_PX", "RASTER_CELLS", "REDRAW_MS",
           "SPIKE_RASTER_CAPTION", "SpikingPopulationPanel", "TRIALS_RASTER_CAPTION",
           "lane_offsets", "resolve_groups"]

#: Most cells of one group in the raster (the first by index).
RASTER_CELLS = 40
#: The kinds of model whose runs the panel draws (it reads a spiking brain's groups and spikes).
POPULATION_KINDS = (SPIKING_KEY,)
#: Groups shown when none are named: the brain's largest superclasses, this many.
DEFAULT_GROUPS = 5
#: Width of both plots' left axes (their time axes line up only when these are equal).
LEFT_AXIS_PX = 64
#: The least height of each plot: its time axis takes about 20 px (and the raster's label as
#: many again), so a plot shorter than this shows the rates of five groups, or the rows of
#: their cells, a few pixels each.
PLOT_PX = 90
#: Bins that arrive within this many ms of each other are drawn in one go.
REDRAW_MS = 100
#: The raster's caption when it draws the recording's spikes, and when it falls back to bins.
SPIKE_RASTER_CAPTION = ("raster: each spike of the first {cells} cells of each group at its "
                        "time ({tick:g} ms), up to the bin shown")
BIN_RASTER_CAPTION = ("raster: a mark per bin in which a cell fired (this recording kept no "
                      "spike times)")
#: Added to :data:`SPIKE_RASTER_CAPTION` for a run of several trials.
TRIALS_RASTER_CAPTION = "; each cell's row holds its {trials:,} trials, the first lowest"

#: A raster mark: a vertical tick this far below and above its row's centre.
_TICK = np.array([-0.4, 0.4])
#: How much of a cell's row its trials' lanes share, for several trials (the rest is the gap
#: between cells, wider than the gap between two lanes: the cells are told apart).
_LANES_BAND = 0.8


def lane_offsets(trial: np.ndarray, trials: int) -> tuple[np.ndarray, float]:
    """Where a spike of ``trial`` (of a run of ``trials``) is drawn in its cell's row: its
    lane's centre above the row's, and the tick's half-height. One trial: on the row, its
    tick 0.4 high each way (the raster of one trial as it always was); several: lanes
    packed into 0.8 of the row, the first lowest, each tick 0.8 of its lane."""
    trial = np.asarray(trial, np.float64)
    if trials <= 1:
        return np.zeros_like(trial), float(_TICK[1])
    lane = _LANES_BAND / trials
    return -_LANES_BAND / 2 + (trial + 0.5) * lane, float(_TICK[1]) * lane
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
        counts = Counter(map(str, brain.superclass))
        largest = sorted(counts, key=lambda name: (-counts[name], name))  # ties by name
        words = [f"superclass:{name}" for name in largest if name][:DEFAULT_GROUPS]
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
        # No label beside it (the placeholder goes once typed in): named for a screen reader.
        self.groups_edit.setAccessibleName("Groups to plot")
        self.note = QLabel("")
        self.note.setVisible(False)
        # One line, elided where the dock is narrow (the whole caption in its tooltip): two
        # wrapped lines over the plots pushed the raster below the fold of the dock.
        self.raster_caption = ElidedLines("", lines=1)
        self.rates_plot = population_plot()
        # The time axis's label once, under the raster below (the two share their time): the
        # rates plot's own label took the height of a line of its traces.
        self.rates_plot.getAxis("left").setLabel("rate (Hz)")
        self.rates_plot.getAxis("bottom").showLabel(False)
        # The groups' names and colours on a line of their own: a legend inside a plot this
        # short covers its traces.
        self.key = QLabel("")
        self.key.setTextFormat(Qt.TextFormat.RichText)
        self.key.setWordWrap(True)
        self.raster_plot = population_plot()
        self.raster_plot.getAxis("bottom").setLabel("time (ms)")
        self.raster_plot.getAxis("left").setLabel("cells")
        self.raster_plot.setXLink(self.rates_plot)
        # pyqtgraph lines linked views up on screen: with left axes of one width the two
        # plots show the same span of time, the raster's first ms included.
        for plot in (self.rates_plot, self.raster_plot):
            plot.getAxis("left").setWidth(LEFT_AXIS_PX)
            # Tall enough for the left axis's label, drawn along it ("rate (Hz)" was cut
            # in a plot at pyqtgraph's smallest), under the time axis and its label.
            label = plot.getAxis("left").label.boundingRect().width()
            bottom = plot.getAxis("bottom")
            named = bottom.label.boundingRect().height() if bottom.label.isVisible() else 0
            plot.setMinimumHeight(max(PLOT_PX, int(label + bottom.height() + named + 16)))
        # Time is framed here, not by pyqtgraph's auto range: two views linked in x turn
        # each other's off as they follow their own data, and the plot stopped partway
        # through a run. Both show the whole recording until the user zooms or pans.
        self._following = True
        for plot in (self.rates_plot, self.raster_plot):
            plot.getViewBox().enableAutoRange(x=False)
            plot.getViewBox().sigRangeChangedManually.connect(self._stop_following)
        #: One curve of marks per group (its colour): a short vertical tick per mark, drawn
        #: as pairs of points (one path, however many marks).
        self._ticks: list[pg.PlotCurveItem] = []
        self._cursors = [pg.InfiniteLine(angle=90, pen=pg.mkPen("#888", width=1))
                         for _ in range(2)]
        self.rates_plot.addItem(self._cursors[0])
        self.raster_plot.addItem(self._cursors[1])
        layout = self._layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.groups_edit)
        layout.addWidget(self.note)
        layout.addWidget(self.raster_caption)
        layout.addWidget(self.key)
        layout.addWidget(self.rates_plot, 1)
        layout.addWidget(self.raster_plot, 1)
        #: ``(name, indices)`` of the groups drawn.
        self.groups: list[tuple[str, np.ndarray]] = []
        #: Per group, its rate trace as drawn: ``(times_ms, rates_hz)``.
        self.traces: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        #: The raster's marks as drawn: ``(times_ms, rows)``, and each row's neuron.
        self.raster_marks: tuple[np.ndarray, np.ndarray] = (np.zeros(0), np.zeros(0))
        self.raster_neurons = np.zeros(0, np.int64)
        #: Each mark's trial (0 for a raster of bins), and the trials the rows are split into.
        self.raster_trials = np.zeros(0, np.int64)
        self.raster_lanes = 1
        #: Whether the raster draws the recording's spikes (``False``: bins, or nothing).
        self.raster_exact = False
        # The spikes of the raster's cells picked out so far: marks by bin (``neuron`` is
        # the row), of which log of which recording.
        self._marks: SpikeLog | None = None
        self._marks_of: SpikeLog | None = None
        # The trials the marks' rows are split into: the run's, read when its log is first
        # picked from (more if its spikes name more).
        self._lanes = 1
        self._group_starts = np.zeros(0, np.int64)
        self._row_lookup: list[np.ndarray] = []
        self._curves: dict[str, Any] = {}
        # bins arriving fast are drawn together, at most every REDRAW_MS
        self._pending = QTimer(self)
        self._pending.setSingleShot(True)
        self._pending.setInterval(REDRAW_MS)
        self._pending.timeout.connect(self.redraw)
        events = state.events
        events.recording.connect(self._on_recording)
        events.frames_appended.connect(lambda _n: self._pending.start()
                                       if not self._pending.isActive() else None)
        events.index.connect(self._on_index)

    # ------------------------------------------------------------ groups
    # The dock is fitted to the least height that shows the header and both plots whole
    # (flyviz.app.base.docks.fit_height asks the panel): the plots' own size hints (480 px
    # each) made it half the window, the brain's view the smaller part.
    def heightForWidth(self, width: int) -> int:  # noqa: N802 - Qt API
        """The least height that shows the header (its legend wrapped at ``width``) and
        both plots at their least, :data:`PLOT_PX` or more."""
        layout = self._layout
        margins = layout.contentsMargins()
        inner = width - margins.left() - margins.right()
        shown = [w for w in (self.groups_edit, self.note, self.raster_caption, self.key,
                             self.rates_plot, self.raster_plot) if not w.isHidden()]
        heights = [w.heightForWidth(inner) if w.hasHeightForWidth()
                   else max(w.minimumHeight(), w.minimumSizeHint().height()) for w in shown]
        return (sum(heights) + layout.spacing() * (len(shown) - 1) + margins.top()
                + margins.bottom())

    def hasHeightForWidth(self) -> bool:  # noqa: N802 - Qt API
        return True

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt API
        return QSize(super().sizeHint().width(), self.heightForWidth(max(self.width(), 1)))

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
        self.note.setVisible(bool(self.note.text()))     # an empty note takes no line
        for curve in self._curves.values():
            self.rates_plot.removeItem(curve)
        self._curves = {}
        for i, (name, members) in enumerate(self.groups):
            curve = self.rates_plot.plot([], [], pen=pg.mkPen(_PENS[i % len(_PENS)], width=2),
                                         name=f"{name} ({members.size:,})")
            self._curves[name] = curve
        self.key.setText(" &nbsp; ".join(
            f"<nobr><span style='color:{_PENS[i % len(_PENS)]}'>&#9632; "
            f"{html.escape(name.split(':', 1)[-1])} ({members.size:,})</span></nobr>"
            for i, (name, members) in enumerate(self.groups)))
        rows = [members[:RASTER_CELLS] for _, members in self.groups]
        self.raster_neurons = np.concatenate(rows) if rows else np.zeros(0, np.int64)
        sizes = [r.size for r in rows]
        self._group_starts = np.cumsum([0, *sizes])[:-1].astype(np.int64)
        # each group's row of a neuron (-1: not in the raster), looked up per spike
        neurons = 0 if self.brain is None else self.brain.neurons
        self._row_lookup = []
        for first, members in zip(self._group_starts, rows):
            lookup = np.full(neurons, -1, np.int32)
            lookup[members] = first + np.arange(members.size, dtype=np.int32)
            self._row_lookup.append(lookup)
        for ticks in self._ticks:
            self.raster_plot.removeItem(ticks)
        self._ticks = []
        for i in range(len(rows)):
            ticks = pg.PlotCurveItem(pen=pg.mkPen(_PENS[i % len(_PENS)], width=2),
                                     connect="pairs")
            self.raster_plot.addItem(ticks)
            self._ticks.append(ticks)
        self._marks = self._marks_of = None
        self.redraw()

    # ------------------------------------------------------------ drawing
    def _spiking(self) -> bool:
        return self.state.kind.shows(POPULATION_KINDS) and self.brain is not None and \
            self.state.recording.neurons == self.brain.neurons

    def redraw(self) -> None:
        """Draw the traces and the raster of the shown recording as it is now."""
        recording = self.state.recording
        n = len(recording) if self._spiking() else 0
        times = (np.arange(n) + 1) * self._bin_ms()
        self.traces = {}
        for name, members in self.groups:
            rates = recording.states(members).mean(axis=1) if n else np.zeros(0)
            self.traces[name] = (times, np.asarray(rates, np.float64))
            # drawn as steps: each bin's rate over its bin, from 0 ms, above its spikes
            if n:
                self._curves[name].setData(np.r_[0.0, times], rates, stepMode="center")
            else:
                self._curves[name].setData([], [])
        self._draw_raster()
        self._frame_time(n)
        self._move_cursor(self.state.index)

    def _on_recording(self, *_args: Any) -> None:
        self._following = True              # a new recording is framed whole again
        self.redraw()

    def _stop_following(self, *_args: Any) -> None:
        self._following = False

    def _frame_time(self, bins: int) -> None:
        """Show the whole recording's time (its ``bins``) while the user has not zoomed."""
        if self._following:
            self.rates_plot.setXRange(0.0, max(bins, 1) * self._bin_ms(), padding=0.0)

    def _bin_ms(self) -> float:
        return float(self.state.kind.recording_axis(self.state.recording).step)

    def _on_index(self, index: int) -> None:
        if not self._pending.isActive():     # else the coming redraw draws it
            self._draw_raster()
        self._move_cursor(index)

    def _shown_bins(self, n: int) -> int:
        """Bins the raster draws: up to the one shown (all when none is)."""
        index = self.state.index
        return index + 1 if 0 <= index < n else n

    def _draw_raster(self) -> None:
        recording = self.state.recording
        n = len(recording) if self._spiking() else 0
        log = recording.spikes if n else None
        exact = log is not None and len(log) >= n
        self.raster_exact = bool(exact and self.raster_neurons.size)
        shown = self._shown_bins(n)
        times: np.ndarray
        rows: np.ndarray
        trials = np.zeros(0, np.int64)
        lanes = 1
        if not (n and self.raster_neurons.size):
            times, rows = np.zeros(0), np.zeros(0, np.int64)
        elif exact:
            assert log is not None
            marks = self._pick_marks(recording, log, n)
            tick, row, trial = marks.arrays(0, shown)
            times, rows, trials = tick * marks.tick_ms, row.astype(np.int64), \
                trial.astype(np.int64)
            lanes = self._lanes
        else:
            fired = recording.states(self.raster_neurons, 0, shown) > 0    # (bins, rows)
            bins, rows = np.nonzero(fired)
            times = (bins + 1) * self._bin_ms()
            trials = np.zeros(rows.size, np.int64)     # bins keep no trials: one lane
        if not n:
            self.raster_caption.setText("")
        elif exact:
            assert log is not None
            self.raster_caption.setText(
                SPIKE_RASTER_CAPTION.format(cells=RASTER_CELLS, tick=log.tick_ms)
                + (TRIALS_RASTER_CAPTION.format(trials=lanes) if lanes > 1 else ""))
        else:
            self.raster_caption.setText(BIN_RASTER_CAPTION)
        self.raster_marks = (np.asarray(times, np.float64), rows.astype(np.float64))
        self.raster_trials = trials
        self.raster_lanes = lanes
        offset, half = lane_offsets(self.raster_trials, lanes)
        centre = self.raster_marks[1] + offset
        group = np.searchsorted(self._group_starts, rows, side="right") - 1
        for g, ticks in enumerate(self._ticks):
            mine = group == g
            x, y = self.raster_marks[0][mine], centre[mine]
            ticks.setData(x=np.repeat(x, 2), y=(y[:, None] + [-half, half]).reshape(-1))

    def _pick_marks(self, recording: "Recording", log: SpikeLog, n: int) -> SpikeLog:
        """The spikes of the raster's cells in the first ``n`` bins of ``log`` (the shown
        ``recording``'s), each as a mark whose ``neuron`` is its row: those picked before,
        and those of the bins since."""
        marks = self._marks
        if marks is None or self._marks_of is not log or len(marks) > len(log) \
                or marks.tick_ms != log.tick_ms:
            marks = self._marks = SpikeLog(log.tick_ms)
            self._marks_of = log
            self._lanes = SPIKING.run_trials(recording)
        done = len(marks)
        if done >= n:
            return marks
        tick, neuron, trial = log.arrays(done, n)
        first, _last = log.span(done, n)
        ends = log.frame_ends()[done:n] - first
        at, rows = [], []
        for lookup in self._row_lookup:
            row = lookup[neuron]
            hit = np.flatnonzero(row >= 0)
            at.append(hit)
            rows.append(row[hit])
        where = np.concatenate(at) if at else np.zeros(0, np.int64)
        row = np.concatenate(rows) if rows else np.zeros(0, np.int32)
        order = np.argsort(where, kind="stable")      # the log's order: bin by bin
        where, row = where[order], row[order]
        marks.append_frames(tick[where], row, trial[where],
                            np.searchsorted(where, ends, side="left"))
        if where.size:        # a log naming more trials than its run's metadata says
            self._lanes = max(self._lanes, int(trial[where].max()) + 1)
        return marks

    def _move_cursor(self, index: int) -> None:
        step = self._bin_ms()
        for line in self._cursors:
            line.setVisible(index >= 0)
            line.setValue((index + 1) * step if index >= 0 else 0.0)
