"""The spiking brain as a model kind (flyviz.kinds.spiking): bins of rates, recordings that
say their kind, and movies whose bins light the neurons that fired in them.

The brain is written in the authors' layout: 40 "left" sensory neurons far left, 40 "right"
central ones far right, no synapses between them; exciting the left ones makes them, and
only them, fire.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from gl_skip import skip_if_no_offscreen_gl

from flyviz.cli import main
from flyviz.kinds import LANGUAGE, kind_of, kind_of_recording
from flyviz.kinds.spiking import (SPIKING, BinSettings, SpikingModel, Stimulus, record_run)
from flyviz.record.recording import Recording

pytest.importorskip("pyarrow")

# The engine's kernels compiled once for all the test workers (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("spiking_kernels")

HALF = 40
IDS = np.arange(2 * HALF, dtype=np.int64) + 720575940600000000


def write_brain(folder: Path) -> Path:
    """The two-sided brain: each left neuron drives the next one weakly (so the kind has a
    graph to run), the right ones are wired among themselves and get no input."""
    folder.mkdir(parents=True, exist_ok=True)
    pd.DataFrame({"Completed": True}, index=pd.Index(IDS)).to_csv(
        folder / "Completeness_783.csv")
    pre = list(range(HALF - 1)) + list(range(HALF, 2 * HALF - 1))
    post = [p + 1 for p in pre]
    signed = [3] * len(pre)
    pd.DataFrame({"Presynaptic_ID": IDS[pre], "Postsynaptic_ID": IDS[post],
                  "Presynaptic_Index": pre, "Postsynaptic_Index": post,
                  "Connectivity": signed, "Excitatory": 1,
                  "Excitatory x Connectivity": signed}).to_parquet(
        folder / "Connectivity_783.parquet")
    rng = np.random.default_rng(1)
    x = np.r_[np.full(HALF, -60000.0), np.full(HALF, 60000.0)] + rng.normal(0, 8000, 2 * HALF)
    y, z = rng.normal(0, 8000, (2, 2 * HALF))
    pd.DataFrame({"root_id": IDS,
                  "position": [f"[{a:.0f} {b:.0f} {c:.0f}]" for a, b, c in zip(x, y, z)]}
                 ).to_csv(folder / "coordinates.csv", index=False)
    pd.DataFrame({"root_id": IDS, "super_class": ["sensory"] * HALF + ["central"] * HALF,
                  "cell_type": ["L"] * HALF + ["R"] * HALF, "side": ["left"] * HALF
                  + ["right"] * HALF}).to_csv(folder / "classification.csv", index=False)
    return folder


@pytest.fixture(scope="module")
def brain_folder(tmp_path_factory) -> Path:
    return write_brain(tmp_path_factory.mktemp("spiking") / "brain")


def test_the_authors_folder_is_a_brain_folder_as_load_brain_reads_it(brain_folder, tmp_path):
    """This file's brain (the authors' layout) is a brain folder: the window's and napari's
    Model boxes ask is_brain_folder, which knew only .ct brains and the MaleCNS set, so
    napari tried the folder load_brain reads as a Fly LLM and refused it."""
    import shutil

    from flyviz.spiking.brain import BrainError, is_brain_folder, load_brain

    assert is_brain_folder(brain_folder) and is_brain_folder(str(brain_folder))
    # A completeness table is what load_brain reads as the authors' layout: without its
    # connectivity table the folder is still a brain, which says what it lacks.
    half = tmp_path / "half"
    half.mkdir()
    shutil.copy(brain_folder / "Completeness_783.csv", half)
    assert is_brain_folder(half)
    with pytest.raises(BrainError, match="no connectivity table beside Completeness_783"):
        load_brain(half)
    # No brain: a connectivity table alone, an empty folder, a missing one, the table itself.
    lone = tmp_path / "lone"
    lone.mkdir()
    shutil.copy(brain_folder / "Connectivity_783.parquet", lone)
    empty = tmp_path / "empty"
    empty.mkdir()
    for spec in (lone, empty, tmp_path / "missing", brain_folder / "Completeness_783.csv"):
        assert not is_brain_folder(spec), spec


def test_napari_model_box_loads_the_authors_folder_as_a_spiking_brain(brain_folder):
    pytest.importorskip("napari")
    from flyviz.napari._widget import load_model

    model = load_model(str(brain_folder))
    assert isinstance(model, SpikingModel) and model.neurons == 2 * HALF


def test_binned_counts_sum_to_the_runs_spikes(brain_folder):
    from flyviz import spiking

    brain = spiking.load_brain(brain_folder)
    run = spiking.simulate(brain, excite=np.arange(HALF), duration_s=0.095, seed=3)
    counts = run.bin_counts(100)
    assert counts.shape == (10, brain.neurons)          # 950 ticks: 9 whole bins and a short one
    assert counts.sum() == run.neuron.size > 0
    np.testing.assert_array_equal(counts.sum(axis=0),
                                  np.bincount(run.neuron, minlength=brain.neurons))
    first = run.tick < 100
    np.testing.assert_array_equal(counts[0], np.bincount(run.neuron[first],
                                                         minlength=brain.neurons))


def test_a_spiking_run_is_frames_of_rates_in_its_bins(brain_folder):
    model = SpikingModel.load(str(brain_folder))
    assert kind_of(model) is SPIKING and SPIKING != LANGUAGE
    assert SPIKING.time_axis.of(2, 5) == "bin 2 of 0–4 · 30 ms"
    assert [c.key for c in SPIKING.side_channels] == ["spikes"]
    recording = record_run(model, Stimulus(excite="superclass:sensory", rate=200.0, seed=2),
                           SPIKING.run_settings(bins=8, bin_ms=10.0))
    assert len(recording) == 8 and kind_of_recording(recording) is SPIKING
    rates = np.stack([recording.state(i) for i in range(8)])
    meta = recording.metadata["spiking"]
    # Rates in Hz: a bin's spikes over its 10 ms; they sum back to the spike counts kept.
    assert np.allclose(rates.sum(axis=1) * 0.010, meta["bin_spikes"])
    assert rates[:, :HALF].sum() > 0 and rates[:, HALF:].sum() == 0
    assert meta["excited"] == HALF and meta["brain"] == str(brain_folder)
    # The counter says the bin, its time and its spikes.
    counters = [c.counter for c in SPIKING.overlays(recording)]
    assert counters[2] == f"bin 2 of 0–7 · 30 ms · {meta['bin_spikes'][2]:,} spikes"
    with pytest.raises(flyviz_input_error()):
        BinSettings(bin_ms=0.01).validate()
    with pytest.raises(flyviz_input_error(), match="nothing to excite"):
        Stimulus().indices(model.brain)


def test_the_counter_of_several_trials_says_a_bins_spikes_per_trial(brain_folder):
    """A run of several trials is shown as their mean (rates, flashes): its counter (the
    window's status line, a movie's and a still's caption, a shared page's) says a bin's
    spikes per trial, their mean, counted here off the spike log; all trials' spikes
    together read as so many times one trial's activity."""
    model = SpikingModel.load(str(brain_folder))
    recording = record_run(model, Stimulus(excite="superclass:sensory", rate=200.0, seed=2),
                           BinSettings(bins=3, trials=4))
    ends = recording.spikes.frame_ends()
    for i in range(3):
        spikes = int(ends[i] - (ends[i - 1] if i else 0))
        assert spikes > 0
        assert SPIKING.counter(recording, i) == \
            f"bin {i} of 0–2 · {10 * (i + 1)} ms · {spikes / 4:,.1f} spikes per trial"
        assert SPIKING.page_counter(recording, i).endswith(f" · {spikes / 4:,.1f} spikes per trial")


