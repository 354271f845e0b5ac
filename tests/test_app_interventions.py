"""The Interventions dock: interventions change runs, comparisons show Δx, recordings keep both."""

from __future__ import annotations

import numpy as np
import pytest
from app_conftest import lit_neurons_far_apart, make_window

from flyviz.model.interventions import Silence
from flyviz.model.selection import neuron_index

pytestmark = pytest.mark.gui


def _run(win, qtbot, prompt: str = "Tom and his dog", tokens: int = 10):
    win.state.run.temperature = 0.0
    win.state.run.max_new_tokens = tokens
    win.state.run.speed_cap = 0
    with qtbot.waitSignal(win.run_ended, timeout=20_000) as ended:
        assert win.run_prompt(prompt)
    assert ended.args[0] == "done"
    return win.session.recording


def test_silencing_a_superclass_from_the_dock_changes_the_run(window, qtbot, app_checkpoint):
    win = window
    panel = win.interventions.panel
    plain = _run(win, qtbot)
    plain_states = np.stack([plain.state(i) for i in range(len(plain))])

    # The superclass highlight fills the query; the count is live; Add puts it in the list.
    superclass = win.controls.superclass.itemData(1)
    win.state.set_filter(superclass)
    panel.highlight_button.click()
    assert panel.query.text() == f"superclass:{superclass}"
    expected = neuron_index(app_checkpoint).select(f"superclass:{superclass}")
    assert panel.count.text() == f"{expected.size:,} neurons selected"
    panel.add_button.click()
    assert panel.list.count() == 1 and panel.list.item(0).text() == f"silence superclass:{superclass}"

    run = _run(win, qtbot)
    assert run.metadata["interventions"][0]["kind"] == "silence"
    states = np.stack([run.state(i) for i in range(len(run))])
    assert np.all(states[:, expected] == 0)                 # silenced after every step
    assert np.abs(plain_states[:, expected]).max() > 0.01
    assert not np.allclose(states, plain_states, atol=1e-3)

    # Switched off: the untouched run again.
    panel.set_enabled(0, False)
    again = _run(win, qtbot)
    assert "interventions" not in again.metadata
    np.testing.assert_allclose(np.stack([again.state(i) for i in range(len(again))]),
                               plain_states, atol=2e-3)


def test_a_bad_query_is_one_line_under_the_field(window, qtbot):
    panel = window.interventions.panel
    panel.query.setText("superclas:foo")
    panel.update_count()
    assert "\n" not in panel.count.text() and "superclass" in panel.count.text()
    assert panel.add_from_form() is None and panel.list.count() == 0


def test_compare_with_untouched_runs_both_and_shows_delta(window, qtbot, app_checkpoint, tmp_path):
    win = window
    superclass = win.controls.superclass.itemData(1)
    win.state.run.temperature = 0.0
    win.state.run.max_new_tokens = 10
    win.state.run.speed_cap = 0
    with qtbot.waitSignal(win.run_ended, timeout=20_000) as ended:
        ok = win.interventions.compare_with([Silence(f"superclass:{superclass}")],
                                            prompt="Tom and his dog")
        assert ok, win.last_error
    assert ended.args[0] == "done"
    rec = win.session.recording
    assert rec.baseline is not None and len(rec.baseline) == len(rec)
    info = rec.metadata["comparison"]
    assert info["mode"] == "forced" and len(info["kl"]) == len(rec)
    assert win.display.layer.name == "delta" and win.state.colour_layers["delta"].available
    assert win.colour_by.current == "delta" and win.colour_by.actions["delta"].isChecked()
    assert win.brain.colormap == "difference"
    win.grab().save(str(tmp_path / "compare.png"))
    # The panels show both runs: two texts, paired bars, the KL trace.
    qtbot.waitUntil(lambda: "untouched" in win.text_panel.toPlainText(), timeout=3000)
    text = win.text_panel.toPlainText()
    assert text.count("Tom and his dog") == 2
    assert "untouched (grey) → intervened" in win.topk_panel.title.text()
    # As many pairs as fit legibly in the dock (the title says when that is fewer than k).
    topk = win.topk_panel
    shown = len(topk.untouched_bars.opts["width"])
    assert shown == min(topk.k, topk.rows_that_fit())
    assert shown == topk.k or f"top {shown} of {topk.k}" in topk.title.text()
    kl_x, kl_y = win.trace_panel.kl.getData()
    np.testing.assert_allclose(kl_y, np.nan_to_num(np.array(info["kl"], float)), rtol=1e-6)


