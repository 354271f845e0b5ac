"""The brain view's software-OpenGL path: chosen under llvmpipe, same picture, same behaviour.

With a renderer that draws on the CPU the view shows its frames as pixels
(:class:`flyviz.app.brain.raster_canvas.RasterScreen`) and draws the lean cloud;
``BrainView(software_path=False)`` is the path a GPU gets. Pixel facts, under Xvfb.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pytestqt")
pytest.importorskip("vispy")

from PySide6.QtCore import QPoint, Qt  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from app_conftest import colour_at, qimage_rgb, show_state  # noqa: E402

from flyviz.app._testing import make_app_checkpoint  # noqa: E402
from flyviz.render.gl_backend import is_software_renderer  # noqa: E402

pytestmark = pytest.mark.gui

SIZE = (360, 280)


def assert_same_picture(a: np.ndarray, b: np.ndarray) -> None:
    """The same picture but for rounding: a level of 8 bits here and there, and at most three
    pixels in 10,000 off by more (a faint fragment at a sprite's very edge, which the CPU
    painter and llvmpipe's rasteriser may decide apart), none by more than 8 levels."""
    diff = np.abs(a.astype(int) - b.astype(int)).max(axis=-1)
    assert diff.max() <= 8, diff.max()
    assert np.mean(diff > 2) <= 3e-4, np.count_nonzero(diff > 2)
    assert np.mean(diff > 0) <= 0.05, np.mean(diff > 0)


@pytest.fixture
def brain(tmp_path):
    checkpoint = make_app_checkpoint(tmp_path / "model")
    return checkpoint.anatomy, checkpoint.config.neurons


def _view(qtbot, brain, software_path=None, cpu_cloud=None):
    from flyviz.app.brain.brain_view import BrainView

    anatomy, n = brain
    view = BrainView(software_path=software_path, cpu_cloud=cpu_cloud)
    qtbot.addWidget(view)
    view.setFixedSize(*SIZE)
    view.show()
    qtbot.waitExposed(view)
    view.set_anatomy(anatomy, n)
    view.smoothing_s = 0.0
    view.set_gain(1.0)
    view.set_point_size(12.0)     # discs several pixels wide on this small canvas
    return view


def _two_far_apart(view) -> tuple[int, int]:
    """The visible neurons furthest left and furthest right on the canvas (inside it)."""
    w, h = view.canvas.size
    inside = []
    for i in np.flatnonzero(view.visible):
        x, y = view.project(int(i))
        if 12 <= x < w - 12 and 12 <= y < h - 12:
            inside.append((x, int(i)))
    inside.sort()
    return inside[0][1], inside[-1][1]


def test_software_gl_gets_the_software_path_and_shows_the_neurons_in_their_colours(qtbot, brain):
    view = _view(qtbot, brain)
    if not is_software_renderer(view.renderer):
        pytest.skip(f"needs a software OpenGL (Mesa llvmpipe); this one is {view.renderer!r}")
    assert view.software_path and view.raster_screen is not None
    assert view.cloud is not None and view.cloud.lean
    # The OpenGL widget is never on screen; what is shown is a plain widget's pixels.
    native = view.canvas.native
    assert native.testAttribute(Qt.WidgetAttribute.WA_DontShowOnScreen)
    assert view.raster_screen.isVisible() and view.raster_screen.size() == native.size()

    warm, cool = _two_far_apart(view)
    state = np.zeros(len(view.visible), np.float32)
    state[warm], state[cool] = 1.0, -1.0
    frames = view.raster_screen.frames
    show_state(view, qtbot, state)
    assert view.raster_screen.frames > frames and not view.raster_screen.stale
    ratio = native.devicePixelRatioF()
    shown = qimage_rgb(view.raster_screen.grab().toImage())
    hot = colour_at(shown, view.project(warm), ratio)
    cold = colour_at(shown, view.project(cool), ratio)
    assert hot[0] > hot[2] + 40 and hot.max() > 150       # orange: positive activation
    assert cold[2] > cold[0] + 40 and cold.max() > 150    # blue: negative activation
    # What is on screen is the scene as the canvas draws it (screenshots, movies).
    drawn = view.render_image()[..., :3]
    assert shown.shape == drawn.shape
    assert np.abs(shown.astype(int) - drawn.astype(int)).max() <= 2


def test_idle_ticks_do_not_redraw_and_clicks_reach_the_canvas(qtbot, brain):
    view = _view(qtbot, brain)
    warm, cool = _two_far_apart(view)
    state = np.zeros(len(view.visible), np.float32)
    state[warm] = 1.0
    show_state(view, qtbot, state)
    draws = len(view.draw_times)
    frames = view.raster_screen.frames if view.raster_screen is not None else None
    # An idle tick asks for no frame: every frame is asked for through canvas.update(), so
    # counting those calls proves the absence at once; the events a tick could have posted
    # are then handled, and no draw came of them.
    asked: list[int] = []
    update = view.canvas.update
    view.canvas.update = lambda *args: asked.append(1) or update(*args)
    try:
        for _ in range(10):                 # the display timer's ticks with nothing new
            view.tick()
            QApplication.sendPostedEvents()
            QApplication.processEvents()
    finally:
        del view.canvas.update
    assert asked == []
    assert len(view.draw_times) == draws
    if view.raster_screen is not None:
        assert view.raster_screen.frames == frames

    clicked: list[int] = []
    view.neuron_clicked.connect(clicked.append)
    target = view.raster_screen if view.raster_screen is not None else view.canvas.native
    x, y = view.project(warm)
    qtbot.mouseClick(target, Qt.MouseButton.LeftButton, pos=QPoint(int(round(x)), int(round(y))))
    qtbot.waitUntil(lambda: bool(clicked), timeout=3000)
    assert clicked[-1] == warm


def test_the_gpu_path_can_be_asked_for(qtbot, brain):
    view = _view(qtbot, brain, software_path=False)
    assert not view.software_path and view.raster_screen is None
    assert view.cloud is not None and not view.cloud.lean
    assert not view.canvas.native.testAttribute(Qt.WidgetAttribute.WA_DontShowOnScreen)
    warm, _ = _two_far_apart(view)
    state = np.zeros(len(view.visible), np.float32)
    state[warm] = 1.0
    show_state(view, qtbot, state)
    hot = colour_at(view.render_image()[..., :3], view.project(warm),
                     view.canvas.native.devicePixelRatioF())
    assert hot[0] > hot[2] + 40


def test_the_outline_is_drawn_once_while_the_camera_holds_still_and_looks_the_same(qtbot, brain):
    from flyviz.analysis.outline import soma_outline

    view = _view(qtbot, brain)
    screen = view.raster_screen
    if screen is None:
        pytest.skip("the outline is cached on the software path only; this OpenGL "
                    f"({view.renderer!r}) draws on a GPU")
    anatomy, _ = brain
    view.set_meshes([soma_outline(anatomy.positions_um()[anatomy.valid])], 0.3)
    rng = np.random.default_rng(2)
    states = [rng.uniform(-1, 1, len(view.visible)).astype(np.float32) for _ in range(4)]
    for state in states:                     # tokens go by, the camera stays
        show_state(view, qtbot, state)
    assert screen.backdrops == 1
    cached = qimage_rgb(screen.grab().toImage())
    drawn = view.render_image()[..., :3]     # every visual drawn by OpenGL, the outline too
    assert_same_picture(cached, drawn)
    view.set_meshes([], 0.3)                 # without the outline the picture differs
    show_state(view, qtbot, states[-1])
    assert np.abs(qimage_rgb(screen.grab().toImage()).astype(int) - cached.astype(int)).max() > 10

    view.set_meshes(view.meshes or [soma_outline(anatomy.positions_um()[anatomy.valid])], 0.3)
    view.view.camera.azimuth += 30           # the camera moved: drawn again once it holds
    for state in states[:3]:
        show_state(view, qtbot, state)
    assert screen.backdrops >= 2
