"""Why? in the app: the flow layer, the shaded text, the Graph dock and Cancel."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from app_conftest import centre_colour, expected_colour, isolated_neurons, screen_positions
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QImage, QPainter
from PySide6.QtTest import QTest
from qt_barriers import settle

from flyviz.app.base import theme
from flyviz.app.language import why_panel
from flyviz.render.style import BACKGROUND

pytestmark = pytest.mark.gui

#: Per channel, how far a drawn pixel may be from the colour computed here.
TOLERANCE = 10

PROMPT = "Once upon a time there was"


def _run(win, qtbot, tokens: int = 4) -> None:
    win.state.display.smoothing_s = 0.0
    win.state.display.point_size = 4.0
    win.state.run.max_new_tokens = tokens
    win.state.run.speed_cap = 0
    # Greedy: the same text, so the same trace and the same flows, in every run of the suite.
    win.state.run.temperature = 0.0
    with qtbot.waitSignal(win.run_ended, timeout=10_000):
        assert win.run_prompt(PROMPT)
    qtbot.waitUntil(lambda: win.state.index == len(win.state.recording) - 1, timeout=3000)


def _why(win, qtbot):
    feature = win.features["why"]
    with qtbot.waitSignal(feature.traced, timeout=20_000) as traced:
        assert feature.why()
    return traced.args[0]


#: How far apart (in units of the colour limit) the flows ranked against each other must be.
RANK_MARGIN = 0.15


def _ranked_apart(neurons: list[int], flow: np.ndarray, limit: float) -> list[tuple[int, int]]:
    """Every ``(a, b)`` of ``neurons`` whose flows have one sign and ``|f_a|`` exceeds
    ``|f_b|`` by at least ``RANK_MARGIN * limit``."""
    return [(a, b) for a in neurons for b in neurons
            if flow[a] * flow[b] > 0 and abs(flow[a]) - abs(flow[b]) >= RANK_MARGIN * limit]


def _drawn(win, qtbot) -> np.ndarray:
    # The brain has the layer shown now (a new one for each lag) and has drawn it.
    qtbot.waitUntil(lambda: win.brain.layer_override is win.state.layer_override
                    and win.display.brain_at is not None and not win.brain.animating,
                    timeout=3000)
    return win.brain.render_image()


def test_why_lights_the_neurons_that_carry_most_of_the_logit(window, qtbot, app_checkpoint):
    """Pixel facts: each lone neuron is drawn in the flow colormap's colour of its node flow
    over ± the largest |flow|, so the brightest are those carrying most; the lag slider
    shows an earlier step's flows."""
    win = window
    _run(win, qtbot)
    win.brain.set_gain(1.0)
    att = _why(win, qtbot)
    position = win.state.index
    assert att.position == position and att.target == win.state.recording[position].predicted_token_id
    assert abs(att.completeness_error) <= 1e-4 * max(1.0, abs(att.value))
    assert win.colour_by.current == "flow" and win.brain.colormap == "difference"
    assert win.brain.colorbar_caption.text() == "flow (units of L)"
    win.features["why"].panel.synapses.setChecked(False)    # only the neurons (lines: below)
    settle(qtbot, win)              # the docks shown for the result settle the canvas size
    # Zoomed in as far as the view framed this random box-filling brain before the framing
    # made room for perspective's larger near face: enough lone neurons to rank.
    win.brain.view.camera.scale_factor *= 0.8
    for lag in (0, 2):
        if lag:
            win.features["why"].panel.lag.setValue(lag)
        f = att.node_flow(position - lag)
        limit = float(np.abs(f).max())
        assert win.brain.value_range == pytest.approx((-limit, limit), rel=1e-5)
        image = _drawn(win, qtbot)
        xy = screen_positions(win)
        assert image.shape[:2] == (win.brain.canvas.physical_size[1],
                                   win.brain.canvas.physical_size[0])
        lone = isolated_neurons(win, np.arange(app_checkpoint.config.neurons), 40)
        assert len(lone) >= 15
        lum, away = {}, {}
        for neuron in lone:
            got = centre_colour(image, xy[neuron])
            lum[neuron] = got.max()
            away[neuron] = float(np.linalg.norm(got - 255.0 * np.array(BACKGROUND[:3])))
            if abs(f[neuron]) >= 0.1 * limit:
                want = expected_colour("difference", float(f[neuron]), -limit, limit)
                assert np.abs(got - want).max() <= TOLERANCE, (lag, neuron, got, want)
            else:   # near 0 the ramp is steep (sqrt): quiet neurons stay dim
                quiet = expected_colour("difference", 0.1 * limit, -limit, limit)
                assert got.max() <= quiet.max() + TOLERANCE
        # Ranked by flow, the lone neurons are ranked by how far from the background they
        # are drawn: every two of one sign whose flows are RANK_MARGIN · limit apart are
        # drawn in that order (the signs apart: the map's two ends differ in brightness and
        # its blue end saturates; the margin: a near-tie must not flip under llvmpipe).
        pairs = _ranked_apart(lone, f, limit)
        wrong = [(a, b) for a, b in pairs if not away[a] > away[b]]
        assert not wrong, (lag, wrong, {n: (float(f[n]), away[n]) for n in lone})
        assert len(pairs) >= len(lone), (lag, {n: float(f[n]) for n in lone})
        dim = sorted(lone, key=lambda n: abs(f[n]))[0]
        strongest = max(lone, key=lambda n: abs(f[n]))
        assert lum[strongest] > lum[dim] + 40


