"""The app's export dialog: settings become options, the export runs off the GUI thread and cancels cleanly."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pytestqt")
imageio_ffmpeg = pytest.importorskip("imageio_ffmpeg")

from flyviz.app.window.export_dialog import ExportDialog  # noqa: E402
from flyviz.app.base.export_jobs import ExportRunner  # noqa: E402
from flyviz.export import ExportCancelled, ExportOptions  # noqa: E402
from flyviz.model.layout import ball_layout  # noqa: E402
from flyviz.record.frame import PHASE_GENERATION, Frame  # noqa: E402
from flyviz.record.recording import Recording  # noqa: E402

N = 300


def recording(tokens: int = 4) -> Recording:
    rec = Recording(N, {"model_name": "dialog-test"})
    rng = np.random.default_rng(0)
    for i in range(tokens):
        state = rng.uniform(-1, 1, N).astype(np.float32)
        rec.append(Frame(position=i, phase=PHASE_GENERATION, input_token_id=5, input_text="a",
                         predicted_token_id=6, predicted_text=" b", probability=0.6,
                         top_k_ids=np.array([6, 7], np.int32),
                         top_k_probabilities=np.array([0.6, 0.3], np.float32),
                         top_k_text=(" b", " c"), state=state, mean_abs_state=0.5,
                         text_so_far="a b" * (i + 1), generation_index=i))
    return rec


def test_dialog_turns_settings_into_options(qtbot, tmp_path):
    rec = recording(10)
    dialog = ExportDialog(rec, ball_layout(N), "dialog-test")
    qtbot.addWidget(dialog)
    dialog.path_edit.setText(str(tmp_path / "clip.mp4"))
    dialog.first_spin.setValue(2)                   # tokens 2 to 6, counted from 0
    dialog.last_spin.setValue(6)
    dialog.size_combo.setEditText("640x360")
    dialog.k_spin.setValue(2)
    dialog.fps_spin.setValue(12)
    dialog.hold_spin.setValue(0.5)
    dialog.mode_combo.setCurrentIndex(1)
    opts = dialog.options()
    assert (opts.start, opts.stop, opts.size, opts.frames_per_token, opts.mode) == (2, 7, (640, 360), 2, "abs")
    assert "5 tokens" in dialog.summary.text() and f"{opts.frame_count(5)} frames" in dialog.summary.text()
    # Picking WebM renames the file and switches to VP9's quality scale.
    dialog.format_combo.setCurrentIndex(1)
    assert dialog.output_path().suffix == ".webm"
    assert dialog.options().quality == 34
    dialog.format_combo.setCurrentIndex(3)
    assert dialog.path_edit.text().endswith("clip/") and dialog.options().quality is None


def test_export_runs_in_the_background_and_writes_the_movie(qtbot, tmp_path):
    rec = recording(4)
    out = tmp_path / "clip.mp4"
    runner = ExportRunner(rec, ball_layout(N), out, ExportOptions(size=(160, 96), frames_per_token=2),
                          "dialog-test")
    seen = []
    runner.progressed.connect(lambda done, total: seen.append((done, total)))
    with qtbot.waitSignal(runner.done, timeout=60_000) as blocker:
        runner.start()
    path, error = blocker.args
    assert error is None and path == out
    reader = imageio_ffmpeg.read_frames(str(out))
    meta = next(reader)
    frames = [np.frombuffer(b, np.uint8) for b in reader]
    assert tuple(meta["size"]) == (160, 96) and len(frames) == 8
    assert min(f.mean() for f in frames) > 3  # drawn, not blank
    assert max(np.abs(a.astype(int) - b.astype(int)).mean() for a, b in zip(frames, frames[1:])) > 0.3
    assert seen[-1] == (8, 8)


def test_run_export_dialog_reports_the_result_to_the_window(qtbot, tmp_path, monkeypatch):
    from PySide6.QtWidgets import QDialog, QWidget

    from flyviz.app.window import export_dialog

    class Window(QWidget):
        messages: list = []

        def show_message(self, text, error=False, dialog=False):
            self.messages.append((text, error))

    window = Window()
    qtbot.addWidget(window)
    out = tmp_path / "frames"

    def accept(dialog):
        dialog.format_combo.setCurrentIndex(3)
        dialog.path_edit.setText(str(out) + "/")
        dialog.size_combo.setEditText("96x64")
        dialog.k_spin.setValue(1)
        dialog.hold_spin.setValue(0.0)
        return QDialog.DialogCode.Accepted

    monkeypatch.setattr(export_dialog.ExportDialog, "exec", accept)
    path = export_dialog.run_export_dialog(window, recording(3), ball_layout(N), "dialog-test",
                                           tell=window.show_message)
    assert path == out and len(list(out.glob("frame_*.png"))) == 3
    assert window.messages[-1] == (f"saved {out}", False)
    # A model without positions is refused with a message, not a crash.
    assert export_dialog.run_export_dialog(window, recording(3), None, "x",
                                           tell=window.show_message) is None
    assert window.messages[-1][1] is True


def test_cancel_stops_the_export_and_leaves_nothing(qtbot, tmp_path):
    rec = recording(4)
    runner = ExportRunner(rec, ball_layout(N), tmp_path / "clip.webm",
                          ExportOptions(size=(160, 96), frames_per_token=5), "dialog-test")
    runner.progressed.connect(lambda done, total: runner.cancel() if done >= 2 else None)
    with qtbot.waitSignal(runner.done, timeout=60_000) as blocker:
        runner.start()
    path, error = blocker.args
    assert path is None and isinstance(error, ExportCancelled)
    assert list(tmp_path.iterdir()) == []


def test_export_from_a_window_with_a_live_brain_view(qtbot, tmp_path):
    """The user's path: the main window's OpenGL brain view is on screen while the export draws."""
    import dataclasses

    from app_conftest import make_window

    from flyviz.app._testing import make_app_checkpoint

    checkpoint = make_app_checkpoint(tmp_path / "model")
    n = checkpoint.config.neurons
    win = make_window(qtbot, checkpoint, tmp_path)
    try:
        rec = Recording(n, {"model_name": "dialog-test"})
        for frame in recording(3):
            rec.append(dataclasses.replace(frame, state=np.resize(frame.state, n)))
        out = tmp_path / "from-window.mp4"
        runner = ExportRunner(rec, checkpoint.anatomy, out,
                              ExportOptions(size=(160, 96), frames_per_token=1), "dialog-test")
        with qtbot.waitSignal(runner.done, timeout=60_000) as blocker:
            runner.start()
        path, error = blocker.args
        assert error is None and path == out
        frames = [np.frombuffer(f, np.uint8) for f in list(imageio_ffmpeg.read_frames(str(out)))[1:]]
        assert len(frames) == 3
        assert max(int(f.max()) for f in frames) > 60
        # The brain view still draws afterwards.
        assert win.brain.canvas.render()[..., :3].max() > 0
    finally:
        win.close()


def test_dialog_starts_from_the_windows_display_settings(qtbot):
    """Colours, range, point size, glow, gain, background and camera: what the window shows."""
    from flyviz.render.camera import CameraPose
    from flyviz.render.style import CloudStyle, ColourLayer, ColourScale, activation_layer

    shown = CloudStyle(layer=activation_layer("abs", ColourScale.fixed(0.5)), point_size=6.5,
                       glow=0.4, gain=1.7, background=(0.1, 0.2, 0.3, 1.0))
    camera = CameraPose(azimuth=30.0, elevation=10.0, center=(1.0, 2.0, 3.0), scale_factor=400.0)
    dialog = ExportDialog(recording(4), ball_layout(N), "dialog-test", style=shown, camera=camera)
    qtbot.addWidget(dialog)
    assert dialog.mode_combo.currentData() == "abs" and dialog.range_spin.value() == 0.5
    assert dialog.cloud_style() == shown and dialog.camera() == camera
    opts = dialog.options()
    assert (opts.mode, opts.scale, opts.point_size, opts.glow) == ("abs", 0.5, 6.5, 0.4)
    # The user changes some of them; the rest stays the window's.
    dialog.mode_combo.setCurrentIndex(dialog.mode_combo.findData("signed"))
    dialog.range_spin.setValue(0.0)
    dialog.glow_spin.setValue(1.5)
    dialog.view_combo.setCurrentIndex(dialog.view_combo.findData("top"))
    style = dialog.cloud_style()
    assert style.layer == activation_layer("signed", ColourScale.auto())
    assert (style.glow, style.point_size, style.gain, style.background) == (
        1.5, 6.5, 1.7, (0.1, 0.2, 0.3, 1.0))
    assert dialog.camera() is None and dialog.options().view == "top"
    assert dialog.options().scale is None

    # A colour layer shown in the window is what the movie shows, over its own range.
    importance = ColourLayer.static("importance", np.linspace(0, 1, N), label="lesion ΔCE",
                                    scale=ColourScale.given(0.0, 1.0))
    dialog = ExportDialog(recording(4), ball_layout(N), "dialog-test",
                          style=shown.with_layer(importance))
    qtbot.addWidget(dialog)
    assert dialog.mode_combo.currentData() == "layer" and not dialog.range_spin.isEnabled()
    assert "lesion ΔCE" in dialog.mode_combo.currentText()
    assert dialog.cloud_style().layer is importance
    assert dialog.view_combo.findData("window") == -1 and dialog.camera() is None


def test_dialog_without_a_window_keeps_flyvizs_defaults(qtbot):
    from flyviz.render.style import CloudStyle

    dialog = ExportDialog(recording(4), ball_layout(N), "dialog-test")
    qtbot.addWidget(dialog)
    assert dialog.cloud_style() == CloudStyle() and dialog.camera() is None
    assert dialog.options() == dialog.options().__class__(
        size=(1280, 720), quality=20, stop=4, hold_seconds=1.0)


def test_an_export_bug_is_named_as_one_and_logged(qtbot, tmp_path, monkeypatch, caplog):
    """A bad setting is the setting's message; a bug says it is one and logs its traceback."""
    import logging

    from PySide6.QtWidgets import QDialog, QWidget

    import flyviz.app.window.export_dialog as export_dialog
    from flyviz.model.errors import ExportError

    class Parent(QWidget):
        def __init__(self) -> None:
            super().__init__()
            self.messages: list[tuple[str, bool]] = []

        def show_message(self, text: str, error: bool = False, dialog: bool = False) -> None:
            self.messages.append((text, error))

    parent = Parent()
    qtbot.addWidget(parent)
    monkeypatch.setattr(ExportDialog, "exec", lambda self: QDialog.DialogCode.Accepted)
    outcomes = iter([(None, ExportError("cannot write .xyz files")),
                     (None, ZeroDivisionError("division by zero"))])
    monkeypatch.setattr(export_dialog, "run_export", lambda *a, **k: next(outcomes))
    with caplog.at_level(logging.ERROR, logger="flyviz.app.base.export_jobs"):
        for _ in range(2):
            assert export_dialog.run_export_dialog(parent, recording(2), ball_layout(N), "x",
                                                  tell=parent.show_message) is None
    (setting, _), (bug, _) = parent.messages
    assert setting == "cannot write .xyz files"
    assert "unexpected error" in bug and "ZeroDivisionError: division by zero" in bug
    assert [r.exc_info[0] for r in caplog.records] == [ZeroDivisionError]