@pytest.mark.parametrize("spiking_meta, trials", [
    ({"trials": 30}, 30),
    ({}, 1),                                   # a run of one says none
    ({"trials": 0}, 1),                        # edited by hand: the views say what is wrong
    ("a string", 1),
    ({"bin_ms": "abc", "trials": 4}, 1),
])
def test_the_panels_read_a_runs_trials_and_one_where_its_table_is_broken(spiking_meta,
                                                                           trials):
    """The Stimulus and population docks size their status lines and raster lanes by the
    run's trials (:meth:`SpikingKind.run_trials`); a recording edited by hand opens with one
    trial, not a failure in the panel (its figures and movies name the broken entry)."""
    recording = Recording(4, {"kind": "spiking", "spiking": spiking_meta},
                          states_dtype="float32")
    assert SPIKING.run_trials(recording) == trials


def flyviz_input_error() -> type[Exception]:
    from flyviz.errors import InputError

    return InputError


def test_simulate_records_rates_that_read_back_as_the_spiking_kind(brain_folder, tmp_path,
                                                                   capsys):
    out = tmp_path / "spikes.flyrec"
    assert main(["simulate", str(brain_folder), "--excite", "superclass:sensory",
                 "--duration", "60ms", "--record", str(out)]) == 0
    recording = Recording.load(out)
    assert kind_of_recording(recording) is SPIKING and len(recording) == 6
    assert recording.metadata["spiking"]["bin_ms"] == pytest.approx(10.0)
    assert sum(recording.metadata["spiking"]["bin_spikes"]) > 0
    # Recordings that name no kind are the Fly LLM's, as before.
    assert kind_of_recording(Recording(3)) is LANGUAGE
    # Bad --record names fail before the brain loads, on one line.
    capsys.readouterr()
    assert main(["simulate", str(tmp_path / "none"), "--record", str(tmp_path / "x.txt")]) == 2
    assert capsys.readouterr().err.strip().startswith("flyviz: error: --record")
    assert main(["simulate", str(brain_folder)]) == 2


