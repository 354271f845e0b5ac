"""166,700 neurons (the whole MaleCNS) in the brain view, the whole-brain raster and a movie frame.

Pixel and data facts at that size, on a synthetic anatomy: a lone lit neuron is drawn where
it is and picked where it is drawn, its value lands in its raster row, and a movie frame
draws it at its place. How fast each is beside 49,393 neurons is measured by
``python -m tests.bench_app --points``, not asserted here.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pytestqt")
pytest.importorskip("vispy")

from gl_skip import offscreen_gl_or_skip  # noqa: E402

pytestmark = [pytest.mark.gui, pytest.mark.slow]

#: The neurons of fly-connectome-malecns-166k.
WHOLE_MALECNS = 166_700


@pytest.fixture(scope="module")
def anatomy():
    from flyviz.model.synthetic import make_random_checkpoint

    checkpoint = make_random_checkpoint(WHOLE_MALECNS, WHOLE_MALECNS, d_embed=4, delay_k=2,
                                        vocabulary=16, readout_rank=None, seed=5)
    return checkpoint.anatomy


def _lone_neuron(xy: np.ndarray, shown: np.ndarray, size: tuple[int, int], gap: float) -> int:
    """A shown neuron inside the picture with no other shown neuron within ``gap`` pixels
    (at 166,700 neurons in a small picture, about one a pixel: its own pixel, not a clear disc)."""
    w, h = size
    inside = np.flatnonzero(shown & (xy[:, 0] > 20) & (xy[:, 0] < w - 20)
                            & (xy[:, 1] > 20) & (xy[:, 1] < h - 20))
    others = xy[shown]
    for i in inside[:: max(1, inside.size // 400)]:
        if np.count_nonzero(np.hypot(*(others - xy[i]).T) < gap) == 1:
            return int(i)
    raise AssertionError("no lone neuron in the picture")


def test_the_brain_view_draws_and_picks_a_neuron_among_166700(qtbot, anatomy):
    from app_conftest import colour_at, qimage_rgb, show_state

    from flyviz.app.brain.brain_view import BrainView
    from flyviz.render.picking import project_points

    view = BrainView()
    qtbot.addWidget(view)
    view.setFixedSize(480, 360)
    view.show()
    qtbot.waitExposed(view)
    view.set_anatomy(anatomy, WHOLE_MALECNS)
    view.smoothing_s = 0.0
    view.set_gain(1.0)
    assert int(np.count_nonzero(view.visible)) > 140_000
    xy, _, in_front = project_points(view.positions, view.canvas_transform())
    shown = in_front & np.asarray(view.visible)
    lone = _lone_neuron(xy, shown, tuple(view.canvas.size), gap=1.5)

    def shown_picture(state: np.ndarray) -> float:
        show_state(view, qtbot, state, timeout=20_000)
        rgb = qimage_rgb(view.grab_image())
        return float(colour_at(rgb, xy[lone], rgb.shape[0] / view.canvas.size[1]).sum())

    quiet = np.zeros(WHOLE_MALECNS, np.float32)
    lit = quiet.copy()
    lit[lone] = 1.0
    dark = shown_picture(quiet)
    bright = shown_picture(lit)
    assert bright > dark + 150, (dark, bright)
    assert view.pick(*xy[lone], radius_px=1.0) == lone


def test_the_raster_pools_a_neuron_of_166700_into_its_row(qtbot, anatomy):
    from flyviz.analysis.population import anatomy_order
    from flyviz.app._testing import make_frame
    from flyviz.app.population.population_panel import WholeBrainRaster
    from flyviz.record.recording import Recording

    raster = WholeBrainRaster()
    qtbot.addWidget(raster)
    raster.resize(900, 320)
    raster.show()
    qtbot.waitExposed(raster)
    raster.set_order(anatomy_order(anatomy.superclass, anatomy.cell_type, n=WHOLE_MALECNS))
    rng = np.random.default_rng(0)
    recording = Recording(WHOLE_MALECNS)
    loud = 123_456
    for i in range(3):
        state = rng.uniform(-0.1, 0.1, WHOLE_MALECNS).astype(np.float32)
        if i == 1:
            state[loud] = -5.0
        recording.append(make_frame(i, state))
    raster.show_frame(recording, 2)
    assert raster.pooler is not None and raster.columns == 3
    rank = int(np.flatnonzero(raster.order.order == loud)[0])    # its place in the order
    row = raster.pooler.row_of_neuron(rank)
    assert loud in raster.neurons_in_row(row)
    assert raster.pooled[row, 1] == -5.0                 # the largest |x| of its row
    assert np.all(np.abs(raster.pooled[:, [0, 2]]) <= 0.1)
    assert raster.image.image.shape == (raster.pooler.rows, 3)


def test_a_movie_frame_draws_a_neuron_of_166700_where_it_is(anatomy):
    from flyviz.render.offscreen import FrameRenderer
    from flyviz.render.picking import project_points
    from flyviz.render.style import CloudStyle

    size = (480, 360)
    with offscreen_gl_or_skip():
        renderer = FrameRenderer(anatomy.positions_um(), anatomy.valid, size, overlays=False,
                                 style=CloudStyle(point_size=6.0, gain=1.0))
    with renderer:
        assert renderer.cloud.n_neurons == WHOLE_MALECNS
        xy, _, in_front = project_points(renderer.cloud.positions,
                                         renderer.cloud.get_transform("visual", "canvas"))
        lone = _lone_neuron(xy, in_front & np.asarray(anatomy.valid), size, gap=1.5)
        quiet = np.zeros(WHOLE_MALECNS, np.float32)
        lit = quiet.copy()
        lit[lone] = 1.0
        added = (renderer.render_state(lit).astype(int) - renderer.render_state(quiet)).sum(-1)
    y, x = np.unravel_index(np.argmax(added), added.shape)
    assert added.max() > 150
    assert np.hypot(x + 0.5 - xy[lone, 0], y + 0.5 - xy[lone, 1]) <= 3.0
