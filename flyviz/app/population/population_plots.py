"""What the population docks share: the states they draw, their colours and their plots.

Used by :mod:`flyviz.app.population.population_panel` (the whole-brain raster) and
:mod:`flyviz.app.population.cell_type_panel` (cell types over time).
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg

from flyviz.app.base.plots import PlotWidget
from flyviz.record.recording import Recording

__all__ = ["colour_table", "drawn_length", "population_plot", "shown_states"]


def colour_table(mode: str = "signed") -> np.ndarray:
    """The cloud's colour table ``mode`` as 8-bit RGB (Δx in the brain's difference colours)."""
    from flyviz.render.colormaps import lut

    table = lut(mode)
    return (np.clip(table[:, :3] * table[:, 3:4], 0, 1) * 255).astype(np.uint8)


def shown_states(recording: Recording, view: str, start: int = 0, stop: int | None = None,
                 neurons: np.ndarray | None = None) -> np.ndarray:
    """The ``(T, N)`` states a population view draws for frames ``start:stop``
    (of ``neurons`` only, in that order, if given).

    ``view`` is ``"intervened"`` (the recording itself), ``"untouched"`` (a
    comparison's baseline) or ``"delta"`` (recording - baseline); without a
    baseline every view is the recording. Frames the baseline does not have
    yet are cut off.
    """
    baseline = recording.baseline
    stop = len(recording) if stop is None else min(stop, len(recording))
    if baseline is None or view == "intervened":
        return recording.states(neurons, start, stop)
    stop = min(stop, len(baseline))
    if view == "untouched":
        return baseline.states(neurons, start, stop)
    return recording.states(neurons, start, stop) - baseline.states(neurons, start, stop)


def drawn_length(recording: Recording, view: str) -> int:
    """Frames ``view`` can draw (a comparison's untouched run may be shorter while it streams)."""
    if recording.baseline is None or view == "intervened":
        return len(recording)
    return min(len(recording), len(recording.baseline))


def population_plot() -> pg.PlotWidget:
    """A plot for an image of rows x tokens, repainted only when asked (or used)."""
    from flyviz.app.population.plot_axes import paint_on_demand
    from flyviz.app.population.plot_axes import spaced_axes

    plot = PlotWidget(axisItems=spaced_axes(), enableMenu=False)   # no menu, none built
    plot.hideButtons()
    plot.setMinimumHeight(80)
    plot.getAxis("bottom").setLabel("token")
    # Framed on the whole run as it grows, until the user zooms or pans (pyqtgraph's
    # auto range stops then); a new recording frames it again.
    plot.getViewBox().setDefaultPadding(0.0)
    plot.getViewBox().enableAutoRange()
    paint_on_demand(plot)
    return plot
