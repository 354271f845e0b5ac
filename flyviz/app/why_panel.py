"""*Why?* in the app: which earlier words and which neurons made the shown token.

Run → *Why this token?* (key ``W``, the *Why?* dock's button, or a right-click
on a generated word in the Text panel) traces the shown frame's prediction through the connectome
(:func:`flyviz.record.trace.trace`, the exact decomposition of
``L = logit[token] - mean(logits)``) off the UI thread, with progress and
Cancel. The result:

* a **flow** colour layer (View → Colour by → Flow): every neuron coloured by
  its node flow ``f_i(t)`` on the diverging ``difference`` colormap, symmetric
  about 0 over the largest ``|f|`` at the shown step, captioned
  "flow (units of L)";
* the *Why?* dock's **lag** slider: the layer shows ``f(P - lag)``, so the
  signal can be followed backwards through the window, step by step;
* the Text panel shades each input token by its flow (red adds to L, blue takes
  from it; hover shows the value);
* the strongest synapses into the shown step drawn as lines between the
  somas in the brain view (bright: a large edge flow; red adds to L, blue
  takes from it), following the lag slider;
* the **Graph** dock: the pruned attribution graph as a scatter, the position
  on x and the superclass (or cell type) on y, each node sized by ``|flow|``
  and coloured by its sign; hovering names the neuron, clicking selects it;
  *cell-type supernodes* draws each cell type at each position as one ringed
  node (their flows summed) that expands into its neurons on a click.

The trace runs on a model of its own (its own engine), so it never disturbs a
run that is going on; the shown recording is traced from a frozen snapshot.
"""

from __future__ import annotations

import html
import threading
from typing import TYPE_CHECKING, Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, QObject, QPoint, QPointF, Qt, Signal
from PySide6.QtWidgets import (QCheckBox, QComboBox, QHBoxLayout, QLabel, QProgressBar, QPushButton,
                               QSlider, QVBoxLayout, QWidget)

from flyviz.model.errors import InputError
from flyviz.record.trace import trace
from flyviz.render.style import ColourLayer
from flyviz.viewer.flow import FLOW, flow_layer

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.app.host import WindowHost
    from flyviz.model.explain import Attribution
    from flyviz.model.explain_graph import Graph
    from flyviz.record.runner import Model

#: The :class:`~flyviz.app.background.BackgroundCalls` purpose of a trace.
PURPOSE = "why"

#: Steps back a trace sweeps (the lag slider's range); longer runs keep their last ones.
WINDOW = 64

#: Most neuron nodes in the Graph dock (the pruning's node cap).
GRAPH_NODES = 200

#: Synapses drawn as lines in the brain view (the strongest by |edge flow| at the shown step).
SYNAPSE_LINES = 40

#: Colours of the graph's nodes: adds to L, takes from it (the flow colormap's hues).
POSITIVE = (240, 50, 90)
NEGATIVE = (80, 90, 250)


def graph_rows(attribution: "Attribution", graph: "Graph", by: str) -> tuple[list[str], np.ndarray]:
    """``(names, row)``: the y categories (sorted labels of the kept neurons) and each node's."""
    labels = attribution.labels(by)
    node_labels = [labels[int(n)] for n in graph.neurons]
    names = sorted(set(node_labels))
    index = {name: i for i, name in enumerate(names)}
    return names, np.array([index[name] for name in node_labels], dtype=np.float64)


