"""The window fits the screen it opens on: first start, and with a saved size that no longer fits.

Each case runs the app in a child process on its own virtual screen of the
size under test (Xvfb), and reads back where the window and its status bar
ended up and what the screen shows there.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

pytestmark = [pytest.mark.gui, pytest.mark.slow]

_PROBE = textwrap.dedent('''
    import json, sys, time
    from PySide6.QtCore import QEventLoop, QRect, QSettings
    from PySide6.QtWidgets import QApplication
    from flyviz.app.window.main_window import MainWindow
    from flyviz.app.base.theme import PANEL, apply_dark_theme

    app = QApplication(sys.argv[:1])
    apply_dark_theme(app)
    settings_path, steps = sys.argv[1], json.loads(sys.argv[2])
    report = []

    def settle(done, seconds=10.0):
        """Run the event loop until done() holds (at most ``seconds``), then once more."""
        deadline = time.monotonic() + seconds
        while not done() and time.monotonic() < deadline:
            app.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 20)
            time.sleep(0.005)
        app.processEvents()

    def status_pixel(win):
        bar = win.statusBar()
        top_left = bar.mapToGlobal(bar.rect().topLeft())
        shot = app.primaryScreen().grabWindow(0).toImage()
        x, y = top_left.x() + 4, top_left.y() + bar.height() // 2
        inside = 0 <= x < shot.width() and 0 <= y < shot.height()
        return shot.pixelColor(x, y).name() if inside else None

    def shown(win):
        """Exposed, and the status bar painted on the screen (or 10 s gone by)."""
        handle = win.windowHandle()
        return (handle is not None and handle.isExposed() and win.statusBar().isVisible()
                and status_pixel(win) == PANEL)

    def open_window():
        win = MainWindow(model_spec=None,
                         settings=QSettings(settings_path, QSettings.Format.IniFormat))
        win.show()
        settle(lambda: shown(win))                             # shown, placed, painted
        return win

    for step in steps:
        win = open_window()
        screen = app.primaryScreen()
        bar = win.statusBar()
        top_left = bar.mapToGlobal(bar.rect().topLeft())
        report.append({
            "available": screen.availableGeometry().getRect(),
            "frame": win.frameGeometry().getRect(),
            "status_bar": [top_left.x(), top_left.y(), bar.width(), bar.height()],
            "status_bar_visible": bar.isVisible(),
            "status_pixel": status_pixel(win),
            "panel": PANEL,
            "brain_width": win.brain.width(),
            # the docks in front in the side columns, by key
            "side_widths": {key: dock.width() for key, dock in win.docks.items()
                            if win.dockWidgetArea(dock).name in ("LeftDockWidgetArea",
                                                                 "RightDockWidgetArea")
                            and not dock.isFloating() and not dock.visibleRegion().isEmpty()},
        })
        if step.get("resize"):
            win.setGeometry(*step["resize"])
            want = QRect(*step["resize"])
            # The window manager may refuse a size; then the one it gave is what is saved.
            settle(lambda: win.geometry() == want, seconds=3.0)
        win.close()                               # saves the geometry
    print("REPORT " + json.dumps(report))
''')


def _run_on_screen(width: int, height: int, steps: list[dict], tmp_path) -> list[dict]:
    xvfb = shutil.which("Xvfb")
    if xvfb is None:
        pytest.skip("Xvfb is not installed")
    read_fd, write_fd = os.pipe()
    server = subprocess.Popen([xvfb, "-displayfd", str(write_fd), "-screen", "0",
                               f"{width}x{height}x24", "-nolisten", "tcp"],
                              pass_fds=(write_fd,), stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    os.close(write_fd)
    try:
        with os.fdopen(read_fd) as pipe:
            display = pipe.readline().strip()
        env = dict(os.environ, DISPLAY=f":{display}", QT_QPA_PLATFORM="xcb")
        env.pop("WAYLAND_DISPLAY", None)
        done = subprocess.run([sys.executable, "-c", _PROBE, str(tmp_path / "settings.ini"),
                               json.dumps(steps)], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=180)
    finally:
        server.terminate()
        server.wait(timeout=10)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("REPORT ")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    return json.loads(lines[-1][len("REPORT "):])


def _inside(rect, area) -> bool:
    x, y, w, h = rect
    ax, ay, aw, ah = area
    return x >= ax and y >= ay and x + w <= ax + aw and y + h <= ay + ah


@pytest.mark.parametrize("size", [(1280, 800), (1600, 1000)])
def test_the_window_fits_the_screen_and_a_saved_size_only_if_it_still_fits(size, tmp_path):
    width, height = size
    report = _run_on_screen(width, height, [
        {"resize": [0, 0, width + 900, height + 500]},   # first start, then made too big
        {"resize": [40, 30, width - 300, height - 200]},  # restored (clipped), then a size that fits
        {},                                               # restores that size
    ], tmp_path)
    first, too_big_restored, fitting_restored = report
    for shown in report:
        assert _inside(shown["frame"], shown["available"]), shown
        assert shown["status_bar_visible"] and _inside(shown["status_bar"], shown["available"])
        assert shown["status_pixel"] == shown["panel"]      # the status bar is on the screen
    assert first["frame"][2] >= min(1440, width - 100) and first["frame"][3] >= height - 100
    # The brain view, the point of the window, is its widest part at first start (a window
    # made 980 px wide by hand has no room for that beside the columns' least widths).
    assert {"controls", "text"} <= set(first["side_widths"]), first["side_widths"]
    assert all(first["brain_width"] > side for side in first["side_widths"].values()), first
    assert fitting_restored["frame"][2:] == [width - 300, height - 200]
