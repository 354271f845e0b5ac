"""Estimated lesions in the Lesion map dock: every neuron's own colour, the agreement, Cancel."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from app_conftest import (centre_colour, drawn, expected_colour, isolated_neurons, make_window, plain_display,
                          screen_positions)

from flyviz.app._testing import make_app_checkpoint, make_app_lesion_map
from flyviz.app.lesion.estimate_layer import open_estimate

pytestmark = pytest.mark.gui

#: Per channel, how far a drawn pixel may be from the colour computed here (8-bit rounding
#: of the framebuffer, the colormap's table against the shader's exact ramp).
TOLERANCE = 10
CONTEXT = 24


@pytest.fixture(scope="module")
def swept(app_checkpoint, tmp_path_factory):  # noqa: F811
    """``flyviz sweep --estimate`` on the test model: the exact map, and its estimate
    (groups, per-neuron table, Zarr) beside it, with the measured agreement."""
    pytest.importorskip("xarray")
    from flyviz.analysis.corpus import build_corpus
    from flyviz.analysis.importance import ImportanceSettings, run_importance
    from flyviz.analysis.sweep import LesionMap, sweep_groups
    from flyviz.model.tokenizer import tokenizer_for

    folder = tmp_path_factory.mktemp("app-estimate")
    exact = make_app_lesion_map(app_checkpoint, folder)
    # What 'flyviz sweep --estimate' does after the exact sweep (the CLI loads the model from
    # its folder, where the test model's anatomy is not stored).
    text = folder / "story.txt"
    corpus = build_corpus([text], tokenizer_for(app_checkpoint), context=CONTEXT)
    run_importance(None, app_checkpoint, corpus, sweep_groups(app_checkpoint, "superclass"),
                   folder / "lesions.estimate.csv", ImportanceSettings(context=CONTEXT),
                   by="superclass", workers=0, exact=LesionMap(exact).rows)
    return {"exact": exact, "text": text, "neurons": folder / "lesions.estimate.neurons.csv"}






def _open_estimate(win, qtbot, path, colour=True):
    feature = win.lesions
    win.last_error = ""
    feature.open_estimate(path, colour=colour)
    qtbot.waitUntil(lambda: feature.estimate is not None or bool(win.last_error), timeout=10_000)
    assert feature.estimate is not None, win.last_error
    return feature.estimate


def test_each_isolated_neuron_is_drawn_in_the_colour_of_its_own_estimate(
        window, qtbot, app_checkpoint, swept):
    """Pixel facts: lone neurons of the same superclass (one colour in the group map) are
    each drawn in the sequential colormap's colour of their own ΔCE_est, linear over
    [0, largest] and on the log scale; the agreement of ``sweep --estimate`` is printed."""
    win = window
    plain_display(win)
    est = _open_estimate(win, qtbot, swept["neurons"])
    values = np.asarray(est.values)
    from flyviz.analysis.importance import read_neuron_table
    info, columns = read_neuron_table(swept["neurons"])
    assert np.array_equal(values[columns["neuron"]], columns["delta_ce_est"])
    assert win.colour_by.current == "estimate" and win.brain.colormap == "sequential"
    # The agreement sweep --estimate measured, above the estimate.
    found = info["agreement"]
    label = win.lesions.panel.estimate.agreement.text()
    assert label.startswith(f"estimate vs exact over {found['groups']:,} groups: Spearman ")
    assert f"same sign {found['sign_agreement']:.1%}" in label
    assert win.lesions.panel.estimate.agreement.isVisible()

    top = float(values.max())
    assert top > 0 and np.unique(np.round(values, 9)).size > 50   # neurons differ
    win.lesions.panel.log_scale.setChecked(False)
    assert win.brain.value_range == pytest.approx((0.0, top))
    assert win.brain.colorbar_caption.text() == "ΔCE_est, neuron silenced (nats/token)"
    image = drawn(win, qtbot)
    xy = screen_positions(win)
    lone = isolated_neurons(win, np.arange(values.size), 60)
    positive = [n for n in lone if values[n] > 0]
    assert len(positive) >= 5
    for neuron in lone:
        want = expected_colour("sequential", values[neuron], 0.0, top)
        got = centre_colour(image, xy[neuron])
        assert np.abs(got - want).max() <= TOLERANCE, (neuron, values[neuron], got, want)
    win.lesions.panel.log_scale.setChecked(True)
    floor = values[values > 0].min() / 3
    low, high = np.log10(floor), np.log10(top)
    assert win.brain.value_range == pytest.approx((low, high))
    assert win.brain.colorbar_caption.text() == "log10 ΔCE_est, neuron silenced (nats/token)"
    image = drawn(win, qtbot)
    for neuron in lone:
        want = expected_colour("sequential", np.log10(max(values[neuron], floor)), low, high)
        got = centre_colour(image, xy[neuron])
        assert np.abs(got - want).max() <= TOLERANCE, (neuron, values[neuron], got, want)
    # Lone neurons of one superclass (one colour in the group map) whose estimates differ
    # are drawn in different colours: the layer is per neuron.
    superclass = np.asarray(app_checkpoint.anatomy.superclass)
    want = {n: expected_colour("sequential", np.log10(max(values[n], floor)), low, high) for n in lone}
    pairs = [(a, b) for a in lone for b in lone if a < b and superclass[a] == superclass[b]
             and np.abs(want[a] - want[b]).max() > 3 * TOLERANCE]
    assert pairs
    for a, b in pairs:
        assert np.abs(centre_colour(image, xy[a]) - centre_colour(image, xy[b])).max() > TOLERANCE
    win.lesions.show_estimate(False)
    assert win.colour_by.current == "state"


def test_opening_the_exact_map_opens_its_estimate_beside_it(window, qtbot, swept):
    win = window
    win.lesions.open(swept["exact"])
    qtbot.waitUntil(lambda: win.lesions.lesions is not None
                    and win.lesions.estimate is not None, timeout=10_000)
    assert win.lesions.estimate.source == swept["neurons"].name
    assert win.colour_by.actions["estimate"].isEnabled()
    assert win.colour_by.actions["importance"].isEnabled()
    assert "Spearman" in win.lesions.panel.estimate.agreement.text()


def test_an_estimate_computed_in_the_app_is_the_librarys_and_measured_on_the_same_text(
        window, qtbot, app_checkpoint, swept):
    """*Estimate…* over the map's own text gives the same per-neuron values as the file
    written by ``sweep --estimate``, and measures the same agreement."""
    win = window
    win.lesions.open(swept["exact"])
    qtbot.waitUntil(lambda: win.lesions.lesions is not None, timeout=10_000)
    with qtbot.waitSignal(win.lesions.job.finished, timeout=60_000):
        assert win.lesions.compute_estimate(swept["text"])
    qtbot.waitUntil(lambda: win.lesions.estimate is not None
                    and win.lesions.estimate.source.startswith("computed"), timeout=5000)
    est = win.lesions.estimate
    on_file = open_estimate(swept["neurons"], app_checkpoint)
    np.testing.assert_allclose(est.values, on_file.values, rtol=1e-9, atol=1e-12)
    assert est.agreement is not None
    assert est.agreement == on_file.agreement
    assert win.colour_by.current == "estimate"
    assert not win.lesions.panel.estimate.progress.isVisible()


def test_cancel_stops_an_estimate(window, qtbot, swept, monkeypatch):
    """Cancel while the estimate runs: its thread stops at its next progress report, nothing
    is shown, and the dock says so."""
    from flyviz.analysis import importance_tasks

    gate, entered, calls = threading.Event(), threading.Event(), []
    real = importance_tasks.chunk_partial

    def held(*args, **kwargs):
        calls.append(1)
        entered.set()
        gate.wait(10)
        return real(*args, **kwargs)

    monkeypatch.setattr(importance_tasks, "chunk_partial", held)
    win = window
    assert win.lesions.compute_estimate(swept["text"])
    assert win.lesions.panel.estimate.cancel_button.isVisible()
    assert entered.wait(10)
    win.lesions.panel.estimate.cancel_button.click()
    gate.set()
    qtbot.waitUntil(lambda: not win.lesions.job.running.is_set(), timeout=10_000)
    assert len(calls) == 1            # the text has many chunks; the run stopped in the first
    assert win.lesions.estimate is None
    assert "cancelled" in win.lesions.panel.estimate.status.text()
    assert not win.lesions.panel.estimate.cancel_button.isVisible()


def test_an_estimate_of_another_model_or_no_estimate_is_one_line(qtbot, tmp_path, swept):
    other = make_app_checkpoint(tmp_path / "other", seed=3, name="other-brain")
    win = make_window(qtbot, other, tmp_path)
    try:
        win.last_error = ""
        win.lesions.open_estimate(swept["neurons"])
        qtbot.waitUntil(lambda: bool(win.last_error), timeout=10_000)
        assert win.lesions.estimate is None and "estimate" in win.last_error
        assert "\n" not in win.last_error
        win.last_error = ""
        win.lesions.open_estimate(tmp_path / "nothing.csv")
        qtbot.waitUntil(lambda: bool(win.last_error), timeout=10_000)
        assert "no per-neuron estimate" in win.last_error and "\n" not in win.last_error
    finally:
        win.close()
