"""A flow movie of a trace: one frame per lag, the flow layer's colours, the overlay's words."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("vispy")
imageio_ffmpeg = pytest.importorskip("imageio_ffmpeg")
iio = pytest.importorskip("imageio.v3")

from flyviz.export import ExportOptions  # noqa: E402
from flyviz.export.flow import (export_flow, flow_overlay, make_flow_renderer,  # noqa: E402
                                top_tokens)
from flyviz.model.errors import ExportError  # noqa: E402
from gl_skip import offscreen_gl_or_skip  # noqa: E402
from flyviz.render.colormaps import lut  # noqa: E402
from flyviz.render.style import BACKGROUND, CloudStyle  # noqa: E402

PROMPT = "the little dog saw a big red ball"
WINDOW = 5

#: Per channel, how far a drawn disc centre may be from the colour computed here.
TOLERANCE = 12


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    """``(attribution, anatomy)``: a trace over a 5-step window of a small random model whose
    few neurons are drawn far apart."""
    from flyviz.model.synthetic import make_random_checkpoint, write_tokenizer
    from flyviz.model.tokenizer import FlyTokenizer
    from flyviz.record.runner import Model
    from flyviz.record.trace import trace

    tok_path = write_tokenizer(tmp_path_factory.mktemp("tok") / "tokenizer.json", vocab_size=300)
    tokenizer = FlyTokenizer(tok_path)
    ckpt = make_random_checkpoint(neurons=161, edges=2400, vocabulary=tokenizer.vocab_size,
                                  tokenizer_path=tok_path, seed=7, name="tiny-161",
                                  missing_fraction=0.0)
    model = Model(ckpt, tokenizer=tokenizer, threads=1)
    try:
        att = trace(model, PROMPT, window=WINDOW)
    finally:
        model.close()
    return att, ckpt.anatomy


def _frames(folder) -> list[np.ndarray]:
    return [iio.imread(p)[..., :3] for p in sorted(folder.glob("*.png"))]


def _count(path) -> tuple[tuple[int, int], int]:
    reader = imageio_ffmpeg.read_frames(str(path))
    meta = next(reader)
    return tuple(meta["size"]), sum(1 for _ in reader)


def _export(*args, **kwargs):
    with offscreen_gl_or_skip():
        return export_flow(*args, **kwargs)


def test_a_flow_movie_has_one_frame_per_lag_of_the_window(traced, tmp_path):
    att, anatomy = traced
    assert len(att.positions) == WINDOW
    out = _export(att, anatomy, tmp_path / "why.mp4",
                  ExportOptions(size=(192, 108), fps=4.0, hold_seconds=0.5))
    assert _count(out) == ((192, 108), WINDOW + 2)          # + round(0.5 s * 4 fps) held
    frames = _frames(_export(att, anatomy, tmp_path / "frames", ExportOptions(
        size=(192, 108), fps=4.0, overlays=False)))
    assert len(frames) == WINDOW
    # Each lag is its own step's picture (not one frame repeated).
    assert all(np.abs(a.astype(int) - b).mean() > 0.05 for a, b in zip(frames, frames[1:]))
    backwards = _frames(_export(att, anatomy, tmp_path / "reverse", ExportOptions(
        size=(192, 108), fps=4.0, overlays=False), reverse=True))
    assert all(np.array_equal(a, b) for a, b in zip(frames, backwards[::-1]))


def _expected(value: float, limit: float) -> np.ndarray:
    """RGB of a lone neuron's disc centre of ``value`` on the flow colormap over ±limit."""
    coord = float(np.clip((value + limit) / (2 * limit), 0.0, 1.0))
    entry = lut("difference")[int(round(coord * 255))]
    return np.clip(255.0 * (np.array(BACKGROUND[:3]) + entry[:3] * entry[3]), 0, 255)


def test_a_flow_frame_draws_positive_flow_red_and_negative_blue(traced, tmp_path):
    """Pixel facts: at lag 0 and lag 1, a lone neuron of strong positive flow is drawn in
    the diverging map's positive end, a strong negative one in its negative end, each over
    ± its step's largest |flow|, as the app's flow layer draws them."""
    from flyviz.render.picking import project_points

    att, anatomy = traced
    size = (480, 360)
    options = ExportOptions(size=size, fps=4.0, overlays=False, point_size=6.0, glow=1.0)
    with offscreen_gl_or_skip():
        renderer = make_flow_renderer(att, anatomy, options, style=CloudStyle(
            point_size=6.0, gain=1.0))
    with renderer:
        xy, _, in_front = project_points(renderer.cloud.positions,
                                         renderer.cloud.get_transform("visual", "canvas"))
        frames = _frames(export_flow(att, anatomy, tmp_path / "frames", options,
                                     renderer=renderer))
    assert len(frames) == WINDOW
    gap = np.hypot(*(xy[:, None, :] - xy[None, :, :]).transpose(2, 0, 1))
    np.fill_diagonal(gap, np.inf)
    inside = (xy[:, 0] > 12) & (xy[:, 0] < size[0] - 12) & (xy[:, 1] > 12) & \
        (xy[:, 1] < size[1] - 12)
    lone = np.flatnonzero(in_front & inside & (gap.min(axis=1) > 12))
    assert lone.size >= 20
    for lag in (0, 1):
        f = att.node_flow(att.position - lag)
        limit = float(np.abs(f).max())
        image = frames[lag]
        for sign in (1.0, -1.0):
            strong = [n for n in lone if sign * f[n] >= 0.4 * limit]
            assert strong, (lag, sign)
            n = max(strong, key=lambda k: sign * f[k])
            x, y = (int(round(v)) for v in xy[n])
            patch = image[y - 2:y + 3, x - 2:x + 3].reshape(-1, 3).astype(float)
            got = patch[patch.max(axis=1).argmax()]
            want = _expected(float(f[n]), limit)
            assert np.abs(got - want).max() <= TOLERANCE, (lag, sign, n, got, want)
            red, blue = got[0], got[2]
            assert (red > blue + 60) if sign > 0 else (blue > red + 60), (lag, sign, got)


