"""The cloud painted on the CPU (flyviz.render.splat) is the lean shaders' picture.

Two kinds of facts: the kernel's rules on a cloud it can be checked against by
hand (which pixels a sprite covers, saturation, order, clipping; no OpenGL),
and the picture against what llvmpipe draws with the lean shaders, under Xvfb.
"""

from __future__ import annotations

import numpy as np
import pytest

from flyviz.render import splat
from flyviz.render.cloud import INVISIBLE_LEVEL
from flyviz.render.colormaps import _STOPS, QUIET_ALPHA, RESTING_ALPHA, RESTING_RGB, _ramp

pytest.importorskip("numba")


@pytest.fixture(scope="module", autouse=True)
def compiled():
    assert splat.splat_available(wait=True)


class _Identity:
    """A transform from window pixels (x, y, depth) straight to clip coordinates."""

    def __init__(self, w: int, h: int) -> None:
        self.matrix = np.array([[2.0 / w, 0, 0, 0], [0, 2.0 / h, 0, 0], [0, 0, 1, 0],
                                [-1.0, -1.0, 0, 1]])

    def map(self, coords: np.ndarray) -> np.ndarray:
        return np.asarray(coords, np.float64) @ self.matrix


class FlatCloud:
    """What the painter reads of a cloud, for neurons placed at window pixels."""

    def __init__(self, window_xy, values, w: int = 40, h: int = 30, *, size: float = 3.0,
                 glow: float = 1.0, gain: float = 1.0, colormap: str = "signed") -> None:
        xy = np.asarray(window_xy, np.float32)
        self.positions = np.c_[xy, np.zeros(len(xy), np.float32)].astype(np.float32)
        self.activity = np.asarray(values, np.float32)
        self.emphasis_weights = np.ones(len(xy), np.float32)
        self.drawn_index = np.arange(len(xy))
        self.colormap = colormap
        self.selected: int | None = None
        self.parent = None
        self._transform = _Identity(w, h)
        self._uniforms = {"u_low": -1.0, "u_inv_span": 0.5, "u_fold": 0.0, "u_diverging": 1.0,
                          "u_size": size, "u_glow": glow, "u_dim": 0.1, "u_gain": gain,
                          "u_px_scale": 1.0, "u_invisible": INVISIBLE_LEVEL, "u_resting": 0.0}
        if colormap == "abs":
            self._uniforms.update(u_low=0.0, u_inv_span=1.0, u_fold=1.0, u_diverging=0.0)

    def get_transform(self, _from: str, _to: str) -> _Identity:
        return self._transform

    def uniforms(self) -> dict[str, float]:
        return dict(self._uniforms)


def paint(cloud: FlatCloud, w: int = 40, h: int = 30, under: int = 0) -> np.ndarray:
    """The frame as ``(h, w, 3)`` int R, G, B (top row first)."""
    below = np.zeros((h, w, 4), np.uint8)
    below[..., :3] = under
    out = np.empty_like(below)
    splat.CloudPainter(cloud).paint(below, out)
    return out[..., 2::-1].astype(int)


def test_a_quiet_neuron_covers_the_pixel_centres_inside_its_disc_and_nothing_else():
    x, y, w, h = 12.3, 9.6, 40, 30
    frame = paint(FlatCloud([[x, y]], [0.0], w, h))
    # A value at the middle of the range (lit = 0, no halo), emphasis 1: a disc of 0.8 size.
    core = 3.0 * 0.8
    cols, rows = np.meshgrid(np.arange(w) + 0.5, np.arange(h) + 0.5)
    gl_rows = h - rows                                   # OpenGL counts rows from the bottom
    r2 = ((cols - x) ** 2 + (gl_rows - y) ** 2) / (core / 2) ** 2
    inside = r2 <= 1.0
    lit = frame.max(axis=-1) > 0
    assert inside.sum() >= 3
    assert not (lit & ~inside).any()                     # nothing outside the disc
    # Inside, the brightness falls from the middle outwards (the disc's smooth edge).
    centre = np.unravel_index(np.argmin(np.where(inside, r2, np.inf)), r2.shape)
    assert frame[centre].max() == frame.max()
    # There (well inside the disc) the colour is the colormap's middle at a quiet neuron's
    # brightness, rounded to 8 bits.
    middle = _ramp(_STOPS["signed"], np.array([0.5]))[0]
    assert np.array_equal(frame[centre], np.rint(255 * middle * QUIET_ALPHA).astype(int))


