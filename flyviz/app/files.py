"""Files the app reads and writes: recordings, screenshots, movies, and the dialogs that ask where.

The checks live in plain functions (:func:`recording_path`, :func:`check_recording_fits`,
:func:`save_screenshot`) that raise :class:`~flyviz.model.errors.FlyvizError`
with a message for the user; :class:`FileController` adds the file dialogs,
remembers the folders the user chose and tells the window how it went.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QDialog, QFileDialog, QInputDialog

from flyviz.app.dialogs import ScreenshotDialog
from flyviz.model.errors import ExportError, FlyvizError, RecordingError
from flyviz.record.recording import FILE_SUFFIX, Recording

if TYPE_CHECKING:
    from flyviz.app.main_window import MainWindow


def recording_path(path: str | Path) -> Path:
    """``path`` with the recording suffix added when it has another one."""
    path = Path(path)
    return path if path.suffix == FILE_SUFFIX else path.with_name(path.name + FILE_SUFFIX)


def check_recording_fits(recording: Recording, neurons: int | None, model_name: str,
                         path: str | Path) -> None:
    """Raise :class:`RecordingError` unless ``recording`` was made with a model of ``neurons``."""
    if neurons is None:
        raise RecordingError("load the model this recording was made with first")
    if recording.neurons != neurons:
        made_with = (recording.metadata.get("model_name") or recording.metadata.get("model")
                     or "another model")
        raise RecordingError(
            f"{Path(path).name} was recorded with {made_with} ({recording.neurons:,} neurons) "
            f"but {model_name} has {neurons:,}; open that model first")


def save_screenshot(window: "MainWindow", path: str | Path, target: str = "brain",
                    scale: float = 1.0) -> Path:
    """Save the brain view (re-rendered at ``scale``) or the whole window as PNG."""
    path = Path(path)
    if path.suffix.lower() != ".png":
        path = path.with_name(path.name + ".png")
    if target == "brain":
        image: QImage = window.brain.grab_image(scale)
    else:
        pixmap = window.grab()
        if scale != 1.0:
            pixmap = pixmap.scaled(round(pixmap.width() * scale), round(pixmap.height() * scale),
                                   Qt.AspectRatioMode.KeepAspectRatio,
                                   Qt.TransformationMode.SmoothTransformation)
        image = pixmap.toImage()
    if not image.save(str(path), "PNG"):
        raise ExportError(f"cannot write {path}; choose a folder you can write to")
    return path


class FileController:
    """File → Open / Save recording, Export movie, Save screenshot, and model folders.

    Parameters
    ----------
    window
        The main window: its run controller, loaded model, brain view and settings.
    """

    def __init__(self, window: "MainWindow") -> None:
        self.window = window

    @property
    def _settings(self):
        return self.window.settings

    # ------------------------------------------------------------ recordings
    def save_recording(self, path: str | Path) -> Path:
        """Write the current recording to ``path`` (``.flyrec`` added if missing)."""
        session = self.window.runs.session
        if not len(session):
            raise RecordingError("the recording is empty; run a prompt first")
        return session.recording.save(recording_path(path))

    def open_recording(self, path: str | Path) -> Recording:
        """Load a recording of the current model and show its last frame."""
        recording = Recording.load(path)
        bundle = self.window.bundle
        check_recording_fits(recording, None if bundle is None else bundle.checkpoint.config.neurons,
                             self.window.model_name, path)
        self.window.runs.show_recording(recording)
        prompt = recording.metadata.get("prompt")
        if prompt:
            self.window.prompt_bar.set_text(str(prompt))
        other = recording.metadata.get("model_name")
        note = "" if not other or other == self.window.model_name else f" (recorded with {other})"
        self.window.show_message(f"opened {Path(path).name}: {len(recording):,} tokens{note}")
        return recording

    def save_recording_dialog(self) -> None:
        """Ask where to save the recording."""
        if not len(self.window.runs.session):
            self.window.show_message("nothing to save yet: run a prompt first", error=True)
            return
        start = str(Path(str(self._settings.value("paths/recordings", ""))) / f"run{FILE_SUFFIX}")
        path, _ = QFileDialog.getSaveFileName(self.window, "Save recording", start,
                                              f"flyviz recordings (*{FILE_SUFFIX})")
        if path:
            self._write(lambda: self.save_recording(path), "paths/recordings")

    def open_recording_dialog(self) -> None:
        """Ask for a recording and open it."""
        path, _ = QFileDialog.getOpenFileName(self.window, "Open recording",
                                              str(self._settings.value("paths/recordings", "")),
                                              f"flyviz recordings (*{FILE_SUFFIX});;All files (*)")
        if not path:
            return
        try:
            self.open_recording(path)
        except FlyvizError as exc:
            self.window.show_message(str(exc), error=True, dialog=True)
            return
        self._settings.setValue("paths/recordings", str(Path(path).parent))

    # ------------------------------------------------------------ movies and pictures
    def export_movie(self) -> None:
        """File → Export movie: the export dialog on the current recording."""
        window = self.window
        session = window.runs.session
        if not len(session) or window.anatomy is None:
            window.show_message("nothing to export yet: run a prompt first", error=True)
            return
        try:
            from flyviz.app import export_dialog
        except ImportError as exc:
            window.show_message(f"movie export is unavailable: {exc}", error=True, dialog=True)
            return
        window.runs.pause()   # the movie shows the recording as it is now
        recording = session.recording
        layer = window.display.layer       # Δx of a comparison, or another layer shown
        overlays = None
        if recording.baseline is not None:
            from flyviz.app.compare_views import comparison_overlays

            def overlays(start: int, stop: int, rec: Recording = recording):
                return comparison_overlays(rec, start, stop)
        export_dialog.run_export_dialog(window, recording, window.anatomy, window.model_name,
                                        layer=layer, overlays=overlays)

    def screenshot_dialog(self) -> None:
        """Alt+S: choose what and how large, then where."""
        dialog = ScreenshotDialog(self.window)
        if dialog.exec() != QDialog.DialogCode.Accepted:
            return
        target, scale = dialog.target.currentData(), float(dialog.scale.currentData())
        start = str(Path(str(self._settings.value("paths/screenshots", ""))) / "flyviz.png")
        path, _ = QFileDialog.getSaveFileName(self.window, "Save screenshot", start,
                                              "PNG images (*.png)")
        if path:
            self._write(lambda: save_screenshot(self.window, path, target, scale),
                        "paths/screenshots")

    def _write(self, write: Callable[[], Path], folder_setting: str) -> None:
        """Call ``write()``; remember the folder it wrote in, or tell the user why it could not."""
        try:
            saved = write()
        except FlyvizError as exc:
            self.window.show_message(str(exc), error=True, dialog=True)
            return
        self._settings.setValue(folder_setting, str(saved.parent))
        self.window.show_message(f"saved {saved}")

    # ------------------------------------------------------------ models
    def open_model_dialog(self) -> None:
        """Pick a model folder and load it."""
        folder = QFileDialog.getExistingDirectory(self.window, "Open a Fly LLM model folder",
                                                  str(self._settings.value("paths/models", "")))
        if folder:
            self._settings.setValue("paths/models", folder)
            self.window.load_model(folder)

    def open_hub_dialog(self) -> None:
        """Ask for a Hugging Face repo id and load it."""
        spec, ok = QInputDialog.getText(
            self.window, "Open a model from the Hugging Face Hub",
            "Repo id (e.g. ngxson/fly-llm-hf or fernandofernandes/fly-wordbrain-rank64):",
            text=str(self._settings.value("paths/hub", "ngxson/fly-llm-hf")))
        if ok and spec.strip():
            self._settings.setValue("paths/hub", spec.strip())
            self.window.load_model(spec.strip())