def _lum(rgba: np.ndarray) -> np.ndarray:
    return rgba[..., :3].astype(np.float32).max(axis=-1)


def _at(img: np.ndarray, xy, radius: int = 4) -> np.ndarray:
    x, y = int(round(xy[0])), int(round(xy[1]))
    return img[max(0, y - radius):y + radius + 1, max(0, x - radius):x + radius + 1]


def _hand_made_comparison(neurons: int, changed: dict[int, float], frames: int = 3):
    """Both runs share a busy state; the intervened one differs at ``changed`` only."""
    from flyviz.app._testing import make_frame
    from flyviz.record.recording import Recording

    rng = np.random.default_rng(1)
    shared = rng.uniform(0.4, 0.8, neurons).astype(np.float32) * rng.choice([-1, 1], neurons)
    meta = {"model_name": "hand-made", "prompt": "ab",
            "comparison": {"mode": "forced", "kl": [], "mean_abs_delta": []}}
    rec = Recording(neurons, meta)
    rec.baseline = Recording(neurons, {"model_name": "hand-made", "prompt": "ab"})
    for i in range(frames):
        other = shared.copy()
        for neuron, delta in changed.items():
            other[neuron] += delta
        rec.baseline.append(make_frame(i, shared))
        rec.metadata["comparison"]["kl"].append(0.1 * i)
        rec.metadata["comparison"]["mean_abs_delta"].append(0.01)
        rec.append(make_frame(i, other))
    return rec


def test_in_delta_mode_only_the_changed_neurons_are_lit(window, qtbot, app_checkpoint):
    from flyviz.render.picking import project_points

    win = window
    win.state.display.smoothing_s = 0.0
    win.state.display.point_size = 4.0
    ratio = win.brain.canvas.native.devicePixelRatioF()
    xy, _, _ = project_points(win.brain.positions, win.brain.canvas_transform())
    a, b, quiet = lit_neurons_far_apart(xy, win.brain.visible, 3, min_gap=14.0,
                                        size=win.brain.canvas.size)
    xy = xy * ratio
    n = app_checkpoint.config.neurons
    win.session.replace(_hand_made_comparison(n, {a: 0.9, b: -0.9}))
    win.show_token(1)
    qtbot.waitUntil(lambda: win.display.showing(1), timeout=3000)
    assert win.display.layer.name == "delta" and win.state.colour_layers["delta"].available
    img = win.brain.render_image()
    spot_a, spot_b = _at(img, xy[a]), _at(img, xy[b])
    assert _lum(spot_a).max() > 150 and _lum(spot_b).max() > 150
    ra, ga, ba = spot_a.reshape(-1, 4)[_lum(spot_a).argmax()][:3].astype(int)
    rb, gb, bb = spot_b.reshape(-1, 4)[_lum(spot_b).argmax()][:3].astype(int)
    assert ra > ba + 40 and bb > rb + 40                   # positive warm, negative blue-violet
    # Every other neuron is unchanged, so dark: nothing lit away from a and b.
    lit = _lum(img) > 60
    ys, xs = np.nonzero(lit)
    near = np.minimum(np.hypot(xs - xy[a][0], ys - xy[a][1]),
                      np.hypot(xs - xy[b][0], ys - xy[b][1]))
    far = np.zeros_like(lit)
    far[ys, xs] = near > 12 * ratio
    assert not far.any(), f"{int(far.sum())} lit pixels away from the changed neurons"
    assert _lum(_at(img, xy[quiet])).max() < 40
    assert win.brain.colormap == "difference"
    assert "intervened − untouched" in win.brain.colorbar_caption.text()

    # The same recording in the state's colours lights the whole brain.
    win.interventions.panel.delta_box.setChecked(False)
    qtbot.waitUntil(lambda: win.display.showing(1), timeout=3000)
    state_img = win.brain.render_image()
    # The colourbar's caption changes with the layer, so the canvas may change width: project again.
    xy, _, _ = project_points(win.brain.positions, win.brain.canvas_transform())
    xy = xy * ratio
    assert _lum(_at(state_img, xy[quiet])).max() > 100