def synapse_segments(attribution: "Attribution", position: int, positions: np.ndarray,
                     visible: np.ndarray, top: int = SYNAPSE_LINES
                     ) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """``(points, colours, edges)``: the ``top`` synapses into ``position`` by ``|flow|``
    whose two somas are drawn, as line segments (``2 k`` points, pre then post) with an
    RGBA per point (alpha grows with ``|flow|``)."""
    edges = attribution.step_edge_flows(position, top=top)
    keep = visible[edges["pre"]] & visible[edges["post"]] & (edges["pre"] != edges["post"])
    edges = {key: value[keep] for key, value in edges.items()}
    flows = edges["flow"]
    if not flows.size:
        return np.zeros((0, 3), np.float32), np.zeros((0, 4), np.float32), edges
    points = np.empty((2 * flows.size, 3), np.float32)
    points[0::2] = positions[edges["pre"]]
    points[1::2] = positions[edges["post"]]
    strength = np.abs(flows) / float(np.abs(flows).max())
    colours = np.empty((flows.size, 4), np.float32)
    colours[:, :3] = np.where((flows > 0)[:, None], np.array(POSITIVE) / 255.0,
                              np.array(NEGATIVE) / 255.0)
    colours[:, 3] = 0.1 + 0.6 * strength
    return points, np.repeat(colours, 2, axis=0), edges


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
        row = QHBoxLayout()
        self.status = QLabel("Press W (Run → Why this token?) to trace the shown token.")
        self.status.setWordWrap(True)
        row.addWidget(self.status, 1)
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
        layout.addLayout(row)
        self.plot = pg.PlotWidget()
        self.plot.setMenuEnabled(False)
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
        self.row_names: list[str] = []
        #: What is drawn: ``(supernode key (position, cell type) or None, graph node indices)``.
        self.items: list[tuple[tuple[int, str] | None, np.ndarray]] = []
        #: The supernodes the user expanded.
        self.expanded: set[tuple[int, str]] = set()

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
            self.rows, self.row_names = np.zeros(0), []
            self.plot.getAxis("left").setTicks(None)
            if att is not None:
                self.status.setText("The pruned graph keeps no neuron node.")
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
        # Items of one row at one position side by side, a little apart.
        base = y.copy()
        for key in set(zip(x.tolist(), base.tolist())):
            same = np.flatnonzero((x == key[0]) & (base == key[1]))
            if same.size > 1:
                y[same] += np.linspace(-0.3, 0.3, same.size)
        self.rows = np.zeros(len(flows))
        for i, (_, part) in enumerate(items):
            self.rows[part] = y[i]
        self.row_names = names
        item_flows = np.array([flows[m].sum() for _, m in items])
        top = float(np.abs(item_flows).max()) or 1.0
        sizes = 6.0 + 22.0 * np.sqrt(np.abs(item_flows) / top)
        brushes = [pg.mkBrush(*(POSITIVE if f > 0 else NEGATIVE), 220) for f in item_flows]
        pens = [pg.mkPen("w", width=1.5) if key is not None else pg.mkPen(None)
                for key, _ in items]
        self.scatter.setData(x=x, y=y, size=sizes, brush=brushes, pen=pens,
                             data=list(range(len(items))))
        self.plot.getAxis("left").setTicks([list(enumerate(names))])
        self.plot.setXRange(att.window_start - 0.5, att.position + 0.5, padding=0.02)
        self.plot.setYRange(-0.6, len(names) - 0.4, padding=0.02)
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
        scene = vb.mapViewToScene(QPointF(float(self.graph.positions[k]), float(self.rows[k])))
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


