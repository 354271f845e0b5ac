"""The Circuit dock on the planted-chain model: the curve's points, the slider's circuit lit
and its synapses drawn, the only-the-circuit run, Cancel, bad task files, the exports."""

from __future__ import annotations

import json
import math
import threading

import numpy as np
import pytest
from app_conftest import assert_only_lit, brightness, make_window, screen_positions
from PySide6.QtCore import QPointF, Qt
from PySide6.QtGui import QColor
from qt_barriers import settle
from test_analysis_circuit import planted_entries, planted_model

from flyviz.analysis.circuit_export import neurons_at, only_circuit
from flyviz.app.base import theme
from flyviz.app.circuit.circuit_panel import HIGHLIGHT
from flyviz.app.brain.synapse_lines import synapse_lines
from flyviz.model.engine import Engine
from flyviz.model.explain import explained_value
from flyviz.model.interventions import Silence, from_json, resolve

pytestmark = pytest.mark.gui


@pytest.fixture(scope="module")
def planted(tokenizer_path):
    """The planted-chain model (a chain c0 -> c1 -> c2 -> c3 carries the task)."""
    return planted_model(tokenizer_path)


@pytest.fixture(scope="module")
def task_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("circuit-task") / "names.jsonl"
    path.write_text("\n".join(json.dumps(e) for e in planted_entries()) + "\n", "utf-8")
    return path


@pytest.fixture
def win(qtbot, planted, tmp_path):
    window = make_window(qtbot, planted[0], tmp_path)
    yield window
    window.close()


def _find(win, qtbot, task_file, **settings):
    feature = win.features["circuit"]
    with qtbot.waitSignal(feature.found, timeout=120_000) as found:
        assert feature.find(task_file, **settings), feature.panel.message.text()
    return feature, found.args[0]


def _pixels_near(widget, x: float, y: float, radius: int = 2) -> np.ndarray:
    """RGB of the widget's pixels within ``radius`` of the logical point (x, y)."""
    ratio = widget.devicePixelRatioF()
    image = widget.grab().toImage()
    cx, cy = int(round(x * ratio)), int(round(y * ratio))
    out = []
    for dy in range(-radius, radius + 1):
        for dx in range(-radius, radius + 1):
            c = image.pixelColor(cx + dx, cy + dy)
            out.append((c.red(), c.green(), c.blue()))
    return np.array(out, dtype=np.float64)


def _plot_point(plot, k: int, f: float) -> QPointF:
    """Where the curve plot draws (k, f) (log x), in the plot widget's coordinates."""
    vb = plot.getPlotItem().vb
    return plot.mapFromScene(vb.mapViewToScene(QPointF(math.log10(k), f)))


