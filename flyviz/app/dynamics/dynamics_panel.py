"""The *Dynamics* dock: the model as a dynamical system on one prompt, against null wirings.

What ``flyviz dynamics`` measures (:mod:`flyviz.analysis.dynamics`), off the UI thread
with progress and Cancel: a prompt (default: the prompt box's) and the eigenvalues per
position go in; *Measure* computes the step Jacobians' leading eigenvalues at every
position, the memory of a perturbation, the spread of a one-token drive and the driving
modes, and with *Nulls* above 0 the same on that many null wirings of the chosen family.

The result:

* the **spectral radius per position** (teal points and line), the line radius = 1 (slow
  or amplifying directions above it) and, with nulls, their mean radius ± sd as a grey
  band;
* the **memory curve**: the perturbation's norm per token after it (amber, log scale)
  beside the leak-only decay ``(1 - lam)^k`` (dashed);
* a **summary**: the half-life beside the leak-only bound, the spread, the cell types
  that dominate the driving modes, and each property's z-score against the nulls.

Bad input (an empty prompt, too many eigenvalues, a prompt too short) is one line in the
dock.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (QComboBox, QFormLayout, QHBoxLayout, QLabel, QLineEdit,
                               QProgressBar, QPushButton, QSpinBox, QVBoxLayout, QWidget)

from flyviz.app.base import theme
from flyviz.app.base.plots import PlotWidget
from flyviz.app.base.background import Cancelled, JobFeature
from flyviz.model.errors import FlyvizError

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.analysis.dynamics import Portrait
    from flyviz.app.base.host import WindowHost
    from flyviz.model.checkpoint import Checkpoint

__all__ = ["DynamicsFeature", "DynamicsPanel", "MemoryPlot", "PURPOSE", "RadiusPlot",
           "install", "summary_lines"]

#: The :class:`~flyviz.app.base.background.BackgroundCalls` purpose of a measurement.
PURPOSE = "dynamics"
#: The radius curve's colour, the memory curve's, the nulls' band.
RADIUS_COLOUR = theme.ACCENT
MEMORY_COLOUR = theme.WARM
NULL_BAND = (125, 133, 149, 70)
POINT_SIZE = 7


class RadiusPlot(PlotWidget):
    """The spectral radius of each position's step Jacobian."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent, enableMenu=False)   # no menu, none built
        self.hideButtons()
        self.setMinimumHeight(150)
        self.setMouseEnabled(x=False, y=False)
        self.getAxis("bottom").setLabel("position")
        self.getAxis("left").setLabel("spectral radius")
        self.line = self.plot([], [], pen=pg.mkPen(RADIUS_COLOUR, width=1.5))
        self.points = self.plot([], [], pen=None, symbol="o", symbolSize=POINT_SIZE,
                                symbolPen=None, symbolBrush=RADIUS_COLOUR)
        self.unit = pg.InfiniteLine(pos=1.0, angle=0,
                                    pen=pg.mkPen(theme.MUTED, width=1, style=Qt.PenStyle.DashLine))
        self.addItem(self.unit)
        self.band = pg.LinearRegionItem(values=(0, 0), orientation="horizontal",
                                        brush=pg.mkBrush(*NULL_BAND), pen=pg.mkPen(None),
                                        movable=False)
        self.band.setZValue(-10)
        self.band.setVisible(False)
        self.addItem(self.band)

    def set_portrait(self, found: "Portrait | None") -> None:
        """Draw ``found``'s radii (and its nulls' band); ``None``: empty."""
        if found is None:
            self.line.setData([], [])
            self.points.setData([], [])
            self.band.setVisible(False)
            return
        x = np.arange(found.spectral_radius.size, dtype=float)
        self.line.setData(x, found.spectral_radius)
        self.points.setData(x, found.spectral_radius)
        row = (found.nulls or {}).get("properties", {}).get("spectral_radius_mean")
        if row is not None and row.get("mean") is not None:
            sd = row.get("sd") or 0.0
            self.band.setRegion((row["mean"] - sd, row["mean"] + sd))
            self.band.setVisible(True)
        else:
            self.band.setVisible(False)
        top = max(1.05, float(found.spectral_radius.max()) * 1.05)
        self.setRange(xRange=(-0.5, max(0.5, x[-1] + 0.5)), yRange=(0.0, top), padding=0)


