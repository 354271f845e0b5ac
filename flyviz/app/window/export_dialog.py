"""File → Export movie: choose range, size, frame rate, quality, format and orbit, then export.

The export runs :func:`flyviz.export.export_recording` on a background
:class:`QThread` (frame easing, encoding, file handling) behind a cancellable
progress dialog. OpenGL drawing itself happens on the GUI thread, where the
app's own canvas lives: vispy keeps one "current canvas" for the whole
process, so two threads drawing at once could send one canvas's commands to
the other's context. The worker asks the GUI thread for each frame and waits;
between frames the app stays responsive. Cancelling, an error or a full disk
leaves nothing under the chosen file name.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from PySide6.QtCore import QEventLoop, QObject, QStandardPaths, Qt, QThread, Signal, Slot
from PySide6.QtWidgets import (QCheckBox, QComboBox, QDialog, QDialogButtonBox, QDoubleSpinBox,
                               QFileDialog, QFormLayout, QHBoxLayout, QLabel, QLineEdit,
                               QMessageBox, QProgressDialog, QPushButton, QSpinBox, QVBoxLayout,
                               QWidget)

from flyviz.app.window.background import wait_qthread
from flyviz.export import ExportCancelled, ExportOptions, export_recording, export_state
from flyviz.export.flow import make_flow_renderer
from flyviz.export.movie import make_renderer, state_renderer
from flyviz.export.options import DEFAULT_QUALITY, QUALITY_RANGE, movie_format
from flyviz.model.checkpoint import Anatomy
from flyviz.model.errors import ExportError, FlyvizError
from flyviz.record.recording import Recording
from flyviz.render.camera import CameraPose
from flyviz.render.style import CloudStyle, ColourScale, activation_layer

log = logging.getLogger(__name__)

#: (label, format, extension) in the format menu.
FORMATS = (("MP4 (H.264)", "mp4", ".mp4"), ("WebM (VP9, smallest)", "webm", ".webm"),
           ("GIF", "gif", ".gif"), ("PNG frames (a folder)", "png", ""))

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

        self.first_spin, self.last_spin = QSpinBox(), QSpinBox()
        for spin in (self.first_spin, self.last_spin):
            spin.setRange(1, max(1, n))
        self.first_spin.setValue(1)
        self.last_spin.setValue(max(1, n))
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
        self.mode_combo.addItem("signed h (blue − / orange +)", "signed")
        self.mode_combo.addItem("|h| (magnitude)", "abs")
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
                                   "99th percentile of |h| over the exported tokens)")
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
            start=self.first_spin.value() - 1, stop=self.last_spin.value(),
            overlays=self.overlays_check.isChecked(), view=view if view != "window" else "front",
            scale=self.range_spin.value() or None, hold_seconds=self.hold_spin.value(),
            point_size=self.point_spin.value(), glow=self.glow_spin.value()).validate()

    def cloud_style(self) -> CloudStyle:
        """How the movie draws the brain: the window's style with the form's changes.

        The colours (the state as signed or |h| over the form's range, or the
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
        ext = dict((f, e) for _, f, e in FORMATS)[fmt]
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

    def _browse(self) -> None:
        fmt = self.current_format()
        if fmt == "png":
            folder = QFileDialog.getExistingDirectory(self, "Folder for PNG frames",
                                                      str(self.output_path().parent))
            if folder:
                self.path_edit.setText(str(Path(folder) / "flyviz-frames") + "/")
            return
        label, _, ext = next(f for f in FORMATS if f[1] == fmt)
        path, _ = QFileDialog.getSaveFileName(self, "Export movie", str(self.output_path()),
                                              f"{label} (*{ext})")
        if path:
            self.path_edit.setText(path if path.lower().endswith(ext) else path + ext)

    def _accept_if_valid(self) -> None:
        try:
            self.options().crf(self.current_format())
            fmt = movie_format(self.output_path()) if self.path_edit.text().strip() else None
            if fmt is None:
                raise ExportError("choose where to save the movie")
        except FlyvizError as exc:
            QMessageBox.warning(self, "Export movie", str(exc))
            return
        self.accept()


class _GuiThreadRenderer(QObject):
    """Renders on the GUI thread on behalf of the export thread.

    ``render_state`` is called from the worker; it emits a signal connected
    with a blocking queued connection, so the drawing happens on this object's
    (the GUI) thread and the worker resumes with the image.
    """

    _request = Signal(object, object, object, object)

    def __init__(self, renderer: Any) -> None:
        super().__init__()
        self.renderer = renderer
        self.base_azimuth = renderer.base_azimuth
        self.size = renderer.size
        self._image: np.ndarray | None = None
        self._error: BaseException | None = None
        self._request.connect(self._render, Qt.ConnectionType.BlockingQueuedConnection)

    @Slot(object, object, object, object)
    def _render(self, state: Any, overlay: Any, azimuth: Any, value_range: Any) -> None:
        try:
            self._image, self._error = self.renderer.render_state(
                state, overlay, azimuth, value_range), None
        except Exception as exc:  # noqa: BLE001 - handed back to the worker to raise
            self._image, self._error = None, exc

    def render_state(self, state: np.ndarray, overlay: Any = None,
                     azimuth: float | None = None,
                     value_range: tuple[float, float] | None = None) -> np.ndarray:
        self._request.emit(state, overlay, azimuth, value_range)
        if self._error is not None:
            raise self._error
        assert self._image is not None
        return self._image


class _ExportWorker(QObject):
    progressed = Signal(int, int)
    finished = Signal(object, object)  # (path or None, error or None)

    def __init__(self, job: dict[str, Any], cancel: threading.Event,
                 export: Callable[..., Path] = export_recording) -> None:
        super().__init__()
        self.job, self.cancel, self.export = job, cancel, export

    @Slot()
    def run(self) -> None:
        try:
            path = self.export(progress=self.progressed.emit, cancelled=self.cancel.is_set,
                               **self.job)
        except BaseException as exc:  # noqa: BLE001 - reported to the GUI, never crashes it
            self.finished.emit(None, exc)
            return
        self.finished.emit(path, None)


class _BackgroundExport(QObject):
    """An export function run in a background thread, drawing with ``renderer`` on this
    (the GUI) thread; the runner closes the renderer when the export ends.

    Signals
    -------
    progressed(done, total)
        After every frame.
    done(path, error)
        The written path (``None`` on failure) and the error (``None`` on success).
    """

    progressed = Signal(int, int)
    done = Signal(object, object)

    def __init__(self, renderer: Any, export: Callable[..., Path], job: dict[str, Any],
                 total: int, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._renderer = renderer
        self._proxy = _GuiThreadRenderer(self._renderer)
        self._cancel = threading.Event()
        self._thread = QThread()
        self._worker = _ExportWorker(dict(job, renderer=self._proxy), self._cancel, export)
        self._worker.moveToThread(self._thread)
        self._thread.started.connect(self._worker.run)
        self._worker.progressed.connect(self.progressed)
        self._worker.finished.connect(self._on_finished)
        self.total = int(total)
        self.running = False

    def start(self) -> None:
        """Begin exporting."""
        self.running = True
        self._thread.start()

    def cancel(self) -> None:
        """Stop at the next frame; ``done`` follows with an :class:`ExportCancelled`."""
        self._cancel.set()

    @Slot(object, object)
    def _on_finished(self, path: Any, error: Any) -> None:
        self._thread.quit()
        wait_qthread(self._thread, "an export thread")
        self._renderer.close()
        self.running = False
        self.done.emit(path, error)


class ExportRunner(_BackgroundExport):
    """One export of a recording in a background thread (see :class:`_BackgroundExport`)."""

    def __init__(self, recording: Recording, anatomy: Anatomy, out: Path, options: ExportOptions,
                 model_name: str, parent: QObject | None = None, *, style: Any = None,
                 camera: Any = None, overlay_contents: Any = None, meshes: Any = (),
                 mesh_opacity: float = 0.12) -> None:
        options = options.validate()
        start, stop = options.token_range(len(recording))
        style = style or options.cloud_style()
        # Made here, on the GUI thread, with the app's own vispy backend.
        import vispy.app

        renderer = make_renderer(recording, anatomy, options, model_name, style=style,
                                 camera=camera, app=vispy.app.use_app(), meshes=meshes,
                                 mesh_opacity=mesh_opacity)
        super().__init__(renderer, export_recording,
                         dict(recording=recording, anatomy=anatomy, out_path=out,
                              options=options, model_name=model_name, style=style,
                              overlay_contents=overlay_contents),
                         options.frame_count(stop - start), parent)


class StateExportRunner(_BackgroundExport):
    """One movie of a viewer state (:func:`flyviz.export.export_state`) in a background
    thread: the state's recording, colours, highlight, selection and meshes, with the
    export form's ``style`` and ``camera`` (``None``: the options' view preset).

    Give it a :meth:`~flyviz.viewer.state.ViewerState.frozen` copy: the export thread
    reads it while the window's state goes on changing.
    """

    def __init__(self, state: Any, out: Path, options: ExportOptions,
                 parent: QObject | None = None, *, style: Any = None, camera: Any = "state",
                 overlay_contents: Any = None) -> None:
        import vispy.app

        options = options.validate()
        start, stop = options.token_range(len(state.recording))
        # Made here, on the GUI thread, with the app's own vispy backend.
        renderer = state_renderer(state, options, style=style, camera=camera,
                                  app=vispy.app.use_app())
        super().__init__(renderer, export_state,
                         dict(state=state, out_path=out, options=options, style=style,
                              camera=camera, overlay_contents=overlay_contents),
                         options.frame_count(stop - start), parent)


class FlowExportRunner(_BackgroundExport):
    """One flow movie of a trace (:func:`flyviz.export.flow.export_flow`) in a background
    thread: the lag sweep of the *Why?* view, drawn with the window's ``style`` and
    ``camera``."""

    def __init__(self, attribution: Any, anatomy: Anatomy, out: Path, options: ExportOptions,
                 parent: QObject | None = None, *, style: Any = None, camera: Any = None,
                 reverse: bool = False, scale: str = "step", meshes: Any = (),
                 mesh_opacity: float = 0.12) -> None:
        import vispy.app

        from flyviz.export.flow import export_flow, flow_frame_count, flow_style

        options = options.validate()
        style = flow_style(attribution, options, style)
        renderer = make_flow_renderer(attribution, anatomy, options, scale=scale,
                                      reverse=reverse, style=style, camera=camera,
                                      app=vispy.app.use_app(), meshes=meshes,
                                      mesh_opacity=mesh_opacity)
        super().__init__(renderer, export_flow,
                         dict(attribution=attribution, anatomy=anatomy, out_path=out,
                              options=options, reverse=reverse, scale=scale, style=style),
                         flow_frame_count(attribution, options), parent)


def run_export(parent: QWidget | None, recording: Recording, anatomy: Anatomy, out: Path,
               options: ExportOptions, model_name: str, *, style: CloudStyle | None = None,
               camera: CameraPose | None = None, overlays: Any = None,
               meshes: Any = (), mesh_opacity: float = 0.12, state: Any = None
               ) -> tuple[Path | None, BaseException | None]:
    """Export with a cancellable progress dialog; return ``(path, error)`` when finished.

    ``style`` and ``camera`` replace the options' colours, point size, glow
    and view (see :class:`ExportRunner`); ``meshes`` are drawn behind the neurons. ``overlays(start, stop)`` gives what
    the overlays say at each exported token (default: the recording's own text;
    a comparison gives both texts). With a viewer ``state`` (a frozen copy of the
    window's) the movie is the state's (:class:`StateExportRunner`): its highlight,
    selection and meshes too, the form's ``style`` and ``camera``.
    """
    contents = None
    if overlays is not None and options.overlays:
        contents = list(overlays(*options.validate().token_range(len(recording))))
    if state is not None:
        return run_with_progress(parent, StateExportRunner(state, out, options, style=style,
                                                           camera=camera,
                                                           overlay_contents=contents), out)
    runner = ExportRunner(recording, anatomy, out, options, model_name, style=style,
                          camera=camera, overlay_contents=contents, meshes=meshes,
                          mesh_opacity=mesh_opacity)
    return run_with_progress(parent, runner, out)


def run_flow_export(parent: QWidget | None, attribution: Any, anatomy: Anatomy, out: Path,
                    options: ExportOptions, *, style: CloudStyle | None = None,
                    camera: CameraPose | None = None, reverse: bool = False,
                    scale: str = "step", meshes: Any = (), mesh_opacity: float = 0.12
                    ) -> tuple[Path | None, BaseException | None]:
    """A flow movie of ``attribution`` (see :class:`FlowExportRunner`) with a cancellable
    progress dialog; return ``(path, error)`` when finished."""
    runner = FlowExportRunner(attribution, anatomy, out, options, style=style, camera=camera,
                              reverse=reverse, scale=scale, meshes=meshes,
                              mesh_opacity=mesh_opacity)
    return run_with_progress(parent, runner, out)


def run_with_progress(parent: QWidget | None, runner: _BackgroundExport, out: Path
                      ) -> tuple[Path | None, BaseException | None]:
    """Run ``runner`` behind a cancellable progress dialog; ``(path, error)`` when done."""
    dialog = QProgressDialog(f"Exporting {out.name}…", "Cancel", 0, runner.total, parent)
    dialog.setWindowTitle("Export movie")
    dialog.setWindowModality(Qt.WindowModality.ApplicationModal)
    dialog.setMinimumDuration(0)
    dialog.setAutoClose(False)
    dialog.setAutoReset(False)
    dialog.canceled.connect(runner.cancel)
    runner.progressed.connect(lambda done, total: dialog.setValue(done))
    result: list[Any] = [None, None]
    loop = QEventLoop()

    def finished(path: Any, error: Any) -> None:
        result[0], result[1] = path, error
        loop.quit()

    runner.done.connect(finished)
    dialog.show()
    runner.start()
    if runner.running:
        loop.exec()
    dialog.close()
    return result[0], result[1]


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


def report_export(path: Path | None, error: BaseException | None,
                  tell: Callable[..., None]) -> Path | None:
    """Tell the user how an export went (``tell(text, error=False)``); the path written."""
    if isinstance(error, ExportCancelled):
        tell("export cancelled; nothing was written")
        return None
    if error is not None:
        if isinstance(error, FlyvizError):
            message = str(error)
        else:
            # A bug, not a bad setting: name it, and keep its traceback in the log.
            log.error("export failed with an unexpected error",
                      exc_info=(type(error), error, error.__traceback__))
            message = f"export failed (an unexpected error, please report it): " \
                      f"{type(error).__name__}: {error}"
        tell(message, error=True)
        return None
    tell(f"saved {path}")
    return path