def test_the_curve_and_the_slider_light_exactly_the_top_k_units(win, qtbot, planted,
                                                                task_file):
    """Pixel facts: every measured point is drawn at (k, f) of the result, the curve's in
    teal and the refinements in amber; the slider visits every measured size and lights
    exactly the top k units, their lone neurons bright and the others dimmed; the circuit's
    synapses are the lines drawn (at the chain's size: the chain's three links)."""
    from flyviz.app._testing import make_frame
    from flyviz.record.recording import Recording

    ck, chain = planted
    n = ck.config.neurons
    win.state.display.smoothing_s = 0.0
    win.state.display.point_size = 4.0
    rec = Recording(n)
    rec.append(make_frame(0, np.ones(n, np.float32)))
    win.session.replace(rec)
    qtbot.waitUntil(lambda: win.display.showing(0), timeout=3000)
    qtbot.waitUntil(lambda: win.display.brain_at is not None and not win.brain.animating,
                    timeout=3000)
    before = brightness(win.brain.render_image())
    feature, result = _find(win, qtbot, task_file)
    assert result.size == len(chain) and set(chain) <= set(result.order[:4].tolist())
    panel = feature.panel
    plot = panel.curve
    win.docks["circuit"].setFloating(True)
    win.docks["circuit"].resize(520, 760)
    qtbot.waitUntil(lambda: plot.width() > 300, timeout=3000)
    settle(qtbot, plot)                 # the plot's view range follows its new size
    for points, colour in ((result.curve, theme.ACCENT), (result.refinement, theme.WARM)):
        want = QColor(colour)
        rgb = np.array([want.red(), want.green(), want.blue()], dtype=np.float64)
        drawn = [p for p in points if p.size > 0]
        assert drawn
        for p in drawn:
            at = _plot_point(plot, p.size, p.faithfulness)
            near = _pixels_near(plot, at.x(), at.y())
            assert np.abs(near - rgb).max(axis=1).min() <= 12, (p.size, p.faithfulness)
    # The slider: every measured size, curve and refinements, in order.
    sizes = sorted({p.size for p in result.curve + result.refinement})
    assert panel.slider.maximum() == len(sizes) - 1
    assert sizes[panel.slider.value()] == result.size
    for index, k in enumerate(sizes):
        panel.slider.setValue(index)
        assert feature.k == k
        mask = win.brain.emphasis
        top = np.sort(result.order[:k])
        assert mask is not None and np.array_equal(np.flatnonzero(mask), top), k
        # The table lists each prompt's numbers at this k.
        point = next(p for p in result.curve + result.refinement if p.size == k)
        assert panel.prompts.rowCount() == len(result.task.prompts)
        assert panel.prompts.item(0, 1).text() == f"{point.prompts[0]:+.4g}"
    # The chain's size: its synapses are exactly the chain's links.
    feature.show_k(result.size)
    links = set(zip(feature.synapses["pre"].tolist(), feature.synapses["post"].tolist()))
    assert links == {(chain[0], chain[1]), (chain[1], chain[2]), (chain[2], chain[3])}
    # A larger circuit: its lone neurons lit, the rest dimmed.
    k = next(s for s in sizes if s >= 40)
    feature.show_k(k)
    assert win.state.highlights.shown == HIGHLIGHT
    assert_only_lit(win, before, result.order[:k])
    # Its lines: brighter along its strongest long synapse than with the lines cleared.
    edges = feature.synapses
    assert edges is not None and len(edges["pre"]) > 3
    inside = set(result.order[:k].tolist())
    assert set(edges["pre"].tolist()) <= inside and set(edges["post"].tolist()) <= inside
    qtbot.waitUntil(lambda: not win.brain.animating, timeout=3000)
    lit = brightness(win.brain.render_image())
    xy = screen_positions(win)
    lengths = np.hypot(*(xy[edges["pre"]] - xy[edges["post"]]).T)
    long_ones = [j for j in np.argsort(-np.abs(edges["weight"])) if lengths[j] > 60]
    assert long_ones
    j = long_ones[0]
    a, b = xy[edges["pre"][j]], xy[edges["post"][j]]
    # The lines are the state's: cleared from a script they go, set again they come back.
    assert win.state.shown_lines == HIGHLIGHT and synapse_lines(win.brain).shown == HIGHLIGHT
    points, colours = win.state.lines(HIGHLIGHT)
    win.state.set_lines(HIGHLIGHT, None)
    assert synapse_lines(win.brain).shown is None
    dark = brightness(win.brain.render_image())
    gains = [lit[int(round(p[1])), int(round(p[0]))] - dark[int(round(p[1])), int(round(p[0]))]
             for p in (a + (b - a) * s for s in (0.3, 0.4, 0.5, 0.6, 0.7))]
    assert np.median(gains) > 40, gains
    win.state.set_lines(HIGHLIGHT, points, colours)
    np.testing.assert_array_equal(brightness(win.brain.render_image()), lit)


def test_the_slider_and_its_judgement_are_whole_in_the_docked_column(win, qtbot, task_file):
    """The Circuit dock in its place in the left column at 1280×800, at the whole model's
    size: the slider is a slider (it was squeezed to a dot by its label beside it) and the
    label's judgement is shown whole (it ran past the dock's edge)."""
    from PySide6.QtCore import QSize

    win.resize(1280, 800)
    qtbot.waitUntil(lambda: win.size() == QSize(1280, 800), timeout=3000)
    feature, result = _find(win, qtbot, task_file)
    feature.dock.raise_()
    feature.show_k(result.units.count)
    panel = feature.panel
    qtbot.waitUntil(lambda: panel.k_label.isVisible() and panel.k_label.text() != "",
                    timeout=3000)
    settle(qtbot, win)
    label, slider = panel.k_label, panel.slider
    assert label.text().startswith(f"k = {result.units.count:,} ")
    assert slider.width() >= 100, slider.width()
    viewport = feature.dock.widget()
    right = label.mapTo(viewport, label.rect().topRight()).x()
    assert right <= viewport.width(), (right, viewport.width())
    lines = label.fontMetrics().boundingRect(0, 0, label.contentsRect().width(), 10_000,
                                             Qt.TextFlag.TextWordWrap, label.text())
    assert label.contentsRect().height() >= lines.height(), (label.height(), lines.height())


