"""The *Circuit* dock: find the part of the brain that carries a task, and run it alone.

A task file (JSON Lines of ``{"prompt", "target", "versus"}``, or a text; see
:mod:`flyviz.analysis.circuit_tasks`) and the settings ``flyviz circuit`` takes
(what a circuit is made of, the ablation (mean by default), the tolerance of
faithfulness, the score)
go in; *Find circuit* runs :func:`~flyviz.analysis.circuit.find_circuit` off the
UI thread with progress and Cancel (scoring every unit over the task, then
measuring the faithfulness curve by running the model with the rest ablated).
Bad input (a missing file, a bad line, a task the ablation does not move) is
one line in the dock.

The result:

* a **verdict line**: the smallest faithful circuit (``|1 - f| <= tolerance``
  on the task and on 90 % of its prompts) with its per-prompt spread, or
  "no circuit below the whole brain is faithful"; the largest overshoot named
  ("overshoots: 169 %"), never called kept;
* the **faithfulness curve** (circuit size ``k`` on a log axis, faithfulness
  ``f``): the tolerance band around 1 shaded, the curve's sizes as teal points,
  the bisection's refinements as amber ones, the points that overshoot the
  whole model (above the band) in violet, and the chosen ``k`` as a vertical
  line (none where no circuit is faithful);
* a **slider over k** (every measured size, curve and refinements, starting at
  the faithful circuit, or the whole brain): the circuit at that ``k`` is lit on
  the brain (the state's ``circuit`` highlight: its neurons bright, the rest
  dimmed) and its strongest synapses are drawn as lines between the somas (the
  state's lines of source ``circuit``, drawn in the brain view's shared line
  overlay, :mod:`flyviz.app.brain.synapse_lines`; red a positive weight or score, blue a
  negative one);
* the **per-prompt** metric and faithfulness at that ``k``;
* **Run with only the circuit**: the selected prompt runs beside the untouched
  model with every unit outside the circuit ablated as the measurement did
  (:func:`~flyviz.analysis.circuit_export.only_circuit`), through the
  Interventions list (the window wires its comparison in,
  :attr:`CircuitFeature.compare`);
* **Export graph…** (circuit-tracer graph JSON with cell-type supernodes) and
  **Export interventions…** (the JSON form of the only-the-circuit set, which
  :func:`flyviz.model.interventions.from_json` reads).
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (QAbstractItemView, QComboBox, QDoubleSpinBox, QFileDialog,
                               QFormLayout, QHBoxLayout, QHeaderView, QLabel, QLineEdit,
                               QProgressBar, QPushButton, QSlider, QTableWidget,
                               QTableWidgetItem, QVBoxLayout, QWidget)

from flyviz.app.base import theme
from flyviz.app.base.plots import PlotWidget
from flyviz.app.base.background import CancellableProgress, Cancelled, JobFeature
from flyviz.app.base.comparing import compare_with_lent
from flyviz.app.base.save_dialog import add_suffix, ask_save_path
from flyviz.analysis.circuit import TOLERANCE
from flyviz.app.brain.synapse_lines import line_segments
from flyviz.model.errors import FlyvizError
from flyviz.viewer.feature_parts import FeaturePart
from flyviz.viewer.parts import PER_RUN
from flyviz.viewer.run_config import InterventionLoan

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.analysis.circuit import CircuitResult, CircuitSettings, CurvePoint
    from flyviz.analysis.circuit_tasks import CircuitTask
    from flyviz.app.base.host import WindowHost
    from flyviz.model.checkpoint import Checkpoint

#: The :class:`~flyviz.app.base.background.BackgroundCalls` purpose of a search.
PURPOSE = "circuit"

#: The highlight source of the circuit at the slider's k, and its line overlay source.
HIGHLIGHT = "circuit"

#: What a circuit may be made of: (settings value, title).
UNIT_CHOICES = (("neurons", "Neurons"), ("types", "Cell types"),
                ("superclasses", "Superclasses"), ("edges", "Synapses"))
ABLATION_CHOICES = (("mean", "Mean (held at its mean over the task)"),
                    ("zero", "Zero (state held at 0)"),
                    ("resample", "Resample (another prompt's state)"))
SCORE_CHOICES = (("flow", "Flow (exact decomposition)"), ("gradient", "Gradient × state"),
                 ("ig", "Integrated gradients"))

#: The curve's colours: its sizes, the refinements, the chosen k.
CURVE_COLOUR = theme.ACCENT
REFINED_COLOUR = theme.WARM
#: The measured circuits that overshoot the whole model (above the tolerance band).
OVERSHOOT_COLOUR = theme.VIOLET
#: The tolerance band around f = 1 (RGBA).
BAND_COLOUR = (125, 133, 149, 60)
#: Drawn point diameter (px).
POINT_SIZE = 9

#: Where the dock remembers the last task file.
TASK_KEY = "circuit/task"


def circuit_settings(units: str, ablation: str, tolerance: float, score: str,
                     kernel: str | None = None) -> "CircuitSettings":
    """The search's settings from the dock's fields (checked: :class:`InputError`)."""
    from flyviz.analysis.circuit import CircuitSettings

    edges = units == "edges"
    return CircuitSettings(nodes="neurons" if edges else units, edges=edges, ablation=ablation,
                           tolerance=float(tolerance), score=score, kernel=kernel).validate()


def verdict(result: "CircuitResult") -> str:
    """The dock's line about a search: the faithful circuit and its per-prompt spread, or
    that there is none; the largest overshoot named as one; CPR, CMD and the metrics."""
    s, kind, count = result.settings, result.units.kind, result.units.count
    if result.faithful:
        spread = result.spread()
        line = (f"Faithful circuit: {result.size:,} of {count:,} {kind}, f = "
                f"{result.faithfulness:.3f} (|1 − f| ≤ {s.tolerance:g}); per prompt f "
                f"{spread['min']:.2f} to {spread['max']:.2f}, median {spread['median']:.2f}, "
                f"{spread['within']:.0%} of the prompts within")
    else:
        line = (f"No circuit below the whole brain is faithful: none of the "
                f"{len(result.measured_below_whole):,} measured sizes has |1 − f| ≤ "
                f"{s.tolerance:g} on the task and on {s.prompt_share:.0%} of its prompts")
        miss = result.near_miss
        if miss is not None:
            line += (f"; closest: {miss.size:,} {kind}, f = {miss.faithfulness:.3f}, but "
                     f"{result.spread(miss)['within']:.0%} of the prompts within")
    over = result.overshoot
    if over is not None:
        line += f". Overshoots: {over.faithfulness:.0%} at {over.size:,} {kind}, not kept"
    return (line + f". CPR {result.cpr:.3f}, CMD {result.cmd:.3f}; m(M) "
            f"{result.full_metric:+.4g}, m(∅) {result.empty_metric:+.4g} ({s.ablation} "
            "ablation)")


def judged_text(result: "CircuitResult", point: "CurvePoint") -> str:
    """What the circuit at ``point`` is, in words: ``faithful``, ``overshoots: 169 %``,
    ``undershoots`` or ``f within, too few prompts``; nothing for k = 0 and the whole."""
    if point.size in (0, result.units.count):
        return "the whole model" if point.size else "nothing kept"
    judged = result.judge(point)
    if judged == "overshoots":
        return f"overshoots: {point.faithfulness:.0%}"
    return {"prompts": "too few prompts within"}.get(judged, judged)


def read_task(checkpoint: "Checkpoint", path: str | Path) -> "CircuitTask":
    """The task file ``path`` read for ``checkpoint`` (one-line :class:`InputError`)."""
    from flyviz.analysis.circuit_tasks import load_task
    from flyviz.errors import InputError
    from flyviz.model.tokenizer import tokenizer_for

    if not str(path).strip():
        raise InputError("choose a task file: JSON Lines of {\"prompt\", \"target\"} or a text")
    cfg = checkpoint.config
    return load_task(path, tokenizer_for(checkpoint), cfg.vocabulary, cfg.bos_token_id)


def compute_circuit(checkpoint: "Checkpoint", task: "CircuitTask", settings: "CircuitSettings",
                    stop: threading.Event, report: Callable[[float], None]
                    ) -> "CircuitResult | None":
    """:func:`~flyviz.analysis.circuit.find_circuit` in this process (off the UI thread);
    ``None`` once ``stop`` is set (at the next scored prompt or measured batch). Scoring
    reports 5..85 %, the faithfulness runs creep on from there."""
    from flyviz.analysis.circuit import find_circuit

    batches = [0]

    def scored(fraction: float) -> None:
        report(0.05 + 0.8 * fraction)

    def measured() -> None:
        if stop.is_set():
            raise Cancelled
        batches[0] += 1
        report(0.85 + 0.14 * (1.0 - 0.9 ** batches[0]))

    progress = CancellableProgress(task.n_tokens, stop, scored)
    try:
        return find_circuit(None, checkpoint, task, settings, workers=0,
                            progress=progress,  # type: ignore[arg-type]  # duck-typed
                            on_batch=measured)
    except Cancelled:
        return None


def prompt_text(checkpoint: "Checkpoint", ids: tuple[int, ...]) -> str:
    """A task prompt's text (its tokens after BOS, decoded)."""
    from flyviz.model.tokenizer import tokenizer_for

    return tokenizer_for(checkpoint).decode(list(ids[1:]))