def test_the_resting_brain_is_one_neutral_tone_whatever_the_values():
    """Resting: every neuron a quiet neuron's disc in the resting colour at the resting
    brightness, its value ignored; not resting, the same neurons in their own colours."""
    x, y = 12.3, 9.6
    discs = []
    for value in (0.0, 1.0, -0.7):
        cloud = FlatCloud([[x, y]], [value])
        cloud._uniforms["u_resting"] = 1.0
        discs.append(paint(cloud))
    assert all(np.array_equal(discs[0], d) for d in discs[1:])
    centre = np.unravel_index(np.argmax(discs[0].sum(axis=-1)), discs[0].shape[:2])
    want = np.rint(255 * np.asarray(RESTING_RGB, np.float32) * np.float32(RESTING_ALPHA))
    assert np.array_equal(discs[0][centre], want.astype(int))
    assert np.array_equal(discs[0].max(axis=-1) > 0, paint(FlatCloud([[x, y]], [0.0])).max(
        axis=-1) > 0)                                    # a quiet neuron's disc, no halo
    active = paint(FlatCloud([[x, y]], [1.0]))
    top = _ramp(_STOPS["signed"], np.array([1.0]))[0]
    assert np.array_equal(active[centre], np.rint(255 * top).astype(int))   # as ever


def test_contributions_add_up_saturate_at_255_and_do_not_depend_on_order():
    spots = [[20.0, 15.0]] * 6 + [[8.0, 8.0], [30.0, 22.0]]
    values = [1.0] * 6 + [-1.0, 0.5]
    cloud = FlatCloud(spots, values)
    one = paint(FlatCloud(spots[:1], values[:1]))
    six = paint(cloud)
    # Six bright neurons on one spot: the sum of six, clipped at white.
    assert six[15, 20].max() == 255
    expected = np.minimum(6 * one[15, 20], 255)
    assert np.array_equal(six[15, 20], expected)
    cloud.drawn_index = cloud.drawn_index[::-1].copy()   # the other way round
    assert np.array_equal(paint(cloud), six)
    # What was under is added to, as blending (one, one) over it does.
    assert np.array_equal(paint(FlatCloud(spots, values), under=10), np.minimum(six + 10, 255))


def test_a_neuron_whose_centre_is_outside_the_window_is_not_drawn_even_in_part():
    w, h = 40, 30
    inside = paint(FlatCloud([[0.5, 15.0]], [1.0], w, h))
    outside = paint(FlatCloud([[-0.5, 15.0]], [1.0], w, h))
    assert inside.max() > 100 and outside.max() == 0


def test_the_selected_neuron_gets_its_ring_in_the_rings_colour():
    cloud = FlatCloud([[20.0, 15.0]], [0.0])
    plain = paint(cloud)
    cloud.selected = 0
    ringed = paint(cloud)
    added = ringed - plain
    assert (added.max(axis=-1) > 60).sum() >= 8           # a ring of pixels, not one
    g, r = added[..., 1], added[..., 0]
    assert g.max() > r.max()                               # (0.45, 1.0, 0.75): green first


def test_without_numba_the_painter_is_not_ready(monkeypatch):
    monkeypatch.setitem(splat._kernel, "paint", None)
    assert not splat.splat_available()
    with pytest.raises(RuntimeError, match="not compiled"):
        paint(FlatCloud([[20.0, 15.0]], [1.0]))


