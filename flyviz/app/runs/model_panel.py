"""The Model dock: what is loaded, whether it is verified, and where to load another model from."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QLineEdit, QPushButton, QVBoxLayout, QWidget

from flyviz.app.runs.verification import VerificationStatus

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.kinds import ModelDescription


class ModelPanel(QWidget):
    """The loaded model's description and verification, a hub id / folder field, Demo and
    Open folder buttons.

    :attr:`verification` is the verification status line; the window binds it
    to its :class:`~flyviz.app.runs.verification.VerificationController`.

    Signals
    -------
    load_requested(spec)
        Load this model (``"demo"`` from the Demo button).
    spec_entered(spec)
        The user typed a hub id or folder in the field and asked to load it.
    open_folder_requested()
        The user wants to pick a model folder.
    """

    load_requested = Signal(str)
    spec_entered = Signal(str)
    open_folder_requested = Signal()

    def __init__(self, remembered_spec: str = "", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        self.label = QLabel("no model loaded")
        self.label.setWordWrap(True)
        layout.addWidget(self.label)
        self.verification = VerificationStatus()
        layout.addWidget(self.verification)
        spec_row = QHBoxLayout()
        self.field = QLineEdit()
        self.field.setPlaceholderText("hub id, folder or 'demo'")
        self.field.setToolTip("e.g. ngxson/fly-llm-hf, fernandofernandes/fly-wordbrain-rank64, "
                              "a downloaded folder, or demo")
        self.field.setText(remembered_spec)
        load = QPushButton("Load")
        self.field.returnPressed.connect(self._load_from_field)
        load.clicked.connect(self._load_from_field)
        spec_row.addWidget(self.field, 1)
        spec_row.addWidget(load)
        layout.addLayout(spec_row)
        row = QHBoxLayout()
        demo = QPushButton("Demo brain")
        demo.setToolTip("The embedded demo brain (synthetic wiring, works offline)")
        demo.clicked.connect(lambda: self.load_requested.emit("demo"))
        folder = QPushButton("Open folder…")
        folder.setToolTip("A model folder, and its connectome dataset folder if it needs one")
        folder.clicked.connect(self.open_folder_requested.emit)
        for button in (demo, folder):
            row.addWidget(button)
        layout.addLayout(row)
        layout.addStretch(1)

    def _load_from_field(self) -> None:
        self.spec_entered.emit(self.field.text().strip())

    def show_loading(self, spec: str) -> None:
        """Say that ``spec`` is being loaded."""
        self.label.setText(f"loading <b>{html.escape(spec)}</b>…")

    def show_failed(self, spec: str) -> None:
        """Say that ``spec`` could not be loaded (nothing else is loaded)."""
        self.label.setText(f"could not load <b>{html.escape(spec)}</b>")

    def describe_model(self, description: "ModelDescription") -> None:
        """Describe a model of another kind than the language model (a spiking brain), as
        its kind says (:meth:`ModelKind.describe <flyviz.kinds.ModelKind.describe>`)."""
        lines = [f"<b>{html.escape(description.name)}</b>",
                 *(html.escape(line) for line in description.facts),
                 *(f"{html.escape(what)}: {html.escape(value)}"
                   for what, value in description.provenance)]
        self.label.setText("<br>".join(lines))

    def describe(self, bundle, anatomy_note: str = "") -> None:
        """Describe the loaded :class:`~flyviz.app.runs.model_control.ModelBundle` (None: nothing)."""
        if bundle is None:
            self.label.setText("no model loaded")
            return
        ck = bundle.checkpoint
        cfg = ck.config
        # FlyGPT's input neurons take a biased linear map of the token's embedding: it has
        # no delay slots, as flyviz info says (its loader's one slot is no property of it).
        inputs = (f"{cfg.delay_k} delay slots" if ck.in_bias is None else
                  f"{cfg.n_inputs:,} input neurons, no delay slots")
        lines = [f"<b>{html.escape(bundle.name)}</b>",
                 f"{cfg.neurons:,} neurons · {ck.n_edges:,} synapses",
                 f"vocabulary {cfg.vocabulary:,} · {inputs} · {cfg.readout_kind} readout",
                 f"layout: {html.escape(ck.layout)}"]
        dataset = ck.metadata.get("dataset")
        if dataset:
            lines.append(f"dataset: {html.escape(str(dataset))}")
        if anatomy_note:
            lines.append(html.escape(anatomy_note))
        if bundle.is_demo:
            lines.append("<i>synthetic demo brain: not the fly connectome</i>")
        self.label.setText("<br>".join(lines))
