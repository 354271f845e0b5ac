"""Pixel facts about the neuron cloud, colormaps and camera views (rendered under Xvfb)."""

from __future__ import annotations

import numpy as np
import pytest

vispy_scene = pytest.importorskip("vispy.scene")

from flyviz.render.camera import VIEW_PRESETS, apply_view, positions_bounds  # noqa: E402
from flyviz.render.cloud import NeuronCloud, auto_scale  # noqa: E402
from flyviz.render.colormaps import colorbar_image, display_curve, lut  # noqa: E402
from flyviz.render.picking import project_points  # noqa: E402

SIZE = (200, 160)


def grid_positions(n_side: int = 5, spacing: float = 10.0) -> np.ndarray:
    """Neurons on a square grid in the x-y plane (z = 0), centred on the origin."""
    ax = (np.arange(n_side) - (n_side - 1) / 2) * spacing
    xx, yy = np.meshgrid(ax, ax)
    return np.stack([xx.ravel(), yy.ravel(), np.zeros(n_side * n_side)], axis=1).astype(np.float32)


class Scene:
    """A small offscreen canvas with one cloud, viewed from the front."""

    def __init__(self, positions, visible=None, view="front", bounds=None, lean=False, size=SIZE):
        self.canvas = vispy_scene.SceneCanvas(size=size, show=False, bgcolor="black")
        self.view = self.canvas.central_widget.add_view()
        self.view.camera = vispy_scene.TurntableCamera()
        self.cloud = NeuronCloud(positions, visible, lean=lean, parent=self.view.scene)
        self.cloud.set_scale(1.0)
        self.cloud.set_point_size(6.0)
        if bounds is None:
            bounds = positions_bounds(positions, visible)
        apply_view(self.view.camera, view, bounds, aspect=size[0] / size[1])
        self.positions = positions

    def render(self, values) -> np.ndarray:
        self.cloud.set_activity(np.asarray(values, dtype=np.float32))
        return self.canvas.render()[..., :3].astype(np.float32)

    def pixel_of(self, index: int) -> tuple[int, int]:
        xy, _, _ = project_points(self.positions[index:index + 1],
                                  self.cloud.get_transform("visual", "canvas"))
        return int(round(xy[0, 0])), int(round(xy[0, 1]))

    def close(self):
        self.canvas.close()


def patch(img: np.ndarray, xy: tuple[int, int], r: int = 2) -> np.ndarray:
    x, y = xy
    return img[max(0, y - r):y + r + 1, max(0, x - r):x + r + 1]


@pytest.fixture
def grid():
    scene = Scene(grid_positions())
    yield scene
    scene.close()


def test_driven_neuron_is_bright_where_it_sits_and_far_pixels_are_dark(grid):
    n = len(grid.positions)
    values = np.zeros(n, np.float32)
    top_right = int(np.argmax(grid.positions[:, 0] + grid.positions[:, 1]))
    values[top_right] = 1.0
    img = grid.render(values)
    luminance = img.sum(axis=2)
    # The brightest pixel is in the top-right quadrant: x to the right, dorsal (+y) up.
    y, x = np.unravel_index(np.argmax(luminance), luminance.shape)
    assert x > SIZE[0] / 2 and y < SIZE[1] / 2
    assert patch(img, grid.pixel_of(top_right)).max() > 200
    # A quiet neuron is a faint dot, far dimmer than the active one, but not invisible.
    bottom_left = int(np.argmin(grid.positions[:, 0] + grid.positions[:, 1]))
    quiet = patch(luminance, grid.pixel_of(bottom_left)).max()
    assert 0 < quiet < 0.15 * patch(luminance, grid.pixel_of(top_right)).max()
    # Background between neurons stays black.
    assert luminance[:5, :5].max() == 0


def test_signed_mode_gives_positive_and_negative_neurons_different_hues(grid):
    n = len(grid.positions)
    values = np.zeros(n, np.float32)
    values[0], values[n - 1] = 1.0, -1.0
    img = grid.render(values)
    pos_rgb = patch(img, grid.pixel_of(0), 1).reshape(-1, 3).mean(axis=0)
    neg_rgb = patch(img, grid.pixel_of(n - 1), 1).reshape(-1, 3).mean(axis=0)
    assert pos_rgb[0] > pos_rgb[2] + 30  # warm
    assert neg_rgb[2] > neg_rgb[0] + 30  # cool
    # In |x| mode the two look alike: the sign no longer matters.
    grid.cloud.set_mode("abs")
    img = grid.render(values)
    a = patch(img, grid.pixel_of(0), 1).reshape(-1, 3).mean(axis=0)
    b = patch(img, grid.pixel_of(n - 1), 1).reshape(-1, 3).mean(axis=0)
    assert np.abs(a - b).max() < 8


