"""The app's side of trusting models and recordings: verification in the Model dock,
models that need their connectome dataset, stored-state precision, and recordings
made with another model or damaged."""

from __future__ import annotations

import shutil

from pathlib import Path

import numpy as np
import pytest
from app_conftest import make_window
from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QApplication, QMessageBox, QPushButton

from flyviz.app.runs import verification
from flyviz.app.runs.verification import FAILED, NOT_VERIFIED, VERIFIED, VERIFYING
from flyviz.model.formats import load_folder
from flyviz.model.verify import VerificationReport
from flyviz.model.writers import write_connectome_dataset, write_recital_web

GREEN, RED = (0x48, 0xBB, 0x78), (0xF5, 0x65, 0x65)


@pytest.fixture
def released(app_checkpoint, tmp_path):  # noqa: F811
    """The app's model as a release: a web export and its connectome dataset apart."""
    write_connectome_dataset(app_checkpoint, tmp_path / "data" / "connectome")
    write_recital_web(app_checkpoint, tmp_path / "models" / "web")
    return tmp_path


def load_released(released: Path):
    return load_folder(released / "models" / "web",
                       dataset_dir=released / "data" / "connectome")


def count_colour(image, colour, tolerance: int = 30) -> int:
    """How many pixels of a QImage are within ``tolerance`` of ``colour`` (RGB)."""
    from PySide6.QtGui import QImage

    image = image.convertToFormat(QImage.Format.Format_RGB32)
    width, height = image.width(), image.height()
    raw = np.frombuffer(image.constBits(), np.uint8).reshape(height, image.bytesPerLine())
    bgra = raw[:, :width * 4].reshape(height, width, 4)
    rgb = bgra[..., [2, 1, 0]].astype(int)
    return int((np.abs(rgb - np.array(colour)).max(axis=2) <= tolerance).sum())


def state_pixels(win, colour) -> int:
    return count_colour(win.model_panel.verification.state_label.grab().toImage(), colour)


def test_verify_runs_in_the_background_and_is_remembered(qtbot, released, tmp_path):
    ckpt = load_released(released)
    win = make_window(qtbot, ckpt, tmp_path, "verified.ini")
    status = win.model_panel.verification
    try:
        assert win.verifier.state == NOT_VERIFIED
        assert "never verified" in status.label.text()
        assert status.action.text() == "Verify" and status.action.isEnabled()
        qtbot.mouseClick(status.action, Qt.MouseButton.LeftButton)
        assert win.verifier.state == VERIFYING and status.action.text() == "Cancel"
        qtbot.waitUntil(lambda: win.verifier.state != VERIFYING, timeout=30_000)
        assert win.verifier.state == VERIFIED, win.verifier.text
        assert "checks passed" in status.label.text()
        assert status.details.isVisible() and status.action.text() == "Verify again"
        assert "verified" in win.statusBar().currentMessage()
        win.model_panel.grab().save(str(tmp_path / "verified.png"))
        assert state_pixels(win, GREEN) > 20 and state_pixels(win, RED) == 0
        dialog = status.show_details()
        qtbot.waitExposed(dialog)
        dialog.grab().save(str(tmp_path / "verification-details.png"))
        table = dialog.findChild(verification.QTableWidget, "verificationTable")
        assert table.rowCount() == len(win.verifier.report.checks) > 5
        assert {table.item(r, 2).text() for r in range(table.rowCount())} <= {"PASS", "SKIP"}
        dialog.close()
    finally:
        win.close()

    # The next launch, the same model (in memory again): verified, with the date.
    again = make_window(qtbot, load_released(released), tmp_path, "verified.ini")
    try:
        assert again.verifier.state == VERIFIED
        text = again.model_panel.verification.label.text()
        assert text.startswith("on ") and "checks passed" in text
        assert state_pixels(again, GREEN) > 20
    finally:
        again.close()


