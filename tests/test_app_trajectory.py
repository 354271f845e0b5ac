"""The Trajectory dock: the run on its principal axes, the marked token, comparisons, pointing."""

from __future__ import annotations

import numpy as np
import pytest
from qt_barriers import background_delivered
from PySide6.QtCore import QEvent, QPoint, QPointF, Qt
from PySide6.QtGui import QColor, QImage, QMouseEvent
from PySide6.QtWidgets import QApplication
from test_analysis_atlas_basis import atlas_without_axes

from flyviz.analysis.population import principal_trajectory
from flyviz.app._testing import make_frame
from flyviz.record.recording import Recording

pytestmark = pytest.mark.gui


def _planted_recording(neurons: int, tokens: int, seed: int = 3) -> Recording:
    """A run that moves in three planted directions (its path spreads in all three)."""
    rng = np.random.default_rng(seed)
    path = np.cumsum(rng.standard_normal((tokens, 3)), axis=0)
    states = 0.1 * path @ rng.standard_normal((3, neurons)) \
        + 0.01 * rng.standard_normal((tokens, neurons))
    rec = Recording(neurons, states_dtype="float32")
    for i, state in enumerate(states):
        rec.append(make_frame(i, state, token_text=f"w{i}"))
    return rec


def _feature(win):
    feature = win.features["trajectory"]
    # Floated and as large as a user would make it to look at a path of a few dozen tokens.
    feature.dock.setFloating(True)
    feature.dock.resize(640, 460)
    feature.dock.show()
    feature.dock.raise_()
    return feature


def _shown(win, qtbot, rec: Recording, index: int | None = None):
    feature = _feature(win)
    win.session.replace(rec, index)
    feature.refresh()
    qtbot.waitUntil(lambda: feature.fit is not None and feature._fit_for is rec
                    and len(feature.coordinates[0]) == len(rec), timeout=5000)
    return feature


def _pixels(widget) -> np.ndarray:
    """The widget as drawn now, ``(H, W, 3)`` RGB in physical pixels."""
    image = widget.grab().toImage().convertToFormat(QImage.Format.Format_RGB888)
    height, width, line = image.height(), image.width(), image.bytesPerLine()
    data = np.frombuffer(image.constBits(), dtype=np.uint8, count=height * line)
    return data.reshape(height, line)[:, :width * 3].reshape(height, width, 3)


def _rgb(name: str) -> np.ndarray:
    colour = QColor(name)
    return np.array([colour.red(), colour.green(), colour.blue()])


def _is_colour(pixels: np.ndarray, xy, colour: str, ratio: float = 1.0) -> bool:
    """The pixel at logical position ``xy`` has ``colour`` (within antialiasing's rounding)."""
    x, y = int(round(xy[0] * ratio)), int(round(xy[1] * ratio))
    return bool(np.abs(pixels[y, x].astype(int) - _rgb(colour)).max() <= 8)