def _shades(text_panel) -> dict[int, "tuple[int, int, int, int]"]:
    """The background drawn behind each piece of the Text panel (its anchor's number)."""
    shades = {}
    block = text_panel.document().begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            fragment = it.fragment()
            fmt = fragment.charFormat()
            href = fmt.anchorHref()
            if href.startswith("tok:") and fmt.background().style() != Qt.BrushStyle.NoBrush:
                c = fmt.background().color()
                shades[int(href[4:])] = (c.red(), c.green(), c.blue(), c.alpha())
            it += 1
        block = block.next()
    return shades


def test_the_input_tokens_are_shaded_in_the_order_of_their_flows(window, qtbot):
    win = window
    _run(win, qtbot, tokens=3)
    win.state.index = len(win.state.recording) - 2      # a generated token that is not the last
    att = _why(win, qtbot)
    panel = win.text_panel
    shades = _shades(panel)
    accent = QColor(theme.ACCENT)
    accent = (accent.red(), accent.green(), accent.blue(), accent.alpha())
    flows = {}
    for k, piece in enumerate(panel.pieces()):
        positions = [panel.token_position(t) for t in panel.tokens()[piece.first:piece.last + 1]]
        # The shown piece is drawn in the accent colour instead (it marks the shown token).
        if all(p <= att.position for p in positions) and shades.get(k) != accent:
            flows[k] = float(sum(att.token_flows[p] for p in positions))
    assert len(flows) >= 4 and set(flows) <= set(shades)
    # Opacity follows |flow|, hue its sign (red adds to L, blue takes from it).
    order_by_flow = sorted(flows, key=lambda k: abs(flows[k]))
    alphas = [shades[k][3] for k in order_by_flow]
    assert alphas == sorted(alphas) and alphas[-1] > alphas[0]
    for k, flow in flows.items():
        r, _g, b, _a = shades[k]
        assert (r > b) == (flow > 0), (k, flow, shades[k])
    tip = panel.piece_tooltip(order_by_flow[-1])
    assert f"flow {flows[order_by_flow[-1]]:+.4f}" in tip
    # A new run clears the shading.
    _run(win, qtbot, tokens=2)
    assert [v for v in _shades(win.text_panel).values() if v != accent] == []
    assert win.features["why"].attribution is None