def test_a_failed_verification_names_the_first_check_next_launch_too(qtbot, released,
                                                                     tmp_path):
    ckpt = load_released(released)
    # The download went bad after loading: the file on disk no longer matches its hash.
    weights = max((released / "models" / "web").glob("*.f32"), key=lambda p: p.stat().st_size)
    raw = bytearray(weights.read_bytes())
    raw[len(raw) // 2] ^= 0x40
    weights.write_bytes(bytes(raw))
    win = make_window(qtbot, ckpt, tmp_path, "failed.ini")
    status = win.model_panel.verification
    try:
        assert win.verifier.verify()
        qtbot.waitUntil(lambda: win.verifier.state != VERIFYING, timeout=30_000)
        assert win.verifier.state == FAILED
        first = win.verifier.report.failures[0]
        assert weights.name in first.name
        assert f"the first: {first.name}" in status.label.text()
        win.model_panel.grab().save(str(tmp_path / "failed.png"))
        assert state_pixels(win, RED) > 20 and state_pixels(win, GREEN) == 0
    finally:
        win.close()
    again = make_window(qtbot, ckpt, tmp_path, "failed.ini")
    try:
        assert again.verifier.state == FAILED
        assert f"the first failed check: {first.name}" in \
            again.model_panel.verification.label.text()
    finally:
        again.close()


def held_verify(log: list, hold_at: int, release):
    """A stand-in for verify_checkpoint in 20 stages that stops at stage ``hold_at`` until
    ``release`` (a :class:`threading.Event`) is set or it is asked to stop: the test, not
    the clock, says how long a verification runs.

    ``log`` gets ``("thread", ident)`` when a verification starts, ``("held", stage)``
    when it waits, and ``("cancelled", stage)`` when one stops early.
    """
    import threading

    def verify(ckpt, *, golden=True, progress=None, should_stop=None):
        report = VerificationReport(model=ckpt.name, layout=ckpt.layout, source=None, dataset=None)
        log.append(("thread", threading.get_ident()))
        for i in range(20):
            if i == hold_at:
                log.append(("held", i))
                # 4,000 short waits: a safety net so a verification run on the UI thread
                # (the break this guards against) ends the test instead of hanging it.
                for _ in range(4000):
                    if release.wait(0.005) or (should_stop is not None and should_stop()):
                        break
            if should_stop is not None and should_stop():
                report.cancelled = True
                log.append(("cancelled", i))
                return report
            if progress is not None:
                progress(f"stage {i}", i / 20)
        return report

    return verify


def test_the_window_stays_responsive_while_verifying_and_can_cancel(qtbot,  # noqa: F811
                                                                   app_checkpoint,
                                                                   tmp_path, monkeypatch):
    """While the verification runs (held in its worker at stage 7 until the test lets it go),
    an event queued on the window's event loop is handled: the work is not on the UI thread.
    Broken if verify() ran on the calling thread: the queued event would wait for it."""
    import threading

    log: list = []
    release = threading.Event()
    monkeypatch.setattr(verification, "verify_checkpoint", held_verify(log, 7, release))
    win = make_window(qtbot, app_checkpoint, tmp_path)
    status = win.model_panel.verification
    try:
        handled: list[bool] = []
        assert win.verifier.verify()
        qtbot.waitUntil(lambda: ("held", 7) in log, timeout=20000)
        QTimer.singleShot(0, lambda: handled.append(True))
        qtbot.waitUntil(lambda: bool(handled), timeout=20000)
        # It ran in another thread, still held there while the UI handled the event.
        assert log[0][0] == "thread" and log[0][1] != threading.get_ident()
        assert win.verifier.busy
        qtbot.waitUntil(lambda: win.verifier.fraction >= 0.3, timeout=20000)
        assert status.progress.isVisible() and status.progress.value() >= 30
        assert "stage" in status.label.text()
        qtbot.mouseClick(status.action, Qt.MouseButton.LeftButton)
        assert win.verifier.state == NOT_VERIFIED
        assert "cancelled" in status.label.text() and not status.progress.isVisible()
        # A cancelled verification leaves nothing remembered.
        assert win.verifier.memory.recall(win.verifier.key) is None
        # Closing the window while verifying stops the verification and waits for it.
        del log[:]
        assert win.verifier.verify()
        thread = win.verifier._thread
        qtbot.waitUntil(lambda: ("held", 7) in log, timeout=20000)
        win.close()
        assert thread.isFinished()
        assert log[-1] == ("cancelled", 7), log    # stopped where it was held, not waited out
    finally:
        release.set()
        win.close()


# ----------------------------------------------------------------- models that need a dataset
@pytest.fixture
def lonely(released):
    """The web export copied where no dataset is near it."""
    import shutil

    target = released / "lonely" / "web"
    shutil.copytree(released / "models" / "web", target)
    return target


def test_a_model_without_its_dataset_offers_to_choose_it(qtbot, released, lonely, tmp_path,
                                                         monkeypatch):
    from flyviz.app.window import files

    dataset = released / "data" / "connectome"
    win = make_window(qtbot, None, tmp_path)
    try:
        win.load_model(str(lonely))
        qtbot.waitUntil(lambda: win.files.dataset_question is not None, timeout=20_000)
        box = win.files.dataset_question
        qtbot.waitExposed(box)
        assert "connectome dataset" in box.text() and "--dataset" in box.informativeText()
        assert "no connectome dataset was found" in box.detailedText()
        assert "Traceback" not in box.detailedText() and win.bundle is None
        box.grab().save(str(tmp_path / "dataset-question.png"))
        asked: list[str] = []

        def pick(parent, title, start):
            asked.append(title)
            return str(dataset)

        monkeypatch.setattr(files.QFileDialog, "getExistingDirectory", pick)
        qtbot.mouseClick(box.findChild(QPushButton, "chooseDataset"),
                         Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: win.bundle is not None, timeout=20_000)
        assert asked and "connectome dataset" in asked[0]
        assert win.bundle.checkpoint.metadata["dataset"] == str(dataset)
        assert f"dataset: {dataset}" in win.model_panel.label.text()
        assert win.settings.value("paths/datasets") == str(dataset)
        assert win.files.model_needing_dataset is None
    finally:
        win.close()


def test_open_model_takes_the_dataset_folder_of_the_model_that_needs_it(qtbot, released,
                                                                        lonely, tmp_path):
    dataset = released / "data" / "connectome"
    win = make_window(qtbot, None, tmp_path)
    messages: list[str] = []
    win.message_shown.connect(messages.append)
    try:
        # Nothing waits for a dataset: picking one as a model says what to do.
        win.files.open_model_folder(dataset)
        assert win.bundle is None and "is a connectome dataset" in messages[-1]
        assert "open the model folder" in messages[-1]
        win.files.open_model_folder(lonely)
        qtbot.waitUntil(lambda: win.files.model_needing_dataset == str(lonely), timeout=20_000)
        win.files.dataset_question.close()
        # A folder that is not a dataset: a message, and the model still waits for one.
        assert not win.files.load_with_dataset(str(lonely), released / "models")
        assert "is not a connectome dataset folder" in messages[-1]
        win.files.open_model_folder(dataset)   # File -> Open model, the dataset folder
        qtbot.waitUntil(lambda: win.bundle is not None, timeout=20_000)
        assert win.bundle.checkpoint.metadata["dataset"] == str(dataset)
        # One whose manifest.json is damaged: that is said (it hides which dataset it is),
        # and it is not remembered as the datasets' folder.
        broken = tmp_path / "broken"
        shutil.copytree(dataset, broken)
        (broken / "manifest.json").write_text("{")
        win.files.open_model_folder(broken)
        assert "manifest.json is not valid JSON" in messages[-1]
        assert "is a connectome dataset" not in messages[-1]
        assert win.settings.value("paths/datasets") == str(dataset)
    finally:
        win.close()


def test_gui_dataset_option_joins_the_model_and_a_chosen_dataset_wins(qtbot, released, lonely,
                                                                      tmp_path):
    from PySide6.QtCore import QSettings

    from flyviz.app.window.main_window import MainWindow
    from flyviz.commands.gui import _loader_with_dataset

    dataset = released / "data" / "connectome"
    settings = QSettings(str(tmp_path / "gui.ini"), QSettings.Format.IniFormat)
    win = MainWindow(model_spec=str(lonely), settings=settings,
                     model_loader=_loader_with_dataset(str(lonely), dataset))
    qtbot.addWidget(win)
    try:
        with qtbot.waitSignal(win.model_ready, timeout=20_000):
            win.show()
        assert win.bundle.checkpoint.metadata["dataset"] == str(dataset)
        assert win.verifier.state == NOT_VERIFIED and win.verifier.checkpoint is not None
    finally:
        win.close()
    # The loader takes a dataset chosen in the app for any model.
    load = _loader_with_dataset("another", None)
    assert load(str(lonely), None, dataset_dir=dataset).metadata["dataset"] == str(dataset)


# ----------------------------------------------------------------- recordings
def record_run(win, qtbot, prompt: str = "Tom and his dog", tokens: int = 6,
               temperature: float = 0.0) -> None:
    win.state.run.temperature = temperature
    win.state.run.max_new_tokens = tokens
    win.state.run.speed_cap = 0
    with qtbot.waitSignal(win.run_ended, timeout=10_000):
        assert win.run_prompt(prompt)


def test_the_stored_states_setting_decides_what_saved_recordings_hold(qtbot, app_checkpoint,  # noqa: F811
                                                                     tmp_path):
    from flyviz.app.runs.worker import IDLE
    from flyviz.record.recording import Recording

    win = make_window(qtbot, app_checkpoint, tmp_path, "states.ini")
    try:
        assert win.state.run.states_dtype == "float16"
        record_run(win, qtbot)
        half = Recording.load(win.save_recording(tmp_path / "half"))
        assert half.states_dtype == np.float16
        win.state.run.states_dtype = "float32"
        assert win.controls.states_dtype == "float32"    # the Settings dock follows
        qtbot.waitUntil(lambda: win.worker_state == IDLE)
        record_run(win, qtbot, temperature=0.8)   # sampled, the seed left random
        exact = Recording.load(win.save_recording(tmp_path / "exact"))
        assert exact.states_dtype == np.float32
        live = win.session.recording
        np.testing.assert_array_equal(exact.state(len(exact) - 1), live.state(len(live) - 1))
        # The run's metadata is Model.new_recording's: identity, and the seed it used.
        meta = exact.metadata
        assert meta["model_identity"]["weights_sha256"] and meta["prompt"] == "Tom and his dog"
        assert isinstance(meta["seed"], int) and meta["temperature"] == pytest.approx(0.8)
    finally:
        win.close()
    again = make_window(qtbot, app_checkpoint, tmp_path, "states.ini")
    try:
        assert again.state.run.states_dtype == "float32"
    finally:
        again.close()


@pytest.fixture
def saved_run(qtbot, app_checkpoint, tmp_path):  # noqa: F811
    """A recording of a short run of the app's model, saved."""
    win = make_window(qtbot, app_checkpoint, tmp_path, "saved.ini")
    try:
        record_run(win, qtbot)
        return win.save_recording(tmp_path / "run")
    finally:
        win.close()


def open_with_dialog(win, monkeypatch, path) -> str:
    """File -> Open recording on ``path``; the text of the warning it shows ('' if none)."""
    from PySide6.QtWidgets import QFileDialog, QMessageBox

    for box in win.findChildren(QMessageBox):
        box.close()
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (str(path), ""))
    win.last_error = ""
    win.open_recording_dialog()
    boxes = [b for b in win.findChildren(QMessageBox) if b.isVisible()]
    if not boxes:
        return ""
    assert len(boxes) == 1 and boxes[0].icon() == QMessageBox.Icon.Warning
    return boxes[0].text()