def test_inspector_shows_the_strongest_currents_into_the_neuron_now(window, qtbot,
                                                                    app_checkpoint):
    win = window
    rec = _run(win, qtbot, tokens=6)
    ck = app_checkpoint
    offsets, indices = np.asarray(ck.w_offsets), np.asarray(ck.w_indices)
    values = np.asarray(ck.w_values, np.float32)
    neuron = int(np.argmax(np.diff(offsets)))              # the neuron with most inputs
    win.select_neuron(neuron)
    index = 5
    win.show_token(index)
    qtbot.waitUntil(lambda: win.display.showing(index), timeout=3000)
    table = win.inspector.currents_table
    lo, hi = offsets[neuron], offsets[neuron + 1]
    flows = values[lo:hi] * rec.state(index - 1)[indices[lo:hi]]
    strongest = indices[lo:hi][np.argsort(-np.abs(flows), kind="stable")]
    assert table.rowCount() == min(12, hi - lo)
    shown = [int(table.item(r, 0).text()[1:]) for r in range(table.rowCount())]
    assert shown == [int(i) for i in strongest[:table.rowCount()]]
    top = float(table.item(0, 3).text())
    assert top == pytest.approx(float(flows[np.argmax(np.abs(flows))]), abs=1e-3)
    w, act = float(table.item(0, 1).text()), float(table.item(0, 2).text())
    assert w * act == pytest.approx(top, abs=2e-3)


def test_a_saved_comparison_reopens_with_its_interventions(window, qtbot, app_checkpoint,
                                                           tmp_path):
    win = window
    superclass = win.controls.superclass.itemData(1)
    win.state.run.temperature = 0.0
    win.state.run.max_new_tokens = 6
    win.state.run.speed_cap = 0
    with qtbot.waitSignal(win.run_ended, timeout=20_000):
        assert win.interventions.compare_with([Silence(f"superclass:{superclass}")],
                                              mode="free", prompt="Tom and his dog")
    rec = win.session.recording
    path = win.save_recording(tmp_path / "cmp")
    # Another window (a fresh start) opens it: interventions, mode, both runs, Δx.
    other = make_window(qtbot, app_checkpoint, tmp_path, "other.ini")
    try:
        assert other.interventions.panel.list.count() == 0
        opened = other.open_recording(path)
        panel = other.interventions.panel
        assert [str(i) for i in panel.enabled()] == [f"silence superclass:{superclass}"]
        assert panel.mode.currentData() == "free"
        assert opened.baseline is not None and len(opened.baseline) == len(rec.baseline)
        assert opened.metadata["comparison"]["kl"] == pytest.approx(
            rec.metadata["comparison"]["kl"], nan_ok=True)
        assert other.display.layer.name == "delta"
        qtbot.waitUntil(lambda: "untouched" in other.text_panel.toPlainText(), timeout=3000)
        # Rings show what was silenced.
        silenced = neuron_index(app_checkpoint).select(f"superclass:{superclass}")
        assert set(other.picking.marks.intervened.tolist()) == set(silenced.tolist())
    finally:
        other.close()


def test_a_comparison_movie_is_in_delta_colours_with_both_texts(window, qtbot, app_checkpoint,
                                                                tmp_path, monkeypatch):
    from PIL import Image

    import flyviz.app.window.export_dialog as export_dialog
    from flyviz.export import ExportOptions

    win = window
    n = app_checkpoint.config.neurons
    rec = _hand_made_comparison(n, {5: 0.9, 17: -0.9}, frames=3)
    win.session.replace(rec)
    # File > Export movie hands the dialog the Δx layer and both texts.
    calls = []
    monkeypatch.setattr(export_dialog, "run_export_dialog",
                        lambda parent, recording, anatomy, name, **style: calls.append(style))
    win.actions_by_name["export_movie"].trigger()
    layer, overlays = calls[0]["style"].layer, calls[0]["overlays"]
    assert layer.name == "delta" and layer.colormap == "difference"
    lines = overlays(0, 3)[-1]
    assert lines.prompt.startswith("untouched: ab") and "intervened (top-1): " in lines.prompt

    # What the app's export (run_export, in this process, beside the shown window)
    # then draws: only the changed neurons lit, both texts at the bottom.
    options = ExportOptions(size=(640, 480), fps=4, frames_per_token=1, orbit=0.0,
                            point_size=6.0)
    frames = {}
    for name, style, contents in (("delta", options.cloud_style().with_layer(layer), overlays),
                                  ("state", options.cloud_style(), None)):
        path, error = export_dialog.run_export(win, rec, app_checkpoint.anatomy, tmp_path / name,
                                               options, "test", style=style, overlays=contents)
        assert error is None, error
        last = sorted(path.glob("*.png"))[-1]
        frames[name] = np.asarray(Image.open(last).convert("RGB"))
    Image.fromarray(frames["delta"]).save(tmp_path / "delta.png")
    cloud = (slice(80, 360), slice(0, 460))                   # the brain, above the text
    lit = {k: int((v[cloud].max(axis=-1) > 100).sum()) for k, v in frames.items()}
    # The state movie lights the busy brain; the Δx movie only neurons 5 and 17.
    assert lit["state"] > 300 and 0 < lit["delta"] < lit["state"] / 10
    brain = frames["delta"][40:380, :470].astype(int)         # below the title, left of the bars
    red, blue = brain[..., 0] - brain[..., 2], brain[..., 2] - brain[..., 0]
    assert (red > 80).sum() > 3 and (blue > 80).sum() > 3     # +0.9 red, -0.9 blue
    band = frames["delta"][400:].max(axis=-1)
    rows = np.flatnonzero((band > 120).sum(axis=1) > 3)
    assert rows.size and rows.max() - rows.min() > 14          # two lines of text (one: ~10)