def _metric_of_run(ck, recording, prompt) -> float:
    """The task metric of ``prompt`` from the recorded state at its last position."""
    engine = Engine(ck, 1, kernel="scipy")
    try:
        frames = {int(recording[i].position): i for i in range(len(recording))}
        x = recording.state(frames[len(prompt.ids) - 1]).astype(np.float32)
        return explained_value(engine.readout(x), prompt.target, prompt.versus)
    finally:
        engine.close()


@pytest.mark.parametrize("ablation", ["zero", "mean"])
def test_run_with_only_the_circuit_is_the_measured_run(win, qtbot, planted, task_file,
                                                       ablation):
    """One click puts the only-the-circuit set in the Interventions list and runs the
    selected prompt beside the untouched model; the intervened run's metric is the
    library's measured m(C) of that prompt, the untouched one's m(M)."""
    ck, _chain = planted
    win.state.run.temperature = 0.0
    win.state.run.max_new_tokens = 2
    win.state.run.speed_cap = 0
    win.state.run.states_dtype = "float32"
    feature, result = _find(win, qtbot, task_file, ablation=ablation)
    k = result.size
    row = 1
    feature.panel.prompts.selectRow(row)
    with qtbot.waitSignal(win.run_ended, timeout=60_000) as ended:
        feature.panel.run_button.click()
    assert ended.args[0] == "done", win.last_error
    items = only_circuit(result, ck, k)
    assert win.interventions.panel.enabled() == items
    if ablation == "zero":
        outside = np.setdiff1d(np.arange(ck.config.neurons), result.order[:k])
        assert items == [Silence(tuple(int(i) for i in outside))]
    rec = win.session.recording
    assert rec.baseline is not None
    prompt = result.task.prompts[row]
    point = next(p for p in result.curve + result.refinement if p.size == k)
    assert _metric_of_run(ck, rec, prompt) == pytest.approx(point.prompts[row], rel=1e-4,
                                                            abs=1e-5)
    assert _metric_of_run(ck, rec.baseline, prompt) == pytest.approx(
        result.curve[-1].prompts[row], rel=1e-4, abs=1e-5)
    # The dock's per-prompt faithfulness is that prompt's (m(C) - m(∅)) / (m(M) - m(∅)).
    f = result.prompt_faithfulness(point)[row]
    empty, full = result.curve[0].prompts[row], result.curve[-1].prompts[row]
    assert f == pytest.approx((point.prompts[row] - empty) / (full - empty))
    assert feature.panel.prompts.item(row, 2).text() == f"{f:.3f}"


def test_cancel_stops_the_search(win, qtbot, task_file, monkeypatch):
    """Cancel while the scores run: the thread stops at its next progress report (one chunk
    of eight ran), no circuit is shown, and the dock says so."""
    from flyviz.analysis import circuit

    gate, entered, calls = threading.Event(), threading.Event(), []
    real = circuit.chunk_partial

    def held(*args, **kwargs):
        calls.append(1)
        entered.set()
        gate.wait(10)
        return real(*args, **kwargs)

    monkeypatch.setattr(circuit, "chunk_partial", held)
    feature = win.features["circuit"]
    assert feature.find(task_file)
    assert feature.panel.cancel_button.isVisible()
    assert entered.wait(30)
    cancelled = []
    feature.cancelled.connect(lambda: cancelled.append(1))
    qtbot.mouseClick(feature.panel.cancel_button, Qt.MouseButton.LeftButton)
    gate.set()
    qtbot.waitUntil(lambda: not feature.job.running.is_set(), timeout=30_000)
    qtbot.waitUntil(lambda: bool(cancelled), timeout=5000)
    assert len(calls) == 1
    assert feature.result is None and feature.panel.slider.maximum() == 0
    assert feature.panel.message.text() == "circuit search cancelled"
    assert not feature.panel.cancel_button.isVisible() and feature.panel.find_button.isEnabled()


