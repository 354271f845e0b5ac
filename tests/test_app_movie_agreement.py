"""A movie frame looks like the app's brain view: the same neurons lit, the same colours.

The window's brain view and the movie renderer (the export path, through the
app's Qt OpenGL as the export dialog draws, and through EGL as ``flyviz
export`` does) render the same frame at the same size from the same
:class:`~flyviz.render.style.CloudStyle`, colour range, gain and camera.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest
from app_conftest import app_checkpoint, window  # noqa: F401

from flyviz.app._testing import make_frame
from flyviz.record.recording import Recording

pytestmark = pytest.mark.gui

iio = pytest.importorskip("imageio.v3")

#: Where to leave the compared images to look at (unset: nowhere).
DUMP = os.environ.get("FLYVIZ_TEST_IMAGES")


def _recording(n: int, seed: int = 3) -> Recording:
    """Three frames of sparse activity of both signs (most neurons quiet, as in a real run)."""
    rng = np.random.default_rng(seed)
    rec = Recording(n, {"model_name": "agreement"})
    for i in range(3):
        state = np.zeros(n, np.float32)
        lit = rng.choice(n, size=n // 8, replace=False)
        state[lit] = rng.uniform(0.3, 1.0, lit.size) * rng.choice([-1.0, 1.0], lit.size)
        rec.append(make_frame(i, state))
    return rec


def _lit(rgb: np.ndarray, background: np.ndarray) -> np.ndarray:
    """Pixels clearly off the background colour."""
    return np.abs(rgb[..., :3].astype(int) - background).max(axis=-1) > 40


def _export_frame(win, recording: Recording, index: int, size: tuple[int, int], tmp_path,
                  gl: str | None) -> np.ndarray:
    """Frame ``index`` of a PNG export with the window's style, gain and camera."""
    from flyviz.export import ExportOptions, export_recording
    from flyviz.export.movie import make_renderer

    brain = win.brain
    style = dataclasses.replace(brain.style, gain=brain.gain)
    options = ExportOptions(size=size, frames_per_token=1, overlays=False, start=index,
                            stop=index + 1)
    out = tmp_path / f"frames-{gl or 'qt'}"
    if gl is None:  # as the export dialog does: the app's own OpenGL, on the GUI thread
        import vispy.app

        renderer = make_renderer(recording, win.anatomy, options, "agreement", style=style,
                                 camera=brain.camera_pose(), app=vispy.app.use_app())
        try:
            export_recording(recording, win.anatomy, out, options, renderer=renderer, style=style)
        finally:
            renderer.close()
    else:
        export_recording(recording, win.anatomy, out, options, style=style,
                         camera=brain.camera_pose(), gl=gl)
    frames = sorted(out.glob("*.png"))
    assert len(frames) == 1
    return iio.imread(frames[0])[..., :3]


@pytest.mark.parametrize("gl", [None, "egl"], ids=["qt", "egl"])
@pytest.mark.parametrize("mode", ["signed", "abs"])
def test_a_movie_frame_agrees_with_the_brain_view(window, qtbot, tmp_path, app_checkpoint,
                                                 gl, mode):
    from flyviz.model.errors import ExportError

    win = window
    n = app_checkpoint.config.neurons
    recording = _recording(n)
    win.controls.smoothing.setValue(0)
    win.controls.auto_scale.setChecked(False)
    win.controls.fixed_limit.setValue(1.0)
    win.controls.point_size.setValue(5.0)
    win.brain.set_mode(mode)
    win.session.replace(recording)
    win.show_token(1)
    qtbot.waitUntil(lambda: win.display.showing(1), timeout=3000)
    view = win.brain.render_image()[..., :3]
    size = (view.shape[1], view.shape[0])
    try:
        movie = _export_frame(win, recording, 1, size, tmp_path, gl)
    except ExportError as exc:
        pytest.skip(f"no {gl} OpenGL here: {exc}")
    if DUMP:
        for name, image in (("view", view), ("movie", movie)):
            iio.imwrite(os.path.join(DUMP, f"agreement-{mode}-{gl or 'qt'}-{name}.png"), image)
    assert movie.shape == view.shape

    background = np.round(np.asarray(win.brain.style.background[:3]) * 255).astype(int)
    lit_view, lit_movie = _lit(view, background), _lit(movie, background)
    assert lit_view.sum() > 500  # a real picture, not a few stray pixels
    iou = (lit_view & lit_movie).sum() / (lit_view | lit_movie).sum()
    difference = np.abs(view.astype(int) - movie.astype(int)).max(axis=-1)
    print(f"{mode} {gl or 'qt'}: lit {lit_view.sum()} / {lit_movie.sum()} px, IoU {iou:.4f}, "
          f"colour difference on lit pixels: median {np.median(difference[lit_view]):.0f}, "
          f"99th percentile {np.percentile(difference[lit_view], 99):.0f}, max {difference.max()}")
    assert iou > 0.98
    assert np.percentile(difference[lit_view | lit_movie], 99) <= 6
