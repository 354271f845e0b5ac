"""A new user's first session, from the README alone, in pictures.

Run ``python tests/make_walkthrough.py --out FOLDER`` under a display or Xvfb (``xvfb-run
-s "-screen 0 1280x800x24" python tests/make_walkthrough.py``); without ``--out`` the
pictures go to a new temporary folder, printed at the end. The window is driven as a user
drives it, with the keyboard, the mouse and the menus, at a laptop's 1280×800:

1. ``flyviz gui demo``: the window opens on the demo brain (``01-launch.png``);
2. a prompt typed into the prompt box and Enter (``02-prompt.png``);
3. **W**, *Why this token?*, on the last token (``03-why.png``);
4. the Patching dock's *Trace* on its example prompts, then a click on the cell that brings
   back the most, which runs the corrupted prompt with that patch (``04-patch.png``);
5. the Circuit dock's *Find circuit* on the shipped ``examples/names.jsonl`` (its first
   ``--circuit-prompts`` prompts, to keep the session short) (``05-circuit.png``);
6. File → *Open as spiking brain*, then the Stimulus dock's *Run* (``06-spiking.png``);
7. the README's commands on the command line: ``generate``, ``trace``, ``export`` (a frame
   of its movie, ``07-movie-frame.png``) and ``simulate``; then docs/spiking.md's movie of a
   spiking run, ``simulate --record`` and ``export`` (``08-spiking-movie-frame.png``).

Every command must exit with 0 and every step must end as it should; the script stops at
the first that does not, naming it. What each picture shows is for a person to look at;
the facts that must hold are asserted by the app's own tests.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from make_tour import WINDOW_SIZE, _settle, _wait  # noqa: E402

#: The prompt the user types (the README's).
PROMPT = "Once upon a time"
#: The shipped circuit task (the docs' ``names.jsonl``).
NAMES_TASK = HERE.parent / "examples" / "names.jsonl"


def _shoot(win, out: Path, name: str, written: list[Path]) -> None:
    _settle()
    win.refresh_panels()
    _settle()
    path = out / name
    win.grab().save(str(path))
    written.append(path)
    print(f"{path}  (status bar: {status_facts(win)})", flush=True)


def status_facts(win) -> str:
    """The status bar's labels as drawn: their text and whether each is wide enough for it."""
    labels = (win.status_state, win.status_rate, win.status_fps, win.status_model)
    return "; ".join(f"{label.text()!r} {label.width()}/{label.sizeHint().width()} px"
                     for label in labels if label.isVisible())


