"""Lesion maps in the app: File → Open lesion map, the importance colours and the groups' table.

A lesion map is the file ``flyviz sweep`` writes (CSV or Parquet): one row per
group of neurons (a superclass, a cell type, a side or a named query) with what
lesioning that group did to the model's prediction of a text (ΔCE, KL, top-1
agreement). In the app:

* :class:`LesionController` opens a map off the UI thread, refuses one made
  with another model in one line, and resolves its groups to neurons once;
* the *importance* colouring (View → Colour by → Lesion importance, or the
  dock's button) colours each neuron by its group's ΔCE on the sequential
  colormap, with its colourbar: on a log scale by default (a map's ΔCE often
  spans decades), or from 0 to the largest ΔCE (:func:`importance_layer`);
* :class:`LesionPanel`, the *Lesion map* dock: the groups in a sortable table
  (name, neurons, ΔCE, KL, top-1 agreement). Selecting a row lights that
  group in the brain view and offers *Compare with untouched* with the group
  lesioned as the map lesioned it (silenced, by default).

*Compare with untouched* goes through :meth:`LesionFeature.compare_with_lesion`:
it emits :attr:`LesionFeature.compare_requested` with the interventions, lends
them to the state's run configuration (the list and *Compare*, which the
Interventions dock shows; Reset gives them back) and starts the run the state
describes: the prompt beside the untouched model. No channel to another feature:
the state is what they share. The line under the table shows interventions set
for the next run only (:meth:`~flyviz.viewer.state.ViewerState.set_next_interventions`,
a script's).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import (QAbstractItemView, QCheckBox, QFileDialog, QHBoxLayout,
                               QHeaderView, QLabel, QPushButton, QTableWidget, QTableWidgetItem,
                               QVBoxLayout, QWidget)

from flyviz.analysis.sweep import GroupResult, LesionMap
from flyviz.app.base.background import BackgroundJob, ModelFileController
from flyviz.app.base.comparing import compare_with_lent
from flyviz.app.lesion.estimate_layer import (COMPUTE, ESTIMATE, EstimateController, EstimatedLesions,
                                       EstimateSection, compute_estimate, estimate_layer)
from flyviz.model.checkpoint import Checkpoint
from flyviz.model.errors import FlyvizError, InputError
from flyviz.render.style import ColourLayer
from flyviz.viewer.feature_parts import FeaturePart
from flyviz.viewer.layers import ESTIMATE as ESTIMATE_LAYER
from flyviz.viewer.layers import IMPORTANCE
from flyviz.viewer.run_config import InterventionLoan
from flyviz.viewer.layers import importance_layer as _importance_colours

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.app.base.host import WindowHost

#: The highlight source name of the selected group (see :class:`~flyviz.viewer.highlight.Highlights`).
HIGHLIGHT = "lesion"

#: The table's columns: (the :class:`~flyviz.analysis.sweep.GroupResult` field, header).
COLUMNS: tuple[tuple[str, str], ...] = (
    ("group", "Group"),
    ("neurons", "Neurons"),
    ("delta_ce", "ΔCE"),
    ("kl", "KL"),
    ("top1_agreement", "Top-1"),
)

#: What each lesion mode does to a group, in words.
LESION_WORDS = {"silence": "silenced", "cut-out": "with its outgoing synapses cut",
                "cut-in": "with its incoming synapses cut"}


def open_checked(path: str | Path, checkpoint: Checkpoint) -> LesionMap:
    """The lesion map at ``path`` with its groups resolved, if it was made with ``checkpoint``.

    Raises :class:`~flyviz.analysis.sweep.SweepError` (one line) when it is
    missing, damaged, or was made with another model.
    """
    lesions = LesionMap(path)
    lesions.check_model(checkpoint)
    lesions.importance(checkpoint)          # resolves every group's neurons once
    return lesions


def importance_layer(lesions: LesionMap, checkpoint: Checkpoint, log: bool = False
                     ) -> ColourLayer:
    """Each neuron coloured by its group's ΔCE, on the sequential colormap, with its colourbar.

    Linear (``log=False``): over ``[0, largest ΔCE]``. Logarithmic: ``log10 ΔCE``
    over ``[log10 floor, log10 largest]``, the floor a third of the smallest
    positive ΔCE, so groups whose ΔCE differ by decades (a sensory group that
    blinds the model beside interneurons that blur it) are all told apart.
    A group whose lesion did not raise the cross-entropy (ΔCE ≤ 0) and a
    neuron in no group are drawn at the bottom of the colourbar.
    """
    return _importance_colours(lesions.importance(checkpoint), log,
                               LESION_WORDS.get(lesions.mode, lesions.mode))


class _NumberItem(QTableWidgetItem):
    """A table cell sorted by its number, shown as formatted text."""

    def __init__(self, value: float, text: str) -> None:
        super().__init__(text)
        self.value = float(value)
        self.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)

    def __lt__(self, other: QTableWidgetItem) -> bool:
        if isinstance(other, _NumberItem):
            return self.value < other.value
        return super().__lt__(other)


class LesionController(ModelFileController):
    """The open lesion map of the window: opened off the UI thread, checked against the model.

    Signals
    -------
    opened(lesions)
        A map is open (made with the loaded model, groups resolved).
    closed(note)
        No map is open any more (``note``: why, or ``""``).
    failed(message)
        A map could not be opened (one line).
    """

    failed = Signal(str)

    PURPOSE = "lesions"
    NO_MODEL = "load the model the lesion map was made with first, then open it"

    @property
    def lesions(self) -> LesionMap | None:
        """The open lesion map, or ``None``."""
        return self.current

    def read(self, path: str | Path, checkpoint: Checkpoint) -> LesionMap:
        return open_checked(path, checkpoint)

    def open(self, path: str | Path) -> None:
        """Open the lesion map at ``path`` for the loaded model: :attr:`opened` or
        :attr:`failed` follows."""
        self.open_file(path, self.failed.emit)


class LesionPanel(QWidget):
    """The Lesion map dock: the open map, its groups in a sortable table, and what to do with one.

    Signals
    -------
    open_requested()
        The user wants to pick a lesion map.
    importance_requested()
        Colour the brain by importance.
    log_scale_changed()
        The importance colours' log scale was switched.
    group_selected(row)
        A group was selected (its :class:`~flyviz.analysis.sweep.GroupResult`, or ``None``).
    compare_requested(row)
        *Compare with untouched* with this group lesioned.
    clear_next_requested()
        Forget the interventions set up for the next run.
    """

    open_requested = Signal()
    importance_requested = Signal()
    log_scale_changed = Signal()
    group_selected = Signal(object)
    compare_requested = Signal(object)
    clear_next_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        self.status = QLabel("")
        self.status.setWordWrap(True)
        layout.addWidget(self.status)
        row = QHBoxLayout()
        self.open_button = QPushButton("Open…")
        self.open_button.setToolTip("Open a lesion map made with 'flyviz sweep' for this model")
        self.open_button.clicked.connect(self.open_requested.emit)
        self.importance_button = QPushButton("Colour by importance")
        self.importance_button.setToolTip("Colour every neuron by its group's ΔCE "
                                          "(View → Colour by → Live state goes back)")
        self.importance_button.clicked.connect(self.importance_requested.emit)
        row.addWidget(self.open_button)
        row.addWidget(self.importance_button)
        self.log_scale = QCheckBox("log scale")
        self.log_scale.setChecked(True)
        self.log_scale.setToolTip("Colour by log10 ΔCE (of groups and of the estimate), so "
                                  "values that differ by decades are told apart (off: from 0 "
                                  "to the largest)")
        self.log_scale.toggled.connect(lambda _on: self.log_scale_changed.emit())
        row.addWidget(self.log_scale)
        row.addStretch(1)
        layout.addLayout(row)
        #: The estimated lesions of every single neuron, beside the exact group map.
        self.estimate = EstimateSection()
        layout.addWidget(self.estimate)

        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels([title for _, title in COLUMNS])
        tips = ("The group of neurons lesioned (its query in the tooltip)", "Its neurons",
                "Mean increase in cross-entropy, nats/token", "Mean KL divergence, nats/token",
                "Share of positions where the most likely next token stays the same")
        for column, tip in enumerate(tips):
            header_item = self.table.horizontalHeaderItem(column)
            if header_item is not None:
                header_item.setToolTip(tip)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().setVisible(False)
        self.table.verticalHeader().setDefaultSectionSize(22)
        self.table.setAlternatingRowColors(True)
        header = self.table.horizontalHeader()
        # Names keep a readable width (drag to widen); numbers take what they need and the
        # table scrolls sideways in a narrow dock.
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Interactive)
        header.resizeSection(0, 130)
        header.setStretchLastSection(False)
        for column in range(1, len(COLUMNS)):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
        self.table.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.table.setSortingEnabled(True)
        self.table.itemSelectionChanged.connect(self._on_selection)

        self.selected_label = QLabel("")
        self.selected_label.setObjectName("hint")
        self.selected_label.setWordWrap(True)
        layout.addWidget(self.selected_label)
        self.compare_button = QPushButton("Compare with untouched, this group silenced")
        self.compare_button.clicked.connect(self._on_compare)
        layout.addWidget(self.compare_button)
        next_row = QHBoxLayout()
        self.next_label = QLabel("")
        self.next_label.setWordWrap(True)
        self.clear_next_button = QPushButton("Cancel")
        self.clear_next_button.setToolTip("Run the next prompt untouched")
        self.clear_next_button.clicked.connect(self.clear_next_requested.emit)
        next_row.addWidget(self.next_label, 1)
        next_row.addWidget(self.clear_next_button)
        layout.addLayout(next_row)
        # The table last: it takes the dock's height and scrolls its own rows, so the
        # buttons above stay in view in a short dock.
        layout.addWidget(self.table, 1)
        self.lesions: LesionMap | None = None
        self.set_lesions(None)
        self.show_next("")

    # ------------------------------------------------------------ state
    def set_lesions(self, lesions: LesionMap | None, note: str = "") -> None:
        """Show ``lesions``' groups (``None``: none, and ``note`` why)."""
        self.lesions = lesions
        self.table.setSortingEnabled(False)
        self.table.clearContents()
        self.table.setRowCount(0)
        if lesions is None:
            self.status.setText(note or "No lesion map open. Make one with 'flyviz sweep' and "
                                        "open it with File → Open lesion map.")
        else:
            what = LESION_WORDS.get(lesions.mode, lesions.mode)
            text = lesions.info.get("text", {})
            positions = text.get("positions") if isinstance(text, dict) else None
            over = f" over {int(positions):,} positions" if isinstance(positions, int) else ""
            self.status.setText(
                f"{lesions.path.name}: {len(lesions.rows):,} groups by {lesions.by}, each "
                f"{what}{over}; untouched cross-entropy "
                f"{lesions.baseline_cross_entropy:.3f} nats/token; ΔCE and KL in nats/token, "
                "top-1: how often the most likely next token stays the same")
            self.compare_button.setText(f"Compare with untouched, this group {what}")
            self.table.setRowCount(len(lesions.rows))
            for r, row in enumerate(lesions.rows):
                name = QTableWidgetItem(row.group)
                name.setData(Qt.ItemDataRole.UserRole, r)
                name.setToolTip(row.query)
                self.table.setItem(r, 0, name)
                self.table.setItem(r, 1, _NumberItem(row.neurons, f"{row.neurons:,}"))
                self.table.setItem(r, 2, _NumberItem(row.delta_ce, f"{row.delta_ce:+.4f}"))
                self.table.setItem(r, 3, _NumberItem(row.kl, f"{row.kl:.4f}"))
                self.table.setItem(r, 4, _NumberItem(row.top1_agreement,
                                                     f"{row.top1_agreement:.1%}"))
            self.table.setSortingEnabled(True)
            self.table.sortItems(2, Qt.SortOrder.DescendingOrder)
        self.importance_button.setEnabled(lesions is not None)
        self._on_selection()

    def show_next(self, description: str) -> None:
        """Say what the next run will do differently (``""``: nothing)."""
        self.next_label.setText(f"Next run: {description}. Press Run." if description else "")
        self.next_label.setVisible(bool(description))
        self.clear_next_button.setVisible(bool(description))

    def _name_item(self, row: int) -> QTableWidgetItem:
        item = self.table.item(row, 0)
        assert item is not None     # every row is filled when the map is shown
        return item

    def shown_groups(self) -> list[str]:
        """The groups' names in the table's order (as sorted now)."""
        return [self._name_item(r).text() for r in range(self.table.rowCount())]

    def select_group(self, name: str) -> bool:
        """Select the row of group ``name``; False if there is none."""
        for r in range(self.table.rowCount()):
            if self._name_item(r).text() == name:
                self.table.selectRow(r)
                return True
        return False

    @property
    def selected(self) -> GroupResult | None:
        """The selected group's row, or ``None``."""
        if self.lesions is None:
            return None
        rows = self.table.selectionModel().selectedRows()
        if not rows:
            return None
        item = self._name_item(rows[0].row())
        return self.lesions.rows[int(item.data(Qt.ItemDataRole.UserRole))]

    # ------------------------------------------------------------ input
    def _on_selection(self) -> None:
        row = self.selected
        self.compare_button.setEnabled(row is not None)
        if row is None:
            self.selected_label.setText("Select a group to light it in the brain."
                                        if self.lesions is not None else "")
        else:
            self.selected_label.setText(
                f"{row.group}: {row.neurons:,} neurons, ΔCE {row.delta_ce:+.4f} nats/token, "
                f"KL {row.kl:.4f}, top-1 same {row.top1_agreement:.1%} (rank {row.rank})")
        self.group_selected.emit(row)

    def _on_compare(self) -> None:
        row = self.selected
        if row is not None:
            self.compare_requested.emit(row)