def log_ticks(count: int) -> list[list[tuple[float, str]]]:
    """The size axis's ticks up to ``count`` (x is ``log10 k``): the decades labelled
    (``1, 10, 100, 1k``...), 2..9 times each as unlabelled minor ticks."""
    major: list[tuple[float, str]] = []
    minor: list[tuple[float, str]] = []
    decade = 0
    while 10 ** decade <= max(1, count):
        value = 10 ** decade
        major.append((float(decade), f"{value // 1000}k" if value >= 1000 else str(value)))
        minor += [(math.log10(m * value), "") for m in range(2, 10) if m * value <= count]
        decade += 1
    return [major, minor]


class CurvePlot(PlotWidget):
    """The faithfulness curve: size ``k`` (x is ``log10 k``, labelled in ``k``) against
    faithfulness."""

    def __init__(self, parent: QWidget | None = None) -> None:
        from flyviz.app.population.plot_axes import spaced_axes

        super().__init__(parent, axisItems=spaced_axes(), enableMenu=False)   # none built
        self.hideButtons()
        self.setMinimumHeight(160)
        self.setMouseEnabled(x=False, y=False)
        self.getAxis("bottom").setLabel("circuit size k")
        self.getAxis("left").setLabel("faithfulness")
        self.line = self.plot([], [], pen=pg.mkPen(CURVE_COLOUR, width=1.5))
        self.points = self.plot([], [], pen=None, symbol="o", symbolSize=POINT_SIZE,
                                symbolPen=None, symbolBrush=CURVE_COLOUR)
        self.refined = self.plot([], [], pen=None, symbol="o", symbolSize=POINT_SIZE,
                                 symbolPen=None, symbolBrush=REFINED_COLOUR)
        self.overshoots = self.plot([], [], pen=None, symbol="o", symbolSize=POINT_SIZE,
                                    symbolPen=None, symbolBrush=OVERSHOOT_COLOUR)
        # The tolerance band around f = 1: the faithful circuits' place.
        self.band = pg.LinearRegionItem(values=(0.9, 1.1), orientation="horizontal",
                                        brush=pg.mkBrush(*BAND_COLOUR), pen=pg.mkPen(None),
                                        movable=False)
        self.band.setZValue(-10)
        self.k_line = pg.InfiniteLine(angle=90, pen=pg.mkPen(theme.TEXT, width=1))
        for item in (self.band, self.k_line):
            item.setVisible(False)
            self.addItem(item)

    def set_result(self, result: "CircuitResult | None") -> None:
        """Draw ``result``'s curve and refinements (``None``: empty)."""
        if result is None:
            for item in (self.line, self.points, self.refined, self.overshoots):
                item.setData([], [])
            self.band.setVisible(False)
            self.k_line.setVisible(False)
            return
        # k = 0 (f = 0 by definition) has no place on a log axis.
        curve = [p for p in result.curve if p.size > 0]
        refined = [p for p in result.refinement if p.size > 0]
        x = [math.log10(p.size) for p in curve]
        y = [p.faithfulness for p in curve]
        self.line.setData(x, y)
        self.points.setData(x, y)
        self.refined.setData([math.log10(p.size) for p in refined],
                             [p.faithfulness for p in refined])
        tolerance = float(result.settings.tolerance)
        over = [p for p in curve + refined if p.faithfulness > 1.0 + tolerance]
        self.overshoots.setData([math.log10(p.size) for p in over],
                                [p.faithfulness for p in over])
        self.getAxis("bottom").setTicks(log_ticks(result.units.count))
        self.band.setRegion((1.0 - tolerance, 1.0 + tolerance))
        self.band.setVisible(True)
        values = [p.faithfulness for p in result.curve + result.refinement]
        low, high = min(0.0, min(values)), max(1.0, max(values))
        self.setYRange(low, high, padding=0.06)
        self.setXRange(0.0, math.log10(max(2, result.units.count)), padding=0.04)

    def set_k(self, k: int) -> None:
        """Mark size ``k`` (nothing for 0)."""
        self.k_line.setVisible(k > 0)
        if k > 0:
            self.k_line.setPos(math.log10(k))


