"""What the window draws: the scrubbed token's state in the cloud, picking, the inspector."""

from __future__ import annotations

import numpy as np
import pytest
from app_conftest import (centre_colour, drawn, isolated_neurons, lit_neurons_far_apart,
                          plain_display, screen_positions)
from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QImage

from flyviz.app._testing import one_hot_recording
from flyviz.render.picking import project_points

pytestmark = pytest.mark.gui


def _brightness(rgba: np.ndarray) -> np.ndarray:
    return rgba[..., :3].astype(np.float32).max(axis=-1)


def _disc_max(lum: np.ndarray, xy: tuple[float, float], radius: int = 4) -> float:
    x, y = int(round(xy[0])), int(round(xy[1]))
    return float(lum[max(0, y - radius):y + radius + 1, max(0, x - radius):x + radius + 1].max())


def _screen(win) -> tuple[np.ndarray, float]:
    """Every neuron's canvas position in physical pixels, and the pixel ratio."""
    ratio = win.brain.canvas.native.devicePixelRatioF()
    xy, _, _ = project_points(win.brain.positions, win.brain.canvas_transform())
    return xy * ratio, ratio


def _prepare(win, qtbot, lit_count: int = 3) -> list[int]:
    """Fixed colour scale, no easing; pick isolated on-screen neurons."""
    win.state.display.smoothing_s = 0.0
    win.state.display.auto_scale = False
    win.state.display.limit = 1.0
    win.state.display.mode = "abs"
    assert win.brain.mode == "abs" and not win.brain.auto and win.brain.smoothing_s == 0
    w, h = win.brain.canvas.size
    xy, _ = _screen(win)
    neurons = lit_neurons_far_apart(xy / win.brain.canvas.native.devicePixelRatioF(),
                                    win.brain.visible, lit_count, min_gap=14.0, size=(w, h))
    assert len(neurons) == lit_count, "the test layout has too few isolated neurons"
    return neurons


def test_scrubbing_shows_that_tokens_state_in_the_cloud(window, qtbot, app_checkpoint):
    win = window
    a, b, c = _prepare(win, qtbot)
    n = app_checkpoint.config.neurons
    win.session.replace(one_hot_recording(n, [a, b, c]))       # frame i lights one neuron
    xy, _ = _screen(win)

    images = {}
    for index in (0, 2, 1):
        win.show_token(index)
        qtbot.waitUntil(lambda: win.display.showing(index), timeout=3000)  # noqa: B023
        images[index] = _brightness(win.brain.render_image())

    for index, lit in enumerate((a, b, c)):
        lum = images[index]
        others = [m for m in (a, b, c) if m != lit]
        on = _disc_max(lum, xy[lit])
        off = max(_disc_max(lum, xy[m]) for m in others)
        assert on > 200, f"token {index}: driven neuron {lit} is not lit ({on})"
        assert off < on / 3, f"token {index}: quiet neurons look lit ({off} vs {on})"
        # Away from the driven neuron the brain is dark: quiet neurons are faint dots.
        mask = np.ones_like(lum, bool)
        x, y = (int(round(v)) for v in xy[lit])
        mask[max(0, y - 30):y + 31, max(0, x - 30):x + 31] = False
        mask[:, -90:] = False                                   # the colourbar
        assert np.percentile(lum[mask], 99.9) < on / 3
    # The timeline and the panels follow the same frame.
    assert win.timeline.slider.value() == 1
    assert win.session.index == 1 and not win.session.live
    assert win.topk_panel.title.text().startswith("Next token after #1")
    # Every panel counts the token from 0, as the plots' axes and the command line's --token
    # do (the timeline and the Neuron dock said "token 2" where the rest said 1).
    assert win.timeline.counter.text().startswith("token 1 / 2")
    win.select_neuron(b)
    win.refresh_panels()
    assert win.inspector.fields["activation"].text().endswith("at token 1")


