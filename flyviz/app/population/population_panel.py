"""The population docks: the whole brain as a sorted raster, and cell types over time.

Two docks that make 49,393 neurons legible as a population (issue 19, parts 1-2),
drawn from the Qt-free computations in :mod:`flyviz.analysis.population`:

* **Whole brain** (:class:`WholeBrainRaster`): every neuron x every token of the
  shown run as one ``ImageItem``, the ordered neurons pooled into as many rows as
  the plot has pixels (:class:`~flyviz.analysis.population.RasterPooler`, the
  value of largest magnitude, so a single neuron that fires is not averaged
  away). Rows by anatomy (superclass bands named on the left axis), by
  similarity (sorted off the UI thread) or by the colour layer's importance;
  a comparison shows the intervened run, the untouched one or Δx. Hover names
  the neuron and token; a click selects both. A new frame pools only its own
  column (:meth:`~flyviz.analysis.population.RasterPooler.pool_one`).
* **Cell types** (:class:`~flyviz.app.population.cell_type_panel.CellTypePanel`): each cell type's (or superclass's)
  mean activation, mean |x| or mean Δx per token, rows in similarity order
  with a strip coloured by superclass; a click on a row lights that group's
  neurons in the brain (highlight source :data:`CELL_TYPE_HIGHLIGHT`).

Both follow the viewer state's events (recording, appended frames, shown
token) and coalesce them into at most :data:`REFRESH_HZ` redraws a second.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QObject, QPointF, Qt, QTimer, Signal
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QVBoxLayout, QWidget

from flyviz.analysis.population import (RasterPooler, RowOrder, anatomy_order,
                                        importance_order, similarity_order)
from flyviz.app.base import theme
from flyviz.app.population.cell_type_panel import CellTypePanel
from flyviz.app.population.population_plots import colour_table, drawn_length, population_plot, shown_states
from flyviz.record.recording import Recording

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.app.base.host import WindowHost
    from flyviz.viewer.state import ViewerState

__all__ = ["CELL_TYPE_HIGHLIGHT", "CellTypePanel", "PopulationFeature", "REFRESH_HZ",
           "WholeBrainRaster", "install", "shown_states"]

#: Most redraws per second of the population docks (a run streams faster than that).
REFRESH_HZ = 4

#: The highlight source a clicked cell-type row sets.
CELL_TYPE_HIGHLIGHT = "cell type"

#: What a comparison's raster shows: the intervened run, the untouched one, or their difference.
COMPARE_VIEWS = (("intervened", "Intervened"), ("untouched", "Untouched"), ("delta", "Δx"))
#: What the first choice says while there is no comparison: the one run there is.
SINGLE_RUN_VIEW = "This run"

#: What the raster says while there is no run to draw (as the Trajectory dock says it).
EMPTY_RASTER = "Run a prompt: every neuron at every token is drawn here."

#: Tokens the empty raster's x axis spans (from 0, where a run's first token will be).
EMPTY_TOKENS = 10


class Coalescer(QObject):
    """Runs ``refresh()`` soon after :meth:`poke`, at most ``hz`` times a second."""

    def __init__(self, refresh: Any, hz: float, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._refresh = refresh
        self._period = 1.0 / hz
        self._last = 0.0
        self.timer = QTimer(self)
        self.timer.setSingleShot(True)
        self.timer.timeout.connect(self._fire)

    def poke(self) -> None:
        if not self.timer.isActive():
            wait = max(0.0, self._period - (time.perf_counter() - self._last))
            self.timer.start(int(wait * 1000))

    def _fire(self) -> None:
        self._last = time.perf_counter()
        self._refresh()


# ----------------------------------------------------------------------------- raster
class WholeBrainRaster(QWidget):
    """Every neuron x every token of a run, rows pooled to the plot's pixel height.

    The image lives in ordered-neuron coordinates: x is the token, y the row
    of the ordered neurons (0 at the top), so zooming and panning on either
    axis and the band labels need no bookkeeping of the pooling.

    Signals
    -------
    neuron_clicked(neuron, token)
        The user clicked the raster: the neuron that drew the clicked pixel
        (the largest |x| of its pooled row at that token) and the token.
    order_requested(name)
        The user chose a row order (``"anatomy"``, ``"similarity"``, ``"importance"``).
    """

    neuron_clicked = Signal(int, int)
    order_requested = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        bar = QHBoxLayout()
        bar.addWidget(QLabel("Rows:"))
        self.order_box = QComboBox()
        for key, title in (("anatomy", "Superclass → cell type"), ("similarity", "Similar activity"),
                           ("importance", "Colour layer's importance")):
            self.order_box.addItem(title, key)
        self.order_box.setToolTip("How neurons are ordered into rows (similarity is sorted in "
                                  "the background; importance needs a colour layer)")
        bar.addWidget(self.order_box)
        bar.addWidget(QLabel("Show:"))
        self.view_box = QComboBox()
        for key, title in COMPARE_VIEWS:
            self.view_box.addItem(title, key)
        self.view_box.setToolTip("For a comparison: the intervened run, the untouched one, or Δx")
        self.view_box.setEnabled(False)
        self.view_box.setItemText(0, SINGLE_RUN_VIEW)       # until a comparison is shown
        bar.addWidget(self.view_box)
        bar.addStretch(1)
        self.hover = QLabel("")
        self.hover.setObjectName("hint")
        bar.addWidget(self.hover)
        layout.addLayout(bar)
        self.plot = population_plot()
        self.plot.setMouseEnabled(True, True)
        self.plot.getViewBox().invertY(True)
        layout.addWidget(self.plot, 1)
        self.image = pg.ImageItem(axisOrder="row-major")
        self.image.setLookupTable(colour_table())
        self.plot.addItem(self.image)
        self.token_line = pg.InfiniteLine(angle=90, movable=False,
                                      pen=pg.mkPen(theme.ACCENT, width=1))
        self.plot.addItem(self.token_line)
        # Over the plot while there is no run: an empty frame alone says nothing.
        self.placeholder = QLabel(EMPTY_RASTER, self.plot)
        self.placeholder.setObjectName("hint")
        self.placeholder.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.placeholder.setWordWrap(True)
        self.placeholder.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents)
        # It covers the plot's data area, where the image will be.
        self.plot.getViewBox().sigResized.connect(self._place_placeholder)
        #: The left axis's band labels of the order (``None``: the axis's own numbers),
        #: shown only beside a drawn run.
        self._band_ticks: list[list[tuple[float, str]]] | None = None
        self._ticks_drawn: Any = ()

        #: The row order shown, its pooler, and the pooled image (rows x capacity tokens).
        self.order: RowOrder | None = None
        self.pooler: RasterPooler | None = None
        #: The ordered rows ``first, stop`` pooled into the image (those in view).
        self.rows_shown = (0, 0)
        self._neurons_shown = np.zeros(0, dtype=np.int64)
        self.pooled = np.zeros((1, 0), dtype=np.float32)
        self.columns = 0
        self.limit = 1.0
        self._limit_at = 0
        self._recording: Recording | None = None
        self._index = -1
        self._fitted = False
        self.order_box.currentIndexChanged.connect(
            lambda _i: self.order_requested.emit(str(self.order_box.currentData())))
        self.view_box.currentIndexChanged.connect(lambda _i: self.redraw())
        self.plot.scene().sigMouseMoved.connect(self._on_moved)
        self.plot.scene().sigMouseClicked.connect(self._on_clicked)
        self.zoom_timer = QTimer(self)
        self.zoom_timer.setSingleShot(True)
        self.zoom_timer.setInterval(150)       # once the wheel or drag has settled
        self.zoom_timer.timeout.connect(self._follow_zoom)
        self.plot.getViewBox().sigYRangeChanged.connect(lambda *_: self.zoom_timer.start())

    # ------------------------------------------------------------ choices
    @property
    def view(self) -> str:
        """What a comparison shows: ``"intervened"``, ``"untouched"`` or ``"delta"``."""
        return str(self.view_box.currentData()) if self.view_box.isEnabled() else "intervened"

    def pixel_rows(self) -> int:
        """Rows the image is pooled into: the plot's data area in physical pixels."""
        box = self.plot.getViewBox().sceneBoundingRect()
        return max(16, int(box.height() * self.devicePixelRatioF()))

    def set_order(self, order: RowOrder | None) -> None:
        """Draw rows in ``order`` (``None``: nothing); the run is pooled again."""
        self.order = order
        self._set_window(0, 0 if order is None else order.order.size)
        if order is not None and order.bands and len(order.bands) <= 60:
            # Named where a band is a text line tall, so labels never overprint.
            per_row = self.pixel_rows() / order.order.size
            self._band_ticks = [[((b.start + b.stop) / 2, b.label) for b in order.bands
                                 if (b.stop - b.start) * per_row >= 12],
                                [(b.start, "") for b in order.bands]]
        else:
            self._band_ticks = None
        self._fitted = False
        self.redraw()

    def show_frame(self, recording: Recording, index: int) -> None:
        """Show ``recording`` with token ``index`` marked; new frames pool only their columns."""
        compared = recording.baseline is not None
        if compared != self.view_box.isEnabled():
            self.view_box.setEnabled(compared)
            # Without a comparison nothing was intervened on: the one choice is this run
            # (shown as chosen; the redraw below is for the new recording).
            self.view_box.setItemText(0, COMPARE_VIEWS[0][1] if compared else SINGLE_RUN_VIEW)
            if not compared:
                blocked = self.view_box.blockSignals(True)
                self.view_box.setCurrentIndex(0)
                self.view_box.blockSignals(blocked)
        if recording is not self._recording:
            self._recording = recording
            self._fitted = False
            if self.order is not None:
                self._set_window(0, self.order.order.size)
            self.redraw(index)
            return
        self._index = index
        length = drawn_length(recording, self.view)
        if self.pooler is not None and length > self.columns:
            self._append_columns(recording, length)
        self._show_image()

    def redraw(self, index: int | None = None) -> None:
        """Pool the whole run again (new recording, order, view or height)."""
        if index is not None:
            self._index = index
        recording = self._recording
        self.columns = 0
        self.image.setLookupTable(colour_table("difference" if self.view == "delta" else "signed"))
        if recording is None or self.pooler is None:
            self.pooled = np.zeros((1, 0), dtype=np.float32)
            self._show_image()
            return
        length = drawn_length(recording, self.view)
        capacity = max(64, 2 * length)
        self.pooled = np.zeros((self.pooler.rows, capacity), dtype=np.float32)
        if length:
            block = self.pooler.pool(shown_states(recording, self.view, 0, length,
                                                  self._neurons_shown))
            self.pooled[:, :length] = block
        self.columns = length
        self._limit_at = 0
        self._update_limit()
        self._show_image()

    def _append_columns(self, recording: Recording, length: int) -> None:
        assert self.pooler is not None
        if length > self.pooled.shape[1]:
            grown = np.zeros((self.pooled.shape[0], 2 * length), dtype=np.float32)
            grown[:, :self.columns] = self.pooled[:, :self.columns]
            self.pooled = grown
        for i in range(self.columns, length):
            column = self.pooler.pool_one(
                shown_states(recording, self.view, i, i + 1, self._neurons_shown)[0])
            self.pooled[:, i] = column
        self.columns = length
        self._update_limit()

    def _update_limit(self) -> None:
        # A robust colour range (one neuron far out would dim the whole brain), set again
        # each time the run has doubled: amortised, a token's redraw stays one column.
        if self.columns and self.columns >= 2 * self._limit_at:
            drawn = np.abs(self.pooled[:, :self.columns])
            self.limit = max(float(np.percentile(drawn, 99.5)), 1e-6)
            self._limit_at = self.columns

    def _set_window(self, first: int, stop: int) -> None:
        """Pool the ordered neurons ``first:stop`` (the rows in view) into the pixel rows."""
        self.rows_shown = (first, stop)
        if self.order is None or stop <= first:
            self.pooler = None
            return
        # Pooled from the states of the neurons in view only (a zoomed-in view reads a few
        # columns, not the whole brain): the pooler's positions are those neurons' places.
        self._neurons_shown = self.order.order[first:stop]
        local = RowOrder(np.arange(stop - first, dtype=np.int64), self.order.name)
        self.pooler = RasterPooler(local, self.pixel_rows())

    def _follow_zoom(self) -> None:
        # Zoomed in, the rows in view are pooled again at the screen's resolution, down to
        # one neuron a row: zooming shows neurons, not magnified blocks of a few hundred.
        if self.order is None:
            return
        n = self.order.order.size
        low, high = self.plot.getViewBox().viewRange()[1]
        first, stop = max(0, int(np.floor(low))), min(n, int(np.ceil(high)))
        if stop - first < 1 or (first, stop) == self.rows_shown:
            return
        self._set_window(first, stop)
        self.redraw()

    def _show_image(self) -> None:
        first, stop = self.rows_shown
        image = self.pooled[:, :self.columns]
        if image.shape[1] == 0 or stop <= first:
            self.image.clear()
        else:
            self.image.setImage(image, autoLevels=False, levels=(-self.limit, self.limit))
            self.image.setRect(-0.5, first, image.shape[1], stop - first)
        self._show_ticks()
        self.placeholder.setVisible(not self.columns)
        if not self.columns:
            # Nothing to fit: the auto range centred an empty run on 0 (tokens -8 to 7).
            box = self.plot.getViewBox()
            box.disableAutoRange()
            box.setXRange(0, EMPTY_TOKENS, padding=0)
            self._fitted = False
        elif not self._fitted:
            self.plot.getViewBox().enableAutoRange()
            self._fitted = True
        self.token_line.setValue(self._index)
        self.token_line.setVisible(self._index >= 0)
        self.plot.viewport().update()

    def _show_ticks(self) -> None:
        """The order's band labels beside a drawn run; none beside an empty raster (a
        leftover superclass label named rows that were not there)."""
        ticks = self._band_ticks if self.columns else [[], []]
        if ticks != self._ticks_drawn:
            self.plot.getAxis("left").setTicks(ticks)
            self._ticks_drawn = ticks

    # ------------------------------------------------------------ pointing
    def cell_at(self, scene_pos: QPointF) -> tuple[int, int] | None:
        """``(neuron, token)`` under a scene position: the neuron that drew that pixel."""
        if self.pooler is None or self.order is None or not self.columns:
            return None
        point = self.plot.getViewBox().mapSceneToView(scene_pos)
        token = int(round(point.x()))
        rank = int(np.floor(point.y()))
        first, stop = self.rows_shown
        if not (0 <= token < self.columns and first <= rank < stop):
            return None
        row = int(np.searchsorted(self.pooler.edges, rank - first, side="right") - 1)
        neurons = self.neurons_in_row(row)
        if neurons.size > 1 and self._recording is not None:
            values = shown_states(self._recording, self.view, token, token + 1, neurons)[0]
            return int(neurons[int(np.argmax(np.abs(values)))]), token
        return int(neurons[0]), token

    def neurons_in_row(self, row: int) -> np.ndarray:
        """The neurons pooled into pixel row ``row`` of the image."""
        if self.pooler is None:
            return np.zeros(0, dtype=np.int64)
        return self._neurons_shown[self.pooler.neurons_in_row(row)]

    def _on_moved(self, scene_pos: QPointF) -> None:
        cell = self.cell_at(scene_pos)
        if cell is None:
            self.hover.setText("")
            return
        neuron, token = cell
        text = ""
        if self._recording is not None and token < len(self._recording):
            text = repr(self._recording[token].input_text)
        self.hover.setText(f"neuron #{neuron} · token {token} {text}")

    def _on_clicked(self, event: Any) -> None:
        if event.button() != Qt.MouseButton.LeftButton:
            return
        cell = self.cell_at(event.scenePos())
        if cell is not None:
            self.neuron_clicked.emit(*cell)

    def _place_placeholder(self, *_: Any) -> None:
        area = self.plot.getViewBox().sceneBoundingRect()
        self.placeholder.setGeometry(self.plot.mapFromScene(area).boundingRect())

    def resizeEvent(self, event: Any) -> None:  # noqa: N802 - Qt API
        super().resizeEvent(event)
        first, stop = self.rows_shown
        if self.order is not None and self.pooler is not None \
                and abs(self.pixel_rows() - self.pooler.rows) > 8 \
                and self.pooler.rows < stop - first:
            self._set_window(first, stop)
            self.redraw()