class WhyPanel(QWidget):
    """The *Why?* dock: what was traced, the progress and Cancel, and the lag slider.

    Signals
    -------
    why_requested()
        Trace the shown token.
    cancel_requested()
        Stop the trace going on.
    lag_changed(lag)
        Show the flows ``lag`` steps before the traced one.
    """

    why_requested = Signal()
    cancel_requested = Signal()
    lag_changed = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        self.status = QLabel("Why did the model choose the shown token? Press W, or:")
        self.status.setWordWrap(True)
        layout.addWidget(self.status)
        row = QHBoxLayout()
        self.why_button = QPushButton("Why this token?")
        self.why_button.setToolTip("Trace the shown token's prediction back through the "
                                   "connectome (W)")
        self.why_button.clicked.connect(self.why_requested.emit)
        self.progress = QProgressBar()
        self.progress.setRange(0, 100)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setToolTip("Stop the trace")
        self.cancel_button.clicked.connect(self.cancel_requested.emit)
        row.addWidget(self.why_button)
        row.addWidget(self.progress, 1)
        row.addWidget(self.cancel_button)
        layout.addLayout(row)
        lag_row = QHBoxLayout()
        lag_row.addWidget(QLabel("lag"))
        self.lag = QSlider(Qt.Orientation.Horizontal)
        self.lag.setToolTip("Steps back from the traced token: watch the signal travel "
                            "backwards through the brain")
        self.lag.valueChanged.connect(self.lag_changed.emit)
        lag_row.addWidget(self.lag, 1)
        self.lag_label = QLabel("")
        self.lag_label.setMinimumWidth(150)
        lag_row.addWidget(self.lag_label)
        layout.addLayout(lag_row)
        self.synapses = QCheckBox(f"draw the {SYNAPSE_LINES} strongest synapses")
        self.synapses.setChecked(True)
        self.synapses.setToolTip("Lines between the somas of the synapses that carry most of "
                                 "the logit into the shown step (bright: a large flow)")
        layout.addWidget(self.synapses)
        self.tops = QLabel("")
        self.tops.setWordWrap(True)
        self.tops.setTextFormat(Qt.TextFormat.RichText)
        layout.addWidget(self.tops)
        layout.addStretch(1)
        self.set_busy(False)
        self.set_window(0)

    def set_busy(self, busy: bool) -> None:
        """Show the progress and Cancel while a trace runs."""
        self.progress.setVisible(busy)
        self.cancel_button.setVisible(busy)
        self.why_button.setEnabled(not busy)
        if busy:
            self.progress.setValue(0)

    def set_window(self, steps: int) -> None:
        """The lag slider's range: ``0 .. steps - 1`` (0 steps: nothing traced)."""
        self.lag.blockSignals(True)
        self.lag.setRange(0, max(0, steps - 1))
        self.lag.setValue(0)
        self.lag.blockSignals(False)
        self.lag.setEnabled(steps > 1)


