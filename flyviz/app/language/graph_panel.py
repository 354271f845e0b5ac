"""The *Why?* feature's **Graph** dock: the pruned attribution graph as a scatter.

Position on x, the superclass (or cell type) on y; each kept node sized by
``|flow|`` and coloured by its sign (red adds to L, blue takes from it); hovering
names the neuron, clicking selects it; *cell-type supernodes* draws each cell type
at each position as one ringed node (their flows summed) that expands into its
neurons on a click. :mod:`flyviz.app.language.why_panel` wires it into the window.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPoint, QPointF, Signal
from PySide6.QtWidgets import QCheckBox, QComboBox, QHBoxLayout, QLabel, QVBoxLayout, QWidget

from flyviz.app.base.plots import PlotWidget
from flyviz.app.population.plot_axes import next_step
from flyviz.app.base.theme import NEGATIVE, POSITIVE

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.model.explain import Attribution
    from flyviz.model.explain_graph import Graph



def graph_rows(attribution: "Attribution", graph: "Graph", by: str) -> tuple[list[str], np.ndarray]:
    """``(names, row)``: the y categories (sorted labels of the kept neurons) and each node's."""
    labels = attribution.labels(by)
    node_labels = [labels[int(n)] for n in graph.neurons]
    names = sorted(set(node_labels))
    index = {name: i for i, name in enumerate(names)}
    return names, np.array([index[name] for name in node_labels], dtype=np.float64)


#: The largest and smallest node diameters, in pixels (the largest |flow| and none).
MAX_NODE_PX = 28.0
MIN_NODE_PX = 6.0

#: What the Graph panel says while it shows no trace.
NO_GRAPH = "Press W (Run → Why this token?) to trace the shown token."


def position_ticks(first: int, last: int, most: int = 8) -> list[tuple[float, str]]:
    """Ticks for the positions ``first .. last``: whole positions only (pyqtgraph's own ticks
    read "21.6, 21.8, 22.0" on a graph of one position), at most ``most`` of them, on a
    1–2–5 step."""
    step = 1
    while (last - first) // step + 1 > most:
        step = int(next_step(step))
    ticks = [(float(p), str(p)) for p in range(first, last + 1) if p % step == 0]
    return ticks or [(float(last), str(last))]