def _lit(image: np.ndarray) -> np.ndarray:
    from flyviz.render.style import BACKGROUND

    background = np.round(np.asarray(BACKGROUND[:3]) * 255).astype(int)
    return np.abs(image.astype(int) - background).max(axis=-1) > 40


def test_a_spiking_recording_exports_as_a_movie_whose_bins_light_the_spiking_neurons(
        brain_folder, tmp_path, capsys):
    """The movie of a spiking run lights the neurons that fire. It skips only where this
    machine has no offscreen OpenGL (gl_skip's rule): an export that fails with any other
    error, one naming OpenGL included (a shader that does not compile), fails it."""
    iio = pytest.importorskip("imageio.v3")
    from flyviz.model.errors import ExportError

    rec = tmp_path / "spikes.flyrec"
    assert main(["simulate", str(brain_folder), "--excite", "superclass:sensory", "--rate",
                 "250", "--duration", "40ms", "--record", str(rec)]) == 0
    capsys.readouterr()
    frames = tmp_path / "frames"
    try:
        code = main(["export", str(rec), "--out", f"{frames}/", "--size", "320x200",
                     "--frames-per-token", "1", "--hold", "0", "--view", "front"])
    except ExportError as exc:
        skip_if_no_offscreen_gl(str(exc))   # any other export error fails
        raise
    err = capsys.readouterr().err
    if code != 0:
        # Only the "no offscreen OpenGL" error skips; an export error that merely mentions
        # OpenGL fails (gl_skip's rule).
        skip_if_no_offscreen_gl(err)
    assert code == 0, err
    images = [iio.imread(p)[..., :3] for p in sorted(frames.glob("*.png"))]
    assert len(images) == 4
    lit = _lit(images[-1])
    lit[:50] = False                                      # the header's words
    lit[105:165, 230:] = False                            # the colour bar
    left, right = lit[:, :160].sum(), lit[:, 160:].sum()
    # The excited (left) neurons fire and are lit; the silent right ones stay dark.
    assert left >= 15 and right <= left // 5, (left, right)


