"""Estimated lesions in the Lesion map dock: every single neuron's ΔCE_est as a colour layer.

The exact lesion map measures groups (63 superclasses, 252 cell types); the
first-order estimate (``flyviz importance``, ``flyviz sweep --estimate``,
:mod:`flyviz.analysis.importance`) gives every one of the 49,393 neurons its
own ``ΔCE_est``. In the app:

* :func:`open_estimate` reads the per-neuron table (``RESULT.neurons.csv`` or
  ``.parquet``; given the groups file ``RESULT`` or, for ``sweep --estimate``,
  the exact map ``X.csv`` whose ``X.estimate.neurons.csv`` lies beside it, it
  finds the table) and refuses one made with another model in one line;
* :func:`estimate_layer` colours each neuron by its own estimate, on the same
  importance colours as the group map (:func:`importance_colours`: log10 or
  linear from 0 to the largest);
* :func:`compute_estimate` computes the estimate over a text file (in the
  background, as a :class:`~flyviz.app.base.background.BackgroundJob` of purpose
  :data:`COMPUTE`: progress, Cancel), on the groups of the open map, and
  measures it against the map when the map was made on the same text;
* :class:`EstimateSection` is the dock's part for it: what is open, the
  measured agreement (Spearman and the sign agreement, when the file has them)
  and the buttons.

The feature (:class:`~flyviz.app.lesion.lesion_panel.LesionFeature`) wires them.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from PySide6.QtCore import Signal
from PySide6.QtWidgets import (QHBoxLayout, QLabel, QProgressBar, QPushButton, QVBoxLayout,
                               QWidget)

from flyviz.analysis.sweep import SweepError
from flyviz.app.base.background import CancellableProgress, Cancelled, ModelFileController
from flyviz.model.errors import InputError
from flyviz.render.style import ColourLayer
from flyviz.viewer.layers import ESTIMATE, importance_colours
from flyviz.viewer.layers import estimate_layer as _estimate_colours

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.analysis.importance import Agreement
    from flyviz.analysis.sweep import LesionMap
    from flyviz.model.checkpoint import Checkpoint

#: The :class:`~flyviz.app.base.background.BackgroundCalls` purpose of a computed estimate.
COMPUTE = "estimate-compute"

#: The extensions of the per-neuron table.
_KINDS = (".csv", ".parquet")


@dataclass(frozen=True)
class EstimatedLesions:
    """Every neuron's estimated ΔCE of being silenced, with where it came from.

    Attributes
    ----------
    values
        ``(neurons,)`` float64, nats/token, in neuron order.
    info
        The file's (or run's) metadata: model, text, settings, and
        ``"agreement"`` when it was measured against the exact map.
    source
        What it is, for the dock (a file name, or ``"computed over story.txt"``).
    """

    values: np.ndarray
    info: dict[str, Any]
    source: str

    @property
    def agreement(self) -> "Agreement | None":
        """Spearman and sign agreement with the exact map, when measured."""
        from flyviz.analysis.importance import Agreement

        found = self.info.get("agreement")
        if not isinstance(found, dict):
            return None
        try:
            spearman = found.get("spearman")
            return Agreement(int(found["groups"]),
                             float("nan") if spearman is None else float(spearman),
                             float(found["sign_agreement"]))
        except (KeyError, TypeError, ValueError):
            return None

    @property
    def positions(self) -> int | None:
        """Positions of text it was estimated over."""
        text = self.info.get("text")
        positions = text.get("positions") if isinstance(text, dict) else None
        return positions if isinstance(positions, int) else None

    def describe(self) -> str:
        """One line for the dock: what, over how much text, the largest estimate."""
        over = f" over {self.positions:,} positions" if self.positions else ""
        top = int(np.nanargmax(self.values)) if np.isfinite(self.values).any() else 0
        return (f"estimated lesions ({self.source}): every neuron silenced alone, to first "
                f"order{over}; largest ΔCE_est {self.values[top]:+.4f} nats/token "
                f"(neuron {top})")

    def agreement_line(self) -> str:
        """The measured agreement with the exact map, or why there is none."""
        found = self.agreement
        if found is None:
            return ("not measured against an exact lesion map ('flyviz sweep --estimate' "
                    "measures it)")
        rho = "n/a" if np.isnan(found.spearman) else f"{found.spearman:+.3f}"
        return (f"estimate vs exact over {found.groups:,} groups: Spearman {rho}, "
                f"same sign {found.sign_agreement:.1%}")


def neuron_table_path(path: str | Path) -> Path:
    """The per-neuron table of ``path``: itself (``R.neurons.csv``), the companion of a
    groups file (``R.csv`` → ``R.neurons.csv``), or of ``sweep --estimate``'s exact map
    (``X.csv`` → ``X.estimate.neurons.csv``), whichever exists.

    Raises
    ------
    SweepError
        When none does (one line).
    """
    path = Path(path).expanduser()
    suffix = path.suffix.lower()
    if suffix not in _KINDS:
        raise SweepError(f"{path.name} is not an estimate (expected the .csv or .parquet "
                         "file of 'flyviz importance' or 'flyviz sweep --estimate')")
    if path.stem.endswith(".neurons"):
        candidates = [path]
    else:
        candidates = [path.with_name(f"{path.stem}.neurons{path.suffix}"),
                      path.with_name(f"{path.stem}.estimate.neurons{path.suffix}")]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise SweepError(f"no per-neuron estimate at {candidates[0]}: open the .neurons"
                     f"{path.suffix} file 'flyviz importance' or 'flyviz sweep --estimate' wrote")


def open_estimate(path: str | Path, checkpoint: "Checkpoint") -> EstimatedLesions:
    """The per-neuron estimate of ``path`` (see :func:`neuron_table_path`) for ``checkpoint``.

    Raises
    ------
    SweepError
        (one line) When the file is missing, not an estimate, damaged, or was
        made with another model.
    """
    from flyviz.analysis.importance import read_neuron_table
    from flyviz.model.identity import identity_mismatch

    table = neuron_table_path(path)
    try:
        info, columns = read_neuron_table(table)
    except (InputError, ValueError, KeyError, OSError) as exc:
        raise SweepError(f"{table.name} is not a readable per-neuron estimate ({exc})"
                         ) from None
    model = info.get("model") if isinstance(info, dict) else None
    if not isinstance(model, dict) or not model.get("weights_sha256"):
        raise SweepError(f"the estimate {table.name} does not name its model (no digests)")
    note = identity_mismatch(model, checkpoint, f"the estimate {table.name}")
    if note is not None:
        raise SweepError(note)
    neurons = int(checkpoint.config.neurons)
    if "delta_ce_est" not in columns or "neuron" not in columns:
        raise SweepError(f"{table.name} is damaged (no neuron or delta_ce_est column)")
    index = np.asarray(columns["neuron"], dtype=np.int64)
    if index.size != neurons or not np.array_equal(np.sort(index), np.arange(neurons)):
        raise SweepError(f"{table.name} is damaged (it does not hold each of the "
                         f"{neurons:,} neurons once)")
    values = np.empty(neurons, dtype=np.float64)
    values[index] = np.asarray(columns["delta_ce_est"], dtype=np.float64)
    values.setflags(write=False)
    return EstimatedLesions(values, info, table.name)


def estimate_layer(estimate: EstimatedLesions, log: bool = True) -> ColourLayer:
    """Each neuron coloured by its own ``ΔCE_est`` (the registry's rule:
    :func:`flyviz.viewer.layers.estimate_layer`)."""
    return _estimate_colours(estimate.values, log)


class EstimateController(ModelFileController):
    """The open estimate: read off the UI thread, checked against the model.

    Signals
    -------
    opened(estimate), closed(note)
        See :class:`~flyviz.app.base.background.ModelFileController`.
    failed(message)
        An estimate could not be opened (one line).
    """

    failed = Signal(str)

    PURPOSE = "estimate"
    NO_MODEL = "load the model the estimate was made with first, then open it"

    @property
    def estimate(self) -> EstimatedLesions | None:
        """The open estimate, or ``None``."""
        return self.current

    def read(self, path: str | Path, checkpoint: "Checkpoint") -> EstimatedLesions:
        return open_estimate(path, checkpoint)

    def open(self, path: str | Path) -> None:
        """Open the estimate of ``path``: :attr:`opened` or :attr:`failed` follows."""
        self.open_file(path, self.failed.emit)

    def show(self, estimate: EstimatedLesions) -> None:
        """Make a computed estimate the open one."""
        self._calls.cancel(self.PURPOSE)
        self.current = estimate
        self.opened.emit(estimate)


def groups_of(lesions: "LesionMap | None", checkpoint: "Checkpoint") -> list[Any]:
    """The open map's groups (to sum the estimate over), or none."""
    from flyviz.analysis.sweep import Group

    if lesions is None:
        return []
    return [Group(row.group, row.query, np.asarray(lesions.neurons_of(row, checkpoint),
                                                   dtype=np.int64))
            for row in lesions.rows]


