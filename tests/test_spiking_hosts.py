"""A spiking recording (`flyviz simulate ... --record x.flyrec`) opened in the embedded hosts:
the notebook widget and napari read it through flyviz.brain_source as the spiking kind — its
frames are bins of milliseconds, not tokens; its spikes can flash and fade."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
from gl_skip import offscreen_gl_or_skip

from flyviz.cli import main

pytest.importorskip("pyarrow")

# The engine's kernels compiled once for all the test workers (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("spiking_kernels")


@pytest.fixture(scope="module")
def spiking_recording(tmp_path_factory) -> Path:
    from test_spiking_kind import write_brain

    folder = tmp_path_factory.mktemp("spiking_hosts")
    brain = write_brain(folder / "brain")
    out = folder / "spikes.flyrec"
    assert main(["simulate", str(brain), "--excite", "superclass:sensory", "--rate", "300",
                 "--duration", "50ms", "--record", str(out)]) == 0
    return out


def test_a_spiking_recording_opens_as_the_spiking_kind_with_its_brain(spiking_recording):
    from flyviz.brain_source import BrainSource
    from flyviz.kinds.spiking import SPIKING
    from flyviz.viewer.layers import FLASH

    with warnings.catch_warnings():
        warnings.simplefilter("error")              # its brain loads: no stand-in warning
        source = BrainSource.open(spiking_recording)
    state = source.state
    assert state.kind is SPIKING and source.note is None
    assert source.tokens == 5 and state.kind.time_axis.unit == "ms"
    # the words beside the brain are the bin and its time, not a token's text
    spikes = state.recording.metadata["spiking"]["bin_spikes"][2]
    assert source.token_text(2) == f"bin 2 of 0–4 · 30 ms · {spikes:,} spikes"
    # the brain it ran on places the neurons: the excited (left) half at negative x
    assert state.anatomy.positions[:40, 0].max() < 0 < state.anatomy.positions[40:, 0].min()
    # spikes flash and fade: offered, lit where the excited neurons fired, dark elsewhere
    assert FLASH in source.quantities and "spike_rate" in source.quantities
    # A rate has no sign: no "signed" and "abs" colourings of it (they drew the rates on an
    # activation's diverging colours), and no second entry for the same rates.
    assert source.quantities == ("spike_rate", FLASH) and source.quantity == "spike_rate"
    rate = source.layer("spike_rate")
    assert (rate.colormap, rate.units) == ("sequential", "Hz")
    np.testing.assert_array_equal(source.values("spike_rate", 3), state.recording.state(3))
    flash = source.values(FLASH, 4)
    assert flash[:40].max() > 0 and flash[40:].max() == 0
    # the flash of a bin fades in the next ones (exp(-10 ms / 15 ms) per bin), never grows
    rates = state.recording.states()
    alone = rates[4] * 0.010
    assert np.all(flash >= alone - 1e-6)
    expected = sum(rates[j] * 0.010 * np.exp(-(4 - j) * 10 / 15.0) for j in range(5))
    np.testing.assert_allclose(flash, expected, rtol=1e-5)


def test_a_spiking_recording_whose_brain_is_gone_is_drawn_on_a_ball(spiking_recording,
                                                                    tmp_path):
    from flyviz.brain_source import BrainSource
    from flyviz.kinds.spiking import SPIKING
    from flyviz.record.recording import Recording

    recording = Recording.load(spiking_recording)
    recording.metadata["spiking"]["brain"] = str(tmp_path / "moved")
    moved = tmp_path / "moved.flyrec"
    recording.save(moved)
    with pytest.warns(UserWarning, match="does not load"):
        source = BrainSource.open(moved)
    assert source.state.kind is SPIKING and "generic layout" in (source.note or "")
    assert source.token_text(0).startswith("bin 0 of 0–4 · 10 ms")


def test_napari_layers_of_a_spiking_recording_step_through_bins_of_ms(spiking_recording):
    pytest.importorskip("napari")
    from flyviz.brain_source import BrainSource
    from flyviz.napari._layers import layer_data

    source = BrainSource.open(spiking_recording)
    layers = layer_data(source)
    axis_data, axis_kwargs, axis_kind = layers[0]
    assert axis_kind == "image" and axis_data.shape[0] == 5
    assert axis_kwargs["axis_labels"][0] == "bin (10 ms)"
    assert axis_kwargs["name"].endswith(" bins")


def test_the_notebook_widget_shows_a_spiking_recording_by_bin(spiking_recording):
    pytest.importorskip("jupyter_rfb")
    pytest.importorskip("ipywidgets")
    from flyviz.kinds.spiking import SPIKING
    from flyviz.notebook import BrainWidget

    with offscreen_gl_or_skip():   # any other export error fails
        widget = BrainWidget(spiking_recording, size=(160, 120))
    try:
        assert widget.state.kind is SPIKING
        assert widget.slider.description == "bin (10 ms)" and widget.slider.max == 4
        widget.show_token(1)
        assert "bin 1 of 0–4 · 20 ms" in widget.text.value
        assert "spike_flash" in widget.quantity_control.options
        # Chosen by a script, the menu under the cell says it (it kept "spike_rate").
        widget.set_quantity("spike_flash")
        assert widget.quantity == widget.quantity_control.value == "spike_flash"
    finally:
        widget.close()


def test_a_movie_of_a_spiking_state_shows_its_spikes_flashing(spiking_recording, tmp_path):
    iio = pytest.importorskip("imageio.v3")
    from flyviz.brain_source import BrainSource
    from flyviz.export.movie import export_state
    from flyviz.export.options import ExportOptions
    from flyviz.render.style import BACKGROUND
    from flyviz.viewer.layers import FLASH

    state = BrainSource.open(spiking_recording).state
    state.colour_by = FLASH                      # what the window exports when it shows it
    with offscreen_gl_or_skip():   # any other export error fails
        export_state(state.frozen(), tmp_path / "frames/",
                     ExportOptions(size=(320, 200), frames_per_token=1, hold_seconds=0.0,
                                   view="front"))
    images = [iio.imread(p)[..., :3].astype(int) for p in sorted((tmp_path / "frames").glob("*.png"))]
    assert len(images) == 5
    background = np.round(np.asarray(BACKGROUND[:3]) * 255).astype(int)
    lit = np.abs(images[-1] - background).max(axis=-1) > 40
    lit[:50] = False                             # the header's words
    lit[105:165, 230:] = False                   # the colour bar
    left, right = lit[:, :160].sum(), lit[:, 160:].sum()
    assert left >= 15 and right <= left // 5, (left, right)


def test_a_model_of_another_kind_or_size_is_refused_not_swapped_for_another(
        spiking_recording, demo, tmp_path):
    """A model given that cannot be the recording's is one line, in both hosts' openings:
    before, it was dropped without a word and the neurons were placed by the model the
    recording names (or on a ball), whatever the user chose."""
    from test_connectorch import _int_brain

    from flyviz.brain_source import BrainSource
    from flyviz.errors import RecordingError
    from flyviz.kinds.spiking import SpikingModel
    from flyviz.model.formats.connectorch import write_brain as write_ct
    from flyviz.record.recording import Recording

    five = SpikingModel.load(str(write_ct(_int_brain(), tmp_path / "five.ct")))
    recording = Recording.load(spiking_recording)
    with pytest.raises(RecordingError, match=r"^spikes\.flyrec has 80 neurons but five has 5; "
                                             "give the model it was made with"):
        BrainSource.open(spiking_recording, model=five)
    with pytest.raises(RecordingError, match="^the recording has 80 neurons but five has 5"):
        BrainSource.of_recording(recording, five)
    # The Fly LLM's demo is no spiking brain (and has another size too): its kind is said.
    with pytest.raises(RecordingError, match=r"^spikes\.flyrec is a spiking brain recording "
                                             "but .* is a language model"):
        BrainSource.open(spiking_recording, model=demo)


def test_a_same_size_brain_that_is_not_the_recordings_is_said(spiking_recording, tmp_path):
    """A brain of the recording's size that is not the one it ran on draws its own
    positions (the user's choice), and says so: the other brain places the excited half
    on the right."""
    import pandas as pd
    from test_spiking_kind import write_brain

    from flyviz.brain_source import BrainSource
    from flyviz.kinds.spiking import SpikingModel

    other = write_brain(tmp_path / "mirrored")
    table = pd.read_csv(other / "coordinates.csv")
    table["position"] = [p.replace("[-", "[+").replace("[", "[-").replace("-+", "")
                         for p in table["position"]]
    table.to_csv(other / "coordinates.csv", index=False)
    model = SpikingModel.load(str(other))
    with pytest.warns(UserWarning, match=r"spikes\.flyrec ran on the brain .*brain, not "
                                         ".*mirrored: its neurons are drawn where"):
        source = BrainSource.open(spiking_recording, model=model)
    assert "mirrored" in (source.note or "")
    # the mirrored brain's positions: the excited (first) half on the right
    assert source.state.anatomy.positions[:40, 0].min() > 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")              # its own brain given: nothing to say
        own = BrainSource.open(spiking_recording,
                               model=SpikingModel.load(str(spiking_recording.parent / "brain")))
    assert own.note is None


def damaged_state_row(path: Path, row: int, target: Path) -> Path:
    """``path`` with bytes of the state of frame ``row`` flipped (its checksum then fails):
    a recording opened lazily reads it only when that frame is drawn."""
    import json

    raw = bytearray(path.read_bytes())
    header_len = int.from_bytes(raw[:8], "little")
    states = json.loads(raw[8:8 + header_len])["states"]
    begin, end = states["data_offsets"]
    row_bytes = (end - begin) // states["shape"][0]
    at = 8 + header_len + begin + row * row_bytes + 4
    raw[at:at + 8] = bytes(b ^ 0x5A for b in raw[at:at + 8])
    target.write_bytes(bytes(raw))
    return target


def test_a_damaged_frame_is_said_under_the_notebook_widget_not_a_traceback(spiking_recording,
                                                                          tmp_path):
    """jupyter_rfb draws in the widget's output area (``get_frame``), where an exception is a
    traceback: the widget says the recording's one line under it instead, over an empty
    frame; a script's ``snapshot()`` raises that line."""
    pytest.importorskip("jupyter_rfb")
    from flyviz.errors import RecordingError
    from flyviz.notebook import BrainWidget
    from flyviz.render.style import BACKGROUND

    damaged = damaged_state_row(spiking_recording, 3, tmp_path / "damaged.flyrec")
    with offscreen_gl_or_skip():   # any other export error fails
        widget = BrainWidget(damaged, size=(160, 120))
    try:
        widget.show_token(3)
        frame = widget.get_frame()          # what jupyter_rfb calls
        assert frame.shape == (120, 160, 3)
        background = np.round(np.asarray(BACKGROUND[:3]) * 255).astype(np.uint8)
        assert (frame == background).all()
        assert "flyviz: error: damaged.flyrec is damaged (the state of frame 3 fails its " \
               "checksum)" in widget.text.value
        with pytest.raises(RecordingError, match="^damaged.flyrec is damaged"):
            widget.snapshot()
    finally:
        widget.close()


def test_a_brain_without_somata_is_said_to_be_on_a_generic_layout(tmp_path):
    """A ConnecTorch brain has no soma positions: its neurons lie on a generic ball, and the
    hosts say so as they say it of a model's graph layout (they said nothing: the points
    passed for the brain's anatomy)."""
    from test_connectorch import _int_brain

    from flyviz.brain_source import BrainSource
    from flyviz.model.formats.connectorch import write_brain as write_ct
    from flyviz.record.recording import Recording

    brain = write_ct(_int_brain(), tmp_path / "five.ct")
    out = tmp_path / "five.flyrec"
    assert main(["simulate", str(brain), "--excite", "type:T11", "--rate", "300",
                 "--duration", "30ms", "--record", str(out)]) == 0
    said = "five.flyrec: five has no neuron positions; neurons are placed on a generic layout"
    with pytest.warns(UserWarning, match=said):
        source = BrainSource.open(out)
    assert source.note == said and source.anatomy.kind == "layout"
    # the brain's own labels still: it is that brain, only its places are made up
    assert list(source.features()["cell_type"]) == ["T11", "T22", "T33", "T44", "T55"]
    in_memory = BrainSource.of_recording(Recording.load(out))
    assert "five has no neuron positions" in (in_memory.note or "")


@pytest.fixture(scope="module")
def fine_recording(spiking_recording) -> Path:
    """A run of the same brain recorded in bins of 5 ms (`--bin 5`), four of them."""
    out = spiking_recording.parent / "fine.flyrec"
    assert main(["simulate", str(spiking_recording.parent / "brain"), "--excite",
                 "superclass:sensory", "--rate", "300", "--duration", "20ms", "--bin", "5",
                 "--record", str(out)]) == 0
    return out


def test_napari_axis_is_the_bins_the_run_was_recorded_with(fine_recording):
    """`--bin 5` records bins of 5 ms: napari's slider says so (it said the kind's default,
    "bin (10 ms)", under 5 ms bins), as the text at each bin does."""
    pytest.importorskip("napari")
    from flyviz.brain_source import BrainSource
    from flyviz.napari._layers import layer_data

    source = BrainSource.open(fine_recording)
    axis_data, axis_kwargs, _ = layer_data(source)[0]
    assert axis_data.shape[0] == 4 and axis_kwargs["axis_labels"][0] == "bin (5 ms)"
    assert source.token_text(1).startswith("bin 1 of 0–3 · 10 ms")


def test_the_notebook_slider_says_the_bins_the_run_was_recorded_with(fine_recording,
                                                                     spiking_recording):
    """The slider under the notebook widget says what napari's does: "bin (5 ms)" for a run
    recorded in 5 ms bins, "bin (10 ms)" for one in the default bins (it said "bin", of
    whatever length)."""
    pytest.importorskip("jupyter_rfb")
    from flyviz.notebook import BrainWidget

    for path, label in ((fine_recording, "bin (5 ms)"), (spiking_recording, "bin (10 ms)")):
        with offscreen_gl_or_skip():   # any other export error fails
            widget = BrainWidget(path, size=(160, 120))
        try:
            assert widget.slider.description == label
        finally:
            widget.close()


def test_the_notebook_highlight_selects_a_spiking_brains_neurons(spiking_recording):
    """The highlight box under the widget reads the query over the spiking brain's labels,
    as `flyviz simulate --excite` does (it failed in an AttributeError: a brain has no
    checkpoint)."""
    pytest.importorskip("jupyter_rfb")
    from flyviz.errors import SelectionError
    from flyviz.notebook import BrainWidget

    with offscreen_gl_or_skip():   # any other export error fails
        widget = BrainWidget(spiking_recording, size=(160, 120))
    try:
        picked = widget.highlight("superclass:sensory")
        np.testing.assert_array_equal(picked, np.arange(40))
        assert widget.state.highlight is not None
        np.testing.assert_array_equal(np.flatnonzero(widget.state.highlight > 0.5), np.arange(40))
        widget.highlight_control.value = "type:R"            # typed under the widget
        assert "40 neurons highlighted" in widget.text.value
        widget.highlight_control.value = "superclass:nope"
        assert "flyviz: error: unknown superclass 'nope'" in widget.text.value
        with pytest.raises(SelectionError, match="unknown superclass"):
            widget.highlight("superclass:nope")
    finally:
        widget.close()


def test_added_quantities_are_refused_by_the_spiking_recordings_own_names(spiking_recording):
    """A spiking recording's own colourings are its rate and its spikes: an added quantity
    of its rate's name is refused, and ``"abs"`` or ``"signed"`` (a Fly LLM's activation,
    no colouring of a rate) are names like any other, not "the recording's own"."""
    from flyviz.brain_source import BrainSource
    from flyviz.errors import InputError

    source = BrainSource.open(spiking_recording)
    values = np.arange(source.state.neurons, dtype=np.float32)
    with pytest.raises(InputError, match="'spike_rate' is one of the recording's own colour "
                                         "quantities"):
        source.add_quantity("spike_rate", values)
    for name in ("abs", "signed"):
        assert source.add_quantity(name, values) == name
        source.show(name)
        assert source.quantity == name
        np.testing.assert_array_equal(source.values(name, 2), values[source.shown])
    assert source.quantities == ("spike_rate", "spike_flash", "abs", "signed")