# ---------------------------------------------------------------- against llvmpipe
@pytest.fixture
def software_gl():
    pytest.importorskip("vispy.scene")
    from flyviz.render.gl_backend import current_renderer, is_software_renderer
    from vispy import scene

    canvas = scene.SceneCanvas(size=(8, 8), show=False)
    try:
        canvas.set_current()
        if not is_software_renderer(current_renderer()):
            pytest.skip("the CPU painter matches llvmpipe's rasteriser; this OpenGL is a GPU")
    finally:
        canvas.close()


def assert_same_picture(a: np.ndarray, b: np.ndarray) -> None:
    """Equal but for rounding: a level here and there; at most three pixels in 10,000 off
    by more (a faint fragment at a sprite's very edge), none by more than 8 levels."""
    diff = np.abs(a.astype(int) - b.astype(int)).max(axis=-1)
    assert diff.max() <= 8, diff.max()
    assert np.mean(diff > 2) <= 3e-4, np.count_nonzero(diff > 2)
    assert np.mean(diff > 0) <= 0.03, np.mean(diff > 0)


@pytest.mark.parametrize("setting", ["default", "abs", "strong glow", "emphasis and ring",
                                     "large points", "resting"])
def test_the_cpu_picture_is_llvmpipes_lean_picture(software_gl, setting):
    from test_render_cloud import Scene, _crowd

    positions = _crowd()
    n = len(positions)
    rng = np.random.default_rng(4)
    values = np.clip(rng.normal(0, 0.6, n), -1, 1).astype(np.float32)
    scene = Scene(positions, lean=True, size=(320, 240))
    try:
        cloud = scene.cloud
        cloud.set_point_size(12.0 if setting == "large points" else 5.0)
        cloud.set_gain(0.6)
        if setting == "abs":
            cloud.set_mode("abs")
        if setting == "strong glow":
            cloud.set_glow(2.0)
        if setting == "emphasis and ring":
            cloud.set_emphasis(np.arange(n) % 3 == 0)
            cloud.set_selected(7)
        if setting == "resting":
            cloud.set_resting(True)
        drawn = scene.render(values).astype(np.uint8)
        under = np.zeros((240, 320, 4), np.uint8)          # the canvas's black background
        out = np.empty_like(under)
        painter = splat.CloudPainter(cloud)
        painter.paint(under, out)
        painted = out[..., 2::-1]
    finally:
        scene.close()
    assert (drawn.max(axis=-1) > 40).sum() > 5000          # a real, crowded picture
    assert_same_picture(painted, drawn)
    assert painter.frames == 1


def test_the_cpu_picture_keeps_the_views_clipping_and_the_demo_brains_look(software_gl):
    """The whole demo brain through the movie renderer's view (clipped inside its border)."""
    from flyviz.model.resolve import load_model
    from flyviz.render.offscreen import FrameRenderer

    checkpoint = load_model("demo")
    anatomy = checkpoint.anatomy
    rng = np.random.default_rng(1)
    n = checkpoint.config.neurons
    state = (np.tanh(rng.standard_normal(n) * 0.6) * rng.random(n) ** 3).astype(np.float32)
    renderer = FrameRenderer(anatomy.positions_um(), np.asarray(anatomy.valid), (640, 360),
                             overlays=False, value_range=(-1.0, 1.0))
    try:
        drawn = renderer.render_state(state)
        under = np.empty((360, 640, 4), np.uint8)
        under[:] = np.r_[drawn[0, 0, ::-1], 255]           # the background it was drawn on
        out = np.empty_like(under)
        splat.CloudPainter(renderer.cloud).paint(under, out)
    finally:
        renderer.close()
    painted = out[..., 2::-1]
    assert (drawn.max(axis=-1) > drawn[0, 0].max() + 20).sum() > 5000
    assert_same_picture(painted, drawn)