def test_emphasis_mask_dims_the_rest(grid):
    n = len(grid.positions)
    values = np.full(n, 0.8, np.float32)
    mask = grid.positions[:, 0] < 0  # left columns stay lit
    before = grid.render(values).sum(axis=2)
    grid.cloud.set_emphasis(mask)
    after = grid.render(values).sum(axis=2)
    lit = [patch(after, grid.pixel_of(i)).max() for i in np.flatnonzero(mask)]
    dimmed = [patch(after, grid.pixel_of(i)).max() for i in np.flatnonzero(~mask)]
    assert min(lit) > 4 * max(dimmed)
    assert np.isclose(min(lit), min(patch(before, grid.pixel_of(i)).max()
                                    for i in np.flatnonzero(mask)), atol=3)
    grid.cloud.set_emphasis(None)
    np.testing.assert_array_equal(grid.render(values).sum(axis=2), before)


def test_activity_and_scale_change_the_image(grid):
    rng = np.random.default_rng(1)
    a = rng.uniform(-1, 1, len(grid.positions)).astype(np.float32)
    b = rng.uniform(-1, 1, len(grid.positions)).astype(np.float32)
    img_a, img_b = grid.render(a), grid.render(b)
    assert np.abs(img_a - img_b).mean() > 1.0
    grid.cloud.set_scale(10.0)  # everything now near zero: much darker
    assert grid.render(a).sum() < 0.5 * img_a.sum()


def test_hidden_neurons_are_not_drawn():
    pos = grid_positions()
    visible = np.ones(len(pos), bool)
    visible[0] = False
    scene = Scene(pos, visible)
    try:
        values = np.zeros(len(pos), np.float32)
        values[0] = 1.0
        img = scene.render(values)
        assert img.max() < 40  # only the faint quiet neurons remain
    finally:
        scene.close()


@pytest.fixture(params=[False, True], ids=["original", "lean"])
def either_grid(request):
    scene = Scene(grid_positions(), lean=request.param)
    yield scene
    scene.close()


def test_selected_neuron_gets_a_ring(either_grid):
    """Also on the lean path, whose shader carries the ring's code only while one is shown."""
    grid = either_grid
    values = np.zeros(len(grid.positions), np.float32)
    centre = len(grid.positions) // 2
    before = grid.render(values)
    grid.cloud.set_selected(centre)
    after = grid.render(values)
    diff = np.abs(after - before).sum(axis=2)
    ys, xs = np.nonzero(diff > 30)
    cx, cy = grid.pixel_of(centre)
    radii = np.hypot(xs - cx, ys - cy)
    # A ring: changed pixels lie on a circle a few pixels out, not on the centre.
    assert xs.size > 20 and radii.min() > 3 and radii.max() < 12
    grid.cloud.set_selected(None)
    np.testing.assert_array_equal(grid.render(values), before)
    grid.cloud.set_selected(centre - 1)              # moves with the selection
    grid.cloud.set_selected(centre)
    np.testing.assert_array_equal(grid.render(values), after)


@pytest.mark.parametrize("view,depth_axis", [("front", 2), ("side", 0), ("top", 1)])
def test_view_presets_look_along_the_named_axis(view, depth_axis):
    pos = np.array([[0, 0, 0], [50, 0, 0], [0, 50, 0], [0, 0, 50]], np.float32)
    # Framed as a larger brain, so that perspective is mild at these points.
    scene = Scene(pos, view=view, bounds=np.array([[-100.0] * 3, [100.0] * 3]))
    try:
        xy, _, _ = project_points(pos, scene.cloud.get_transform("visual", "canvas"))
        moves = np.linalg.norm(xy[1:] - xy[0], axis=1)
        # The depth axis barely moves on screen (perspective only), the others do.
        assert moves[depth_axis] < 0.5 * min(m for i, m in enumerate(moves) if i != depth_axis)
        if view in ("front", "side"):
            assert xy[2, 1] < xy[0, 1] - 20  # dorsal is up
        if view in ("front", "top"):
            assert xy[1, 0] > xy[0, 0] + 20  # x to the right
    finally:
        scene.close()
    assert set(VIEW_PRESETS) == {"front", "top", "side"}


def brain_box(extent=(520.0, 190.0, 210.0), n_side: int = 7) -> np.ndarray:
    """Neurons filling a box of the fly brain's proportions (longest left-right), its
    corners included: a view that fits the box fits every neuron."""
    axes = [np.linspace(-e / 2, e / 2, n_side) for e in extent]
    return np.stack([g.ravel() for g in np.meshgrid(*axes)], axis=1).astype(np.float32)


