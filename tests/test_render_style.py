"""Colour layers and the cloud style: scale policies, values per frame, and movies coloured by a layer."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from flyviz.record.frame import PHASE_GENERATION, Frame
from flyviz.record.recording import Recording
from flyviz.render.style import (CloudStyle, ColourLayer, ColourScale, activation_layer,
                                 percentile_limit)

N = 36


def recording(states: list[np.ndarray]) -> Recording:
    rec = Recording(len(states[0]), {"model_name": "style-test"})
    for i, state in enumerate(states):
        rec.append(Frame(position=i, phase=PHASE_GENERATION, input_token_id=5, input_text="a",
                         predicted_token_id=6, predicted_text=" b", probability=0.6,
                         top_k_ids=np.array([6, 7], np.int32),
                         top_k_probabilities=np.array([0.6, 0.3], np.float32),
                         top_k_text=(" b", " c"), state=np.asarray(state, np.float32),
                         mean_abs_state=0.5, text_so_far="a b" * (i + 1), generation_index=i))
    return rec


def one_hot(index: int, value: float = 1.0, n: int = N) -> np.ndarray:
    out = np.zeros(n, np.float32)
    out[index] = value
    return out


def test_scale_policies_resolve_to_the_documented_ranges():
    values = np.concatenate([np.linspace(-0.5, 2.0, 99), [40.0, np.nan]]).astype(np.float32)
    p99 = percentile_limit(values)
    assert 1.9 < p99 < 40.0  # the outlier does not set the scale
    auto = ColourScale.auto()
    assert auto.resolve("signed", values) == (-p99, p99)              # symmetric
    assert auto.resolve("difference", values) == (-p99, p99)
    assert auto.resolve("abs", values) == (0.0, p99)                  # of |values|
    assert auto.resolve("sequential", np.abs(values)) == (0.0, p99)   # from zero
    lo, hi = auto.resolve("sequential", values)                       # negatives included
    assert lo == pytest.approx(-0.5) and hi == p99
    assert ColourScale.fixed(0.7).resolve("difference", values) == (-0.7, 0.7)
    assert ColourScale.fixed(0.7).resolve("sequential", values) == (0.0, 0.7)
    assert ColourScale.given(-1.0, 3.0).resolve("signed", values) == (-1.0, 3.0)
    assert auto.resolve("signed", None) == (-1.0, 1.0)
    assert auto.resolve("abs", np.zeros(5)) == (0.0, 1.0)
    for bad in (lambda: ColourScale.fixed(0.0), lambda: ColourScale.given(1.0, 1.0),
                lambda: ColourScale("log"), lambda: ColourScale.auto(0.0)):
        with pytest.raises(ValueError):
            bad()


def test_a_layer_gives_its_values_per_frame_and_a_range_over_a_recording():
    rec = recording([one_hot(i, 0.1 * (i + 1)) for i in range(10)])
    state = ColourLayer()
    assert state.is_state and state.colormap == "signed"
    np.testing.assert_array_equal(state.values(rec, 3), rec.state(3))
    assert state.values(rec, 10) is None
    doubled = ColourLayer(name="double", colormap="difference", label="2h", units="a.u.",
                          source=lambda r, i: 2.0 * r.state(i))
    assert doubled.caption == "2h (a.u.)" and not doubled.is_state
    np.testing.assert_allclose(doubled.values(rec, 4), 2.0 * rec.state(4))
    assert doubled.sample(rec, 0, 10, samples=4).shape == (4, N)
    lo, hi = doubled.recording_range(rec)
    assert lo == -hi and 1.0 < hi <= 2.0  # up to the largest doubled value
    fixed = dataclasses.replace(doubled, scale=ColourScale.given(-3.0, 1.0))
    assert fixed.recording_range(rec) == (-3.0, 1.0)


def test_a_static_layer_shows_the_same_values_at_every_frame_and_keeps_its_own_copy():
    values = np.arange(N, dtype=np.float64)
    layer = ColourLayer.static("importance", values, label="lesion ΔCE", units="nats")
    values[:] = -1.0  # the caller's array changing later does not change the layer
    rec = recording([np.zeros(N)] * 3)
    assert layer.colormap == "sequential" and layer.caption == "lesion ΔCE (nats)"
    np.testing.assert_array_equal(layer.values(rec, 0), layer.values(rec, 2))
    assert layer.values(rec, 1)[5] == 5.0
    assert layer.value_range(layer.values(rec, 0))[0] == 0.0
    with pytest.raises(ValueError):
        ColourLayer.static("bad", np.zeros((2, 3)))
    with pytest.raises(ValueError):
        ColourLayer(colormap="rainbow")


def test_styles_check_their_values_and_scale_points_with_the_canvas():
    style = CloudStyle(point_size=2.0)
    assert style.point_px(720) == 2.0 and style.point_px(1440) == 4.0
    assert style.with_layer(activation_layer("abs")).layer.colormap == "abs"
    assert activation_layer("abs").caption == "|activation x|"
    for bad in (dict(point_size=0), dict(glow=3.0), dict(gain=-1.0)):
        with pytest.raises(ValueError):
            CloudStyle(**bad)
    with pytest.raises(ValueError):
        activation_layer("difference")


# ---------------------------------------------------------------- rendered

vispy = pytest.importorskip("vispy")


def grid(n_side: int = 6) -> np.ndarray:
    ax = np.linspace(-100, 100, n_side)
    xx, yy = np.meshgrid(ax, ax)
    return np.stack([xx.ravel(), yy.ravel(), np.zeros(xx.size)], axis=1).astype(np.float32)


def _bar_pixels(renderer, img):
    o = renderer.overlays
    y = int(o.bar_y + o.bar_h / 2)
    return (img[y, int(o.bar_x) + 2].astype(int), img[y, int(o.bar_x + o.bar_w / 2)].astype(int),
            img[y, int(o.bar_x + o.bar_w) - 3].astype(int))


def test_movie_frames_take_the_layers_colormap_range_and_colourbar():
    from flyviz.render.colormaps import lut
    from flyviz.render.offscreen import FrameRenderer, colorbar_labels

    layer = ColourLayer(name="delta", colormap="difference", label="Δh", units="",
                        scale=ColourScale.fixed(0.5))
    style = CloudStyle(layer=layer, gain=1.0, glow=0.0, point_size=10.0)
    with FrameRenderer(grid(), size=(480, 270), style=style, model_name="tiny") as r:
        assert r.value_range == (-0.5, 0.5) and r.cloud.colormap == "difference"
        img = r.render_state(one_hot(35, 0.5))
        left, middle, right = _bar_pixels(r, img)
        table = lut("difference")
        for pixel, entry in ((left, table[2]), (right, table[-3])):
            np.testing.assert_allclose(pixel, entry[:3] * entry[3] * 255, atol=12)
        assert middle.sum() < 0.5 * min(left.sum(), right.sum())
    assert [t for t, _ in colorbar_labels("difference", (-0.5, 0.5))] == ["-0.5", "0", "+0.5"]
    assert [t for t, _ in colorbar_labels("sequential", (0.0, 2.5))] == ["0", "1.2", "2.5"]


def test_a_static_layer_lights_the_neurons_it_names_in_its_own_colours():
    from flyviz.render.offscreen import FrameRenderer

    importance = np.zeros(N, np.float32)
    importance[35] = 0.6
    layer = ColourLayer.static("importance", importance, scale=ColourScale.given(0.0, 1.0))
    state_style = CloudStyle(gain=1.0, point_size=40.0, layer=activation_layer(
        "signed", ColourScale.fixed(1.0)))
    with FrameRenderer(grid(), size=(200, 200), style=state_style, overlays=False) as plain, \
            FrameRenderer(grid(), size=(200, 200), style=state_style.with_layer(layer),
                          overlays=False) as coloured:
        as_state = plain.render_state(one_hot(0, 0.6)).astype(int)
        as_layer = coloured.render_state(layer.values(None, 0)).astype(int)

    def lit(img):
        ys, xs = np.nonzero(img.sum(axis=2) > 250)
        return xs.mean(), ys.mean(), img[ys, xs].mean(axis=0)

    x, y, (r, g, b) = lit(as_state)         # neuron 0, bottom left, orange (signed at +0.6)
    assert x < 100 and y > 100 and r > g + 40
    x, y, (r, g, b) = lit(as_layer)         # neuron 35, top right, teal-green (sequential at 0.6)
    assert x > 100 and y < 100 and g > r + 40 and g > b


def test_export_colours_each_frame_by_the_layer_values(tmp_path):
    pytest.importorskip("imageio_ffmpeg")
    iio = pytest.importorskip("imageio.v3")
    from flyviz.export import ExportOptions, export_recording
    from flyviz.model.checkpoint import Anatomy

    # Stored positions have dorsal down (positions_um flips y): neuron 35 is drawn top right.
    anatomy = Anatomy(positions=grid() * np.array([1, -1, 1], np.float32), valid=np.ones(N, bool),
                      kind="measured")
    rec = recording([np.zeros(N), one_hot(0)])
    other = recording([one_hot(35), one_hot(0)])
    delta = ColourLayer(name="delta", colormap="difference", label="Δh",
                        scale=ColourScale.fixed(1.0),
                        source=lambda r, i: other.state(i) - r.state(i))  # Δ lights 35, then nothing
    out = tmp_path / "frames"
    options = ExportOptions(size=(200, 200), frames_per_token=1, overlays=False)
    export_recording(rec, anatomy, out, options,
                     style=CloudStyle(layer=delta, gain=1.0, point_size=40.0))
    first, second = (iio.imread(p).astype(int) for p in sorted(out.glob("*.png")))
    ys, xs = np.nonzero(first.sum(axis=2) > 250)
    assert xs.size and xs.mean() > 100 and ys.mean() < 100    # neuron 35 at +Δ: crimson
    r, g, b = first[ys, xs].mean(axis=0)
    assert r > g + 60 and r > b + 30
    assert (second.sum(axis=2) > 250).sum() == 0               # no difference: all quiet
    with pytest.raises(Exception, match="one per neuron"):
        bad = dataclasses.replace(delta, source=lambda r, i: np.zeros(3))
        export_recording(rec, anatomy, tmp_path / "bad", options, style=CloudStyle(layer=bad))
    assert not (tmp_path / "bad").exists()
