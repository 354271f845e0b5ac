"""The offscreen renderer: exact sizes, the brain where it belongs, overlays that say what they should."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("vispy")

from flyviz.render.offscreen import (FrameRenderer, check_size, offscreen_app,  # noqa: E402
                                     parse_size)
from flyviz.render.overlay import OverlayContent, display_token, overlay_contents  # noqa: E402
from flyviz.model.errors import ExportError  # noqa: E402

SIZE = (480, 270)


def grid(n_side: int = 6) -> np.ndarray:
    ax = np.linspace(-100, 100, n_side)
    xx, yy = np.meshgrid(ax, ax)
    return np.stack([xx.ravel(), yy.ravel(), np.zeros(xx.size)], axis=1).astype(np.float32)


def content(top_k=(("cat", 0.8), (" dog", 0.2)), newest=" saw", generated="") -> OverlayContent:
    return OverlayContent(prompt="Once upon a time the", generated=generated, newest=newest,
                          newest_in_prompt=not generated, bars=tuple(top_k),
                          counter="token 3 of 0\u20138 \u00b7 reading the prompt",
                          bars_title="next token")


@pytest.fixture(scope="module")
def renderer():
    r = FrameRenderer(grid(), size=SIZE, scale=1.0, model_name="tiny")
    yield r
    r.close()


def amber(img: np.ndarray) -> np.ndarray:
    """Pixels of the top-1 bar / highlight colour (orange-yellow)."""
    r, g, b = (img[..., i].astype(int) for i in range(3))
    return (r > 180) & (g > 110) & (g < 215) & (b < 110)


def warm(img: np.ndarray) -> np.ndarray:
    """Amber text or its highlight box: red over green over blue, clearly tinted."""
    r, g, b = (img[..., i].astype(int) for i in range(3))
    return (r > g) & (g > b) & (r - b > 25)


def test_backend_is_found_and_reported():
    app, name = offscreen_app()
    assert name.lower() in ("egl", "pyside6", "pyqt6", "pyqt5", "osmesa")


@pytest.mark.parametrize("size", [(333, 207), (1280, 720)])
def test_frames_have_exactly_the_requested_size(size):
    with FrameRenderer(grid(), size=size, overlays=False) as r:
        img = r.render_state(np.ones(36, np.float32))
    assert img.shape == (size[1], size[0], 3) and img.dtype == np.uint8
    assert img.max() > 100  # the brain fills the frame, not a corner of a bigger one
    h, w = size[1], size[0]
    lit = np.argwhere(img.sum(axis=2) > 150)
    assert lit[:, 0].max() > 0.6 * h and lit[:, 1].max() > 0.6 * w


def test_active_neuron_is_drawn_in_the_brain_area_not_under_the_panels(renderer):
    values = np.zeros(36, np.float32)
    values[35] = 1.0  # top-right corner of the grid (x = y = +100)
    quiet = renderer.render_state(np.zeros(36, np.float32), content())
    lit = renderer.render_state(values, content())
    diff = np.abs(lit.astype(int) - quiet.astype(int)).sum(axis=2)
    ys, xs = np.nonzero(diff > 60)
    assert xs.size > 0
    x0, y0, w, h = renderer.overlays.cloud_rect
    assert xs.min() >= x0 and xs.max() < x0 + w and ys.max() < y0 + h
    assert xs.mean() > x0 + w / 2 and ys.mean() < y0 + h / 2


def test_top_k_bars_are_as_long_as_their_probabilities(renderer):
    img = renderer.render_state(np.zeros(36, np.float32), content((("cat", 0.8), (" dog", 0.2))))
    panel_x = int(SIZE[0] - renderer.overlays.panel_w)
    band_y = int(renderer.overlays.bar_y - 2 * renderer.overlays.px_small)  # above the colourbar
    top = amber(img[:band_y, panel_x:])
    rows = np.flatnonzero(top.sum(axis=1) > 10)
    assert rows.size > 0
    top_len = top[rows].sum(axis=1).max()
    # The second bar is blue-ish: count its pixels on rows below the amber bar.
    r, g, b = (img[:band_y, panel_x:, i].astype(int) for i in range(3))
    blue = (b > 150) & (r < 140)
    blue_rows = np.flatnonzero(blue.sum(axis=1) > 3)
    assert blue_rows.size > 0 and blue_rows.min() > rows.max()
    ratio = blue[blue_rows].sum(axis=1).max() / top_len
    assert 0.15 < ratio < 0.4  # 0.2 / 0.8 = 0.25, up to antialiasing
    img2 = renderer.render_state(np.zeros(36, np.float32), content((("cat", 0.4), (" dog", 0.35))))
    assert amber(img2[:band_y, panel_x:]).sum(axis=1).max() < 0.65 * top_len


def test_newest_token_is_highlighted_in_the_text(renderer):
    band_y = int(SIZE[1] - renderer.overlays.band_h)
    with_new = renderer.render_state(np.zeros(36, np.float32), content(newest=" saw"))
    without = renderer.render_state(np.zeros(36, np.float32), content(newest=""))
    band_new, band_old = with_new[band_y:], without[band_y:]
    assert band_old.max() > 120  # the prompt text is drawn
    assert warm(band_new).sum() > 50 and warm(band_old).sum() == 0
    # The highlight sits after the prompt text, at the end of the line.
    text_cols = np.flatnonzero(band_old.sum(axis=2).max(axis=0) > 150)
    amber_cols = np.flatnonzero(warm(band_new).any(axis=0))
    assert amber_cols.min() > text_cols.max() - 5


def test_long_text_wraps_and_keeps_the_newest_line(renderer):
    long = " ".join(["word"] * 400)
    img = renderer.render_state(np.zeros(36, np.float32), content(newest=" END", generated=long))
    band = img[int(SIZE[1] - renderer.overlays.band_h):]
    assert warm(band).sum() > 50  # the newest token is still visible after wrapping
    lines = np.flatnonzero(band.sum(axis=2).max(axis=1) > 150)
    assert np.ptp(lines) > renderer.overlays.px_body  # more than one line of text


def test_overlay_contents_follow_the_recording():
    from flyviz.model.engine import Engine
    from flyviz.model.synthetic import make_random_checkpoint, make_tokenizer_json
    from flyviz.model.tokenizer import FlyTokenizer
    from flyviz.record.recording import Recording
    from flyviz.record.run import GenerationSettings, iter_frames

    tokenizer = FlyTokenizer.from_json_text(make_tokenizer_json(300))
    ckpt = make_random_checkpoint(neurons=200, edges=2000, vocabulary=tokenizer.vocab_size)
    rec = Recording(200)
    for frame in iter_frames(Engine(ckpt), tokenizer, "the cat", GenerationSettings(max_new_tokens=3)):
        rec.append(frame)
    items = overlay_contents(rec)
    assert len(items) == len(rec)
    assert items[0].newest == "" and items[0].prompt == ""  # BOS is not text
    prompt_frames = [c for c in items if c.newest_in_prompt]
    assert "".join(c.newest for c in prompt_frames) + rec[len(prompt_frames)].input_text == "the cat"
    last = items[-1]
    assert last.prompt == "the cat"
    assert (last.generated + last.newest) in (rec[-1].text_so_far, rec[-1].text_so_far + last.newest)
    assert [t for t, _ in last.bars] == list(rec[-1].top_k_text)
    assert last.bars_title == "next token" and last.counter.startswith(f"token {len(rec) - 1} of 0\u2013{len(rec) - 1} ")
    assert overlay_contents(rec, 2, 4) == items[2:4]


def test_display_token_and_size_parsing():
    assert display_token(" the\n") == "\u00b7the\u00b6"
    assert display_token("") == "(empty)"
    assert display_token("\x1b[") == "\\x1b["
    assert parse_size("1920x1080") == (1920, 1080)
    for bad in ("1920", "axb", "8x8", "100000x10"):
        with pytest.raises(ExportError):
            parse_size(bad)
    # A str is a size written WxH (it was read character by character: "size 6x4").
    assert check_size("640x400") == (640, 400) and check_size((640.0, np.int64(400))) == (640, 400)
    for bad, said in [((float("nan"), 400), "two whole numbers"), ((640.5, 400), "whole"),
                      (None, "must be \\(width, height\\) in pixels or 'WIDTHxHEIGHT'"),
                      ((640,), "two whole numbers"), ((True, 400), "two whole numbers"),
                      (("640", "400"), "two whole numbers"), ("640 by 400", "WIDTHxHEIGHT"),
                      ((8, 400), "out of range")]:
        with pytest.raises(ExportError, match=said) as info:
            check_size(bad)
        assert "\n" not in str(info.value)


def test_colourbar_runs_from_cool_negative_to_warm_positive(renderer):
    img = renderer.render_state(np.zeros(36, np.float32), content())
    o = renderer.overlays
    y = int(o.bar_y + o.bar_h / 2)
    left = img[y, int(o.bar_x) + 2].astype(int)
    middle = img[y, int(o.bar_x + o.bar_w / 2)].astype(int)
    right = img[y, int(o.bar_x + o.bar_w) - 3].astype(int)
    assert left[2] > left[0] + 60 and right[0] > right[2] + 60
    assert middle.sum() < 0.5 * min(left.sum(), right.sum())  # zero is dark


def test_offscreen_backend_can_be_chosen_by_environment(monkeypatch):
    monkeypatch.setenv("FLYVIZ_OFFSCREEN_GL", "vulkan")
    with pytest.raises(ExportError, match="FLYVIZ_OFFSCREEN_GL"):
        offscreen_app()
    monkeypatch.setenv("FLYVIZ_OFFSCREEN_GL", "default")  # Qt under the test's Xvfb
    app, name = offscreen_app()
    assert name.lower().startswith("py")
    with FrameRenderer(grid(), size=(64, 48), overlays=False, app=app) as r:
        image = r.render_state(np.ones(36, np.float32))
    assert image.shape == (48, 64, 3)
    # The neurons are drawn, not only the background (the view's clip rectangle once
    # shut them all out on Qt).
    assert (image.astype(int).sum(axis=-1) > 3 * 60).sum() >= 20


@pytest.mark.parametrize("factor", [1.5, 2.0, 1.25])
def test_high_dpi_renderings_are_brought_back_to_the_exact_size(factor):
    """A Qt canvas on a scaled screen renders more pixels; frames keep the movie's size."""
    with FrameRenderer(grid(), size=(64, 40), overlays=False) as r:
        big = np.zeros((int(40 * factor), int(64 * factor), 3), np.uint8)
        big[:, : big.shape[1] // 2] = 200  # left half lit
        out = r._fit(big)
    assert out.shape == (40, 64, 3)
    assert np.all(out[:, :31] == 200) and np.all(out[:, 33:] == 0)
    assert abs(float(out.mean()) - 100.0) < 2.0  # area averaging keeps the brightness


def test_egl_frames_draw_while_vispy_calls_opengl_through_pyopengl():
    """napari switches vispy to PyOpenGL's functions ('gl+') when imported; EGL frames
    must still draw, and vispy is left on the functions it had."""
    pytest.importorskip("OpenGL")
    from vispy.gloo import gl

    from flyviz.render.gl_backend import is_egl

    # Put back the functions vispy had before (napari, imported by another test of this
    # process, chose 'gl+'; leaving 'gl2' behind made its next canvas crash in Qt).
    before = gl.current_backend.__name__.rsplit(".", 1)[-1]
    gl.use_gl("gl+")
    try:
        with FrameRenderer(grid(), size=(320, 240), overlays=False) as r:
            if not is_egl(r._app):
                pytest.skip("this machine renders offscreen without EGL")
            img = r.render_state(np.ones(36, np.float32))
        assert img.max() > 100
        assert gl.current_backend.__name__.endswith("glplus")
    finally:
        gl.use_gl({"glplus": "gl+"}.get(before, before))