def test_a_spiking_recordings_figure_is_drawn_on_its_brain_and_captioned_by_bin(
        brain_folder, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    from flyviz import figures
    from flyviz.model.errors import ExportError

    model = SpikingModel.load(str(brain_folder))
    recording = record_run(model, Stimulus(excite="superclass:sensory", seed=4),
                           BinSettings(bins=3))
    figure = Figure(figsize=(6.4, 4.8), dpi=100)
    try:
        figures._brain(figure, recording, model,
                       figures.FigureOptions(kind="brain", size=(640, 480), token=1).checked())
    except ExportError as exc:
        skip_if_no_offscreen_gl(str(exc))   # any other export error fails
        raise
    spikes = recording.metadata["spiking"]["bin_spikes"][1]
    assert [a.get_title() for a in figure.axes if a.get_title()] == [
        f"bin 1 of 0–2 · 20 ms · {spikes:,} spikes"]
    # On the command line the recording's brain is found by itself (no --model).
    rec = tmp_path / "s.flyrec"
    recording.save(rec)
    assert main(["figure", str(rec), "--kind", "brain", "--out", str(tmp_path / "b.png")]) == 0
    assert (tmp_path / "b.png").stat().st_size > 1000


def test_a_recorded_run_is_stepped_bin_by_bin_and_equals_the_whole_run(brain_folder):
    from flyviz import spiking

    model = SpikingModel.load(str(brain_folder))
    stimulus = Stimulus(excite="superclass:sensory", rate=200.0, seed=6)
    frames = SPIKING.frames(model, stimulus, BinSettings(bins=5, bin_ms=7.0, trials=2))
    first = next(frames)                   # the first bin comes before the others are run
    assert first.position == 0
    rest = list(frames)
    excite, _ = stimulus.indices(model.brain)
    whole = spiking.simulate(model.brain, excite=excite, rate=200.0, seed=6, trials=2,
                             duration_s=0.035)
    counts = whole.bin_counts(70)
    rates = np.stack([f.state for f in [first, *rest]])
    assert counts.sum() > 0
    np.testing.assert_allclose(rates, (counts / (0.007 * 2)).astype(np.float32))


def _by_run_order(log) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A spike log's ``(tick, neuron, trial)`` in a SpikeRun's order (trial, tick, neuron)."""
    tick, neuron, trial = log.arrays()
    order = np.lexsort((neuron, tick, trial))
    return tick[order], neuron[order], trial[order]


def test_a_recorded_run_keeps_every_spike_of_the_whole_run_at_its_tick(brain_folder, tmp_path):
    """The recording's spikes are the run's, exactly: in bins (each bin's by trial, tick,
    neuron), at their ticks, and saved and opened again unchanged."""
    from flyviz import spiking

    model = SpikingModel.load(str(brain_folder))
    stimulus = Stimulus(excite="superclass:sensory", rate=200.0, seed=6)
    recording = record_run(model, stimulus, BinSettings(bins=5, bin_ms=7.0, trials=2))
    excite, _ = stimulus.indices(model.brain)
    whole = spiking.simulate(model.brain, excite=excite, rate=200.0, seed=6, trials=2,
                             duration_s=0.035)
    log = recording.spikes
    assert log is not None and len(log) == 5 and log.tick_ms == pytest.approx(0.1)
    assert log.count == whole.neuron.size > 100 and log.trials == 2
    for got, want in zip(_by_run_order(log), (whole.tick, whole.neuron, whole.trial)):
        np.testing.assert_array_equal(got, want)
    # Frame by frame: each bin's spikes are those of its 70 ticks, and count to its rates.
    ends = log.frame_ends()
    assert ends.tolist() == np.cumsum(recording.metadata["spiking"]["bin_spikes"]).tolist()
    for i in range(5):
        tick, neuron, trial = log.arrays(i, i + 1)
        assert ((tick >= 70 * i) & (tick < 70 * (i + 1))).all()
        assert (np.lexsort((neuron, tick, trial)) == np.arange(tick.size)).all()
        np.testing.assert_allclose(np.bincount(neuron, minlength=model.neurons) / (0.007 * 2),
                                   recording.state(i), rtol=1e-6)
    # The one-call form gives the same log as the bin-by-bin one.
    again = whole.spike_log(70)
    for a, b in zip(again.arrays(), log.arrays()):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(again.frame_ends(), ends)
    # Saved and opened again (and lazily), the spikes are the same, with the file's format.
    path = recording.save(tmp_path / "run.flyrec")
    for back in (Recording.load(path), Recording.load(path, verify=False)):
        assert back.spikes is not None and back.spikes.tick_ms == pytest.approx(0.1)
        for a, b in zip(back.spikes.arrays(), log.arrays()):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(back.spikes.frame_ends(), ends)
    # A snapshot shares them and does not grow with the recording.
    frozen = recording.snapshot()
    assert frozen.spikes is not None and frozen.spikes.count == log.count
    with pytest.raises(ValueError, match="frozen"):
        frozen.spikes.append(np.zeros(1, np.int64), np.zeros(1, np.int64))


def test_simulate_record_keeps_the_spikes_of_its_out_table(brain_folder, tmp_path):
    """``flyviz simulate --record`` stores every spike the ``--out`` table lists, at its
    time."""
    pytest.importorskip("pyarrow")
    out, rec = tmp_path / "spikes.parquet", tmp_path / "spikes.flyrec"
    assert main(["simulate", str(brain_folder), "--excite", "superclass:sensory", "--trials",
                 "2", "--duration", "45ms", "--out", str(out), "--record", str(rec)]) == 0
    table = pd.read_parquet(out)
    recording = Recording.load(rec)
    log = recording.spikes
    assert log is not None and len(log) == len(recording) == 5 and log.count == len(table) > 0
    tick, neuron, trial = _by_run_order(log)
    np.testing.assert_allclose(tick * log.tick_ms / 1000.0, table["t"].to_numpy(), atol=1e-12)
    np.testing.assert_array_equal(IDS[neuron], table["flywire_id"].to_numpy())
    np.testing.assert_array_equal(trial, table["trial"].to_numpy())
    assert log.frame_ends().tolist() == np.cumsum(
        recording.metadata["spiking"]["bin_spikes"]).tolist()


def test_a_spike_log_grows_in_place_and_its_snapshots_stay_as_taken():
    from flyviz.record.spikes import SpikeLog

    log = SpikeLog(0.1)
    rng = np.random.default_rng(0)
    sizes = rng.integers(0, 900, 40)               # past the first buffers' room, many times
    for i, k in enumerate(sizes):
        log.append(np.full(k, i, np.int64), rng.integers(0, 50, k), np.ones(k, np.int32))
        if i == 9:
            frozen = log.snapshot()
    assert len(log) == 40 and log.count == sizes.sum()
    assert log.frame_ends().tolist() == np.cumsum(sizes).tolist()
    tick, _neuron, trial = log.arrays(10, 12)
    assert set(tick.tolist()) <= {10, 11} and tick.size == sizes[10:12].sum()
    assert (trial == 1).all() and log.times_ms(3, 4).tolist() == [pytest.approx(0.3)] * sizes[3]
    # int arrays, room at most doubled: 16 bytes a spike, about
    assert log.nbytes() <= 2 * 16 * log.count + 4096 * 16 + 1024
    assert len(frozen) == 10 and frozen.count == sizes[:10].sum()
    assert (frozen.arrays()[0] <= 9).all()
    with pytest.raises(ValueError):
        log.append(np.zeros(2, np.int64), np.zeros(3, np.int64))


def test_a_recording_without_spikes_reads_as_before(brain_folder, tmp_path):
    """A spiking recording that kept no spikes (format 1.3 and older) opens without them,
    and one whose spikes are damaged is refused on one line."""
    from test_recording_format import rewrite

    from flyviz.model.errors import RecordingError

    model = SpikingModel.load(str(brain_folder))
    recording = record_run(model, Stimulus(excite="superclass:sensory", seed=1),
                           BinSettings(bins=3))
    path = recording.save(tmp_path / "new.flyrec")
    spike_tensors = ("spike_tick", "spike_neuron", "spike_trial", "spike_frame_end")
    old = rewrite(path, tmp_path / "old.flyrec", reseal=True,
                  meta={"format_version": "1.3", "spike_tick_ms": None},
                  tensors={name: None for name in spike_tensors})
    back = Recording.load(old)
    assert back.spikes is None and len(back) == 3
    np.testing.assert_array_equal(back.states(), recording.states())
    # Saved again, it stays without them.
    assert Recording.load(back.save(tmp_path / "again.flyrec")).spikes is None
    log = recording.spikes
    assert log is not None and log.count > 0
    neuron = log.arrays()[1].copy()
    neuron[0] = model.neurons
    for label, change in {
        "a spike tensor missing": {"tensors": {"spike_trial": None}},
        "a neuron beyond the brain": {"tensors": {"spike_neuron": neuron}},
        "ends one short": {"tensors": {"spike_frame_end": log.frame_ends()[:-1].copy()}},
        "ends past the spikes": {"tensors": {"spike_frame_end": log.frame_ends() + 1}},
        "ticks of another dtype": {"tensors": {"spike_tick": log.arrays()[0].astype(np.int32)}},
        "no tick length": {"meta": {"spike_tick_ms": None}},
        "a tick length of 0": {"meta": {"spike_tick_ms": "0"}},
    }.items():
        bad = rewrite(path, tmp_path / "bad.flyrec", reseal=True, **change)
        with pytest.raises(RecordingError) as info:
            Recording.load(bad)
        assert "damaged" in str(info.value) and "\n" not in str(info.value), label
    # A saved recording whose spikes cover fewer frames than it has is refused, on one line.
    short = record_run(model, Stimulus(excite="superclass:sensory", seed=1), BinSettings(bins=2))
    from flyviz.kinds import state_frame

    short.append(state_frame(2, np.zeros(model.neurons, np.float32)))
    with pytest.raises(RecordingError, match="spikes cover 2 of its 3 frames"):
        short.save(tmp_path / "short.flyrec")


def test_a_movie_colours_a_spiking_recording_by_rate_and_a_language_models_by_activation():
    from flyviz.export import ExportOptions
    from flyviz.kinds import LANGUAGE
    from flyviz.kinds.spiking import SPIKING
    from flyviz.viewer.layers import RATE

    options = ExportOptions(mode="signed", scale=50.0)
    rates = options.cloud_style(SPIKING).layer
    assert rates.name == RATE and rates.colormap == "sequential" and rates.units == "Hz"
    assert rates.scale == options.cloud_style().layer.scale      # --color-scale still applies
    activation = options.cloud_style(LANGUAGE).layer
    assert (activation.name, activation.colormap) == (options.cloud_style().layer.name,
                                                      options.cloud_style().layer.colormap)


@pytest.mark.parametrize("to", ["npz", "zarr", "nwb"])
def test_converting_a_spiking_recording_keeps_every_spike(brain_folder, tmp_path, to):
    """``flyviz convert`` of a spiking run writes its exact spikes beside its bins: one entry
    per spike (frame, tick, time, neuron, trial) in NumPy and Zarr, NWB's ``units`` table
    (each neuron's spike times in seconds, each spike's trial) in NWB."""
    pytest.importorskip("pyarrow")
    pytest.importorskip({"npz": "numpy", "zarr": "zarr", "nwb": "pynwb"}[to])
    rec = tmp_path / "spikes.flyrec"
    assert main(["simulate", str(brain_folder), "--excite", "superclass:sensory", "--trials",
                 "2", "--duration", "45ms", "--out", str(tmp_path / "spikes.parquet"),
                 "--record", str(rec)]) == 0
    recording = Recording.load(rec)
    log = recording.spikes
    assert log is not None and log.count > 0 and log.trials == 2
    tick, neuron, trial = (np.asarray(a) for a in log.arrays())
    frame = np.searchsorted(log.frame_ends(), np.arange(log.count), side="right")
    out = tmp_path / f"run.{to}"
    assert main(["convert", str(rec), str(out), "--no-labels"]) == 0
    if to == "nwb":
        import pynwb

        assert pynwb.validate(path=str(out)) == []
        bin_ms = recording.metadata["spiking"]["bin_ms"]
        with pynwb.NWBHDF5IO(str(out), "r") as io:
            nwb = io.read()
            units = nwb.units
            got = sorted((int(unit), round(float(t) * 1e4), int(k))
                         for unit, times, trials in zip(units.id[:], units["spike_times"][:],
                                                        units["spike_trial"][:])
                         for t, k in zip(times, trials))
            # The bins at their real length, the rates in Hz, one interval per bin.
            series = nwb.processing["flyviz"]["Fluorescence"]["states"]
            assert series.rate == pytest.approx(1000.0 / bin_ms) and series.unit == "Hz"
            np.testing.assert_array_equal(np.asarray(series.data[:]), recording.states())
            bins = nwb.intervals["bins"]
            assert len(bins) == len(recording) and "tokens" not in nwb.intervals
            np.testing.assert_allclose(bins["start_time"][:],
                                       np.arange(len(recording)) * bin_ms / 1000.0)
            assert int(np.sum(bins["spikes"][:])) == log.count
        # spike times in s: tick 0.1 ms
        assert got == sorted(zip(neuron.tolist(), tick.tolist(), trial.tolist()))
        return
    if to == "npz":
        data = np.load(out, allow_pickle=False)
        attrs = json.loads(str(data["attributes"]))
    else:
        from flyviz.record.convert import open_zarr

        data = open_zarr(out)
        attrs = data.attrs
    np.testing.assert_array_equal(np.asarray(data["spike_tick"]), tick)
    np.testing.assert_array_equal(np.asarray(data["spike_neuron"]), neuron)
    np.testing.assert_array_equal(np.asarray(data["spike_trial"]), trial)
    np.testing.assert_array_equal(np.asarray(data["spike_frame"]), frame)
    np.testing.assert_allclose(np.asarray(data["spike_time_ms"]), tick * 0.1)
    assert attrs["spike_tick_ms"] == pytest.approx(0.1) and attrs["spikes"] == log.count
    # Each bin's rates are its spikes over the bin, per trial (the state beside them); the
    # run's 45 ms make four bins of 10 ms and a last one of 5 ms, its rates over 5 ms.
    states = np.asarray(data["state"], dtype=np.float64)
    counts = np.zeros_like(states)
    np.add.at(counts, (frame, neuron), 1.0)
    bin_s = np.array([0.01, 0.01, 0.01, 0.01, 0.005])[:, None]
    assert recording.metadata["spiking"]["run_ticks"] == 450
    np.testing.assert_allclose(states, counts / log.trials / bin_s, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("to", ["npz", "zarr"])
def test_a_converted_spiking_recording_says_its_rates_are_hz_and_keeps_its_run(
        brain_folder, tmp_path, to):
    """A spiking run converted to .npz or Zarr names its states firing rates in Hz (not a
    unitless state x) and keeps the run's kind, state_units and whole spiking block (brain,
    rate, seed, bin, trials, per-bin spikes...) as attributes; so does to_xarray called
    without the kind's timing."""
    pytest.importorskip("xarray")
    pytest.importorskip({"npz": "numpy", "zarr": "zarr"}[to])
    rec = tmp_path / "run.flyrec"
    assert main(["simulate", str(brain_folder), "--excite", "superclass:sensory", "--trials",
                 "2", "--duration", "30ms", "--record", str(rec)]) == 0
    recording = Recording.load(rec)
    spiking_meta = recording.metadata["spiking"]
    assert {"brain", "bin_ms", "trials", "bin_spikes", "run_ticks"} <= set(spiking_meta)
    out = tmp_path / f"run.{to}"
    assert main(["convert", str(rec), str(out), "--no-labels"]) == 0
    if to == "npz":
        with np.load(out, allow_pickle=False) as data:
            attrs = json.loads(str(data["attributes"]))
        state = {"long_name": attrs["state_long_name"], "units": attrs["state_units"]}
    else:
        from flyviz.record.convert import open_zarr

        data = open_zarr(out)
        attrs, state = dict(data.attrs), dict(data["state"].attrs)
    assert state == {"long_name": "firing rate in the bin", "units": "Hz"}
    assert attrs["kind"] == "spiking" and attrs["state_units"] == "Hz"
    assert json.loads(attrs["spiking"]) == spiking_meta
    assert dict(recording.to_xarray()["state"].attrs) == state


