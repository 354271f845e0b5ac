"""Cell types over time: each cell type's (or superclass's) mean activity per token.

The *Cell types* dock of :mod:`flyviz.app.population.population_panel` (issue 19, part 2):
:func:`~flyviz.analysis.population.group_time_courses` as a heatmap, rows in
similarity order with a strip coloured by superclass; a click on a row names
the group (the feature lights its neurons). The averaging and sorting of
thousands of cell types runs through :attr:`CellTypePanel.background` (off the
UI thread in the window); a new frame is averaged into its own column only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, Qt, Signal
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QVBoxLayout, QWidget

from flyviz.analysis.population import group_time_courses
from flyviz.app.base import theme
from flyviz.app.population.population_plots import colour_table, drawn_length, population_plot, shown_states
from flyviz.record.recording import Recording

__all__ = ["CellTypePanel"]


class CellTypePanel(QWidget):
    """Each cell type's (or superclass's) mean activity per token, one row a group.

    Signals
    -------
    group_clicked(name)
        The user clicked the row of group ``name``.
    """

    group_clicked = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        bar = QHBoxLayout()
        bar.addWidget(QLabel("Groups:"))
        self.grouping_box = QComboBox()
        self.grouping_box.addItem("Cell types", "cell_type")
        self.grouping_box.addItem("Superclasses", "superclass")
        bar.addWidget(self.grouping_box)
        bar.addWidget(QLabel("Value:"))
        self.quantity_box = QComboBox()
        self.quantity_box.addItem("Mean x", "mean")
        self.quantity_box.addItem("Mean |x|", "abs")
        self.quantity_box.addItem("Mean Δx (comparison)", "delta")
        bar.addWidget(self.quantity_box)
        bar.addStretch(1)
        self.hover = QLabel("")
        self.hover.setObjectName("hint")
        bar.addWidget(self.hover)
        layout.addLayout(bar)
        self.plot = population_plot()
        self.plot.setMouseEnabled(True, True)
        self.plot.getViewBox().invertY(True)
        layout.addWidget(self.plot, 1)
        self.strip = pg.ImageItem(axisOrder="row-major")     # each row's superclass colour
        self.image = pg.ImageItem(axisOrder="row-major")
        self.image.setLookupTable(colour_table())
        # Thousands of cell types in a few hundred pixels: averaged down before the colour
        # table (a full 9,143 x 500 conversion per token cost ~60 ms).
        self.image.setAutoDownsample(True)
        self.plot.addItem(self.strip)
        self.plot.addItem(self.image)
        self.token_line = pg.InfiniteLine(angle=90, movable=False, pen=pg.mkPen(theme.ACCENT, width=1))
        self.plot.addItem(self.token_line)

        self.labels: list[str] | None = None
        self.parents: list[str] | None = None
        #: Group names in row order, their superclass, and the ``(groups, T)`` values drawn.
        self.names: list[str] = []
        self.row_parents: list[str] = []
        self.values = np.zeros((0, 0), dtype=np.float32)
        self._row_of_neuron = np.zeros(0, dtype=np.int64)
        self._sizes = np.zeros(0)
        self.limit = 1.0
        #: ``background(work, done)``: where the averaging and sorting runs (``None``: here).
        self.background: Callable[[Callable[[], Any], Callable[[Any], None]], None] | None = None
        self._pending: Any = None
        self._recording: Recording | None = None
        self._sorted_at = 0
        #: A finished run is owed one sort over all its frames (see :meth:`sort_whole_run`).
        self._whole_run_owed = False
        self._index = -1
        self.grouping_box.currentIndexChanged.connect(lambda _i: self.redraw())
        self.quantity_box.currentIndexChanged.connect(lambda _i: self.redraw())
        self.plot.scene().sigMouseMoved.connect(self._on_moved)
        self.plot.scene().sigMouseClicked.connect(self._on_clicked)

    @property
    def grouping(self) -> str:
        """``"cell_type"`` or ``"superclass"``."""
        return str(self.grouping_box.currentData())

    @property
    def quantity(self) -> str:
        """``"mean"``, ``"abs"`` or ``"delta"`` (the mean Δx of a comparison)."""
        return str(self.quantity_box.currentData())

    def set_anatomy(self, cell_type: Any, superclass: Any) -> None:
        """The neurons' cell types and superclasses (``None`` where the model has none)."""
        self.labels = None if cell_type is None else [str(t) for t in cell_type]
        self.parents = None if superclass is None else [str(s) for s in superclass]
        self.redraw()

    def group_labels(self) -> list[str] | None:
        """Each neuron's group under the chosen grouping."""
        return self.labels if self.grouping == "cell_type" else self.parents

    def show_frame(self, recording: Recording, index: int) -> None:
        """Show ``recording``; frames added since are averaged into new columns only,
        and the rows are sorted again whenever the run has doubled since the last sort."""
        self._index = index
        if recording is not self._recording:
            self._recording = recording
            self._whole_run_owed = False
            self.plot.getViewBox().enableAutoRange()
            self.redraw()
            return
        if self._pending is not None:
            return             # the groups are being averaged: their result catches up
        length = drawn_length(recording, self._view())
        stale = self._whole_run_owed and length > self._sorted_at
        if stale or length >= 2 * max(self._sorted_at, 1) or length < self.values.shape[1]:
            self._whole_run_owed = False
            self.redraw()
            return
        if length > self.values.shape[1] and self.names:
            new = shown_states(recording, self._view(), self.values.shape[1], length)
            if self.quantity == "abs":
                new = np.abs(new)
            columns = np.stack([np.bincount(self._row_of_neuron, weights=row,
                                            minlength=len(self.names)) / self._sizes
                                for row in new], axis=1).astype(np.float32)
            self.values = np.concatenate([self.values, columns], axis=1)
        self._show(rows_changed=False)

    def sort_whole_run(self) -> None:
        """Sort the rows once more over every frame the shown run holds (a run has ended).

        During a run the rows are sorted again only when the run has doubled, so the order
        a finished run is left with would depend on how fast its frames streamed in; sorted
        over the whole run it does not.
        """
        self._whole_run_owed = True
        if self._pending is None and self._recording is not None:
            self.show_frame(self._recording, self._index)

    def _view(self) -> str:
        return "delta" if self.quantity == "delta" else "intervened"

    def redraw(self) -> None:
        """Average and sort every group again (through :attr:`background` when it is set)."""
        labels, recording, parents = self.group_labels(), self._recording, self.parents
        if labels is None or recording is None or drawn_length(recording, self._view()) == 0:
            self._pending = None
            self._apply(None, None)
            return
        states = shown_states(recording, self._view())
        quantity: Any = "abs" if self.quantity == "abs" else "mean"
        key = (id(recording), self.grouping, self.quantity, states.shape[0])
        self._pending = key
        self.image.setLookupTable(colour_table("difference" if self.quantity == "delta"
                                              else "signed"))

        def work() -> tuple[Any, np.ndarray, int]:
            courses = group_time_courses(states, labels, parents, quantity=quantity)
            row_of = {name: r for r, name in enumerate(courses.names)}
            rows = np.array([row_of[lab if lab else "unlabelled"] for lab in labels],
                            dtype=np.int64)
            return courses, rows, int(states.shape[0])

        if self.background is None:
            self._apply(key, work())
        else:
            self.background(work, lambda result: self._apply(key, result))

    def _apply(self, key: Any, result: tuple[Any, np.ndarray, int] | None) -> None:
        if key != self._pending:
            return             # an earlier recording's or grouping's averages
        self._pending = None
        if result is None:
            self.names, self.row_parents, self._sorted_at = [], [], 0
            self.values = np.zeros((0, 0), dtype=np.float32)
            self._show()
            return
        courses, self._row_of_neuron, self._sorted_at = result
        self.names, self.row_parents = courses.names, courses.parents
        self.values = courses.values
        self._sizes = np.maximum(courses.sizes.astype(np.float64), 1.0)
        self._show()
        if self._recording is not None:     # frames that came while averaging
            self.show_frame(self._recording, self._index)

    def _show(self, rows_changed: bool = True) -> None:
        """Draw the values; ``rows_changed``: the rows too (strip, labels, framing)."""
        rows, tokens = self.values.shape if self.values.size else (0, 0)
        axis = self.plot.getAxis("left")
        if rows == 0:
            self.image.clear()
            self.strip.clear()
            axis.setTicks(None)
            self.plot.viewport().update()
            return
        if rows_changed:
            # A robust range: a few groups of one or two neurons would dim the rest.
            self.limit = max(float(np.percentile(np.abs(self.values), 99.5)), 1e-6)
        self.image.setImage(self.values, autoLevels=False, levels=(-self.limit, self.limit))
        self.image.setRect(-0.5, 0, tokens, rows)
        if rows_changed:
            supers = sorted(set(self.row_parents))
            palette = np.array([pg.intColor(i, hues=max(len(supers), 1)).getRgb()[:3]
                                for i in range(len(supers))], dtype=np.uint8)
            code = {name: i for i, name in enumerate(supers)}
            colours = palette[np.array([code[p] for p in self.row_parents], dtype=np.int64)]
            self.strip.setImage(colours[:, None, :])
            width = max(tokens, 8) * 0.03
            self.strip.setRect(-0.5 - 1.5 * width, 0, width, rows)
            if rows <= 40:
                axis.setTicks([[(r + 0.5, f"{n} · {p}" if p and p != n else n)
                                for r, (n, p) in enumerate(zip(self.names, self.row_parents))]])
            else:
                axis.setTicks(None)
        self.token_line.setValue(self._index)
        self.plot.viewport().update()

    def row_at(self, scene_pos: QPointF) -> int | None:
        """The group row under a scene position (``None``: outside the rows)."""
        if not self.names:
            return None
        point = self.plot.getViewBox().mapSceneToView(scene_pos)
        row = int(np.floor(point.y()))
        return row if 0 <= row < len(self.names) else None

    def _on_moved(self, scene_pos: QPointF) -> None:
        row = self.row_at(scene_pos)
        if row is None:
            self.hover.setText("")
            return
        point = self.plot.getViewBox().mapSceneToView(scene_pos)
        token = int(round(point.x()))
        value = f" · token {token}: {self.values[row, token]:+.3f}" \
            if 0 <= token < self.values.shape[1] else ""
        self.hover.setText(f"{self.names[row]} ({self.row_parents[row] or 'no superclass'}, "
                           f"{int(self._sizes[row])} neurons){value}")

    def _on_clicked(self, event: Any) -> None:
        if event.button() != Qt.MouseButton.LeftButton:
            return
        row = self.row_at(event.scenePos())
        if row is not None:
            self.group_clicked.emit(self.names[row])
