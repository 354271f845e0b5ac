"""The Patching dock on the demo brain, in the whole window: the README's picture comes from here.

The window runs the README's worked causal trace (the Lily/Tom prompts, " She" against
" He", by superclass), then a click on the cell that restores the most runs the
corrupted prompt with that patch. The test asserts what the picture must show (the
heatmap's cells in their colours, the brightest where the trace says, the clicked
group lit in the brain) and, when ``FLYVIZ_SCREENSHOTS`` names a folder, writes the
window there as ``patching.png`` (``FLYVIZ_SCREENSHOTS=docs/images`` makes the README's
``docs/images/patching.png``).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from app_conftest import make_window
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from test_app_why_demo import SIZE, _region
from qt_barriers import settle

from flyviz.analysis.heatmap import colour_index
from flyviz.app.language.patching_panel import EXAMPLE, heatmap_colours
from flyviz.model.patching import Patch

pytestmark = [pytest.mark.gui, pytest.mark.slow]

iio = pytest.importorskip("imageio.v3")


def test_patching_on_the_demo_brain_in_the_window(qtbot, tmp_path, dark_theme):
    win = make_window(qtbot, None, tmp_path)
    try:
        win.resize(*SIZE)
        with qtbot.waitSignal(win.model_ready, timeout=120_000):
            win.load_model("demo")
        feature = win.features["patching"]
        clean, corrupt, answer, versus = EXAMPLE
        with qtbot.waitSignal(feature.traced, timeout=180_000) as traced:
            assert feature.run_trace(clean, corrupt, answer, "superclass", versus=versus), \
                feature.panel.message.text()
        trace = traced.args[0]
        panel = feature.panel
        panel.measure.setCurrentIndex(panel.measure.findData("logit_diff"))
        raw = trace.grid("logit_diff_normalised")
        grid = np.nan_to_num(np.clip(raw, 0.0, 1.0))
        best = np.unravel_index(int(np.argmax(grid[1:])), grid[1:].shape)
        row, column = int(best[0]) + 1, int(best[1])
        assert grid[row, column] > 0.5         # one group at one step brings most back
        cell = feature.cell(row, column)

        win.state.display.smoothing_s = 0.0
        win.state.run.temperature = 0.0
        win.state.run.max_new_tokens = 3
        win.state.run.speed_cap = 0
        chosen = []
        feature.cell_chosen.connect(lambda c, p: chosen.append(p))
        heatmap = panel.heatmap
        feature.dock.raise_()
        qtbot.waitUntil(heatmap.isVisible, timeout=5000)
        heatmap.show_row(row)
        with qtbot.waitSignal(win.run_ended, timeout=120_000) as ended:
            QTest.mouseClick(heatmap.viewport(), Qt.MouseButton.LeftButton,
                             pos=heatmap.cell_centre(row, column).toPoint())
        assert ended.args[0] == "done", win.last_error
        assert chosen and isinstance(chosen[0], Patch)
        assert (chosen[0].start, chosen[0].stop) == (cell.position, cell.position + 1)
        feature.dock.raise_()                   # the comparison raised the Text dock
        settle(qtbot, win)                      # the docks shown for the result settle
        qtbot.waitUntil(lambda: win.display.brain_at is not None and not win.brain.animating,
                        timeout=5000)
        path = win.save_screenshot(tmp_path / "patching.png", target="window")
        image = iio.imread(path)

        # The heatmap: the clicked (brightest) cell is drawn in the colormap's top colour,
        # the shown cell that restores least in its own low one.
        colours = heatmap_colours().astype(int)
        cells = _region(image, win, heatmap.viewport())
        ratio = image.shape[1] / win.width()

        def drawn(r: int, c: int) -> np.ndarray:
            point = heatmap.cell_centre(r, c)
            return cells[int(point.y() * ratio), int(point.x() * ratio)]

        want = colours[colour_index(raw[row, column], heatmap.span)]
        assert np.abs(drawn(row, column) - want).max() <= 6, (drawn(row, column), want)
        # The quietest cell among the rows the dock shows now (not the BOS row).
        first = max(1, heatmap.first_row)
        shown = grid[first:heatmap.first_row + heatmap.shown_rows]
        quiet = np.unravel_index(int(np.argmin(shown)), shown.shape)
        q_row, q_column = int(quiet[0]) + first, int(quiet[1])
        want = colours[colour_index(raw[q_row, q_column], heatmap.span)]
        assert np.abs(drawn(q_row, q_column) - want).max() <= 6
        # The brain: the clicked group stays lit, the others are dimmed.
        mask = win.brain.emphasis
        assert mask is not None and mask.any() and not mask.all()
        brain = _region(image, win, win.brain.raster_screen or win.brain.canvas.native)
        background = np.round(np.asarray(win.brain.style.background[:3]) * 255).astype(int)
        assert (np.abs(brain - background).max(axis=-1) > 60).sum() > 200
        print(f"\npatching: {cell.group} at {cell.position} {cell.token!r} restores "
              f"{grid[row, column]:.0%} of the logit difference")
        folder = os.environ.get("FLYVIZ_SCREENSHOTS")
        if folder:      # for the README
            Path(folder).mkdir(parents=True, exist_ok=True)
            iio.imwrite(Path(folder) / "patching.png", image[..., :3])
    finally:
        win.close()
