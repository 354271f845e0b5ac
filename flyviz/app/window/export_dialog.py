"""File → Export movie: choose range, size, frame rate, quality, format and orbit, then export.

The export itself runs in the background behind a cancellable progress dialog
(:mod:`flyviz.app.base.export_jobs`, which features use too). The dialog is the window's
own (the composition root's): no feature imports it.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import QStandardPaths
from PySide6.QtWidgets import (QCheckBox, QComboBox, QDialog, QDialogButtonBox, QDoubleSpinBox,
                               QFileDialog, QFormLayout, QHBoxLayout, QLabel, QLineEdit,
                               QMessageBox, QPushButton, QSpinBox, QVBoxLayout, QWidget)

from flyviz.app.base.export_jobs import report_export, run_export
from flyviz.app.base.save_dialog import add_suffix, ask_save_path_as, ask_to_replace, movie_file
from flyviz.export import ExportOptions
from flyviz.export.options import DEFAULT_QUALITY, MOVIE_EXTENSIONS, QUALITY_RANGE, movie_format
from flyviz.model.checkpoint import Anatomy
from flyviz.model.errors import ExportError, FlyvizError
from flyviz.record.recording import Recording
from flyviz.render.camera import CameraPose
from flyviz.render.style import CloudStyle, ColourScale, activation_layer

log = logging.getLogger(__name__)

#: (label, format, extension) in the format menu.
FORMATS = (("MP4 (H.264)", "mp4", ".mp4"), ("WebM (VP9, smallest)", "webm", ".webm"),
           ("GIF", "gif", ".gif"), ("PNG frames (a folder)", "png", ""))

#: The format of a folder of PNG frames (a name ending in a slash is one).
FRAMES = "png"


def named_format(text: str) -> str | None:
    """The format a name says by itself: a movie's suffix in any case (``x.webm`` and
    ``X.WEBM`` → ``"webm"``, ``x.m4v`` → ``"mp4"``), ``"png"`` for a name ending in a slash
    (a folder of frames); ``None`` for a name that says none (``x``, ``x.v2``)."""
    if text.endswith(("/", "\\")):
        return FRAMES
    return MOVIE_EXTENSIONS.get(Path(text).suffix.lower())


def export_target(text: str, selected: str) -> tuple[str, str]:
    """The format and the name an export writes for a name given with format ``selected``
    chosen in the form.

    A name says what the user means: one ending in a movie's suffix is that movie whatever
    is selected (``x.webm`` with MP4 selected is a WebM, not ``x.webm.mp4``), one ending in a
    slash a folder of frames. Any other gets the selected format's suffix (``x`` → ``x.mp4``),
    or a slash where PNG frames are selected (``x.v2`` → ``x.v2/``).

    Returns
    -------
    (str, str)
        The format (``"mp4"``, ``"webm"``, ``"gif"`` or ``"png"``) and the name.
    """
    named = named_format(text)
    if named is not None:
        return named, text
    if selected == FRAMES:
        return FRAMES, text + "/"
    return selected, str(add_suffix(text, _suffix(selected)))


def _suffix(fmt: str) -> str:
    """The suffix the form gives a name of format ``fmt`` (``""`` for PNG frames)."""
    return next(ext for _, f, ext in FORMATS if f == fmt)


def movie_filters(selected: str) -> str:
    """The save dialog's filters: every movie format, ``selected`` first (the one Qt
    selects), each with all its suffixes (``MP4 (H.264) (*.mp4 *.m4v)``)."""
    movies = sorted((f for f in FORMATS if f[1] != FRAMES), key=lambda f: f[1] != selected)
    filters = []
    for label, fmt, ext in movies:
        # The form's own suffix first: it is the one a name chosen without one gets.
        others = [s for s, f in MOVIE_EXTENSIONS.items() if f == fmt and s != ext]
        filters.append(f"{label} ({' '.join('*' + s for s in [ext, *others])})")
    return ";;".join(filters)


#: Frame sizes offered (any WIDTHxHEIGHT can be typed).
SIZES = ("1280x720", "1920x1080", "3840x2160", "1080x1080", "1080x1920", "854x480", "640x360")


class ExportDialog(QDialog):
    """The export settings form.

    Parameters
    ----------
    recording
        The run to export.
    anatomy
        Neuron positions of its model.
    model_name
        Shown in the movie's header.
    parent
        Parent widget.
    style
        The window's display settings (its brain view's
        :class:`~flyviz.render.style.CloudStyle`): the form starts from its
        colours, colour range, point size and glow, and the movie keeps its
        brightness gain and background. Without it, flyviz's defaults.
    camera
        The window's camera: the form offers "as in the window" as the view,
        chosen at first.
    """

    def __init__(self, recording: Recording, anatomy: Anatomy, model_name: str,
                 parent: QWidget | None = None, *, style: CloudStyle | None = None,
                 camera: CameraPose | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Export movie")
        self.recording, self.anatomy, self.model_name = recording, anatomy, model_name
        self.window_style, self.window_camera = style or CloudStyle(), camera
        layer = self.window_style.layer
        n = len(recording)
        form = QFormLayout()

        self.path_edit = QLineEdit(self._default_path())
        #: The movie Browse… chose, its replacing asked about there (Export asks no more).
        self._chosen: Path | None = None
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._browse)
        row = QHBoxLayout()
        row.addWidget(self.path_edit, 1)
        row.addWidget(browse)
        form.addRow("Save to", row)

        self.format_combo = QComboBox()
        for label, fmt, _ in FORMATS:
            self.format_combo.addItem(label, fmt)
        self.format_combo.currentIndexChanged.connect(self._on_format_change)
        form.addRow("Format", self.format_combo)

        # Tokens counted from 0, as the timeline and the command line's --tokens count them.
        self.first_spin, self.last_spin = QSpinBox(), QSpinBox()
        for spin in (self.first_spin, self.last_spin):
            spin.setRange(0, max(0, n - 1))
        self.first_spin.setValue(0)
        self.last_spin.setValue(max(0, n - 1))
        tokens = QHBoxLayout()
        tokens.addWidget(self.first_spin)
        tokens.addWidget(QLabel("to"))
        tokens.addWidget(self.last_spin)
        tokens.addWidget(QLabel(f"of {n}"), 1)
        form.addRow("Tokens", tokens)

        self.size_combo = QComboBox()
        self.size_combo.setEditable(True)
        self.size_combo.addItems(SIZES)
        self.size_combo.setToolTip("Movie size in pixels, independent of the window (WIDTHxHEIGHT)")
        form.addRow("Size", self.size_combo)

        self.fps_spin = QSpinBox()
        self.fps_spin.setRange(1, 120)
        self.fps_spin.setValue(30)
        self.fps_spin.setSuffix(" fps")
        form.addRow("Frame rate", self.fps_spin)

        self.k_spin = QSpinBox()
        self.k_spin.setRange(1, 120)
        self.k_spin.setValue(6)
        self.k_spin.setToolTip("Frames per token; the brain eases from one token's state to the next")
        form.addRow("Frames per token", self.k_spin)

        self.quality_spin = QSpinBox()
        self.quality_spin.setToolTip("Encoder CRF: lower is better quality and a larger file")
        form.addRow("Quality (CRF)", self.quality_spin)

        self.orbit_spin = QDoubleSpinBox()
        self.orbit_spin.setRange(-360.0, 360.0)
        self.orbit_spin.setDecimals(1)
        self.orbit_spin.setSuffix(" °/s")
        self.orbit_spin.setToolTip("Turn the brain about its dorsal axis while the movie plays")
        form.addRow("Orbit", self.orbit_spin)

        self.mode_combo = QComboBox()
        self.mode_combo.addItem("signed x (blue − / orange +)", "signed")
        self.mode_combo.addItem("|x| (magnitude)", "abs")
        if not (layer.is_state and layer.colormap in ("signed", "abs")):
            # A colour layer (importance, a difference, ...) is shown: the movie can show it too.
            self.mode_combo.addItem(f"as shown: {layer.caption}", "layer")
        self.mode_combo.setCurrentIndex(self.mode_combo.findData(
            layer.colormap if layer.is_state and layer.colormap in ("signed", "abs") else "layer"))
        self.mode_combo.currentIndexChanged.connect(self._on_colours_change)
        form.addRow("Colours", self.mode_combo)

        self.range_spin = QDoubleSpinBox()
        self.range_spin.setRange(0.0, 1000.0)
        self.range_spin.setDecimals(3)
        self.range_spin.setSingleStep(0.05)
        self.range_spin.setSpecialValueText("auto")
        self.range_spin.setToolTip("The activation at the end of the colour range (auto: the "
                                   "99th percentile of |x| over the exported tokens)")
        scale = self.window_style.layer.scale if layer.is_state else ColourScale.auto()
        self.range_spin.setValue(scale.limit if scale.kind == "fixed" else 0.0)
        form.addRow("Colour range ±", self.range_spin)

        self.point_spin = QDoubleSpinBox()
        self.point_spin.setRange(0.1, 100.0)
        self.point_spin.setDecimals(1)
        self.point_spin.setSuffix(" px")
        self.point_spin.setToolTip("Diameter of a quiet neuron at 720 lines (scaled with the "
                                   "movie's height, as in the window)")
        self.point_spin.setValue(self.window_style.point_size)
        form.addRow("Point size", self.point_spin)

        self.glow_spin = QDoubleSpinBox()
        self.glow_spin.setRange(0.0, 2.0)
        self.glow_spin.setDecimals(2)
        self.glow_spin.setSingleStep(0.1)
        self.glow_spin.setToolTip("Halo strength of active neurons, 0 to 2")
        self.glow_spin.setValue(self.window_style.glow)
        form.addRow("Glow", self.glow_spin)

        self.view_combo = QComboBox()
        for view in ("front", "top", "side"):
            self.view_combo.addItem(view, view)
        if camera is not None:
            self.view_combo.addItem("as in the window", "window")
            self.view_combo.setCurrentIndex(self.view_combo.count() - 1)
        form.addRow("View", self.view_combo)

        self.hold_spin = QDoubleSpinBox()
        self.hold_spin.setRange(0.0, 10.0)
        self.hold_spin.setValue(1.0)
        self.hold_spin.setSuffix(" s")
        self.hold_spin.setToolTip("Keep the last token on screen this long at the end")
        form.addRow("Hold at end", self.hold_spin)

        self.overlays_check = QCheckBox("model name, counter, colourbar, top-k bars and text")
        self.overlays_check.setChecked(True)
        form.addRow("Overlays", self.overlays_check)

        self.summary = QLabel()
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.export_button = buttons.addButton("Export", QDialogButtonBox.ButtonRole.AcceptRole)
        buttons.accepted.connect(self._accept_if_valid)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.summary)
        layout.addWidget(buttons)
        for spin in (self.first_spin, self.last_spin, self.fps_spin, self.k_spin):
            spin.valueChanged.connect(self._update_summary)
        self.hold_spin.valueChanged.connect(self._update_summary)
        self._on_format_change()
        self._on_colours_change()

    # ------------------------------------------------------------- reading
    def _default_path(self) -> str:
        folder = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.MoviesLocation)
        return str(Path(folder or Path.home()) / "flyviz-run.mp4")

    def current_format(self) -> str:
        """``"mp4"``, ``"webm"``, ``"gif"`` or ``"png"``."""
        return str(self.format_combo.currentData())

    def output_path(self) -> Path:
        """Where the export goes."""
        return Path(self.path_edit.text().strip())

    def options(self) -> ExportOptions:
        """The chosen settings; raises :class:`ExportError` if any is invalid."""
        from flyviz.render.offscreen import parse_size

        fmt = self.current_format()
        mode = str(self.mode_combo.currentData())
        view = str(self.view_combo.currentData())
        return ExportOptions(
            size=parse_size(self.size_combo.currentText()), fps=float(self.fps_spin.value()),
            frames_per_token=self.k_spin.value(),
            quality=self.quality_spin.value() if fmt in DEFAULT_QUALITY else None,
            orbit=self.orbit_spin.value(), mode=mode if mode in ("signed", "abs") else "signed",
            start=self.first_spin.value(), stop=self.last_spin.value() + 1,
            overlays=self.overlays_check.isChecked(), view=view if view != "window" else "front",
            scale=self.range_spin.value() or None, hold_seconds=self.hold_spin.value(),
            point_size=self.point_spin.value(), glow=self.glow_spin.value()).validate()

    def cloud_style(self) -> CloudStyle:
        """How the movie draws the brain: the window's style with the form's changes.

        The colours (the state as signed or |x| over the form's range, or the
        colour layer the window shows), point size and glow come from the
        form; the brightness gain and background stay the window's.
        """
        if self.mode_combo.currentData() == "layer":
            layer = self.window_style.layer
        else:
            limit = self.range_spin.value()
            layer = activation_layer(str(self.mode_combo.currentData()),
                                     ColourScale.fixed(limit) if limit else ColourScale.auto())
        return dataclasses.replace(self.window_style, layer=layer,
                                   point_size=self.point_spin.value(),
                                   glow=self.glow_spin.value())

    def camera(self) -> CameraPose | None:
        """The window's camera when the view is "as in the window", else ``None`` (a preset)."""
        return self.window_camera if self.view_combo.currentData() == "window" else None

    # ------------------------------------------------------------- reacting
    def _on_colours_change(self) -> None:
        # A colour layer brings its own range; the range applies to the state's colours.
        self.range_spin.setEnabled(self.mode_combo.currentData() != "layer")

    def _on_format_change(self) -> None:
        fmt = self.current_format()
        ext = _suffix(fmt)
        path = self.output_path()
        stem = path.with_suffix("") if path.suffix else path
        self.path_edit.setText(str(stem.with_name(stem.name + ext)) + ("/" if fmt == "png" else ""))
        has_quality = fmt in DEFAULT_QUALITY
        self.quality_spin.setEnabled(has_quality)
        if has_quality:
            self.quality_spin.setRange(*QUALITY_RANGE[fmt])
            self.quality_spin.setValue(DEFAULT_QUALITY[fmt])
        self._update_summary()

    def _update_summary(self) -> None:
        tokens = max(0, self.last_spin.value() - self.first_spin.value() + 1)
        fps = max(1, self.fps_spin.value())
        frames = tokens * self.k_spin.value() + int(round(self.hold_spin.value() * fps))
        seconds = frames / fps
        self.summary.setText(f"{tokens} tokens → {frames} frames, "
                             f"{int(seconds) // 60}:{seconds % 60:04.1f} at {fps} fps")
        self.export_button.setEnabled(tokens > 0)

    def _use(self, fmt: str, text: str) -> None:
        """Select ``fmt``, the form's other options following it as when the user picks it,
        and keep ``text`` as the name (picking a format renames ``x.m4v`` to ``x.mp4``)."""
        if fmt != self.current_format():
            self.format_combo.setCurrentIndex(self.format_combo.findData(fmt))
        self.path_edit.setText(text)

    def _browse(self) -> None:
        fmt = self.current_format()
        if fmt == FRAMES:
            folder = QFileDialog.getExistingDirectory(self, "Folder for PNG frames",
                                                      str(self.output_path().parent))
            if folder:
                self.path_edit.setText(str(Path(folder) / "flyviz-frames") + "/")
            return

        # A name chosen without a movie's suffix gets the filter's (the selected format's
        # where the dialog names none); the dialog offers no folder.
        path = ask_save_path_as(self, "Export movie", self.output_path(), movie_filters(fmt),
                                lambda chosen, selected:
                                movie_file(chosen, selected, _suffix(fmt)))
        if path is not None:
            self._use(MOVIE_EXTENSIONS[path.suffix.lower()], str(path))
            self._chosen = path

    def _accept_if_valid(self) -> None:
        try:
            text = self.path_edit.text().strip()
            if not text:
                raise ExportError("choose where to save the movie")
            # A name typed into "Save to" follows Browse's rule: its suffix says the format.
            self._use(*export_target(text, self.current_format()))
            self.options().crf(self.current_format())
            movie_format(self.output_path())        # a movie's name that is a folder
        except FlyvizError as exc:
            QMessageBox.warning(self, "Export movie", str(exc))
            return
        if not self._replacing_allowed():
            return      # the form stays open for another name
        self.accept()

    def _replacing_allowed(self) -> bool:
        """True unless the export would replace a movie or a folder's earlier frames that
        no one was asked about (a name typed into "Save to", which no file dialog saw) and
        the user says no. A render may be replaced, but not without a question."""
        from flyviz.export.encoders import FRAME_FILES
        from flyviz.fileio import earlier_output

        out = self.output_path()
        replaced = earlier_output(out, folder="frames", holding=FRAME_FILES)
        if replaced is None or out == self._chosen:
            return True
        question = None if replaced == "the earlier file" else \
            f"{out.name} already holds {replaced} ({FRAME_FILES}).\nDo you want to replace them?"
        return ask_to_replace(self, "Export movie", out, question)