def test_a_recording_of_another_model_says_so(qtbot, saved_run, tmp_path, monkeypatch):
    from flyviz.app._testing import make_app_checkpoint
    from flyviz.app.runs.worker import IDLE

    # The same size, another graph: shown, with a warning naming what differs.
    other = make_app_checkpoint(tmp_path / "other", seed=7, name="other-brain")
    win = make_window(qtbot, other, tmp_path, "other.ini")
    try:
        text = open_with_dialog(win, monkeypatch, saved_run)
        assert "run.flyrec was made with test-brain on a different graph" in text, text
        assert "other-brain" in text and "Traceback" not in text and len(text.splitlines()) == 1
        assert len(win.session) > 0 and win.prompt_bar.text() == "Tom and his dog"
        qtbot.waitUntil(lambda: win.text_panel.toPlainText().startswith("Tom and his dog"))
        # The message took the focus from the prompt box: that must not start a run.
        box = next(b for b in win.findChildren(QMessageBox) if b.isVisible())
        qtbot.waitUntil(lambda: QApplication.focusWidget() is not win.prompt_bar.line_edit)
        QApplication.processEvents()
        assert not win.engine_thread.stepping()   # every request made so far was handled
        QApplication.processEvents()
        assert win.worker_state == IDLE and win.session.recording.metadata["model_name"] == \
            "test-brain"
        win.grab().save(str(tmp_path / "other-model.png"))
        box.grab().save(str(tmp_path / "other-model-message.png"))
    finally:
        win.close()
    # Another size: refused with a message, the window keeps what it had.
    smaller = make_app_checkpoint(tmp_path / "small", neurons=300, edges=2000, name="small")
    win = make_window(qtbot, smaller, tmp_path, "small.ini")
    try:
        text = open_with_dialog(win, monkeypatch, saved_run)
        assert "was recorded with test-brain (" in text and "small has 300" in text, text
        assert len(win.session) == 0
    finally:
        win.close()


