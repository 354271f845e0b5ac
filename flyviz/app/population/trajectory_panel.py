"""The Trajectory dock: the run's states on their first three principal axes, as a 3-D path.

Issue 19, part 3. A run of ``T`` tokens is ``T`` points in a 49,393-dimensional
space; :func:`~flyviz.analysis.population.principal_trajectory` finds the three
directions along which the run moves most, and the dock draws the run as a path
through them:

* the shown token is marked (it follows the timeline), hover names the nearest
  vertex's token, a click on a vertex shows that token everywhere;
* a comparison draws the untouched and the intervened run on the untouched
  run's axes (as ``flyviz figure --kind trajectory`` does), in two colours
  with a legend;
* the label says how much of the run's variance the three axes hold (and, for
  a comparison, how much of the intervened run's they keep);
* *Axes: keep these* freezes the axes shown, so the next runs of the model are
  drawn in the same space and can be compared with this one;
* *The atlas's axes* draws every run on the principal axes of all the states
  of the open atlas's corpus (:meth:`~flyviz.analysis.atlas.Atlas.principal_axes`),
  the same space for every run of the model; the label then says how much of
  the run's own variance those axes hold. The window hands the feature its open
  atlas (:meth:`TrajectoryFeature.set_atlas`, wired in
  :meth:`~flyviz.app.window.window_features.FeatureWindow._wire_features`); an atlas
  built before flyviz kept axes leaves the entry disabled, its tooltip saying why.

Fitting costs seconds for a long run of the whole brain (the ``T x T`` Gram
matrix of ``T x 49,393`` states), so it runs off the UI thread on a frozen
:meth:`~flyviz.record.recording.Recording.snapshot`. While a run streams in,
each new token is projected on the axes fitted so far (a ``(3, N)`` product),
and the axes are fitted again only when the run has grown by half since
the last fit (a fit costs about ``T^2``: all the fits of a growing run cost
under twice the last one) and once more when frames stop arriving; a run longer than :data:`MAX_FIT_TOKENS` is fitted
on that many tokens spaced evenly, and projected whole. Nothing is computed
while the dock is hidden.

The 3-D view (:class:`~flyviz.app.population.trajectory_view.PathView`) is painted with
``QPainter`` in an orthographic projection that a drag turns: a few hundred
vertices need no OpenGL, and a second OpenGL canvas beside the brain would take
CPU from it under a software OpenGL (llvmpipe).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
from PySide6.QtCore import QObject, QPointF, Qt, QTimer, Signal
from PySide6.QtGui import QStandardItemModel
from PySide6.QtWidgets import (QComboBox, QHBoxLayout, QLabel, QSizePolicy, QToolTip,
                               QVBoxLayout, QWidget)

from flyviz.analysis.population import Trajectory, principal_trajectory
from flyviz.app.base import theme
from flyviz.app.population.population_panel import Coalescer
from flyviz.app.population.trajectory_view import MARKER_COLOUR, PathView, TrajectoryPath
from flyviz.model.errors import FlyvizError
from flyviz.record.recording import Recording

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.analysis.atlas import Atlas
    from flyviz.app.base.host import WindowHost
    from flyviz.viewer.state import ViewerState

__all__ = ["AXES_CHOICES", "MARKER_COLOUR", "MAX_FIT_TOKENS", "NO_ATLAS", "PATH_COLOURS",
           "PathView", "TrajectoryFeature", "TrajectoryFit", "TrajectoryPanel", "TrajectoryPath",
           "fit_trajectory", "install"]

#: Each path's colour by its label (a plain run, or the two runs of a comparison).
PATH_COLOURS = {"run": theme.WARM, "untouched": "#63b3ed", "intervened": theme.WARM}

#: Most redraws per second while a run streams in (the token marker moves at this rate).
REFRESH_HZ = 8

#: The axes are fitted again once the run has grown by this fraction since the last fit
#: (a fit costs ~T^2: all the fits of a growing run cost under twice the last one)...
REFIT_GROWTH = 0.5
#: ...and by at least this many tokens.
MIN_REFIT_TOKENS = 8

#: Once no frame has arrived for this long (ms), the axes are fitted on the whole run.
SETTLE_MS = 400

#: A longer run is fitted on this many of its tokens, spaced evenly (all are drawn): the
#: fit of 400 tokens of 49,393 neurons takes a few seconds of one core.
MAX_FIT_TOKENS = 400

#: The axes a trajectory is drawn on: the shown run's own, the axes kept from a run before,
#: or the open atlas's (its corpus's principal axes).
AXES_CHOICES = (("run", "This run's PCA"), ("kept", "Keep these axes"),
                ("atlas", "The atlas's axes"))

#: The atlas entry's tooltip while no atlas is open.
NO_ATLAS = ("no atlas is open: open an atlas of this model (File → Open atlas…) to draw "
            "every run on the principal axes of its corpus's states")

#: Rows projected at once (a long run is never converted to float64 whole).
_PROJECT_BLOCK = 256


@dataclass(frozen=True)
class TrajectoryFit:
    """Axes fitted to a run (off the UI thread) and the runs' coordinates on them.

    Attributes
    ----------
    trajectory
        The axes (:class:`~flyviz.analysis.population.Trajectory`).
    labels
        The paths' labels: ``("run",)`` or ``("untouched", "intervened")``.
    coordinates
        Each path's ``(T, 3)`` coordinates for the frames of the snapshot.
    explained
        ``(k,)``: the share of the first path's variance each axis holds (what
        its PCA explains, or what kept axes keep of it).
    others
        The share of each further path's variance the axes keep (one number each).
    fitted_on
        Tokens of the first run the axes were fitted on (all of the snapshot's,
        or :data:`MAX_FIT_TOKENS` spaced evenly); 0 for kept axes.
    kept
        True when the axes are kept ones (not fitted on this run).
    source
        Where the axes come from: ``"run"`` (fitted on it), ``"kept"`` (kept
        from a run before) or ``"atlas"`` (the open atlas's).
    """

    trajectory: Trajectory
    labels: tuple[str, ...]
    coordinates: tuple[np.ndarray, ...]
    explained: np.ndarray
    others: tuple[float, ...]
    fitted_on: int
    kept: bool
    source: str = "run"


def _runs(recording: Recording) -> list[tuple[str, Recording]]:
    """The runs a recording draws: itself, or a comparison's untouched and intervened run."""
    if recording.baseline is None:
        return [("run", recording)]
    return [("untouched", recording.baseline), ("intervened", recording)]


def _three(coordinates: np.ndarray) -> np.ndarray:
    """``(T, k)`` coordinates padded with zeros to three columns (a 2-token run has 2 axes)."""
    out = np.zeros((coordinates.shape[0], 3), dtype=np.float64)
    k = min(3, coordinates.shape[1])
    out[:, :k] = coordinates[:, :k]
    return out


def project_frames(trajectory: Trajectory, recording: Recording, start: int = 0,
                   stop: int | None = None) -> np.ndarray:
    """Frames ``start:stop`` of ``recording`` on ``trajectory``'s axes, ``(T, 3)``, in blocks."""
    stop = len(recording) if stop is None else min(stop, len(recording))
    blocks = [trajectory.project(recording.states(None, first, min(first + _PROJECT_BLOCK, stop)))
              for first in range(start, stop, _PROJECT_BLOCK)]
    if not blocks:
        return np.zeros((0, 3))
    return _three(np.concatenate(blocks))


def _fit_rows(tokens: int, most: int) -> np.ndarray:
    """The tokens a fit uses: all of them, or ``most`` spaced evenly."""
    if tokens <= most:
        return np.arange(tokens)
    return np.unique(np.linspace(0, tokens - 1, most).round().astype(np.int64))


def fit_trajectory(recording: Recording, kept: Trajectory | None = None,
                   most: int = MAX_FIT_TOKENS) -> TrajectoryFit:
    """Axes for ``recording`` (a frozen snapshot: this runs off the UI thread) and its paths.

    Without ``kept`` the axes are the first run's three principal axes (the
    untouched run of a comparison); with ``kept`` those axes are used as they are.
    """
    runs = _runs(recording)
    first = runs[0][1]
    rows = _fit_rows(len(first), most)
    if rows.size < 2:
        raise ValueError("a trajectory needs at least two tokens")
    sample = first.states() if rows.size == len(first) else \
        np.stack([first.state(int(i)) for i in rows])
    if kept is None:
        trajectory = principal_trajectory(sample, components=3)
        explained = trajectory.explained
        fitted_on = int(rows.size)
    else:
        trajectory = kept
        explained = kept.captured(sample)
        fitted_on = 0
    coordinates: list[np.ndarray] = []
    others: list[float] = []
    for i, (_label, run) in enumerate(runs):
        if i == 0 and kept is None and rows.size == len(first):
            coordinates.append(_three(trajectory.coordinates))
        else:
            coordinates.append(project_frames(trajectory, run))
        if i > 0:
            other_rows = _fit_rows(len(run), most)
            if other_rows.size < 2:
                others.append(0.0)
                continue
            other = run.states() if other_rows.size == len(run) else \
                np.stack([run.state(int(j)) for j in other_rows])
            others.append(float(trajectory.captured(other).sum()))
    return TrajectoryFit(trajectory, tuple(label for label, _run in runs), tuple(coordinates),
                         np.asarray(explained, dtype=np.float64), tuple(others), fitted_on,
                         kept is not None, "run" if kept is None else "kept")


def describe(fit: TrajectoryFit, tokens: int) -> str:
    """The explained-variance label for ``fit`` with ``tokens`` tokens drawn (short: a dock
    is narrow; the label's tooltip says what the numbers mean)."""
    share = " · ".join(f"{100 * v:.1f}" for v in fit.explained)
    axes = {"kept": "kept axes hold", "atlas": "atlas axes hold"}.get(fit.source, "PC1–3 explain")
    text = f"{axes} {100 * fit.explained.sum():.1f} %"
    if fit.others:
        text += f" of the untouched run ({share}), {100 * fit.others[0]:.1f} % of the intervened"
    else:
        text += f" ({share})"
    if not fit.kept and fit.fitted_on < tokens:
        text += f" · fitted on {fit.fitted_on:,} of {tokens:,} tokens"
    return text


# ----------------------------------------------------------------------------- the dock
class TrajectoryPanel(QWidget):
    """The dock's contents: the axes choice, the explained variance, hover text and the view.

    Signals
    -------
    axes_requested(name)
        The user chose the axes: ``"run"`` (the shown run's PCA), ``"kept"`` or
        ``"atlas"``.
    """

    axes_requested = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        bar = QHBoxLayout()
        bar.addWidget(QLabel("Axes:"))
        self.axes_box = QComboBox()
        for key, title in AXES_CHOICES:
            self.axes_box.addItem(title, key)
        self.axes_box.setToolTip("This run's own principal axes (fitted again as it grows), "
                                 "the axes shown now kept for the next runs, or the open "
                                 "atlas's (its whole corpus's), so that runs of this model are "
                                 "drawn in the same space. In the view: drag to turn, scroll "
                                 "to zoom, double-click for the first view; hover names a "
                                 "token, a click shows it")
        bar.addWidget(self.axes_box)
        # Long lines are cut, not allowed to widen the dock (the full text is the tooltip).
        self.explained = QLabel("")
        self.explained.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        bar.addWidget(self.explained, 1)
        layout.addLayout(bar)
        self.view = PathView()
        layout.addWidget(self.view, 1)
        #: The share of the (first) run's variance the axes hold (what the label says).
        self.explained_fraction: float | None = None
        self.offer_atlas_axes(False, NO_ATLAS)
        self.axes_box.currentIndexChanged.connect(
            lambda _i: self.axes_requested.emit(str(self.axes_box.currentData())))

    def show_explained(self, text: str) -> None:
        """Say how much variance the axes hold (cut to the dock's width; whole as a tooltip)."""
        self.explained.setText(text)
        self.explained.setToolTip(
            text + "\n\nThe share of the run's variance on the three axes (each axis's share in "
            "brackets): how much of its movement the picture shows. For a comparison the axes "
            "are the untouched run's (or the kept or the atlas's axes); the second share is the "
            "intervened run's variance on them.")

    def offer_atlas_axes(self, available: bool, why: str) -> None:
        """Enable the atlas's axes entry or not; ``why`` is its tooltip (what they are, or
        why there are none)."""
        index = self.axes_box.findData("atlas")
        model = self.axes_box.model()
        assert isinstance(model, QStandardItemModel)    # a QComboBox's own model
        item = model.item(index)
        item.setEnabled(available)
        item.setToolTip(why)

    def atlas_axes_offered(self) -> tuple[bool, str]:
        """Whether the atlas's axes entry is enabled, and its tooltip."""
        index = self.axes_box.findData("atlas")
        model = self.axes_box.model()
        assert isinstance(model, QStandardItemModel)
        item = model.item(index)
        return item.isEnabled(), item.toolTip()

    def show_axes_choice(self, name: str) -> None:
        """Show ``name`` as the axes choice without asking for it again."""
        self.axes_box.blockSignals(True)
        self.axes_box.setCurrentIndex(max(0, self.axes_box.findData(name)))
        self.axes_box.blockSignals(False)


class TrajectoryFeature(QObject):
    """The Trajectory dock wired to the window's viewer state (see the module's notes)."""

    #: The :class:`~flyviz.app.base.background.BackgroundCalls` purpose of a fit.
    FIT = "trajectory-fit"

    def __init__(self, host: "WindowHost") -> None:
        super().__init__(host.widget())
        self.host = host
        self.state: ViewerState = host.state
        self.panel = TrajectoryPanel()
        self.view = self.panel.view
        self.dock = host.docks.add("trajectory", "Trajectory", self.panel,
                                   Qt.DockWidgetArea.BottomDockWidgetArea)
        host.docks.tabify("traces", self.dock)
        #: The fit drawn, and what it was made for.
        self.fit: TrajectoryFit | None = None
        self._fit_for: Recording | None = None
        self._fit_length = 0
        #: Axes kept for the next runs (*Keep these axes*), or None.
        self.kept: Trajectory | None = None
        #: The open atlas's principal axes (:meth:`set_atlas`), or None.
        self.atlas_axes: Trajectory | None = None
        #: The axes chosen: ``"run"``, ``"kept"`` or ``"atlas"``.
        self.axes_choice = "run"
        #: Each path's coordinates so far (the fit's, then frames projected as they came).
        self.coordinates: list[np.ndarray] = []
        self._recording: Recording | None = None
        self._failed_for: Recording | None = None
        self.refresher = Coalescer(self.refresh, REFRESH_HZ, self)
        self.settle = QTimer(self)
        self.settle.setSingleShot(True)
        self.settle.setInterval(SETTLE_MS)
        self.settle.timeout.connect(self._settled)
        events = self.state.events
        events.model.connect(self._on_model)
        # The open atlas's principal axes: the state's atlas part, whoever opened it.
        events.atlas.connect(self.set_atlas)
        for signal in (events.recording, events.frames_appended, events.index):
            signal.connect(lambda *_: self.refresher.poke())
        events.frames_appended.connect(lambda *_: self.settle.start())
        self.dock.visibilityChanged.connect(self._on_visibility)
        self.view.token_clicked.connect(self._on_token_clicked)
        self.view.hovered.connect(self._on_hovered)
        self.panel.axes_requested.connect(self.choose_axes)

    # ------------------------------------------------------------ following the state
    def refresh(self) -> None:
        """Show the state's recording and token now (nothing while the dock is hidden)."""
        if not self.panel.isVisible():
            return              # shown again, the dock catches up (visibilityChanged)
        recording = self.state.recording
        if recording is not self._recording:
            self._recording = recording
            self._start_fit()
        elif self.fit is not None and self._fit_for is recording:
            self._follow(recording)
        elif self._failed_for is not recording and not self.host.background.busy(self.FIT) \
                and len(_runs(recording)[0][1]) >= 2:
            self._start_fit()       # a run that started empty has its second token now
        self.view.set_marker(self.state.index)

    def _on_visibility(self, shown: bool) -> None:
        if shown:
            self.refresh()

    def _on_model(self) -> None:
        self.host.background.cancel(self.FIT)
        if self.kept is not None:
            self.kept = None       # another model's axes mean nothing for its neurons
        if self.axes_choice == "kept":
            self.axes_choice = "run"
            self.panel.show_axes_choice("run")
        self._recording = None
        self.refresh()

    def set_atlas(self, atlas: "Atlas | None") -> None:
        """The window's open atlas (``None``: none is open): its principal axes become the
        third axes choice, enabled only when it has them."""
        axes: Trajectory | None = None
        why = NO_ATLAS
        if atlas is not None:
            try:
                axes = atlas.principal_axes()
                why = atlas.principal_axes_note() or (
                    f"the principal axes of all the states of the atlas {atlas.path.name}'s "
                    "corpus: every run of this model is drawn in the same space")
            except FlyvizError as exc:       # damaged arrays: the entry says so
                axes, why = None, str(exc)
        self.atlas_axes = axes
        self.panel.offer_atlas_axes(axes is not None, why)
        if self.axes_choice == "atlas":
            if axes is None:
                self.axes_choice = "run"
                self.panel.show_axes_choice("run")
                self.host.show_message(f"trajectory: back to the run's own axes ({why})")
            self._recording = None          # drawn again on the new axes
            self.refresh()

    def _start_fit(self) -> None:
        recording = self.state.recording
        self.fit, self._fit_for, self.coordinates = None, None, []
        first = _runs(recording)[0][1]
        if len(first) < 2:
            self.host.background.cancel(self.FIT)
            self._fit_length = 0
            self.view.placeholder = ("A trajectory needs two tokens or more." if len(recording)
                                     else "Run a prompt: its states are drawn here as a path.")
            self.view.set_paths([])
            self.panel.show_explained("")
            self.panel.explained_fraction = None
            return
        # The last run's path would be read as this one's: nothing until the axes come.
        self.view.placeholder = "Fitting the run's principal axes…"
        self.view.set_paths([])
        self.panel.show_explained("")
        self._request_fit(recording)

    def _request_fit(self, recording: Recording) -> None:
        snapshot = recording.snapshot()
        source = self.axes_choice
        kept = {"kept": self.kept, "atlas": self.atlas_axes}.get(source)
        self._fit_length = len(_runs(snapshot)[0][1])
        def failed(message: str) -> None:
            self._failed_for = recording        # not tried again for this recording
            self.host.show_message(f"trajectory: {message}", True)

        self.host.background.run(self.FIT, lambda: fit_trajectory(snapshot, kept),
                                 lambda fit: self._fitted(recording, fit, source), failed)

    def _fitted(self, recording: Recording, fit: TrajectoryFit, source: str = "run") -> None:
        if recording is not self.state.recording:
            return                      # a fit of an earlier recording
        if fit.kept:
            fit = replace(fit, source=source)
        self.fit, self._fit_for = fit, recording
        self.coordinates = list(fit.coordinates)
        self.panel.explained_fraction = float(fit.explained.sum())
        self._follow(recording, fitted=True)

    def _follow(self, recording: Recording, fitted: bool = False) -> None:
        """Project the frames that came after the fit; fit again when the run has grown."""
        fit = self.fit
        assert fit is not None
        changed = fitted
        for p, (_label, run) in enumerate(_runs(recording)):
            have = len(self.coordinates[p])
            if len(run) > have:
                new = project_frames(fit.trajectory, run, have)
                self.coordinates[p] = np.concatenate([self.coordinates[p], new])
                changed = True
        if changed:
            self.view.set_paths([TrajectoryPath(label, PATH_COLOURS[label], coords)
                                 for label, coords in zip(fit.labels, self.coordinates)])
            self.panel.show_explained(describe(fit, len(self.coordinates[0])))
        tokens = len(self.coordinates[0])
        grown = tokens - self._fit_length
        if not fit.kept and not self.host.background.busy(self.FIT) \
                and grown >= max(MIN_REFIT_TOKENS, REFIT_GROWTH * self._fit_length):
            self._request_fit(recording)

    def _settled(self) -> None:
        # No frame for a while: the run has ended or paused; fit its axes on all of it.
        recording = self.state.recording
        if not self.panel.isVisible():
            return
        if self.host.background.busy(self.FIT):
            # The fit under way (the first one too, while nothing is drawn yet) is of fewer
            # tokens: look again once it is in, else no frame comes to start this again.
            self.settle.start()
            return
        if self.fit is None or self._fit_for is not recording:
            return
        if not self.fit.kept and len(_runs(recording)[0][1]) > self._fit_length:
            self._request_fit(recording)

    # ------------------------------------------------------------ user actions
    def choose_axes(self, name: str) -> None:
        """Draw on ``"run"`` (the shown run's own PCA), ``"kept"`` (the axes shown now,
        kept for the runs to come) or ``"atlas"`` (the open atlas's axes)."""
        if name == "kept":
            if self.fit is None:
                self.host.show_message("there are no axes to keep yet: run a prompt of two "
                                       "tokens or more first")
                self.panel.show_axes_choice(self.axes_choice)
                return
            self.kept = self.fit.trajectory
            self.host.show_message("trajectory axes kept: the next runs are drawn on them")
        elif name == "atlas":
            if self.atlas_axes is None:
                self.host.show_message(f"trajectory: {self.panel.atlas_axes_offered()[1]}")
                self.panel.show_axes_choice(self.axes_choice)
                return
            self.kept = None
            self.host.show_message("trajectory: runs are drawn on the atlas's axes")
        else:
            self.kept = None
        self.axes_choice = name
        self.panel.show_axes_choice(name)
        self._recording = None
        self.refresh()

    def _on_token_clicked(self, token: int) -> None:
        if 0 <= token < len(self.state.recording):
            self.state.index = token

    def _on_hovered(self, path: int, token: int) -> None:
        if path < 0 or self.fit is None:
            self.view.hover_text = ""
            self.view.update()
            QToolTip.hideText()
            return
        label = self.fit.labels[path] if path < len(self.fit.labels) else ""
        run = dict(_runs(self.state.recording)).get(label)
        text = ""
        if run is not None and token < len(run):
            text = repr(run[token].input_text)
        line = f"token {token} {text}" + (f" · {label}" if len(self.fit.labels) > 1 else "")
        self.view.hover_text = line
        self.view.update()
        xy = self.view.screen_positions()[path][token]
        QToolTip.showText(self.view.mapToGlobal(QPointF(*xy).toPoint()), line, self.view)


def install(host: "WindowHost") -> TrajectoryFeature:
    """Add the Trajectory dock to the window ``host``."""
    return TrajectoryFeature(host)
