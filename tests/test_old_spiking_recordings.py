"""Spiking recordings written by older flyviz versions open everywhere they are read.

The spiking writer has added keys to a recording's metadata over time: the run's length
(``spiking.run_ticks``), the synapse weight, when the input stopped and what kept firing
after it (``input_until_s``, ``after_input``: runaway activity), the files the run read, and
the spikes themselves (format 1.4). The oldest recordings lack them all, and a recording
edited down may lack even the bin length and the stimulus. Each reader (the library call
the app and the hosts load with, ``flyviz convert``, ``figure``, ``share``) takes such a
recording with the defaults the kind documents (bins of 10 ms, one trial), never a
traceback.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from flyviz.cli import main
from flyviz.record.recording import Recording

pytest.importorskip("pyarrow")
pytestmark = pytest.mark.usefixtures("spiking_kernels")

#: What the first spiking writer kept (flyviz simulate --record, before format 1.4): the
#: keys the current writer adds are not among them.
FIRST_WRITER_KEYS = ("brain", "excite", "rate", "silence", "seed", "bins", "bin_ms", "trials",
                     "excited", "silenced", "bin_spikes")
#: The spike tensors of format 1.4.
SPIKE_TENSORS = ("spike_tick", "spike_neuron", "spike_trial", "spike_frame_end")


@pytest.fixture(scope="module")
def new_recording(tmp_path_factory) -> Path:
    """A recording of today's writer, with every key: 40 ms in bins of 10 ms, the input
    stopping at 20 ms."""
    from test_spiking_kind import write_brain

    folder = tmp_path_factory.mktemp("old-spiking")
    brain = write_brain(folder / "brain")
    rec = folder / "new.flyrec"
    assert main(["simulate", str(brain), "--excite", "superclass:sensory", "--duration", "40ms",
                 "--input-until", "20ms", "--record", str(rec)]) == 0
    meta = Recording.load(rec).metadata
    # What the test takes away is there to take away.
    assert {"run_ticks", "w_syn", "input_until_s", "after_input"} <= set(meta["spiking"])
    assert meta["state_units"] == "Hz"
    return rec


def _older(rec: Path, out: Path, keep: tuple[str, ...] | None, *,
           state_units: bool = True) -> Path:
    """``rec`` as an older writer wrote it: format 1.3 (no spike tensors), its ``spiking``
    table holding only ``keep`` (``None``: no table at all), sealed as that writer did."""
    from test_recording_format import parts, rewrite

    header, _ = parts(rec)
    metadata = json.loads(header["__metadata__"]["metadata"])
    if keep is None:
        del metadata["spiking"]
    else:
        metadata["spiking"] = {k: v for k, v in metadata["spiking"].items() if k in keep}
    if not state_units:
        del metadata["state_units"]
    return rewrite(rec, out, reseal=True,
                   meta={"format_version": "1.3", "spike_tick_ms": None,
                         "metadata": json.dumps(metadata)},
                   tensors={name: None for name in SPIKE_TENSORS})


OLDER = {
    "first writer": dict(keep=FIRST_WRITER_KEYS),
    "brain only": dict(keep=("brain",), state_units=False),
}


@pytest.fixture(params=list(OLDER))
def old_recording(new_recording, tmp_path, request) -> Path:
    path = _older(new_recording, tmp_path / "old.flyrec", **OLDER[request.param])
    loaded = Recording.load(path)
    assert loaded.spikes is None and "run_ticks" not in loaded.metadata.get("spiking", {})
    return path


def test_the_library_call_that_loads_it_shows_its_bins(old_recording):
    """What the app and the hosts call (BrainSource.open, the kind's captions): bins of the
    default 10 ms where the recording says no length."""
    from flyviz.brain_source import BrainSource
    from flyviz.kinds import kind_of_recording
    from flyviz.kinds.spiking import SPIKING

    source = BrainSource.open(old_recording)
    recording = source.recording
    kind = kind_of_recording(recording)
    assert kind == SPIKING and source.tokens == 4
    assert source.time_axis.step == 10.0
    assert kind.counter(recording, 3).startswith("bin 3 of 0–3 · 40 ms")
    assert kind.run_summary(recording).endswith("0.04 s")
    assert kind.state_step(recording, 0) == pytest.approx(100.0)
    assert "flyviz simulate" in kind.replay_refusal(recording)


@pytest.mark.parametrize("fmt", ["npz", "nwb"])
def test_convert_writes_it(old_recording, tmp_path, fmt, capsys):
    pytest.importorskip({"npz": "numpy", "nwb": "pynwb"}[fmt])
    out = tmp_path / f"old.{fmt}"
    assert main(["convert", str(old_recording), str(out)]) == 0, capsys.readouterr().err
    recording = Recording.load(old_recording)
    if fmt == "npz":
        with np.load(out, allow_pickle=False) as data:
            np.testing.assert_array_equal(data["state"], recording.states())
            assert json.loads(str(data["attributes"]))["state_units"] == "Hz"
        return
    import pynwb

    with pynwb.NWBHDF5IO(str(out), "r") as io:
        nwb = io.read()
        series = nwb.processing["flyviz"]["Fluorescence"]["states"]
        assert series.unit == "Hz" and series.rate == pytest.approx(100.0)
        assert len(nwb.intervals["bins"]) == 4 and nwb.units is None


@pytest.mark.parametrize("figure", ["raster", "brain"])
def test_figure_draws_it(old_recording, tmp_path, figure, capsys):
    pytest.importorskip("matplotlib")
    out = tmp_path / f"{figure}.png"
    assert main(["figure", str(old_recording), "--kind", figure, "--out", str(out)]) == 0, \
        capsys.readouterr().err
    assert out.stat().st_size > 0


def test_share_writes_its_page(old_recording, tmp_path, capsys):
    out = tmp_path / "old.html"
    assert main(["share", str(old_recording), "--out", str(out)]) == 0, capsys.readouterr().err
    assert "bin 3" in out.read_text(encoding="utf-8")


def test_one_that_names_no_brain_is_one_line_where_a_brain_is_needed(new_recording, tmp_path,
                                                                      capsys):
    """Without even its ``spiking`` table, the recording names no brain: the app's library
    call shows it on a generic layout (with a note), share draws it so, and convert and
    figure, which need the neurons' labels, say so in one line (exit 2)."""
    from flyviz.brain_source import BrainSource

    old = _older(new_recording, tmp_path / "old.flyrec", None, state_units=False)
    with pytest.warns(UserWarning, match="names no brain"):
        assert BrainSource.open(old).tokens == 4
    assert main(["share", str(old), "--out", str(tmp_path / "p.html")]) == 0
    capsys.readouterr()
    for argv in (["convert", str(old), str(tmp_path / "o.npz")],
                 ["figure", str(old), "--kind", "raster", "--out", str(tmp_path / "r.png")]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "names no brain" in err[0], err
    assert main(["convert", str(old), str(tmp_path / "o.npz"), "--no-labels"]) == 0


@pytest.mark.gui
@pytest.mark.slow
def test_the_window_opens_it_by_bin(new_recording, qtbot, tmp_path):
    pytest.importorskip("pytestqt")
    pytest.importorskip("vispy")
    from app_conftest import make_window

    from flyviz.app._testing import make_app_checkpoint

    win = make_window(qtbot, make_app_checkpoint(tmp_path / "model"), tmp_path)
    try:
        for name, how in OLDER.items():
            old = _older(new_recording, tmp_path / f"{name}.flyrec", **how)
            win.open_recording(old)
            assert len(win.state.recording) == 4 and win.state.neurons == 80, name
            win.state.index = 3
            win.refresh_panels()
            assert win.timeline.counter.text().startswith("bin 3 / 3 · 40 ms"), name
            assert not win.docks["stimulus"].isHidden()
    finally:
        win.close()