def test_before_any_run_the_brain_rests_in_a_neutral_tone_and_a_run_keeps_its_colours(
        window, qtbot, app_checkpoint):
    """Pixel facts at 1280x800: before the first run every drawn soma is a disc of the resting
    tone (grey-blue, well off the background); once a frame is shown each neuron is drawn in
    its colormap colour exactly as without a resting brain, quiet ones as faint as ever; an
    empty recording (Reset) rests again."""
    from flyviz.record.recording import Recording
    from flyviz.render.colormaps import (_STOPS, RESTING_ALPHA, RESTING_RGB, _ramp,
                                         display_curve, magnitude)
    from flyviz.render.style import BACKGROUND

    win = window
    win.resize(1280, 800)
    qtbot.waitUntil(lambda: (win.width(), win.height()) == (1280, 800), timeout=3000)
    plain_display(win)
    assert len(win.session.recording) == 0
    resting = drawn(win, qtbot)
    assert win.brain.cloud.resting
    background = np.round(np.asarray(BACKGROUND[:3]) * 255)
    want_rest = np.clip(255.0 * (np.asarray(BACKGROUND[:3])
                                 + np.asarray(RESTING_RGB) * RESTING_ALPHA), 0, 255)
    assert np.ptp(want_rest - background) < 20          # neutral: no hue of its own
    xy = screen_positions(win)
    h, w = resting.shape[:2]
    on_screen = [i for i in np.flatnonzero(win.brain.visible)
                 if 4 <= xy[i, 0] < w - 90 and 4 <= xy[i, 1] < h - 4]     # clear of the bar
    assert len(on_screen) > 300
    seen = [np.abs(centre_colour(resting, xy[i], radius=1) - background).max() for i in on_screen]
    assert np.mean(np.asarray(seen) > 40) > 0.95        # (nearly) every soma is visible
    n = app_checkpoint.config.neurons
    lone = isolated_neurons(win, np.arange(n), 6)
    assert len(lone) >= 3, "the test layout has too few isolated neurons"
    for neuron in lone:
        got = centre_colour(resting, xy[neuron])
        assert np.abs(got - want_rest).max() <= 3, (neuron, got, want_rest)

    # A shown state: the lit neuron and the quiet ones in the colours the colormap gives.
    lit = lone[0]
    win.session.replace(one_hot_recording(n, [lit], value=1.0), index=0)
    qtbot.waitUntil(lambda: win.display.showing(0), timeout=3000)
    image = drawn(win, qtbot)
    assert not win.brain.cloud.resting
    low, high = win.brain.value_range
    colormap = win.brain.colormap
    for neuron in lone:
        value = 1.0 if neuron == lit else 0.0
        # The shader's colour of the value (the table's 256 entries are too coarse at zero,
        # where brightness grows as a square root).
        coord = np.clip((value - low) / (high - low), 0.0, 1.0)
        rgb = _ramp(_STOPS[colormap], np.array([coord]))[0]
        alpha = display_curve(magnitude(np.array([value]), colormap, low, high))[0]
        want = np.clip(255.0 * (np.asarray(BACKGROUND[:3]) + rgb * alpha), 0, 255)
        got = centre_colour(image, xy[neuron])
        assert np.abs(got - want).max() <= 3, (neuron, value, got, want)
    # Reset: nothing to show, the brain at rest again.
    win.session.replace(Recording(n))
    qtbot.waitUntil(lambda: win.brain.cloud.resting, timeout=3000)
    again = drawn(win, qtbot)
    assert np.abs(centre_colour(again, xy[lone[1]]) - want_rest).max() <= 3


def test_easing_moves_the_shown_activity_toward_the_new_frame(window, qtbot, app_checkpoint):
    win = window
    (a,) = _prepare(win, qtbot, 1)
    win.state.display.smoothing_s = 0.3
    n = app_checkpoint.config.neurons
    win.session.replace(one_hot_recording(n, [a, a]), index=0)
    win.refresh_panels()
    win.brain.snap()
    assert float(win.brain.shown_activity[a]) == pytest.approx(1.0, abs=1e-3)
    win.brain.set_target(np.zeros(n, np.float32))
    moved = win.brain.advance(0.05)
    value = float(win.brain.shown_activity[a])
    assert moved and 0.0 < value < 1.0                          # partway, not a jump
    for _ in range(100):
        win.brain.advance(0.05)
    assert float(win.brain.shown_activity[a]) == 0.0            # and it arrives


