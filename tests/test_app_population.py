"""The whole-brain raster and cell-type docks: what they draw and what a click does."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QPointF, Qt

from flyviz.app._testing import make_frame
from flyviz.record.recording import Recording


def _random_recording(neurons: int, tokens: int, seed: int = 3) -> tuple[Recording, np.ndarray]:
    rng = np.random.default_rng(seed)
    states = rng.normal(0.0, 0.3, (tokens, neurons)).astype(np.float32)
    rec = Recording(neurons)
    for i, state in enumerate(states):
        rec.append(make_frame(i, state, token_text=f"w{i}"))
    return rec, rec.states()        # as stored (float16 states come back rounded)


def _population(win):
    feature = win.features["population"]
    feature.raster_dock.show()
    feature.raster_dock.raise_()
    feature.cell_type_dock.show()
    return feature


def _shown(win, qtbot, rec):
    feature = _population(win)
    win.session.replace(rec)
    feature.refresh()
    qtbot.waitUntil(lambda: feature.raster.columns == len(rec), timeout=3000)
    return feature


def _numpy_pooled(states: np.ndarray, order: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Per pixel row and token, the value of largest magnitude of that row's neurons
    (of two with the same magnitude, the positive one)."""
    rows = []
    for r in range(edges.size - 1):
        block = states[:, order[edges[r]:edges[r + 1]]]            # (T, k)
        largest = np.abs(block).max(axis=1, keepdims=True)
        rows.append(np.where(np.abs(block) == largest, block, -np.inf).max(axis=1))
    return np.stack(rows)


def _click(qtbot, plot, x: float, y: float) -> None:
    scene = plot.getViewBox().mapViewToScene(QPointF(x, y))
    point = plot.mapFromScene(scene)
    qtbot.mouseClick(plot.viewport(), Qt.MouseButton.LeftButton, pos=point)


def test_the_raster_is_the_run_pooled_in_anatomical_order(window, qtbot, app_checkpoint):
    n = app_checkpoint.config.neurons
    rec, states = _random_recording(n, 12)
    feature = _shown(window, qtbot, rec)
    raster = feature.raster
    anatomy = window.state.anatomy
    # Rows by superclass, then cell type: every band is one superclass.
    order = raster.order.order
    assert sorted(order.tolist()) == list(range(n))
    for band in raster.order.bands:
        assert {anatomy.superclass[i] for i in order[band.start:band.stop]} == {band.label}
    edges = raster.pooler.edges
    assert edges[0] == 0 and edges[-1] == n and raster.pooler.rows > 1
    expected = _numpy_pooled(states, order, edges)
    np.testing.assert_array_equal(raster.image.image, expected)
    # The image spans every ordered neuron and every token (pixel rows map to neuron ranges).
    rect = raster.image.mapRectToParent(raster.image.boundingRect())
    assert (rect.top(), rect.height()) == pytest.approx((0.0, float(n)))
    assert (rect.left(), rect.width()) == pytest.approx((-0.5, 12.0))


def test_clicking_a_raster_row_selects_its_neuron_and_token(window, qtbot, app_checkpoint):
    n = app_checkpoint.config.neurons
    rec, states = _random_recording(n, 10)
    neuron, token = 137, 6
    rec = Recording(n)
    states[token, neuron] = 5.0          # the pixel's value: this neuron drew it
    for i, state in enumerate(states):
        rec.append(make_frame(i, state))
    states = rec.states()
    feature = _shown(window, qtbot, rec)
    raster = feature.raster
    window.show_token(2)
    rank = int(np.flatnonzero(raster.order.order == neuron)[0])
    _click(qtbot, raster.plot, token, rank + 0.5)
    qtbot.waitUntil(lambda: window.state.selected == neuron, timeout=3000)
    assert window.state.index == token
    # Another neuron's row selects that one instead.
    other = int(raster.order.order[0])
    _click(qtbot, raster.plot, 1, 0.2)
    pooled_row = raster.neurons_in_row(0)
    expected = int(pooled_row[np.abs(states[1, pooled_row]).argmax()])
    qtbot.waitUntil(lambda: window.state.selected == expected, timeout=3000)
    assert other in pooled_row and window.state.index == 1