def compute_estimate(checkpoint: "Checkpoint", text: str | Path, lesions: "LesionMap | None",
                     stop: threading.Event, report: Any, max_tokens: int | None = None
                     ) -> EstimatedLesions | None:
    """Estimate every neuron's silencing over the text file ``text`` (runs off the UI
    thread); ``None`` when ``stop`` was set.

    The text is read as the open map read its own (its context); when the map
    was made on the same text (the same tokens and windows), the estimate of
    its groups is measured against it (:func:`flyviz.analysis.importance.agreement`).
    """
    from flyviz.analysis.corpus import DEFAULT_CONTEXT, build_corpus
    from flyviz.analysis.importance import ImportanceSettings, run_importance
    from flyviz.model.tokenizer import tokenizer_for

    info_text = lesions.info.get("text", {}) if lesions is not None else {}
    context = info_text.get("context") if isinstance(info_text, dict) else None
    context = int(context) if isinstance(context, int) else DEFAULT_CONTEXT
    corpus = build_corpus([Path(text)], tokenizer_for(checkpoint), context=context,
                          max_tokens=max_tokens, bos_token_id=checkpoint.config.bos_token_id)
    same_text = lesions is not None and lesions.mode == "silence" \
        and isinstance(info_text, dict) and info_text.get("sha256") == corpus.digest()
    groups = groups_of(lesions, checkpoint) if same_text else []
    progress = CancellableProgress(corpus.n_tokens, stop, report)
    try:
        run = run_importance(None, checkpoint, corpus, groups, None,
                             ImportanceSettings(context=context), workers=0,
                             progress=progress,  # type: ignore[arg-type]  # duck-typed bar
                             exact=lesions.rows if same_text and lesions is not None else None)
    except Cancelled:
        return None
    return EstimatedLesions(run.estimate, run.info, f"computed over {Path(text).name}")


