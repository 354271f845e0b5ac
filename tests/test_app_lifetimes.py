"""What each feature leaves in the window after a new run, Reset and loading a model.

One test per feature (interventions, compare, Why?, patching, circuit, atlas, lesion map,
estimate, screen): after the feature's action, the state's part says what each event does
to it (:mod:`flyviz.viewer.parts`), and the state and the brain's pixels follow. The pixel
facts look at one lit frame shown again after each event (without an event of its own):
a part that was cleared leaves the brain exactly as it looked before the feature acted; a
part that was kept still changes it.
"""

from __future__ import annotations

import numpy as np
import pytest
from app_conftest import brightness, make_window, plain_display, shown_picture
from PySide6.QtCore import Qt
from test_analysis_circuit import planted_entries, planted_model

from flyviz.app._testing import make_app_atlas, make_app_lesion_map, make_frame
from flyviz.app.brain.synapse_lines import synapse_lines
from flyviz.app.language.graph_panel import NO_GRAPH
from flyviz.model.interventions import Silence
from flyviz.record.recording import Recording
from flyviz.viewer.parts import CLEAR, KEEP, MODEL, NEW_RUN, RESET, PER_RUN, UNTIL_RESET

pytestmark = pytest.mark.gui

PROMPT = "Tom and his dog"


# ------------------------------------------------------------ helpers
def _lit(neurons: int) -> Recording:
    rec = Recording(neurons)
    rec.append(make_frame(0, np.linspace(0.4, 1.0, neurons, dtype=np.float32)))
    return rec


def _changed(a: np.ndarray, b: np.ndarray) -> float:
    """The fraction of pixels that differ clearly between two pictures."""
    return float((np.abs(a - b).max(axis=-1) > 24).mean())


def _light(picture: np.ndarray) -> float:
    """How much light the brain gives off: brightness above the background's, summed."""
    lum = brightness(picture)
    return float((lum - np.median(lum)).clip(0).sum())


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return _changed(a, b) < 0.0005


def _run(win, qtbot, prompt: str | None = PROMPT) -> None:
    assert win.run_prompt(prompt), win.last_error
    qtbot.waitUntil(lambda: win.runs.end_reason != "", timeout=30_000)
    assert win.runs.end_reason == "done"


def _short_runs(win) -> None:
    win.state.run.max_new_tokens = 3
    win.state.run.speed_cap = 0
    plain_display(win)


# ------------------------------------------------------------ circuit
@pytest.fixture(scope="module")
def planted(tokenizer_path):
    return planted_model(tokenizer_path)


@pytest.fixture(scope="module")
def task_file(tmp_path_factory):
    import json

    path = tmp_path_factory.mktemp("lifetime-task") / "names.jsonl"
    path.write_text("\n".join(json.dumps(e) for e in planted_entries()) + "\n", "utf-8")
    return path


def test_the_circuits_dimming_and_lines_go_with_a_new_run_reset_an_export_and_a_model(
        qtbot, tmp_path, planted, task_file):
    """Issue 36's sequence: Circuit → Find circuit dims the brain and draws the synapse line;
    Reset, a new run and loading the spiking brain each take both away, and File → Export
    movie after Reset draws the brain undimmed."""
    from flyviz.kinds.spiking import SpikingModel
    from flyviz.render.offscreen import render_state_image
    from flyviz.spiking.demo import demo_brain

    checkpoint = planted[0]
    win = make_window(qtbot, checkpoint, tmp_path)
    try:
        _short_runs(win)
        n = checkpoint.config.neurons
        rec = _lit(n)
        before = shown_picture(win, qtbot, rec)
        size = (before.shape[1], before.shape[0])
        win.sync_camera()
        still_before = render_state_image(win.state, size).astype(np.int64)
        feature = win.features["circuit"]
        part = win.state.parts["circuit"]
        assert part.lifetime == PER_RUN
        with qtbot.waitSignal(feature.found, timeout=120_000):
            assert feature.find(task_file), feature.panel.message.text()

        def circuit_shown() -> np.ndarray:
            feature.show_k(feature.k)
            assert part.emphasis is not None and part.lines is not None
            picture = shown_picture(win, qtbot, rec)
            assert _light(picture) < 0.8 * _light(before)      # dimmed
            assert synapse_lines(win.brain).shown == "circuit"
            return picture

        circuit_shown()
        win.reset_run()
        assert part.emphasis is None and part.lines is None
        after_reset = shown_picture(win, qtbot, rec)
        assert _same(after_reset, before) and synapse_lines(win.brain).shown is None
        # File → Export movie draws a frozen copy of the state: undimmed, no line, too.
        win.sync_camera()
        still = render_state_image(win.state.frozen(), size).astype(np.int64)
        assert _same(still, still_before)

        circuit_shown()
        _run(win, qtbot, "c0")
        assert part.emphasis is None and part.lines is None
        assert _same(shown_picture(win, qtbot, rec), before)

        circuit_shown()
        win.features["spiking"].open(SpikingModel(demo_brain(), "demo"))
        assert part.emphasis is None and part.lines is None
        assert win.state.shown_lines is None and win.brain.emphasis is None
    finally:
        win.close()


