"""Recordings, settings, dialogs and errors in the app."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from app_conftest import make_window
from dialog_answers import DialogAnswers
from PySide6.QtWidgets import QApplication, QFileDialog, QMessageBox, QTableWidget

from flyviz.app._testing import one_hot_recording
from flyviz.app.window.main_window import SHORTCUTS, install_excepthook
from flyviz.model.errors import RecordingError

pytestmark = pytest.mark.gui


def _message_boxes() -> list[QMessageBox]:
    return [w for w in QApplication.topLevelWidgets() if isinstance(w, QMessageBox) and w.isVisible()]


def _close_boxes() -> None:
    for box in _message_boxes():
        box.close()


def test_save_then_open_round_trips_a_recording(window, qtbot, tmp_path):
    win = window
    win.state.run.max_new_tokens = 6
    win.state.run.speed_cap = 0
    with qtbot.waitSignal(win.run_ended, timeout=10_000):
        win.run_prompt("Tom and his dog")
    rec = win.session.recording
    saved = win.save_recording(tmp_path / "run")
    assert saved.name == "run.flyrec" and saved.is_file()
    text_before = win.text_panel.toPlainText()

    win.reset_run()
    assert len(win.session) == 0
    opened = win.open_recording(saved)
    assert win.session.recording is opened and len(opened) == len(rec)
    assert opened.generated_ids == rec.generated_ids
    np.testing.assert_allclose(opened.states(), rec.states(), atol=1e-6)
    assert opened.metadata["prompt"] == "Tom and his dog"
    win.refresh_panels()
    assert win.text_panel.toPlainText() == text_before
    assert win.prompt_bar.text() == "Tom and his dog"

    # Space on a scrubbed-back recording replays it to the end (once the worker,
    # which reports its state by signal, is idle; before that Space pauses the run).
    qtbot.waitUntil(lambda: win.worker_state == "idle", timeout=5000)
    win.show_token(0)
    win.toggle_play()
    qtbot.waitUntil(lambda: win.session.index == len(opened) - 1, timeout=5000)


def test_a_recording_of_another_model_is_refused_with_a_dialog(window, qtbot, tmp_path,
                                                              monkeypatch, app_checkpoint):
    win = window
    n = app_checkpoint.config.neurons
    other = one_hot_recording(n + 7, [0, 1])
    other.metadata["model_name"] = "bigger-brain"
    path = other.save(tmp_path / "other.flyrec")
    with pytest.raises(RecordingError, match="bigger-brain"):
        win.open_recording(path)
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (str(path), ""))
    before = win.session.recording
    win.open_recording_dialog()
    boxes = _message_boxes()
    assert boxes and any("neurons" in b.text() and "open that model first" in b.text()
                         for b in boxes)
    assert win.session.recording is before            # nothing replaced
    _close_boxes()

    garbage = tmp_path / "garbage.flyrec"
    garbage.write_bytes(b"not a recording at all")
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (str(garbage), ""))
    win.open_recording_dialog()
    assert any("recording" in b.text() for b in _message_boxes())
    _close_boxes()
    assert win.isVisible()


def test_layout_and_settings_persist_between_runs(qtbot, app_checkpoint, tmp_path):
    win = make_window(qtbot, app_checkpoint, tmp_path, "persist.ini")
    win.state.run.temperature = 1.25
    win.state.run.max_new_tokens = 33
    win.docks["raster"].hide()
    win.close()
    again = make_window(qtbot, app_checkpoint, tmp_path, "persist.ini")
    assert again.state.run.temperature == pytest.approx(1.25)
    assert again.state.run.max_new_tokens == 33
    # The Settings dock shows the restored state.
    assert again.controls.temperature.value() == pytest.approx(1.25)
    assert again.controls.max_new_tokens.value() == 33
    assert not again.docks["raster"].isVisible()
    assert again.docks["text"].isVisible()
    again.close()


def test_unexpected_exceptions_show_a_dialog_and_the_app_survives(window, qtbot):
    win = window
    previous = sys.excepthook
    try:
        hook = install_excepthook(win)
        try:
            raise ZeroDivisionError("a bug")
        except ZeroDivisionError:
            hook(*sys.exc_info())
        box = hook.last_box
        assert box.isVisible() and "ZeroDivisionError" in box.text()
        assert "a bug" in box.detailedText()
        box.close()
    finally:
        sys.excepthook = previous
    win.state.run.max_new_tokens = 2
    with qtbot.waitSignal(win.run_ended, timeout=10_000):
        win.run_prompt("Tom")


def test_shortcuts_dialog_lists_every_shortcut_and_about_credits(window, qtbot):
    win = window
    dialog = win.show_shortcuts()
    table = dialog.findChild(QTableWidget, "shortcutTable")
    listed = {table.item(r, 1).text() for r in range(table.rowCount())}
    # Every standard shortcut, and those added with the registry (Compare, Brain outline, Why?);
    # not the spiking brain's run, whose keys do nothing while the Fly LLM is shown.
    assert listed >= {description for _name, _keys, description in SHORTCUTS}
    assert listed - {description for _name, _keys, description in SHORTCUTS} == {
        win.actions_by_name["compare"].statusTip(),
        win.actions_by_name["toggle_outline"].statusTip(),
        win.actions_by_name["why"].statusTip()}
    # Every action shown has its own keys (two on the same keys would be ambiguous to Qt,
    # which triggers neither): Ctrl+Return is the prompt's for the Fly LLM shown here, the
    # spiking run's for a spiking brain (the registry shows one of them).
    keys = [action.shortcut().toString() for action in win.actions_by_name.values()
            if not action.shortcut().isEmpty() and action.isVisible()]
    assert len(set(keys)) == len(keys)
    assert not win.actions_by_name["run_spiking"].isVisible()
    assert all(win.actions_by_name[name].shortcut().toString() for name, _k, _d in SHORTCUTS)
    # Every action reads without scrolling sideways (a fixed width cut the longest off).
    qtbot.waitExposed(dialog)
    assert not table.horizontalScrollBar().isVisible()
    assert table.horizontalHeader().length() <= table.viewport().width()
    dialog.close()

    import html

    import dataclasses

    from flyviz.app.window.dialogs import CONNECTOME_CREDIT, about_text, demo_description

    about = win.about_text()
    assert "test-brain" in about and html.escape(CONNECTOME_CREDIT) in about
    demo_about = about_text(dataclasses.replace(win.bundle, spec="demo"))   # says what it is
    assert html.escape(demo_description()) in demo_about
    assert html.escape(CONNECTOME_CREDIT) not in demo_about


def test_export_action_is_wired_or_explains_why_not(window):
    import importlib.util

    action = window.actions_by_name["export_movie"]
    available = importlib.util.find_spec("flyviz.app.window.export_dialog") is not None
    assert action.isEnabled() == available
    if not available:
        assert "not available" in action.toolTip()
    window.session.new_recording(window.checkpoint.config.neurons)
    window.export_movie()                                   # nothing recorded: a message only
    assert "nothing to export" in window.last_error


def test_file_menu_dialogs_save_a_recording_and_export_the_shown_run(window, qtbot, tmp_path,
                                                                      monkeypatch):
    import flyviz.app.window.export_dialog as export_dialog  # part of every installation: no skip

    win = window
    win.state.run.max_new_tokens = 3
    win.state.run.speed_cap = 0
    with qtbot.waitSignal(win.run_ended, timeout=10_000):
        win.run_prompt("Tom")
    target = tmp_path / "chosen"
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(target), ""))
    win.save_recording_dialog()
    saved = tmp_path / "chosen.flyrec"
    assert saved.is_file() and str(saved) in win.statusBar().currentMessage()

    calls = []
    monkeypatch.setattr(export_dialog, "run_export_dialog",
                        lambda parent, rec, anatomy, name, **kw: calls.append(
                            (parent, rec, anatomy, name, kw)))
    win.actions_by_name["export_movie"].trigger()
    # The form starts from the window's viewer state: its style and camera, on a frozen
    # snapshot of the recording (frames still arriving do not reach the export thread).
    ((parent, rec, anatomy, name, kw),) = calls
    assert (parent, anatomy, name) == (win, win.anatomy, win.model_name)
    assert rec is not win.session.recording and len(rec) == len(win.session.recording)
    np.testing.assert_array_equal(rec.states(), win.session.recording.states())
    assert kw["style"] == win.state.style() and kw["style"].layer == win.brain.style.layer
    assert kw["style"].point_size == win.brain.style.point_size
    assert kw["camera"] == win.brain.camera_pose() == win.state.camera


def test_a_new_dock_and_action_take_a_few_lines_and_appear_in_the_menus(window, qtbot):
    from PySide6.QtCore import Qt
    from PySide6.QtWidgets import QLabel

    win = window
    calls = []
    dock = win.add_dock("extra", "Extra panel", QLabel("extra"), Qt.DockWidgetArea.RightDockWidgetArea)
    action = win.actions_registry.add("extra_action", "E&xtra action", lambda: calls.append(1),
                                      "Ctrl+Shift+X", "Do the extra thing")
    win.actions_registry.menu("Run").addAction(action)
    view_titles = [a.text() for a in win.actions_registry.menu("View").actions()]
    assert dock.toggleViewAction().text() in view_titles
    assert view_titles.index("Extra panel") < view_titles.index("&Layout")
    action.trigger()
    assert calls == [1]
    rows = win.actions_registry.shortcut_rows()
    assert ("Ctrl+Shift+X", "Do the extra thing") in rows


def _record_a_run(win, qtbot) -> None:
    win.state.run.max_new_tokens = 2
    win.state.run.speed_cap = 0
    with qtbot.waitSignal(win.run_ended, timeout=10_000):
        win.run_prompt("Tom")


def _small_movie(dialog) -> None:
    """A movie of a few tiny frames: quick to write, still a movie."""
    dialog.size_combo.setEditText("96x64")
    dialog.k_spin.setValue(1)
    dialog.hold_spin.setValue(0.0)


def _export_movie_by_browsing(win, monkeypatch) -> None:
    """File → Export movie: Browse…, then Export where Browse gave a file (Cancel where the
    user said no to replacing, and the field kept its earlier name)."""
    from PySide6.QtWidgets import QDialog, QPushButton

    from flyviz.app.window import export_dialog

    def exec_(dialog):
        before = dialog.output_path()
        _small_movie(dialog)
        browse = next(b for b in dialog.findChildren(QPushButton) if b.text() == "Browse…")
        browse.click()
        if dialog.output_path() == before:
            return QDialog.DialogCode.Rejected
        dialog.export_button.click()
        return dialog.result()

    monkeypatch.setattr(export_dialog.ExportDialog, "exec", exec_)
    win.export_movie()


def _screenshot(win, monkeypatch) -> None:
    from PySide6.QtWidgets import QDialog

    from flyviz.app.window.dialogs import ScreenshotDialog

    monkeypatch.setattr(ScreenshotDialog, "exec", lambda self: QDialog.DialogCode.Accepted)
    win.actions_by_name["screenshot"].trigger()


def _share(win, monkeypatch) -> None:
    from qt_barriers import background_delivered

    win.actions_by_name["share_page"].trigger()
    background_delivered(win.background, 60.0)


#: Each File menu dialog that saves a file, the suffix it adds to a name typed without one,
#: and how the user saves through it.
SAVE_DIALOGS = {
    "recording": (".flyrec", lambda win, mp: win.save_recording_dialog()),
    "web page": (".html", _share),
    "screenshot": (".png", _screenshot),
    "movie": (".mp4", _export_movie_by_browsing),
}


@pytest.mark.parametrize("dialog", list(SAVE_DIALOGS))
def test_every_save_dialog_asks_before_replacing_the_file_it_writes(
        window, qtbot, tmp_path, monkeypatch, dialog):
    """A name typed without its suffix ("run"): the save dialog's own overwrite question was
    about "run", and the file written, run.html, run.png or run.mp4, was replaced without
    one. Each dialog asks about the file it writes: No keeps it as it was, Yes replaces it;
    a name typed with its suffix (the save dialog asked already) is asked about no more."""
    suffix, save = SAVE_DIALOGS[dialog]
    win = window
    _record_a_run(win, qtbot)
    kept = tmp_path / f"run{suffix}"
    kept.write_bytes(b"an earlier file of the user's")
    user = DialogAnswers(monkeypatch, tmp_path / "run")
    asked = user.asked
    save(win, monkeypatch)
    assert len(asked) == 1 and asked[0].startswith(f"run{suffix} already exists"), asked
    assert kept.read_bytes() == b"an earlier file of the user's"
    assert sorted(p.name for p in tmp_path.iterdir()) == [kept.name]  # nothing else written

    user.replace = True
    save(win, monkeypatch)
    assert len(asked) == 2
    assert kept.read_bytes() != b"an earlier file of the user's" and kept.stat().st_size > 0
    assert f"saved {kept}" in win.statusBar().currentMessage()

    # The name typed with its suffix: the save dialog asked already; nothing asks again.
    kept.write_bytes(b"an earlier file of the user's")
    user.chosen = kept
    save(win, monkeypatch)
    assert len(asked) == 2
    assert kept.read_bytes() != b"an earlier file of the user's"


def test_a_movie_name_typed_into_the_export_form_is_asked_about_before_it_is_replaced(
        window, qtbot, tmp_path, monkeypatch):
    """Export movie's "Save to" field takes a name typed with no file dialog at all, which
    asked nothing: an existing movie there (or a folder's earlier PNG frames) was replaced
    without a word. Export now asks first: No keeps the form open and the file as it was."""
    from PySide6.QtWidgets import QDialog

    from flyviz.app.window import export_dialog

    win = window
    _record_a_run(win, qtbot)
    user = DialogAnswers(monkeypatch)
    asked = user.asked
    typed = {"text": str(tmp_path / "clip.mp4"), "format": 0}
    still_open: list[bool] = []

    def exec_(dialog):
        dialog.format_combo.setCurrentIndex(typed["format"])
        dialog.path_edit.setText(typed["text"])
        _small_movie(dialog)
        dialog.export_button.click()
        still_open.append(dialog.result() != QDialog.DialogCode.Accepted)
        return dialog.result()

    monkeypatch.setattr(export_dialog.ExportDialog, "exec", exec_)
    movie = tmp_path / "clip.mp4"
    movie.write_bytes(b"last week's movie")
    win.export_movie()
    assert len(asked) == 1 and asked[0].startswith("clip.mp4 already exists"), asked
    assert still_open == [True] and movie.read_bytes() == b"last week's movie"
    user.replace = True
    win.export_movie()
    assert len(asked) == 2 and still_open[-1] is False
    assert movie.read_bytes() != b"last week's movie"

    # A new name is asked about by no one.
    typed["text"] = str(tmp_path / "new.mp4")
    win.export_movie()
    assert len(asked) == 2 and (tmp_path / "new.mp4").stat().st_size > 0

    # A folder of earlier PNG frames: its frames would be replaced; the form asks too.
    frames = tmp_path / "frames"
    frames.mkdir()
    (frames / "frame_00001.png").write_bytes(b"an earlier frame")
    typed.update(text=f"{frames}/", format=3)
    user.replace = False
    win.export_movie()
    assert len(asked) == 3 and "frames" in asked[2] and "earlier frames" in asked[2], asked
    assert (frames / "frame_00001.png").read_bytes() == b"an earlier frame"