def test_the_graph_dock_shows_the_kept_nodes_and_a_click_selects_the_neuron(window, qtbot):
    win = window
    _run(win, qtbot)
    att = _why(win, qtbot)
    feature = win.features["why"]
    graph = feature.graph
    assert graph is not None and len(graph.neurons) > 0
    panel = feature.graph_panel
    points = panel.scatter.points()
    assert len(points) == len(graph.neurons)
    # Each node inside its position's column (nodes sharing a cell are spread on a grid).
    xs = np.array([p.pos().x() for p in points])
    assert np.all(np.abs(xs - graph.positions.astype(float)) < 0.5)
    # Larger |flow|, larger node; red for a positive flow.
    sizes = np.array([p.size() for p in points])
    order = np.argsort(np.abs(graph.flows))
    assert np.all(np.diff(sizes[order]) >= -1e-9)
    k = int(np.argmax(np.abs(graph.flows)))
    assert f"neuron {int(graph.neurons[k])} " in panel.node_tip(k)
    assert panel.node_tip(k).count("flow") == 1
    qtbot.waitUntil(lambda: panel.plot.isVisible() and panel.plot.height() > 120, timeout=3000)
    settle(qtbot, win)              # the plot has its final size: node positions hold
    # Click the largest node: the neuron selected is one whose disc lies under the click.
    win.state.selected = None
    spot = panel.node_widget_pos(k)
    QTest.mouseClick(panel.plot.viewport(), Qt.MouseButton.LeftButton, pos=spot)
    qtbot.waitUntil(lambda: win.state.selected is not None, timeout=3000)
    under = {int(graph.neurons[j]) for j in range(len(graph.neurons))
             if (panel.node_widget_pos(j) - spot).manhattanLength() <= sizes[j] / 2 + 1}
    assert int(graph.neurons[k]) in under and win.state.selected in under
    assert len(under) < len(graph.neurons)
    # A node on its own: clicking it selects exactly its neuron.
    alone = [j for j in range(len(graph.neurons))
             if all((panel.node_widget_pos(j) - panel.node_widget_pos(i)).manhattanLength()
                    > (sizes[i] + sizes[j]) for i in range(len(graph.neurons)) if i != j)]
    if alone:
        j = alone[0]
        QTest.mouseClick(panel.plot.viewport(), Qt.MouseButton.LeftButton,
                         pos=panel.node_widget_pos(j))
        qtbot.waitUntil(lambda: win.state.selected == int(graph.neurons[j]), timeout=3000)
    assert att.position == win.state.index


def test_the_graph_nodes_do_not_overlap_and_stay_inside_the_plot(window, qtbot):
    """Issue 40: the ~200 nodes were one overlapping pile, cut at the plot's right edge."""
    win = window
    _run(win, qtbot, tokens=6)
    _why(win, qtbot)
    feature = win.features["why"]
    graph, panel = feature.graph, feature.graph_panel
    assert graph is not None and len(graph.neurons) > 20
    win.docks["graph"].raise_()
    qtbot.waitUntil(lambda: panel.plot.isVisible() and panel.plot.height() > 120, timeout=3000)
    settle(qtbot, win)
    points = panel.scatter.points()
    view = panel.plot.viewport().rect()
    box = panel.plot.getPlotItem().getViewBox()
    inside = panel.plot.mapFromScene(box.sceneBoundingRect()).boundingRect()
    centres = np.array([[panel.node_widget_pos(k).x(), panel.node_widget_pos(k).y()]
                        for k in range(len(graph.neurons))], dtype=float)
    radii = np.array([p.size() for p in points]) / 2
    assert radii.min() >= 1.25                              # still visible dots
    for k, ((cx, cy), r) in enumerate(zip(centres, radii)):
        assert view.contains(int(cx), int(cy)), k
        assert inside.left() - 1 <= cx - r and cx + r <= inside.right() + 1, (k, cx, r, inside)
        assert inside.top() - 1 <= cy - r and cy + r <= inside.bottom() + 1, (k, cy, r, inside)
    apart = np.hypot(*(centres[:, None, :] - centres[None, :, :]).transpose(2, 0, 1))
    reach = radii[:, None] + radii[None, :]
    np.fill_diagonal(apart, np.inf)
    overlapping = np.argwhere(apart < reach - 1.0)
    assert len(overlapping) == 0, f"{len(overlapping) // 2} pairs of nodes overlap"