def test_to_nwb_without_a_timing_times_a_spiking_run_by_its_bins(brain_folder, tmp_path):
    """Recording.to_nwb() times the frames as the recording's kind says, as the other
    formats do: a spiking run's bins at their length, in Hz (it timed them as tokens, one a
    second, unit 1, unless the caller passed the kind's timing)."""
    pynwb = pytest.importorskip("pynwb")
    rec = tmp_path / "run.flyrec"
    assert main(["simulate", str(brain_folder), "--excite", "superclass:sensory", "--duration",
                 "30ms", "--bin", "10", "--record", str(rec)]) == 0
    out = Recording.load(rec).to_nwb(tmp_path / "run.nwb")
    with pynwb.NWBHDF5IO(str(out), "r") as io:
        series = io.read().processing["flyviz"]["Fluorescence"]["states"]
        assert series.unit == "Hz" and series.rate == pytest.approx(100.0)


def test_a_spiking_recording_converts_with_its_own_brains_labels(brain_folder, tmp_path,
                                                                 capsys):
    """Without --model, a spiking run's neurons are labelled by the brain it names (as its
    figures and movies draw them), where convert refused it as naming no model; the summary
    counts bins."""
    from flyviz.cli import main

    rec = tmp_path / "run.flyrec"
    assert main(["simulate", str(brain_folder), "--excite", "superclass:sensory",
                 "--duration", "30ms", "--record", str(rec)]) == 0
    out = tmp_path / "run.npz"
    capsys.readouterr()
    assert main(["convert", str(rec), str(out)]) == 0
    err = capsys.readouterr().err
    assert "3 bins x 80 neurons, with the neurons of" in err, err
    with np.load(out, allow_pickle=False) as data:
        labels = {name: data[name] for name in data.files}
    assert labels["superclass"].tolist() == ["sensory"] * HALF + ["central"] * HALF
    assert labels["body_id"].tolist() == IDS.tolist()