class CircuitPanel(QWidget):
    """The Circuit dock's widget: the task and settings, Find and Cancel, the curve and its
    slider, the per-prompt table, and the run and export buttons.

    Signals
    -------
    find_requested(), cancel_requested()
        Find the circuit with the fields' values; stop the search going on.
    browse_requested()
        Choose a task file.
    k_changed(index)
        The slider moved to the ``index``-th measured size.
    run_requested(), graph_requested(), interventions_requested()
        Run with only the circuit; export its graph; export its interventions.
    """

    find_requested = Signal()
    cancel_requested = Signal()
    browse_requested = Signal()
    k_changed = Signal(int)
    run_requested = Signal()
    graph_requested = Signal()
    interventions_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        form = QFormLayout()
        task_row = QHBoxLayout()
        self.task = QLineEdit()
        self.task.setPlaceholderText("task.jsonl: {\"prompt\": ..., \"target\": \" Lily\"} a line")
        self.task.setToolTip("JSON Lines of {\"prompt\", \"target\", \"versus\"} (metric: "
                             "logit[target] − logit[versus]), or a text (metric: its "
                             "next-token log-probability)")
        self.browse = QPushButton("Browse…")
        self.browse.clicked.connect(self.browse_requested.emit)
        task_row.addWidget(self.task, 1)
        task_row.addWidget(self.browse)
        form.addRow("Task", task_row)
        self.units = self._combo(UNIT_CHOICES, "What a circuit is made of: the top k of these "
                                               "by score are kept, the rest ablated")
        self.ablation = self._combo(ABLATION_CHOICES, "What an ablated unit's state is held at")
        self.tolerance = QDoubleSpinBox()
        self.tolerance.setRange(0.01, 0.99)
        self.tolerance.setSingleStep(0.05)
        self.tolerance.setDecimals(2)
        self.tolerance.setValue(TOLERANCE)
        self.tolerance.setToolTip("A circuit is faithful when |1 − f| is at most this, on the "
                                  "task and on 90 % of its prompts: close to the whole model "
                                  "both ways (a circuit that overshoots is not faithful)")
        self.score = self._combo(SCORE_CHOICES, "How units are ranked before the curve is "
                                                "measured")
        form.addRow("Units", self.units)
        form.addRow("Ablation", self.ablation)
        form.addRow("Tolerance", self.tolerance)
        form.addRow("Score", self.score)
        layout.addLayout(form)
        row = QHBoxLayout()
        self.find_button = QPushButton("Find circuit")
        self.find_button.setToolTip("Score every unit over the task, then measure the "
                                    "faithfulness of the top k by running the model with the "
                                    "rest ablated")
        self.find_button.clicked.connect(self.find_requested.emit)
        self.progress = QProgressBar()
        self.progress.setRange(0, 100)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setToolTip("Stop the search (Esc)")
        self.cancel_button.clicked.connect(self.cancel_requested.emit)
        row.addWidget(self.find_button)
        row.addWidget(self.progress, 1)
        row.addWidget(self.cancel_button)
        layout.addLayout(row)
        self.message = QLabel("")
        self.message.setWordWrap(True)
        layout.addWidget(self.message)
        self.curve = CurvePlot()
        layout.addWidget(self.curve, 2)
        k_row = QHBoxLayout()
        k_row.addWidget(QLabel("k"))
        self.slider = QSlider(Qt.Orientation.Horizontal)
        self.slider.setToolTip("Every measured circuit size: the circuit at this k is lit in "
                               "the brain, its strongest synapses drawn")
        self.slider.valueChanged.connect(self.k_changed.emit)
        k_row.addWidget(self.slider, 1)
        layout.addLayout(k_row)
        # Under the slider, wrapped: beside it, its judgement ("k = 49,393 neurons (100.0%):
        # f = 1.000, the whole model") squeezed the slider to a dot and ran past the dock.
        self.k_label = QLabel("")
        self.k_label.setWordWrap(True)
        layout.addWidget(self.k_label)
        self.prompts = QTableWidget(0, 3)
        self.prompts.setHorizontalHeaderLabels(["prompt → target", "m(C)", "f"])
        self.prompts.verticalHeader().setVisible(False)
        self.prompts.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.prompts.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.prompts.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        header = self.prompts.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for column in (1, 2):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
        self.prompts.setToolTip("Each prompt's metric and faithfulness at this k; the selected "
                                "one is what Run with only the circuit runs")
        self.prompts.setMinimumHeight(90)
        layout.addWidget(self.prompts, 1)
        buttons = QHBoxLayout()
        self.run_button = QPushButton("Run with only the circuit")
        self.run_button.setToolTip("Run the selected prompt beside the untouched model with "
                                   "everything outside the circuit ablated (an intervention "
                                   "set in the Interventions list)")
        self.run_button.clicked.connect(self.run_requested.emit)
        self.graph_button = QPushButton("Export graph…")
        self.graph_button.setToolTip("Save the circuit as circuit-tracer graph JSON (cell "
                                     "types as supernodes), for the Neuronpedia graph viewer")
        self.graph_button.clicked.connect(self.graph_requested.emit)
        self.interventions_button = QPushButton("Export interventions…")
        self.interventions_button.setToolTip("Save the only-the-circuit interventions as "
                                             "flyviz's interventions JSON")
        self.interventions_button.clicked.connect(self.interventions_requested.emit)
        # The run on a row of its own, the two exports below it: three buttons in one row
        # made the dock (and so the whole left column) wider than the others, which took
        # width from the brain view.
        layout.addWidget(self.run_button)
        buttons.addWidget(self.graph_button)
        buttons.addWidget(self.interventions_button)
        layout.addLayout(buttons)
        self.set_busy(False)
        self.set_points(0)
        self.say("Which part of the brain carries a task? Choose a task file and press "
                 "Find circuit.")

    @staticmethod
    def _combo(choices: tuple[tuple[str, str], ...], tip: str) -> QComboBox:
        box = QComboBox()
        for key, title in choices:
            box.addItem(title, key)
        # Narrower than its longest title (the list opens wide enough): the dock must not
        # widen the left column it shares with the other docks.
        box.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        box.setMinimumContentsLength(14)
        box.setToolTip(tip)
        return box

    def say(self, text: str, error: bool = False) -> None:
        """Show one line above the curve (red for a problem)."""
        self.message.setText(text)
        self.message.setStyleSheet("color: #ff7a7a;" if error else "")

    def set_busy(self, busy: bool) -> None:
        """Show the progress and Cancel while a search runs."""
        self.progress.setVisible(busy)
        self.cancel_button.setVisible(busy)
        self.find_button.setEnabled(not busy)
        if busy:
            self.progress.setValue(0)

    def set_points(self, count: int, index: int = 0) -> None:
        """The slider's range: ``count`` measured sizes, at ``index`` (0: none)."""
        self.slider.blockSignals(True)
        self.slider.setRange(0, max(0, count - 1))
        self.slider.setValue(index)
        self.slider.blockSignals(False)
        self.slider.setEnabled(count > 1)
        for button in (self.run_button, self.graph_button, self.interventions_button):
            button.setEnabled(count > 0)

    def choice(self, box: QComboBox, key: str) -> bool:
        """Choose ``key`` in ``box``; False if it is not one of its values."""
        index = box.findData(key)
        if index >= 0:
            box.setCurrentIndex(index)
        return index >= 0


