"""A movie and a still of a viewer state, with no window: what the state shows, exactly.

``export_state`` (and ``flyviz.export_movie(state, ...)``) draws the state's
recording with its colours, display settings, highlight and camera: the same
frames as ``export_recording`` given those by hand; ``render_state_image`` draws
the state's token as the movie's last frame of that token does.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

pytest.importorskip("vispy")
iio = pytest.importorskip("imageio.v3")

from flyviz.export import ExportOptions, export_recording, export_state  # noqa: E402
from flyviz.model.errors import ExportError  # noqa: E402
from gl_skip import offscreen_gl_or_skip  # noqa: E402
from flyviz.model.layout import ball_layout  # noqa: E402
from flyviz.record.recording import Recording  # noqa: E402
from flyviz.viewer import ViewerState  # noqa: E402

N = 300
SIZE = (160, 96)


def _frame(i: int, state: np.ndarray):
    from flyviz.record.frame import Frame

    return Frame(position=i, phase="prompt", input_token_id=i, input_text=f"t{i}",
                 predicted_token_id=0, predicted_text="x", probability=0.5,
                 top_k_ids=np.zeros(2, np.int32), top_k_probabilities=np.zeros(2, np.float32),
                 top_k_text=("x", "y"), state=state, mean_abs_state=float(np.abs(state).mean()),
                 text_so_far="t" * (i + 1))


@pytest.fixture
def state() -> ViewerState:
    rng = np.random.default_rng(2)
    s = ViewerState()
    s.set_model(None, anatomy=ball_layout(N), name="ball")
    rec = Recording(N, {"model_name": "ball"})
    for i in range(3):
        rec.append(_frame(i, rng.uniform(-1, 1, N).astype(np.float32)))
    s.set_recording(rec, index=2)
    s.display.mode = "abs"
    s.display.auto_scale = False
    s.display.limit = 1.0
    s.display.point_size = 6.0
    s.view = "top"
    return s


def _frames(folder) -> list[np.ndarray]:
    return [iio.imread(p)[..., :3] for p in sorted(folder.glob("*.png"))]


def test_a_state_movie_is_the_recording_drawn_as_the_state_says(state, tmp_path):
    options = ExportOptions(size=SIZE, frames_per_token=1, overlays=False, view="top")
    with offscreen_gl_or_skip():
        export_state(state, tmp_path / "state", options)
    export_recording(state.recording, state.anatomy, tmp_path / "by-hand", options,
                     style=state.style())
    mine, by_hand = _frames(tmp_path / "state"), _frames(tmp_path / "by-hand")
    assert len(mine) == 3 and all(np.array_equal(a, b) for a, b in zip(mine, by_hand))
    assert mine[-1].max() > 60                   # drawn, not blank
    # A highlight is part of what the state shows: the dimmed neurons get darker.
    state.highlights.set_neurons("find", np.arange(10))
    export_state(state, tmp_path / "lit", options)
    background = np.round(np.asarray(state.style().background[:3]) * 255).astype(int)

    def light(image: np.ndarray) -> int:
        return int(np.clip(image.astype(int) - background, 0, None).sum())

    assert light(_frames(tmp_path / "lit")[-1]) < 0.5 * light(mine[-1])


def test_export_movie_takes_a_state_and_a_still_matches_its_last_frame(state, tmp_path):
    import flyviz
    from flyviz.render.offscreen import render_state_image

    with offscreen_gl_or_skip():
        with warnings.catch_warnings():
            warnings.simplefilter("error")       # no "no model" warning: the state has one
            out = flyviz.export_movie(state, tmp_path / "frames", size=SIZE, frames_per_token=1,
                                      overlays=False)
        still = render_state_image(state, SIZE)
    last = _frames(out)[-1]
    assert still.shape == (SIZE[1], SIZE[0], 3)
    lit_still, lit_movie = still.max(axis=-1) > 40, last.max(axis=-1) > 40
    assert lit_still.sum() > 50
    assert (lit_still & lit_movie).sum() / (lit_still | lit_movie).sum() > 0.98
    with pytest.raises(flyviz.errors.InputError, match="takes its model from the state"):
        flyviz.export_movie(state, tmp_path / "x", model=object())
    with pytest.raises(ExportError, match="out of range"):
        render_state_image(state, SIZE, index=7)