@pytest.mark.parametrize("text, settings, says", [
    (None, {}, "does not exist"),
    ('{"prompt": " cat cat", "target": " lily"}\n{"prompt": " dog"', {}, "line 2 is not JSON"),
    ('{"target": " lily"}', {}, "line 1 has no \"prompt\""),
    ('{"prompt": " cat", "target": " lily tom"}', {}, "is 2 tokens"),
    ("\n\n", {}, "holds no prompt"),
    ('{"prompt": " cat", "target": " lily"}', {"tolerance": 1.5},
     "tolerance 1.5 must lie in (0, 1)"),
    ('{"prompt": " cat", "target": " lily"}', {"ablation": "resample", "units": "edges"},
     "with edges use mean or zero"),
    ('{"prompt": " cat", "target": " lily"}', {"units": "atoms"}, "units 'atoms'"),
])
def test_bad_task_files_are_one_line_in_the_dock(win, tmp_path, text, settings, says):
    path = tmp_path / "task.jsonl"
    if text is not None:
        path.write_text(text, "utf-8")
    feature = win.features["circuit"]
    assert not feature.find(path, **settings)
    message = feature.panel.message.text()
    assert says in message and "\n" not in message and "--" not in message
    assert not feature.busy and feature.result is None and feature.panel.find_button.isEnabled()


def test_a_failure_found_in_the_background_is_one_line(win, qtbot, task_file, monkeypatch):
    """What only the runs find (here: the ablation does not move the metric, m(M) == m(∅))
    comes back as one line in the dock, and no circuit is shown."""
    from flyviz.analysis import circuit

    real = circuit.check_explainable
    monkeypatch.setattr(circuit, "check_explainable",
                        lambda full, empty, task, ablation: real(full, full, task, ablation))
    feature = win.features["circuit"]
    with qtbot.waitSignal(feature.job.failed, timeout=60_000):
        assert feature.find(task_file)
    message = feature.panel.message.text()
    assert message.startswith("nothing to explain") and "\n" not in message
    assert feature.result is None and feature.panel.find_button.isEnabled()


def test_the_exports_load_as_circuit_tracer_json_and_flyviz_interventions(
        win, qtbot, planted, task_file, tmp_path):
    ck, chain = planted
    feature, result = _find(win, qtbot, task_file)
    graph_path = feature.export_graph(tmp_path / "graph.json")
    graph = json.loads(graph_path.read_text("utf-8"))
    assert set(graph) >= {"metadata", "qParams", "nodes", "links"}
    meta = graph["metadata"]
    assert {"slug", "scan", "prompt_tokens", "prompt", "schema_version"} <= set(meta)
    assert meta["prompt"].strip() == planted_entries()[0]["prompt"].strip()
    nodes = {node["node_id"]: node for node in graph["nodes"]}
    for node in graph["nodes"]:
        assert {"node_id", "feature", "layer", "ctx_idx", "feature_type", "jsNodeId"} <= set(node)
    neurons = [n for n in graph["nodes"] if n["feature_type"] == "cross layer transcoder"]
    assert sorted(n["feature"] for n in neurons) == sorted(chain)
    assert sum(n["feature_type"] == "logit" for n in graph["nodes"]) == 1
    # The chain's layers follow its links from the input neuron c0.
    layer = {n["feature"]: int(n["layer"]) for n in neurons}
    assert [layer[i] for i in chain] == [1, 2, 3, 4]
    for link in graph["links"]:
        assert link["source"] in nodes and link["target"] in nodes
        assert isinstance(link["weight"], float)
    between = {(nodes[a["source"]]["feature"], nodes[a["target"]]["feature"])
               for a in graph["links"] if nodes[a["target"]]["feature_type"] != "logit"}
    assert between == {(chain[0], chain[1]), (chain[1], chain[2]), (chain[2], chain[3])}
    # Cell-type supernodes: each holds that type's circuit neurons (types with two or more).
    types = np.asarray(ck.anatomy.cell_type)
    supernodes = graph["qParams"]["supernodes"]
    for name, *members in supernodes:
        assert len(members) >= 2
        assert {types[nodes[m]["feature"]] for m in members} == {name}
    counts = {str(t): int(c) for t, c in zip(*np.unique(types[chain], return_counts=True))}
    assert sorted(s[0] for s in supernodes) == sorted(t for t, c in counts.items() if c > 1)
    assert graph["flyviz"]["faithfulness"] == pytest.approx(result.faithfulness)
    assert graph["flyviz"]["judged"] == "faithful" and graph["flyviz"]["faithful_circuit"]
    # The interventions file: flyviz's JSON form, read back by its reader, the same set.
    path = feature.export_interventions(tmp_path / "interventions.json")
    items = from_json(json.loads(path.read_text("utf-8")))
    assert list(items) == feature.only_circuit() == only_circuit(result, ck, result.size)
    # Mean ablation: one Clamp per distinct mean, together every neuron outside the circuit.
    touched = np.concatenate([i.indices for i in resolve(ck, items).post_state])
    assert touched.size == np.unique(touched).size
    assert np.array_equal(np.setdiff1d(np.arange(ck.config.neurons), touched),
                          neurons_at(result, ck, result.size))