class WhyFeature(QObject):
    """*Why?* wired into the window: the action, the trace job, the flow layer, the docks.

    Signals
    -------
    traced(attribution)
        A trace finished (its :class:`~flyviz.model.explain.Attribution`).
    cancelled()
        A trace was cancelled.
    """

    traced = Signal(object)
    cancelled = Signal()
    _progress = Signal(float)

    def __init__(self, host: "WindowHost") -> None:
        super().__init__(host.widget())
        self.host = host
        self.attribution: "Attribution | None" = None
        self.graph: "Graph | None" = None
        self.lag = 0
        self._model: "Model | None" = None
        self._model_of: Any = None
        self._stop: threading.Event | None = None
        #: Set while a trace's thread runs (its model must not be closed under it).
        self._running = threading.Event()
        self._retired: list["Model"] = []
        #: The synapses drawn as lines now (``{"pre", "post", "flow"}``), or None.
        self.synapse_edges: dict[str, np.ndarray] | None = None
        self._lines: Any = None
        self._steps = 1
        self.panel = WhyPanel()
        self.graph_panel = GraphPanel()
        area = Qt.DockWidgetArea
        self.dock = host.add_dock("why", "Why?", self.panel, area.LeftDockWidgetArea,
                                  scroll=True)
        host.tabify_dock("controls", self.dock)
        self.graph_dock = host.add_dock("graph", "Graph", self.graph_panel,
                                        area.BottomDockWidgetArea)
        host.tabify_dock("raster", self.graph_dock)
        registry = host.actions_registry
        self.action = registry.add("why", "&Why this token?", self.why, "W",
                                   "Trace the shown token back through the connectome: which "
                                   "words, neurons and synapses made it")
        registry.menu("Run").addAction(self.action)
        host.colour_by.add(FLOW, "&Flow (Why?)", self.flow_layer,
                           "Colour every neuron by the part of the traced logit it carries",
                           enabled=False)
        p = self.panel
        p.why_requested.connect(self.why)
        p.cancel_requested.connect(self.cancel)
        p.lag_changed.connect(self.set_lag)
        p.synapses.toggled.connect(lambda _on: self._draw_synapses())
        self.graph_panel.neuron_clicked.connect(host.select_neuron)
        host.text_panel.why_requested.connect(self.why_at)
        # The window's close waits for background calls: stop a trace first.
        host.widget().installEventFilter(self)
        self._progress.connect(self._on_progress)
        host.model_ready.connect(lambda _name: self._forget("a new model is loaded"))
        host.state.events.recording.connect(lambda: self._forget(""))

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt API
        if event.type() == QEvent.Type.Close and self._stop is not None:
            self._stop.set()
        return False

    # ------------------------------------------------------------ tracing
    @property
    def busy(self) -> bool:
        """True while a trace runs."""
        return self.host.background.busy(PURPOSE)

    def _trace_model(self) -> "Model":
        """A model of the loaded checkpoint with an engine of its own (runs keep theirs)."""
        from flyviz.record.runner import Model

        bundle = self.host.bundle
        assert bundle is not None
        if self._model is None or self._model_of is not bundle.checkpoint:
            self._close_model()
            self._model = Model(bundle.checkpoint, tokenizer=bundle.tokenizer,
                                spec=bundle.model.spec, threads=1)
            self._model_of = bundle.checkpoint
        return self._model

    def why(self) -> bool:
        """Trace the shown token's prediction (off the UI thread); False if it cannot start."""
        host = self.host
        state = host.state
        if host.bundle is None:
            host.show_message("load a model and run a prompt first", error=True)
            return False
        index = state.index
        if index < 0:
            host.show_message("run a prompt first: Why? explains the shown token", error=True)
            return False
        if self.busy:
            return False
        recording = state.snapshot()
        if recording.baseline is not None:
            host.show_message("Why? traces one run; show a run without a comparison",
                              error=True)
            return False
        model = self._trace_model()
        stop = threading.Event()
        self._stop = stop
        first = max(0, index - WINDOW + 1)
        self._steps = index - first + 1
        steps = self._steps
        counter = [0]
        progress = self._progress

        def should_stop() -> bool:
            counter[0] += 1
            progress.emit(min(1.0, counter[0] / steps))
            return stop.is_set()

        running = self._running
        running.set()

        def work() -> Any:
            try:
                att = trace(model, recording, position=index, window=WINDOW,
                            should_stop=should_stop)
                return att, att.graph(nodes=GRAPH_NODES)
            except InterruptedError:
                return None
            finally:
                running.clear()

        predicted = recording[index].predicted_text
        self.panel.set_busy(True)
        self.panel.status.setText(f"tracing {predicted!r} at position {index}…")
        host.show_message(f"tracing why the model chose {predicted!r} at position {index}…")
        host.background.run(PURPOSE, work, self._on_done, self._on_failed)
        return True

    def why_at(self, frame: int) -> bool:
        """Show frame ``frame`` and trace its prediction (the Text panel's *Why this token?*)."""
        state = self.host.state
        if not 0 <= frame < len(state.recording):
            return False
        state.index = int(frame)
        return self.why()

    def cancel(self) -> None:
        """Stop the trace going on (its result, if it still comes, is dropped)."""
        if self._stop is not None:
            self._stop.set()
        if self.busy:
            self.host.background.cancel(PURPOSE)
            self._on_cancelled()

    def _on_progress(self, fraction: float) -> None:
        if self.busy:
            self.panel.progress.setValue(int(round(100 * fraction)))

    def _on_cancelled(self) -> None:
        self.panel.set_busy(False)
        self.panel.status.setText("trace cancelled")
        self.host.show_message("trace cancelled")
        self.cancelled.emit()

    def _on_failed(self, message: str) -> None:
        self.panel.set_busy(False)
        self.panel.status.setText(f"cannot trace: {message}")
        self.host.show_message(f"cannot trace: {message}", error=True)

    def _on_done(self, result: Any) -> None:
        if result is None:
            self._on_cancelled()
            return
        att, graph = result
        self.panel.set_busy(False)
        self.show(att, graph)

    # ------------------------------------------------------------ showing
    def show(self, attribution: "Attribution", graph: "Graph | None" = None) -> None:
        """Show ``attribution``: flow layer at lag 0, token shading, the graph."""
        self.attribution = attribution
        self.graph = graph
        self.lag = 0
        self.panel.set_window(len(attribution.positions))
        self._describe()
        self.host.text_panel.set_flows(list(attribution.token_flows))
        self.graph_panel.set_graph(attribution, graph)
        self._draw_synapses()
        colour_by = self.host.colour_by
        colour_by.set_enabled((FLOW,), True)
        if colour_by.current == FLOW:
            colour_by.refresh(FLOW)
        else:
            colour_by.choose(FLOW)
        self.host.show_dock(self.dock)
        self.host.show_dock(self.graph_dock, 0.35)     # rows need the height
        error = attribution.completeness_error
        self.host.show_message(
            f"why {attribution.target_text!r}: L = {attribution.value:+.4f}; the brain shows "
            "each neuron's flow, the text each word's"
            + ("" if error is None else f" (completeness error {error:.1e})"))
        self.traced.emit(attribution)

    def flow_layer(self) -> ColourLayer:
        """The flow layer at the lag shown (see :func:`flow_layer`)."""
        if self.attribution is None:
            raise InputError("trace a token first (Run → Why this token?)")
        return flow_layer(self.attribution, self.lag)

    def set_lag(self, lag: int) -> None:
        """Show the flows ``lag`` steps before the traced position."""
        att = self.attribution
        if att is None:
            return
        self.lag = int(np.clip(lag, 0, len(att.positions) - 1))
        if self.panel.lag.value() != self.lag:
            self.panel.lag.setValue(self.lag)
        self._describe()
        self._draw_synapses()
        self.host.colour_by.refresh(FLOW)

    def _draw_synapses(self) -> None:
        """The strongest synapses into the shown step as lines in the brain view."""
        brain = self.host.brain
        att = self.attribution
        edges = None
        if att is not None and self.panel.synapses.isChecked() \
                and att.position - self.lag >= 1 and brain.positions.shape[0] == att.neurons:
            points, colours, edges = synapse_segments(att, att.position - self.lag,
                                                      brain.positions, brain.visible)
            if len(points):
                if self._lines is None:
                    from vispy import scene

                    self._lines = scene.visuals.Line(parent=brain.view.scene,
                                                     connect="segments", method="gl")
                    # Added light, over the cloud: a line shows where it crosses neurons.
                    self._lines.set_gl_state("additive", depth_test=False)
                self._lines.set_data(pos=points, color=colours, width=1.5)
        self.synapse_edges = edges
        if self._lines is not None:
            self._lines.visible = edges is not None and len(edges["flow"]) > 0
            brain.canvas.update()

    def _describe(self) -> None:
        att = self.attribution
        if att is None:
            return
        t = att.position - self.lag
        token = att.token_texts[t] if t < len(att.token_texts) else ""
        self.panel.lag_label.setText(f"position {t} ({token!r})")
        labels = att.labels("cell_type")
        tops = att.top_neurons(t, 5)
        f = att.node_flow(t)
        listed = ", ".join(f"{n} {html.escape(labels[n])} {f[n]:+.3f}" for n in tops)
        self.panel.status.setText(
            f"{att.target_text!r} at position {att.position}: L = {att.value:+.4f} "
            f"(logit − mean), window {att.window_start}..{att.position}")
        self.panel.tops.setText(f"<b>carry most at position {t}:</b> {listed}")

    def _forget(self, note: str) -> None:
        """Drop the trace shown (the recording or the model changed)."""
        self.cancel()
        if note and self._model is not None:
            self._close_model()
        if self.attribution is None:
            return
        self.attribution = self.graph = None
        self.host.text_panel.set_flows(None)
        self.graph_panel.set_graph(None, None)
        self._draw_synapses()
        self.panel.set_window(0)
        self.panel.tops.setText("")
        self.panel.lag_label.setText("")
        self.panel.status.setText(note or "Why did the model choose the shown token? Press W.")
        self.host.colour_by.set_enabled((FLOW,), False)

    def _close_model(self) -> None:
        model, self._model, self._model_of = self._model, None, None
        if model is not None:
            self._retired.append(model)
        if not self._running.is_set():     # a trace still going on keeps its engine
            for old in self._retired:
                old.close()
            self._retired = []


def install(host: "WindowHost") -> WhyFeature:
    """Add *Why?* to the window ``host`` (see :class:`WhyFeature`)."""
    return WhyFeature(host)


__all__ = ["FLOW", "GRAPH_NODES", "SYNAPSE_LINES", "GraphPanel", "WINDOW", "WhyFeature",
           "WhyPanel", "flow_layer", "graph_rows", "install", "synapse_segments"]
