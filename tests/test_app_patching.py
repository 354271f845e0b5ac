"""The Patching dock: a causal trace's heatmap, a cell's group and patch, Cancel, bad input."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from qt_barriers import background_delivered, settle
from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QImage, QPainter, QWheelEvent
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QHBoxLayout, QWidget

from flyviz.analysis.sweep import sweep_groups
from flyviz.analysis.heatmap import colour_index
from flyviz.app.language.patching_panel import heatmap_colours
from flyviz.model.patching import Patch, source_states
from flyviz.model.tokenizer import tokenizer_for

pytestmark = pytest.mark.gui

CLEAN = "Once upon a time there was a girl named Lily"
CORRUPT = "Once upon a time there was a boy named Tom"
ANSWER = " time"
#: Per channel, how far a heatmap pixel may be from its colour (8-bit rounding).
TOLERANCE = 3


def _trace(win, qtbot, by="superclass"):
    feature = win.features["patching"]
    with qtbot.waitSignal(feature.traced, timeout=60_000) as traced:
        assert feature.run_trace(CLEAN, CORRUPT, ANSWER, by, versus=""), \
            feature.panel.message.text()
    return feature, traced.args[0]


def _image_pixel(image, widget, point) -> np.ndarray:
    """The colour at ``point`` (``widget``'s coordinates) of ``image``, a grab of ``widget``."""
    ratio = widget.devicePixelRatioF()
    colour = image.pixelColor(int(point.x() * ratio), int(point.y() * ratio))
    return np.array([colour.red(), colour.green(), colour.blue()], dtype=np.float64)


def _pixel(widget, point) -> np.ndarray:
    return _image_pixel(widget.grab().toImage(), widget, point)


def test_the_heatmap_colours_each_cell_from_corrupted_to_clean_and_a_click_compares_its_patch(
        window, qtbot, app_checkpoint):
    """Pixel facts: each heatmap cell is drawn in the colormap's colour of its normalised
    value (rows the positions, labelled with their tokens; columns the groups); clicking a
    cell lights exactly its group in the brain and runs the corrupted prompt beside the
    untouched model with the group's state set to the clean run's at that position."""
    win = window
    win.state.display.smoothing_s = 0.0
    win.state.display.point_size = 4.0
    feature, trace = _trace(win, qtbot)
    # The dock laid out for the trace before cells are mapped and pictures taken: the heatmap
    # is still being widened (285 -> 301 px) when the trace arrives, and a cell centre mapped
    # before that lands is not where the next picture draws the cell.
    settle(qtbot, win)
    heatmap = feature.panel.heatmap
    assert feature.dock.isVisible()
    n_positions, n_groups = len(trace.positions), len(trace.groups)
    assert heatmap.image.image.shape == (n_groups, n_positions, 3)
    # Row labels: position and token, in order.
    ticks = heatmap.plot.getAxis("left")._tickLevels[0]
    assert [text for _, text in ticks] == trace.token_labels()
    assert trace.token_labels()[1].startswith("1 ")
    # On the logit difference (answer vs the corrupted run's top token): this small random
    # model gives the answer a tiny p either way, but its logit comes back by decades.
    panel = feature.panel
    panel.measure.setCurrentIndex(panel.measure.findData("logit_diff"))
    grid = trace.grid("logit_diff_normalised")
    colours = heatmap_colours()
    low, high = trace.span("logit_diff")
    ends = panel.ends.text()
    assert f"corrupted run's logit difference {low:.3g}" in ends
    assert f"clean run's {high:.3g}" in ends
    checked = 0
    image, shown_from = None, None
    for row in range(n_positions):
        # A dock shorter than all the rows shows a window of them: scroll each row into it.
        heatmap.show_row(row)
        assert heatmap.first_row <= row < heatmap.first_row + heatmap.shown_rows
        if heatmap.first_row != shown_from:
            image, shown_from = heatmap.grab().toImage(), heatmap.first_row
        for column in range(n_groups):
            want = colours[colour_index(grid[row, column], heatmap.span)].astype(np.float64)
            got = _image_pixel(image, heatmap, heatmap.cell_centre(row, column))
            assert np.abs(got - want).max() <= TOLERANCE, (row, column, grid[row, column], got, want)
            checked += 1
    assert checked == n_positions * n_groups
    assert np.nanmax(grid) > 0.2        # some cells bring much of the answer back

    # Click the cell that restores the most (not the BOS row).
    best = max(((r, c) for r in range(1, n_positions) for c in range(n_groups)),
               key=lambda rc: np.nan_to_num(grid[rc]))
    cell = feature.cell(*best)
    members = next(g.neurons for g in sweep_groups(app_checkpoint, "superclass")
                   if g.name == cell.group)
    win.state.run.temperature = 0.0
    win.state.run.max_new_tokens = 3
    win.state.run.speed_cap = 0
    win.state.run.states_dtype = "float32"
    chosen = []
    feature.cell_chosen.connect(lambda c, p: chosen.append((c, p)))
    heatmap.show_row(best[0])           # in the window of rows the dock shows
    point = heatmap.cell_centre(*best).toPoint()
    with qtbot.waitSignal(win.run_ended, timeout=30_000) as ended:
        QTest.mouseClick(heatmap.viewport(), Qt.MouseButton.LeftButton, pos=point)
    assert chosen and chosen[0][0] == cell, "the click did not reach the cell"
    assert ended.args[0] == "done", win.last_error
    mask = win.brain.emphasis
    assert mask is not None and np.array_equal(np.flatnonzero(mask), np.sort(members))
    # The comparison ran with exactly that patch, through the Interventions dock.
    patch = chosen[0][1]
    assert isinstance(patch, Patch)
    assert (patch.neurons, patch.start, patch.stop) == (cell.query, cell.position,
                                                        cell.position + 1)
    assert patch.source.prompt == CLEAN
    assert win.interventions.panel.enabled() == [patch]
    rec = win.session.recording
    assert rec.baseline is not None and rec.metadata["prompt"] == CORRUPT
    ids = [app_checkpoint.config.bos_token_id] + tokenizer_for(app_checkpoint).encode(CLEAN)
    clean_states = source_states(app_checkpoint, ids)
    frames = {int(rec[i].position): i for i in range(len(rec))}
    p = cell.position
    intervened, untouched = rec.state(frames[p]), rec.baseline.state(frames[p])
    np.testing.assert_array_equal(intervened[members], clean_states[p][members])
    assert np.abs(untouched[members] - clean_states[p][members]).max() > 1e-3


def test_cancel_stops_a_causal_trace(window, qtbot, monkeypatch):
    """Cancel while the trace runs: its thread stops at its next progress report (one task
    of several ran), no heatmap is shown, and the dock says so."""
    from flyviz.analysis import causal

    gate, entered, calls = threading.Event(), threading.Event(), []
    real = causal.trace_partial

    def held(*args, **kwargs):
        calls.append(1)
        entered.set()
        gate.wait(10)
        return real(*args, **kwargs)

    monkeypatch.setattr(causal, "trace_partial", held)
    feature = window.features["patching"]
    # 20 cell types x 15 positions: several passes of the batched engine.
    assert feature.run_trace(CLEAN, CORRUPT, ANSWER, "type", versus="")
    assert feature.panel.cancel_button.isVisible()
    assert entered.wait(10)
    cancelled = []
    feature.cancelled.connect(lambda: cancelled.append(1))
    qtbot.mouseClick(feature.panel.cancel_button, Qt.MouseButton.LeftButton)
    gate.set()
    qtbot.waitUntil(lambda: not feature.job.running.is_set(), timeout=10_000)
    background_delivered(window.background)     # a late result or pass would be in by now
    assert len(calls) == 1 and cancelled
    assert feature.trace is None and feature.panel.heatmap.values is None
    assert feature.panel.message.text() == "trace cancelled"
    assert not feature.panel.cancel_button.isVisible() and feature.panel.trace_button.isEnabled()


@pytest.mark.parametrize("clean, corrupt, answer, versus, says", [
    (CLEAN, CORRUPT + " again", ANSWER, "", "same length"),
    (CLEAN, CORRUPT, " She", "", "the answer ' She' is 3 tokens"),
    (CLEAN, CORRUPT, ANSWER, " He", "versus ' He' is 3 tokens"),
    ("  ", CORRUPT, ANSWER, "", "the clean prompt is empty"),
    (CLEAN, "", ANSWER, "", "the corrupted prompt is empty"),
    (CLEAN, CORRUPT, "", "", "the answer is empty"),
])
def test_bad_input_is_one_line_in_the_dock(window, clean, corrupt, answer, versus, says):
    feature = window.features["patching"]
    assert not feature.run_trace(clean, corrupt, answer, versus=versus)
    text = feature.panel.message.text()
    assert says in text and "\n" not in text and "--" not in text
    assert not feature.busy and feature.trace is None
    assert feature.panel.trace_button.isEnabled()


def test_a_cell_click_lights_its_group_in_the_brain(window, qtbot, app_checkpoint):
    """Pixel facts: with every neuron lit, clicking a heatmap cell keeps its group's lone
    neurons bright and dims the others; the comparison gets that cell's patch."""
    from app_conftest import assert_only_lit, brightness, isolated_neurons

    from flyviz.app._testing import make_frame
    from flyviz.record.recording import Recording

    win = window
    win.state.display.smoothing_s = 0.0
    win.state.display.point_size = 4.0
    feature, trace = _trace(win, qtbot, by="superclass")
    asked = []
    feature.compare = lambda items, prompt: asked.append((items, prompt)) or True
    n = app_checkpoint.config.neurons
    groups = {g.name: g.neurons for g in sweep_groups(app_checkpoint, "superclass")}
    # A group with lone neurons on screen, not the largest (the rest must show too).
    column = next(c for c, name in enumerate(trace.groups)
                  if groups[name].size < n // 2 and isolated_neurons(win, groups[name], 1))
    members = groups[trace.groups[column]]
    rec = Recording(n)
    rec.append(make_frame(0, np.ones(n, np.float32)))
    win.session.replace(rec)
    qtbot.waitUntil(lambda: win.display.showing(0), timeout=3000)
    qtbot.waitUntil(lambda: win.display.brain_at is not None and not win.brain.animating,
                    timeout=3000)
    before = brightness(win.brain.render_image())
    row = len(trace.positions) - 1
    feature.panel.heatmap.show_row(row)     # in the window of rows the dock shows
    QTest.mouseClick(feature.panel.heatmap.viewport(), Qt.MouseButton.LeftButton,
                     pos=feature.panel.heatmap.cell_centre(row, column).toPoint())
    assert asked and asked[0][1] == CORRUPT
    (patch,), _ = asked[0]
    assert isinstance(patch, Patch) and patch.neurons == trace.rows[row * len(trace.groups)
                                                                    + column].query
    assert_only_lit(win, before, members)


def _standalone_heatmap(qtbot, rows: int, height: int):
    from flyviz.app.language.patching_heatmap import Heatmap

    heatmap = Heatmap()
    bar = heatmap.rows_bar
    holder = QWidget()
    layout = QHBoxLayout(holder)
    layout.addWidget(heatmap, 1)
    layout.addWidget(bar)
    qtbot.addWidget(holder)
    holder.resize(360, height)
    holder.show()
    qtbot.waitExposed(holder)
    values = np.linspace(0.0, 1.0, rows * 3).reshape(rows, 3)
    heatmap.set_grid(values, [f"{r} tok{r}" for r in range(rows)], ["a", "b", "c"])
    QApplication.processEvents()
    return heatmap, values, holder


def test_cells_beyond_the_runs_values_extend_the_bar_not_take_their_colours(qtbot):
    """A cell below the corrupted run's value (-0.24) was drawn in the corrupted colour and
    one past the clean run's (1.035) in the clean colour: the written figure's bar span
    (flyviz.analysis.heatmap.bar_span) is the dock's too."""
    heatmap, _, _ = _standalone_heatmap(qtbot, 2, 300)
    values = np.array([[-0.24, 0.0], [1.0, 1.035]])
    heatmap.set_grid(values, ["0 a", "1 b"], ["x", "y"])
    assert heatmap.span == (-0.24, 1.035)
    assert tuple(heatmap.bar.values) == (-0.24, 1.035)
    index = colour_index(values, heatmap.span)
    assert len(set(index.ravel().tolist())) == 4 and index[0, 0] == 0 and index[1, 1] == 255
    heatmap.set_grid(np.array([[0.0, 1.0]]), ["0 a"], ["x", "y"])
    assert heatmap.span == (0.0, 1.0) and tuple(heatmap.bar.values) == (0.0, 1.0)


def _shown_row_labels(heatmap) -> list[str]:
    """The row labels the left axis draws now, top to bottom."""
    image = QImage(8, 8, QImage.Format.Format_ARGB32)
    painter = QPainter(image)
    try:
        _axis, _ticks, texts = heatmap.plot.getAxis("left").generateDrawSpecs(painter)
    finally:
        painter.end()
    return [text for rect, _flags, text in sorted(texts, key=lambda t: t[0].top()) if text]


@pytest.mark.parametrize("rows", [6, 60])
def test_the_heatmap_shows_every_row_it_has_room_for_each_labelled(qtbot, rows):
    """Rows are never thinner than a label: in a 320 px heatmap 6 rows are all shown (no
    scroll bar), 60 are a window of consecutive rows, each with its label drawn, that the
    scroll bar, the wheel and show_row move; the cells shown keep their colours."""
    heatmap, values, _holder = _standalone_heatmap(qtbot, rows, 320)
    row_height = heatmap.plot.getViewBox().height() / heatmap.shown_rows
    assert row_height >= heatmap.row_pixels()
    labels = _shown_row_labels(heatmap)
    assert labels == [f"{r} tok{r}" for r in range(heatmap.first_row,
                                                    heatmap.first_row + heatmap.shown_rows)]
    if rows == 6:
        assert heatmap.shown_rows == 6 and not heatmap.rows_bar.isVisible()
        return
    assert 4 <= heatmap.shown_rows < rows and heatmap.rows_bar.isVisible()
    assert heatmap.rows_bar.maximum() == rows - heatmap.shown_rows
    # The wheel moves the window down by rows (and not past the last row).
    QTest.qWait(10)
    for _ in range(3):
        wheel = QWheelEvent(QPointF(50, 50), QPointF(heatmap.mapToGlobal(QPoint(50, 50))),
                            QPoint(0, 0), QPoint(0, -120), Qt.MouseButton.NoButton,
                            Qt.KeyboardModifier.NoModifier, Qt.ScrollPhase.NoScrollPhase, False)
        QApplication.sendEvent(heatmap.viewport(), wheel)
    assert heatmap.first_row == 3 and heatmap.rows_bar.value() == 3
    heatmap.rows_bar.setValue(rows)                      # the bar's end: the last rows
    assert heatmap.first_row == rows - heatmap.shown_rows
    heatmap.show_row(1)
    assert heatmap.first_row == 1
    assert _shown_row_labels(heatmap)[0] == "1 tok1"
    heatmap.repaint()
    colours = heatmap_colours()
    view = heatmap.viewport().rect()
    for row in (1, heatmap.first_row + heatmap.shown_rows - 1):
        for column in range(3):
            point = heatmap.cell_centre(row, column)
            assert view.contains(point.toPoint())
            want = colours[int(round(values[row, column] * 255))].astype(np.float64)
            assert np.abs(_pixel(heatmap, point) - want).max() <= TOLERANCE, (row, column)