def test_clicking_a_neuron_selects_it_and_the_inspector_shows_it(window, qtbot, app_checkpoint):
    win = window
    a, b = _prepare(win, qtbot, 2)
    n = app_checkpoint.config.neurons
    win.session.replace(one_hot_recording(n, [a, b, a]))
    x, y = win.brain.project(a)
    qtbot.mouseClick(win.brain.canvas.native, Qt.MouseButton.LeftButton,
                     pos=QPoint(int(round(x)), int(round(y))))
    qtbot.waitUntil(lambda: win.selected_neuron == a, timeout=3000)
    assert win.inspector.fields["index"].text() == f"#{a}"
    anat = app_checkpoint.anatomy
    assert win.inspector.fields["body_id"].text() == str(int(anat.body_id[a]))
    assert win.inspector.fields["superclass"].text() == anat.superclass[a]
    # Its activation over the recording: lit at tokens 0 and 2, quiet at 1.
    trace = win.inspector.trace_curve.getData()[1]
    np.testing.assert_allclose(trace, [1.0, 0.0, 1.0], atol=1e-3)
    # Strongest inputs are the CSR row, strongest first.
    off = app_checkpoint.w_offsets
    row = slice(int(off[a]), int(off[a + 1]))
    weights = app_checkpoint.w_values[row]
    strongest = int(app_checkpoint.w_indices[row][np.argmax(np.abs(weights))])
    assert win.inspector.inputs_table.item(0, 0).text() == f"#{strongest}"
    # Outputs come from the transposed graph: every listed partner has a synapse from a.
    table = win.inspector.outputs_table
    for r in range(table.rowCount()):
        post = int(table.item(r, 0).data(Qt.ItemDataRole.UserRole))
        cols = app_checkpoint.w_indices[int(off[post]):int(off[post + 1])]
        assert a in cols
    # Clicking a partner selects it.
    if table.rowCount():
        partner = int(table.item(0, 0).data(Qt.ItemDataRole.UserRole))
        table.cellClicked.emit(0, 0)
        assert win.selected_neuron == partner
        assert win.inspector.fields["index"].text() == f"#{partner}"
    # Clicking empty space clears the selection.
    qtbot.mouseClick(win.brain.canvas.native, Qt.MouseButton.LeftButton, pos=QPoint(3, 3))
    qtbot.waitUntil(lambda: win.selected_neuron is None, timeout=3000)


def test_superclass_filter_dims_the_other_neurons(window, qtbot, app_checkpoint):
    win = window
    _prepare(win, qtbot, 1)
    anat = app_checkpoint.anatomy
    n = app_checkpoint.config.neurons
    xy, _ = _screen(win)
    w, h = win.brain.canvas.size
    classes = np.array(anat.superclass)
    target = "cb_intrinsic"
    candidates = lit_neurons_far_apart(xy / win.brain.canvas.native.devicePixelRatioF(),
                                       anat.valid, 40, min_gap=14.0, size=(w, h))
    inside = next(i for i in candidates if classes[i] == target)
    outside = next(i for i in candidates if classes[i] != target)
    state = np.zeros(n, np.float32)
    state[[inside, outside]] = 1.0
    rec = one_hot_recording(n, [inside])
    rec.clear()
    from flyviz.app._testing import make_frame

    rec.append(make_frame(0, state))
    win.session.replace(rec)
    qtbot.waitUntil(lambda: win.display.showing(0), timeout=3000)
    before = _brightness(win.brain.render_image())
    win.state.set_filter(target)
    assert win.brain.emphasis is not None                      # applied at once
    after = _brightness(win.brain.render_image())
    assert _disc_max(after, xy[inside]) >= 0.9 * _disc_max(before, xy[inside])
    assert _disc_max(after, xy[outside]) < 0.5 * _disc_max(before, xy[outside])
    assert "match" in win.controls.filter_note.text()