class MemoryPlot(PlotWidget):
    """A perturbation's norm per token after it (log scale) beside the leak-only decay."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent, enableMenu=False)   # no menu, none built
        self.hideButtons()
        self.setMinimumHeight(120)
        self.setMouseEnabled(x=False, y=False)
        self.getAxis("bottom").setLabel("tokens after the perturbation")
        self.getAxis("left").setLabel("log10 norm")
        self.curve = self.plot([], [], pen=pg.mkPen(MEMORY_COLOUR, width=2), symbol="o",
                               symbolSize=5, symbolPen=None, symbolBrush=MEMORY_COLOUR)
        self.leak = self.plot([], [], pen=pg.mkPen(theme.MUTED, width=1.5,
                                                   style=Qt.PenStyle.DashLine))

    def set_portrait(self, found: "Portrait | None") -> None:
        """Draw ``found``'s memory curve; ``None``: empty."""
        if found is None:
            self.curve.setData([], [])
            self.leak.setData([], [])
            return
        norms = np.maximum(found.memory_norms, 1e-300)
        k = np.arange(norms.size, dtype=float)
        self.curve.setData(k, np.log10(norms))
        keep = max(1e-300, 1.0 - found.leak)
        self.leak.setData(k, k * math.log10(keep))
        low = min(float(np.log10(norms).min()), float(k[-1] * math.log10(keep)))
        self.setRange(xRange=(-0.3, max(1.0, k[-1] + 0.3)), yRange=(low - 0.3, 0.3), padding=0)


def summary_lines(found: "Portrait") -> list[str]:
    """The dock's summary of a portrait (memory, spread, driving modes, nulls)."""
    half = found.half_life_tokens
    followed = found.memory_norms.size - 1
    lines = [
        f"radius {found.spectral_radius.min():.3f}–{found.spectral_radius.max():.3f} over "
        f"{found.spectral_radius.size} positions",
        "memory: half-life " + (f"{half:.2f} tokens" if half is not None
                                else f"> {followed} tokens")
        + f" (leak only {found.leak_only_half_life_tokens:.2f}); after {followed} tokens "
        f"{found.memory_norms[-1]:.3g} remains (leak only {(1 - found.leak) ** followed:.2g})",
        f"spread: {100 * found.spread_fraction[-1]:.1f} % of the neurons after "
        f"{found.spread_fraction.size - 1} steps",
    ]
    types = found.driving.get("cell_types") or []
    if types:
        lines.append("driving modes: " + ", ".join(
            f"{t['cell_type']} {100 * t['share']:.0f} %" for t in types[:3]))
    nulls = found.nulls
    if nulls:
        parts = []
        for key, row in nulls["properties"].items():
            z = row.get("z")
            parts.append(f"{key} z {z:+.2f}" if z is not None else f"{key} z –")
        lines.append(f"vs {len(nulls['seeds'])} {nulls['kind']} null(s): " + "; ".join(parts))
    return lines


