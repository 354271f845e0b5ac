"""The docks are views of the viewer state: a script that sets ``state.docks`` (or the
state's picks, intervened neurons, selection, open atlas, text shading or synapse lines)
reproduces the view that clicking makes (the widgets, and the picture or the fields the
view draws).

Each test clicks first and keeps what the dock shows, clicks back, then sets the state's
field from a script and compares; it also checks that the click wrote the state.
"""

from __future__ import annotations

import numpy as np
import pytest
from app_conftest import app_checkpoint, plain_display, window  # noqa: F401
from PySide6.QtCore import Qt
from qt_barriers import settle

from flyviz.app.language import patching_panel
from flyviz.app.population import population_panel
from flyviz.app._testing import make_app_lesion_map, make_frame
from flyviz.record.recording import Recording
from flyviz.kinds.language import COMPARE_VIEWS, PATCHING_MEASURES, LanguageDockSettings
from flyviz.viewer.settings import ViewerError

pytestmark = pytest.mark.gui

PROMPT = "Once upon a time there was"


def _layer_values(win) -> np.ndarray:
    """The shown colour layer's values at the shown token (what the brain is coloured by)."""
    state = win.state
    return np.array(state.layer.values(state.recording, state.index), copy=True)


def test_the_dock_settings_validate_and_match_the_docks_menus():
    """The state's lists of choices are the docks' (one list each), and bad values are refused."""
    assert PATCHING_MEASURES == tuple(key for key, _c, _t in patching_panel.MEASURES)
    assert COMPARE_VIEWS == tuple(key for key, _t in population_panel.COMPARE_VIEWS)
    docks = LanguageDockSettings()
    for field, bad in (("patching_measure", "p"), ("population_view", "both"),
                       ("why_lag", -1), ("why_lag", 1.5), ("prompt", 3)):
        with pytest.raises(ViewerError):
            setattr(docks, field, bad)
    assert docks == LanguageDockSettings()          # nothing changed


def test_the_lesion_log_scale_is_the_states(window, qtbot, app_checkpoint, tmp_path):  # noqa: F811
    win = window
    plain_display(win)
    rec = Recording(app_checkpoint.config.neurons)
    rec.append(make_frame(0, np.ones(app_checkpoint.config.neurons, np.float32)))
    win.session.replace(rec)
    win.lesions.open(make_app_lesion_map(app_checkpoint, tmp_path), importance=True)
    qtbot.waitUntil(lambda: win.lesions.lesions is not None or bool(win.last_error),
                    timeout=10_000)
    assert win.colour_by.current == "importance", win.last_error
    box = win.lesions.panel.log_scale
    assert box.isChecked() and win.state.docks.lesion_log_scale

    def shown():
        return (box.isChecked(), win.brain.value_range, win.brain.colorbar_caption.text(),
                _layer_values(win), win.brain.render_image())

    log_view = shown()
    box.setChecked(False)                                       # the click
    assert win.state.docks.lesion_log_scale is False
    clicked = shown()
    assert clicked[1] != log_view[1] and "log10" not in clicked[2]
    box.setChecked(True)
    win.state.docks.lesion_log_scale = False                    # the script
    scripted = shown()
    assert scripted[:3] == clicked[:3]
    np.testing.assert_array_equal(scripted[3], clicked[3])
    assert np.abs(scripted[4].astype(int) - clicked[4]).max() <= 1
    win.state.docks.lesion_log_scale = True
    assert box.isChecked() and shown()[1:3] == log_view[1:3]


def _trace(win, qtbot):
    win.state.display.smoothing_s = 0.0
    win.state.run.max_new_tokens = 4
    win.state.run.speed_cap = 0
    win.state.run.temperature = 0.0
    with qtbot.waitSignal(win.run_ended, timeout=10_000):
        assert win.run_prompt(PROMPT)
    qtbot.waitUntil(lambda: win.state.index == len(win.state.recording) - 1, timeout=3000)
    feature = win.features["why"]
    with qtbot.waitSignal(feature.traced, timeout=20_000) as traced:
        assert feature.why()
    return feature, traced.args[0]


