"""Clicking a rendered neuron picks it: pixels found by rendering, picks by CPU projection."""

from __future__ import annotations

import numpy as np
import pytest

vispy_scene = pytest.importorskip("vispy.scene")

from flyviz.render.camera import apply_view, positions_bounds  # noqa: E402
from flyviz.render.cloud import NeuronCloud  # noqa: E402
from flyviz.render.picking import pick_in_view, pick_neuron  # noqa: E402


@pytest.fixture
def scene():
    rng = np.random.default_rng(3)
    positions = rng.uniform(-100, 100, (40, 3)).astype(np.float32)
    # Keep the middle of the front view clear, except for two neurons on the view
    # axis (the bounds are centred on the origin): one in front of the other.
    positions[:, 0] = np.where(np.abs(positions[:, 0]) < 30, positions[:, 0] + 60, positions[:, 0])
    positions[3], positions[4] = (-100.0, -100.0, -100.0), (100.0, 100.0, 100.0)
    positions[0] = (0.0, 0.0, -80.0)
    positions[1] = (0.0, 0.0, 80.0)
    visible = np.ones(len(positions), bool)
    visible[2] = False
    canvas = vispy_scene.SceneCanvas(size=(240, 200), show=False, bgcolor="black")
    view = canvas.central_widget.add_view()
    view.camera = vispy_scene.TurntableCamera()
    cloud = NeuronCloud(positions, visible, parent=view.scene)
    cloud.set_point_size(5.0)
    apply_view(view.camera, "front", positions_bounds(positions, visible))
    view.camera.azimuth += 25  # an oblique view, so the test does not rely on axis alignment
    view.camera.elevation = 15
    yield canvas, view, cloud, positions, visible
    canvas.close()


def lit_pixel(canvas, cloud, n, index):
    """Render with only ``index`` active; return the brightest pixel (x, y)."""
    values = np.zeros(n, np.float32)
    values[index] = 1.0
    cloud.set_activity(values)
    lum = canvas.render()[..., :3].astype(int).sum(axis=2)
    y, x = np.unravel_index(np.argmax(lum), lum.shape)
    return int(x), int(y)


def test_clicking_a_lit_neuron_picks_it(scene):
    canvas, view, cloud, positions, visible = scene
    for index in (5, 17, 33):
        x, y = lit_pixel(canvas, cloud, len(positions), index)
        assert pick_in_view(cloud, positions, visible, (x, y), radius_px=4) == index
        # Also through the transform the app gets from its view.
        tr = view.scene.node_transform(canvas.scene)
        assert pick_neuron(positions, visible, tr, (x + 1, y), radius_px=4) == index


def test_overlapping_neurons_pick_the_one_nearest_the_camera(scene):
    canvas, view, cloud, positions, visible = scene
    apply_view(view.camera, "front", positions_bounds(positions, visible))
    x, y = lit_pixel(canvas, cloud, len(positions), 0)
    # Camera on the +z side: neuron 1 (z = +80) is in front of neuron 0.
    assert pick_in_view(cloud, positions, visible, (x, y), radius_px=8) == 1
    view.camera.azimuth += 180  # now seen from behind
    x, y = lit_pixel(canvas, cloud, len(positions), 0)
    assert pick_in_view(cloud, positions, visible, (x, y), radius_px=8) == 0


def test_empty_space_and_hidden_neurons_pick_nothing(scene):
    canvas, view, cloud, positions, visible = scene
    assert pick_in_view(cloud, positions, visible, (2, 2), radius_px=3) is None
    all_visible = np.ones(len(positions), bool)
    x, y = lit_pixel(canvas, cloud, len(positions), 5)
    # Where neuron 2 would be if it were drawn: it is hidden, so it cannot be picked.
    from flyviz.render.picking import project_points
    xy, _, _ = project_points(positions[2:3], cloud.get_transform("visual", "canvas"))
    hit = pick_in_view(cloud, positions, visible, tuple(xy[0]), radius_px=0.5)
    assert hit != 2
    assert pick_in_view(cloud, positions, all_visible, tuple(xy[0]), radius_px=0.5) == 2


