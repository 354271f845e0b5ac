"""The app's small dialogs: screenshot options, the shortcut list, About, unexpected errors."""

from __future__ import annotations

import html
from collections.abc import Callable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (QApplication, QComboBox, QDialog, QDialogButtonBox, QFormLayout,
                               QLabel, QMainWindow, QMessageBox, QTableWidget, QTableWidgetItem,
                               QVBoxLayout, QWidget)

from flyviz import __version__
from flyviz.model.errors import FlyvizError

#: Licence and credit of the real connectome, shown when a real model is loaded.
CONNECTOME_CREDIT = (
    "The wiring is the MaleCNS v1.0 connectome of the fruit fly central nervous system "
    "(Janelia FlyEM), released under CC BY 4.0; cite its authors when you publish images or "
    "movies of it. Soma positions: MaleCNS somaLocation (8 nm voxels).")


def demo_description() -> str:
    """What the demo brain is (it is not the fly connectome)."""
    try:
        from flyviz.demo import DEMO_DESCRIPTION
    except ImportError:
        return ("The demo brain has synthetic wiring made by flyviz, not the fly connectome. "
                "Open a real checkpoint with File → Open model.")
    return str(DEMO_DESCRIPTION)


class ScreenshotDialog(QDialog):
    """Choose what to capture (brain view or whole window) and at what scale."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Save screenshot")
        form = QFormLayout(self)
        self.target = QComboBox()
        self.target.addItem("Brain view", "brain")
        self.target.addItem("Whole window", "window")
        self.scale = QComboBox()
        for s in (1, 2, 3, 4):
            self.scale.addItem(f"{s}×", float(s))
        form.addRow("Capture", self.target)
        form.addRow("Scale", self.scale)
        note = QLabel("The brain view is rendered again at the chosen scale;\n"
                      "the whole window is enlarged from screen pixels.")
        note.setObjectName("hint")
        form.addRow(note)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Save
                                   | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form.addRow(buttons)


def shortcuts_dialog(parent: QWidget, rows: list[tuple[str, str]]) -> QDialog:
    """Help → Keyboard shortcuts: ``(keys, description)`` rows in one table, shown non-modally."""
    dialog = QDialog(parent)
    dialog.setWindowTitle("Keyboard shortcuts")
    layout = QVBoxLayout(dialog)
    table = QTableWidget(len(rows), 2)
    table.setObjectName("shortcutTable")
    table.setHorizontalHeaderLabels(["Keys", "Action"])
    table.verticalHeader().setVisible(False)
    table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
    for row, (keys, description) in enumerate(rows):
        table.setItem(row, 0, QTableWidgetItem(keys))
        table.setItem(row, 1, QTableWidgetItem(description))
    table.resizeColumnsToContents()
    table.horizontalHeader().setStretchLastSection(True)
    layout.addWidget(table)
    extra = QLabel("Mouse: drag to orbit, scroll to zoom, Shift+drag to pan, "
                   "click a neuron to inspect it.")
    extra.setObjectName("hint")
    layout.addWidget(extra)
    buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
    buttons.rejected.connect(dialog.reject)
    layout.addWidget(buttons)
    # As wide as the table's columns (no sideways scrolling to read an action), at most the
    # screen's width; a fixed 520 px cut the longest actions off.
    wanted = (table.horizontalHeader().length() + table.verticalScrollBar().sizeHint().width()
              + 2 * table.frameWidth() + layout.contentsMargins().left()
              + layout.contentsMargins().right())
    screen = parent.screen().availableGeometry().width() if parent.screen() else wanted
    dialog.resize(min(max(520, wanted), int(screen * 0.9)), 600)
    dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    dialog.open()
    return dialog


def about_text(bundle=None, description=None) -> str:
    """The About box's text: version, the model's provenance and licences.

    ``bundle`` is the loaded :class:`~flyviz.app.runs.model_control.ModelBundle` (or None);
    ``description`` what the kind of a model shown without one says of it (a spiking
    brain: :meth:`ModelKind.describe <flyviz.kinds.ModelKind.describe>`).
    """
    parts = [f"<h3>flyviz {html.escape(__version__)}</h3>",
             "<p>Watch a connectome think: a connectome language model (the Fly LLM, "
             "fly-wordbrain, FlyGPT: the fruit-fly brain stepped once per text token) or a "
             "spiking brain (Shiu et al.'s LIF model on a ConnecTorch <tt>.ct</tt> brain, "
             "the whole MaleCNS or a Shiu et al. folder), lit neuron by neuron.</p>"]
    if bundle is None and description is not None:
        parts.append(f"<p><b>Model:</b> {html.escape(description.name)}<br>"
                     + "<br>".join(html.escape(line) for line in description.facts) + "</p>")
        if description.provenance:
            parts.append("<p>" + "<br>".join(f"<b>{html.escape(what)}:</b> {html.escape(value)}"
                                             for what, value in description.provenance)
                         + "</p>")
        if description.credit:
            parts.append(f"<p>{html.escape(description.credit)}</p>")
    elif bundle is None:
        parts.append("<p>No model loaded.</p>")
    else:
        ck = bundle.checkpoint
        parts.append(f"<p><b>Model:</b> {html.escape(bundle.name)} "
                     f"({html.escape(ck.layout)} layout)<br>"
                     f"<b>Source:</b> {html.escape(str(ck.source or bundle.spec))}</p>")
        shown = {k: v for k, v in ck.metadata.items()
                 if isinstance(v, (str, int, float)) and len(str(v)) < 300}
        if shown:
            parts.append("<p>" + "<br>".join(f"<b>{html.escape(str(k))}:</b> {html.escape(str(v))}"
                                             for k, v in sorted(shown.items())) + "</p>")
        if bundle.is_demo:
            parts.append(f"<p>{html.escape(demo_description())}</p>")
        else:
            parts.append(f"<p>{html.escape(CONNECTOME_CREDIT)}</p>")
    parts.append("<p>flyviz is MIT-licensed. It uses Qt (PySide6, LGPL), vispy and pyqtgraph "
                 "(BSD/MIT), NumPy and SciPy (BSD) and Hugging Face tokenizers (Apache 2.0).</p>")
    return "".join(parts)


def show_about(parent: QWidget, text: str) -> QMessageBox:
    """Help → About, shown non-modally."""
    box = QMessageBox(QMessageBox.Icon.NoIcon, "About flyviz", text,
                      QMessageBox.StandardButton.Ok, parent)
    box.setTextFormat(Qt.TextFormat.RichText)
    box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    box.open()
    return box


def install_excepthook(window: QMainWindow | None = None) -> Callable:
    """Show unexpected exceptions in a dialog instead of aborting the app.

    Returns the hook, which is also installed as :data:`sys.excepthook`.
    """
    import sys
    import traceback

    previous = sys.excepthook

    def hook(exc_type, exc, tb) -> None:
        if issubclass(exc_type, KeyboardInterrupt):
            previous(exc_type, exc, tb)
            return
        details = "".join(traceback.format_exception(exc_type, exc, tb))
        sys.stderr.write(details)
        if QApplication.instance() is None:
            return
        if isinstance(exc, FlyvizError):
            text = str(exc)
        else:
            text = (f"Something went wrong inside flyviz ({exc_type.__name__}: {exc}). "
                    "The app keeps running; please report this with the details below.")
        closing = window is not None and bool(window.property("closing"))
        parent = window if window is not None and not closing else None
        if window is not None:
            window.statusBar().showMessage(text, 20_000)
        box = QMessageBox(QMessageBox.Icon.Critical, "flyviz", text, QMessageBox.StandardButton.Ok,
                          parent)
        box.setDetailedText(details)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.open()
        hook.last_box = box  # type: ignore[attr-defined]

    sys.excepthook = hook
    return hook