class GraphPanel(QWidget):
    """The Graph dock: the kept nodes of the pruned graph, position × superclass or cell type.

    Signals
    -------
    neuron_clicked(neuron)
        A node was clicked (its neuron index).
    """

    neuron_clicked = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        # The status above the controls, across the dock: beside them, in a dock a third of
        # a laptop screen wide, it wrapped to eight lines and took the plot's height.
        self.status = QLabel(NO_GRAPH)
        self.status.setWordWrap(True)
        layout.addWidget(self.status)
        row = QHBoxLayout()
        self.rows_by = QComboBox()
        self.rows_by.addItem("by superclass", "superclass")
        self.rows_by.addItem("by cell type", "cell_type")
        self.rows_by.setToolTip("What the rows of the graph group the neurons by")
        self.rows_by.currentIndexChanged.connect(lambda _i: self._draw())
        row.addWidget(self.rows_by)
        self.supernodes = QCheckBox("cell-type supernodes")
        self.supernodes.setToolTip("Draw the neurons of one cell type at one position as one "
                                   "node (ringed); click one to expand it")
        self.supernodes.toggled.connect(self._on_grouping)
        row.addWidget(self.supernodes)
        row.addStretch(1)
        layout.addLayout(row)
        self.plot = PlotWidget(enableMenu=False)   # no menu, none built
        self.plot.setLabel("bottom", "position (token read)")
        self.plot.showGrid(x=True, y=False, alpha=0.2)
        self.scatter = pg.ScatterPlotItem(hoverable=True, tip=self._tip, pxMode=True,
                                          hoverPen=pg.mkPen("w", width=2))
        self.scatter.sigClicked.connect(self._on_clicked)
        self.plot.addItem(self.scatter)
        layout.addWidget(self.plot, 1)
        self.attribution: "Attribution | None" = None
        self.graph: "Graph | None" = None
        self.rows = np.zeros(0)
        #: Each node's x as drawn (its position, moved inside the position's cell).
        self.columns = np.zeros(0)
        self.row_names: list[str] = []
        # The layout depends on the plot's size in pixels: laid out again on a resize.
        self.plot.getPlotItem().getViewBox().sigResized.connect(self._draw)
        #: What is drawn: ``(supernode key (position, cell type) or None, graph node indices)``.
        self.items: list[tuple[tuple[int, str] | None, np.ndarray]] = []
        #: The supernodes the user expanded.
        self.expanded: set[tuple[int, str]] = set()

    def _cell_px(self, columns: int, rows: int) -> tuple[float, float]:
        """The width and height in pixels of one position × row cell of the plot."""
        box = self.plot.getPlotItem().getViewBox()
        # The ranges _draw sets: the columns ± 0.5 and the rows ± 0.5, padded 2 %.
        return (max(1.0, box.width() / (1.04 * max(columns, 1))),
                max(1.0, box.height() / (1.04 * max(rows, 1))))

    def _spread(self, x: np.ndarray, y: np.ndarray, columns: int,
                rows: int) -> tuple[np.ndarray, np.ndarray, float]:
        """The items of one position and row laid out on a grid inside their cell, and the
        largest node diameter (pixels) at which no two nodes overlap: all nodes of a row at
        one position were drawn in one pile, up to 28 px wide, past the plot's edge."""
        cell_w, cell_h = self._cell_px(columns, rows)
        x, y = x.copy(), y.copy()
        spacing = MAX_NODE_PX / 0.9
        cells: dict[tuple[float, float], np.ndarray] = {}
        for key in set(zip(x.tolist(), y.tolist())):
            cells[key] = np.flatnonzero((x == key[0]) & (y == key[1]))
        for (cx, cy), same in cells.items():
            m = same.size
            # As many columns as keep the grid's cells about square in pixels.
            across = max(1, min(m, int(np.ceil(np.sqrt(m * cell_w / cell_h)))))
            down = int(np.ceil(m / across))
            step_w, step_h = cell_w / across, cell_h / down
            spacing = min(spacing, step_w, step_h)
            k = np.arange(m)
            x[same] = cx + ((k % across) + 0.5) / across - 0.5
            y[same] = cy + ((k // across) + 0.5) / down - 0.5
        return x, y, float(min(MAX_NODE_PX, 0.9 * spacing))

    def _on_grouping(self, _on: bool) -> None:
        self.expanded.clear()
        self._draw()

    def set_graph(self, attribution: "Attribution | None", graph: "Graph | None") -> None:
        """Show ``graph`` (``None``: nothing)."""
        self.attribution, self.graph = attribution, graph
        self.expanded.clear()
        self._draw()

    @property
    def by(self) -> str:
        """What the rows group the neurons by (``superclass`` or ``cell_type``)."""
        return str(self.rows_by.currentData())

    def _draw(self) -> None:
        att, graph = self.attribution, self.graph
        self.scatter.clear()
        self.items = []
        if att is None or graph is None or not len(graph.neurons):
            self.rows, self.columns, self.row_names = np.zeros(0), np.zeros(0), []
            # No numbers on an empty plot (the last graph's range read "49.6, 49.8, 50.0").
            self.plot.getAxis("left").setTicks([[]])
            self.plot.getAxis("bottom").setTicks([[]])
            # Without a trace (a new run, Reset) the caption says how to make one.
            self.status.setText("The pruned graph keeps no neuron node." if att is not None
                                else NO_GRAPH)
            return
        names, rows = graph_rows(att, graph, self.by)
        positions = graph.positions.astype(np.int64)
        flows = np.asarray(graph.flows, dtype=np.float64)
        # What is drawn: single nodes, or the cell types' supernodes (one per position)
        # that the user has not expanded.
        items: list[tuple[tuple[int, str] | None, np.ndarray]] = []
        if self.supernodes.isChecked():
            cell_types = att.labels("cell_type")
            groups: dict[tuple[int, str], list[int]] = {}
            for k, neuron in enumerate(graph.neurons):
                groups.setdefault((int(positions[k]), cell_types[int(neuron)]), []).append(k)
            for key, members in groups.items():
                if len(members) > 1 and key not in self.expanded:
                    items.append((key, np.array(members)))
                else:
                    items.extend((None, np.array([k])) for k in members)
        else:
            items = [(None, np.array([k])) for k in range(len(flows))]
        self.items = items
        x = np.array([positions[m[0]] for _, m in items], dtype=np.float64)
        y = np.array([rows[m[0]] for _, m in items], dtype=np.float64)
        # The columns from the earliest position that holds a node to the traced one: the
        # kept nodes of a late token sit at its last few positions, and framed on the whole
        # window (64 positions) they were one unreadable pile a few pixels wide.
        first = min(int(positions.min()), att.position)
        columns = att.position - first + 1
        x, y, diameter = self._spread(x, y, columns, len(names))
        self.rows = np.zeros(len(flows))
        self.columns = np.zeros(len(flows))
        for i, (_, part) in enumerate(items):
            self.rows[part] = y[i]
            self.columns[part] = x[i]
        self.row_names = names
        item_flows = np.array([flows[m].sum() for _, m in items])
        top = float(np.abs(item_flows).max()) or 1.0
        smallest = min(MIN_NODE_PX, diameter)
        sizes = smallest + (diameter - smallest) * np.sqrt(np.abs(item_flows) / top)
        brushes = [pg.mkBrush(*(POSITIVE if f > 0 else NEGATIVE), 220) for f in item_flows]
        pens = [pg.mkPen("w", width=1.5) if key is not None else pg.mkPen(None)
                for key, _ in items]
        self.scatter.setData(x=x, y=y, size=sizes, brush=brushes, pen=pens,
                             data=list(range(len(items))))
        self.plot.getAxis("left").setTicks([list(enumerate(names))])
        self.plot.setXRange(first - 0.5, att.position + 0.5, padding=0.02)
        self.plot.getAxis("bottom").setTicks([position_ticks(first, att.position)])
        self.plot.setYRange(-0.5, len(names) - 0.5, padding=0.02)
        grouped = sum(key is not None for key, _ in items)
        self.status.setText(f"{len(flows)} neuron nodes kept of the graph explaining "
                            f"{att.target_text!r} at position {att.position}"
                            + (f", {grouped} cell-type supernodes (ringed; click to expand)"
                               if grouped else "")
                            + "; red adds to L, blue takes from it. Click a node to select "
                            "its neuron.")

    # ------------------------------------------------------------ nodes
    def node_tip(self, k: int) -> str:
        """What hovering node ``k`` says: the neuron, its labels, position and flow."""
        att, graph = self.attribution, self.graph
        if att is None or graph is None or not 0 <= k < len(graph.neurons):
            return ""
        neuron, position = int(graph.neurons[k]), int(graph.positions[k])
        cell_type = att.labels("cell_type")[neuron]
        superclass = att.labels("superclass")[neuron]
        token = att.token_texts[position] if position < len(att.token_texts) else ""
        return (f"neuron {neuron} · {cell_type} ({superclass})\n"
                f"position {position} (after {token!r})\nflow {float(graph.flows[k]):+.4f} "
                "(units of L)")

    def item_tip(self, i: int) -> str:
        """What hovering drawn item ``i`` says (a node's neuron, or a supernode's group)."""
        if not 0 <= i < len(self.items) or self.graph is None:
            return ""
        key, members = self.items[i]
        if key is None:
            return self.node_tip(int(members[0]))
        flow = float(np.asarray(self.graph.flows, dtype=np.float64)[members].sum())
        return (f"cell type {key[1]} at position {key[0]}: {len(members)} neurons\n"
                f"flow {flow:+.4f} (units of L); click to expand")

    def _tip(self, x: float, y: float, data: Any) -> str:
        return self.item_tip(int(data))

    def item_widget_pos(self, i: int) -> QPoint:
        """Where drawn item ``i`` is, in the plot widget's coordinates (tests click there)."""
        key, members = self.items[i]
        return self.node_widget_pos(int(members[0]))

    def node_widget_pos(self, k: int) -> QPoint:
        """Where node ``k`` is drawn, in the plot widget's coordinates (tests click there)."""
        assert self.graph is not None
        vb = self.plot.getPlotItem().getViewBox()
        scene = vb.mapViewToScene(QPointF(float(self.columns[k]), float(self.rows[k])))
        return self.plot.mapFromScene(scene)

    def _on_clicked(self, _item: Any, points: Any, _ev: Any = None) -> None:
        if self.graph is None or points is None or not len(points):
            return
        key, members = self.items[int(points[0].data())]
        if key is not None:                 # a supernode: show its neurons
            self.expanded.add(key)
            self._draw()
            return
        self.neuron_clicked.emit(int(self.graph.neurons[int(members[0])]))


__all__ = ["GraphPanel", "NEGATIVE", "POSITIVE", "graph_rows"]