# ----------------------------------------------------------------------------- feature
class PopulationFeature(QObject):
    """The two population docks wired to the window's viewer state."""

    #: The :class:`~flyviz.app.base.background.BackgroundCalls` purpose of the similarity sort.
    SORT = "population-sort"

    def __init__(self, host: "WindowHost") -> None:
        super().__init__(host.widget())
        self.host = host
        self.state: ViewerState = host.state
        self.raster = WholeBrainRaster()
        self.cell_types = CellTypePanel()
        area = Qt.DockWidgetArea.BottomDockWidgetArea
        self.raster_dock = host.docks.add("population", "Whole brain", self.raster, area)
        self.cell_type_dock = host.docks.add("cell_types", "Cell types", self.cell_types, area)
        host.docks.tabify("raster", self.raster_dock)
        # Both in the raster's tabs: side by side their widths (two rows of menus) made the
        # window wider than a 1024-pixel screen; View → Layout → Analysis shows both at once.
        host.docks.tabify("raster", self.cell_type_dock)
        self._anatomy: Any = None
        self.refresher = Coalescer(self.refresh, REFRESH_HZ, self)
        events = self.state.events
        events.model.connect(self._on_model)
        for signal in (events.recording, events.frames_appended, events.index):
            signal.connect(lambda *_: self.refresher.poke())
        self.raster.order_requested.connect(self.choose_order)
        # What a comparison shows is the state's (a script sets it there); the menu is its view.
        docks = self.state.docks
        self._show_view(docks.population_view)
        self.raster.view_box.currentIndexChanged.connect(
            lambda _i: setattr(docks, "population_view", str(self.raster.view_box.currentData())))
        docks.events.population_view.connect(self._on_view)
        self.raster.neuron_clicked.connect(self._on_neuron_clicked)
        self.cell_types.group_clicked.connect(self.highlight_group)
        # The rows a finished run is left with are its whole run's order, not its streaming's.
        host.runner.events.ended.connect(lambda *_: self.cell_types.sort_whole_run())
        # Thousands of cell types take seconds to sort: off the UI thread.
        self.cell_types.background = lambda work, done: host.background.run(
            "population-cell-types", work, done, lambda message: host.show_message(message, True))
        self._on_model()

    # ------------------------------------------------------------ following the state
    def refresh(self) -> None:
        """Show the state's recording and token in both docks, now."""
        recording, index = self.state.recording, self.state.index
        self.raster.show_frame(recording, index)
        self.cell_types.show_frame(recording, index)
        self._follow_view_reset()

    def _show_view(self, view: str) -> None:
        """Choose ``view`` in the raster's *Show* menu (without telling the state back)."""
        box = self.raster.view_box
        blocked = box.blockSignals(True)
        box.setCurrentIndex(box.findData(view))
        box.blockSignals(blocked)

    def _on_view(self, view: str) -> None:
        if self.raster.view_box.currentData() != view:
            self._show_view(view)
            self.raster.redraw()

    def _follow_view_reset(self) -> None:
        """A single run puts the menu back to the intervened run: the state follows."""
        shown = str(self.raster.view_box.currentData())
        if shown != self.state.docks.population_view:
            self.state.docks.population_view = shown

    def _on_model(self) -> None:
        anatomy = self.state.anatomy
        self._anatomy = anatomy
        self.host.background.cancel(self.SORT)
        # The previous model's run means nothing for this one's neurons (nor fits them).
        self.raster.show_frame(self.state.recording, self.state.index)
        self.cell_types.show_frame(self.state.recording, self.state.index)
        self._follow_view_reset()
        cell_type = None if anatomy is None else anatomy.cell_type
        superclass = None if anatomy is None else anatomy.superclass
        self.cell_types.set_anatomy(cell_type, superclass)
        self.choose_order("anatomy")

    def _show_order_choice(self, name: str) -> None:
        box = self.raster.order_box
        box.blockSignals(True)
        box.setCurrentIndex(max(0, box.findData(name)))
        box.blockSignals(False)

    def choose_order(self, name: str) -> None:
        """Order the raster's rows by ``"anatomy"``, ``"similarity"`` or ``"importance"``
        (the similarity sort runs off the UI thread; the rows shown stay until it is done)."""
        # The menu shows the order drawn; a refused choice goes back to it.
        self._show_order_choice(name)
        shown = "anatomy" if self.raster.order is None else self.raster.order.name
        n = self.state.neurons
        if n == 0:
            self.raster.set_order(None)
            return
        if name == "similarity":
            recording = self.state.recording
            if len(recording) < 2:
                self.host.show_message("sorting by similarity needs a run of two tokens or more")
                self._show_order_choice(shown)
                return
            states = shown_states(recording, self.raster.view)
            self.host.show_message(f"sorting {n:,} neurons by similarity…")

            def failed(message: str) -> None:
                self.host.show_message(message, True)
                self._show_order_choice(shown)

            self.host.background.run(self.SORT, lambda: similarity_order(states), self._sorted,
                                     failed)
            return
        if name == "importance":
            layer = self.state.layer_override      # a lesion map's, an atlas's...
            values = None if layer is None or len(self.state.recording) == 0 \
                else layer.values(self.state.recording, max(self.state.index, 0))
            if values is None:
                self.host.show_message("ordering by importance needs a colour layer (View → "
                                       "Colour by, e.g. a lesion map's importance)")
                self._show_order_choice(shown)
                return
            self.raster.set_order(importance_order(np.asarray(values)))
            return
        anatomy = self._anatomy
        self.raster.set_order(anatomy_order(
            None if anatomy is None else anatomy.superclass,
            None if anatomy is None else anatomy.cell_type, n=n))
        self.raster.show_frame(self.state.recording, self.state.index)

    def _sorted(self, order: RowOrder) -> None:
        if order.order.size != self.state.neurons:
            return     # the sort of an earlier model
        self.raster.set_order(order)
        self._show_order_choice("similarity")
        self.host.show_message(f"rows sorted by similarity ({len(order.bands)} groups)")

    # ------------------------------------------------------------ user actions
    def _on_neuron_clicked(self, neuron: int, token: int) -> None:
        if 0 <= token < len(self.state.recording):
            self.state.index = token
        self.host.state.select(neuron)

    def highlight_group(self, name: str) -> None:
        """Light the neurons of the group ``name`` (a cell type or superclass) in the brain."""
        labels = self.cell_types.group_labels()
        if labels is None:
            return
        mask = np.array([(lab or "unlabelled") == name for lab in labels], dtype=bool)
        self.host.state.highlights.set(CELL_TYPE_HIGHLIGHT, mask)
        self.host.show_message(f"{name}: {int(mask.sum()):,} neurons lit")


def install(host: "WindowHost") -> PopulationFeature:
    """Add the whole-brain raster and cell-type docks to the window ``host``."""
    return PopulationFeature(host)
