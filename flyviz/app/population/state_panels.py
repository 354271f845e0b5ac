"""The State raster dock's panel: a few hundred neurons' states over the last steps, for
every kind of model (a spiking brain's rates, not its spikes).

It shows one moment of a :class:`~flyviz.record.recording.Recording` through
``show_frame(recording, index)``; the window calls it from its display-rate timer only
when the shown frame changed. One reused ``ImageItem`` with fixed levels keeps it cheap.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyqtgraph as pg
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from flyviz.app.base.plots import PlotWidget
from flyviz.app.population.plot_axes import SpacedAxis, paint_on_demand, spaced_axes
from flyviz.kinds import LANGUAGE, ModelKind
from flyviz.record.recording import Recording

__all__ = ["RasterPanel"]


# --------------------------------------------------------------- raster panel
class NeuronRowAxis(SpacedAxis):
    """A raster's row axis labelled by the neuron each row shows, not by the row's number:
    on a brain of more neurons than rows, the rows are a sample and row 250 is not neuron
    250."""

    def __init__(self, orientation: str = "left") -> None:
        super().__init__(orientation)
        #: The neuron index of each row (row ``r`` spans ``r .. r + 1`` on the axis).
        self.row_neurons = np.zeros(0, dtype=np.int64)

    def tickStrings(self, values, scale, spacing):  # noqa: N802 - pyqtgraph API
        out = []
        for value in values:
            row = int(round(value))
            # A tick between two rows (a short raster's half steps) names no neuron.
            whole = abs(value - row) < 1e-6 and 0 <= row < self.row_neurons.size
            out.append(_short_index(int(self.row_neurons[row])) if whole else "")
        return out


def _short_index(neuron: int) -> str:
    """A neuron index as a tick label at most as wide as a row number ("250"): "39k" for
    neuron 39,042. A wider label widened the raster's axis, and with it the whole bottom row
    of docks, squeezing the Traces dock beside it."""
    return str(neuron) if neuron < 1000 else f"{neuron / 1000:.0f}k"


class RasterPanel(QWidget):
    """A few hundred neurons' states over the last steps (tokens, bins) up to the shown frame."""

    def __init__(self, parent: QWidget | None = None, rows: int = 256, window: int = 96) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        self.caption = QLabel("State raster")
        self.caption.setObjectName("hint")
        # Wrapped, not widened: a sample's longer caption ("256 of 49,393 neurons, evenly
        # spaced ...") widened the bottom row's raster and squeezed the Traces dock beside it.
        self.caption.setWordWrap(True)
        layout.addWidget(self.caption)
        self.row_axis = NeuronRowAxis("left")
        self.row_axis.enableAutoSIPrefix(False)   # neuron 250, never 0.25 ×1000
        self.plot = PlotWidget(axisItems={**spaced_axes("bottom"), "left": self.row_axis},
                               enableMenu=False)   # no menu, none built
        self.plot.setMouseEnabled(False, False)
        self.plot.hideButtons()
        self.plot.setMinimumHeight(80)
        self.plot.getAxis("left").setLabel("neuron")
        self.plot.getAxis("bottom").setLabel("token")
        paint_on_demand(self.plot)
        layout.addWidget(self.plot, 1)
        self.image = pg.ImageItem(axisOrder="row-major")
        self.plot.addItem(self.image)
        self.rows = rows
        self.window_tokens = window
        self.axis = LANGUAGE.time_axis
        self.states = LANGUAGE.state_rows
        self.neurons = np.zeros(0, dtype=np.int64)
        self.of_neurons = 0
        self._mode = "signed"
        self._limit = 1.0
        self._lut_mode = ""
        self._scale_source: Callable[[], tuple[str, float]] | None = None
        self._last: tuple[int, int] | None = None
        self._buffer = np.zeros((max(1, rows), window), dtype=np.float32)
        self.set_mode("signed", 1.0)

    def set_neurons(self, neurons: np.ndarray) -> None:
        """Choose which neurons are rows (an evenly spaced subset of the shown ones)."""
        neurons = np.asarray(neurons, dtype=np.int64)
        #: How many neurons the rows were chosen from (more than the rows: a sample).
        self.of_neurons = int(neurons.size)
        if neurons.size > self.rows:
            pick = np.linspace(0, neurons.size - 1, self.rows).round().astype(np.int64)
            neurons = neurons[pick]
        self.neurons = neurons
        self.row_axis.row_neurons = neurons
        self.row_axis.picture = None        # relabel the ticks now, not at the next resize
        self.row_axis.update()
        self._buffer = np.zeros((max(1, neurons.size), self.window_tokens), dtype=np.float32)
        self._say_caption()
        self._last = None

    def set_kind(self, kind: ModelKind) -> None:
        """Name the columns as the shown model's kind calls its steps (tokens, 10 ms bins),
        and the rows' values as it calls its states (activations, rates)."""
        self.axis, self.states = kind.time_axis, kind.state_rows
        self.plot.getAxis("bottom").setLabel(self.axis.name)
        self._say_caption()

    def _say_caption(self) -> None:
        shown = self.neurons.size
        rows = (f"{shown} of {self.of_neurons:,} neurons, evenly spaced"
                if self.of_neurons > shown else f"{shown} neurons")
        self.caption.setText(f"State raster: {rows} × last {self.window_tokens} "
                             f"{self.axis.names} ({self.states})")

    def set_mode(self, mode: str, limit: float) -> None:
        """Colour like the cloud: ``"signed"`` or ``"abs"`` with fixed levels."""
        from flyviz.render.colormaps import lut

        limit = max(float(limit), 1e-6)
        if (mode, limit) == (self._mode, self._limit) and self._lut_mode == mode:
            return
        self._mode, self._limit, self._lut_mode = mode, limit, mode
        table = lut(mode)
        rgb = np.clip(table[:, :3] * table[:, 3:4], 0, 1)
        self.image.setLookupTable((rgb * 255).astype(np.uint8))
        levels = (-self._limit, self._limit) if mode == "signed" else (0.0, self._limit)
        self.image.setLevels(levels)
        self.plot.viewport().update()
        self._last = None

    def follow_scale(self, source: Callable[[], tuple[str, float]] | None) -> None:
        """Take the colour mode and limit from ``source()`` at each refresh (the brain's)."""
        self._scale_source = source

    def show_frame(self, recording: Recording, index: int) -> None:
        """Columns are tokens ``index - window + 1 .. index``, newest on the right."""
        if self._scale_source is not None:
            self.set_mode(*self._scale_source())
        key = (id(recording), index)
        if key == self._last:
            return
        self._last = key
        buf = self._buffer
        buf.fill(0.0)
        count = 0
        if index >= 0 and self.neurons.size:
            start = max(0, index - self.window_tokens + 1)
            states = recording.states(self.neurons, start, index + 1)   # (tokens, rows)
            values = np.abs(states) if self._mode == "abs" else states
            count = values.shape[0]
            # Fill from the left until the window is full, then scroll: newest on the right.
            buf[:, :count] = values.T
        left = -0.5 if index + 1 <= self.window_tokens else index + 0.5 - self.window_tokens
        self.image.setImage(buf, autoLevels=False)
        self.image.setRect(left, 0, self.window_tokens, buf.shape[0])
        self.plot.setXRange(left, left + self.window_tokens, padding=0)
        self.plot.setYRange(0, buf.shape[0], padding=0)
        self.plot.viewport().update()


# --------------------------------------------------------------- trace panel
