"""A script that opens the window and ends without closing it exits cleanly.

Qt aborts a process that destroys a running ``QThread``; the window's engine thread runs
from the moment the window exists, so a script (or a notebook kernel) that made a window
and simply ended used to die with "QThread: Destroyed while thread ... is still running",
losing its exit status and whatever output was still buffered.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.gui

_SCRIPT = textwrap.dedent("""
    import sys
    from pathlib import Path
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QApplication
    from flyviz.app._testing import make_app_checkpoint
    from flyviz.app.window.main_window import MainWindow

    folder = Path(sys.argv[1])
    app = QApplication([])
    window = MainWindow(model_spec=None,
                        settings=QSettings(str(folder / "s.ini"), QSettings.Format.IniFormat))
    window.set_checkpoint(make_app_checkpoint(folder / "model"))
    window.show()
    window.run_prompt("Tom and his dog")
    for _ in range(200):      # let the engine thread take the run up
        app.processEvents()
    print("the script ends with the window open", flush=True)
    print("buffered, not flushed")
""")


def test_a_script_that_leaves_the_window_open_exits_with_status_zero(tmp_path):
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    done = subprocess.run([sys.executable, "-c", _SCRIPT, str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert "Destroyed while thread" not in done.stderr, done.stderr[-2000:]
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[-2:] == ["the script ends with the window open",
                                             "buffered, not flushed"]