# ------------------------------------------------------------ patching
def test_a_patching_cell_lends_its_patch_until_reset_and_clear_unticks_compare(
        window, qtbot, app_checkpoint):
    """Issue 36's sequence: clicking a Patching cell runs its comparison with the patch in
    the Interventions list and "Compare with untouched" ticked; Clear takes the patch out and
    unticks the box, so after Reset, Run runs (no "nothing to compare"); left in the list,
    Reset gives the list and the box back as they were and the rings and group go."""
    from test_app_patching import _trace

    win = window
    _short_runs(win)
    n = app_checkpoint.config.neurons
    rec = _lit(n)
    before = shown_picture(win, qtbot, rec)
    feature, trace = _trace(win, qtbot, by="superclass")
    part = win.state.parts["patching"]
    assert part.lifetime == UNTIL_RESET
    dock = win.interventions.panel

    def click() -> object:
        column = next(c for c, g in enumerate(trace.groups) if g)
        assert feature.choose_cell(len(trace.positions) - 1, column)
        qtbot.waitUntil(lambda: win.runs.end_reason != "", timeout=30_000)
        assert win.state.comparing and dock.compare_box.isChecked()
        (patch,) = win.state.interventions
        assert win.state.intervened.size and part.emphasis is not None
        picture = shown_picture(win, qtbot, rec)
        assert not _same(picture, before)            # the group lit and the rings drawn
        return patch

    click()
    # The cell leaves its corrupted prompt in the prompt box, the one its patch is lent for
    # (a patch applies to prompts of its source's length): Run, as the user presses it,
    # runs it with the patch kept.
    assert win.state.docks.prompt == str(trace.info["corrupt"])
    _run(win, qtbot, None)                           # the patch is kept for the next runs
    assert win.state.comparing and win.state.interventions
    assert win.session.recording.baseline is not None
    dock.clear_button.click()                        # the user's Clear
    assert win.state.interventions == () and not win.state.comparing
    assert not dock.compare_box.isChecked()
    win.reset_run()
    win.last_error = ""
    _run(win, qtbot)                                 # a plain run, not "nothing to compare"
    assert win.session.recording.baseline is None and "nothing" not in win.last_error
    assert _same(shown_picture(win, qtbot, rec), before)

    click()
    win.reset_run()
    assert win.state.interventions == () and not win.state.comparing
    assert not dock.compare_box.isChecked() and win.state.intervened.size == 0
    assert part.emphasis is None and _same(shown_picture(win, qtbot, rec), before)


# ------------------------------------------------------------ interventions and compare
def test_the_users_interventions_and_rings_stay_through_runs_and_reset_and_go_with_a_model(
        window, qtbot, app_checkpoint):
    win = window
    _short_runs(win)
    n = app_checkpoint.config.neurons
    rec = _lit(n)
    before = shown_picture(win, qtbot, rec)
    config = win.state.parts["run_config"]
    assert [getattr(config.lifetime, e) for e in (NEW_RUN, RESET, MODEL)] == [KEEP, KEEP, CLEAR]
    silence = Silence("superclass:cb_intrinsic")
    win.state.interventions = (silence,)
    assert win.state.intervened.size
    ringed = shown_picture(win, qtbot, rec)
    assert not _same(ringed, before)
    _run(win, qtbot)
    win.reset_run()
    assert win.state.interventions == (silence,) and win.interventions.panel.enabled() == [silence]
    assert _same(shown_picture(win, qtbot, rec), ringed)
    win.state.set_comparing(True)
    win.set_checkpoint(app_checkpoint)               # another brain's neurons: emptied
    assert win.state.interventions == () and win.state.intervened.size == 0
    assert not win.state.comparing and not win.interventions.panel.compare_box.isChecked()
    assert _same(shown_picture(win, qtbot, rec), before)