class EstimateSection(QWidget):
    """The Lesion map dock's part for the estimate: what is open, the agreement, the buttons.

    Signals
    -------
    open_requested(), compute_requested(), cancel_requested(), colour_requested()
        Open an estimate file; compute one over a text file; stop that; colour the
        brain by it.
    """

    open_requested = Signal()
    compute_requested = Signal()
    cancel_requested = Signal()
    colour_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 4, 0, 4)
        heading = QLabel("<b>Every neuron, estimated</b> (first order, beside the exact "
                         "groups)")
        # Wrapped: unwrapped, the heading alone set the width of the column the dock is in.
        heading.setWordWrap(True)
        layout.addWidget(heading)
        self.agreement = QLabel("")
        self.agreement.setWordWrap(True)
        self.agreement.setObjectName("agreement")
        layout.addWidget(self.agreement)
        self.status = QLabel("")
        self.status.setWordWrap(True)
        self.status.setObjectName("hint")
        layout.addWidget(self.status)
        row = QHBoxLayout()
        self.open_button = QPushButton("Open…")
        self.open_button.setToolTip("Open the per-neuron estimate of 'flyviz importance' or "
                                    "'flyviz sweep --estimate'")
        self.open_button.clicked.connect(self.open_requested.emit)
        self.compute_button = QPushButton("Estimate…")
        self.compute_button.setToolTip("Estimate every neuron's silencing over a text file "
                                       "(one forward and one backward pass)")
        self.compute_button.clicked.connect(self.compute_requested.emit)
        self.colour_button = QPushButton("Colour by it")
        self.colour_button.setToolTip("Colour every neuron by its own ΔCE_est")
        self.colour_button.clicked.connect(self.colour_requested.emit)
        for button in (self.open_button, self.compute_button, self.colour_button):
            row.addWidget(button)
        row.addStretch(1)
        layout.addLayout(row)
        busy_row = QHBoxLayout()
        self.progress = QProgressBar()
        self.progress.setRange(0, 100)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setToolTip("Stop estimating (Esc)")
        self.cancel_button.clicked.connect(self.cancel_requested.emit)
        busy_row.addWidget(self.progress, 1)
        busy_row.addWidget(self.cancel_button)
        layout.addLayout(busy_row)
        self.set_estimate(None)
        self.set_busy(False)

    def set_estimate(self, estimate: EstimatedLesions | None, note: str = "") -> None:
        """Show ``estimate`` (``None``: none, and ``note`` why)."""
        if estimate is None:
            self.agreement.setText("")
            self.agreement.setVisible(False)
            self.status.setText(note or "Estimated lesions of every single neuron: open the "
                                        "file of 'flyviz importance' or 'flyviz sweep "
                                        "--estimate', or estimate over a text.")
        else:
            self.agreement.setText(estimate.agreement_line())
            self.agreement.setVisible(True)
            self.status.setText(estimate.describe())
        self.colour_button.setEnabled(estimate is not None)

    def set_busy(self, busy: bool) -> None:
        """Show the progress and Cancel while an estimate is computed."""
        self.progress.setVisible(busy)
        self.cancel_button.setVisible(busy)
        self.compute_button.setEnabled(not busy)
        if busy:
            self.progress.setValue(0)


__all__ = ["COMPUTE", "ESTIMATE", "EstimateController", "EstimateSection",
           "EstimatedLesions", "compute_estimate", "estimate_layer", "groups_of",
           "importance_colours", "neuron_table_path", "open_estimate"]