#: The first bytes of each movie format: an MP4's ``ftyp`` box (at byte 4), WebM's EBML
#: header, a GIF's signature.
MOVIE_HEADER = {"mp4": (4, b"ftyp"), "webm": (0, b"\x1a\x45\xdf\xa3"), "gif": (0, b"GIF8")}

#: A name the user gives with MP4 selected, the format the form then shows, and the file
#: the export writes: a name ending in another movie's suffix says that format.
NAMED = [("x.webm", "webm", "x.webm"), ("X.GIF", "gif", "X.GIF"), ("x.m4v", "mp4", "x.m4v"),
         ("x", "mp4", "x.mp4")]


def _export_named(qtbot, monkeypatch, give) -> tuple:
    """File → Export movie with MP4 selected (the form's start), the name given by
    ``give(dialog)``, then Export: the form's format and quality as Export left them, and
    the path written."""
    from PySide6.QtWidgets import QWidget

    from flyviz.app.window import export_dialog

    seen: dict = {}

    def exec_(dialog):
        assert dialog.current_format() == "mp4"
        dialog.size_combo.setEditText("96x64")
        dialog.k_spin.setValue(1)
        dialog.hold_spin.setValue(0.0)
        give(dialog)
        dialog.export_button.click()
        seen.update(format=dialog.current_format(), quality=dialog.quality_spin.isEnabled()
                    and dialog.quality_spin.value(), text=dialog.path_edit.text())
        return dialog.result()

    monkeypatch.setattr(export_dialog.ExportDialog, "exec", exec_)
    parent = QWidget()
    qtbot.addWidget(parent)
    messages: list = []
    path = export_dialog.run_export_dialog(parent, recording(2), ball_layout(N), "dialog-test",
                                           tell=lambda text, error=False: messages.append(text))
    assert path is not None, messages
    return seen, path


