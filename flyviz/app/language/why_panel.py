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
  from it; hover shows the value): the state's ``token_flows``;
* the strongest synapses into the shown step drawn as lines between the
  somas in the brain view (bright: a large edge flow; red adds to L, blue
  takes from it), following the lag slider: the state's lines of source ``"why"``
  (:meth:`~flyviz.viewer.state.ViewerState.set_lines`);
* **Export movie…** in the *Why?* dock: the lag sweep as a movie, one frame per
  step (:func:`flyviz.export.flow.export_flow`), in the background with progress;
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
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (QCheckBox, QHBoxLayout, QLabel, QProgressBar, QPushButton,
                               QSlider, QVBoxLayout, QWidget)

from flyviz.app.base.background import JobFeature
from flyviz.app.base.save_dialog import ask_save_path_as, movie_file
from flyviz.app.language.graph_panel import GraphPanel, graph_rows
from flyviz.app.brain.synapse_lines import line_segments
from flyviz.record.trace import trace
from flyviz.render.style import ColourLayer
from flyviz.viewer.flow import FLOW, flow_layer

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.app.base.host import WindowHost
    from flyviz.export import ExportOptions
    from flyviz.model.explain import Attribution
    from flyviz.model.explain_graph import Graph
    from flyviz.record.runner import Model
    from flyviz.viewer.feature_parts import WhyPart

#: The :class:`~flyviz.app.base.background.BackgroundCalls` purpose of a trace.
PURPOSE = "why"

#: Steps back a trace sweeps (the lag slider's range); longer runs keep their last ones.
WINDOW = 64

#: Most neuron nodes in the Graph dock (the pruning's node cap).
GRAPH_NODES = 200

#: Synapses drawn as lines in the brain view (the strongest by |edge flow| at the shown step).
SYNAPSE_LINES = 40

#: The source name of those lines in the brain view's line overlay.
LINES = "why"

#: The formats the dock's Export movie… offers (the first is the dialog's default).
MOVIE_FILTERS = "MP4 (*.mp4);;WebM (*.webm);;GIF (*.gif)"

#: The suffix a movie's name gets when neither it nor the filter chosen names one: MP4, as
#: File → Export movie starts.
MOVIE_SUFFIX = ".mp4"


def not_exact(attribution: "Attribution") -> str:
    """What the dock says of a trace whose flows do not add up to L (``complete`` False):
    by how much, and over how many of the last steps they still do."""
    error = attribution.completeness_error
    size = (f"completeness error {error:+.2g}" if error is not None and np.isfinite(error)
            else "the sweep overflowed")
    holding = attribution.holding_window()
    where = (f"they add up over the last {holding} steps only: read the earlier ones as "
             "terms that cancel, not as what carried L" if holding
             else "read them as terms that cancel, not as what carried L")
    return (f"NOT EXACT: the flows do not add up to L = {attribution.value:+.4f} ({size}); "
            f"{where}")