class DynamicsPanel(QWidget):
    """The dock's view: the settings, Measure with progress and Cancel, the plots.

    Signals
    -------
    measure_requested(), cancel_requested()
    """

    measure_requested = Signal()
    cancel_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        from flyviz.analysis.nulls import NULL_KINDS

        super().__init__(parent)
        layout = QVBoxLayout(self)
        form = QFormLayout()
        self.prompt = QLineEdit()
        self.prompt.setPlaceholderText("the prompt box's text")
        self.prompt.setToolTip("The text whose steps are measured (empty: the prompt box's)")
        form.addRow("Prompt", self.prompt)
        self.eigenvalues = QSpinBox()
        self.eigenvalues.setRange(1, 100)
        self.eigenvalues.setValue(10)
        self.eigenvalues.setToolTip("Eigenvalues of largest modulus per position (ARPACK)")
        form.addRow("Eigenvalues", self.eigenvalues)
        nulls = QHBoxLayout()
        self.nulls = QSpinBox()
        self.nulls.setRange(0, 50)
        self.nulls.setToolTip("Also measure this many null wirings (0: none)")
        self.null_kind = QComboBox()
        for kind in NULL_KINDS:
            self.null_kind.addItem(kind, kind)
        self.null_kind.setToolTip("What the nulls keep (see 'flyviz null --help')")
        nulls.addWidget(self.nulls)
        nulls.addWidget(self.null_kind, 1)
        form.addRow("Nulls", nulls)
        layout.addLayout(form)
        row = QHBoxLayout()
        self.measure_button = QPushButton("Measure")
        self.measure_button.setToolTip("Step-Jacobian spectra, memory, spread and driving modes "
                                       "of the prompt")
        self.measure_button.clicked.connect(self.measure_requested.emit)
        self.progress = QProgressBar()
        self.progress.setRange(0, 100)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setToolTip("Stop measuring (Esc)")
        self.cancel_button.clicked.connect(self.cancel_requested.emit)
        row.addWidget(self.measure_button)
        row.addWidget(self.progress, 1)
        row.addWidget(self.cancel_button)
        layout.addLayout(row)
        self.message = QLabel("")
        self.message.setWordWrap(True)
        layout.addWidget(self.message)
        self.radius = RadiusPlot()
        layout.addWidget(self.radius, 2)
        self.memory = MemoryPlot()
        layout.addWidget(self.memory, 1)
        self.summary = QLabel("")
        self.summary.setWordWrap(True)
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.summary)
        self.set_busy(False)
        self.say("How long does this brain remember, and how close to instability does it run? "
                 "Press Measure.")

    def say(self, text: str, error: bool = False) -> None:
        """Show one line above the plots (red for a problem)."""
        self.message.setText(text)
        self.message.setStyleSheet("color: #ff7a7a;" if error else "")

    def set_busy(self, busy: bool) -> None:
        """Show the progress and Cancel while a measurement runs."""
        self.progress.setVisible(busy)
        self.cancel_button.setVisible(busy)
        self.measure_button.setEnabled(not busy)
        if busy:
            self.progress.setValue(0)


def measure(checkpoint: "Checkpoint", ids: list[int], texts: list[str], settings: Any,
            nulls: int, kind: str, kernel: str | None, stop: threading.Event,
            report: Callable[[float], None]) -> "Portrait | None":
    """The portrait (and its nulls) off the UI thread; ``None`` once ``stop`` is set."""
    from flyviz.analysis.dynamics import compare_with_nulls, portrait_of_checkpoint
    from flyviz.analysis.nulls import null_seeds

    share = 1.0 / (1 + nulls)

    def progress(done: int, total: int) -> None:
        if stop.is_set():
            raise Cancelled
        report(share * done / max(1, total))

    try:
        found = portrait_of_checkpoint(checkpoint, ids, settings, kernel=kernel,
                                       token_texts=texts, progress=progress)
        if nulls:
            def log(_line: str) -> None:
                # each null's start: Cancel is heard there (the bar already stands where
                # the last null's products left it)
                if stop.is_set():
                    raise Cancelled

            def within(where: Any) -> None:
                # told after every product: a null's eigen-solves may take minutes, and
                # Cancel must not wait for them
                if stop.is_set():
                    raise Cancelled
                report(share * (1 + where.index + where.done / max(1, where.total)))

            compare_with_nulls(found, checkpoint, kind, null_seeds(nulls, 0), workers=0,
                               kernel=kernel, log=log, progress=within)
    except Cancelled:
        return None
    return found