def lit_box(img: np.ndarray) -> tuple[int, int, int, int]:
    """``(left, top, right, bottom)`` of the pixels the neurons light."""
    ys, xs = np.nonzero(img.sum(axis=2) > 60)
    assert xs.size, "nothing drawn"
    return int(xs.min()), int(ys.min()), int(xs.max()), int(ys.max())


def assert_framed(img: np.ndarray, size: tuple[int, int], what: str) -> None:
    """The lit neurons stay inside the image with a margin and fill a fair share of it."""
    w, h = size
    left, top, right, bottom = lit_box(img)
    edge = 0.02
    assert left > edge * w and right < (1 - edge) * w, (what, left, right, w)
    assert top > edge * h and bottom < (1 - edge) * h, (what, top, bottom, h)
    share = max((right - left) / w, (bottom - top) / h)
    assert share > 0.6, (what, share)


@pytest.mark.parametrize("size", [(240, 150), (150, 240)], ids=["wide", "tall"])
@pytest.mark.parametrize("view", sorted(VIEW_PRESETS))
def test_every_view_fits_the_whole_brain_with_a_margin(view, size):
    """Perspective draws the near face of the brain larger than its middle: the side view,
    looking along the brain's longest axis, framed the middle alone and spilled the brain
    off all four edges."""
    pos = brain_box()
    scene = Scene(pos, view=view, size=size)
    scene.cloud.set_point_size(2.0)  # the neurons' centres, not their discs, are framed
    try:
        assert_framed(scene.render(np.ones(len(pos), np.float32)), size, view)
    finally:
        scene.close()


@pytest.mark.parametrize("view", sorted(VIEW_PRESETS))
def test_an_orbiting_view_fits_the_brain_at_every_azimuth(view):
    pos = brain_box()
    size = (240, 150)
    scene = Scene(pos, view=view, size=size)
    try:
        apply_view(scene.view.camera, view, positions_bounds(pos), aspect=size[0] / size[1],
                   orbit=True)
        start = scene.view.camera.azimuth
        for turn in (0.0, 30.0, 45.0, 90.0, 135.0):
            scene.view.camera.azimuth = start + turn
            img = scene.render(np.ones(len(pos), np.float32))
            left, top, right, bottom = lit_box(img)
            assert 0 < left and right < size[0] - 1 and 0 < top and bottom < size[1] - 1, \
                (view, turn, left, top, right, bottom)
    finally:
        scene.close()


def test_colormaps_and_colorbar():
    signed, absolute = lut("signed"), lut("abs")
    assert signed.shape == absolute.shape == (256, 4) and signed.dtype == np.float32
    # Brightness grows with |x| in both directions from zero.
    assert signed[128, 3] < signed[200, 3] < signed[255, 3]
    assert signed[128, 3] < signed[55, 3] < signed[0, 3]
    assert np.all(np.diff(absolute[:, 3]) >= 0)
    bar = colorbar_image("signed", 100, 8)
    assert bar.shape == (100, 8, 4) and bar.dtype == np.uint8
    top, middle, bottom = bar[0, 0, :3].astype(int), bar[50, 0, :3].astype(int), bar[-1, 0, :3].astype(int)
    assert top[0] > top[2] and bottom[2] > bottom[0]  # warm on top, cool below
    assert middle.sum() < 0.5 * min(top.sum(), bottom.sum())
    with pytest.raises(ValueError):
        lut("rainbow")


def test_auto_scale_ignores_outliers_and_handles_silence():
    values = np.concatenate([np.full(990, 0.5), np.full(10, 100.0), [np.nan]]).astype(np.float32)
    assert 0.5 <= auto_scale(values) < 100.0
    assert auto_scale(np.zeros(10, np.float32)) == 1.0


def test_bad_inputs_are_rejected(grid):
    with pytest.raises(ValueError):
        grid.cloud.set_activity(np.zeros(3, np.float32))
    with pytest.raises(ValueError):
        grid.cloud.set_mode("log")
    with pytest.raises(ValueError):
        grid.cloud.set_scale(0.0)
    with pytest.raises(ValueError):
        grid.cloud.set_selected(10_000)
    with pytest.raises(ValueError):
        NeuronCloud(np.zeros((4, 2), np.float32))


@pytest.mark.parametrize("colormap, value_range", [
    ("signed", (-1.0, 1.0)), ("abs", (0.0, 1.0)), ("difference", (-0.5, 0.5)),
    ("sequential", (-0.25, 1.25)), ("signed", (0.0, 2.0))])