def test_whys_lag_synapses_and_movie_direction_are_the_states(window, qtbot):
    win = window
    feature, att = _trace(win, qtbot)
    panel, docks = feature.panel, win.state.docks
    steps = len(att.positions)
    assert steps >= 3 and docks.why_lag == 0

    def shown():
        edges = feature.synapse_edges
        return (panel.lag.value(), feature.lag, panel.lag_label.text(), panel.tops.text(),
                _layer_values(win),
                None if edges is None else {k: v.copy() for k, v in edges.items()})

    def same(a, b):
        assert a[:4] == b[:4]
        np.testing.assert_array_equal(a[4], b[4])
        assert (a[5] is None) == (b[5] is None)
        for key in a[5] or {}:
            np.testing.assert_array_equal(a[5][key], b[5][key])

    at_zero = shown()
    panel.lag.setValue(2)                                       # the click
    assert docks.why_lag == 2
    clicked = shown()
    assert clicked[1] == 2 and not np.array_equal(clicked[4], at_zero[4])
    panel.lag.setValue(0)
    same(shown(), at_zero)
    docks.why_lag = 2                                           # the script
    same(shown(), clicked)
    docks.why_lag = 10 * steps              # beyond the trace's window: its last step
    assert docks.why_lag == panel.lag.value() == feature.lag == steps - 1

    docks.why_lag = 0
    assert feature.synapse_edges is not None
    panel.synapses.setChecked(False)                            # the click
    assert docks.why_synapses is False and feature.synapse_edges is None
    clicked = shown()
    panel.synapses.setChecked(True)
    assert feature.synapse_edges is not None
    docks.why_synapses = False                                  # the script
    same(shown(), clicked)
    assert not panel.synapses.isChecked()

    panel.movie_reverse.setChecked(True)
    assert docks.why_first_step_first is True
    panel.movie_reverse.setChecked(False)
    docks.why_first_step_first = True
    assert panel.movie_reverse.isChecked()


def test_the_patching_measure_is_the_states(window, qtbot):
    win = window
    feature = win.features["patching"]
    with qtbot.waitSignal(feature.traced, timeout=60_000):
        assert feature.run_trace("Once upon a time there was a girl named Lily",
                                 "Once upon a time there was a boy named Tom", " time",
                                 "superclass", versus=""), feature.panel.message.text()
    panel, docks = feature.panel, win.state.docks
    # The logit difference by default, the measure the documentation quotes (p(answer)
    # read a clean run's 0.47 below the corrupted run's 0.53 as "104 %").
    assert docks.patching_measure == "logit_diff" == panel.measure_key
    assert panel.measure.currentText() == "logit difference"

    def shown():
        return (panel.measure_key, panel.measure.currentText(), panel.ends.text(),
                panel.heatmap.image.image.copy())

    first = shown()
    panel.measure.setCurrentIndex(panel.measure.findData("p_answer"))       # the click
    assert docks.patching_measure == "p_answer"
    clicked = shown()
    assert clicked[2] != first[2] and "p(answer)" in clicked[2]
    panel.measure.setCurrentIndex(panel.measure.findData("logit_diff"))
    assert shown()[:3] == first[:3]
    docks.patching_measure = "p_answer"                                     # the script
    scripted = shown()
    assert scripted[:3] == clicked[:3]
    np.testing.assert_array_equal(scripted[3], clicked[3])


def _random_recording(neurons: int, tokens: int, seed: int) -> Recording:
    rng = np.random.default_rng(seed)
    rec = Recording(neurons)
    for i, state in enumerate(rng.normal(0.0, 0.3, (tokens, neurons)).astype(np.float32)):
        rec.append(make_frame(i, state, token_text=f"w{i}"))
    return rec


def test_the_population_view_is_the_states(window, qtbot, app_checkpoint):  # noqa: F811
    win = window
    n = app_checkpoint.config.neurons
    rec = _random_recording(n, 6, 1)
    rec.baseline = _random_recording(n, 6, 2)
    feature = win.features["population"]
    feature.raster_dock.show()
    win.session.replace(rec)
    feature.refresh()
    raster, docks = feature.raster, win.state.docks
    qtbot.waitUntil(lambda: raster.columns == len(rec), timeout=3000)
    assert raster.view_box.isEnabled() and docks.population_view == "intervened"
    intervened = raster.image.image.copy()
    raster.view_box.setCurrentIndex(raster.view_box.findData("delta"))      # the click
    assert docks.population_view == "delta" == raster.view
    clicked = raster.image.image.copy()
    assert not np.array_equal(clicked, intervened)
    raster.view_box.setCurrentIndex(raster.view_box.findData("intervened"))
    np.testing.assert_array_equal(raster.image.image, intervened)
    docks.population_view = "delta"                                         # the script
    assert raster.view_box.currentData() == "delta" == raster.view
    np.testing.assert_array_equal(raster.image.image, clicked)
    # A single run shows itself, and the menu goes back to the intervened run: so does the state.
    win.session.replace(_random_recording(n, 3, 4))
    feature.refresh()
    assert not raster.view_box.isEnabled() and raster.view_box.currentText() == "This run"
    assert docks.population_view == "intervened"