def synapse_segments(attribution: "Attribution", position: int, positions: np.ndarray,
                     visible: np.ndarray, top: int = SYNAPSE_LINES
                     ) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """``(points, colours, edges)``: the ``top`` synapses into ``position`` by ``|flow|``
    whose two somas are drawn, as line segments (``2 k`` points, pre then post) with an
    RGBA per point (alpha grows with ``|flow|``)."""
    edges = attribution.step_edge_flows(position, top=top)
    points, colours, kept = line_segments(positions, visible, edges["pre"], edges["post"],
                                          edges["flow"])
    return points, colours, {key: value[kept] for key, value in edges.items()}


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
    movie_requested()
        Export the lag sweep as a movie.
    """

    why_requested = Signal()
    cancel_requested = Signal()
    lag_changed = Signal(int)
    movie_requested = Signal()

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
        self.cancel_button.setToolTip("Stop the trace (Esc)")
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
        movie_row = QHBoxLayout()
        self.movie_button = QPushButton("Export movie…")
        self.movie_button.setToolTip("Save the lag sweep as a movie: one frame per step back "
                                     "through the window, the flows coloured as here, the "
                                     "target, L and the input tokens carrying most written over")
        self.movie_button.clicked.connect(self.movie_requested.emit)
        self.movie_reverse = QCheckBox("first step first")
        self.movie_reverse.setToolTip("Sweep from the window's first step forward to the traced "
                                      "token (unticked: from the traced token back)")
        movie_row.addWidget(self.movie_button)
        movie_row.addWidget(self.movie_reverse)
        movie_row.addStretch(1)
        layout.addLayout(movie_row)
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
        self.movie_button.setEnabled(steps > 0)
        self.movie_reverse.setEnabled(steps > 1)


class WhyFeature(JobFeature):
    """*Why?* wired into the window: the action, the trace job, the flow layer, the docks.

    Signals
    -------
    traced(attribution)
        A trace finished (its :class:`~flyviz.model.explain.Attribution`).
    cancelled()
        A trace was cancelled.
    """

    traced = Signal(object)
    refused_prefix = "cannot trace"
    cancelled_words = ("trace cancelled", "trace cancelled")

    def __init__(self, host: "WindowHost") -> None:
        super().__init__(host)
        self.attribution: "Attribution | None" = None
        self.graph: "Graph | None" = None
        self.lag = 0
        self._model: "Model | None" = None
        self._model_of: Any = None
        self._retired: list["Model"] = []
        #: The synapses drawn as lines now (``{"pre", "post", "flow"}``), or None.
        self.synapse_edges: dict[str, np.ndarray] | None = None
        self._steps = 1
        self.panel = WhyPanel()
        self.graph_panel = GraphPanel()
        # The trace going on is self.job (its ``running`` is set while its thread uses the
        # model).
        self.install_job(PURPOSE, self.panel, self._on_done)
        area = Qt.DockWidgetArea
        self.dock = host.docks.add("why", "Why?", self.panel, area.LeftDockWidgetArea,
                                   scroll=True)
        host.docks.tabify("controls", self.dock)
        self.graph_dock = host.docks.add("graph", "Graph", self.graph_panel,
                                         area.BottomDockWidgetArea)
        host.docks.tabify("raster", self.graph_dock)
        registry = host.actions_registry
        self.action = registry.add("why", "&Why this token?", self.why, "W",
                                   "Trace the shown token back through the connectome: which "
                                   "words, neurons and synapses made it")
        registry.menu("Run").addAction(self.action)
        # View → Colour by → Flow shows this feature's trace: its kinds' entry.
        host.colour_by.claim((FLOW,))
        #: The trace shown, as the state's part ``"why"`` holds it: the *Flow* colouring,
        #: the text's shading and the synapse lines; every new run, Reset, model and
        #: opened recording clears it.
        self.part = cast("WhyPart", host.state.parts["why"])
        p = self.panel
        p.why_requested.connect(self.why)
        p.cancel_requested.connect(self.cancel)
        p.movie_requested.connect(lambda: self.export_movie())
        # The lag, the synapse lines and the movie's direction are the state's (a script
        # sets them there); the slider and boxes are their views.
        docks = host.state.docks
        p.synapses.setChecked(docks.why_synapses)
        p.movie_reverse.setChecked(docks.why_first_step_first)
        p.lag_changed.connect(lambda lag: setattr(docks, "why_lag", lag))
        p.synapses.toggled.connect(lambda on: setattr(docks, "why_synapses", on))
        p.movie_reverse.toggled.connect(lambda on: setattr(docks, "why_first_step_first", on))
        docks.events.why_lag.connect(self.set_lag)
        docks.events.why_synapses.connect(self._on_synapses)
        docks.events.why_first_step_first.connect(self._on_first_step_first)
        self.graph_panel.neuron_clicked.connect(host.state.select)
        host.models.ready.connect(lambda _name: self._forget("a new model is loaded"))
        host.state.events.recording.connect(lambda: self._forget(""))

    # ------------------------------------------------------------ tracing
    def _trace_model(self) -> "Model":
        """A model of the loaded checkpoint with an engine of its own (runs keep theirs)."""
        from flyviz.record.runner import Model

        bundle = self.host.models.bundle
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
        if host.models.bundle is None:
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
        first = max(0, index - WINDOW + 1)
        self._steps = index - first + 1
        steps = self._steps

        def work(stop: threading.Event, report: Callable[[float], None]) -> Any:
            counter = [0]

            def should_stop() -> bool:
                counter[0] += 1
                report(min(1.0, counter[0] / steps))
                return stop.is_set()

            try:
                att = trace(model, recording, position=index, window=WINDOW,
                            should_stop=should_stop)
                return att, att.graph(nodes=GRAPH_NODES)
            except InterruptedError:
                return None

        predicted = recording[index].predicted_text
        self.panel.status.setText(f"tracing {predicted!r} at position {index}…")
        host.show_message(f"tracing why the model chose {predicted!r} at position {index}…")
        self.job.start(work)
        return True

    def why_at(self, frame: int) -> bool:
        """Show frame ``frame`` and trace its prediction (the Text panel's *Why this token?*)."""
        state = self.host.state
        if not 0 <= frame < len(state.recording):
            return False
        state.index = int(frame)
        return self.why()

    def say(self, line: str, error: bool = False) -> None:
        # The dock's one status line: a problem says what could not be done.
        self.panel.status.setText(f"{self.refused_prefix}: {line}" if error else line)

    def _on_done(self, result: Any) -> None:
        att, graph = result
        self.show(att, graph)

    # ------------------------------------------------------------ showing
    def show(self, attribution: "Attribution", graph: "Graph | None" = None) -> None:
        """Show ``attribution``: flow layer at lag 0, token shading, the graph."""
        self.attribution = attribution
        self.graph = graph
        self.lag = 0
        self.panel.set_window(len(attribution.positions))
        self.host.state.docks.why_lag = 0
        self._describe()
        self.part.show(attribution)          # the Flow colouring and the text's shading
        self.graph_panel.set_graph(attribution, graph)
        self._draw_synapses()
        colour_by = self.host.colour_by
        if colour_by.current != FLOW:
            colour_by.choose(FLOW)
        self.host.docks.show(self.dock)
        self.host.docks.show(self.graph_dock, 0.35)     # rows need the height
        error = attribution.completeness_error
        if attribution.complete is False:
            # Never shown as exact: the flows are huge terms that cancel, not what carried L.
            self.host.show_message(f"why {attribution.target_text!r}: "
                                   f"{not_exact(attribution)}", error=True)
        else:
            self.host.show_message(
                f"why {attribution.target_text!r}: L = {attribution.value:+.4f}; the brain "
                "shows each neuron's flow, the text each word's"
                + ("" if error is None else f" (completeness error {error:.1e})"))
        self.traced.emit(attribution)

    def flow_layer(self) -> ColourLayer:
        """The flow layer at the lag shown (the state's *Why?* part's)."""
        return self.part.flow_layer()

    def set_lag(self, lag: int) -> None:
        """Show the flows ``lag`` steps before the traced position (clipped to the trace's
        window; the state's ``docks.why_lag`` follows)."""
        att = self.attribution
        if att is None:
            return
        self.lag = int(np.clip(lag, 0, len(att.positions) - 1))
        if self.host.state.docks.why_lag != self.lag:
            self.host.state.docks.why_lag = self.lag      # clipped: emits once more, same lag
        if self.panel.lag.value() != self.lag:
            self.panel.lag.setValue(self.lag)
        self._describe()
        self._draw_synapses()
        self.part.set_lag(self.lag)

    def _on_synapses(self, on: bool) -> None:
        if self.panel.synapses.isChecked() != on:
            self.panel.synapses.setChecked(on)
        self._draw_synapses()

    def _on_first_step_first(self, on: bool) -> None:
        if self.panel.movie_reverse.isChecked() != on:
            self.panel.movie_reverse.setChecked(on)

    # ------------------------------------------------------------ the movie
    def export_movie(self, path: "str | Path | None" = None,
                     options: "ExportOptions | None" = None) -> "Path | None":
        """Save the lag sweep of the trace shown as a movie (see
        :func:`flyviz.export.flow.export_flow`), drawn as the brain view draws (its
        display settings and where it looks from now), in the background behind a progress dialog
        with Cancel. ``path``: where (default: ask); ``options``: size, frame rate and
        hold (default 1280x720, 4 steps a second, 1 s hold). Returns the path written."""
        host = self.host
        att = self.attribution
        if att is None:
            host.show_message("trace a token first (Run → Why this token?)", error=True)
            return None
        state = host.state
        if state.anatomy is None:
            host.show_message("this model has no neuron positions to draw", error=True)
            return None
        if path is None:
            path = self._ask_movie_path()
            if path is None:
                return None
        from flyviz.app.base.export_jobs import report_export, run_flow_export
        from flyviz.export import ExportOptions

        options = options or ExportOptions(size=(1280, 720), fps=4.0, hold_seconds=1.0,
                                           view=state.view)
        def tell(text: str, error: bool = False) -> None:
            host.show_message(text, error=error, dialog=error)

        try:
            written, error = run_flow_export(
                host.widget(), att, state.anatomy, Path(path), options, style=state.style(),
                camera=state.sync_camera(), reverse=state.docks.why_first_step_first,
                meshes=state.shown_meshes(), mesh_opacity=state.mesh.mesh_opacity)
        except Exception as exc:  # noqa: BLE001 - the app never crashes on an export
            written, error = None, exc
        return report_export(written, error, tell)

    def _ask_movie_path(self) -> "Path | None":
        """Where to save the movie (``None``: cancelled or not to replace): the file the
        export writes, asked about before an existing one is replaced."""
        from PySide6.QtCore import QStandardPaths

        folder = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.MoviesLocation)
        start = Path(folder or Path.home()) / f"flyviz-why{MOVIE_SUFFIX}"
        return ask_save_path_as(self.host.widget(), "Export the Why? movie", start,
                                MOVIE_FILTERS, lambda chosen, selected:
                                movie_file(chosen, selected, MOVIE_SUFFIX))

    def _draw_synapses(self) -> None:
        """The strongest synapses into the shown step as lines in the brain view (the
        state's lines of source ``"why"``, which the window draws)."""
        state = self.host.state
        anatomy = state.anatomy
        att = self.attribution
        edges = None
        points = colours = None
        if att is not None and anatomy is not None and state.docks.why_synapses \
                and att.position - self.lag >= 1 and anatomy.positions.shape[0] == att.neurons:
            points, colours, edges = synapse_segments(att, att.position - self.lag,
                                                      anatomy.positions_um(), anatomy.valid)
        self.synapse_edges = edges
        state.set_lines(LINES, points, colours)

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
            f"(logit − mean), window {att.window_start}..{att.position}"
            + ("" if att.complete is not False else f". {not_exact(att)}"))
        self.panel.tops.setText(f"<b>carry most at position {t}:</b> {listed}")

    def _forget(self, note: str) -> None:
        """Drop the trace shown (the recording or the model changed)."""
        self.cancel()
        if note and self._model is not None:
            self._close_model()
        if self.attribution is None:
            return
        self.attribution = self.graph = None
        self.part.clear()
        self.graph_panel.set_graph(None, None)
        self._draw_synapses()
        self.panel.set_window(0)
        self.host.state.docks.why_lag = 0
        self.panel.tops.setText("")
        self.panel.lag_label.setText("")
        self.panel.status.setText(note or "Why did the model choose the shown token? Press W.")

    def _close_model(self) -> None:
        model, self._model, self._model_of = self._model, None, None
        if model is not None:
            self._retired.append(model)
        if not self.job.running.is_set():     # a trace still going on keeps its engine
            for old in self._retired:
                old.close()
            self._retired = []


def install(host: "WindowHost") -> WhyFeature:
    """Add *Why?* to the window ``host`` (see :class:`WhyFeature`)."""
    return WhyFeature(host)


__all__ = ["FLOW", "GRAPH_NODES", "MOVIE_FILTERS", "MOVIE_SUFFIX", "SYNAPSE_LINES",
           "GraphPanel", "WINDOW", "WhyFeature", "WhyPanel", "flow_layer", "graph_rows",
           "install", "not_exact", "synapse_segments"]