class DynamicsFeature(JobFeature):
    """The Dynamics dock wired into the window.

    Signals
    -------
    measured(portrait)
        A measurement finished (its :class:`~flyviz.analysis.dynamics.Portrait`).
    """

    measured = Signal(object)
    refused_prefix = "dynamics"
    cancelled_words = ("measurement cancelled", "dynamics measurement cancelled")

    def __init__(self, host: "WindowHost") -> None:
        super().__init__(host)
        self.result: "Portrait | None" = None
        self.panel = DynamicsPanel()
        self.install_job(PURPOSE, self.panel, self.show)
        self.dock = host.docks.add("dynamics", "Dynamics", self.panel,
                                   Qt.DockWidgetArea.LeftDockWidgetArea, scroll=True)
        host.docks.tabify("controls", self.dock)
        self.panel.measure_requested.connect(lambda: self.measure())
        self.panel.cancel_requested.connect(self.cancel)
        host.models.ready.connect(lambda _name: self._forget())

    def _forget(self) -> None:
        self.result = None
        self.panel.radius.set_portrait(None)
        self.panel.memory.set_portrait(None)
        self.panel.summary.setText("")

    def measure(self, prompt: str | None = None, eigenvalues: int | None = None,
                nulls: int | None = None, kind: str | None = None) -> bool:
        """Measure (off the UI thread) with these values (default: the dock's fields, which
        are set to them); False, and one line in the dock, when it cannot start."""
        from flyviz.analysis.dynamics import DynamicsSettings
        from flyviz.analysis.nulls import check_kind
        from flyviz.record.run import encode_prompt

        p = self.panel
        if prompt is not None:
            p.prompt.setText(prompt)
        if eigenvalues is not None:
            p.eigenvalues.setValue(int(eigenvalues))
        if nulls is not None:
            p.nulls.setValue(int(nulls))
        if kind is not None:
            index = p.null_kind.findData(kind)
            if index < 0:
                return self._refuse(f"null kind {kind!r} is not one of the families")
            p.null_kind.setCurrentIndex(index)
        checkpoint, bundle = self.host.models.checkpoint, self.host.models.bundle
        if checkpoint is None or bundle is None:
            return self._refuse("load a model first")
        if self.busy:
            return False
        text = p.prompt.text().strip() or str(self.host.state.docks.prompt or "").strip()
        try:
            check_kind(str(p.null_kind.currentData()))
            settings = DynamicsSettings(eigenvalues=min(p.eigenvalues.value(),
                                                        checkpoint.config.neurons)).validate()
            ids = encode_prompt(bundle.tokenizer, text, checkpoint.config.bos_token_id)
            if settings.perturb_at >= len(ids) - 1:
                return self._refuse("the prompt needs at least two tokens: the memory of the "
                                    "first is followed over the next")
        except FlyvizError as exc:
            return self._refuse(str(exc).replace("--", ""))
        texts = [bundle.tokenizer.token_text(t) for t in ids]
        count, kind_now = p.nulls.value(), str(p.null_kind.currentData())
        kernel = bundle.model.kernel_request

        def work(stop: threading.Event, report: Callable[[float], None]) -> Any:
            found = measure(checkpoint, ids, texts, settings, count, kind_now, kernel, stop,
                            report)
            return None if found is None else (checkpoint, found)

        p.say(f"measuring {len(ids)} positions, {settings.eigenvalues} eigenvalues each"
              + (f", and {count} {kind_now} null(s)" if count else "") + "…")
        self.host.show_message("dynamics measurement running…")
        self.job.start(work)
        return True

    def say(self, line: str, error: bool = False) -> None:
        self.panel.say(line, error)

    def show(self, outcome: "tuple[Checkpoint, Portrait]") -> None:
        """Show a measurement: the radius per position, the memory curve, the summary."""
        checkpoint, found = outcome
        if checkpoint is not self.host.models.checkpoint:
            return                      # the model changed meanwhile: not its dynamics
        self.result = found
        self.panel.radius.set_portrait(found)
        self.panel.memory.set_portrait(found)
        lines = summary_lines(found)
        self.panel.summary.setText("\n".join(lines[1:]))
        self.panel.say(lines[0])
        self.host.docks.show(self.dock)
        self.host.show_message(f"dynamics: {lines[1]}")
        self.measured.emit(found)


def install(host: "WindowHost") -> DynamicsFeature:
    """Add the Dynamics dock to the window ``host`` (see :class:`DynamicsFeature`)."""
    return DynamicsFeature(host)