def test_a_comparisons_header_goes_with_reset_and_the_users_compare_stays(
        window, qtbot, app_checkpoint):
    """Issue 36's sequence: after a comparison, Reset leaves no "untouched (grey) →
    intervened" header over empty bars, nor the Δx colouring; the box the user ticked and
    the list stay for the next run."""
    from flyviz.app.brain.colouring import STATE

    win = window
    _short_runs(win)
    silence = Silence("superclass:cb_intrinsic")
    assert win.interventions.compare_with([silence], prompt=PROMPT)
    qtbot.waitUntil(lambda: win.runs.end_reason != "", timeout=30_000)
    win.refresh_panels()
    assert "untouched (grey)" in win.topk_panel.title.text()
    assert len(win.topk_panel.untouched_bars.opts["width"]) > 0
    win.reset_run()
    win.refresh_panels()
    assert win.topk_panel.title.text() == "Next token"
    assert len(win.topk_panel.untouched_bars.opts["width"]) == 0
    assert win.state.colour_by == STATE
    assert win.state.comparing and win.state.interventions == (silence,)
    _run(win, qtbot)
    assert win.session.recording.baseline is not None       # the user's comparison again


# ------------------------------------------------------------ Why?
def test_whys_caption_shading_and_lines_go_with_a_new_run(window, qtbot, app_checkpoint):
    """Issue 36's sequence: after a new run, the Graph panel's caption no longer describes a
    trace over an empty plot; the text's shading and the lines are gone from the brain."""
    win = window
    _short_runs(win)
    n = app_checkpoint.config.neurons
    rec = _lit(n)
    feature = win.features["why"]
    win.docks.show(feature.dock)                     # the docks a trace opens, open already:
    win.docks.show(feature.graph_dock, 0.35)         # the brain view keeps its size
    before = shown_picture(win, qtbot, rec)
    _run(win, qtbot)
    part = win.state.parts["why"]
    assert part.lifetime == PER_RUN
    with qtbot.waitSignal(feature.traced, timeout=60_000):
        assert feature.why()
    graph = feature.graph_panel
    assert graph.status.text() != NO_GRAPH and win.state.token_flows is not None
    assert len(graph.items) > 0
    _run(win, qtbot)
    assert graph.status.text() == NO_GRAPH and len(graph.items) == 0
    assert win.state.token_flows is None and win.state.lines("why") is None
    assert _same(shown_picture(win, qtbot, rec), before)


# ------------------------------------------------------------ atlas, lesion map, estimate
@pytest.fixture(scope="module")
def app_atlas(app_checkpoint, tmp_path_factory):  # noqa: F811
    return make_app_atlas(app_checkpoint, tmp_path_factory.mktemp("lifetime-atlas"))


@pytest.fixture(scope="module")
def lesion_map(app_checkpoint, tmp_path_factory):  # noqa: F811
    return make_app_lesion_map(app_checkpoint, tmp_path_factory.mktemp("lifetime-lesions"))


def test_the_atlas_and_what_find_lit_stay_through_runs_and_go_with_a_model(
        window, qtbot, app_checkpoint, app_atlas):
    win = window
    _short_runs(win)
    rec = _lit(app_checkpoint.config.neurons)
    before = shown_picture(win, qtbot, rec)
    win.last_error = ""
    win.atlas.open(app_atlas)
    qtbot.waitUntil(lambda: win.atlas.atlas is not None or bool(win.last_error), timeout=10_000)
    assert win.state.parts["atlas"].lifetime.clears(MODEL)
    panel = win.atlas.panel
    panel.search.setText("rain")
    qtbot.keyClick(panel.search, Qt.Key.Key_Return)
    found = shown_picture(win, qtbot, rec)
    assert win.brain.emphasis is not None and not _same(found, before)
    _run(win, qtbot)
    win.reset_run()
    assert win.state.atlas is not None and _same(shown_picture(win, qtbot, rec), found)
    win.set_checkpoint(app_checkpoint)
    assert win.state.atlas is None and win.brain.emphasis is None
    assert _same(shown_picture(win, qtbot, rec), before)


def test_a_lesion_rows_comparison_is_lent_until_reset_and_its_group_stays_until_a_model(
        window, qtbot, app_checkpoint, lesion_map):
    win = window
    _short_runs(win)
    rec = _lit(app_checkpoint.config.neurons)
    before = shown_picture(win, qtbot, rec)
    win.last_error = ""
    win.lesions.open(lesion_map)
    qtbot.waitUntil(lambda: win.lesions.lesions is not None or bool(win.last_error),
                    timeout=10_000)
    lesions = win.lesions.lesions
    group = lesions.rows[0]
    win.state.docks.prompt = PROMPT                  # what the comparison runs
    assert win.lesions.select_group(group.group)
    selected = shown_picture(win, qtbot, rec)
    assert not _same(selected, before)
    win.lesions.panel.compare_button.click()
    qtbot.waitUntil(lambda: win.runs.end_reason != "", timeout=30_000)
    assert win.state.comparing and win.state.interventions == (Silence(group.query),)
    assert win.state.parts["lesion_run"].lifetime == UNTIL_RESET
    win.reset_run()
    assert win.state.interventions == () and not win.state.comparing
    assert win.brain.emphasis is not None               # the group selected in the table
    assert _same(shown_picture(win, qtbot, rec), selected)
    win.set_checkpoint(app_checkpoint)
    assert win.brain.emphasis is None and _same(shown_picture(win, qtbot, rec), before)


