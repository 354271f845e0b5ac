"""The window fits a laptop: at 1280×800 and 1440×900 no control of any dock is clipped,
the left column does not scroll, and the Traces plot's tick labels do not overlap.

The checks walk every dock of the window (a feature's new dock is checked too). The
rule for a control (a button, a list, a plot): it lies wholly inside its dock and is
painted whole (its visible region is all of it). Inside a dock's scroll area a control
may be out of sight, but it must be reachable: scrolled to, it is wholly inside the
scroll area's viewport, never cut mid-widget, and never sideways (the docks do not
scroll sideways). At the default layout the left column's docks do not scroll at all.
"""

from __future__ import annotations

import itertools
import os
import time
from pathlib import Path

import numpy as np
import pyqtgraph as pg
import pytest
from PySide6.QtCore import QPoint, QRect, QRectF, QSize, Qt
from PySide6.QtGui import QImage, QPainter
from PySide6.QtWidgets import (QAbstractButton, QAbstractItemView, QAbstractScrollArea,
                               QApplication, QDockWidget, QScrollArea, QTabBar, QWidget)
from qt_barriers import settle

from flyviz.app._testing import make_frame
from flyviz.app.population.plot_axes import SpacedAxis, next_step
from flyviz.record.recording import Recording

#: Laptop window sizes the layout must fit.
SIZES = [(1280, 800), (1440, 900)]


def at_size(win, qtbot, width: int, height: int) -> None:
    win.resize(width, height)
    qtbot.waitUntil(lambda: win.size() == QSize(width, height), timeout=3000)
    settle(qtbot, win)


def shown_docks(win) -> dict[str, QDockWidget]:
    return {key: dock for key, dock in win.docks.items()
            if not dock.isHidden() and not dock.isFloating()}


def _inside(widget: QWidget, kinds: tuple[type, ...], stop: QWidget) -> bool:
    parent = widget.parentWidget()
    while parent is not None and parent is not stop:
        if isinstance(parent, kinds):
            return True
        parent = parent.parentWidget()
    return False


def controls(dock: QDockWidget) -> list[QWidget]:
    """The dock's shown buttons, lists and plots (not the parts inside a list or plot)."""
    kinds = (QAbstractButton, QAbstractItemView, pg.GraphicsView)
    return [w for w in dock.findChildren(QWidget)
            if isinstance(w, kinds) and w.isVisibleTo(dock)
            and not _inside(w, (QAbstractItemView, pg.GraphicsView), dock)]


def scroll_area_of(widget: QWidget, dock: QDockWidget) -> QScrollArea | None:
    parent = widget.parentWidget()
    while parent is not None and parent is not dock:
        if isinstance(parent, QScrollArea):
            return parent
        parent = parent.parentWidget()
    return None


def describe(key: str, widget: QWidget) -> str:
    text = widget.text() if isinstance(widget, QAbstractButton) else ""
    return f"{key}: {type(widget).__name__} {text!r}"


def painted_rect(surface: QWidget, patience_s: float = 2.0) -> QRect:
    """The bounding rectangle of what of ``surface`` is painted, once that is all of it or
    ``patience_s`` has passed: on a loaded machine a dock just raised may lay out its
    children a few passes of the event loop later (a control cut off stays cut off)."""
    deadline = time.monotonic() + patience_s
    painted = surface.visibleRegion().boundingRect()
    while painted != surface.rect() and time.monotonic() < deadline:
        QApplication.processEvents()
        time.sleep(0.01)
        painted = surface.visibleRegion().boundingRect()
    return painted


def clipped_controls(key: str, dock: QDockWidget) -> list[str]:
    """Every control of ``dock`` that is cut off (see the module's rule)."""
    problems = []
    whole = QRect(QPoint(0, 0), dock.size())
    for widget in controls(dock):
        area = scroll_area_of(widget, dock)
        if area is not None:
            # Scrolled to by its rectangle (ensureWidgetVisible goes by a plot's input cursor
            # rectangle, a point at its top, and would leave a plot below the fold unscrolled).
            corner = widget.mapTo(area.widget(), QPoint(0, 0))
            half_w, half_h = widget.width() // 2, widget.height() // 2
            area.ensureVisible(corner.x() + half_w, corner.y() + half_h, half_w, half_h)
            QApplication.processEvents()
            port = area.viewport()
            rect = QRect(widget.mapTo(port, QPoint(0, 0)), widget.size())
            if not port.rect().contains(rect):
                problems.append(f"{describe(key, widget)} at {rect} cannot be scrolled wholly "
                                f"into the {port.size()} viewport")
                continue
        rect = QRect(widget.mapTo(dock, QPoint(0, 0)), widget.size())
        # A list or plot paints in its viewport, which covers the widget itself.
        surface = widget.viewport() if isinstance(widget, QAbstractScrollArea) else widget
        painted = painted_rect(surface)
        if not whole.contains(rect) or painted != surface.rect():
            problems.append(f"{describe(key, widget)} at {rect} in a {dock.size()} dock "
                            f"shows only {painted}")
        if isinstance(widget, pg.GraphicsView) and widget.centralWidget is not None:
            # A plot's items wider than the view (a long legend) are cut at its edge.
            drawn = widget.mapFromScene(widget.centralWidget.sceneBoundingRect()).boundingRect()
            if not widget.viewport().rect().adjusted(-1, -1, 1, 1).contains(drawn):
                problems.append(f"{describe(key, widget)} draws {drawn} in a "
                                f"{widget.viewport().size()} view")
    return problems