def _assert_movie(path, fmt: str) -> None:
    at, magic = MOVIE_HEADER[fmt]
    assert path.read_bytes()[at:at + len(magic)] == magic


@pytest.mark.parametrize(("name", "fmt", "written"), NAMED)
def test_a_name_browsed_with_another_movies_suffix_is_that_movie(qtbot, tmp_path, monkeypatch,
                                                                 name, fmt, written):
    """Browse… offered the selected format's filter alone and added its suffix to any other:
    x.webm chosen with MP4 selected was written as x.webm.mp4. A movie's suffix says its
    format: the form switches to it (its quality with it) and keeps the name; a name with
    none gets the selected format's suffix."""
    from PySide6.QtWidgets import QFileDialog, QPushButton

    offered: list[str] = []

    def save_file_name(parent, title, start, filters, *args):
        offered.append(filters)
        return str(tmp_path / name), ""

    monkeypatch.setattr(QFileDialog, "getSaveFileName", save_file_name)

    def browse(dialog):
        next(b for b in dialog.findChildren(QPushButton) if b.text() == "Browse…").click()

    seen, path = _export_named(qtbot, monkeypatch, browse)
    assert path == tmp_path / written and seen["text"] == str(path)
    assert seen["format"] == fmt and seen["quality"] == {"mp4": 20, "webm": 34, "gif": False}[fmt]
    assert sorted(p.name for p in tmp_path.iterdir()) == [written]    # no x.webm.mp4
    _assert_movie(path, fmt)
    # Every movie format is offered, the selected one first (Qt selects it).
    assert offered[0].startswith("MP4") and "*.webm" in offered[0] and "*.gif" in offered[0]