@pytest.fixture(scope="module")
def estimate_table(app_checkpoint, tmp_path_factory):  # noqa: F811
    """Every neuron's estimated lesion effect on the test model (``flyviz importance``)."""
    pytest.importorskip("xarray")
    from flyviz.analysis.corpus import build_corpus
    from flyviz.analysis.importance import ImportanceSettings, run_importance
    from flyviz.analysis.sweep import sweep_groups
    from flyviz.model.tokenizer import tokenizer_for

    folder = tmp_path_factory.mktemp("lifetime-estimate")
    make_app_lesion_map(app_checkpoint, folder)      # writes the story the estimate reads
    corpus = build_corpus([folder / "story.txt"], tokenizer_for(app_checkpoint), context=24)
    run_importance(None, app_checkpoint, corpus, sweep_groups(app_checkpoint, "superclass"),
                   folder / "lesions.estimate.csv", ImportanceSettings(context=24),
                   by="superclass", workers=0)
    return folder / "lesions.estimate.neurons.csv"


def test_an_estimates_colouring_stays_through_runs_and_goes_with_a_model(
        window, qtbot, app_checkpoint, estimate_table):
    from flyviz.app.brain.colouring import STATE
    from flyviz.app.lesion.estimate_layer import ESTIMATE

    win = window
    _short_runs(win)
    rec = _lit(app_checkpoint.config.neurons)
    before = shown_picture(win, qtbot, rec)
    feature = win.lesions
    part = win.state.parts["lesion"]
    assert ESTIMATE in part.layers and part.lifetime.clears(MODEL)
    assert not part.lifetime.clears(NEW_RUN) and not part.lifetime.clears(RESET)
    win.last_error = ""
    feature.open_estimate(estimate_table, colour=True)
    qtbot.waitUntil(lambda: feature.estimate is not None or bool(win.last_error), timeout=10_000)
    assert feature.estimate is not None, win.last_error
    qtbot.waitUntil(lambda: win.state.colour_by == ESTIMATE, timeout=10_000)
    coloured = shown_picture(win, qtbot, rec)
    assert not _same(coloured, before)
    _run(win, qtbot)
    win.reset_run()
    assert win.state.colour_by == ESTIMATE and _same(shown_picture(win, qtbot, rec), coloured)
    win.set_checkpoint(app_checkpoint)
    assert win.state.colour_by == STATE and not win.state.colour_layers[ESTIMATE].available
    assert _same(shown_picture(win, qtbot, rec), before)


# ------------------------------------------------------------ screen
def test_a_screens_colouring_stays_through_runs_and_goes_with_a_model(qtbot, tmp_path):
    from flyviz.kinds.spiking import SpikingModel
    from flyviz.spiking.demo import demo_brain
    from flyviz.viewer.layers import SCREEN, ScreenEffect

    win = make_window(qtbot, None, tmp_path)
    try:
        plain_display(win)
        brain = demo_brain()
        win.features["spiking"].open(SpikingModel(brain, "demo"))
        n = win.state.neurons
        rec = _lit(n)
        before = shown_picture(win, qtbot, rec)
        values = np.where(np.arange(n) % 3 == 0, 8.0, -8.0)
        win.state.screen = ScreenEffect(values, target=0, target_name="t")
        win.state.colour_by = SCREEN
        coloured = shown_picture(win, qtbot, rec)
        assert not _same(coloured, before)
        assert win.state.parts["screen"].lifetime.clears(MODEL)
        for event in (NEW_RUN, RESET):          # a spiking run's recording, and Reset's
            win.state.set_recording(Recording(n), cause=event)
            assert win.state.screen is not None and win.state.colour_by == SCREEN
            assert _same(shown_picture(win, qtbot, rec), coloured)
        win.features["spiking"].open(SpikingModel(brain, "demo"))     # the brain again
        assert win.state.screen is None and win.state.colour_by != SCREEN
        assert _same(shown_picture(win, qtbot, rec), before)
    finally:
        win.close()