def test_the_overlay_names_the_target_the_step_and_the_top_tokens(traced):
    att, _ = traced
    flows = np.asarray(att.token_flows)
    tops = top_tokens(att, 3)
    order = sorted(range(flows.size), key=lambda p: -abs(flows[p]))[:3]
    assert [p for p, _, _ in tops] == order
    assert [f for _, _, f in tops] == pytest.approx(flows[order].tolist())
    assert tops[0][1] == ("BOS" if order[0] == 0 else
                          att.token_texts[order[0]].replace(" ", "\u00b7"))
    lag = 2
    position = att.position - lag
    content = flow_overlay(att, lag, top=3)
    assert f"{att.target_text!r}" in content.counter and f"L = {att.value:+.3f}" in content.counter
    assert f"lag {lag}: position {position}" in content.counter
    assert content.newest == att.token_texts[position]
    assert content.prompt + content.newest + content.after == "".join(att.token_texts[1:])
    assert content.bar_labels == tuple(f"{f:+.2f} @{p}" for p, _, f in tops)
    assert content.bar_signs == tuple(float(np.sign(f)) for _, _, f in tops)
    assert [label for label, _ in content.bars] == [t for _, t, _ in tops]
    assert content.bars[0][1] == 1.0 and all(0 < v <= 1 for _, v in content.bars)
    with pytest.raises(ExportError, match="outside the traced window"):
        flow_overlay(att, WINDOW)


def test_bad_flow_requests_fail_before_writing(traced, tmp_path):
    from flyviz.model.layout import ball_layout

    att, anatomy = traced
    with pytest.raises(ExportError, match="flow scale"):
        export_flow(att, anatomy, tmp_path / "x.mp4", scale="loud")
    with pytest.raises(ExportError, match="neurons"):
        export_flow(att, ball_layout(att.neurons + 1), tmp_path / "x.mp4")
    with pytest.raises(ExportError, match=".avi"):
        export_flow(att, anatomy, tmp_path / "x.avi")
    assert list(tmp_path.iterdir()) == []


def test_the_overlay_keeps_the_shown_token_in_view_of_a_long_prompt(traced):
    """The bottom band shows the lines with the highlighted token, even when the prompt goes
    on for more lines after it than the band holds."""
    from flyviz.render.offscreen import FrameRenderer
    from flyviz.render.overlay import OverlayContent

    att, anatomy = traced
    with offscreen_gl_or_skip():
        renderer = FrameRenderer(anatomy.positions_um(), anatomy.valid, (320, 180))
    with renderer:
        layout = renderer.overlays
        words = " ".join(f"word{i}" for i in range(200))
        for before, after in (("early ", words), (words, ""), (words, " late")):
            content = OverlayContent(prompt=before, generated="", newest="SHOWN",
                                     newest_in_prompt=True, bars=(), counter="", after=after)
            lines = layout._wrap(content, 300.0, 2)
            shown = "".join(ch for line in lines for ch, style in line if style == 2)
            assert shown == "SHOWN" and len(lines) <= 2, (before[:10], after[:10])


def test_one_colour_range_for_the_window_shows_the_earlier_steps_dimmer(traced, tmp_path):
    att, anatomy = traced
    options = ExportOptions(size=(192, 108), fps=4.0, overlays=False)
    style = CloudStyle(gain=1.0)
    per_step = _frames(_export(att, anatomy, tmp_path / "step", options, style=style))
    one_range = _frames(_export(att, anatomy, tmp_path / "window", options, style=style,
                                scale="window"))
    background = np.round(np.asarray(BACKGROUND[:3]) * 255).astype(int)

    def light(image: np.ndarray) -> int:
        return int(np.clip(image.astype(int) - background, 0, None).sum())

    limits = [float(np.abs(att.node_flow(att.position - lag)).max()) for lag in range(WINDOW)]
    assert min(limits) < max(limits)              # steps of different reach: a real test
    for lag in range(WINDOW):
        if limits[lag] == max(limits):          # the step that sets the window's range
            assert np.array_equal(per_step[lag], one_range[lag])
        else:                                   # a wider range than its own: dimmer
            assert light(one_range[lag]) < light(per_step[lag]), lag