def test_a_new_frame_pools_only_its_own_column(window, qtbot, app_checkpoint, monkeypatch):
    n = app_checkpoint.config.neurons
    rec, states = _random_recording(n, 8)
    feature = _shown(window, qtbot, rec)
    raster = feature.raster
    before = raster.image.image.copy()
    calls: dict[str, list[int]] = {"pool": [], "pool_one": []}
    pooler = raster.pooler
    pool, pool_one = pooler.pool, pooler.pool_one

    def spy_pool(x):
        calls["pool"].append(np.atleast_2d(x).shape[0])      # tokens pooled
        return pool(x)

    def spy_pool_one(x):
        calls["pool_one"].append(1)
        return pool_one(x)

    monkeypatch.setattr(pooler, "pool", spy_pool)
    monkeypatch.setattr(pooler, "pool_one", spy_pool_one)
    new = np.random.default_rng(9).normal(0, 0.3, n).astype(np.float32)
    window.session.append(make_frame(8, new))
    new = window.session.recording.state(8)
    feature.refresh()
    # One column pooled (pool_one pools through pool, one token), the run not again.
    assert calls == {"pool": [1], "pool_one": [1]}
    after = raster.image.image
    assert after.shape == (before.shape[0], 9)
    np.testing.assert_array_equal(after[:, :8], before)
    expected = _numpy_pooled(new[None, :], raster.order.order, raster.pooler.edges)[:, 0]
    np.testing.assert_array_equal(after[:, 8], expected)


def test_the_similarity_order_is_sorted_in_the_background(window, qtbot, app_checkpoint):
    from flyviz.analysis.population import similarity_order

    n = app_checkpoint.config.neurons
    rec, states = _random_recording(n, 30, seed=4)
    feature = _shown(window, qtbot, rec)
    raster = feature.raster
    raster.order_box.setCurrentIndex(raster.order_box.findData("similarity"))
    assert raster.order.name == "anatomy"            # still sorting: the old rows stay
    qtbot.waitUntil(lambda: raster.order.name == "similarity", timeout=10000)
    np.testing.assert_array_equal(raster.order.order, similarity_order(states).order)
    np.testing.assert_array_equal(raster.image.image,
                                  _numpy_pooled(states, raster.order.order, raster.pooler.edges))