def test_the_prompt_is_the_states_and_a_run_starts_on_it(window, qtbot):
    win = window
    win.state.run.max_new_tokens = 2
    win.state.run.speed_cap = 0
    qtbot.keyClicks(win.prompt_bar.line_edit, "tom and his dog")            # the typing
    assert win.state.docks.prompt == "tom and his dog"
    win.state.docks.prompt = PROMPT                                         # the script
    assert win.prompt_bar.text() == PROMPT == win.prompt_bar.line_edit.text()
    started: list[str] = []
    win.runs.run_started.connect(started.append)
    with qtbot.waitSignal(win.run_ended, timeout=10_000):
        assert win.run_prompt()                     # no text given: the state's prompt
    assert started == [PROMPT] and win.session.recording.metadata["prompt"] == PROMPT
    with qtbot.waitSignal(win.run_ended, timeout=10_000):   # Enter in the box: the same
        qtbot.keyClick(win.prompt_bar.line_edit, Qt.Key.Key_Return)
    assert started == [PROMPT, PROMPT]


def test_runs_start_from_the_states_interventions_and_comparison_without_the_dock(window, qtbot):
    """The state is the one copy runs start from: with the Interventions dock deaf to the
    state, interventions and a comparison set on the state still reach the run."""
    from flyviz.model.interventions import Silence, from_json

    win = window
    feature = win.interventions
    state = win.state
    state.events.interventions.disconnect(feature._on_state_interventions)
    state.events.comparing.disconnect(feature._on_state_comparing)
    win.state.run.max_new_tokens = 2
    win.state.run.speed_cap = 0
    superclass = win.controls.superclass.itemData(1)
    silence = Silence(f"superclass:{superclass}")
    state.interventions = [silence]
    with qtbot.waitSignal(win.run_ended, timeout=10_000):
        assert win.run_prompt(PROMPT)
    rec = win.session.recording
    assert feature.panel.enabled() == [] and not feature.panel.compare_box.isChecked()
    assert list(from_json(rec.metadata["interventions"])) == [silence]
    assert rec.baseline is None
    state.set_comparing(True, "free")
    with qtbot.waitSignal(win.run_ended, timeout=20_000):
        assert win.run_prompt(PROMPT)
    rec = win.session.recording
    assert rec.baseline is not None and rec.metadata["comparison"]["mode"] == "free"
    assert list(from_json(rec.metadata["interventions"])) == [silence]
    # The silenced neurons are quiet in the intervened run, not in the untouched one.
    silenced = np.unique(np.concatenate([np.asarray(p.indices) for p in
                                         win.runs.interventions.post_state]))
    assert silenced.size and np.abs(rec.states()[1:, silenced]).max() == 0
    assert np.abs(rec.baseline.states()[1:, silenced]).max() > 0
    state.interventions = ()
    state.set_comparing(False)
    with qtbot.waitSignal(win.run_ended, timeout=10_000):
        assert win.run_prompt(PROMPT)
    assert win.session.recording.baseline is None
    assert not win.session.recording.metadata.get("interventions")


def test_the_next_runs_interventions_are_the_states(window, qtbot):
    """Interventions for the next run only (what the lesion map's *Compare* sets up without
    the Interventions dock) set from a script show under the lesion table, apply to the next
    run and are gone after it."""
    from flyviz.model.interventions import Silence, from_json

    win = window
    win.state.run.max_new_tokens = 2
    win.state.run.speed_cap = 0
    panel = win.lesions.panel
    superclass = win.controls.superclass.itemData(1)
    silence = Silence(f"superclass:{superclass}")
    win.state.set_next_interventions([silence], f"{superclass} silenced")
    assert win.runs.next_interventions == (silence,)
    assert panel.next_label.text() == f"Next run: {superclass} silenced. Press Run."
    with qtbot.waitSignal(win.run_ended, timeout=10_000):
        assert win.run_prompt(PROMPT)
    assert list(from_json(win.session.recording.metadata["interventions"])) == [silence]
    assert win.state.next_interventions == () and win.state.next_description == ""
    assert not panel.next_label.isVisible() and win.state.interventions == ()
    with qtbot.waitSignal(win.run_ended, timeout=10_000):    # untouched again
        assert win.run_prompt(PROMPT)
    assert not win.session.recording.metadata.get("interventions")
    win.state.set_next_interventions([silence], "again")
    qtbot.mouseClick(panel.clear_next_button, Qt.MouseButton.LeftButton)     # the click
    assert win.state.next_interventions == () and not panel.next_label.isVisible()