def test_shader_colours_match_the_colourbar_table(colormap, value_range):
    """The centre of a neuron shows exactly the table colour at its brightness, for every colormap."""
    from flyviz.render.colormaps import magnitude

    pos = np.zeros((1, 3), np.float32)
    scene = Scene(pos, bounds=np.array([[-50.0] * 3, [50.0] * 3]))
    try:
        scene.cloud.set_colormap(colormap)
        scene.cloud.set_range(*value_range)
        scene.cloud.set_glow(0.0)
        scene.cloud.set_point_size(12.0)
        table = lut(colormap)
        x, y = scene.pixel_of(0)
        lo, hi = value_range
        for value in (-0.8, -0.3, 0.0, 0.2, 0.45, 1.0, 3.0):
            img = scene.render(np.array([value], np.float32))
            v = abs(value) if colormap == "abs" else value
            coord = float(np.clip((v - lo) / (hi - lo), 0.0, 1.0))
            # The table's hues are piecewise linear, so interpolating it is exact;
            # its brightness column samples display_curve, evaluated here exactly.
            rgb = np.array([np.interp(coord, np.linspace(0, 1, 256), table[:, c]) for c in range(3)])
            expected = rgb * display_curve(magnitude(value, colormap, lo, hi)) * 255
            np.testing.assert_allclose(img[y, x], expected, atol=4,
                                       err_msg=f"{colormap} {value_range} at {value}")
            # And the colourbar image is made from the same table.
            bar = colorbar_image(colormap, 256, 1)[::-1, 0, :3].astype(float)
            i = int(round(coord * 255))
            np.testing.assert_allclose(bar[i], table[i, :3] * table[i, 3] * 255, atol=1)
    finally:
        scene.close()


def _hue(rgb) -> float:
    import colorsys

    return 360.0 * colorsys.rgb_to_hsv(*np.clip(rgb, 0, 1))[0]


def _hue_gap(a, b) -> float:
    d = abs(_hue(a) - _hue(b)) % 360.0
    return min(d, 360.0 - d)


def test_difference_and_sequential_colormaps_are_told_apart_from_the_activation_ones():
    from flyviz.render.colormaps import COLORMAPS, is_diverging

    assert set(COLORMAPS) >= {"signed", "abs", "difference", "sequential"}
    signed, diff = lut("signed"), lut("difference")
    absolute, seq = lut("abs"), lut("sequential")
    # Diverging: dark in the middle, bright at both ends, blue below and red above.
    assert diff[128, 3] < 0.2 and diff[0, 3] > 0.9 and diff[255, 3] > 0.9
    low, high = diff[10, :3], diff[245, :3]
    assert low[2] > low[0] + 0.4 and high[0] > high[2] + 0.4
    # ...and at every strong value a hue clearly apart from the signed activation map's.
    for i in (0, 30, 60, 195, 225, 255):
        assert _hue_gap(diff[i, :3], signed[i, :3]) > 20, i
    # Sequential: brightness grows with the value; its hues are not the magma-like |x| map's.
    assert np.all(np.diff(seq[:, 3]) >= 0) and seq[0, 3] < 0.1
    assert np.mean([_hue_gap(seq[i, :3], absolute[i, :3]) for i in range(40, 240, 20)]) > 45
    # Readable on the dark background: the ends are bright, not navy on black.
    for table in (diff, seq):
        assert (table[-1, :3] * table[-1, 3]).max() > 0.8
    assert is_diverging("difference") and not is_diverging("sequential")


def test_gain_falls_as_the_view_gets_crowded_or_busy():
    from flyviz.render.cloud import activity_load, density_gain

    rng = np.random.default_rng(0)
    sparse = rng.uniform(0, 1000, (500, 2))
    crowded = rng.uniform(0, 100, (20_000, 2))  # two neurons per pixel
    assert density_gain(sparse, 3.0) == 1.0  # nothing overlaps: full brightness
    assert density_gain(crowded, 3.0) < 0.5
    quiet = activity_load(rng.normal(0, 0.05, 10_000), 1.0)
    busy = activity_load(rng.normal(0, 0.8, 10_000), 1.0)
    assert quiet[0] < busy[0] and quiet[1] < busy[1]
    assert density_gain(crowded, 3.0, *busy[:1], size_factor=busy[1]) < \
        density_gain(crowded, 3.0, *quiet[:1], size_factor=quiet[1])