def _move(widget, pos: QPoint, buttons=Qt.MouseButton.NoButton) -> None:
    """The pointer moves over ``widget`` to ``pos`` (sent as the event itself: moving the
    X cursor reaches a window only where the display puts it under the pointer)."""
    event = QMouseEvent(QEvent.Type.MouseMove, QPointF(pos), QPointF(widget.mapToGlobal(pos)),
                        Qt.MouseButton.NoButton, buttons, Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(widget, event)


def _share_of_vertices(feature, path: int, colour: str, skip: tuple[int, ...] = ()) -> float:
    view = feature.view
    pixels = _pixels(view)
    ratio = view.devicePixelRatioF()
    xy = view.screen_positions()[path]
    tokens = [k for k in range(len(xy)) if k not in skip]
    return sum(_is_colour(pixels, xy[k], colour, ratio) for k in tokens) / len(tokens)


def test_the_path_is_the_runs_pca_drawn_at_its_projected_vertices(window, qtbot, app_checkpoint):
    from flyviz.app.population.trajectory_panel import MARKER_COLOUR, PATH_COLOURS

    n = app_checkpoint.config.neurons
    rec = _planted_recording(n, 24)
    feature = _shown(window, qtbot, rec, index=5)
    expected = principal_trajectory(rec.states(), components=3)
    np.testing.assert_allclose(feature.coordinates[0], expected.coordinates, atol=1e-9)
    # Every vertex is drawn in the run's colour where the view projects it (but the marked one).
    view = feature.view
    xy = view.screen_positions()[0]
    np.testing.assert_allclose(xy, view.project(expected.coordinates))
    assert ((xy > 0) & (xy < [view.width(), view.height()])).all()
    under_marker = tuple(k for k in range(24) if np.hypot(*(xy[k] - xy[5])) < 8)
    assert _share_of_vertices(feature, 0, PATH_COLOURS["run"], skip=under_marker) >= 0.9
    assert _share_of_vertices(feature, 0, MARKER_COLOUR, skip=under_marker) == 0.0
    assert _is_colour(_pixels(view), xy[5], MARKER_COLOUR, view.devicePixelRatioF())
    # The explained variance said is the population module's number.
    assert feature.panel.explained_fraction == pytest.approx(expected.explained.sum(), rel=1e-12)
    assert f"{100 * expected.explained.sum():.1f} %" in feature.panel.explained.text()
    assert feature.panel.explained.text().startswith("PC1–3 explain")
    # A run of one token has no axes: nothing is drawn, and the dock says why.
    one = Recording(n)
    one.append(make_frame(0, np.ones(n)))
    window.session.replace(one)
    feature.refresh()
    assert feature.fit is None and feature.view.paths == []
    assert not (_pixels(feature.view) == _rgb(PATH_COLOURS["run"])).all(axis=-1).any()


def test_the_marker_moves_to_the_shown_tokens_vertex(window, qtbot, app_checkpoint):
    from flyviz.app.population.trajectory_panel import MARKER_COLOUR, PATH_COLOURS

    n = app_checkpoint.config.neurons
    feature = _shown(window, qtbot, _planted_recording(n, 16, seed=5), index=2)
    view = feature.view
    xy = view.screen_positions()[0]
    far = [k for k in range(16) if np.hypot(*(xy[k] - xy[2])) > 14
           and np.hypot(*(xy[k] - xy[11])) > 14]
    ratio = view.devicePixelRatioF()
    for shown, other in ((2, 11), (11, 2)):
        window.show_token(shown)
        feature.refresh()
        assert view.marker == shown
        pixels = _pixels(view)
        assert _is_colour(pixels, xy[shown], MARKER_COLOUR, ratio)
        assert not _is_colour(pixels, xy[other], MARKER_COLOUR, ratio)
        assert _is_colour(pixels, xy[other], PATH_COLOURS["run"], ratio)
        assert not any(_is_colour(pixels, xy[k], MARKER_COLOUR, ratio) for k in far)


def test_a_comparison_draws_both_runs_on_the_untouched_runs_axes(window, qtbot, app_checkpoint):
    from flyviz.app.population.trajectory_panel import PATH_COLOURS

    n = app_checkpoint.config.neurons
    base = _planted_recording(n, 14, seed=2)
    # The intervened run leaves the untouched one after token 4: it goes on faster (along the
    # untouched run's axes) and off in directions of its own.
    away = _planted_recording(n, 14, seed=1).states()
    states = base.states()
    rec = Recording(n, states_dtype="float32")
    for i, state in enumerate(states):
        rec.append(make_frame(i, state + (1.5 * (state - states[4]) + away[i] - away[4]
                                          if i > 4 else 0.0)))
    rec.baseline = base
    feature = _shown(window, qtbot, rec, index=0)
    axes = principal_trajectory(base.states(), components=3)
    np.testing.assert_allclose(feature.coordinates[0], axes.coordinates, atol=1e-9)
    np.testing.assert_allclose(feature.coordinates[1], axes.project(rec.states()), atol=1e-9)
    assert [p.label for p in feature.view.paths] == ["untouched", "intervened"]
    untouched, intervened = PATH_COLOURS["untouched"], PATH_COLOURS["intervened"]
    assert untouched != intervened
    # Each run's vertices show its own colour (the intervened run is drawn on top).
    assert _share_of_vertices(feature, 1, intervened, skip=(0,)) >= 0.9
    # The untouched run shows wherever no intervened vertex lies on it (up to token 4 the
    # two runs are one).
    xy = feature.view.screen_positions()
    covered = tuple(k for k in range(14)
                    if np.hypot(*(xy[1] - xy[0][k]).T).min() < 7 or k == 0)
    assert len(covered) < 14 - 4
    assert _share_of_vertices(feature, 0, untouched, skip=covered) >= 0.9
    # The legend names both, each beside a line of its colour.
    pixels = _pixels(feature.view)
    ratio = feature.view.devicePixelRatioF()
    assert _is_colour(pixels, (19, 12), untouched, ratio)
    assert _is_colour(pixels, (19, 30), intervened, ratio)
    text = feature.panel.explained.text()
    kept = axes.captured(rec.states()).sum()
    assert f"{100 * axes.explained.sum():.1f} % of the untouched run" in text
    assert f"{100 * kept:.1f} % of the intervened" in text


def test_a_click_near_a_vertex_shows_its_token_and_hover_names_it(window, qtbot, app_checkpoint):
    n = app_checkpoint.config.neurons
    feature = _shown(window, qtbot, _planted_recording(n, 20, seed=7), index=0)
    view = feature.view
    xy = view.screen_positions()[0]
    # A vertex with no other within the pick radius, so the nearest one is unambiguous.
    gaps = [min(np.hypot(*(xy[j] - xy[k])) for j in range(20) if j != k) for k in range(20)]
    token = int(np.argmax(gaps))
    assert gaps[token] > 8
    near = QPoint(int(round(xy[token, 0])) + 3, int(round(xy[token, 1])) - 2)
    _move(view, near)
    qtbot.waitUntil(lambda: view.hover_text == f"token {token} 'w{token}'", timeout=3000)
    assert view.hover == (0, token)
    qtbot.mouseClick(view, Qt.MouseButton.LeftButton, pos=near)
    qtbot.waitUntil(lambda: window.state.index == token, timeout=3000)
    feature.refresh()
    assert view.marker == token
    # A click far from every vertex changes nothing; a drag turns the view instead.
    corner = QPoint(view.width() - 3, view.height() - 3)
    if min(np.hypot(*(xy - [corner.x(), corner.y()]).T)) > 20:
        qtbot.mouseClick(view, Qt.MouseButton.LeftButton, pos=corner)
        assert window.state.index == token
    azimuth = view.azimuth
    qtbot.mousePress(view, Qt.MouseButton.LeftButton, pos=QPoint(40, 60))
    _move(view, QPoint(90, 60), Qt.MouseButton.LeftButton)
    qtbot.mouseRelease(view, Qt.MouseButton.LeftButton, pos=QPoint(90, 60))
    assert view.azimuth != azimuth and window.state.index == token
    assert not np.allclose(view.screen_positions()[0], xy)


def test_a_streaming_run_is_projected_as_it_grows_and_refitted_sparingly(
        window, qtbot, app_checkpoint, monkeypatch):
    from flyviz.app.population import trajectory_panel

    fits: list[int] = []
    fit = trajectory_panel.fit_trajectory

    def counted(recording, kept=None):
        fits.append(len(recording))
        return fit(recording, kept)

    monkeypatch.setattr(trajectory_panel, "fit_trajectory", counted)
    n = app_checkpoint.config.neurons
    full = _planted_recording(n, 60, seed=9)
    states = full.states()
    rec = Recording(n, states_dtype="float32")
    rec.append(make_frame(0, states[0], token_text="w0"))
    feature = _feature(window)
    window.session.replace(rec)
    feature.refresh()
    assert feature.fit is None and fits == []           # one token: no axes yet
    for i in range(1, 10):
        window.session.append(make_frame(i, states[i], token_text=f"w{i}"))
        feature.refresh()
        qtbot.waitUntil(lambda: not window.background.busy(feature.FIT), timeout=5000)
    feature.refresh()
    assert len(feature.coordinates[0]) == 10 and fits[0] == 2
    first = feature.fit
    # The next frame is drawn at once, on the axes fitted so far.
    window.session.append(make_frame(10, states[10], token_text="w10"))
    feature.refresh()
    assert feature.fit is first and len(feature.coordinates[0]) == 11
    fits_before = len(fits)
    np.testing.assert_allclose(feature.coordinates[0][10],
                               first.trajectory.project(states[10:11])[0], atol=1e-9)
    for i in range(11, 60):
        window.session.append(make_frame(i, states[i], token_text=f"w{i}"))
        feature.refresh()
        qtbot.waitUntil(lambda: not window.background.busy(feature.FIT), timeout=5000)
    # Fitted again as the run grew, far less often than a token came.
    assert 2 <= len(fits) - fits_before <= 10
    assert len(feature.coordinates[0]) == 60
    # Once frames stop, the axes are the whole run's.
    qtbot.waitUntil(lambda: feature.fit.fitted_on == 60, timeout=5000)
    expected = principal_trajectory(states, components=3)
    np.testing.assert_allclose(feature.coordinates[0], expected.coordinates, atol=1e-9)
    assert feature.panel.explained_fraction == pytest.approx(expected.explained.sum())
    assert "fitted on" not in feature.panel.explained.text()


def test_kept_axes_draw_the_next_run_in_the_same_space(window, qtbot, app_checkpoint):
    n = app_checkpoint.config.neurons
    first = _planted_recording(n, 18, seed=11)
    feature = _shown(window, qtbot, first)
    box = feature.panel.axes_box
    shown = feature.fit.trajectory
    box.setCurrentIndex(box.findData("kept"))
    kept = feature.kept
    assert kept is shown
    second = _planted_recording(n, 12, seed=12)
    feature = _shown(window, qtbot, second)
    np.testing.assert_allclose(feature.coordinates[0], kept.project(second.states()), atol=1e-9)
    held = kept.captured(second.states()).sum()
    assert feature.panel.explained_fraction == pytest.approx(held)
    assert f"kept axes hold {100 * held:.1f} %" in feature.panel.explained.text()
    # Another model forgets the kept axes (they are this model's neurons' directions).
    window.set_checkpoint(app_checkpoint)
    assert feature.kept is None and box.currentData() == "run"
    feature = _shown(window, qtbot, second)
    assert not feature.fit.kept
    box.setCurrentIndex(box.findData("kept"))
    # Back to the run's own axes.
    box.setCurrentIndex(box.findData("run"))
    qtbot.waitUntil(lambda: feature.fit is not None and not feature.fit.kept, timeout=5000)
    np.testing.assert_allclose(feature.coordinates[0],
                               principal_trajectory(second.states()).coordinates, atol=1e-9)


def test_a_hidden_dock_fits_nothing_until_it_is_shown(window, qtbot, app_checkpoint, monkeypatch):
    from flyviz.app.population import trajectory_panel

    fits: list[int] = []
    fit = trajectory_panel.fit_trajectory
    monkeypatch.setattr(trajectory_panel, "fit_trajectory",
                        lambda rec, kept=None: fits.append(len(rec)) or fit(rec, kept))
    feature = window.features["trajectory"]
    feature.dock.hide()
    rec = _planted_recording(app_checkpoint.config.neurons, 9)
    window.session.replace(rec)
    feature.refresh()
    # The barrier: the dock's timers have fired and every background call has reported.
    qtbot.waitUntil(lambda: not feature.refresher.timer.isActive()
                    and not feature.settle.isActive(), timeout=5000)
    background_delivered(window.background)
    assert fits == [] and feature.fit is None
    # Showing the dock is enough for it to catch up.
    _feature(window)
    qtbot.waitUntil(lambda: feature.fit is not None and feature._fit_for is rec, timeout=5000)
    assert fits == [9] and len(feature.coordinates[0]) == 9


def test_a_first_fit_that_comes_after_the_last_frame_is_fitted_again_on_the_whole_run(
        window, qtbot, app_checkpoint, monkeypatch):
    """On a loaded machine the first fit (of the run's first two tokens) can come after the
    run's last frame: once it is in, the axes are fitted again on every token."""
    import threading

    from flyviz.app.population import trajectory_panel

    release = threading.Event()
    fits: list[int] = []
    fit = trajectory_panel.fit_trajectory

    def first_held(recording, kept=None):
        fits.append(len(recording))
        if len(fits) == 1:
            release.wait(60)
        return fit(recording, kept)

    monkeypatch.setattr(trajectory_panel, "fit_trajectory", first_held)
    settled: list[int] = []
    n = app_checkpoint.config.neurons
    states = _planted_recording(n, 6, seed=5).states()
    feature = _feature(window)
    feature.settle.timeout.connect(lambda: settled.append(1))
    try:
        window.session.replace(Recording(n, states_dtype="float32"))
        for i in range(6):
            window.session.append(make_frame(i, states[i], token_text=f"w{i}"))
            feature.refresh()
        # The frames stopped and the dock settled while the first fit was still under way.
        qtbot.waitUntil(lambda: bool(settled), timeout=5000)
        assert fits == [2] and feature.fit is None
    finally:
        release.set()
    qtbot.waitUntil(lambda: feature.fit is not None and feature.fit.fitted_on == 6,
                    timeout=5000)
    assert fits == [2, 6]
    np.testing.assert_allclose(feature.coordinates[0],
                               principal_trajectory(states, components=3).coordinates,
                               atol=1e-9)


def test_a_real_run_is_drawn_on_its_own_axes_once_it_ends(window, qtbot):
    """The model's own run, through the engine thread: when it ends the path is its PCA and the
    marker sits on the last token."""
    feature = _feature(window)
    window.state.run.max_new_tokens = 12
    window.state.run.speed_cap = 0
    with qtbot.waitSignal(window.run_ended, timeout=20_000):
        assert window.run_prompt("Once upon a time there was")
    recording = window.state.recording
    qtbot.waitUntil(lambda: feature.fit is not None and feature._fit_for is recording
                    and feature.fit.fitted_on == len(recording), timeout=10_000)
    feature.refresh()
    expected = principal_trajectory(recording.states(), components=3)
    np.testing.assert_allclose(feature.coordinates[0], expected.coordinates, atol=1e-9)
    assert feature.view.marker == window.state.index == len(recording) - 1
    assert feature.panel.explained_fraction == pytest.approx(expected.explained.sum())


# ----------------------------------------------------------------------------- the atlas's axes
@pytest.fixture(scope="module")
def app_atlas(app_checkpoint, tmp_path_factory):  # noqa: F811
    """An atlas of the test model over a few random stories (it keeps principal axes)."""
    from flyviz.app._testing import make_app_atlas

    return make_app_atlas(app_checkpoint, tmp_path_factory.mktemp("trajectory-atlas"))


def _open_atlas(win, qtbot, path) -> None:
    win.last_error = ""
    win.atlas.open(path)
    qtbot.waitUntil(lambda: win.atlas.atlas is not None or bool(win.last_error), timeout=10_000)
    assert win.atlas.atlas is not None, win.last_error


def test_the_atlas_axes_draw_runs_and_comparisons_in_the_corpus_space(window, qtbot,
                                                                       app_checkpoint, app_atlas):
    from flyviz.analysis.atlas import Atlas
    from flyviz.app.population.trajectory_panel import PATH_COLOURS

    n = app_checkpoint.config.neurons
    first = _planted_recording(n, 20, seed=21)
    feature = _shown(window, qtbot, first)
    box = feature.panel.axes_box
    assert feature.panel.atlas_axes_offered()[0] is False          # no atlas open yet
    _open_atlas(window, qtbot, app_atlas)
    enabled, why = feature.panel.atlas_axes_offered()
    assert enabled and "corpus" in why
    basis = Atlas(app_atlas).principal_axes()
    assert basis is not None and basis.axes.shape == (3, n)
    box.setCurrentIndex(box.findData("atlas"))
    qtbot.waitUntil(lambda: feature.fit is not None and feature.fit.source == "atlas", timeout=5000)
    np.testing.assert_allclose(feature.coordinates[0], basis.project(first.states()), atol=1e-9)
    # Drawn where the view projects those coordinates, in the run's colour.
    view = feature.view
    np.testing.assert_allclose(view.screen_positions()[0], view.project(feature.coordinates[0]))
    assert _share_of_vertices(feature, 0, PATH_COLOURS["run"], skip=(0,)) >= 0.9
    held = basis.captured(first.states()).sum()
    assert feature.panel.explained_fraction == pytest.approx(held)
    assert f"atlas axes hold {100 * held:.1f} %" in feature.panel.explained.text()
    # The next run is drawn on the same axes (never fitted on it).
    second = _planted_recording(n, 12, seed=22)
    feature = _shown(window, qtbot, second)
    assert feature.fit.source == "atlas" and feature.fit.fitted_on == 0
    np.testing.assert_allclose(feature.coordinates[0], basis.project(second.states()), atol=1e-9)
    # A comparison: both runs in the atlas's space.
    base = _planted_recording(n, 10, seed=23)
    rec = _planted_recording(n, 10, seed=24)
    rec.baseline = base
    feature = _shown(window, qtbot, rec)
    np.testing.assert_allclose(feature.coordinates[0], basis.project(base.states()), atol=1e-9)
    np.testing.assert_allclose(feature.coordinates[1], basis.project(rec.states()), atol=1e-9)
    assert feature.fit.others[0] == pytest.approx(basis.captured(rec.states()).sum())
    # Closing the atlas takes its axes away: back to the run's own.
    window.atlas.controller.close("test")
    assert box.currentData() == "run" and not feature.panel.atlas_axes_offered()[0]
    qtbot.waitUntil(lambda: feature.fit is not None and feature.fit.source == "run", timeout=5000)
    np.testing.assert_allclose(feature.coordinates[0],
                               principal_trajectory(base.states()).coordinates, atol=1e-9)
    # So does loading a model (its atlas is closed with the old one).
    _open_atlas(window, qtbot, app_atlas)
    box.setCurrentIndex(box.findData("atlas"))
    assert feature.axes_choice == "atlas"
    window.set_checkpoint(app_checkpoint)
    assert box.currentData() == "run" and not feature.panel.atlas_axes_offered()[0]
    feature = _shown(window, qtbot, second)
    assert feature.fit.source == "run"


def test_an_atlas_without_axes_leaves_the_entry_disabled_and_says_why(window, qtbot, tmp_path,
                                                                      app_checkpoint, app_atlas):
    old = atlas_without_axes(app_atlas, tmp_path / "old.atlas")
    feature = _shown(window, qtbot, _planted_recording(app_checkpoint.config.neurons, 9))
    _open_atlas(window, qtbot, old)
    enabled, why = feature.panel.atlas_axes_offered()
    assert not enabled and "before flyviz kept them" in why and "flyviz atlas" in why
    assert window.atlas.atlas.principal_axes() is None
    # Asked for anyway (a script), the choice is refused and the run's own axes stay.
    feature.choose_axes("atlas")
    assert feature.axes_choice == "run" and feature.panel.axes_box.currentData() == "run"
    assert "before flyviz kept them" in window.statusBar().currentMessage()
    assert feature.fit is not None and feature.fit.source == "run"
