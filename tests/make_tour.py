"""The screenshot tour of the documentation (docs/tour.md), made from the code itself.

Run ``python tests/make_tour.py --out docs/images/tour`` (under a display or Xvfb) to
write the pictures; ``tests/test_tour.py`` renders the same into a temporary folder and
checks that each committed picture still matches, so the tour cannot drift from the app.

The pictures: the window at 1280×800, in the app's own theme, in each layout preset after a
run of the demo brain (``window-default.png``, ``window-presentation.png``, and
``window-analysis.png`` after Why? on the shown token, so its Graph panel holds the traced
graph), one frame of
the movie ``flyviz export`` writes (``movie-frame.png``) and the offline page ``flyviz
share`` writes, opened in headless Chromium (``shared-page.png``; left out when Chromium
is not installed).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

#: The prompt every picture shows (greedy, so the same text every time).
PROMPT = "Once upon a time there was a little girl named Lily"
#: Tokens the run generates.
NEW_TOKENS = 12
#: The window's size in the pictures (a laptop).
WINDOW_SIZE = (1280, 800)
#: The layout presets pictured, in order (the analysis layout after Why?, whose Graph panel
#: it shows).
PRESET_NAMES = ("default", "presentation", "analysis")
#: The movie frame's size.
MOVIE_SIZE = (960, 540)
#: The shared page's browser window.
PAGE_SIZE = (1100, 700)

HERE = Path(__file__).resolve().parent

#: Where the window's parts lie in its pictures, by picture name then part: ``(x, y, width,
#: height)`` in the picture's pixels (filled as the pictures are taken; the tests check what
#: each part shows).
REGIONS: dict[str, dict[str, tuple[int, int, int, int]]] = {}


def _wait(condition: Callable[[], bool], what: str, timeout_s: float = 120.0) -> None:
    """Process Qt events until ``condition`` holds (or fail naming ``what``)."""
    from PySide6.QtWidgets import QApplication

    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"the tour timed out waiting for {what}")
        QApplication.processEvents()
        time.sleep(0.01)


def _settle(rounds: int = 30) -> None:
    """Let the window lay out and paint, as the app's event loop does between frames.

    Deferred deletions are carried out too: widgets Qt has replaced (the dock tab bars of a
    restored arrangement) are deleted by the app's event loop, and a script that only
    processes events would picture them still drawn where they were.
    """
    from PySide6.QtCore import QEvent
    from PySide6.QtWidgets import QApplication

    for _ in range(rounds):
        QApplication.sendPostedEvents()
        QApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete.value)
        QApplication.processEvents()
        time.sleep(0.01)


def _background_done(win, timeout_s: float = 120.0) -> None:
    """Wait until the window's background computations have ended and their results are
    drawn (the Cell types panel's table and its sort, started by the layout's refresh): on a
    loaded machine they end after the layout has settled, and a picture taken before shows
    the panel half done."""
    from qt_barriers import background_delivered

    deadline = time.monotonic() + timeout_s
    while True:
        background_delivered(win.background, timeout_s)
        _settle(5)                  # a delivered result may start the next computation
        if not any(thread.is_alive() for thread in list(win.background._threads)):
            return
        if time.monotonic() > deadline:
            raise RuntimeError("the tour timed out waiting for the window's background work")


def region(win, widget) -> tuple[int, int, int, int]:
    """Where ``widget`` lies in a picture of ``win`` (``win.grab()``), in the picture's pixels."""
    top_left = widget.mapTo(win, widget.rect().topLeft())
    ratio = win.devicePixelRatioF()
    return (int(top_left.x() * ratio), int(top_left.y() * ratio),
            int(widget.width() * ratio), int(widget.height() * ratio))


def window_pictures(out: Path, settings_dir: Path) -> list[Path]:
    """The window after a demo run, in the app's theme, one picture per layout preset."""
    from PySide6.QtWidgets import QApplication

    from flyviz.app.base.theme import dark_theme_applied

    app = QApplication.instance() or QApplication(sys.argv[:1])
    assert isinstance(app, QApplication)
    with dark_theme_applied(app):
        return _window_pictures(app, out, settings_dir)


