"""Every host renders one viewer state: the window, a movie, a still, a figure, the notebook
widget and napari show the same picture of a state with a highlight, a selected neuron and a
colour layer that is not the recorded state.

And the window's File → Export movie is that state's movie: its highlight and selection
ring are in the frames.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from gl_skip import skip_if_no_offscreen_gl
from app_conftest import lit_iou, lit_pixels, mixed_recording


pytestmark = pytest.mark.gui

iio = pytest.importorskip("imageio.v3")

#: Where to leave the compared images to look at (unset: nowhere).
DUMP = os.environ.get("FLYVIZ_TEST_IMAGES")

#: The key of the test's colour layer (per-neuron amounts, the registry's importance rule).
AMOUNTS = "amounts"


def _set_up(win, n: int) -> None:
    """The window's state: a recording at token 1, amounts coloured, half the neurons
    highlighted, neuron 4 selected."""
    from flyviz.viewer.layers import importance_colours

    state = win.state
    state.display.smoothing_s = 0.0
    state.display.auto_scale = False
    state.display.limit = 1.0
    state.display.point_size = 5.0
    state.set_recording(mixed_recording(n, 7, "hosts"), index=1)
    rng = np.random.default_rng(11)
    amounts = np.where(rng.random(n) < 0.5, rng.uniform(0.2, 1.0, n), 0.0)
    layer = importance_colours(AMOUNTS, amounts, False, "test amounts")
    if AMOUNTS not in state.colour_layers:
        state.add_colour_layer(AMOUNTS, "Test amounts", lambda: layer)
    state.colour_by = AMOUNTS
    state.highlights.set_neurons("find", np.arange(0, n, 2))
    state.selected = 4


def test_every_host_renders_one_state_alike(window, qtbot, tmp_path, app_checkpoint):
    import vispy.app

    from flyviz.brain_source import BrainSource, colours
    from flyviz.export import ExportOptions, export_state
    from flyviz.figures import brain_image
    from flyviz.model.errors import ExportError
    from flyviz.napari._layers import layer_data
    from flyviz.render.offscreen import render_state_image

    win = window
    state = win.state
    n = app_checkpoint.config.neurons
    _set_up(win, n)
    qtbot.waitUntil(lambda: win.display.showing(1), timeout=3000)
    assert win.brain.layer.name == AMOUNTS
    view = win.brain.render_image()[..., :3]
    size = (view.shape[1], view.shape[0])
    win.sync_camera()

    images = {"window": view,
              "still": render_state_image(state, size, app=vispy.app.use_app())}
    # The figure embeds the state rendered at 0.85 of its width, 80 px less tall.
    images["figure"] = brain_image(state, (int(np.ceil(size[0] / 0.85)), size[1] + 80))
    try:
        from flyviz.notebook import BrainWidget
    except ImportError:
        BrainWidget = None
    try:
        out = tmp_path / "movie"
        export_state(state, out, ExportOptions(size=size, frames_per_token=1, overlays=False,
                                               start=1, stop=2), gl="egl")
        (frame,) = sorted(out.glob("*.png"))
        images["movie"] = iio.imread(frame)[..., :3]
        if BrainWidget is not None:
            widget = BrainWidget(state, size=size, gl="egl")
            try:
                assert widget.quantity == AMOUNTS and widget.token == 1
                images["notebook"] = widget.snapshot()
            finally:
                widget.close()
    except ExportError as exc:
        skip_if_no_offscreen_gl(str(exc))   # any other export error fails
        raise
    if DUMP:
        for name, image in images.items():
            iio.imwrite(os.path.join(DUMP, f"hosts-{name}.png"), image)
    assert {image.shape for image in images.values()} == {view.shape}, \
        {name: image.shape for name, image in images.items()}

    background = np.round(np.asarray(state.style().background[:3]) * 255).astype(int)
    assert lit_pixels(view, background).sum() > 300
    names = sorted(images)
    ious = {f"{a}-{b}": lit_iou(images[a], images[b], background)
            for i, a in enumerate(names) for b in names[i + 1:]}
    print({pair: round(iou, 4) for pair, iou in ious.items()})
    assert min(ious.values()) >= 0.98, ious

    # The highlight is in the picture: without it more neurons are lit.
    state.highlights.set("find", None)
    plain = render_state_image(state, size, app=vispy.app.use_app())
    assert lit_pixels(plain, background).sum() > 1.2 * lit_pixels(images["still"], background).sum()
    state.highlights.set_neurons("find", np.arange(0, n, 2))

    # napari: the Points layer built from the state is coloured by the state's layer at
    # its token, over the state's range (napari draws its own points: colours, not pixels).
    source = BrainSource.from_state(state, "hosts")
    assert source.quantity == AMOUNTS and AMOUNTS in source.quantities
    points = [kw for data, kw, kind in layer_data(state) if kind == "points"]
    face = points[0]["face_color"]
    layer = state.layer
    want = colours(state.values(1)[source.shown], layer.colormap, state.value_range(1))
    assert points[0]["metadata"]["flyviz"]["state"] is state
    np.testing.assert_allclose(face, want, atol=1e-6)


def test_file_export_movie_keeps_the_highlight_and_the_selection_ring(window, qtbot, tmp_path,
                                                                     app_checkpoint,
                                                                     monkeypatch):
    import vispy.app
    from PySide6.QtWidgets import QDialog

    import flyviz.app.window.export_dialog as export_dialog
    from flyviz.render.offscreen import render_state_image

    win = window
    state = win.state
    n = app_checkpoint.config.neurons
    _set_up(win, n)
    qtbot.waitUntil(lambda: win.display.showing(1), timeout=3000)
    win.sync_camera()
    size = (480, 320)
    out = tmp_path / "frames"

    class Accepted(export_dialog.ExportDialog):
        """The form as the user leaves it but for the frames: token 2 alone, as PNG."""

        def exec(self) -> int:
            self.format_combo.setCurrentIndex(self.format_combo.findData("png"))
            self.path_edit.setText(str(out) + "/")
            self.size_combo.setEditText(f"{size[0]}x{size[1]}")
            self.first_spin.setValue(2)
            self.last_spin.setValue(2)
            self.k_spin.setValue(1)
            self.hold_spin.setValue(0.0)
            self.overlays_check.setChecked(False)
            return QDialog.DialogCode.Accepted

    monkeypatch.setattr(export_dialog, "ExportDialog", Accepted)
    win.actions_by_name["export_movie"].trigger()
    frames = sorted(out.glob("*.png"))
    assert len(frames) == 1, "File → Export movie wrote no frame"
    movie = iio.imread(frames[0])[..., :3]

    app = vispy.app.use_app()
    background = np.round(np.asarray(state.style().background[:3]) * 255).astype(int)
    ringed = render_state_image(state, size, app=app)
    state.selected = None
    unringed = render_state_image(state, size, app=app)
    state.highlights.set("find", None)
    plain = render_state_image(state, size, app=app)
    if DUMP:
        for name, image in (("movie", movie), ("ringed", ringed), ("plain", plain)):
            iio.imwrite(os.path.join(DUMP, f"export-{name}.png"), image)
    assert lit_iou(movie, ringed, background) >= 0.98
    assert lit_iou(movie, plain, background) < 0.9          # the highlight dims half of them
    ring = np.abs(ringed.astype(int) - unringed.astype(int)).max(axis=-1) > 40
    assert ring.sum() > 10                              # the ring is drawn in the still
    assert (np.abs(movie.astype(int) - ringed.astype(int)).max(axis=-1)[ring] <= 40).mean() > 0.9
