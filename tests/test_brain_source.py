"""flyviz.brain_source.BrainSource: what the napari plugin and the notebook widget show.

No optional extra needed: these run everywhere.
"""

from __future__ import annotations

import numpy as np
import pytest

import flyviz
from flyviz.brain_source import BrainSource, colours, is_atlas_dir
from flyviz.render.colormaps import lut


@pytest.fixture(scope="module")
def saved(demo, tmp_path_factory):
    rec = flyviz.run(demo, "Once upon a time", max_new_tokens=3)
    return rec.save(tmp_path_factory.mktemp("source") / "run.flyrec")


def test_colours_place_values_on_the_colormap_as_the_shader_does():
    got = colours(np.array([-2.0, -1.0, 0.0, 1.0, 3.0], np.float32), "signed", (-1.0, 1.0))
    table = lut("signed")
    np.testing.assert_array_equal(got, table[[0, 0, 128, 255, 255]])
    # "abs" folds the sign; a sequential map starts at its low end.
    np.testing.assert_array_equal(colours(np.array([-1.0, 0.5]), "abs", (0.0, 1.0)),
                                  lut("abs")[[255, 128]])


def test_a_recording_opens_with_its_model_memory_mapped(demo, saved):
    source = BrainSource.open(saved)
    anatomy = demo.drawing_anatomy()
    assert source.shown.size == anatomy.n_valid
    assert isinstance(source.recording._stored, np.memmap)
    assert source.quantities == ("signed", "abs")
    # One range for the whole recording, the one a movie of it uses.
    from flyviz.render.style import ColourLayer

    assert source.value_range("signed") == ColourLayer().recording_range(source.recording)
    k = source.tokens - 1
    np.testing.assert_array_equal(source.values("signed", k),
                                  source.recording.state(k)[source.shown])
    assert source.token_text(k).startswith(f"t={k} {source.recording.token_texts[k]!r}")
    features = source.features()
    assert set(features) == {"neuron", "superclass", "cell_type", "side", "body_id"}
    assert features["superclass"][0] == anatomy.superclass[source.shown[0]]


def test_a_recording_of_a_model_not_at_hand_is_drawn_on_a_ball_with_a_warning(demo, tmp_path):
    rec = flyviz.run(demo, "Once", max_new_tokens=2)
    rec.metadata["model"] = "someone/not-downloaded"        # where it came from, both ways
    rec.metadata["model_identity"] = {**rec.metadata["model_identity"],
                                      "spec": "someone/not-downloaded"}
    path = rec.save(tmp_path / "elsewhere.flyrec")
    with pytest.warns(UserWarning, match="generic layout"):
        source = BrainSource.open(path)
    assert source.anatomy.kind == "layout" and source.shown.size == rec.neurons


def test_the_demo_atlas_is_found_and_its_statistics_colour(demo):
    from flyviz.analysis.atlas import Atlas
    from flyviz.resources import assets_dir

    path = assets_dir() / "demo" / "atlas"
    assert is_atlas_dir(path) and not is_atlas_dir(path.parent)
    source = BrainSource.open(path)
    assert source.tokens == 0 and source.quantities[0] == "atlas:mean"
    density = Atlas(path).statistic("density")[source.shown]
    np.testing.assert_array_equal(source.values("atlas:density", 0), density)
    # The registry's rule, the window's too: from zero to the 99th percentile of the drawn.
    assert source.value_range("atlas:density") == pytest.approx(
        (0.0, float(np.percentile(density, 99))), rel=1e-5)


def test_added_quantities_and_unknown_ones(demo, saved):
    from flyviz.errors import InputError

    source = BrainSource.open(saved, model=demo)
    values = np.arange(source.anatomy.positions.shape[0], dtype=np.float32)
    source.add_quantity("index", values)
    np.testing.assert_array_equal(source.values("index", 2), values[source.shown])
    with pytest.raises(InputError, match="one per neuron"):
        source.add_quantity("bad", values[:5])
    with pytest.raises(InputError, match="unknown colour quantity 'nope'"):
        source.rgba("nope", 0)
    # Added again under its name: replaced, listed once.
    source.add_quantity("index", values[::-1].copy())
    np.testing.assert_array_equal(source.values("index", 2), values[::-1][source.shown])
    assert source.quantities.count("index") == 1
    # A built-in quantity's name would show the built-in colouring and list it twice.
    before = source.quantities
    for name in ("signed", "abs", "state", "delta"):
        with pytest.raises(InputError, match=f"'{name}' is one of the recording's own colour "
                                             "quantities; give the added values another name"):
            source.add_quantity(name, values)
    assert source.quantities == before
    # A feature's layer of the name is the added values (the notebook's Why? example adds
    # a trace's summed flows as "flow"), listed once.
    source.add_quantity("flow", values[::-1].copy(), colormap="difference")
    np.testing.assert_array_equal(source.values("flow", 2), values[::-1][source.shown])
    assert source.quantities.count("flow") == 1
    # Values and names that are not what they must be: one line each.
    with pytest.raises(InputError, match="index: values must be numbers, one per neuron"):
        source.add_quantity("index", "abc")
    with pytest.raises(InputError, match="a quantity's name must be text"):
        source.add_quantity(None, values)