def wait_in_front(win, qtbot, key: str, dock: QDockWidget) -> None:
    """Wait until the raised ``dock`` is painted and its layout has settled; fail saying
    where it is if it never is painted.

    A dock behind a tab is not laid out while the window changes size: its children keep
    their old geometry until it is shown, and the layout it then asks for is a posted event
    that may come after the first paint (a button 385 wide seen in a dock of 313).
    """
    try:
        qtbot.waitUntil(lambda: not dock.visibleRegion().isEmpty(), timeout=3000)
    except qtbot.TimeoutError:
        behind = [d.objectName() for d in win.tabifiedDockWidgets(dock)]
        pytest.fail(f"the {key} dock is not painted after raise_(): visible={dock.isVisible()} "
                    f"geometry={dock.geometry()} tabbed with {behind}")
    settle(qtbot, dock)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_every_control_of_every_dock_is_inside_its_dock(window, qtbot, size):
    win = window
    at_size(win, qtbot, *size)
    docks = shown_docks(win)
    assert {"model", "controls", "interventions", "traces"} <= set(docks)
    problems = []
    for key, dock in docks.items():
        dock.raise_()                       # a tabbed dock is checked in front
        # The tab switch and the layout it asks for are posted events: on a loaded machine
        # they may take more than one pass of the event loop.
        wait_in_front(win, qtbot, key, dock)
        assert win.rect().contains(dock.geometry()), (key, dock.geometry())
        problems += clipped_controls(key, dock)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_every_dock_tab_shows_its_whole_title(window, qtbot, size):
    win = window
    at_size(win, qtbot, *size)
    bars = [bar for bar in win.findChildren(QTabBar)
            if bar.isVisible() and bar.parentWidget() is win]
    assert bars                                     # docks are in tabs at the default layout
    titles = set()
    for bar in bars:
        side = bar.shape() in (QTabBar.Shape.RoundedWest, QTabBar.Shape.RoundedEast,
                               QTabBar.Shape.TriangularWest, QTabBar.Shape.TriangularEast)
        for i in range(bar.count()):
            rect, text = bar.tabRect(i), bar.tabText(i)
            length = rect.height() if side else rect.width()
            assert length >= bar.fontMetrics().horizontalAdvance(text), (text, rect)
            assert bar.rect().contains(rect), (text, rect, bar.rect())
            titles.add(text)
    assert {"Model", "Settings", "Interventions"} <= titles


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_the_left_column_does_not_scroll_and_shows_the_interventions_list(window, qtbot, size):
    win = window
    at_size(win, qtbot, *size)
    left = {key: dock for key, dock in shown_docks(win).items()
            if win.dockWidgetArea(dock) == Qt.DockWidgetArea.LeftDockWidgetArea}
    assert {"model", "controls", "interventions"} <= set(left)
    for key, dock in left.items():
        dock.raise_()
        wait_in_front(win, qtbot, key, dock)  # laid out: its scroll range follows the layout
        area = dock.widget()
        if isinstance(area, QScrollArea):
            assert area.verticalScrollBar().maximum() == 0, \
                f"{key} scrolls: {area.widget().height()} px in a {area.viewport().height()} px dock"
    # The Interventions list and the buttons below it are in sight without scrolling.
    panel = win.interventions.panel
    win.docks["interventions"].raise_()
    wait_in_front(win, qtbot, "interventions", win.docks["interventions"])
    for widget in (panel.list.viewport(), panel.compare_button, panel.remove_button,
                   panel.clear_button):
        assert painted_rect(widget) == widget.rect(), describe("interventions", widget)
    assert panel.list.height() >= 3 * panel.list.fontMetrics().height()


