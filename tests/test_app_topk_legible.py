"""The Next token bars stay legible when their dock is short (the Graph panel opened by
Why?, a comparison): fewer bars, each at least a line of text high, labels never overlapping."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QRect, QRectF, QSize
from qt_barriers import settle

from flyviz.app._testing import make_frame
from flyviz.app.language.panels import TopKPanel
from flyviz.record.recording import Recording

pytestmark = pytest.mark.gui


def _recording(k: int) -> Recording:
    rec = Recording(4)
    rec.append(make_frame(0, np.zeros(4), top_k=k))
    return rec


def label_rects(panel: TopKPanel) -> list[QRect]:
    """The pixel rectangles of the shown labels' text, in the plot's viewport."""
    view = panel.plot
    rects = []
    for label in panel.labels:
        if label.isVisible():
            rects.append(view.mapFromScene(label.mapToScene(
                label.textItem.boundingRect())).boundingRect())
    return rects


def bar_heights_px(panel: TopKPanel) -> float:
    """The height of one bar on screen, in pixels."""
    box = panel.plot.getPlotItem().getViewBox()
    height = float(panel.bars.opts["height"])
    top = box.mapViewToDevice(pg_point(0.0, 0.0))
    bottom = box.mapViewToDevice(pg_point(0.0, -height))
    return abs(bottom.y() - top.y())


def pg_point(x: float, y: float):
    from PySide6.QtCore import QPointF

    return QPointF(x, y)


def _shown_panel(qtbot, k: int, height: int, paired: bool) -> TopKPanel:
    """A Next token panel 320 pixels wide showing a frame of ``k`` candidates (of a
    comparison with ``paired``)."""
    panel = TopKPanel(k=k)
    qtbot.addWidget(panel)
    panel.resize(QSize(320, height))
    panel.show()
    qtbot.waitExposed(panel)
    rec = _recording(k)
    if paired:
        rec.baseline = _recording(k)
    panel.show_frame(rec, 0)
    settle(qtbot, panel)
    return panel


@pytest.mark.parametrize("height", [150, 220, 420, 560])
@pytest.mark.parametrize("paired", [False, True], ids=["single", "comparison"])
def test_the_bars_are_legible_in_a_short_panel(qtbot, height, paired):
    panel = _shown_panel(qtbot, 10, height, paired)
    rects = label_rects(panel)
    assert rects, "no candidate is shown"
    viewport = panel.plot.viewport().rect()
    line = panel.fontMetrics().height()
    for rect in rects:
        assert viewport.contains(rect), (rect, viewport)        # no label cut off
    for a, b in zip(rects, rects[1:]):
        assert not a.intersects(b), (a, b)                      # no two labels overlap
    # Each bar is at least a line of text high (two half bars in a comparison).
    least = line * (0.5 if paired else 0.8)
    assert bar_heights_px(panel) >= least, (bar_heights_px(panel), line)
    # All fit, all are shown (a comparison's row is its label's line above two bars).
    if height >= (560 if paired else 420):
        assert len(rects) == 10
    elif len(rects) < 10:
        # Fewer than asked: the title says so.
        assert f"top {len(rects)} of 10" in panel.title.text()


def _scene_rects(panel: TopKPanel) -> tuple[list[QRectF], list[QRectF]]:
    """The shown labels' rectangles and the drawn bars' rectangles (both runs'), in scene
    coordinates."""
    labels = [label.textItem.mapToScene(label.textItem.boundingRect()).boundingRect()
              for label in panel.labels if label.isVisible()]
    box = panel.plot.getPlotItem().getViewBox()
    bars = []
    for item in (panel.untouched_bars, panel.bars):
        opts = item.opts
        heights = np.broadcast_to(np.asarray(opts["height"], float), np.shape(opts["y"]))
        for x0, y, width, height in zip(opts["x0"], opts["y"], opts["width"], heights):
            if width > 0:
                rect = QRectF(float(x0), float(y) - height / 2, float(width), float(height))
                bars.append(box.mapViewToScene(rect).boundingRect())
    return labels, bars


@pytest.mark.parametrize("height", [220, 420])
def test_a_comparisons_labels_are_not_drawn_over_its_bars(qtbot, height):
    """In a comparison (a run and its intervened twin, as Patching shows them) each
    candidate's label stands on its own line above its two bars: no label's rectangle
    meets a bar's. The label was drawn across the middle of both bars, over them."""
    panel = _shown_panel(qtbot, 8, height, paired=True)
    labels, bars = _scene_rects(panel)
    assert labels and len(bars) == 2 * len(labels), (labels, bars)
    for label in labels:
        for bar in bars:
            assert not label.intersects(bar), (label, bar)
    # Each label is above its own bars, the untouched run's above the intervened run's.
    for j, label in enumerate(labels):
        untouched, intervened = bars[j], bars[len(labels) + j]
        assert label.bottom() <= untouched.top() <= untouched.bottom() <= intervened.top()
        if j + 1 < len(labels):
            assert intervened.bottom() <= labels[j + 1].top()


def test_a_chosen_token_without_a_bar_is_named_in_the_title(qtbot):
    """A sampled token outside the candidates shown has no bar: the title names it and its
    probability; a chosen token that has a bar (or a prompt frame) adds nothing."""
    import dataclasses

    panel = TopKPanel(k=3)
    qtbot.addWidget(panel)
    panel.resize(360, 300)
    panel.show()
    qtbot.waitExposed(panel)
    rec = Recording(4)
    rec.append(make_frame(0, np.zeros(4), top_k=5))
    outside = dataclasses.replace(make_frame(1, np.zeros(4), top_k=5), predicted_token_id=99,
                                  predicted_text=" kit", probability=0.0016)
    rec.append(outside)
    rec.append(dataclasses.replace(make_frame(2, np.zeros(4), top_k=5), predicted_token_id=6,
                                   predicted_text="t3", probability=0.2))
    rec.append(dataclasses.replace(make_frame(3, np.zeros(4), top_k=5, generated=False),
                                   predicted_token_id=99, predicted_text=" kit"))
    panel.show_frame(rec, 0)
    assert "chosen" not in panel.title.text()
    panel.show_frame(rec, 1)
    assert panel.title.text().endswith("; chosen ' kit' 0.2% (not among the top 3)")
    # id 6 is the fourth candidate: among the recorded five but not the three shown.
    panel.show_frame(rec, 2)
    assert panel.title.text().endswith("; chosen 't3' 20.0% (not among the top 3)")
    panel.k_box.setValue(4)
    assert "chosen" not in panel.title.text()
    panel.show_frame(rec, 3)
    assert "chosen" not in panel.title.text()