def test_screenshot_of_the_brain_at_double_scale(window, qtbot, app_checkpoint, tmp_path):
    win = window
    (a,) = _prepare(win, qtbot, 1)
    win.session.replace(one_hot_recording(app_checkpoint.config.neurons, [a]))
    qtbot.waitUntil(lambda: win.display.showing(0), timeout=3000)
    path = win.save_screenshot(tmp_path / "brain", "brain", 2.0)
    assert path.suffix == ".png"
    image = QImage(str(path))
    assert (image.width(), image.height()) == (2 * win.brain.width(), 2 * win.brain.height())
    x, y = win.brain.project(a)
    colour = image.pixelColor(int(round(2 * x)), int(round(2 * y)))
    assert max(colour.red(), colour.green(), colour.blue()) > 200   # the lit neuron, re-rendered
    full = QImage(str(win.save_screenshot(tmp_path / "window.png", "window", 1.0)))
    assert full.width() >= win.width() and full.height() >= win.height()


def test_missing_somata_are_hidden_and_counted():
    from flyviz.app.brain.brain_view import anatomy_note
    from flyviz.model.checkpoint import Anatomy

    valid = np.zeros(49_393, bool)
    valid[:44_279] = True
    anatomy = Anatomy(positions=np.zeros((49_393, 3), np.float32), valid=valid, kind="measured")
    assert anatomy_note(anatomy, 49_393) == ("44,279 of 49,393 neurons have a measured soma; "
                                             "5,114 hidden")
    anatomy.kind = "synthetic"
    assert anatomy_note(anatomy, 49_393).startswith("synthetic soma positions")


def test_model_without_anatomy_is_drawn_on_a_labelled_graph_layout(qtbot, app_checkpoint,
                                                                   tmp_path):
    import dataclasses

    from app_conftest import make_window

    win = make_window(qtbot, dataclasses.replace(app_checkpoint, anatomy=None), tmp_path)
    assert win.anatomy.kind == "layout"
    assert win.brain.note.text() == "layout computed from the graph, not anatomy"
    assert win.brain.visible.any()
    # The synthetic anatomy of the test model is labelled as such, and hidden somata counted.
    win.set_checkpoint(app_checkpoint)
    hidden = app_checkpoint.config.neurons - app_checkpoint.anatomy.n_valid
    assert win.brain.note.text().startswith("synthetic soma positions")
    assert f"{hidden:,} hidden" in win.brain.note.text()
    assert not win.brain.visible[~app_checkpoint.anatomy.valid].any()
    win.close()