def test_edge_circuits_run_alone_as_cuts(win, qtbot, planted, task_file):
    """An edge circuit's only-the-circuit set cuts every other synapse: the single-stream
    engine with those cuts gives the library's measured m(C) over the whole task."""
    ck, chain = planted
    feature, result = _find(win, qtbot, task_file, units="edges", ablation="zero")
    assert result.size == 3
    links = set(zip(feature.synapses["pre"].tolist(), feature.synapses["post"].tolist()))
    assert links == {(chain[0], chain[1]), (chain[1], chain[2]), (chain[2], chain[3])}
    items = feature.only_circuit()
    engine = Engine(ck, 1, kernel="scipy", interventions=resolve(ck, items))
    total = 0.0
    for p in result.task.prompts:
        engine.reset()
        for t in p.ids:
            logits = engine.step(t)
        total += explained_value(logits, p.target, p.versus)
    engine.close()
    point = next(p for p in result.curve + result.refinement if p.size == result.size)
    assert total / len(result.task.prompts) == pytest.approx(point.metric, rel=1e-4, abs=1e-5)


def test_exporting_as_a_name_without_json_writes_name_json_and_asks_before_replacing_it(
        win, qtbot, task_file, tmp_path, monkeypatch):
    """Export graph… and Export interventions… offer JSON files only, but a name typed
    without ".json" ("circuit") was written as it stood: a file no JSON filter shows. It is
    written as circuit.json, as the app's other save dialogs add their suffix, and since
    Qt's own question was about "circuit", an existing circuit.json is asked about: No
    keeps it byte for byte."""
    from dialog_answers import DialogAnswers

    out = tmp_path / "saved"          # the window keeps its settings in tmp_path
    out.mkdir()
    feature, _ = _find(win, qtbot, task_file)
    user = DialogAnswers(monkeypatch, out / "circuit", "JSON (*.json)")
    asked = user.asked
    kept = out / "circuit.json"
    for export in (feature.export_interventions, feature.export_graph):
        kept.write_bytes(b"the user's own notes")
        assert export() is None
        assert asked[-1].startswith("circuit.json already exists"), asked
        assert kept.read_bytes() == b"the user's own notes"
        assert sorted(p.name for p in out.iterdir()) == [kept.name]
    user.replace = True
    assert feature.export_interventions() == kept and len(asked) == 3
    assert list(from_json(json.loads(kept.read_text("utf-8")))) == feature.only_circuit()
    assert feature.export_graph() == kept and len(asked) == 4
    assert "nodes" in json.loads(kept.read_text("utf-8"))
    # The name typed with its suffix: Qt's dialog asked already; nothing asks again.
    user.chosen, user.selected_filter = kept, ""
    assert feature.export_interventions() == kept and len(asked) == 4