def _image(widget) -> np.ndarray:
    """What ``widget`` paints (RGBA)."""
    from PySide6.QtGui import QImage

    image = widget.grab().toImage().convertToFormat(QImage.Format.Format_RGBA8888)
    w, h = image.width(), image.height()
    rgba = np.frombuffer(image.constBits(), np.uint8, count=image.bytesPerLine() * h)
    return rgba.reshape(h, image.bytesPerLine())[:, :4 * w].reshape(h, w, 4).copy()


def test_whys_text_shading_and_synapse_lines_are_the_states(window, qtbot):
    """*Why this token?* (the Text dock's menu) shades the text and draws synapses over the
    brain through the state: the same fields set from a script paint the same."""
    from flyviz.app.brain.synapse_lines import synapse_lines
    from flyviz.app.language.why_panel import LINES

    win = window
    win.state.display.smoothing_s = 0.0
    win.state.run.max_new_tokens = 4
    win.state.run.speed_cap = 0
    win.state.run.temperature = 0.0
    with qtbot.waitSignal(win.run_ended, timeout=10_000):
        assert win.run_prompt(PROMPT)
    state, text, feature = win.state, win.text_panel, win.features["why"]
    last = len(state.recording) - 1
    qtbot.waitUntil(lambda: state.index == last, timeout=3000)
    with qtbot.waitSignal(feature.traced, timeout=20_000) as traced:
        text.why_requested.emit(last)                               # the click
    att = traced.args[0]
    assert state.token_flows == tuple(float(f) for f in att.token_flows)
    assert state.shown_lines == LINES and state.lines(LINES) is not None
    overlay = synapse_lines(win.brain)

    def shown():
        # Each picture of a settled window: the trace's arrival reshapes the docks (the
        # Next token dock 236 -> 200 px tall, the Text dock's picture 192 -> 156 px), and
        # pictures of a layout still queued differ for that alone, not for the shading.
        settle(qtbot, win)
        pieces = range(len(text.pieces()))
        return ([text.piece_flow(k) for k in pieces],
                [None if (c := text.piece_shade(k)) is None else c.name() for k in pieces],
                overlay.shown, bool(overlay.visual is not None and overlay.visual.visible),
                None if overlay.visual is None else np.array(overlay.visual.pos, copy=True),
                _image(text))

    clicked = shown()
    assert any(f is not None for f in clicked[0]) and clicked[2] == LINES and clicked[3]
    points, colours = state.lines(LINES)
    state.token_flows = None
    state.set_lines(LINES, None)
    cleared = shown()
    assert all(f is None for f in cleared[0]) and cleared[2] is None and not cleared[3]
    assert not np.array_equal(cleared[5], clicked[5])               # the shading was seen
    state.token_flows = att.token_flows                             # the script
    state.set_lines(LINES, points, colours)
    scripted = shown()
    assert scripted[:4] == clicked[:4]
    np.testing.assert_array_equal(scripted[4], clicked[4])
    np.testing.assert_array_equal(scripted[5], clicked[5])
    with pytest.raises(ViewerError, match="RGBA colour per point"):
        state.set_lines(LINES, points, colours[:1])
    assert state.lines(LINES) is not None                           # a bad call changes nothing
    # A neuron clicked in the Graph dock is the state's selection (the Neuron dock shows it).
    neuron = int(att.top_neurons(att.position, 1)[0])
    feature.graph_panel.neuron_clicked.emit(neuron)
    assert state.selected == neuron == win.inspector.neuron


def test_picks_and_intervened_rings_are_the_states(window, qtbot):
    """Clicking and Shift+clicking neurons in the brain picks them in the state; the rings
    and the Interventions dock show the state's picks and the neurons its interventions
    touch, so setting those from a script shows what clicking shows."""
    from flyviz.model.interventions import Silence

    win = window
    state, feature, marks = win.state, win.interventions, win.picking.marks
    a, b = [int(i) for i in np.flatnonzero(win.brain.visible)[:2]]

    def shown():
        return (marks.shown("picked").tolist(), feature.pick.neurons.tolist(),
                feature.panel.pick_button.text(), marks.shown("intervened").tolist())

    empty = shown()
    win.brain.pick_clicked.emit(a, False)                           # the clicks
    win.brain.pick_clicked.emit(b, True)
    assert state.picked.tolist() == sorted([a, b])
    clicked = shown()
    assert clicked[0] == sorted([a, b]) and clicked[2] == "Pick (2)"
    win.brain.pick_clicked.emit(-1, False)                          # a click on nothing
    assert shown() == empty and state.picked.size == 0
    state.picked = [b, a]                                           # the script
    assert shown() == clicked
    win.picking.lasso.picked.emit([a], False)                       # an outline around one
    assert state.picked.tolist() == [a] and shown()[0] == [a]

    superclass = win.controls.superclass.itemData(1)
    feature.panel.set_interventions([Silence(f"superclass:{superclass}")])   # the dock
    touched = state.intervened
    assert touched.size and shown()[3] == [i for i in touched.tolist() if win.brain.visible[i]]
    ringed = shown()
    feature.panel.set_interventions([])
    assert state.intervened.size == 0 and shown()[3] == []
    state.intervened = touched                                      # the script
    assert shown() == ringed
    with pytest.raises(ViewerError, match="out of range"):
        state.intervened = [state.neurons]
    assert shown() == ringed


