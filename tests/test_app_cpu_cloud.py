"""The brain view's software path paints the cloud on the CPU when a frame allows, the same
picture as OpenGL draws; any other visual in the scene, or no numba, and OpenGL draws it."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pytestqt")
pytest.importorskip("vispy")
pytest.importorskip("numba")

from app_conftest import qimage_rgb, show_state  # noqa: E402
from test_app_software_gl import (_two_far_apart, _view, assert_same_picture,  # noqa: E402
                                  brain)

from flyviz.render import splat  # noqa: E402

pytestmark = pytest.mark.gui

__all__ = ["brain"]


@pytest.fixture
def software_view(qtbot, brain):
    assert splat.splat_available(wait=True)
    view = _view(qtbot, brain)
    if view.raster_screen is None or not view.cpu_cloud:
        pytest.skip(f"the CPU cloud is for software OpenGL; this one is {view.renderer!r}")
    return view


def _states(view, count: int = 3, seed: int = 5) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [np.clip(rng.normal(0, 0.5, len(view.visible)), -1, 1).astype(np.float32)
            for _ in range(count)]


def test_the_cloud_is_painted_on_the_cpu_as_opengl_draws_it(qtbot, brain, software_view):
    from flyviz.analysis.outline import soma_outline

    view, screen = software_view, software_view.raster_screen
    reference = _view(qtbot, brain, cpu_cloud=False)     # the same view, OpenGL drawing all
    assert reference.raster_screen is not None and not reference.cpu_cloud
    anatomy, _ = brain
    outline = [soma_outline(anatomy.positions_um()[anatomy.valid])]
    for meshes in ([], outline):                          # the background, then the outline
        view.set_meshes(meshes, 0.3)
        reference.set_meshes(meshes, 0.3)
        for state in _states(view):
            before = screen.cpu_frames
            show_state(view, qtbot, state)
            show_state(reference, qtbot, state)
            assert screen.cpu_frames > before
            painted = qimage_rgb(screen.grab().toImage())
            drawn = qimage_rgb(reference.raster_screen.grab().toImage())
            assert (drawn.max(axis=-1) > 60).sum() > 200   # neurons, not an empty frame
            assert_same_picture(painted, drawn)
    assert reference.raster_screen.cpu_frames == 0


def green(rgb: np.ndarray) -> np.ndarray:
    """Pixels of the test's green line (no neuron colour is green over red and blue)."""
    r, g, b = (rgb[..., c].astype(int) for c in range(3))
    return (g > r + 40) & (g > b + 40)


def test_another_visual_in_the_scene_is_drawn_by_opengl_with_the_cloud(qtbot, software_view):
    from vispy import scene

    view, screen = software_view, software_view.raster_screen
    warm, cool = _two_far_apart(view)
    state = np.zeros(len(view.visible), np.float32)
    state[warm], state[cool] = 1.0, -1.0
    show_state(view, qtbot, state)
    painted = qimage_rgb(screen.grab().toImage())
    cpu_frames = screen.cpu_frames
    # A line from a neuron (as the Why? view's synapses): that frame is OpenGL's, the line
    # in it.
    start = view.positions[warm]
    ring = scene.visuals.Line(parent=view.view.scene, connect="segments", method="gl")
    ring.set_gl_state("additive", depth_test=False)
    ring.set_data(pos=np.array([start, view.positions[cool]], np.float32),
                  color=(0.1, 1.0, 0.1, 1.0), width=1.5)
    frames = screen.frames
    show_state(view, qtbot, state)
    assert screen.frames > frames and screen.cpu_frames == cpu_frames
    drawn = qimage_rgb(screen.grab().toImage())
    # The line is in the picture (green over the dark background), and was not before.
    on_line = green(drawn)
    assert on_line.sum() > 100
    assert not green(painted).any()
    # The rest is the CPU's frame: the line only adds light (it is blended additively), so
    # wherever the two differ by more than rounding, green was added there.
    diff = drawn.astype(int) - painted.astype(int)
    assert diff.min() >= -8
    changed = np.abs(diff).max(axis=-1) > 8
    assert changed.any() and (diff[..., 1][changed] > 8).all()
    ring.parent = None                                   # gone: the CPU paints again
    show_state(view, qtbot, state * 0.5)
    assert screen.cpu_frames > cpu_frames


def test_without_the_kernel_opengl_draws_the_cloud(qtbot, brain, monkeypatch):
    monkeypatch.setitem(splat._kernel, "paint", None)     # numba missing or unable to compile
    view = _view(qtbot, brain)
    if view.raster_screen is None:
        pytest.skip(f"the software path only; this OpenGL ({view.renderer!r}) draws on a GPU")
    warm, _ = _two_far_apart(view)
    state = np.zeros(len(view.visible), np.float32)
    state[warm] = 1.0
    frames = view.raster_screen.frames
    show_state(view, qtbot, state)
    assert view.raster_screen.frames > frames and view.raster_screen.cpu_frames == 0
    shown = qimage_rgb(view.raster_screen.grab().toImage()).astype(int)
    x, y = (int(round(v)) for v in view.project(warm))
    assert shown[y - 1:y + 2, x - 1:x + 2, 0].mean() > 150          # the neuron, in orange
