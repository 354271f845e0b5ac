"""Movie exports in the background, behind a cancellable progress dialog: the window's export
(File → Export movie) and a feature's (the Why? dock's flow movie) run the same way.

An export runs :func:`flyviz.export.export_recording` (or a state's or a flow's) on a
background :class:`QThread` (frame easing, encoding, file handling). OpenGL drawing itself
happens on the GUI thread, where the app's own canvas lives: vispy keeps one "current canvas"
for the whole process, so two threads drawing at once could send one canvas's commands to the
other's context. The worker asks the GUI thread for each frame and waits; between frames the
app stays responsive. Cancelling, an error or a full disk leaves nothing under the chosen file
name. Part of the window's shared base: features import it, it imports no feature and not the
window.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from PySide6.QtCore import QEventLoop, QObject, Qt, QThread, Signal, Slot
from PySide6.QtWidgets import QProgressDialog, QWidget

from flyviz.app.base.background import wait_qthread
from flyviz.export import ExportCancelled, ExportOptions, export_recording, export_state
from flyviz.export.flow import make_flow_renderer
from flyviz.export.movie import make_renderer, state_renderer
from flyviz.model.checkpoint import Anatomy
from flyviz.model.errors import FlyvizError
from flyviz.record.recording import Recording
from flyviz.render.camera import CameraPose
from flyviz.render.style import CloudStyle

log = logging.getLogger(__name__)


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