def test_the_neuron_dock_is_the_states(window, qtbot):
    """A neuron clicked in the brain is the state's selection; the Neuron dock describes
    the state's selected neuron, so selecting from a script shows the same."""
    win = window
    state, inspector = win.state, win.inspector
    neuron = int(np.flatnonzero(win.brain.visible)[3])

    def shown():
        return (inspector.neuron, {key: label.text() for key, label in inspector.fields.items()},
                inspector.inputs_table.rowCount(), inspector.outputs_table.rowCount())

    nothing = shown()
    win.brain.neuron_clicked.emit(neuron)                           # the click
    assert state.selected == neuron
    clicked = shown()
    assert clicked[0] == neuron and clicked != nothing
    win.brain.neuron_clicked.emit(-1)                               # a click on nothing
    assert state.selected is None and shown() == nothing
    state.selected = neuron                                         # the script
    assert shown() == clicked
    assert not state.select(state.neurons) and state.selected == neuron     # not a neuron
    assert state.select(None) and shown() == nothing


def test_the_atlas_card_is_the_states(window, qtbot, app_checkpoint, tmp_path):  # noqa: F811
    """Opening an atlas (File → Open atlas) puts it in the state; the Neuron dock's card
    shows the state's atlas, so a script that sets it shows the same card; a token clicked
    on the card is looked up in the Atlas dock."""
    from flyviz.app._testing import make_app_atlas

    win = window
    path = make_app_atlas(app_checkpoint, tmp_path / "atlas", stories=20)
    win.atlas.open(path)                                            # the click
    qtbot.waitUntil(lambda: win.atlas.atlas is not None or bool(win.last_error), timeout=10_000)
    atlas = win.state.atlas
    assert atlas is not None and atlas is win.atlas.atlas
    neuron = next(i for i in range(win.state.neurons) if len(atlas.card(i).top_contexts))
    win.state.selected = neuron
    card = win.inspector.atlas_card
    qtbot.waitUntil(lambda: card.card is not None and card.card.neuron == neuron, timeout=5000)

    def shown():
        return (card.isVisible(), card.card.neuron, card.summary.text(), card.contexts.text())

    clicked = shown()
    win.state.atlas = None
    assert card.card is None and not card.isVisible()
    win.state.atlas = atlas                                         # the script
    qtbot.waitUntil(lambda: card.card is not None and card.card.neuron == neuron, timeout=5000)
    assert shown() == clicked
    token = card.card.driving_tokens[0].token_id
    card.token_requested.emit(token)                                # a token on the card
    assert win.atlas.panel.search.text() == f"id:{token}"
    other = (neuron + 1) % win.state.neurons
    win.atlas.panel.neuron_requested.emit(other)                    # a neuron the dock lists
    assert win.state.selected == other == win.inspector.neuron


def test_the_window_is_a_host_of_no_widget_but_itself(window):
    """The window has every member :class:`~flyviz.app.base.host.WindowHost` names (at most ten:
    tests/test_architecture.py), and none of them is one of its widgets: a feature gets
    the state, the services and the window only as the parent of its dialogs."""
    import ast
    import inspect

    from PySide6.QtWidgets import QWidget

    from flyviz.app.base import host

    tree = ast.parse(inspect.getsource(host))
    protocol = next(node for node in tree.body
                    if isinstance(node, ast.ClassDef) and node.name == "WindowHost")
    names = [node.target.id if isinstance(node, ast.AnnAssign) else node.name
             for node in protocol.body if isinstance(node, (ast.AnnAssign, ast.FunctionDef))]
    assert 0 < len(names) <= 10 and "state" in names
    for name in names:
        value = getattr(window, name)
        if name == "widget":
            assert value() is window
        else:
            assert not isinstance(value, QWidget), name
    assert window.models.checkpoint is window.checkpoint is not None