def test_text_hover_and_top_k_bars_describe_the_shown_frame(window, qtbot, app_checkpoint):
    from flyviz.app._testing import make_frame
    from flyviz.record.recording import Recording

    win = window
    n = app_checkpoint.config.neurons
    rec = Recording(n)
    rec.append(make_frame(0, np.zeros(n), generated=False, token_text="Once"))
    rec.append(make_frame(1, np.zeros(n), token_text=" upon", top_k=6))
    rec.append(make_frame(2, np.zeros(n), token_text=" a", top_k=6))
    win.session.replace(rec, index=1)
    win.refresh_panels()
    tokens = win.text_panel.tokens()
    # make_frame's input and predicted token are the same text: frame 1 consumes the last
    # prompt token " upon" and predicts " upon"; frame 2's input is that prediction.
    assert [(t.text, t.generated) for t in tokens] == [("Once", False), (" upon", False),
                                                       (" upon", True), (" a", True)]
    # Frame 1 shows the text up to the token it predicted.
    assert win.text_panel.toPlainText() == "Once upon upon"
    tip = win.text_panel.piece_tooltip(2)
    assert f"probability {rec[1].probability:.1%}" in tip and "t0" in tip and "t4" in tip
    # Hovering the third token ("Once" + " upon" before it) shows that tooltip.
    from PySide6.QtGui import QTextCursor
    from PySide6.QtWidgets import QToolTip

    panel = win.text_panel
    cursor = QTextCursor(panel.document())
    cursor.setPosition(len("Once upon") + 2)
    point = panel.cursorRect(cursor).center()
    assert panel.anchorAt(point) == "tok:2"
    from PySide6.QtCore import QEvent, QPointF
    from PySide6.QtGui import QMouseEvent
    from PySide6.QtWidgets import QApplication

    local = QPointF(point)
    move = QMouseEvent(QEvent.Type.MouseMove, local, panel.viewport().mapToGlobal(local),
                       Qt.MouseButton.NoButton, Qt.MouseButton.NoButton,
                       Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(panel.viewport(), move)
    qtbot.waitUntil(lambda: QToolTip.isVisible(), timeout=2000)
    assert f"{rec[1].probability:.1%}" in QToolTip.text()
    win.topk_panel.k_box.setValue(3)
    xs = win.topk_panel.bars.opts["width"]
    assert len(xs) == 3
    np.testing.assert_allclose(xs, rec[1].top_k_probabilities[:3])
    shown = [label.toPlainText() for label in win.topk_panel.labels if label.isVisible()]
    assert [s.split("'")[1] for s in shown] == list(rec[1].top_k_text[:3])


def test_view_and_colour_keys(window, qtbot):
    from flyviz.render.camera import VIEW_PRESETS

    win = window
    camera = win.brain.view.camera
    for key, name in ((Qt.Key.Key_2, "top"), (Qt.Key.Key_3, "side"), (Qt.Key.Key_1, "front")):
        qtbot.keyClick(win, key)
        assert (camera.azimuth, camera.elevation) == pytest.approx(VIEW_PRESETS[name])
        assert win.brain.view_label.text().startswith(f"{name} view")
    mode = win.brain.mode
    qtbot.keyClick(win, Qt.Key.Key_M)
    assert win.brain.mode != mode and win.brain.cloud.mode == win.brain.mode
    qtbot.waitUntil(lambda: win.raster_panel._mode == win.brain.mode, timeout=3000)


def test_dragging_the_camera_draws_fewer_neurons_until_it_settles(window, qtbot):
    from PySide6.QtCore import QPointF
    from PySide6.QtGui import QMouseEvent
    from PySide6.QtWidgets import QApplication

    win = window
    brain = win.brain
    if not brain.software_gl:
        pytest.skip("fewer neurons while moving only with a software OpenGL")
    canvas = brain.canvas.native
    camera = brain.view.camera
    azimuth = camera.azimuth
    start = QPointF(canvas.width() / 2, canvas.height() / 2)

    def send(kind, point, buttons):
        event = QMouseEvent(kind, point, canvas.mapToGlobal(point), Qt.MouseButton.LeftButton,
                            buttons, Qt.KeyboardModifier.NoModifier)
        QApplication.sendEvent(canvas, event)

    send(QMouseEvent.Type.MouseButtonPress, start, Qt.MouseButton.LeftButton)
    for dx in range(10, 110, 10):
        send(QMouseEvent.Type.MouseMove, start + QPointF(dx, 0), Qt.MouseButton.LeftButton)
    assert camera.azimuth != azimuth                           # the drag orbited the camera
    assert brain.cloud.detail == brain.interaction_detail < 1.0
    send(QMouseEvent.Type.MouseButtonRelease, start + QPointF(100, 0), Qt.MouseButton.NoButton)
    qtbot.waitUntil(lambda: brain.cloud.detail == 1.0, timeout=3000)
    assert win.selected_neuron is None                         # a drag is not a click


def test_the_brain_outline_is_drawn_behind_the_cloud_and_toggles_from_the_view_menu(window,
                                                                                     qtbot):
    win = window
    win.state.display.smoothing_s = 0.0
    action = win.actions_registry["toggle_outline"]
    assert not action.isChecked() and not win.state.mesh.outline_shown
    bare = _brightness(win.brain.render_image())
    action.trigger()                                   # View → Brain outline (O)
    assert win.state.mesh.outline_shown and action.isChecked()
    assert len(win.brain.meshes) == 1 and win.brain.shell is not None
    shelled = _brightness(win.brain.render_image())
    xy, _ = _screen(win)
    inside = xy[win.brain.visible].mean(axis=0).round().astype(int)
    lighter = shelled - bare > 4
    x, y = inside
    assert lighter[y - 20:y + 21, x - 20:x + 21].mean() > 0.5   # the shell around the brain
    assert not lighter[:10, :10].any()                           # not in the empty corner
    # The same picture in a screenshot of another size (the offscreen renderer draws it too).
    big = _brightness(win.brain.render_at(640, 400))
    small_bare = win.brain
    win.state.mesh.outline_shown = False                         # the state drives the menu
    assert not action.isChecked() and win.brain.meshes == ()
    unshelled_big = _brightness(small_bare.render_at(640, 400))
    assert (big - unshelled_big > 4)[150:250, 270:370].mean() > 0.5