def test_the_cell_type_heatmap_is_the_groups_means_and_a_click_lights_a_type(
        window, qtbot, app_checkpoint):
    n = app_checkpoint.config.neurons
    rec, states = _random_recording(n, 9)
    feature = _shown(window, qtbot, rec)
    panel = feature.cell_types
    qtbot.waitUntil(lambda: panel.values.shape[1:] == (9,), timeout=5000)   # sorted off-thread
    anatomy = window.state.anatomy
    types = np.asarray(anatomy.cell_type)
    assert sorted(panel.names) == sorted(set(types.tolist()))
    for row, name in enumerate(panel.names):
        np.testing.assert_allclose(panel.values[row], states[:, types == name].mean(axis=1),
                                   rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(panel.image.image, panel.values)
    row = 3
    _click(qtbot, panel.plot, 4, row + 0.5)
    name = panel.names[row]
    qtbot.waitUntil(lambda: window.state.highlight is not None, timeout=3000)
    np.testing.assert_array_equal(window.state.highlight, types == name)
    # A new frame adds a column of the same means, rows unchanged.
    names = list(panel.names)
    new = np.random.default_rng(2).normal(0, 0.3, n).astype(np.float32)
    window.session.append(make_frame(9, new))
    new = window.session.recording.state(9)
    feature.refresh()
    assert panel.names == names and panel.values.shape == (len(names), 10)
    np.testing.assert_allclose(panel.values[:, 9], [new[types == t].mean() for t in names],
                               rtol=1e-5, atol=1e-6)


def test_a_comparison_shows_untouched_intervened_or_the_difference(window, qtbot, app_checkpoint):
    n = app_checkpoint.config.neurons
    rec, states = _random_recording(n, 6, seed=1)
    base, base_states = _random_recording(n, 6, seed=2)
    raster = window.features["population"].raster
    # Before a comparison the one choice names the run shown, not an intervention.
    assert not raster.view_box.isEnabled() and raster.view_box.currentText() == "This run"
    rec.baseline = base
    feature = _shown(window, qtbot, rec)
    assert feature.raster is raster
    assert raster.view_box.isEnabled() and raster.view_box.currentText() == "Intervened"
    assert [raster.view_box.itemText(i) for i in range(3)] == ["Intervened", "Untouched", "Δx"]
    order, edges = raster.order.order, raster.pooler.edges
    np.testing.assert_array_equal(raster.image.image, _numpy_pooled(states, order, edges))
    for view, expected in (("untouched", base_states), ("delta", states - base_states)):
        raster.view_box.setCurrentIndex(raster.view_box.findData(view))
        np.testing.assert_allclose(raster.image.image, _numpy_pooled(expected, order, edges),
                                   rtol=1e-6, atol=1e-6)
    single, _ = _random_recording(n, 3, seed=4)      # a plain run again: "This run" again
    _shown(window, qtbot, single)
    assert not raster.view_box.isEnabled() and raster.view_box.currentText() == "This run"


def test_rows_by_importance_follow_the_colour_layer(window, qtbot, app_checkpoint):
    from flyviz.analysis.population import importance_order
    from flyviz.render.style import ColourLayer

    n = app_checkpoint.config.neurons
    rec, states = _random_recording(n, 5)
    feature = _shown(window, qtbot, rec)
    raster = feature.raster
    # Without a colour layer the choice is refused and the menu shows the rows drawn.
    raster.order_box.setCurrentIndex(raster.order_box.findData("importance"))
    assert raster.order.name == "anatomy" and raster.order_box.currentData() == "anatomy"
    score = np.random.default_rng(8).normal(0, 1, n).astype(np.float32)
    window.state.add_colour_layer("test-score", "Test score",
                                  lambda: ColourLayer.static("test-score", score))
    window.state.colour_by = "test-score"
    raster.order_box.setCurrentIndex(raster.order_box.findData("importance"))
    assert raster.order.name == "importance"
    np.testing.assert_array_equal(raster.order.order, importance_order(score).order)
    np.testing.assert_array_equal(raster.image.image,
                                  _numpy_pooled(states, raster.order.order, raster.pooler.edges))


def test_zooming_in_pools_the_rows_in_view_down_to_single_neurons(window, qtbot, app_checkpoint):
    n = app_checkpoint.config.neurons
    rec, states = _random_recording(n, 7)
    feature = _shown(window, qtbot, rec)
    raster = feature.raster
    assert raster.pooler.rows < n                 # the whole brain: several neurons a row
    raster.plot.setYRange(120, 150, padding=0)
    qtbot.waitUntil(lambda: raster.rows_shown == (120, 150), timeout=3000)
    order = raster.order.order
    # One neuron a row now, each row exactly its neuron's states.
    np.testing.assert_array_equal(raster.image.image, states[:, order[120:150]].T)
    rect = raster.image.mapRectToParent(raster.image.boundingRect())
    assert (rect.top(), rect.height()) == pytest.approx((120.0, 30.0))
    _click(qtbot, raster.plot, 3, 131.5)
    qtbot.waitUntil(lambda: window.state.selected == int(order[131]), timeout=3000)
    # A new frame still pools only its column, of the rows in view.
    window.session.append(make_frame(7, np.linspace(-1, 1, n)))
    feature.refresh()
    np.testing.assert_array_equal(raster.image.image[:, 7],
                                  window.session.recording.state(7)[order[120:150]])


def test_the_docks_follow_a_run_and_hover_names_neuron_and_token(window, qtbot, app_checkpoint):
    n = app_checkpoint.config.neurons
    rec, states = _random_recording(n, 4)
    feature = _shown(window, qtbot, rec)
    raster = feature.raster
    # Frames appended to the shown recording reach both docks without being asked.
    window.session.append(make_frame(4, np.ones(n), token_text="dog"))
    qtbot.waitUntil(lambda: raster.columns == 5 and feature.cell_types.values.shape[1] == 5,
                    timeout=3000)
    neuron = int(raster.order.order[raster.pooler.edges[2]])
    states = window.session.recording.states()
    row = raster.neurons_in_row(2)
    drawn = int(row[np.abs(states[4, row]).argmax()])
    vb = raster.plot.getViewBox()
    raster._on_moved(vb.mapViewToScene(QPointF(4, raster.pooler.edges[2] + 0.1)))
    assert raster.hover.text() == f"neuron #{drawn} · token 4 'dog'"
    assert neuron in row


def test_another_model_starts_the_docks_afresh(window, qtbot, app_checkpoint, tmp_path):
    from flyviz.app._testing import make_app_checkpoint

    rec, _ = _random_recording(app_checkpoint.config.neurons, 6)
    feature = _shown(window, qtbot, rec)
    qtbot.waitUntil(lambda: feature.cell_types.values.shape[1:] == (6,), timeout=5000)
    messages: list[str] = []
    window.message_shown.connect(messages.append)
    smaller = make_app_checkpoint(tmp_path / "other", neurons=300, edges=2000, seed=2)
    window.set_checkpoint(smaller)
    # The barrier before the absence check below: the docks' refresh has run and no
    # background work of theirs is left to report (an error would be shown by then).
    qtbot.waitUntil(lambda: feature.raster.order.order.size == 300
                    and not feature.refresher.timer.isActive()
                    and not window.background.busy("population-cell-types")
                    and not window.background.busy(feature.SORT), timeout=5000)
    assert feature.raster.order.order.size == 300 and feature.raster.columns == 0
    assert feature.cell_types.names == []
    assert not [m for m in messages if "error" in m.lower() or "match" in m]
    rec, states = _random_recording(300, 3)
    feature = _shown(window, qtbot, rec)
    np.testing.assert_array_equal(
        feature.raster.image.image,
        _numpy_pooled(states, feature.raster.order.order, feature.raster.pooler.edges))


def test_a_finished_run_leaves_its_cell_types_sorted_over_the_whole_run(
        window, qtbot, app_checkpoint):
    """Broken by: no sort when a run ends (the rows kept the order of the run's first half,
    sorted again only when the run doubled, so a finished run's picture depended on how
    fast its frames streamed in)."""
    from flyviz.analysis.population import group_time_courses

    n = app_checkpoint.config.neurons
    rec, _ = _random_recording(n, 8)
    feature = _shown(window, qtbot, rec)
    panel = feature.cell_types
    qtbot.waitUntil(lambda: panel.values.shape[1:] == (8,), timeout=5000)
    types = [str(t) for t in window.state.anatomy.cell_type]
    # Late frames that reorder the groups: one cell type lit far above the rest.
    lit = np.asarray(types) == panel.names[-1]
    for i in range(8, 12):
        window.session.append(make_frame(i, np.where(lit, 4.0, -4.0).astype(np.float32)))
    feature.refresh()
    qtbot.waitUntil(lambda: panel.values.shape[1:] == (12,), timeout=5000)
    states = window.session.recording.states()
    whole = group_time_courses(states, types, None, quantity="mean").names
    assert panel.names != whole, "the late frames must change the order for this test to hold"
    window.runner.events.ended.emit("done", 12)
    qtbot.waitUntil(lambda: panel.names == whole, timeout=5000)
    np.testing.assert_array_equal(panel.image.image, panel.values)
    assert panel.values.shape == (len(whole), 12)


def test_after_reset_the_raster_says_what_it_waits_for_and_counts_tokens_from_0(
        window, qtbot, app_checkpoint, tmp_path, dark_theme):
    """Reset left an empty frame with the last run's superclass labels beside rows that were
    not drawn, and tokens -8 to 7 under them; it says what a run will draw instead."""
    n = app_checkpoint.config.neurons
    rec, _ = _random_recording(n, 12)
    feature = _shown(window, qtbot, rec)
    raster = feature.raster
    qtbot.waitUntil(lambda: raster.plot.isVisible(), timeout=3000)
    left = raster.plot.getAxis("left")
    assert raster.order.bands and any(label for _, label in left._tickLevels[0])
    assert not raster.placeholder.isVisible()
    window.reset_run()
    qtbot.waitUntil(lambda: raster.columns == 0 and not feature.refresher.timer.isActive(),
                    timeout=3000)
    assert raster.placeholder.isVisible() and "Run a prompt" in raster.placeholder.text()
    assert left._tickLevels == [[], []]
    low, high = raster.plot.getViewBox().viewRange()[0]
    assert low == pytest.approx(0.0, abs=0.01) and high > low
    # Pixel facts: the words are drawn across the middle of the plot's empty area.
    image = raster.plot.grab().toImage()
    image.save(str(tmp_path / "reset.png"))
    area = raster.plot.mapFromScene(raster.plot.getViewBox().sceneBoundingRect()).boundingRect()
    assert raster.placeholder.geometry() == area
    background = image.pixelColor(area.left() + 5, area.top() + 5).lightness()
    lit = [x for x in range(area.left() + 3, area.right() - 3)     # not the axis lines
           if any(abs(image.pixelColor(x, y).lightness() - background) > 60
                  for y in range(area.top() + 2, area.bottom() - 2))]
    assert len(lit) > 0.3 * area.width()
    assert abs((lit[0] - area.left()) - (area.right() - lit[-1])) < 12      # centred
    # A new run: the labels and the image come back, the words go.
    feature = _shown(window, qtbot, rec)
    assert not raster.placeholder.isVisible()
    assert any(label for _, label in left._tickLevels[0])