# ------------------------------------------------------------------ tick labels
def label_rects(axis: pg.AxisItem) -> list[QRectF]:
    """The rectangles of the labels the axis draws, as tall as their text.

    pyqtgraph lays a label out in 0.8 of its text's height; the full height is
    used here so that labels whose glyphs touch count as overlapping.
    """
    image = QImage(8, 8, QImage.Format.Format_ARGB32)
    painter = QPainter(image)
    try:
        _axis, _ticks, texts = axis.generateDrawSpecs(painter)
    finally:
        painter.end()
    rects = []
    for rect, _flags, text in texts:
        if text:
            grow = rect.height() * 0.125
            rects.append(QRectF(rect).adjusted(0, -grow, 0, grow))
    return rects


def overlapping(rects: list[QRectF]) -> list[tuple[QRectF, QRectF]]:
    return [(a, b) for a, b in itertools.combinations(rects, 2) if a.intersects(b)]


def traces_recording(neurons: int, kl_like: bool = False) -> Recording:
    rec = Recording(neurons)
    rng = np.random.default_rng(3)
    for i in range(40):
        frame = make_frame(i, rng.normal(0, 0.4, neurons))
        frame.top_k_probabilities[:] = rng.uniform(0.2, 1.0)
        rec.append(frame)
    return rec


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_the_traces_tick_labels_do_not_overlap(window, qtbot, app_checkpoint, size):
    win = window
    at_size(win, qtbot, *size)
    win.docks["traces"].raise_()
    win.session.replace(traces_recording(app_checkpoint.config.neurons))
    win.refresh_panels()
    wait_in_front(win, qtbot, "traces", win.docks["traces"])   # painted and laid out
    plot = win.trace_panel.plot
    # Tall enough to be read: the data area is several label heights tall.
    assert plot.getPlotItem().vb.height() >= 4 * plot.fontMetrics().height()
    for name in ("left", "bottom"):
        rects = label_rects(plot.getAxis(name))
        assert len(rects) >= 3, (name, rects)        # enough numbers to read the scale
        assert not overlapping(rects), (name, overlapping(rects))


@pytest.mark.parametrize("height", [90, 130, 200, 400])
def test_a_short_plot_drops_ticks_rather_than_overlap_its_labels(qtbot, height):
    plot = pg.PlotWidget(axisItems={"left": SpacedAxis("left"), "bottom": SpacedAxis("bottom")})
    qtbot.addWidget(plot)
    plot.resize(420, height)
    plot.setYRange(0, 1, padding=0)
    plot.setXRange(0, 900, padding=0)
    plot.show()
    qtbot.waitExposed(plot)
    settle(qtbot, plot)                 # the axes placed, their ticks for that height
    for name in ("left", "bottom"):
        rects = label_rects(plot.getAxis(name))
        assert len(rects) >= 2, (name, height)
        assert not overlapping(rects), (name, height, overlapping(rects))
    # pyqtgraph's own axis writes the six labels of 0–1 over each other when this short.
    if height <= 90:
        plain = pg.PlotWidget()
        qtbot.addWidget(plain)
        plain.resize(420, height)
        plain.setYRange(0, 1, padding=0)
        plain.show()
        qtbot.waitExposed(plain)
        settle(qtbot, plain)
        assert overlapping(label_rects(plain.getAxis("left")))


def test_the_tick_steps_follow_the_one_two_five_series():
    steps = [0.1]
    for _ in range(6):
        steps.append(next_step(steps[-1]))
    assert steps == pytest.approx([0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0])
    assert next_step(0.25) == pytest.approx(0.5)


