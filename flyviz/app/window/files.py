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
from PySide6.QtWidgets import QDialog, QFileDialog, QInputDialog, QMessageBox

from flyviz.app.base.save_dialog import add_suffix, ask_save_path
from flyviz.app.window.dialogs import ScreenshotDialog
from flyviz.app.window.dock_kinds import LANGUAGE_KINDS
from flyviz.kinds import EVERY_KIND, ModelKind, kind_of_recording
from flyviz.model.checkpoint import Checkpoint
from flyviz.model.errors import ExportError, FlyvizError, RecordingError
from flyviz.record.recording import FILE_SUFFIX, Recording

if TYPE_CHECKING:
    from flyviz.app.window.main_window import MainWindow


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
        identity = recording.metadata.get("model_identity")
        made_with = ((identity.get("name") if isinstance(identity, dict) else None)
                     or recording.metadata.get("model_name") or recording.metadata.get("model")
                     or "another model")
        spec = identity.get("spec") if isinstance(identity, dict) else None
        raise RecordingError(
            f"{Path(path).name} was recorded with {made_with} ({recording.neurons:,} neurons) "
            f"but {model_name} has {neurons:,}; open "
            f"{spec if spec and spec != made_with else 'that model'} first")


def recording_model_mismatch(recording: Recording, checkpoint: Checkpoint,
                             path: str | Path) -> str | None:
    """How the loaded model differs from the one ``recording`` was made with (its stored
    identity: graph and weights digests), one line; ``None`` when it is the same model or
    the recording stores no identity."""
    from flyviz.model.identity import identity_mismatch

    return identity_mismatch(recording.metadata.get("model_identity"), checkpoint,
                             Path(path).name)


def _unreadable_manifest(folder: str | Path) -> str | None:
    """Why a dataset folder's ``manifest.json`` cannot be read, or ``None`` when it can."""
    from flyviz.errors import FlyvizError
    from flyviz.model.formats.common import read_json

    try:
        read_json(Path(folder) / "manifest.json", "the dataset's manifest.json")
    except FlyvizError as exc:
        return str(exc)
    return None


def is_dataset_folder(folder: str | Path) -> bool:
    """True when ``folder`` holds a connectome dataset (a graph without weights)."""
    from flyviz.model.formats import LAYOUT_DATASET, detect_layout

    try:
        return detect_layout(folder) == LAYOUT_DATASET
    except FlyvizError:
        return False


def screenshot_path(path: str | Path) -> Path:
    """The file :func:`save_screenshot` writes for ``path``: ``.png`` added when missing."""
    return add_suffix(path, ".png")