def damaged_copies(path: Path, folder: Path) -> dict[str, Path]:
    """``path`` damaged in the ways a disk, a download or an editor damages files."""
    raw = path.read_bytes()
    header_len = int.from_bytes(raw[:8], "little")
    copies = {
        "empty": b"",
        "truncated to the header": raw[:8 + header_len],
        "truncated in the states": raw[:len(raw) - len(raw) // 5],
        "last byte gone": raw[:-1],
        "header not JSON": raw[:8] + b"{" * header_len + raw[8 + header_len:],
        "header length huge": (10 ** 12).to_bytes(8, "little") + raw[8:],
        "not a recording": b"hello, world\n" * 50,
    }
    for fraction in (0.02, 0.3, 0.55, 0.8, 0.97):
        flipped = bytearray(raw)
        flipped[int(len(raw) * fraction)] ^= 0x5A
        copies[f"byte flipped at {fraction:.0%}"] = bytes(flipped)
    paths = {}
    for name, data in copies.items():
        target = folder / (name.replace(" ", "-").replace("%", "pc") + ".flyrec")
        target.write_bytes(data)
        paths[name] = target
    paths["a folder"] = folder / "folder.flyrec"
    paths["a folder"].mkdir()
    paths["missing"] = folder / "missing.flyrec"
    return paths


def test_damaged_recordings_give_a_message_in_the_app(qtbot, app_checkpoint, saved_run,  # noqa: F811
                                                      tmp_path, monkeypatch):
    win = make_window(qtbot, app_checkpoint, tmp_path, "damaged.ini")
    folder = tmp_path / "damaged"
    folder.mkdir()
    try:
        assert open_with_dialog(win, monkeypatch, saved_run) == ""   # the intact file opens
        assert len(win.session) > 0
        for name, path in damaged_copies(saved_run, folder).items():
            text = open_with_dialog(win, monkeypatch, path)
            assert text, f"{name}: no message"
            assert len(text.splitlines()) == 1 and "Traceback" not in text, (name, text)
            assert text == win.last_error, name
            assert path.name in text or str(path) in text, (name, text)
    finally:
        win.close()


def test_app_runs_are_model_frames_into_model_new_recording(qtbot, window):  # noqa: F811
    """One orchestration: the worker steps Model.frames and the run's recording (and so
    its metadata) is Model.new_recording's."""
    model = window.bundle.model
    calls: list[str] = []
    made = []
    frames, new_recording = model.frames, model.new_recording

    def spy_frames(*args, **kwargs):
        calls.append("frames")
        return frames(*args, **kwargs)

    def spy_new_recording(*args, **kwargs):
        calls.append("new_recording")
        made.append(new_recording(*args, **kwargs))
        return made[-1]

    model.frames, model.new_recording = spy_frames, spy_new_recording
    record_run(window, qtbot, "Once upon a time", tokens=4)
    assert calls == ["new_recording", "frames"]
    assert window.session.recording is made[0] and len(made[0]) > 4
    assert made[0].metadata["prompt"] == "Once upon a time"