def run_export_dialog(parent: QWidget | None, recording: Recording, anatomy: Anatomy | None,
                      model_name: str, *, style: CloudStyle | None = None,
                      camera: CameraPose | None = None, overlays: Any = None,
                      tell: Callable[..., None] | None = None,
                      meshes: Any = (), mesh_opacity: float = 0.12,
                      state: Any = None) -> Path | None:
    """Ask for settings, export, and tell the user how it went; return the written path.

    The form starts from ``style`` and ``camera``, the window's display
    settings (see :class:`ExportDialog`); ``overlays`` and ``state`` as for
    :func:`run_export`.
    ``tell(text, error=False)`` says how it went (the window's status bar);
    by default a message box does.
    """
    def boxed(text: str, error: bool = False) -> None:
        if error:
            QMessageBox.warning(parent, "Export movie", text)
        else:
            QMessageBox.information(parent, "Export movie", text)

    tell = tell or boxed

    if anatomy is None or not len(recording):
        tell("nothing to export yet: run a prompt first", error=True)
        return None
    dialog = ExportDialog(recording, anatomy, model_name, parent, style=style, camera=camera)
    if dialog.exec() != QDialog.DialogCode.Accepted:
        return None
    try:
        path, error = run_export(parent, recording, anatomy, dialog.output_path(), dialog.options(),
                                 model_name, style=dialog.cloud_style(), camera=dialog.camera(),
                                 overlays=overlays, meshes=meshes, mesh_opacity=mesh_opacity,
                                 state=state)
    except FlyvizError as exc:
        path, error = None, exc
    except Exception as exc:  # noqa: BLE001 - the app never crashes on an export
        path, error = None, exc
    return report_export(path, error, tell)