def save_screenshot(window: "MainWindow", path: str | Path, target: str = "brain",
                    scale: float = 1.0) -> Path:
    """Save the brain view (re-rendered at ``scale``) or the whole window as PNG."""
    path = screenshot_path(path)
    if target == "brain":
        image: QImage = window.brain.grab_image(scale)
    else:
        pixmap = window.grab()
        if scale != 1.0:
            pixmap = pixmap.scaled(round(pixmap.width() * scale), round(pixmap.height() * scale),
                                   Qt.AspectRatioMode.KeepAspectRatio,
                                   Qt.TransformationMode.SmoothTransformation)
        image = pixmap.toImage()
    if not image.save(str(path), "PNG"):  # type: ignore[call-overload]  # (fileName, format)
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
        #: The model that needs a connectome dataset the user has not chosen yet.
        self.model_needing_dataset: str | None = None
        #: The open "choose its dataset" question, if any (tests press its buttons).
        self.dataset_question: QMessageBox | None = None

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
        """Load a recording of the current model and show its last frame.

        A recording of another model of the same size is shown too, and the
        window says how that model differs (graph or weights); one of another
        size, or a damaged file, raises :class:`RecordingError` (one line).
        """
        recording = Recording.load(path)
        kind = kind_of_recording(recording)
        if not self._open_by_kind(recording, kind, Path(path)):
            self._open_on_its_model(recording, kind, Path(path))
        return recording

    def _open_by_kind(self, recording: Recording, kind: ModelKind, path: Path) -> bool:
        """Show ``recording`` through the part of the window that serves ``kind`` (the
        kinds each declares): a feature that shows recordings (the spiking brain's: its
        Stimulus and population docks), or the window's own runs (the Fly LLM's); False
        when none serves it."""
        for name, kinds in self.window.feature_kinds.items():
            show = getattr(self.window.features.get(name), "show_recording", None)
            if show is not None and kinds != EVERY_KIND and kind.shows(kinds):
                show(recording)
                axis = kind.recording_axis(recording)
                self.window.show_message(f"opened {path.name}: {len(recording):,} {axis.names}")
                return True
        if kind.shows(LANGUAGE_KINDS):
            self._open_in_runs(recording, path)
            return True
        return False

    def _open_in_runs(self, recording: Recording, path: Path) -> None:
        """Show a recording of the model the window runs, checked against the one loaded."""
        bundle = self.window.bundle
        check_recording_fits(recording, None if bundle is None else bundle.checkpoint.config.neurons,
                             self.window.model_name, path)
        mismatch = None if bundle is None else recording_model_mismatch(recording, bundle.checkpoint,
                                                                        path)
        self.window.runs.show_recording(recording)
        prompt = recording.metadata.get("prompt")
        if prompt:
            self.window.prompt_bar.set_text(str(prompt))
        if mismatch:
            self.window.show_message(f"{mismatch}. It is shown as recorded, on "
                                     f"{self.window.model_name}'s neurons.",
                                     error=True, dialog=True)
            return
        other = recording.metadata.get("model_name")
        note = "" if not other or other == self.window.model_name else f" (recorded with {other})"
        self.window.show_message(f"opened {Path(path).name}: {len(recording):,} tokens{note}")

    def _open_on_its_model(self, recording: Recording, kind: ModelKind, path: Path) -> None:
        """Show ``recording`` of a kind no part of the window serves on the model the kind
        loads for it (a generic layout when it does not load)."""
        from flyviz.viewer.layers import drawing_anatomy

        opened = f"opened {path.name}: {len(recording):,} {kind.recording_axis(recording).names}"
        try:
            model, why = kind.recording_model(recording, download=False)
        except FlyvizError as exc:
            model, why = None, str(exc).splitlines()[0]
        placement = drawing_anatomy(model, recording.neurons, path.name, missing=why)
        state = self.window.state
        state.set_model(model, placement.anatomy, neurons=recording.neurons, kind=kind,
                        name=getattr(model, "name", "") or str(recording.metadata.get(
                            "model_name", "") or kind.title))
        state.set_recording(recording)
        self.window.show_message(opened if placement.note is None
                                 else f"{opened}; {placement.note}")

    def save_recording_dialog(self) -> None:
        """Ask where to save the recording."""
        if not len(self.window.runs.session):
            self.window.show_message("nothing to save yet: run a prompt first", error=True)
            return
        start = str(Path(str(self._settings.value("paths/recordings", ""))) / f"run{FILE_SUFFIX}")
        # Asked about run.flyrec, the file written, where "run" was typed: a recording
        # replaced without a word may be the only copy of a run.
        target = ask_save_path(self.window, "Save recording", start,
                               f"flyviz recordings (*{FILE_SUFFIX})", recording_path)
        if target is not None:
            self._write(lambda: self.save_recording(target), "paths/recordings")

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
            from flyviz.app.window import export_dialog
        except ImportError as exc:
            window.show_message(f"movie export is unavailable: {exc}", error=True, dialog=True)
            return
        window.runs.pause()   # the movie shows the recording as it is now
        # The form starts from what the window shows (the viewer state): its colours (Δx
        # while a comparison is shown), range, size, glow, gain, background and camera.
        # The export thread reads a frozen snapshot: frames still in flight from the
        # paused run are appended to the window's recording, not to the movie's.
        window.sync_camera()
        # A frozen copy of the state: the movie is what the window shows, its highlight
        # and selection ring included (flyviz.export.export_state draws it).
        state = window.state.frozen()
        recording = state.recording
        extra = {}
        if recording.baseline is not None:      # a comparison: both texts in the overlay
            from flyviz.app.language.compare_views import comparison_overlays

            extra["overlays"] = lambda start, stop: comparison_overlays(recording, start, stop)
        export_dialog.run_export_dialog(
            window, recording, state.anatomy, state.model_name, style=state.style(),
            camera=state.camera,
            tell=lambda text, error=False: window.show_message(text, error=error, dialog=error),
            meshes=state.shown_meshes(), mesh_opacity=state.mesh.mesh_opacity, state=state,
            **extra)

    def share_page(self, path: str | Path | None = None) -> None:
        """File → Share as web page: what the window shows as one self-contained web page
        (:func:`flyviz.export.share.share`), written in the background; the status bar
        says when it is there. ``path``: where, without asking."""
        window = self.window
        if not len(window.runs.session) or window.anatomy is None:
            window.show_message("nothing to share yet: run a prompt first", error=True)
            return
        from flyviz.export.share import page_path, share

        if path is None:
            start = str(Path(str(self._settings.value("paths/pages", ""))) / "run.html")
            path = ask_save_path(window, "Share as web page", start, "Web pages (*.html)",
                                 page_path)
            if path is None:
                return

        window.runs.pause()   # the page shows the recording as it is now
        window.sync_camera()
        state = window.state.frozen()   # the worker reads a copy the window never changes
        attribution = getattr(window.features.get("why"), "attribution", None)
        target = Path(path)

        def done(out: Path) -> None:
            self._settings.setValue("paths/pages", str(out.parent))
            window.show_message(f"saved {out} ({out.stat().st_size / 1e6:.1f} MB): open it in "
                                "any browser, no network needed")

        window.show_message(f"writing {target.name}…")
        window.background.run("share", lambda: share(state, target, attribution=attribution),
                              done, lambda text: window.show_message(text, error=True,
                                                                     dialog=True))

    def screenshot_dialog(self) -> None:
        """Alt+S: choose what and how large, then where."""
        dialog = ScreenshotDialog(self.window)
        if dialog.exec() != QDialog.DialogCode.Accepted:
            return
        target, scale = dialog.target.currentData(), float(dialog.scale.currentData())
        start = str(Path(str(self._settings.value("paths/screenshots", ""))) / "flyviz.png")
        path = ask_save_path(self.window, "Save screenshot", start, "PNG images (*.png)",
                             screenshot_path)
        if path is not None:
            self._write(lambda: save_screenshot(self.window, path, target, scale),
                        "paths/screenshots")

    def add_mesh_dialog(self) -> None:
        """View → Add mesh: read a mesh file into the brain view (a damaged one is a message)."""
        start = str(self._settings.value("paths/meshes", ""))
        path, _ = QFileDialog.getOpenFileName(self.window, "Add a mesh", start,
                                              "Meshes (*.obj *.ply *.stl)")
        if not path:
            return
        try:
            mesh = self.window.state.add_mesh(path)
        except FlyvizError as exc:
            self.window.show_message(str(exc), error=True, dialog=True)
            return
        self._settings.setValue("paths/meshes", str(Path(path).parent))
        self.window.show_message(f"added {mesh.name} ({len(mesh.faces):,} triangles)")

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
        """Pick a model folder and load it; a connectome dataset folder picked here joins
        the model that was waiting for one."""
        folder = QFileDialog.getExistingDirectory(self.window, "Open a Fly LLM model folder",
                                                  str(self._settings.value("paths/models", "")))
        if folder:
            self.open_model_folder(folder)

    def open_model_folder(self, folder: str | Path) -> None:
        """Load the model in ``folder``; if it is a connectome dataset instead, load the
        model that needed one with it, or say what to open; a spiking brain's folder (the
        authors' layout, a ConnecTorch ``.ct`` brain, fly-connectome-malecns-166k:
        :func:`flyviz.spiking.brain.is_brain_folder`) opens as a spiking brain."""
        folder = str(folder)
        if self.window.open_if_brain(folder):
            self._settings.setValue("paths/models", folder)
            return
        if is_dataset_folder(folder):
            why = _unreadable_manifest(folder)
            if why is not None:
                # A damaged manifest hides which dataset this is (the whole MaleCNS opens as
                # a brain): say what is wrong, not "not a model", and remember no folder.
                self.window.show_message(why, error=True, dialog=True)
                return
            self._settings.setValue("paths/datasets", folder)
            if self.model_needing_dataset is not None:
                self.load_with_dataset(self.model_needing_dataset, folder)
            else:
                self.window.show_message(
                    f"{folder} is a connectome dataset (the graph only), not a model: open the "
                    "model folder (fly-wordbrain weights or a web export); when it needs this "
                    "dataset flyviz asks for it", error=True, dialog=True)
            return
        self._settings.setValue("paths/models", folder)
        self.window.load_model(folder)

    def ask_for_dataset(self, spec: str, message: str) -> QMessageBox:
        """``spec`` needs a connectome dataset that was not found: say so and offer to
        choose its folder (a non-modal question; :meth:`choose_dataset` on yes)."""
        self.model_needing_dataset = spec
        self.window.show_message(f"{spec} needs its connectome dataset: choose its folder")
        if self.dataset_question is not None:
            self.dataset_question.close()
        box = QMessageBox(QMessageBox.Icon.Question, "flyviz: connectome dataset needed",
                          f"{spec} holds only the weights; the graph they run on is in a "
                          "separate connectome dataset folder (fly-connectome-49k, with "
                          "manifest.json and graph/), which was not found next to it.",
                          QMessageBox.StandardButton.NoButton, self.window)
        box.setInformativeText("Choose that folder to load the model with it, or download "
                               "fernandofernandes/fly-connectome-49k into a folder next to the "
                               "model's (flyviz then finds it by itself). From a terminal: "
                               f"flyviz gui --model {spec} --dataset DIR.")
        box.setDetailedText(message)
        choose = box.addButton("Choose dataset folder…", QMessageBox.ButtonRole.AcceptRole)
        choose.setObjectName("chooseDataset")
        box.addButton(QMessageBox.StandardButton.Cancel)
        box.setDefaultButton(choose)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.accepted.connect(lambda: self.choose_dataset(spec))
        box.finished.connect(lambda _result: self._forget_question(box))
        self.dataset_question = box
        box.open()
        return box

    def _forget_question(self, box: QMessageBox) -> None:
        if self.dataset_question is box:
            self.dataset_question = None

    def choose_dataset(self, spec: str) -> None:
        """Ask for the connectome dataset folder of ``spec`` and load it with it."""
        start = str(self._settings.value("paths/datasets", "")) or str(Path(spec).parent)
        folder = QFileDialog.getExistingDirectory(
            self.window, f"Choose the connectome dataset of {Path(spec).name}", start)
        if folder:
            self.load_with_dataset(spec, folder)

    def load_with_dataset(self, spec: str, dataset: str | Path) -> bool:
        """Load ``spec`` joined to the connectome dataset ``dataset``; False (and a
        message) when ``dataset`` is not one."""
        dataset = str(dataset)
        if not is_dataset_folder(dataset):
            self.window.show_message(
                f"{dataset} is not a connectome dataset folder (it has no "
                "graph/edges_offsets.i32); choose the fly-connectome-49k folder",
                error=True, dialog=True)
            return False
        self._settings.setValue("paths/datasets", dataset)
        self.model_needing_dataset = None
        self.window.models.load(spec, dataset=dataset)
        return True

    def open_hub_dialog(self) -> None:
        """Ask for a Hugging Face repo id and load it."""
        spec, ok = QInputDialog.getText(
            self.window, "Open a model from the Hugging Face Hub",
            "Repo id (e.g. ngxson/fly-llm-hf or fernandofernandes/fly-wordbrain-rank64):",
            text=str(self._settings.value("paths/hub", "ngxson/fly-llm-hf")))
        if ok and spec.strip():
            self._settings.setValue("paths/hub", spec.strip())
            self.window.load_model(spec.strip())