# ------------------------------------------------------------------ the wheel
def test_the_wheel_over_a_dock_scrolls_it_instead_of_changing_a_spin_box(window, qtbot):
    """Issue 40: scrolling the Stimulus dock with the wheel changed the spin box under the
    pointer. A box the user has not clicked into leaves the wheel to the dock's scrolling."""
    from PySide6.QtCore import QEvent, QPointF
    from PySide6.QtGui import QEnterEvent, QWheelEvent

    win = window
    win.resize(1000, 420)                           # short enough that Settings scrolls
    settle(qtbot, win)                              # (the window may keep a minimum height)
    dock = win.docks["controls"]
    dock.raise_()
    wait_in_front(win, qtbot, "controls", dock)   # laid out: the scroll range is final
    area = dock.widget()
    assert isinstance(area, QScrollArea)
    bar = area.verticalScrollBar()
    assert bar.maximum() > 0, "the Settings dock does not scroll at this size"
    box = win.controls.temperature
    box.clearFocus()
    before, scrolled = box.value(), bar.value()
    centre = QPointF(box.rect().center())
    # The pointer comes over the dock (Qt sends the dock an Enter event whichever of its
    # children the pointer is over): only now does the guard filter the application's
    # events (a filter of every event costs every repaint of the window).
    guard = win._wheel_guard
    QApplication.sendEvent(dock, QEvent(QEvent.Type.Leave))   # wherever the real pointer is
    assert not guard.app_wide
    QApplication.sendEvent(dock, QEnterEvent(QPointF(5, 5), QPointF(5, 5),
                                             QPointF(dock.mapToGlobal(QPoint(5, 5)))))
    assert guard.app_wide
    wheel = QWheelEvent(centre, QPointF(box.mapToGlobal(centre.toPoint())), QPoint(0, 0),
                        QPoint(0, -120), Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier,
                        Qt.ScrollPhase.NoScrollPhase, False)
    QApplication.sendEvent(box, wheel)
    assert box.value() == before                    # the unfocused box did not change
    assert bar.value() > scrolled                   # the dock scrolled down
    # Clicked into, the box takes the wheel (the user chose it).
    box.setFocus()
    qtbot.waitUntil(box.hasFocus, timeout=3000)
    QApplication.sendEvent(box, QWheelEvent(
        centre, QPointF(box.mapToGlobal(centre.toPoint())), QPoint(0, 0), QPoint(0, 120),
        Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier, Qt.ScrollPhase.NoScrollPhase,
        False))
    assert box.value() != before
    # The pointer leaves the dock: the guard watches the docks alone again.
    QApplication.sendEvent(dock, QEvent(QEvent.Type.Leave))
    assert not guard.app_wide


def test_the_wheel_over_a_floating_dock_scrolls_it_too(window, qtbot):
    """A floating dock is a window of its own (the main window is no longer its ancestor):
    the wheel over an unfocused box in it still scrolls the dock."""
    from PySide6.QtCore import QEvent, QPointF
    from PySide6.QtGui import QEnterEvent, QWheelEvent

    win = window
    dock = win.docks["controls"]
    dock.setFloating(True)
    dock.show()
    dock.resize(320, 260)                           # short enough that Settings scrolls
    settle(qtbot, dock)
    area = dock.widget()
    bar = area.verticalScrollBar()
    qtbot.waitUntil(lambda: bar.maximum() > 0, timeout=3000)
    box = win.controls.temperature
    box.clearFocus()
    before, scrolled = box.value(), bar.value()
    QApplication.sendEvent(dock, QEnterEvent(QPointF(5, 5), QPointF(5, 5),
                                             QPointF(dock.mapToGlobal(QPoint(5, 5)))))
    assert win._wheel_guard.app_wide
    centre = QPointF(box.rect().center())
    QApplication.sendEvent(box, QWheelEvent(
        centre, QPointF(box.mapToGlobal(centre.toPoint())), QPoint(0, 0), QPoint(0, -120),
        Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier, Qt.ScrollPhase.NoScrollPhase,
        False))
    assert box.value() == before
    assert bar.value() > scrolled
    QApplication.sendEvent(dock, QEvent(QEvent.Type.Leave))


def cut_tab_titles(key: str, dock: QDockWidget) -> list[str]:
    """The tabs inside ``dock`` whose title is cut ("Currents now" shown as "C")."""
    problems = []
    for bar in dock.findChildren(QTabBar):
        if not bar.isVisibleTo(dock):
            continue
        for i in range(bar.count()):
            if not bar.isTabVisible(i):
                continue                    # a tab the shown kind hides
            rect, text = bar.tabRect(i), bar.tabText(i).replace("&", "")
            needed = bar.fontMetrics().horizontalAdvance(text)
            if rect.width() < needed or not bar.rect().contains(rect):
                problems.append(f"{key}: tab {text!r} is {rect.width()} px of the {needed} px "
                                f"its title needs, in a {bar.width()} px bar")
    return problems


def test_every_tab_inside_a_dock_shows_its_whole_title(window, qtbot):
    """Issue 40: the Neuron inspector's third tab read "C" at 1280×800."""
    win = window
    at_size(win, qtbot, 1280, 800)
    problems = []
    for key, dock in shown_docks(win).items():
        dock.raise_()
        wait_in_front(win, qtbot, key, dock)
        problems += cut_tab_titles(key, dock)
    assert not problems, "\n".join(problems)


# ------------------------------------------------------------ every preset, both kinds
PRESET_NAMES = ("default", "analysis", "presentation")