def test_picking_in_the_view_fills_the_query(window, qtbot, app_checkpoint):
    from flyviz.render.picking import project_points

    win = window
    feature, panel = win.interventions, win.interventions.panel
    a, b = [int(i) for i in np.flatnonzero(win.brain.visible)[:2]]
    win.brain.pick_clicked.emit(a, False)
    win.brain.pick_clicked.emit(b, True)                     # shift-click adds
    assert feature.pick.neurons.tolist() == sorted([a, b])
    assert panel.pick_button.text() == "Pick (2)"
    assert set(win.picking.marks.picked.tolist()) == {a, b}     # ringed in the view
    win.brain.pick_clicked.emit(-1, True)                    # a missed shift-click keeps them
    assert len(feature.pick) == 2
    # An outline around the left half of the canvas picks every drawn neuron in it.
    w, h = win.brain.canvas.size
    outline = np.array([[0, 0], [w / 2, 0], [w / 2, h], [0, h]], float)
    xy, _, in_front = project_points(win.brain.positions, win.brain.canvas_transform())
    expected = np.flatnonzero(win.brain.visible & in_front & (xy[:, 0] > 0) & (xy[:, 0] < w / 2)
                              & (xy[:, 1] > 0) & (xy[:, 1] < h))
    inside = win.picking.lasso.select(outline)
    assert set(inside.tolist()) == set(expected.tolist()) and inside.size > 10
    win.picking.lasso.picked.emit(inside.tolist(), False)
    assert len(feature.pick) == inside.size
    panel.kind.setCurrentIndex(panel.kind.findData("clamp"))
    panel.pick_button.click()
    assert panel.query.text().startswith("id:")
    panel.update_count()
    assert panel.count.text() == f"{inside.size:,} neurons selected"
    panel.value.setValue(0.3)
    panel.start.setValue(2)
    panel.stop.setValue(5)
    item = panel.add_from_form()
    assert item is not None and item.kind == "clamp" and (item.start, item.stop) == (2, 5)
    assert set(win.picking.marks.intervened.tolist()) == set(inside.tolist())


def test_pause_step_and_stop_work_in_a_comparison_and_a_plain_run_follows(window, qtbot):
    from flyviz.app.runs.worker import IDLE, PAUSED, RUNNING

    win = window
    superclass = win.controls.superclass.itemData(1)
    win.state.run.temperature = 0.0
    win.state.run.max_new_tokens = 200
    win.state.run.speed_cap = 20
    assert win.interventions.compare_with([Silence(f"superclass:{superclass}")],
                                          prompt="Tom and his dog")
    qtbot.waitUntil(lambda: len(win.session) >= 5 and win.worker_state == RUNNING, timeout=5000)
    win.toggle_play()
    qtbot.waitUntil(lambda: win.worker_state == PAUSED, timeout=3000)
    paused_at = len(win.session)
    win.runs.step_forward()
    qtbot.waitUntil(lambda: len(win.session) == paused_at + 1, timeout=3000)
    assert len(win.session.recording.baseline) == len(win.session)
    with qtbot.waitSignal(win.run_ended, timeout=3000) as ended:
        win.runs.stop()
    assert ended.args[0] == "stopped"
    qtbot.waitUntil(lambda: win.worker_state == IDLE, timeout=3000)

    # Comparing switched off: a plain run with the interventions, the state's colours.
    win.interventions.panel.compare_box.setChecked(False)
    win.state.run.max_new_tokens = 4
    win.state.run.speed_cap = 0
    with qtbot.waitSignal(win.run_ended, timeout=10_000) as ended:
        assert win.run_prompt("Tom")
    assert ended.args[0] == "done"
    assert win.session.recording.baseline is None
    assert win.session.recording.metadata["interventions"][0]["kind"] == "silence"
    assert win.display.layer is None
    qtbot.waitUntil(lambda: win.worker_state == IDLE, timeout=3000)