def test_the_graph_of_a_late_token_is_framed_on_the_positions_that_hold_nodes(window, qtbot):
    """Why? on the last token of a long run: the kept nodes sit at its last few positions.
    Framed on the whole window (46 positions) they were drawn as one pile a few pixels wide
    at the plot's right edge; framed on the positions that hold them they fill the plot."""
    from flyviz.app.language.graph_panel import NEGATIVE, POSITIVE

    win = window
    win.resize(1280, 800)
    _run(win, qtbot, tokens=40)
    att = _why(win, qtbot)
    feature = win.features["why"]
    graph, panel = feature.graph, feature.graph_panel
    first = int(graph.positions.min())
    assert att.window_start < first - 8, "the nodes should sit late in the window"
    win.docks["graph"].raise_()
    qtbot.waitUntil(lambda: panel.plot.isVisible() and panel.plot.width() > 200, timeout=3000)
    settle(qtbot, win)
    low, high = panel.plot.getPlotItem().getViewBox().viewRange()[0]
    assert first - 1 <= low < first and att.position < high <= att.position + 1, (low, high)
    # Pixel fact: the node colours' columns spread over most of the plot's width.
    box = panel.plot.getPlotItem().getViewBox()
    inside = panel.plot.mapFromScene(box.sceneBoundingRect()).boundingRect()
    image = panel.plot.grab().toImage().convertToFormat(QImage.Format.Format_RGB888)
    rows = np.frombuffer(image.constBits(), np.uint8).reshape(image.height(), image.bytesPerLine())
    rgb = rows[:, :image.width() * 3].reshape(image.height(), image.width(), 3).astype(int)
    ratio = image.width() / panel.plot.width()
    plot = rgb[int(inside.top() * ratio):int(inside.bottom() * ratio),
               int(inside.left() * ratio):int(inside.right() * ratio)]
    node = np.zeros(plot.shape[:2], bool)
    for colour in (POSITIVE, NEGATIVE):
        node |= np.abs(plot - np.array(colour[:3])).max(axis=-1) <= 40
    columns = np.flatnonzero(node.any(axis=0))
    assert columns.size, "no node drawn"
    assert columns.max() - columns.min() >= 0.5 * plot.shape[1], \
        f"the nodes span {columns.max() - columns.min()} of {plot.shape[1]} px"
    # The position axis reads whole positions (not "41.6, 41.8").
    texts = _tick_texts(panel.plot.getAxis("bottom"))
    assert texts and all(text.isdigit() for text in texts), texts


def _tick_texts(axis) -> list[str]:
    painter = QPainter(QImage(10, 10, QImage.Format.Format_RGB32))
    texts = [text for _, _, text in axis.generateDrawSpecs(painter)[2]]
    painter.end()
    return texts


def test_the_graph_emptied_by_a_new_run_reads_no_numbers(window, qtbot):
    """A new run clears the graph: its plot is empty and its axes read nothing (they read
    the last graph's range as "49.6, 49.8, 50.0" beside "Press W")."""
    win = window
    _run(win, qtbot)
    _why(win, qtbot)
    panel = win.features["why"].graph_panel
    win.docks["graph"].raise_()
    qtbot.waitUntil(lambda: panel.plot.isVisible(), timeout=3000)
    assert _tick_texts(panel.plot.getAxis("bottom"))
    _run(win, qtbot)
    qtbot.waitUntil(lambda: len(panel.items) == 0, timeout=3000)
    assert _tick_texts(panel.plot.getAxis("bottom")) == []
    assert _tick_texts(panel.plot.getAxis("left")) == []


def test_a_trace_whose_flows_do_not_add_up_is_not_shown_as_exact(window, qtbot, monkeypatch):
    """The dock and the status bar say the flows do not add up (by how much, and over how
    many steps they do) instead of presenting them as L's exact parts."""
    import warnings

    from flyviz.model import explain
    from flyviz.model.explain import IncompleteAttributionWarning

    win = window
    _run(win, qtbot)
    # Every completeness error counts as too large: the path of a long window's trace.
    monkeypatch.setattr(explain, "COMPLETENESS_TOLERANCE", 1e-15)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", IncompleteAttributionWarning)
        att = _why(win, qtbot)
    assert att.complete is False
    status = win.features["why"].panel.status.text()
    assert "NOT EXACT: the flows do not add up" in status
    assert f"{att.completeness_error:+.2g}" in status
    assert "NOT EXACT" in win.last_error          # the status bar's, as an error
    win.state.docks.why_lag = 1                  # the lag redraws the status: still said
    assert "NOT EXACT" in win.features["why"].panel.status.text()
    monkeypatch.undo()
    att = _why(win, qtbot)
    assert att.complete is True and "NOT EXACT" not in win.features["why"].panel.status.text()


