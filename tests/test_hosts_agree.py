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

    from flyviz.export import ExportOptions, export_state
    from flyviz.figures import brain_image
    from flyviz.model.errors import ExportError
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



def test_napari_and_the_web_page_show_the_state(window, qtbot, tmp_path, app_checkpoint):
    """napari and the shared web page, each drawing the state itself: napari's own Points
    layer (in a real napari viewer) holds, for every neuron, the colour of flyviz's colormap
    table at the neuron's value (computed here from the table, not by the function that
    builds the layer) and napari's canvas draws them; the web page, drawn by a browser,
    lights the pixels the window's still lights. Breaks it catches: napari given the
    recorded state or another token instead of the state's layer, and a page that draws
    another state than the window's."""

    from flyviz.brain_source import BrainSource
    from flyviz.napari._layers import layer_data
    from flyviz.render.colormaps import lut

    napari = pytest.importorskip("napari")
    win = window
    state = win.state
    n = app_checkpoint.config.neurons
    _set_up(win, n)
    qtbot.waitUntil(lambda: win.display.showing(1), timeout=3000)
    source = BrainSource.from_state(state, "hosts")
    assert source.quantity == AMOUNTS and AMOUNTS in source.quantities

    from qt_barriers import settle

    viewer = napari.Viewer(show=True)     # a hidden canvas draws nothing to screenshot
    try:
        # The canvas at its size before the view is framed: napari frames the brain for the
        # canvas size it has been told of, and a resize still queued (a loaded machine) left
        # the brain framed for a smaller canvas, a dot of 25 pixels.
        viewer.window.resize(900, 640)
        settle(qtbot, viewer.window._qt_window)
        for data, kwargs, kind in layer_data(state):
            viewer._add_layer_from_data(data, kwargs, kind)
        points = [layer for layer in viewer.layers if layer._type_string == "points"]
        assert points and points[0].metadata["flyviz"]["state"] is state
        low, high = state.value_range(1)
        index = np.rint(np.clip((state.values(1)[source.shown] - low) / (high - low), 0, 1)
                        * 255).astype(int)
        np.testing.assert_allclose(points[0].face_color, lut(state.layer.colormap)[index],
                                   atol=1.5 / 255)
        viewer.dims.ndisplay = 3            # the brain in 3D, as flyviz's reader shows it
        settle(qtbot, viewer.window._qt_window)
        viewer.reset_view()
        shot = viewer.screenshot(canvas_only=True, flash=False)[..., :3]
        background = np.asarray(shot[0, 0], int)
        assert (np.abs(shot.astype(int) - background).max(axis=-1) > 40).sum() > 300
    finally:
        viewer.close()

    # The web page, in a browser, framed as flyviz frames a state (its own camera: the next
    # test).
    state.camera = None
    page, still = _page_and_still(state, tmp_path)
    background = np.round(np.asarray(state.style().background[:3]) * 255).astype(int)
    assert lit_pixels(still, background).sum() > 100
    assert lit_iou(page, still, background) >= 0.9


def test_the_web_page_shows_the_windows_camera_as_the_still_does(window, qtbot, tmp_path,
                                                                   app_checkpoint):
    """The page of a state with the window's own camera (zoomed, turned) shows that view as
    flyviz's still does. The break it catches (found by it): the page framing its view
    preset and ignoring the state's camera."""
    win = window
    _set_up(win, app_checkpoint.config.neurons)
    qtbot.waitUntil(lambda: win.display.showing(1), timeout=3000)
    win.sync_camera()
    page, still = _page_and_still(win.state, tmp_path)
    background = np.round(np.asarray(win.state.style().background[:3]) * 255).astype(int)
    assert lit_iou(page, still, background) >= 0.9


def _page_and_still(state, tmp_path, size=(640, 400)):
    """The state's shared web page as a browser draws it at token 1, and flyviz's own still
    of the state (skips without Chromium)."""
    import io
    import sys
    from pathlib import Path

    import flyviz
    from flyviz.render.offscreen import FrameRenderer

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _chromium import Browser, chromium_path

    if chromium_path() is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    with FrameRenderer.for_state(state, size) as renderer:
        still = renderer.render_token(state)[..., :3]
    page_file = flyviz.share(state, tmp_path / "hosts.html")
    with Browser((1000, 700)) as browser:
        browser.open(page_file, f"token=1&size={size[0]}x{size[1]}")
        assert browser.evaluate("window.flyviz.error || ''") == ""
        browser.wait("window.flyviz.page.token === 1")
        page = np.asarray(iio.imread(io.BytesIO(browser.png("window.flyviz.snapshot()"))))
    page = page[..., :3]
    if DUMP:
        iio.imwrite(os.path.join(DUMP, "hosts-page.png"), page)
        iio.imwrite(os.path.join(DUMP, "hosts-page-still.png"), still)
    assert page.shape == still.shape
    return page, still


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
        """The form as the user leaves it but for the frames: token 1 alone, as PNG."""

        def exec(self) -> int:
            self.format_combo.setCurrentIndex(self.format_combo.findData("png"))
            self.path_edit.setText(str(out) + "/")
            self.size_combo.setEditText(f"{size[0]}x{size[1]}")
            self.first_spin.setValue(1)
            self.last_spin.setValue(1)
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