@pytest.mark.parametrize("spread", [120.0, 3e6], ids=["on screen", "zoomed far in"])
def test_the_gain_counts_the_neurons_sharing_each_screen_cell(spread):
    """The gain is the clipped inverse of the 75th percentile of how many neurons share
    each neuron's 8-pixel cell (times the disc's area over the cell's and the typical
    brightness), counted here cell by cell, for a view on screen and one zoomed so far in
    that the cells lie millions of pixels apart; NaNs are left out."""
    from collections import Counter

    from flyviz.render.cloud import density_gain

    rng = np.random.default_rng(5)
    xy = rng.normal(0.0, spread / 6, (6000, 2))
    xy[:40] = np.nan
    finite = xy[40:]
    cells = [tuple(c) for c in np.floor(finite / 8.0).astype(np.int64)]
    shared = Counter(cells)
    crowd = np.array([shared[c] for c in cells])
    disc = np.pi * (0.5 * 2.5 * 1.3) ** 2
    coverage = float(np.percentile(crowd, 75)) * disc / 8.0 ** 2
    expected = float(np.clip(1.0 / max(coverage * 0.4, 1e-6), 0.05, 1.0))
    assert density_gain(xy, 2.5, 0.4, cell_px=8.0, size_factor=1.3) == expected
    assert expected < 1.0 or spread > 1e5        # the view on screen is crowded


def test_lower_detail_draws_a_fixed_subset_of_the_shown_neurons():
    pos = grid_positions(n_side=8)
    visible = np.ones(len(pos), bool)
    visible[:8] = False                               # the first row has no soma
    scene = Scene(pos, visible)
    try:
        values = np.ones(len(pos), np.float32)

        shown = [int(i) for i in np.flatnonzero(visible)]

        def lit() -> set[int]:
            img = scene.render(values).sum(axis=2)
            return {i for i in shown if patch(img, scene.pixel_of(i), 1).max() > 150}

        everything = lit()
        assert everything == set(shown)
        scene.cloud.set_detail(0.25)
        quarter = lit()
        assert quarter < everything and abs(len(quarter) - 0.25 * len(everything)) <= 1
        assert lit() == quarter                       # the same neurons every frame
        scene.cloud.set_detail(1.0)
        assert lit() == everything
    finally:
        scene.close()


def _crowd(n: int = 3000, seed: int = 3) -> np.ndarray:
    """Neurons scattered through a ball: crowded enough that sprites overlap a lot."""
    rng = np.random.default_rng(seed)
    points = rng.normal(size=(n, 3))
    return (60.0 * points / np.linalg.norm(points, axis=1, keepdims=True)
            * rng.uniform(0, 1, (n, 1)) ** (1 / 3)).astype(np.float32)


@pytest.mark.parametrize("setting", ["default", "abs", "strong glow", "emphasis and ring",
                                     "resting"])
def test_the_lean_cloud_draws_the_same_picture(setting):
    """The software-OpenGL shaders end sprites where the halo is invisible: same picture."""
    positions = _crowd()
    n = len(positions)
    rng = np.random.default_rng(4)
    values = np.clip(rng.normal(0, 0.6, n), -1, 1).astype(np.float32)
    images = []
    for lean in (False, True):
        scene = Scene(positions, lean=lean, size=(320, 240))
        try:
            assert scene.cloud.lean is lean
            scene.cloud.set_point_size(5.0)
            scene.cloud.set_gain(0.6)
            if setting == "abs":
                scene.cloud.set_mode("abs")
            if setting == "strong glow":
                scene.cloud.set_glow(2.0)
            if setting == "emphasis and ring":
                scene.cloud.set_emphasis(np.arange(n) % 3 == 0)
                scene.cloud.set_selected(7)
            if setting == "resting":
                scene.cloud.set_resting(True)
            images.append(scene.render(values).astype(int))
        finally:
            scene.close()
    original, lean_image = images
    difference = np.abs(original - lean_image).max(axis=-1)
    assert (original.max(axis=-1) > 40).sum() > 5000      # a real, crowded picture
    assert difference.max() <= 3
    assert (difference > 0).mean() < 0.02                 # one step here and there, no more


def test_the_lean_cloud_keeps_positive_and_negative_hues():
    grid = Scene(grid_positions(), lean=True)
    try:
        n = len(grid.positions)
        values = np.zeros(n, np.float32)
        values[0], values[n - 1] = 1.0, -1.0
        img = grid.render(values)
        pos_rgb = patch(img, grid.pixel_of(0), 1).reshape(-1, 3).mean(axis=0)
        neg_rgb = patch(img, grid.pixel_of(n - 1), 1).reshape(-1, 3).mean(axis=0)
        assert pos_rgb[0] > pos_rgb[2] + 30  # warm
        assert neg_rgb[2] > neg_rgb[0] + 30  # cool
    finally:
        grid.close()