def test_cancel_stops_a_trace(window, qtbot, monkeypatch):
    win = window
    _run(win, qtbot)
    stopped = threading.Event()

    def slow_trace(model, recording, *, position, window, should_stop):
        for _ in range(2000):           # a stand-in that would take 20 s
            if should_stop():
                stopped.set()
                raise InterruptedError("trace cancelled")
            time.sleep(0.01)
        raise AssertionError("the trace was not cancelled")

    monkeypatch.setattr(why_panel, "trace", slow_trace)
    feature = win.features["why"]
    assert feature.why()
    qtbot.waitUntil(lambda: feature.panel.progress.value() > 0, timeout=5000)
    assert feature.busy and feature.panel.cancel_button.isVisible()
    with qtbot.waitSignal(feature.cancelled, timeout=3000):
        QTest.mouseClick(feature.panel.cancel_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(stopped.is_set, timeout=3000)
    assert not feature.busy and feature.attribution is None
    assert not feature.panel.cancel_button.isVisible()
    assert not win.colour_by.actions["flow"].isEnabled()
    assert "cancelled" in feature.panel.status.text()


def test_why_on_a_generated_token_of_the_text_panel_traces_that_token(window, qtbot):
    win = window
    _run(win, qtbot, tokens=4)
    panel = win.text_panel
    generated = [k for k, p in enumerate(panel.pieces()) if p.generated]
    assert len(generated) >= 2
    assert panel.why_frame(0) is None                       # a prompt piece: nothing to ask
    k = generated[0]
    frame = panel.why_frame(k)
    assert frame is not None and frame < len(win.state.recording) - 1
    feature = win.features["why"]
    with qtbot.waitSignal(feature.traced, timeout=20_000) as traced:
        panel.why_requested.emit(frame)      # what the context menu's "Why this token?" sends
    att = traced.args[0]
    assert win.state.index == frame and att.position == frame
    piece = panel.pieces()[k]
    assert att.target == panel.tokens()[piece.last].token_id


def test_the_strongest_synapses_are_drawn_as_lines_between_their_somas(window, qtbot):
    """Pixel facts: along the strongest synapse the brain is brighter with the lines on than
    off; the lines are the strongest edge flows into the shown step."""
    win = window
    _run(win, qtbot)
    win.brain.set_gain(1.0)
    att = _why(win, qtbot)
    feature = win.features["why"]
    edges = feature.synapse_edges
    assert edges is not None and len(edges["flow"]) > 0
    strongest = att.step_edge_flows(att.position, top=why_panel.SYNAPSE_LINES)
    shown = set(zip(edges["pre"].tolist(), edges["post"].tolist()))
    assert shown <= set(zip(strongest["pre"].tolist(), strongest["post"].tolist()))
    settle(qtbot, win)              # the docks shown for the result settle the canvas size
    lit = _drawn(win, qtbot)
    xy = screen_positions(win)
    # The strongest drawn synapse whose somas lie far apart on screen: sample its middle.
    lengths = np.hypot(*(xy[edges["pre"]] - xy[edges["post"]]).T)
    order = [j for j in np.argsort(-np.abs(edges["flow"])) if lengths[j] > 60]
    assert order
    j = order[0]
    a, b = xy[edges["pre"][j]], xy[edges["post"][j]]
    samples = [a + (b - a) * s for s in (0.3, 0.4, 0.5, 0.6, 0.7)]
    feature.panel.synapses.setChecked(False)
    assert feature.synapse_edges is None
    dark = win.brain.render_image()
    gain = [lit[..., :3].max(axis=-1)[int(round(p[1])), int(round(p[0]))].astype(float)
            - dark[..., :3].max(axis=-1)[int(round(p[1])), int(round(p[0]))] for p in samples]
    assert np.median(gain) > 40, gain
    # Positive flow in red, negative in blue, along the line: summed over the samples, as
    # one sample may fall on a neuron bright enough to saturate a channel either way.
    added = sum(lit[int(round(p[1])), int(round(p[0])), :3].astype(float)
                - dark[int(round(p[1])), int(round(p[0])), :3] for p in samples)
    r, _g, bl = added
    assert (r > bl) == (edges["flow"][j] > 0), (added, float(edges["flow"][j]))


def test_closing_the_window_stops_a_trace(qtbot, app_checkpoint, tmp_path, monkeypatch):  # noqa: F811
    from app_conftest import make_window

    win = make_window(qtbot, app_checkpoint, tmp_path)
    _run(win, qtbot)
    stopped = threading.Event()

    def slow_trace(model, recording, *, position, window, should_stop):
        for _ in range(6000):           # a stand-in that would take a minute
            if should_stop():
                stopped.set()
                raise InterruptedError("trace cancelled")
            time.sleep(0.01)
        raise AssertionError("the trace was not stopped")

    monkeypatch.setattr(why_panel, "trace", slow_trace)
    feature = win.features["why"]
    assert feature.why()
    qtbot.waitUntil(lambda: feature.panel.progress.value() > 0, timeout=5000)
    win.close()                         # joins the background threads
    assert stopped.is_set()


def test_the_graphs_cell_type_supernodes_sum_their_flows_and_expand_on_a_click(window, qtbot):
    win = window
    _run(win, qtbot)
    att = _why(win, qtbot)
    feature = win.features["why"]
    graph, panel = feature.graph, feature.graph_panel
    win.docks["graph"].show()
    win.docks["graph"].raise_()
    panel.supernodes.setChecked(True)
    cell_types = att.labels("cell_type")
    groups: dict = {}
    for k, neuron in enumerate(graph.neurons):
        groups.setdefault((int(graph.positions[k]), cell_types[int(neuron)]), []).append(k)
    several = {key: m for key, m in groups.items() if len(m) > 1}
    assert several, "the test graph has no cell type with two nodes at one position"
    points = panel.scatter.points()
    assert len(points) == len(groups)
    flows = {round(p.pos().x()): [] for p in points}
    for i, (key, members) in enumerate(panel.items):
        want = sum(float(graph.flows[k]) for k in members)
        if key is not None:
            assert sorted(members.tolist()) == sorted(several[key])
            assert f"flow {want:+.4f}" in panel.item_tip(i) and f"{len(members)} neurons" in \
                panel.item_tip(i)
        flows[round(points[i].pos().x())].append(want)
    # Every kept node's flow is in exactly one drawn item.
    assert sum(sum(v) for v in flows.values()) == pytest.approx(float(np.sum(graph.flows)))
    qtbot.waitUntil(lambda: panel.plot.isVisible() and panel.plot.height() > 120, timeout=3000)
    settle(qtbot, win)              # the plot has its final size: item positions hold
    # Click a supernode where no other item is drawn under the pointer: it expands.
    sizes = [p.size() for p in panel.scatter.points()]
    alone = [i for i, (key, _m) in enumerate(panel.items) if key is not None and all(
        (panel.item_widget_pos(i) - panel.item_widget_pos(j)).manhattanLength()
        > sizes[j] / 2 + 2 for j in range(len(panel.items)) if j != i)]
    assert alone
    key, members = panel.items[alone[0]]
    QTest.mouseClick(panel.plot.viewport(), Qt.MouseButton.LeftButton,
                     pos=panel.item_widget_pos(alone[0]))
    qtbot.waitUntil(lambda: key in panel.expanded, timeout=3000)
    assert len(panel.scatter.points()) == len(groups) - 1 + len(members)
    assert win.state.selected is None


def test_export_movie_in_the_why_dock_writes_the_lag_sweep(window, qtbot, tmp_path):
    """The dock's Export movie… runs the flow movie in the background: one frame per lag,
    red (adds to L) and blue (takes from it) neurons drawn, the first lag first."""
    iio = pytest.importorskip("imageio.v3")
    from flyviz.export import ExportOptions

    win = window
    feature = win.features["why"]
    assert not feature.panel.movie_button.isEnabled()          # nothing traced yet
    _run(win, qtbot)
    att = _why(win, qtbot)
    assert feature.panel.movie_button.isEnabled()
    options = ExportOptions(size=(480, 270), fps=4.0, overlays=False)
    win.state.display.point_size = 10.0
    out = feature.export_movie(tmp_path / "why", options)
    assert out == tmp_path / "why"
    frames = [iio.imread(p)[..., :3].astype(int) for p in sorted(out.glob("*.png"))]
    assert len(frames) == len(att.positions) >= 3
    red = (frames[0][..., 0] > frames[0][..., 2] + 80).sum()
    blue = (frames[0][..., 2] > frames[0][..., 0] + 80).sum()
    assert red > 40 and blue > 40, (red, blue)
    assert np.abs(frames[0] - frames[1]).mean() > 0.05       # lag 1 is its own step
    # The reverse sweep ends where the default one starts.
    feature.panel.movie_reverse.setChecked(True)
    back = feature.export_movie(tmp_path / "back", options)
    last = iio.imread(sorted(back.glob("*.png"))[-1])[..., :3].astype(int)
    assert np.array_equal(last, frames[0])
    assert "saved" in win.statusBar().currentMessage()


def test_the_why_movie_frames_look_like_the_brain_view_at_each_lag(window, qtbot, tmp_path):
    """Frame k of the dock's movie is the brain view at lag k: the same neurons lit, the same
    colours (the flow layer's range and the view's automatic gain at that step)."""
    iio = pytest.importorskip("imageio.v3")
    from flyviz.export import ExportOptions

    win = window
    _run(win, qtbot)
    att = _why(win, qtbot)
    feature = win.features["why"]
    feature.panel.synapses.setChecked(False)        # the movie draws the neurons only
    settle(qtbot, win)
    views = {}
    for lag in (0, 2):
        feature.panel.lag.setValue(lag)
        views[lag] = _drawn(win, qtbot)[..., :3]
    size = (views[0].shape[1], views[0].shape[0])
    out = feature.export_movie(tmp_path / "frames", ExportOptions(size=size, fps=4.0,
                                                                  overlays=False))
    frames = [iio.imread(p)[..., :3] for p in sorted(out.glob("*.png"))]
    assert len(frames) == len(att.positions)
    background = np.round(np.asarray(win.brain.style.background[:3]) * 255).astype(int)
    for lag, view in views.items():
        movie = frames[lag]
        lit_view = np.abs(view.astype(int) - background).max(axis=-1) > 40
        lit_movie = np.abs(movie.astype(int) - background).max(axis=-1) > 40
        assert lit_view.sum() > 200
        iou = (lit_view & lit_movie).sum() / (lit_view | lit_movie).sum()
        difference = np.abs(view.astype(int) - movie.astype(int)).max(axis=-1)
        assert iou > 0.95, (lag, iou)
        assert np.percentile(difference[lit_view | lit_movie], 99) <= 12, lag


def test_the_why_movie_dialog_adds_the_movie_suffix_and_asks_before_replacing_it(
        window, qtbot, tmp_path, monkeypatch):
    """The dock's Export movie… dialog offers movies only (MP4, WebM, GIF), but a name typed
    without a suffix ("why") went to the export as a folder of PNG frames, and the movie it
    then wrote was another file than the one the dialog asked about. The name gets the
    suffix of the format chosen (MP4 unless another is), and the file written is asked
    about: No keeps it byte for byte, Yes replaces it with the movie."""
    from dialog_answers import DialogAnswers

    from flyviz.export import ExportOptions

    out = tmp_path / "saved"          # the window keeps its settings in tmp_path
    out.mkdir()
    win = window
    feature = win.features["why"]
    _run(win, qtbot)
    _why(win, qtbot)
    options = ExportOptions(size=(96, 64), fps=4.0, overlays=False)
    kept = out / "why.mp4"
    kept.write_bytes(b"an earlier movie of the user's")
    user = DialogAnswers(monkeypatch, out / "why", "MP4 (*.mp4)")
    asked = user.asked
    assert feature.export_movie(options=options) is None
    assert len(asked) == 1 and asked[0].startswith("why.mp4 already exists"), asked
    assert kept.read_bytes() == b"an earlier movie of the user's"
    assert sorted(p.name for p in out.iterdir()) == [kept.name]    # no frames folder

    user.replace = True
    assert feature.export_movie(options=options) == kept
    assert len(asked) == 2
    assert kept.read_bytes()[4:8] == b"ftyp"                            # an MP4 now
    assert sorted(p.name for p in out.iterdir()) == [kept.name]

    # The name typed with its suffix: Qt's dialog asked already; nothing asks again.
    user.chosen = out / "why.mp4"
    assert feature.export_movie(options=options) == kept and len(asked) == 2

    # Another format chosen in the dialog: its suffix; a movie's own suffix is kept.
    user.chosen, user.selected_filter = out / "sweep", "GIF (*.gif)"
    gif = feature.export_movie(options=options)
    assert gif == out / "sweep.gif" and gif.read_bytes()[:3] == b"GIF"
    user.chosen, user.selected_filter = out / "sweep.webm", "MP4 (*.mp4)"
    assert feature.export_movie(options=options) == out / "sweep.webm"
    assert len(asked) == 2 and not any(p.is_dir() for p in out.iterdir())