@pytest.mark.parametrize(("name", "fmt", "written"), NAMED)
def test_a_name_typed_with_another_movies_suffix_is_that_movie(qtbot, tmp_path, monkeypatch,
                                                               name, fmt, written):
    """The same rule for a name typed into "Save to": x.webm typed with MP4 selected is a
    WebM, encoded as one (before, with MP4's quality); a name without a movie's suffix gets
    the selected format's (before, ``x`` was a folder of PNG frames with MP4 selected)."""
    seen, path = _export_named(qtbot, monkeypatch,
                               lambda dialog: dialog.path_edit.setText(str(tmp_path / name)))
    assert path == tmp_path / written and seen["text"] == str(path)
    assert seen["format"] == fmt and seen["quality"] == {"mp4": 20, "webm": 34, "gif": False}[fmt]
    assert sorted(p.name for p in tmp_path.iterdir()) == [written]
    _assert_movie(path, fmt)


def test_browsing_with_another_movies_filter_asks_about_that_movie(qtbot, tmp_path, monkeypatch):
    """A name chosen without a suffix under the WebM filter is x.webm, a WebM; an existing
    x.webm, which Qt's own question (about "x") did not name, is asked about first."""
    from dialog_answers import DialogAnswers
    from PySide6.QtWidgets import QPushButton

    from flyviz.app.window.export_dialog import ExportDialog

    kept = tmp_path / "x.webm"
    kept.write_bytes(b"last week's movie")
    user = DialogAnswers(monkeypatch, tmp_path / "x", "WebM (VP9, smallest) (*.webm)")
    asked = user.asked
    dialog = ExportDialog(recording(2), ball_layout(N), "dialog-test")
    qtbot.addWidget(dialog)
    before = dialog.path_edit.text()
    browse = next(b for b in dialog.findChildren(QPushButton) if b.text() == "Browse…")
    browse.click()
    assert asked == ["x.webm already exists.\nDo you want to replace it?"]
    assert dialog.path_edit.text() == before and dialog.current_format() == "mp4"
    user.replace = True
    browse.click()
    assert dialog.path_edit.text() == str(kept) and dialog.current_format() == "webm"
    assert len(asked) == 2


@pytest.mark.parametrize(("typed", "selected", "fmt", "meant"),
                         [("x.webm", "mp4", "webm", "x.webm"), ("x", "mp4", "mp4", "x.mp4"),
                          ("x.GIF", "png", "gif", "x.GIF"), ("frames/", "webm", "png", "frames")])
def test_export_asks_about_the_file_a_typed_name_means(qtbot, tmp_path, monkeypatch, typed,
                                                       selected, fmt, meant):
    """A name typed into "Save to" is asked about as the file the export writes: ``x`` with
    MP4 selected is x.mp4 (before, a folder x of PNG frames, and x.mp4 was not asked about);
    ``frames/`` is a folder of frames whatever is selected. No keeps the form open on that
    name and format, the file as it was."""
    from dialog_answers import DialogAnswers
    from PySide6.QtWidgets import QDialog

    existing = tmp_path / meant
    if fmt == "png":
        existing.mkdir()
        (existing / "frame_000000.png").write_bytes(b"an earlier frame")
    else:
        existing.write_bytes(b"last week's movie")
    asked = DialogAnswers(monkeypatch).asked
    dialog = ExportDialog(recording(2), ball_layout(N), "dialog-test")
    qtbot.addWidget(dialog)
    dialog.format_combo.setCurrentIndex(dialog.format_combo.findData(selected))
    dialog.path_edit.setText(f"{tmp_path}/{typed}")        # a Path would drop the slash
    dialog.export_button.click()
    assert len(asked) == 1 and asked[0].startswith(meant), asked
    assert dialog.result() != QDialog.DialogCode.Accepted
    assert dialog.current_format() == fmt and dialog.output_path() == existing
    assert sorted(p.name for p in tmp_path.iterdir()) == [meant]