def window_steps(out: Path, work: Path, circuit_prompts: int) -> list[Path]:
    """Steps 1 to 6, in the window."""
    from PySide6.QtCore import QSettings, Qt
    from PySide6.QtTest import QTest
    from PySide6.QtWidgets import QApplication

    from flyviz.app.window.main_window import MainWindow
    from flyviz.app.base.theme import apply_dark_theme
    from flyviz.kinds.spiking import SPIKING

    app = QApplication.instance() or QApplication(sys.argv[:1])
    apply_dark_theme(app)
    settings = QSettings(str(work / "walkthrough.ini"), QSettings.Format.IniFormat)
    win = MainWindow(model_spec="demo", settings=settings)
    written: list[Path] = []
    ended: list[str] = []
    win.run_ended.connect(lambda reason, _frames: ended.append(reason))
    try:
        # 1. Launch.
        win.resize(*WINDOW_SIZE)
        win.show()
        win.activateWindow()
        _wait(lambda: win.bundle is not None, "the demo brain to load")
        _shoot(win, out, "01-launch.png", written)

        # 2. A prompt, typed and Enter.
        edit = win.prompt_bar.line_edit
        QTest.mouseClick(edit, Qt.MouseButton.LeftButton)
        QTest.keyClicks(edit, PROMPT)
        QTest.keyClick(edit, Qt.Key.Key_Return)
        _wait(lambda: bool(ended), "the prompt's run to end", 300)
        if ended[-1] != "done":
            raise RuntimeError(f"the prompt's run ended {ended[-1]!r}: {win.last_error}")
        _shoot(win, out, "02-prompt.png", written)

        # 3. Why? (W, the shortcut the Graph panel names).
        why = win.features["why"]
        traced: list[object] = []
        why.traced.connect(traced.append)
        QTest.keyClick(win, Qt.Key.Key_W)
        _wait(lambda: bool(traced), "Why? to trace the token", 300)
        _wait(lambda: not win.brain.animating, "the brain view to settle")
        _shoot(win, out, "03-why.png", written)

        # 4. A patch: the Patching dock's example traced, then its brightest cell clicked.
        patching = win.features["patching"]
        patching.dock.show()
        patching.dock.raise_()
        patched: list[object] = []
        patching.traced.connect(patched.append)
        QTest.mouseClick(patching.panel.trace_button, Qt.MouseButton.LeftButton)
        _wait(lambda: bool(patched), "the causal trace", 600)
        import numpy as np

        grid = np.nan_to_num(patched[0].grid(patching.panel.measure.currentData()))
        row, column = np.unravel_index(int(np.argmax(grid[1:])), grid[1:].shape)
        row = int(row) + 1
        heatmap = patching.panel.heatmap
        patching.dock.raise_()
        _wait(heatmap.isVisible, "the patching heatmap to show")
        heatmap.show_row(row)
        _settle()
        runs_before = len(ended)
        QTest.mouseClick(heatmap.viewport(), Qt.MouseButton.LeftButton,
                         pos=heatmap.cell_centre(row, int(column)).toPoint())
        _wait(lambda: len(ended) > runs_before, "the patched run to end", 300)
        patching.dock.raise_()
        _shoot(win, out, "04-patch.png", written)

        # 5. A circuit on the shipped names task.
        circuit = win.features["circuit"]
        task = work / "names.jsonl"
        lines = NAMES_TASK.read_text("utf-8").splitlines()[:circuit_prompts]
        task.write_text("".join(f"{json.dumps(json.loads(line))}\n" for line in lines), "utf-8")
        circuit.dock.show()
        circuit.dock.raise_()
        found: list[object] = []
        circuit.found.connect(found.append)
        circuit.panel.task.setText(str(task))
        QTest.mouseClick(circuit.panel.find_button, Qt.MouseButton.LeftButton)
        _wait(lambda: bool(found), "the circuit search", 900)
        circuit.dock.raise_()
        _shoot(win, out, "05-circuit.png", written)

        # 6. The spiking brain: File → Open as spiking brain, then the Stimulus dock's Run.
        spiking = win.features["spiking"]
        spiking.open_action.trigger()
        _wait(lambda: win.state.kind is SPIKING, "the spiking brain to open", 300)
        QTest.mouseClick(spiking.panel.run_button, Qt.MouseButton.LeftButton)
        _wait(lambda: spiking.finished, "the spiking run", 600)
        _wait(lambda: not win.brain.animating, "the brain view to settle")
        _shoot(win, out, "06-spiking.png", written)
    finally:
        win.close()
        app.processEvents()
    return written


def _command(work: Path, *argv: str) -> None:
    """Run ``flyviz ARGV`` as a user does (a new process); fail on a non-zero exit."""
    env = dict(os.environ, PYTHONPATH=str(HERE.parent))
    done = subprocess.run([sys.executable, "-m", "flyviz", *argv], cwd=work, env=env,
                          capture_output=True, text=True, check=False)
    print(f"$ flyviz {' '.join(argv)}  -> exit {done.returncode}", flush=True)
    if done.returncode != 0:
        raise RuntimeError(f"flyviz {' '.join(argv)} exited with {done.returncode}:\n"
                           f"{done.stdout}{done.stderr}")


def _middle_frame(movie: Path, path: Path) -> Path:
    import imageio.v2 as imageio

    with imageio.get_reader(movie, "ffmpeg") as reader:
        frame = reader.get_data(reader.count_frames() // 2)
    imageio.imwrite(path, frame)
    return path


def command_steps(out: Path, work: Path) -> list[Path]:
    """Step 7: the README's commands, and a movie of the spiking run."""
    _command(work, "generate", "demo", "--prompt", PROMPT, "--max-new-tokens", "20")
    _command(work, "trace", "demo", "--prompt", "there was a little girl named")
    _command(work, "export", "demo", "--prompt", PROMPT, "--max-new-tokens", "20",
             "--out", "run.mp4")
    written = [_middle_frame(work / "run.mp4", out / "07-movie-frame.png")]
    _command(work, "simulate", "demo", "--duration", "100ms", "--out", "spikes.parquet")
    # The spiking brain's movie (docs/spiking.md): a recording, then ``flyviz export``.
    _command(work, "simulate", "demo", "--duration", "100ms", "--record", "spikes.flyrec")
    _command(work, "export", "spikes.flyrec", "--out", "spikes.mp4")
    written.append(_middle_frame(work / "spikes.mp4", out / "08-spiking-movie-frame.png"))
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None,
                        help="the folder to write the pictures to (default: a new temporary one)")
    parser.add_argument("--circuit-prompts", type=int, default=4,
                        help="how many of examples/names.jsonl's prompts the circuit search "
                             "uses (default 4; all 20 take minutes)")
    args = parser.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="flyviz-walkthrough-"))
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="flyviz-walkthrough-work-") as scratch:
        work = Path(scratch)
        written = window_steps(out, work, args.circuit_prompts)
        written += command_steps(out, work)
    print(f"{len(written)} pictures in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