def _with_language_data(win, qtbot) -> None:
    win.state.run.max_new_tokens = 3
    win.state.run.speed_cap = 0
    assert win.run_prompt("Tom and his dog"), win.last_error
    qtbot.waitUntil(lambda: win.runs.end_reason == "done", timeout=30_000)


def _with_spiking_data(win, qtbot) -> None:
    from test_spiking_app import _two_sided_brain

    from flyviz.kinds.spiking import SPIKING, SpikingModel

    feature = win.features["spiking"]
    brain = _two_sided_brain(win.checkpoint.config.neurons, win.state.anatomy.positions)
    feature.open(SpikingModel(brain))
    assert win.state.kind is SPIKING
    panel = feature.panel
    panel.excite.setText("side:left")
    panel.rate.setValue(300.0)
    panel.bins.setValue(6)
    panel.speed.setValue(0.0)
    assert feature.run()
    qtbot.waitUntil(lambda: feature.finished, timeout=30_000)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["language", "spiking"])
def test_every_preset_of_both_kinds_fits_1280x800(window, qtbot, kind, request):
    """Issue 40: in every layout preset, with a run's data shown, no dock's control is cut
    off, no tab title is cut, and the Next token bars are at least a line of text high."""
    win = window
    if kind == "spiking":
        request.getfixturevalue("spiking_kernels")
        _with_spiking_data(win, qtbot)
    else:
        _with_language_data(win, qtbot)
    problems = []
    for preset in PRESET_NAMES:
        win.layouts.apply(preset)
        at_size(win, qtbot, 1280, 800)
        for key, dock in shown_docks(win).items():
            dock.raise_()
            wait_in_front(win, qtbot, key, dock)
            assert win.rect().contains(dock.geometry()), (preset, key, dock.geometry())
            problems += [f"{preset}: {p}" for p in clipped_controls(key, dock)]
            problems += [f"{preset}: {p}" for p in cut_tab_titles(key, dock)]
        if kind == "language" and not win.docks["topk"].isHidden():
            win.docks["topk"].raise_()
            wait_in_front(win, qtbot, "topk", win.docks["topk"])
            settle(qtbot, win)
            topk = win.topk_panel
            box = topk.plot.getPlotItem().getViewBox()
            shown = len(topk.bars.opts["width"])
            assert shown >= 1, preset
            pitch = box.height() / max(shown, 1)
            if pitch < topk.fontMetrics().height():
                problems.append(f"{preset}: Next token rows are {pitch:.0f} px")
    win.layouts.apply("default")
    assert not problems, "\n".join(problems)


def test_the_stimulus_docks_run_button_shows_without_scrolling(window, qtbot):
    """Issue 40: with a spiking brain open in the default layout at 1280×800, the Stimulus
    dock's Run and every field are on screen as the dock opens, not below its fold (they
    needed a scroll)."""
    from test_spiking_app import _two_sided_brain

    from flyviz.kinds.spiking import SPIKING, SpikingModel

    win = window
    feature = win.features["spiking"]
    brain = _two_sided_brain(win.checkpoint.config.neurons, win.state.anatomy.positions)
    feature.open(SpikingModel(brain))
    assert win.state.kind is SPIKING
    win.layouts.apply("default")
    at_size(win, qtbot, 1280, 800)
    dock = win.docks["stimulus"]
    dock.raise_()
    wait_in_front(win, qtbot, "stimulus", dock)
    panel = feature.panel
    # Every control, not only Run: the Rate row and those after it opened below the edge.
    for control in (panel.run_button, panel.stop_button, panel.excite, panel.excite_selected,
                    panel.silence, panel.rate, panel.bins, panel.speed, panel.display):
        area = scroll_area_of(control, dock)
        if area is not None:
            assert area.verticalScrollBar().value() == 0       # as opened: not scrolled
            port = area.viewport()
            rect = QRect(control.mapTo(port, QPoint(0, 0)), control.size())
            assert port.rect().contains(rect), (control, rect, port.size(), dock.size())
        assert QRect(control.mapTo(dock, QPoint(0, 0)), control.size()).intersects(dock.rect())
        assert painted_rect(control) == control.rect(), (control, painted_rect(control),
                                                         control.rect(), dock.size())
    # ... and the column no wider than the default layout makes it for the language model
    # (words beside the query fields had widened it, at the brain's expense).
    assert dock.width() <= 0.24 * 1280 + 60, dock.width()
    keep = os.environ.get("FLYVIZ_SCREENSHOTS")
    if keep:
        dock.grab().save(str(Path(keep) / "stimulus-dock.png"))
    win.layouts.apply("default")