class CircuitFeature(JobFeature):
    """The Circuit dock wired into the window: the search job, the curve and its slider,
    the circuit lit on the brain, the only-the-circuit run and the exports.

    Signals
    -------
    found(result)
        A search finished (its :class:`~flyviz.analysis.circuit.CircuitResult`).
    cancelled()
        A search was cancelled.
    shown(k)
        The circuit of size ``k`` is lit.
    """

    found = Signal(object)
    shown = Signal(int)
    refused_prefix = "circuit"
    cancelled_words = ("circuit search cancelled", "circuit search cancelled")

    def __init__(self, host: "WindowHost") -> None:
        super().__init__(host)
        #: ``compare(interventions, prompt) -> started``: runs the comparison instead of the
        #: window's runs (a test's or an embedding's); ``None``: the window's runs, with
        #: the interventions lent to the state's list (:attr:`loan`).
        self.compare: Callable[[tuple[Any, ...], str], bool] | None = None
        #: The circuit's neurons and synapses drawn on the brain: the state's part
        #: ``"circuit"``, which lives for one run (a new run, Reset, a model and an opened
        #: recording clear it; moving the slider lights it again).
        self.emphasis = host.state.add_part(FeaturePart(HIGHLIGHT, PER_RUN))
        #: "Run with only the circuit"'s interventions and comparison, lent to the state's
        #: list until Reset (part ``"circuit_run"``).
        self.loan = host.state.add_part(InterventionLoan(f"{HIGHLIGHT}_run"))
        self.result: "CircuitResult | None" = None
        self._checkpoint: "Checkpoint | None" = None
        self.points: list["CurvePoint"] = []
        #: The circuit size shown, and the synapses drawn for it (``{"pre", "post", "weight"}``).
        self.k = 0
        self.synapses: dict[str, np.ndarray] | None = None
        self.panel = CircuitPanel()
        task = host.settings.value(TASK_KEY, "")
        if task:
            self.panel.task.setText(str(task))
        self.install_job(PURPOSE, self.panel, self.show)
        # A tab of the left column (its height fits the form, the curve and the prompts).
        self.dock = host.docks.add("circuit", "Circuit", self.panel,
                                   Qt.DockWidgetArea.LeftDockWidgetArea, scroll=True)
        host.docks.tabify("controls", self.dock)
        p = self.panel
        p.find_requested.connect(lambda: self.find())
        p.cancel_requested.connect(self.cancel)
        p.browse_requested.connect(self._browse)
        p.k_changed.connect(self._on_slider)
        p.run_requested.connect(lambda: self.run_only_circuit())
        p.graph_requested.connect(lambda: self.export_graph())
        p.interventions_requested.connect(lambda: self.export_interventions())
        host.models.ready.connect(lambda _name: self._forget("a new model is loaded"))

    # ------------------------------------------------------------ searching
    def find(self, task: str | Path | None = None, units: str | None = None,
             ablation: str | None = None, tolerance: float | None = None,
             score: str | None = None) -> bool:
        """Find the circuit (off the UI thread) with these values (default: the dock's fields,
        which are set to them); False, and one line in the dock, when it cannot start."""
        p = self.panel
        if task is not None:
            p.task.setText(str(task))
        for box, value, name in ((p.units, units, "units"), (p.ablation, ablation, "ablation"),
                                 (p.score, score, "score")):
            if value is not None and not p.choice(box, value):
                choices = ", ".join(str(box.itemData(i)) for i in range(box.count()))
                return self._refuse(f"{name} {value!r}: choose one of {choices}")
        if tolerance is not None:
            if not 0.0 < float(tolerance) < 1.0:
                return self._refuse(f"tolerance {tolerance} must lie in (0, 1): a circuit is "
                                    "faithful when |1 - f| is at most this")
            p.tolerance.setValue(float(tolerance))
        checkpoint, bundle = self.host.models.checkpoint, self.host.models.bundle
        if checkpoint is None or bundle is None:
            return self._refuse("load a model first")
        if self.busy:
            return False
        path = p.task.text().strip()
        try:
            settings = circuit_settings(str(p.units.currentData()),
                                        str(p.ablation.currentData()), p.tolerance.value(),
                                        str(p.score.currentData()), bundle.model.kernel_request)
            circuit_task = read_task(checkpoint, path)
        except FlyvizError as exc:
            # The dock's fields carry the options' names without the dashes.
            return self._refuse(re.sub(r"--([a-z])", r"\1", str(exc)))
        self.host.settings.setValue(TASK_KEY, path)

        def work(stop: threading.Event, report: Callable[[float], None]) -> Any:
            result = compute_circuit(checkpoint, circuit_task, settings, stop, report)
            return None if result is None else (checkpoint, result)

        p.say(f"scoring {circuit_task.n_tokens:,} tokens of {len(circuit_task.prompts):,} "
              f"prompts, then measuring the faithfulness curve…")
        self.host.show_message("circuit search running…")
        self.job.start(work)
        return True

    def say(self, line: str, error: bool = False) -> None:
        self.panel.say(line, error)

    def _browse(self) -> None:
        start = self.panel.task.text().strip() or str(Path.home())
        chosen, _ = QFileDialog.getOpenFileName(
            self.host.widget(), "Choose a circuit task", start,
            "Tasks (*.jsonl *.ndjson *.txt);;All files (*)")
        if chosen:
            self.panel.task.setText(chosen)

    # ------------------------------------------------------------ showing
    def show(self, outcome: "tuple[Checkpoint, CircuitResult]") -> None:
        """Show a search's result: the curve, the slider at the circuit found, the circuit
        lit."""
        from flyviz.analysis.circuit_export import measured_points

        checkpoint, result = outcome
        if checkpoint is not self.host.models.checkpoint:
            return                      # the model changed meanwhile: not its circuit
        self.result, self._checkpoint = result, checkpoint
        self.points = measured_points(result)
        self.panel.curve.set_result(result)
        sizes = [p.size for p in self.points]
        self.panel.set_points(len(self.points), sizes.index(result.size))
        self.show_k(result.size)
        self.host.docks.show(self.dock)
        line = verdict(result)
        self.panel.say(line)
        self.host.show_message(f"circuit: {line}")
        self.found.emit(result)

    def _on_slider(self, index: int) -> None:
        if 0 <= index < len(self.points):
            self.show_k(self.points[index].size)

    def show_k(self, k: int) -> None:
        """Light the circuit of the ``k`` top units (a measured size): its neurons as the
        highlight, its strongest synapses as lines, its per-prompt numbers listed."""
        from flyviz.analysis.circuit_export import neurons_at, point_at, strongest_synapses

        result, checkpoint = self.result, self._checkpoint
        if result is None or checkpoint is None:
            return
        point = point_at(result, k)
        self.k = point.size
        index = [p.size for p in self.points].index(point.size)
        if self.panel.slider.value() != index:
            self.panel.slider.blockSignals(True)
            self.panel.slider.setValue(index)
            self.panel.slider.blockSignals(False)
        neurons = neurons_at(result, checkpoint, self.k)
        self.emphasis.emphasise(neurons)
        self._draw_synapses(strongest_synapses(result, checkpoint, self.k))
        # The vertical line marks a faithful circuit; where none is, the whole brain is no
        # circuit to mark.
        self.panel.curve.set_k(self.k if self.k < result.units.count else 0)
        fraction = self.k / result.units.count
        self.panel.k_label.setText(f"k = {self.k:,} {result.units.kind} ({fraction:.1%}): "
                                   f"f = {point.faithfulness:.3f}, "
                                   f"{judged_text(result, point)}")
        self._list_prompts(point)
        self.shown.emit(self.k)

    def _draw_synapses(self, synapses: dict[str, np.ndarray]) -> None:
        state = self.host.state
        anatomy = state.anatomy
        if anatomy is None or anatomy.positions.shape[0] != state.neurons \
                or not len(synapses["pre"]):
            self.synapses = None
            self.emphasis.draw_lines(None)
            return
        points, colours, kept = line_segments(anatomy.positions_um(), anatomy.valid,
                                              synapses["pre"], synapses["post"],
                                              synapses["weight"])
        self.synapses = {key: value[kept] for key, value in synapses.items()}
        self.emphasis.draw_lines(points, colours)

    def _list_prompts(self, point: "CurvePoint") -> None:
        result, checkpoint = self.result, self._checkpoint
        assert result is not None and checkpoint is not None
        from flyviz.model.tokenizer import tokenizer_for

        tokenizer = tokenizer_for(checkpoint)
        faithfulness = result.prompt_faithfulness(point)
        table = self.panel.prompts
        selected = max(0, table.currentRow())
        table.setRowCount(len(result.task.prompts))
        for row, (prompt, metric, f) in enumerate(zip(result.task.prompts, point.prompts,
                                                      faithfulness)):
            text = prompt_text(checkpoint, prompt.ids)
            if prompt.target is not None:
                text += f" → {tokenizer.token_text(prompt.target)!r}"
            cells = (text, f"{metric:+.4g}", "—" if np.isnan(f) else f"{f:.3f}")
            for column, value in enumerate(cells):
                item = QTableWidgetItem(value)
                if column:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight
                                          | Qt.AlignmentFlag.AlignVCenter)
                table.setItem(row, column, item)
        table.selectRow(min(selected, len(result.task.prompts) - 1))

    @property
    def prompt_row(self) -> int:
        """The prompt selected in the table (the first when none is)."""
        return max(0, self.panel.prompts.currentRow())

    # ------------------------------------------------------------ running and exporting
    def only_circuit(self) -> list[Any]:
        """The interventions that keep only the circuit shown (see
        :func:`~flyviz.analysis.circuit_export.only_circuit`)."""
        from flyviz.analysis.circuit_export import only_circuit
        from flyviz.errors import InputError

        if self.result is None or self._checkpoint is None:
            raise InputError("find a circuit first")
        return only_circuit(self.result, self._checkpoint, self.k)

    def run_only_circuit(self, row: int | None = None) -> bool:
        """Run prompt ``row`` (default: the selected one) beside the untouched model with
        everything outside the circuit ablated; False (and one line) when it cannot start."""
        try:
            items = self.only_circuit()
        except FlyvizError as exc:
            return self._refuse(str(exc))
        if not items:
            return self._refuse(f"the circuit at k = {self.k:,} is the whole model: nothing "
                                "to ablate")
        assert self.result is not None and self._checkpoint is not None
        row = self.prompt_row if row is None else int(row)
        prompt = self.result.task.prompts[row]
        text = prompt_text(self._checkpoint, prompt.ids)
        metric = float(self.points[[p.size for p in self.points].index(self.k)].prompts[row])
        started = self._compare(tuple(items), text)
        if started:
            self.panel.say(f"running prompt {row + 1} with only the circuit of {self.k:,} "
                           f"{self.result.units.kind} ({len(items)} intervention"
                           f"{'s' if len(items) != 1 else ''} in the list) beside the "
                           f"untouched model; measured m(C) = {metric:+.4g}")
        return started

    def _compare(self, interventions: tuple[Any, ...], prompt: str) -> bool:
        if self.compare is not None:
            return self.compare(interventions, prompt)
        try:
            started = compare_with_lent(self.host, self.loan, interventions, prompt)
        except FlyvizError as exc:
            return self._refuse(str(exc))
        if started and self.k:
            self.show_k(self.k)         # the run's brain shows the circuit it keeps
        return started

    def export_graph(self, path: str | Path | None = None) -> Path | None:
        """Save the circuit shown as circuit-tracer graph JSON (default: ask where)."""
        from flyviz.analysis.circuit_export import circuit_tracer_graph, write_json

        if self.result is None or self._checkpoint is None:
            self._refuse("find a circuit first")
            return None
        path = path or self._ask_path("Export the circuit graph", "circuit-graph.json")
        if path is None:
            return None
        try:
            written = write_json(path, circuit_tracer_graph(self.result, self._checkpoint,
                                                            self.k))
        except FlyvizError as exc:
            self._refuse(str(exc))
            return None
        self.host.show_message(f"circuit graph written to {written}")
        return written

    def export_interventions(self, path: str | Path | None = None) -> Path | None:
        """Save the only-the-circuit interventions as flyviz's interventions JSON (default:
        ask where)."""
        from flyviz.analysis.circuit_export import write_interventions

        try:
            items = self.only_circuit()
        except FlyvizError as exc:
            self._refuse(str(exc))
            return None
        path = path or self._ask_path("Export the circuit's interventions",
                                      "circuit-interventions.json")
        if path is None:
            return None
        try:
            written = write_interventions(path, items)
        except FlyvizError as exc:
            self._refuse(str(exc))
            return None
        self.host.show_message(f"{len(items)} interventions written to {written}")
        return written

    def _ask_path(self, title: str, name: str) -> Path | None:
        """Where to save a JSON export (``None``: cancelled or not to replace). A name typed
        without ``.json`` gets it, as every save dialog of the app adds its suffix (a file
        with none is one the JSON filters of other tools' dialogs hide); the file written
        is then asked about, since Qt's question was about the name typed."""
        return ask_save_path(self.host.widget(), title, Path.home() / name, "JSON (*.json)",
                             lambda chosen: add_suffix(chosen, ".json"))

    def _forget(self, note: str) -> None:
        self.cancel()
        # Said only when a result goes (a fresh launch's first model replaces nothing).
        note = note if self.result is not None else self.panel.message.text()
        self.result = self._checkpoint = None
        self.points = []
        self.k = 0
        self.emphasis.clear()
        self.synapses = None
        self.panel.curve.set_result(None)
        self.panel.set_points(0)
        self.panel.prompts.setRowCount(0)
        self.panel.k_label.setText("")
        self.panel.say(note)


def install(host: "WindowHost") -> CircuitFeature:
    """Add the Circuit dock to the window ``host`` (see :class:`CircuitFeature`)."""
    return CircuitFeature(host)


__all__ = ["ABLATION_CHOICES", "CircuitFeature", "CircuitPanel", "CurvePlot", "HIGHLIGHT",
           "PURPOSE", "SCORE_CHOICES", "UNIT_CHOICES", "circuit_settings", "compute_circuit",
           "install", "judged_text", "prompt_text", "read_task", "verdict"]