def test_a_prompt_or_language_settings_given_a_spiking_run_are_refused_not_dropped(brain_folder):
    from flyviz.errors import InputError
    from flyviz.record.run import GenerationSettings
    from flyviz.runs import Run, RunRequest

    model = SpikingModel.load(str(brain_folder))
    for request, said in [
            (RunRequest("Once upon a time"), "not 'Once upon a time' \\(str\\): the spiking "
                                             "brain reads no prompt"),
            (RunRequest(Stimulus(), GenerationSettings(max_new_tokens=2)),
             "settings are a flyviz.kinds.spiking.BinSettings \\(or None\\), not "
             "GenerationSettings")]:
        with pytest.raises(InputError, match=said):
            Run(model, request)
    with pytest.raises(InputError, match="reads no prompt"):
        next(iter(SPIKING.frames(model, "Once upon a time", BinSettings(bins=1))))
    # None is still the default (here: the default bins).
    run = Run(model, RunRequest(Stimulus(excite="superclass:sensory")))
    assert run.request.settings == BinSettings()


def test_bin_settings_take_whole_numbers_and_the_recording_keeps_them(brain_folder):
    from flyviz.errors import InputError
    from flyviz.runs import Run, RunRequest

    for wrong, said in [(dict(trials=2.5), "number of trials must be a whole number"),
                        (dict(trials="2"), "not '2' \\(str\\)"),
                        (dict(bins=2.5), "number of bins must be a whole number"),
                        (dict(bins=True), "not True"),
                        (dict(trials=0), "trials 0 must be 1 or more"),
                        (dict(bin_ms="10"), "a bin's length must be a number of ms")]:
        with pytest.raises(InputError, match=said):
            BinSettings(**{"bins": 3, **wrong}).validate()
    checked = BinSettings(bins=np.int64(3), bin_ms=10, trials=np.int32(2)).validate()
    assert (checked.bins, checked.bin_ms, checked.trials) == (3, 10.0, 2)
    assert type(checked.bins) is int and type(checked.trials) is int
    model = SpikingModel.load(str(brain_folder))
    run = Run(model, RunRequest(Stimulus(excite="superclass:sensory"),
                                BinSettings(bins=np.int64(2), trials=np.int64(2))))
    meta = run.recording.metadata["spiking"]
    assert type(meta["bins"]) is int and type(meta["trials"]) is int
    assert len(run.record()) == 2