class LesionFeature(QObject):
    """The lesion map wired into the main window: controller, dock, File menu, colours, highlight.

    Signals
    -------
    compare_requested(interventions, description)
        The user asked for *Compare with untouched* with these interventions
        (a tuple of :mod:`flyviz.model.interventions` objects) and what they
        do in words.
    """

    compare_requested = Signal(object, str)

    def __init__(self, host: "WindowHost") -> None:
        super().__init__(host.widget())
        self.host = host
        #: ``compare(interventions) -> started``: a host's own *Compare with untouched*
        #: (tests); ``None`` (the window): the feature starts the comparison the state
        #: describes itself.
        self.compare: Callable[[tuple[Any, ...]], bool] | None = None
        #: A group's lesion compared with the untouched model: lent to the state's list
        #: until Reset, a model or an opened recording (part ``"lesion_run"``).
        self.loan = host.state.add_part(InterventionLoan(f"{HIGHLIGHT}_run"))
        #: The group selected in the table, lit, and the importance and estimate colourings:
        #: the model's (part ``"lesion"``; a model clears it and withdraws the colourings).
        self.part = host.state.add_part(FeaturePart(HIGHLIGHT, layers=(IMPORTANCE,
                                                                      ESTIMATE_LAYER)))
        self._importance_on_open = False
        self.controller = LesionController(host.background, lambda: host.models.checkpoint, self)
        self.panel = LesionPanel()
        # Beside the text, where a table of five columns has room.
        self.dock = host.docks.add("lesions", "Lesion map", self.panel,
                                   Qt.DockWidgetArea.RightDockWidgetArea, scroll=True)
        host.docks.tabify("text", self.dock)
        registry = host.actions_registry
        self.action = registry.add("open_lesion_map", "Open &lesion map…", self.open_dialog,
                                   description="Open a lesion map of this model "
                                               "(made with 'flyviz sweep')")
        registry.menu("File").insertAction(registry["open_recording"], self.action)
        host.colour_by.offer(IMPORTANCE, self.importance_layer, enabled=False)
        self._install_estimate()

        c = self.controller
        c.opened.connect(self._on_opened)
        c.closed.connect(self._on_closed)
        c.failed.connect(self._on_failed)
        p = self.panel
        p.open_requested.connect(self.open_dialog)
        p.importance_requested.connect(lambda: self.show_importance(True))
        # The log scale is the state's (a script sets it there); the box is its view.
        docks = host.state.docks
        p.log_scale.setChecked(docks.lesion_log_scale)
        p.log_scale_changed.connect(
            lambda: setattr(docks, "lesion_log_scale", p.log_scale.isChecked()))
        docks.events.lesion_log_scale.connect(self._on_log_scale)
        p.group_selected.connect(self._on_group_selected)
        p.compare_requested.connect(self._compare_row)
        p.clear_next_requested.connect(self._clear_next)
        # The next run's interventions are the state's (a script sets them there); the
        # line under the table is their view, and goes once a run starts with them.
        host.state.events.next_interventions.connect(
            lambda _items, description: self.panel.show_next(description))
        host.models.ready.connect(self._on_model)

    @property
    def lesions(self) -> LesionMap | None:
        """The open lesion map, or ``None``."""
        return self.controller.lesions

    @property
    def estimate(self) -> EstimatedLesions | None:
        """The open (or computed) estimate of every neuron, or ``None``."""
        return self.estimates.estimate

    def _on_model(self, _name: str) -> None:
        self.controller.close("the lesion map belonged to the previous model")
        self.job.cancel(quiet=True)
        self.estimates.close("the estimate belonged to the previous model")

    def _on_log_scale(self, on: bool) -> None:
        if self.panel.log_scale.isChecked() != on:
            self.panel.log_scale.setChecked(on)
        self.host.colour_by.refresh(IMPORTANCE)
        self.host.colour_by.refresh(ESTIMATE)

    # ------------------------------------------------------------ opening
    def open(self, path: str | Path, importance: bool = False) -> None:
        """Open the lesion map at ``path`` (refused with a message when it is another model's);
        ``importance``: colour the brain by it once it is open."""
        self.host.show_message(f"opening the lesion map {Path(path).name}…")
        self._importance_on_open = importance
        self.controller.open(path)

    def _ask_file(self, title: str, folder_key: str, filters: str) -> str | None:
        """A file the user picks (``None``: none), starting in the folder kept under
        ``folder_key`` in the settings, which then keeps the picked file's."""
        settings = self.host.settings
        path, _ = QFileDialog.getOpenFileName(self.host.widget(), title,
                                              str(settings.value(folder_key, "")), filters)
        if not path:
            return None
        settings.setValue(folder_key, str(Path(path).parent))
        return path

    def open_dialog(self) -> None:
        """File → Open lesion map: pick a CSV or Parquet file from ``flyviz sweep``."""
        path = self._ask_file("Open a lesion map", "paths/lesion_maps",
                              "Lesion maps (*.csv *.parquet);;All files (*)")
        if path:
            self.open(path)

    # ------------------------------------------------------------ the estimate
    def _install_estimate(self) -> None:
        host = self.host
        self.estimates = EstimateController(host.background, lambda: host.models.checkpoint, self)
        #: The estimate being computed (the window's close stops it: the close waits for it).
        self.job = BackgroundJob(host.background, COMPUTE, self.panel.estimate, self,
                                 host.widget())
        registry = host.actions_registry
        self.estimate_action = registry.add(
            "open_estimate", "Open es&timated lesions…", self.open_estimate_dialog,
            description="Open the per-neuron estimate of 'flyviz importance' or "
                        "'flyviz sweep --estimate'")
        registry.menu("File").insertAction(registry["open_recording"], self.estimate_action)
        host.colour_by.offer(ESTIMATE, self.estimate_layer, enabled=False)
        section = self.panel.estimate
        section.open_requested.connect(self.open_estimate_dialog)
        section.compute_requested.connect(self.compute_estimate_dialog)
        section.cancel_requested.connect(self.job.cancel)
        section.colour_requested.connect(lambda: self.show_estimate(True))
        self.estimates.opened.connect(self._on_estimate)
        self.estimates.closed.connect(self._on_estimate_closed)
        self.estimates.failed.connect(
            lambda message: host.show_message(f"cannot open the estimate: {message}",
                                              error=True, dialog=True))
        self.job.finished.connect(self._on_estimate_computed)
        self.job.cancelled.connect(self._on_estimate_cancelled)
        self.job.failed.connect(self._on_estimate_failed)
        self._estimate_on_open = False

    def open_estimate(self, path: str | Path, colour: bool = False) -> None:
        """Open the per-neuron estimate of ``path`` (its ``.neurons`` table, or the
        companion of a groups file or of ``sweep --estimate``'s exact map);
        ``colour``: colour the brain by it once it is open."""
        self.host.show_message(f"opening the estimate of {Path(path).name}…")
        self._estimate_on_open = colour
        self.estimates.open(path)

    def open_estimate_dialog(self) -> None:
        """File → Open estimated lesions: pick the file of ``flyviz importance``."""
        path = self._ask_file("Open estimated lesions", "paths/lesion_maps",
                              "Estimated lesions (*.neurons.csv *.neurons.parquet *.csv "
                              "*.parquet);;All files (*)")
        if path:
            self.open_estimate(path, colour=True)

    def compute_estimate(self, text: str | Path) -> bool:
        """Estimate every neuron's silencing over the text file ``text`` in the background
        (progress and Cancel in the dock); False if it cannot start."""
        checkpoint = self.host.models.checkpoint
        if checkpoint is None:
            self.host.show_message("load a model first", error=True)
            return False
        lesions = self.lesions
        self.panel.estimate.status.setText(f"estimating every neuron over {Path(text).name}…")
        self.host.show_message(f"estimating every neuron's silencing over {Path(text).name}…")
        self.job.start(lambda stop, report: compute_estimate(checkpoint, text, lesions, stop,
                                                             report))
        return True

    def compute_estimate_dialog(self) -> None:
        """The dock's *Estimate…*: pick a text file and estimate over it."""
        path = self._ask_file("Estimate lesions over a text", "paths/texts",
                              "Texts (*.txt *.jsonl *.json *.parquet);;All files (*)")
        if path:
            self.compute_estimate(path)

    def estimate_layer(self) -> ColourLayer:
        """Every neuron coloured by its own estimate (see
        :func:`~flyviz.app.lesion.estimate_layer.estimate_layer`)."""
        if self.estimate is None:
            raise InputError("open or compute an estimate first (File → Open estimated "
                             "lesions…)")
        return estimate_layer(self.estimate, self.host.state.docks.lesion_log_scale)

    def show_estimate(self, on: bool = True) -> bool:
        """Colour the brain by the estimate (``False``: by the live state again)."""
        from flyviz.app.brain.colouring import STATE

        return self.host.colour_by.choose(ESTIMATE if on else STATE)

    def _on_estimate(self, estimate: EstimatedLesions) -> None:
        self.panel.estimate.set_estimate(estimate)
        colour_by = self.host.colour_by
        colour_by.set_enabled((ESTIMATE,), True)
        colour_by.refresh(ESTIMATE)
        if self._estimate_on_open:
            self._estimate_on_open = False
            self.show_estimate(True)
        self.host.docks.show(self.dock, 0.6)
        self.host.show_message(f"{estimate.describe()}; {estimate.agreement_line()}")

    def _on_estimate_closed(self, note: str) -> None:
        self.panel.estimate.set_estimate(None, note)
        self.host.colour_by.set_enabled((ESTIMATE,), False)

    def _on_estimate_computed(self, estimate: EstimatedLesions) -> None:
        self._estimate_on_open = True
        self.estimates.show(estimate)

    def _on_estimate_cancelled(self) -> None:
        self.panel.estimate.set_estimate(self.estimate, "estimate cancelled")
        self.host.show_message("estimate cancelled")

    def _on_estimate_failed(self, message: str) -> None:
        self.panel.estimate.set_estimate(self.estimate, f"cannot estimate: {message}")
        self.host.show_message(f"cannot estimate: {message}", error=True)

    # ------------------------------------------------------------ colours
    def importance_layer(self) -> ColourLayer:
        """The importance colours of the open map (see :func:`importance_layer`)."""
        checkpoint = self.host.models.checkpoint
        if self.lesions is None or checkpoint is None:
            raise InputError("open a lesion map first (File → Open lesion map…)")
        return importance_layer(self.lesions, checkpoint, self.host.state.docks.lesion_log_scale)

    def show_importance(self, on: bool = True) -> bool:
        """Colour the brain by importance (``False``: by the live state again)."""
        from flyviz.app.brain.colouring import STATE

        return self.host.colour_by.choose(IMPORTANCE if on else STATE)

    # ------------------------------------------------------------ groups
    def select_group(self, name: str) -> bool:
        """Select group ``name`` in the table (it lights in the brain); False if none."""
        return self.panel.select_group(name)

    def _on_group_selected(self, row: GroupResult | None) -> None:
        checkpoint = self.host.models.checkpoint
        if row is None or self.lesions is None or checkpoint is None:
            self.part.emphasise(None)
            return
        neurons = self.lesions.neurons_of(row, checkpoint)
        self.part.emphasise(neurons)
        self.host.show_message(f"{row.group}: {row.neurons:,} neurons lit, "
                                 f"ΔCE {row.delta_ce:+.4f} nats/token")

    def _compare_row(self, row: GroupResult) -> None:
        if self.lesions is None:
            return
        what = LESION_WORDS.get(self.lesions.mode, self.lesions.mode)
        self.compare_with_lesion((self.lesions.intervention(row),),
                                 f"group {row.group} ({row.neurons:,} neurons) {what}")

    def compare_with_silenced(self, query: str, description: str = "") -> None:
        """*Compare with untouched* with the neurons ``query`` selects silenced."""
        from flyviz.model.interventions import Silence

        self.compare_with_lesion((Silence(query),), description or f"{query} silenced")

    def compare_with_lesion(self, interventions: tuple[Any, ...], description: str) -> None:
        """*Compare with untouched* with ``interventions`` applied.

        Emits :attr:`compare_requested`, lends the interventions to the state's run
        configuration (its list, with *Compare* ticked, until Reset, a model or an opened
        recording) and starts the run the state describes: the prompt beside the untouched
        model (through :attr:`compare` instead when a host set one). Interventions the
        model refuses are said in one line and lent to nothing.
        """
        interventions = tuple(interventions)
        self.compare_requested.emit(interventions, description)
        if self.compare is not None:
            self.loan.lend(interventions)
            started = self.compare(interventions)
        elif self.host.models.checkpoint is None:
            self.host.show_message("load a language model first: the lesion is compared on it",
                                   error=True)
            return
        else:
            try:
                started = compare_with_lent(self.host, self.loan, interventions)
            except FlyvizError as exc:
                self.host.show_message(str(exc), error=True)
                return
        if started:
            self.host.show_message(f"comparing with the untouched model: {description}")

    def _clear_next(self) -> None:
        self.host.state.set_next_interventions(())
        self.host.show_message("the next run is untouched")

    # ------------------------------------------------------------ controller
    def _offer_importance(self, available: bool) -> None:
        colour_by = self.host.colour_by
        colour_by.set_enabled((IMPORTANCE,), available)
        if available:
            colour_by.refresh(IMPORTANCE)   # a newly opened map's values

    def _on_opened(self, lesions: LesionMap) -> None:
        self.host.state.highlights.set(HIGHLIGHT, None)
        self.panel.set_lesions(lesions)
        self._offer_importance(True)
        if self._importance_on_open:
            self._importance_on_open = False
            self.show_importance(True)
        # Room for the table: most of the side column's height (the user can drag it back).
        self.host.docks.show(self.dock, 0.6)
        self._open_companion_estimate(lesions)
        top = lesions.rows[0]
        self.host.show_message(
            f"lesion map {lesions.path.name} open: {len(lesions.rows):,} groups, the largest "
            f"ΔCE {top.delta_ce:+.4f} nats/token ({top.group}); Colour by importance shows it "
            "on the brain")

    def _open_companion_estimate(self, lesions: LesionMap) -> None:
        """The estimate written beside the map (``sweep --estimate``, or the groups file of
        ``flyviz importance``), opened with it."""
        from flyviz.analysis.sweep import SweepError
        from flyviz.app.lesion.estimate_layer import neuron_table_path

        try:
            table = neuron_table_path(lesions.path)
        except SweepError:
            return
        self.open_estimate(table)

    def _on_closed(self, note: str) -> None:
        self.host.state.highlights.set(HIGHLIGHT, None)
        self.panel.set_lesions(None, note)
        self._offer_importance(False)
        if note:
            self.host.show_message(f"lesion map closed: {note}")

    def _on_failed(self, message: str) -> None:
        self.host.show_message(f"cannot open the lesion map: {message}", error=True,
                                 dialog=True)


def check_lesion_map(path: str | Path) -> LesionMap:
    """The lesion map at ``path``, read; :class:`~flyviz.analysis.sweep.SweepError` (one
    line) when it is missing or damaged (the model is not checked)."""
    return LesionMap(path)


def install(host: "WindowHost") -> LesionFeature:
    """Add lesion maps to the window ``host`` (see :class:`LesionFeature`)."""
    return LesionFeature(host)


__all__ = ["COLUMNS", "HIGHLIGHT", "IMPORTANCE", "LesionController", "LesionFeature",
           "LesionPanel", "check_lesion_map", "importance_layer", "install",
           "open_checked"]
