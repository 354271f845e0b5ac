"""A movie frame looks like the app's brain view: the same neurons lit, the same colours.

The window's brain view and a movie frame, rendered at the same size: from
File → Export movie with the form as it opens on the window's display
settings (automatic gain, the window's camera), and from the export path
given the view's style, gain and camera, through the app's Qt OpenGL (as
the dialog draws) and through EGL (as ``flyviz export`` does).
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest
from app_conftest import lit_iou, lit_pixels, mixed_recording
from gl_skip import offscreen_gl_or_skip, skip_if_no_offscreen_gl

from flyviz.record.recording import Recording

pytestmark = pytest.mark.gui

iio = pytest.importorskip("imageio.v3")

#: Where to leave the compared images to look at (unset: nowhere).
DUMP = os.environ.get("FLYVIZ_TEST_IMAGES")


def _dialog_frame(win, qtbot, recording: Recording, index: int, size: tuple[int, int],
                  tmp_path) -> np.ndarray:
    """Frame ``index`` exported as File → Export movie does: the dialog opened on the window's
    display settings, left as they are, and its runner."""
    from flyviz.app.window.export_dialog import ExportDialog
    from flyviz.app.base.export_jobs import ExportRunner

    brain = win.brain
    dialog = ExportDialog(recording, win.anatomy, "agreement", win, style=brain.style,
                          camera=brain.camera_pose())
    qtbot.addWidget(dialog)
    dialog.format_combo.setCurrentIndex(dialog.format_combo.findData("png"))
    dialog.path_edit.setText(str(tmp_path / "dialog") + "/")
    dialog.size_combo.setEditText(f"{size[0]}x{size[1]}")
    dialog.first_spin.setValue(index)
    dialog.last_spin.setValue(index)
    dialog.k_spin.setValue(1)
    dialog.hold_spin.setValue(0.0)
    dialog.overlays_check.setChecked(False)
    runner = ExportRunner(recording, win.anatomy, dialog.output_path(), dialog.options(),
                          "agreement", style=dialog.cloud_style(), camera=dialog.camera())
    with qtbot.waitSignal(runner.done, timeout=60_000) as blocker:
        runner.start()
    if blocker.args[1] is not None:
        skip_if_no_offscreen_gl(str(blocker.args[1]))
    assert blocker.args[1] is None, blocker.args[1]
    frames = sorted((tmp_path / "dialog").glob("*.png"))
    assert len(frames) == 1
    return iio.imread(frames[0])[..., :3]


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


@pytest.mark.parametrize("gl", [None, "egl", "dialog"], ids=["qt", "egl", "dialog"])
@pytest.mark.parametrize("mode", ["signed", "abs"])
def test_a_movie_frame_agrees_with_the_brain_view(window, qtbot, tmp_path, app_checkpoint,
                                                 gl, mode):
    win = window
    n = app_checkpoint.config.neurons
    recording = mixed_recording(n, 3, "agreement")
    win.state.display.smoothing_s = 0.0
    win.state.display.auto_scale = False
    win.state.display.limit = 1.0
    win.state.display.point_size = 5.0
    win.state.display.mode = mode
    win.session.replace(recording)
    win.show_token(1)
    qtbot.waitUntil(lambda: win.display.showing(1), timeout=3000)
    view = win.brain.render_image()[..., :3]
    size = (view.shape[1], view.shape[0])
    with offscreen_gl_or_skip():
        movie = (_dialog_frame(win, qtbot, recording, 1, size, tmp_path) if gl == "dialog"
                 else _export_frame(win, recording, 1, size, tmp_path, gl))
    if DUMP:
        for name, image in (("view", view), ("movie", movie)):
            iio.imwrite(os.path.join(DUMP, f"agreement-{mode}-{gl or 'qt'}-{name}.png"), image)
    assert movie.shape == view.shape

    background = np.round(np.asarray(win.brain.style.background[:3]) * 255).astype(int)
    lit_view, lit_movie = lit_pixels(view, background), lit_pixels(movie, background)
    assert lit_view.sum() > 1000  # a real picture, not a few stray pixels
    iou = (lit_view & lit_movie).sum() / (lit_view | lit_movie).sum()
    difference = np.abs(view.astype(int) - movie.astype(int)).max(axis=-1)
    print(f"{mode} {gl or 'qt'}: lit {lit_view.sum()} / {lit_movie.sum()} px, IoU {iou:.4f}, "
          f"colour difference on lit pixels: median {np.median(difference[lit_view]):.0f}, "
          f"99th percentile {np.percentile(difference[lit_view], 99):.0f}, max {difference.max()}")
    assert iou > 0.98
    assert np.percentile(difference[lit_view | lit_movie], 99) <= 6


@pytest.mark.parametrize("mode", ["signed", "abs"])
def test_one_state_looks_the_same_in_the_window_a_movie_frame_and_an_offscreen_figure(
        window, qtbot, tmp_path, app_checkpoint, mode):
    """The viewer state is the one source of the picture: the window bound to it, a movie
    frame of it (``export_state``, EGL) and a still of it (``render_state_image``) agree."""
    import vispy.app

    from flyviz.export import ExportOptions, export_state
    from flyviz.render.offscreen import render_state_image

    win = window
    state = win.state
    n = app_checkpoint.config.neurons
    recording = mixed_recording(n, 5, "agreement")
    state.display.smoothing_s = 0.0
    state.display.auto_scale = False
    state.display.limit = 1.0
    state.display.point_size = 5.0
    state.display.mode = mode
    state.set_recording(recording, index=1)
    if mode == "abs":          # a highlight and a selection are part of the picture too
        state.highlights.set_neurons("find", np.arange(0, n, 2))
        state.selected = 4
    qtbot.waitUntil(lambda: win.display.showing(1), timeout=3000)
    view = win.brain.render_image()[..., :3]
    size = (view.shape[1], view.shape[0])
    win.sync_camera()                              # the window writes where it looks from
    assert state.camera == win.brain.camera_pose()

    figure = render_state_image(state, size, app=vispy.app.use_app())
    out = tmp_path / "state-frames"
    with offscreen_gl_or_skip():
        export_state(state, out, ExportOptions(size=size, frames_per_token=1, overlays=False,
                                               start=1, stop=2), gl="egl")
    (frame,) = sorted(out.glob("*.png"))
    movie = iio.imread(frame)[..., :3]
    if DUMP:
        for name, image in (("view", view), ("figure", figure), ("movie", movie)):
            iio.imwrite(os.path.join(DUMP, f"state-{mode}-{name}.png"), image)
    assert figure.shape == movie.shape == view.shape

    background = np.round(np.asarray(state.style().background[:3]) * 255).astype(int)
    # a real picture, not a few stray pixels (the tiny model lights ~900 px in the
    # default layout's brain view at this size)
    assert lit_pixels(view, background).sum() > 500
    pairs = {"view-figure": (view, figure), "view-movie": (view, movie),
             "figure-movie": (figure, movie)}
    ious = {name: lit_iou(a, b, background) for name, (a, b) in pairs.items()}
    print(mode, {name: round(iou, 4) for name, iou in ious.items()})
    assert min(ious.values()) > 0.98, ious
    lit = lit_pixels(view, background)
    difference = np.abs(view.astype(int) - figure.astype(int)).max(axis=-1)
    assert np.percentile(difference[lit], 99) <= 6


def test_picks_intervention_rings_and_synapse_lines_are_drawn_alike_everywhere(
        window, qtbot, tmp_path, app_checkpoint):
    """The marks the window draws over the brain (picked rings, intervention rings, a
    feature's synapse lines) are part of the state's picture: the window, a still
    (``render_state_image``) and a movie frame (``export_state``, EGL) of one state agree on
    the lit and marked pixels (IoU >= 0.98), and on the marks alone."""
    import vispy.app

    from flyviz.export import ExportOptions, export_state
    from flyviz.render.offscreen import render_state_image

    win = window
    state = win.state
    n = app_checkpoint.config.neurons
    state.display.smoothing_s = 0.0
    state.display.auto_scale = False
    state.display.limit = 1.0
    state.display.point_size = 5.0
    state.set_recording(mixed_recording(n, 7, "marks"), index=1)
    positions = state.anatomy.positions_um()
    valid = np.flatnonzero(state.anatomy.valid)

    def pictures() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        qtbot.waitUntil(lambda: win.display.showing(1), timeout=3000)
        qtbot.waitUntil(lambda: not win.brain.animating, timeout=3000)
        view = win.brain.render_image()[..., :3]
        size = (view.shape[1], view.shape[0])
        win.sync_camera()
        still = render_state_image(state, size, app=vispy.app.use_app())
        out = tmp_path / f"frames-{len(list(tmp_path.iterdir()))}"
        with offscreen_gl_or_skip():
            export_state(state, out, ExportOptions(size=size, frames_per_token=1,
                                                   overlays=False, start=1, stop=2), gl="egl")
        (frame,) = sorted(out.glob("*.png"))
        return view, still, iio.imread(frame)[..., :3]

    plain = pictures()
    state.picked = valid[:6]
    state.intervened = valid[20:60]
    pairs = np.stack([valid[100:130], valid[200:230]], axis=1).ravel()
    colours = np.tile(np.array([[1.0, 0.3, 0.2, 0.9]], np.float32), (pairs.size, 1))
    state.set_lines("test", positions[pairs], colours)
    marked = pictures()
    background = np.round(np.asarray(state.style().background[:3]) * 255).astype(int)
    lit = [lit_pixels(image, background) for image in marked]
    marks = [lit_pixels(image, background) & ~lit_pixels(bare, background)
             for image, bare in zip(marked, plain)]
    names = ("view", "still", "movie")
    if DUMP:
        for name, image in zip(names, marked):
            iio.imwrite(os.path.join(DUMP, f"marks-{name}.png"), image)
    assert marks[0].sum() > 500         # the rings and lines light pixels of their own
    ious = {f"{names[a]}-{names[b]}": (float((lit[a] & lit[b]).sum() / (lit[a] | lit[b]).sum()),
                                       float((marks[a] & marks[b]).sum()
                                             / (marks[a] | marks[b]).sum()))
            for a, b in ((0, 1), (0, 2), (1, 2))}
    print({name: (round(i, 4), round(m, 4)) for name, (i, m) in ious.items()})
    assert min(i for i, _ in ious.values()) >= 0.98, ious
    assert min(m for _, m in ious.values()) >= 0.9, ious