def test_a_short_last_bin_ends_where_the_run_ends_in_captions_and_nwb(brain_folder,
                                                                      tmp_path):
    """A run of 30 ms in bins of 7 ms has four bins of 7 ms and one of 2 ms: its last bin
    ends at 30 ms (run_ticks x 0.1 ms) in the counter, the page's steps, the figures' axis
    and the NWB intervals and series description, not a whole bin later at 35 ms."""
    rec_path = tmp_path / "sb.flyrec"
    assert main(["simulate", str(brain_folder), "--excite", "superclass:sensory", "--bin", "7",
                 "--duration", "30ms", "--record", str(rec_path)]) == 0
    recording = Recording.load(rec_path)
    assert len(recording) == 5 and recording.metadata["spiking"]["run_ticks"] == 300
    axis = SPIKING.recording_axis(recording)
    assert [round(axis.time(i), 9) for i in range(5)] == [7, 14, 21, 28, 30]
    assert SPIKING.counter(recording, 4).startswith("bin 4 of 0–4 · 30 ms")
    assert SPIKING.page_counter(recording, 4).startswith("bin 4 / 4 · 30 ms")
    assert SPIKING.page_steps(recording)[-1]["text"] == " bin 4 · 30 ms"
    # A run of whole bins ends where its last bin does, as before.
    whole = record_run(SpikingModel.load(str(brain_folder)),
                       Stimulus(excite="superclass:sensory"), BinSettings(bins=3))
    assert SPIKING.counter(whole, 2).startswith("bin 2 of 0–2 · 30 ms")
    pynwb = pytest.importorskip("pynwb")
    out = tmp_path / "sb.nwb"
    assert main(["convert", str(rec_path), str(out), "--no-labels"]) == 0
    with pynwb.NWBHDF5IO(str(out), "r") as io:
        nwb = io.read()
        bins = nwb.intervals["bins"]
        np.testing.assert_allclose(bins["start_time"][:], [0, 0.007, 0.014, 0.021, 0.028])
        np.testing.assert_allclose(bins["stop_time"][:], [0.007, 0.014, 0.021, 0.028, 0.03])
        description = nwb.processing["flyviz"]["Fluorescence"]["states"].description
    assert "the last ending at the run's end, 0.03 s" in description, description