def test_a_camera_chain_is_one_matrix_and_projects_the_same():
    from vispy import scene

    from flyviz.render.picking import transform_matrix

    canvas = scene.SceneCanvas(size=(320, 240), show=False)
    try:
        view = canvas.central_widget.add_view()
        view.camera = scene.TurntableCamera(fov=40, azimuth=33, elevation=21)
        view.camera.set_range(x=(-50, 50), y=(-30, 30), z=(-20, 20))
        chain = view.scene.node_transform(canvas.scene)
        matrix = transform_matrix(chain)
        assert matrix is not None
        points = np.random.default_rng(2).uniform(-60, 60, (500, 3))
        homogeneous = np.concatenate([points, np.ones((500, 1))], axis=1)
        expected = np.asarray(chain.map(homogeneous))
        np.testing.assert_allclose(homogeneous @ matrix, expected, rtol=1e-9, atol=1e-9)
    finally:
        canvas.close()


def test_a_transform_that_is_not_linear_has_no_matrix():
    from vispy.visuals.transforms import LogTransform

    from flyviz.render.picking import transform_matrix

    assert transform_matrix(LogTransform(base=(10, 0, 0))) is None


def _picked_through_one_matrix_product(positions, visible, matrix, click, radius):
    """The pick as one ``(N, 4) @ (4, 4)`` product gives it (the projection before slicing)."""
    homogeneous = np.concatenate([positions.astype(np.float64),
                                  np.ones((len(positions), 1))], axis=1)
    mapped = homogeneous @ matrix
    w = mapped[:, 3]
    ok = w > 0
    safe_w = np.where(ok, w, 1.0)
    xy = mapped[:, :2] / safe_w[:, None]
    depth = mapped[:, 2] / safe_w
    ok &= np.isfinite(xy).all(axis=1) & (depth >= -1.0) & (depth <= 1.0) & visible
    d2 = np.sum((xy - np.asarray(click)) ** 2, axis=1)
    hits = np.flatnonzero(ok & (d2 <= radius ** 2))
    if hits.size == 0:
        return None, xy, depth
    return int(hits[np.lexsort((d2[hits], depth[hits]))[0]]), xy, depth


def test_the_sliced_projection_picks_what_one_matrix_product_picks():
    """Over several slices of points (one partial), in perspective with points behind the
    camera, the sliced multiply-adds project and pick exactly as the matrix product did."""
    from vispy.util.transforms import perspective, rotate, translate

    from flyviz.render.picking import CHUNK_ROWS, project_points

    rng = np.random.default_rng(11)
    count = 2 * CHUNK_ROWS + 777
    positions = rng.uniform(-100, 100, (count, 3)).astype(np.float32)
    visible = rng.random(count) > 0.1
    # Model-view-projection then NDC to 640x480 pixels (y down), in p @ M order.
    to_pixels = np.diag([320.0, -240.0, 1.0, 1.0])
    to_pixels[3, :2] = (320.0, 240.0)
    matrix = (rotate(30, (0, 1, 0)) @ rotate(20, (1, 0, 0)) @ translate((0, 0, -150))
              @ perspective(50.0, 640 / 480, 1.0, 400.0) @ to_pixels)
    xy, depth, in_front = project_points(positions, matrix)
    _, xy_product, depth_product = _picked_through_one_matrix_product(
        positions, np.ones(count, bool), matrix, (0.0, 0.0), 1.0)
    assert 0 < (~in_front).sum() < count          # some points are behind the camera
    np.testing.assert_allclose(xy[in_front], xy_product[in_front], rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(depth[in_front], depth_product[in_front], rtol=1e-12, atol=1e-12)
    # Clicks near drawn neurons, exactly on some of the last (partial) slice's, between
    # neurons and off the brain.
    shown = np.flatnonzero(in_front & visible & (np.abs(xy) < 2000).all(axis=1))
    clicks = [(tuple(xy[i] + rng.uniform(-3, 3, 2)), 6.0)
              for i in rng.choice(shown, 40, replace=False)]
    clicks += [(tuple(xy[i]), 0.5) for i in rng.choice(shown[shown >= 2 * CHUNK_ROWS], 10)]
    clicks += [((-500.0, -500.0), 6.0), ((320.0, 240.0), 6.0)]
    picked = []
    for click, radius in clicks:
        expected, _, _ = _picked_through_one_matrix_product(positions, visible, matrix, click,
                                                            radius)
        assert pick_neuron(positions, visible, matrix, click, radius_px=radius) == expected
        picked.append(expected)
    assert picked[-2] is None
    assert {p // CHUNK_ROWS for p in picked if p is not None} == {0, 1, 2}