def _window_pictures(app, out: Path, settings_dir: Path) -> list[Path]:
    from PySide6.QtCore import QSettings, QSize

    from flyviz.app.window.main_window import MainWindow

    settings = QSettings(str(settings_dir / "tour.ini"), QSettings.Format.IniFormat)
    win = MainWindow(model_spec="demo", settings=settings)
    written = []
    try:
        win.resize(*WINDOW_SIZE)
        win.show()
        _wait(lambda: win.bundle is not None, "the demo brain to load")
        win.state.run.max_new_tokens = NEW_TOKENS
        win.state.run.speed_cap = 0
        win.state.run.temperature = 0.0
        win.prompt_bar.set_text(PROMPT)
        if not win.run_prompt(PROMPT):
            raise RuntimeError(f"the run did not start: {win.last_error}")
        _wait(lambda: win.runs.end_reason == "done", "the run to end")
        for name in PRESET_NAMES:
            if name == "analysis":
                _why(win)
            win.layouts.apply(name)
            win.resize(*WINDOW_SIZE)
            _wait(lambda: win.size() == QSize(*WINDOW_SIZE), "the window's size")
            _settle()
            win.refresh_panels()
            # The Cell types panel sorts its rows over the whole run when the run ends, off
            # the UI thread: wait for it (and the other background work) before the picture.
            _settle()
            _background_done(win)
            path = out / f"window-{name}.png"
            win.grab().save(str(path))
            REGIONS[path.name] = {"graph": region(win, win.features["why"].graph_panel.plot)}
            written.append(path)
        win.layouts.apply("default")
    finally:
        win.close()
        app.processEvents()
    return written


def _why(win) -> None:
    """Why? on the shown token (the last), as W does; wait for its graph."""
    feature = win.features["why"]
    traced: list[object] = []
    feature.traced.connect(traced.append)
    if not feature.why():
        raise RuntimeError(f"Why? did not start: {win.last_error}")
    _wait(lambda: bool(traced), "Why? to trace the shown token")
    _wait(lambda: not win.brain.animating, "the brain view to settle")


def _flyviz(*argv: str) -> None:
    from flyviz import cli

    code = cli.main(list(argv))
    if code != 0:
        raise RuntimeError(f"flyviz {' '.join(argv)} exited with {code}")


def recording_file(work: Path) -> Path:
    """The demo run of the tour saved as a recording."""
    path = work / "tour.flyrec"
    _flyviz("generate", "demo", "--prompt", PROMPT, "--max-new-tokens", str(NEW_TOKENS),
            "--record", str(path))
    return path


def movie_frame(out: Path, recording: Path, work: Path) -> Path:
    """One frame of ``flyviz export``'s movie of the run (the last token)."""
    frames = work / "frames"
    _flyviz("export", "--recording", str(recording), "--out", str(frames),
            "--size", f"{MOVIE_SIZE[0]}x{MOVIE_SIZE[1]}", "--frames-per-token", "1",
            "--hold", "0", "--tokens", f"{NEW_TOKENS + 2}:{NEW_TOKENS + 3}")
    pictures = sorted(frames.glob("*.png"))
    if not pictures:
        raise RuntimeError("flyviz export wrote no frame")
    path = out / "movie-frame.png"
    shutil.copyfile(pictures[-1], path)
    return path


def shared_page(out: Path, recording: Path, work: Path) -> Path | None:
    """The offline page of the run in headless Chromium (None without Chromium)."""
    sys.path.insert(0, str(HERE))
    from _chromium import Browser, chromium_path

    if chromium_path() is None:
        return None
    page = work / "tour.html"
    _flyviz("share", str(recording), "--out", str(page))
    from PySide6.QtCore import QRectF
    from PySide6.QtGui import QImage, QPainter

    with Browser(PAGE_SIZE) as browser:
        browser.open(page)
        browser.wait("window.flyviz.ready")
        screen = QImage.fromData(browser.screenshot())
        # The page's WebGL canvas is not kept between frames, so a screenshot shows it
        # empty: its own snapshot is drawn where it sits on the page.
        brain = QImage.fromData(browser.png("window.flyviz.snapshot()"))
        left, top, width, height = browser.evaluate(
            "(() => { const r = document.getElementById('brain').getBoundingClientRect(); "
            "return [r.left, r.top, r.width, r.height]; })()")
    painter = QPainter(screen)
    painter.drawImage(QRectF(left, top, width, height), brain)
    painter.end()
    path = out / "shared-page.png"
    screen.save(str(path))
    return path


def make_tour(out: Path) -> list[Path]:
    """Write every picture of the tour into ``out``; return their paths."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="flyviz-tour-") as scratch:
        work = Path(scratch)
        written = window_pictures(out, work)
        recording = recording_file(work)
        written.append(movie_frame(out, recording, work))
        page = shared_page(out, recording, work)
        if page is not None:
            written.append(page)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE.parent / "docs" / "images" / "tour",
                        help="the folder to write the pictures to (default docs/images/tour)")
    args = parser.parse_args(argv)
    for path in make_tour(args.out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