@pytest.mark.parametrize("command", ["export", "share"])
@pytest.mark.parametrize("mode, colours", [("signed", "signed x"), ("abs", "|x|")])
def test_mode_is_refused_for_a_spiking_recording_as_the_help_says(brain_folder, tmp_path,
                                                                   capsys, command, mode,
                                                                   colours):
    """export's and share's help say --mode is refused for a spiking brain's rates: both
    modes are, in one line naming what the mode colours (--mode abs was said to colour "a
    language model's signed activation")."""
    from cli_checks import cli_run, one_error_line

    from flyviz.commands._options import COLOUR_MODE_HELP

    assert "--mode is refused there" in COLOUR_MODE_HELP
    rec = tmp_path / "spk.flyrec"
    record_run(SpikingModel.load(str(brain_folder)), Stimulus(excite="superclass:sensory"),
               BinSettings(bins=2)).save(rec)
    out = tmp_path / ("m.gif" if command == "export" else "p.html")
    argv = ["--recording", str(rec)] if command == "export" else [str(rec)]
    code, _, err = cli_run(capsys, command, *argv, "--out", str(out), "--mode", mode)
    one_error_line(code, err, f"--mode {mode} colours a language model's {colours}; "
                   "spk.flyrec is a spiking brain recording", "leave --mode out")
    assert not out.exists()


def test_a_spiking_runs_figures_speak_of_bins_and_rates(brain_folder, tmp_path, capsys):
    """A one-bin run sorted by similarity is refused in bins (it said "needs at least two
    tokens"), and a cell-type figure of |rate| is labelled as rates in Hz on the rates'
    colours (its colour bar said "mean |x|")."""
    pytest.importorskip("matplotlib")
    from cli_checks import cli_run, one_error_line
    from matplotlib.figure import Figure

    from flyviz import figures

    model = SpikingModel.load(str(brain_folder))
    one = tmp_path / "spk_1bin.flyrec"
    record_run(model, Stimulus(excite="superclass:sensory"), BinSettings(bins=1)).save(one)
    code, _, err = cli_run(capsys, "figure", str(one), "--kind", "raster", "--sort",
                           "similarity", "--out", str(tmp_path / "r.png"))
    one_error_line(code, err, "a similarity order needs at least two bins of states",
                   "--sort anatomy")
    assert "tokens" not in err
    recording = record_run(model, Stimulus(excite="superclass:sensory"), BinSettings(bins=3))
    for quantity in ("abs", "mean"):
        figure = Figure(figsize=(6.4, 4.8), dpi=100)
        figures._celltypes(figure, recording, model,
                           figures.FigureOptions(kind="celltypes", size=(640, 480),
                                                 quantity=quantity).checked())
        labels = [a.get_ylabel() for a in figure.axes if a.get_ylabel()]
        assert labels == ["mean firing rate in the bin (Hz)"], (quantity, labels)
