"""Hostile input, part 4 (issue 41): the spiking brain's tables, the library's spiking
arguments, outputs over the files a model or brain folder is read from, recordings resealed
with a spike table their run could not have made, and the share page's template. Each case
is one ``flyviz: error:`` line and exit 2 on the command line (or one flyviz exception in the
library), nothing damaged and nothing left behind; the valid neighbours give the right
output.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from cli_checks import cli_run, one_error_line

from flyviz import spiking
from flyviz.errors import FlyvizError, InputError

pytest.importorskip("pyarrow")

pytestmark = pytest.mark.usefixtures("spiking_kernels")

IDS = np.array([720575940600000011, 720575940600000022, 720575940600000033,
                720575940600000044], dtype=np.int64)


def write_brain(folder: Path, completeness: str | None = None, **changes: object) -> Path:
    """Four neurons in the authors' layout (0 drives 1 and 2, 2 inhibits 3), with FlyWire's
    coordinates and classification; ``changes`` replace connectivity columns and
    ``completeness`` the completeness CSV's text."""
    folder.mkdir(parents=True, exist_ok=True)
    if completeness is None:
        pd.DataFrame({"Completed": True}, index=pd.Index(IDS)).to_csv(
            folder / "Completeness_783.csv")
    else:
        (folder / "Completeness_783.csv").write_text(completeness)
    pre, post, signed = [0, 0, 2, 1], [1, 2, 3, 3], [1500, 1500, -40, 60]
    table = {"Presynaptic_ID": IDS[pre], "Postsynaptic_ID": IDS[post],
             "Presynaptic_Index": pre, "Postsynaptic_Index": post,
             "Connectivity": np.abs(signed), "Excitatory": np.sign(signed),
             "Excitatory x Connectivity": signed}
    table.update(changes)  # type: ignore[arg-type]
    pd.DataFrame(table).to_parquet(folder / "Connectivity_783.parquet")
    pd.DataFrame({"root_id": IDS, "position": ["[1 2 3]", "[4 5 6]", "[7 8 9]", "[1 1 1]"]}
                 ).to_csv(folder / "coordinates.csv", index=False)
    pd.DataFrame({"root_id": IDS, "super_class": ["sensory", "central", "central", "motor"],
                  "cell_type": ["GRN", "G2N", "G2N", "MN9"]}).to_csv(
        folder / "classification.csv", index=False)
    return folder


def digests(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` and its SHA-256 (what "nothing damaged, nothing left
    behind" compares)."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def brain(tmp_path: Path) -> Path:
    return write_brain(tmp_path / "brain")


# ------------------------------------------------------------------ the brain's tables


def _completeness(*ids: str) -> str:
    return ",Completed\n" + "".join(f"{i},True\n" for i in ids)


@pytest.mark.parametrize("completeness, expected", [
    (_completeness(str(IDS[0]), "abc", str(IDS[2]), str(IDS[3])),
     ["Completeness_783.csv", "'abc' (row 1)", "not a root id"]),
    (_completeness(str(IDS[0]), "", str(IDS[2]), str(IDS[3])),
     ["Completeness_783.csv", "'' (row 1)", "not a root id"]),
    (_completeness(str(IDS[0]), "72057594060000002211", str(IDS[2]), str(IDS[3])),
     ["'72057594060000002211' (row 1)", "not a root id"]),
    (_completeness(str(IDS[0]), str(2**64 - 1), str(IDS[2]), str(IDS[3])),
     [f"'{2**64 - 1}' (row 1)", "not a root id"]),
    (_completeness(str(IDS[0]), "7.2e17", str(IDS[2]), str(IDS[3])),
     ["'7.2e17' (row 1)", "not a root id"]),
])
def test_a_completeness_table_of_bad_root_ids_is_one_line(capsys, tmp_path, completeness,
                                                          expected):
    folder = write_brain(tmp_path / "brain", completeness)
    before = digests(tmp_path)
    code, _, err = cli_run(capsys, "simulate", str(folder), "--excite", "all", "--out",
                           str(tmp_path / "x.parquet"))
    one_error_line(code, err, *expected)
    assert "Warning" not in err and digests(tmp_path) == before


@pytest.mark.parametrize("changes, expected", [
    ({"Excitatory x Connectivity": [True, True, False, True]},
     ["Connectivity_783.parquet", "Excitatory x Connectivity holds booleans"]),
    ({"Excitatory x Connectivity": ["1500", "1500", "x", "60"]},
     ["Connectivity_783.parquet", "Excitatory x Connectivity 'x' (row 2)", "not a number"]),
    ({"Excitatory x Connectivity": [1500.0, np.inf, -40.0, 60.0]},
     ["Excitatory x Connectivity inf (row 1)"]),
    ({"Presynaptic_ID": ["a", "b", "c", "d"]},
     ["Presynaptic_ID 'a' (row 0)", "not a root id"]),
    ({"Postsynaptic_ID": np.array([IDS[1], 2**64 - 1, IDS[3], IDS[3]], np.uint64)},
     [f"Postsynaptic_ID {2**64 - 1} (row 1)", "not a root id"]),
    ({"Presynaptic_Index": [True, True, False, True]},
     ["Presynaptic_Index must hold whole numbers, not bool"]),
    ({"Presynaptic_Index": [0.0, 0.0, 2.0, 1.0]},
     ["Presynaptic_Index must hold whole numbers, not float64"]),
])
def test_a_connectivity_table_of_bad_dtypes_is_one_line(capsys, tmp_path, changes, expected):
    folder = write_brain(tmp_path / "brain", **changes)
    before = digests(tmp_path)
    code, _, err = cli_run(capsys, "simulate", str(folder), "--excite", "all", "--out",
                           str(tmp_path / "x.parquet"))
    one_error_line(code, err, *expected)
    assert digests(tmp_path) == before


@pytest.mark.parametrize("name, text, expected", [
    ("coordinates.csv", f"root_id,position\n{IDS[0]},[1 2 3]\n{IDS[1]},[abc 1 2]\n",
     ["coordinates.csv", "(row 1)", "three finite numbers"]),
    ("coordinates.csv", "root_id,position\nabc,[1 2 3]\n",
     ["coordinates.csv: root_id 'abc' (row 0)"]),
    ("coordinates.csv", f"root_id,position\n{IDS[0]},[1 nan 3]\n",
     ["coordinates.csv", "(row 0)", "three finite numbers"]),
    ("classification.csv", f"root_id,super_class\n{IDS[0]},a\nabc,b\n",
     ["classification.csv: root_id 'abc' (row 1)"]),
    ("classification.csv", f"root_id,super_class\n{IDS[0]},a\n,b\n",
     ["classification.csv: root_id '' (row 1)"]),
])
def test_bad_anatomy_tables_are_one_line(capsys, brain, name, text, expected):
    (brain / name).write_text(text)
    code, _, err = cli_run(capsys, "simulate", str(brain), "--excite", "all", "--out",
                           str(brain.parent / "x.parquet"))
    one_error_line(code, err, *expected)
    assert not (brain.parent / "x.parquet").exists()


@pytest.mark.parametrize("table, expected", [
    ({"t": [0.01, 1e300], "flywire_id": [IDS[0], IDS[0]]}, ["t 1e+300 (row 1)", "out of range"]),
    ({"t": [0.01, -1.0], "flywire_id": [IDS[0], IDS[0]]}, ["t -1.0 (row 1)"]),
    ({"t": ["0.01", "soon"], "flywire_id": [IDS[0], IDS[0]]}, ["t 'soon' (row 1)"]),
    ({"t": [True, False], "flywire_id": [IDS[0], IDS[0]]},
     {".csv": ["t 'True' (row 0) is not a number"], ".parquet": ["column t holds booleans"]}),
    ({"t": [0.01, 0.02], "flywire_id": [str(IDS[0]), "x"]}, ["flywire_id 'x' (row 1)"]),
    ({"t": [0.01, 0.02], "flywire_id": [str(IDS[0]), "99"]}, ["flywire_id 99 is not a neuron"]),
])
@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_bad_input_spikes_are_one_line(capsys, brain, table, expected, suffix):
    events = brain.parent / f"in{suffix}"
    frame = pd.DataFrame(table)
    if suffix == ".csv":
        frame.to_csv(events, index=False)
    else:
        frame.to_parquet(events)
    code, _, err = cli_run(capsys, "simulate", str(brain), "--input-spikes", str(events),
                           "--duration", "20ms", "--out", str(brain.parent / "x.parquet"))
    if isinstance(expected, dict):
        expected = expected[suffix]
    one_error_line(code, err, events.name, *expected)
    assert "Warning" not in err and not (brain.parent / "x.parquet").exists()


def test_the_valid_tables_still_load_with_their_labels_and_positions(brain):
    loaded = spiking.load_brain(brain)
    assert loaded.root_ids.tolist() == IDS.tolist()
    assert loaded.counts.tolist() == [1500.0, 1500.0, 60.0, -40.0]
    assert loaded.positions is not None and loaded.positions[1].tolist() == [4, 5, 6]
    assert loaded.superclass == ["sensory", "central", "central", "motor"]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="this system has no FIFOs")
@pytest.mark.parametrize("member", ["Completeness_783.csv", "Connectivity_783.parquet",
                                    "coordinates.csv", "classification.csv", "ids.txt",
                                    "in.csv"])
def test_a_fifo_in_place_of_a_brain_table_is_named_not_waited_on(capsys, brain, member):
    fifo = brain / member
    fifo.unlink(missing_ok=True)
    os.mkfifo(fifo)
    argv = ["simulate", str(brain), "--out", str(brain.parent / "x.parquet"),
            "--duration", "20ms"]
    argv += {"ids.txt": ["--excite-file", str(fifo)],
             "in.csv": ["--input-spikes", str(fifo)]}.get(member, ["--excite", "all"])
    code, _, err = cli_run(capsys, *argv)
    one_error_line(code, err, member, "FIFO, not a regular file")


# ------------------------------------------------------------------ the library's arguments
@pytest.mark.parametrize("kwargs, expected", [
    ({"excite": [-1]}, "excite names neuron -1"),
    ({"excite": [4]}, "excite names neuron 4, outside the brain's 0..3"),
    ({"excite": np.ones(3, bool)}, "a mask of 3 entries"),
    ({"excite": ["a"]}, "must be model indices"),
    ({"silence": [9]}, "silence names neuron 9"),
    ({"input_events": (np.array([1]), np.array([7]))}, "input_events name neuron 7"),
    ({"input_events": (np.array([-1]), np.array([0]))}, "input_events hold tick -1"),
    ({"input_events": (np.array([1.5]), np.array([0]))}, "two 1-D arrays of whole numbers"),
])
def test_the_library_simulate_checks_its_arguments(brain, kwargs, expected):
    loaded = spiking.load_brain(brain)
    with pytest.raises(InputError, match=expected.replace("(", r"\(").replace(")", r"\)")):
        spiking.simulate(loaded, duration_s=0.01, **kwargs)
    with pytest.raises(InputError):
        spiking.SpikingSimulation(loaded, **kwargs)


def test_a_boolean_mask_excites_every_neuron_it_marks(brain):
    loaded = spiking.load_brain(brain)
    by_mask = spiking.simulate(loaded, excite=np.array([True, False, False, True]),
                               duration_s=0.05, rate=200.0, seed=3)
    by_index = spiking.simulate(loaded, excite=[0, 3], duration_s=0.05, rate=200.0, seed=3)
    assert np.array_equal(by_mask.tick, by_index.tick)
    assert np.array_equal(by_mask.neuron, by_index.neuron)
    assert {0, 3} <= set(by_mask.neuron.tolist())


def test_advancing_past_the_longest_run_is_refused_at_once(brain):
    sim = spiking.SpikingSimulation(spiking.load_brain(brain), excite=[0])
    with pytest.raises(InputError, match="ticks to advance"):
        sim.advance(10**13)
    assert sim.tick == 0
    with pytest.raises(InputError, match="ticks to advance"):
        sim.advance(-1)


def _flyviz_error_line(call) -> FlyvizError:
    with pytest.raises(FlyvizError) as info:
        call()
    assert "\n" not in str(info.value)
    return info.value


# ------------------------------------------------------------------ outputs over a folder's files
@pytest.fixture
def model_folder(tmp_path: Path, tiny_checkpoint) -> Path:
    from flyviz.model.writers import write_fly_llm_hf

    folder = tmp_path / "M"
    write_fly_llm_hf(tiny_checkpoint, folder)
    return folder


@pytest.mark.parametrize("argv, member", [
    (["trace", "{M}", "--prompt", "the cat", "--graph", "{M}/config.json"], "config.json"),
    (["generate", "{M}", "--prompt", "the cat", "--record", "{M}/config.json"], "config.json"),
    (["generate", "{M}", "--prompt", "the cat", "--record", "{M}/model.safetensors"],
     "model.safetensors"),
])
def test_an_output_over_a_file_of_the_model_folder_is_refused(capsys, model_folder, argv,
                                                               member):
    before = digests(model_folder.parent)
    code, _, err = cli_run(capsys, *[a.format(M=model_folder) for a in argv])
    one_error_line(code, err, member, "a file the folder of")
    assert digests(model_folder.parent) == before


@pytest.mark.parametrize("member", ["Connectivity_783.parquet", "Completeness_783.csv",
                                    "coordinates.csv", "classification.csv"])
def test_an_output_over_a_file_of_the_brain_folder_is_refused(capsys, brain, member):
    before = digests(brain.parent)
    code, _, err = cli_run(capsys, "simulate", str(brain), "--excite", "all", "--duration",
                           "20ms", "--out", str(brain / member))
    one_error_line(code, err, member, "a file the folder of BRAIN")
    assert digests(brain.parent) == before


def test_an_output_through_a_link_to_the_brain_folder_is_refused(capsys, brain, tmp_path):
    link = tmp_path / "link"
    link.symlink_to(brain)
    before = digests(brain)
    code, _, err = cli_run(capsys, "simulate", str(brain), "--excite", "all", "--out",
                           str(link / "Connectivity_783.parquet"))
    one_error_line(code, err, "a file the folder of BRAIN")
    assert digests(brain) == before


def test_a_new_file_in_the_brain_folder_is_still_written(capsys, brain):
    code, _, err = cli_run(capsys, "simulate", str(brain), "--excite", "all", "--duration",
                           "20ms", "--out", str(brain / "spikes.parquet"))
    assert code == 0, err
    assert set(pd.read_parquet(brain / "spikes.parquet").columns) >= {"t", "flywire_id"}


# ------------------------------------------------------------------ the share page's template
_MARKS = "{{title}} /*{{css}}*/ {{data}} {{arrays}} /*{{js}}*/"


def _page_parts(page: str) -> tuple[str, dict, list[str]]:
    import json
    import re

    title = re.search(r"<title>(.*?)</title>", page, re.S)
    data = re.findall(r'<script type="application/json" id="flyviz-data">(.*?)</script>', page,
                      re.S)
    arrays = re.findall(r'<script type="application/octet-stream" data-name="([^"]*)">', page)
    assert title is not None and len(data) == 1
    return title.group(1), json.loads(data[0]), arrays


def test_marks_inside_the_data_stay_text_where_they_were_put():
    import html

    from flyviz.export.share import _resource, render_page

    header = {"title": _MARKS, "prompt": _MARKS, "tokens": [{"text": _MARKS}]}
    page = render_page(header, {"positions": "QUJD", "layer-0": "REVG"})
    title, data, arrays = _page_parts(page)
    assert html.unescape(title) == _MARKS
    assert data == header                       # the data, whole, in its one place
    assert arrays == ["positions", "layer-0"]   # the arrays once, in theirs
    script = _resource("page.js").splitlines()[3]
    assert page.count(script) == 1              # the script once
    assert page.count(_resource("page.css").splitlines()[1]) == 1


def test_share_with_marks_in_its_title_and_prompt_writes_one_page(capsys, tmp_path,
                                                                  model_folder):
    record = tmp_path / "marks.flyrec"
    code, _, err = cli_run(capsys, "generate", str(model_folder), "--prompt", _MARKS,
                           "--max-new-tokens", "1", "--record", str(record))
    assert code == 0, err
    out = tmp_path / "page.html"
    code, _, err = cli_run(capsys, "share", str(record), "--out", str(out), "--title",
                           "{{data}} /*{{js}}*/")
    assert code == 0, err
    title, data, _arrays = _page_parts(out.read_text(encoding="utf-8"))
    assert title == "{{data}} /*{{js}}*/" and data["title"] == "{{data}} /*{{js}}*/"
    assert _MARKS.split()[0] in "".join(t["text"] for t in data["tokens"])


# ------------------------------------------------------------------ resealed spiking recordings
@pytest.fixture(scope="module")
def spiking_recording(tmp_path_factory) -> Path:
    """A 30 ms, 3-trial run of the four-neuron brain in 10 ms bins, recorded."""
    from flyviz.cli import main

    root = tmp_path_factory.mktemp("resealed")
    folder = write_brain(root / "brain")
    record = root / "run.flyrec"
    assert main(["simulate", str(folder), "--excite", "all", "--rate", "400", "--duration",
                 "30ms", "--trials", "3", "--record", str(record)]) == 0
    return record


def _resealed(record: Path, out: Path, *, spiking: dict | None = None,
              header: dict | None = None, **tensors) -> Path:
    import json

    from safetensors.numpy import load_file
    from test_recording_format import parts, rewrite

    meta = json.loads(parts(record)[0]["__metadata__"]["metadata"])
    meta["spiking"].update(spiking or {})
    arrays = load_file(str(record))
    changed = {name: change(arrays[name].copy()) for name, change in tensors.items()}
    if "states" in changed:                 # the rows' checksums written again with them
        from flyviz.record.flyrec_codec import _crc_rows

        changed["state_crc32"] = _crc_rows(changed["states"])
    return rewrite(record, out, meta={"metadata": json.dumps(meta), **(header or {})},
                   tensors=changed, reseal=True)


def _set(index: int, value) -> object:
    def change(array):
        array[index] = value
        return array
    return change


def _first_spike_moved_to_bin(k: int):
    def change(ticks):
        ticks[0] = k * 100 + 5
        return ticks
    return change


RESEALED = {
    "a spike in trial 99": (dict(spike_trial=_set(0, 99)), "trial 99 of a 3-trial run"),
    "a tick of 10^9": (dict(spike_tick=_set(-1, 10**9)), "tick 1,000,000,000"),
    "a spike outside its bin": (dict(spike_tick=_first_spike_moved_to_bin(2)),
                                "is kept in bin 0, whose ticks are 0..99"),
    "a tick of 1 ms": (dict(header={"spike_tick_ms": "1.0"}), "a run steps by 0.1 ms"),
    "a tick of 1e-300 ms": (dict(header={"spike_tick_ms": "1e-300"}), "a run steps by 0.1 ms"),
    "a rate of -500 Hz": (dict(states=lambda s: s - 500), "rates are not finite numbers"),
    "a rate of 3e38 Hz": (dict(states=_set((1, 0), 3e38)), "rates are not finite numbers"),
    "another rate": (dict(states=_set((1, 0), 7.0)), "but its spikes make"),
    "counts all zero": (dict(spiking={"bin_spikes": [0, 0, 0]}), "bin 0 counts 0 spikes"),
    "counts of another run": (dict(spiking={"bin_spikes": [1, 2]}), "spikes of 2 bins"),
    "a bin of 1e-9 ms": (dict(spiking={"bin_ms": 1e-9}), "not a whole number of the run's"),
    "10^9 trials": (dict(spiking={"trials": 10**9}), "trial count (spiking.trials) is"),
    "a run longer than its bins": (dict(spiking={"run_ticks": 301}), "does not fill its 3 bins"),
    "a run of no ticks": (dict(spiking={"run_ticks": True}), "does not fill its 3 bins"),
    "a spike after the run": (dict(spiking={"run_ticks": 201}), "after the run's end"),
}


@pytest.mark.parametrize("case", sorted(RESEALED))
def test_a_resealed_recording_its_run_could_not_make_is_one_line(capsys, tmp_path,
                                                                  spiking_recording, case):
    change, expected = RESEALED[case]
    bad = _resealed(spiking_recording, tmp_path / "bad.flyrec", **change)
    before = digests(tmp_path)
    code, _, err = cli_run(capsys, "convert", str(bad), str(tmp_path / "x.npz"))
    one_error_line(code, err, "bad.flyrec is damaged", expected)
    assert digests(tmp_path) == before


#: Every command that reads a recording, with the arguments that make it read one
#: (``{rec}``) and write into ``{tmp}``. The test below fails for a reader that does not go
#: through the shared recording reader's checks.
RECORDING_READERS = {
    "convert npz": ["convert", "{rec}", "{tmp}/x.npz"],
    "convert nwb": ["convert", "{rec}", "{tmp}/x.nwb"],
    "figure": ["figure", "{rec}", "--kind", "raster", "--out", "{tmp}/r.png"],
    "share": ["share", "{rec}", "--out", "{tmp}/p.html"],
    "export": ["export", "--recording", "{rec}", "--out", "{tmp}/m.gif"],
    "replay": ["replay", "{rec}"],
}


@pytest.mark.parametrize("reader", sorted(RECORDING_READERS))
def test_every_reader_of_a_recording_refuses_the_same_resealed_run(capsys, tmp_path,
                                                                    spiking_recording, reader):
    bad = _resealed(spiking_recording, tmp_path / "bad.flyrec", spike_trial=_set(0, 99))
    before = digests(tmp_path)
    argv = [a.format(rec=bad, tmp=tmp_path) for a in RECORDING_READERS[reader]]
    code, _, err = cli_run(capsys, *argv)
    one_error_line(code, err, "bad.flyrec is damaged", "trial 99 of a 3-trial run")
    assert digests(tmp_path) == before


def test_the_library_reader_refuses_it_too(tmp_path, spiking_recording):
    from flyviz.errors import RecordingError
    from flyviz.record.recording import Recording

    bad = _resealed(spiking_recording, tmp_path / "bad.flyrec", spike_trial=_set(0, 99))
    with pytest.raises(RecordingError, match="trial 99 of a 3-trial run"):
        Recording.load(bad)
    good = Recording.load(spiking_recording)
    assert good.spikes is not None and len(good) == 3


# ------------------------------------------------------------------ valid runs, right pictures
def test_a_recording_names_its_brain_by_an_absolute_path(capsys, tmp_path, monkeypatch):
    """Run from one folder with a relative BRAIN; converted from another folder that holds a
    brain of the same name but other labels, the labels are those of the brain it ran on."""
    import json

    from test_recording_format import parts

    here, there = tmp_path / "here", tmp_path / "there"
    write_brain(here / "brain")
    other = write_brain(there / "brain")
    pd.DataFrame({"root_id": IDS, "super_class": ["wrong"] * 4, "cell_type": ["X"] * 4}
                 ).to_csv(other / "classification.csv", index=False)
    monkeypatch.chdir(here)
    code, _, err = cli_run(capsys, "simulate", "brain", "--excite", "all", "--duration", "20ms",
                           "--record", "run.flyrec")
    assert code == 0, err
    meta = json.loads(parts(here / "run.flyrec")[0]["__metadata__"]["metadata"])
    assert meta["spiking"]["brain"] == str((here / "brain").resolve())
    monkeypatch.chdir(there)
    code, _, err = cli_run(capsys, "convert", str(here / "run.flyrec"), "run.npz")
    assert code == 0, err
    with np.load(there / "run.npz", allow_pickle=False) as data:
        labels = {k: data[k].tolist() for k in data.files if "class" in k}
    assert labels and all("wrong" not in v for v in labels.values()), labels


def test_share_of_a_spiking_run_draws_the_brains_somas(capsys, tmp_path, brain):
    import base64
    import re
    import zlib

    record = tmp_path / "run.flyrec"
    assert cli_run(capsys, "simulate", str(brain), "--excite", "all", "--duration", "20ms",
                   "--record", str(record))[0] == 0
    out = tmp_path / "page.html"
    code, _, err = cli_run(capsys, "share", str(record), "--out", str(out))
    assert code == 0, err
    assert "names no" not in err and "generic" not in err, err
    page = out.read_text(encoding="utf-8")
    _title, header, _arrays = _page_parts(page)
    blob = re.search(r'data-name="positions">([^<]*)<', page)
    assert blob is not None and header["shown"] == 4
    drawn = np.frombuffer(zlib.decompress(base64.b64decode(blob.group(1))), np.float16)
    drawn = drawn.reshape(-1, 3).astype(np.float64) + np.asarray(header["centre"])
    model = spiking.load_brain(brain)
    from flyviz.kinds.spiking import SpikingModel

    truth = SpikingModel(model, str(brain)).drawing_anatomy().positions_um()
    assert np.allclose(drawn, truth, atol=0.05)
    somas = np.array([[1, 2, 3], [4, 5, 6], [7, 8, 9], [1, 1, 1]], np.float64)
    # the somas' shape (their distances, up to one scale), not a ball's
    d_drawn = np.linalg.norm(drawn[:, None] - drawn[None], axis=-1)
    d_soma = np.linalg.norm(somas[:, None] - somas[None], axis=-1)
    assert np.allclose(d_drawn / d_drawn.max(), d_soma / d_soma.max(), atol=0.01)


@pytest.mark.parametrize("bin_ms, duration, bins, last_ms", [("7", "50ms", 8, 1.0),
                                                            ("5", "50ms", 10, 5.0),
                                                            ("0.3", "10ms", 34, 0.1)])
def test_a_short_last_bins_rate_is_over_its_own_length(capsys, tmp_path, brain, bin_ms,
                                                       duration, bins, last_ms):
    """--bin 7 over 50 ms: seven bins of 7 ms and one of 1 ms, whose rate is its spikes over
    1 ms (not 7: seven times too low) and the trials."""
    from flyviz.record.recording import Recording

    record = tmp_path / "run.flyrec"
    code, _, err = cli_run(capsys, "simulate", str(brain), "--excite", "all", "--rate", "900",
                           "--trials", "2", "--duration", duration, "--bin", bin_ms,
                           "--record", str(record))
    assert code == 0, err
    rec = Recording.load(record)
    assert len(rec) == bins
    for i in range(len(rec)):
        length_s = (last_ms if i == bins - 1 else float(bin_ms)) / 1000.0
        _t, neuron, _tr = rec.spikes.arrays(i, i + 1)
        assert np.allclose(rec.state(i), np.bincount(neuron, minlength=4) / (2 * length_s),
                           rtol=1e-6)
    assert rec.spikes.arrays(bins - 1, bins)[0].size > 0     # the short bin has spikes
    # ... and the run says so, once, only when the last bin is short.
    note = f"run.flyrec's last bin is {last_ms:g} ms"
    assert err.count(note) == (last_ms != float(bin_ms)), err


def test_a_brain_folder_whose_name_is_not_utf8_is_a_path(capsys, tmp_path):
    folder = Path(os.fsdecode(os.fsencode(str(tmp_path)) + b"/brain-\xff"))
    write_brain(tmp_path / "brain").rename(folder)    # pyarrow's writer takes UTF-8 names only
    out = tmp_path / "x.parquet"
    code, _, err = cli_run(capsys, "simulate", str(folder), "--excite", "all", "--duration",
                           "20ms", "--out", str(out))
    assert code == 0, err
    assert len(pd.read_parquet(out)) > 0
    record = tmp_path / "run.flyrec"
    assert cli_run(capsys, "simulate", str(folder), "--excite", "all", "--duration", "20ms",
                   "--record", str(record))[0] == 0
    code, _, err = cli_run(capsys, "convert", str(record), str(tmp_path / "run.npz"))
    assert code == 0 and "does not load" not in err, err


# ------------------------------------------------------------------ full disks and long names
def _no_space(*args, **kwargs):
    raise OSError(28, "No space left on device")


def test_a_full_disk_leaves_no_part_of_the_spike_table(capsys, tmp_path, brain, monkeypatch):
    def half_then_full(self, handle, *args, **kwargs):
        handle.write(b"PAR1" + b"\0" * 40960)       # what was written before the disk filled
        _no_space()

    monkeypatch.setattr(pd.DataFrame, "to_parquet", half_then_full)
    out = tmp_path / "out"
    out.mkdir()
    code, _, err = cli_run(capsys, "simulate", str(brain), "--excite", "all", "--duration",
                           "20ms", "--out", str(out / "x.parquet"))
    one_error_line(code, err, "x.parquet", "no space left")
    assert list(out.iterdir()) == []


def test_a_run_with_two_outputs_says_which_was_written(capsys, tmp_path, brain, monkeypatch):
    import flyviz.model.safetensors_io as safetensors_io

    monkeypatch.setattr(safetensors_io, "save_safetensors", _no_space)
    out, record = tmp_path / "x.parquet", tmp_path / "x.flyrec"
    code, _, err = cli_run(capsys, "simulate", str(brain), "--excite", "all", "--duration",
                           "20ms", "--out", str(out), "--record", str(record))
    one_error_line(code, err, f"--out {out} was written, --record {record} was not")
    assert len(pd.read_parquet(out)) > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["brain", "x.parquet"]


def test_a_long_output_name_is_refused_before_the_run_and_the_longest_taken_is_written(
        capsys, tmp_path, brain, monkeypatch):
    from flyviz.fileio import TEMP_NAME_ROOM, name_max

    limit = name_max(tmp_path)
    room = TEMP_NAME_ROOM + len(".parquet")

    def never(*args, **kwargs):
        raise AssertionError("the run started")

    for extra in (0, room):                           # 255 bytes, and the first refused one
        name = "s" * (limit - extra - len(".parquet") + 1) + ".parquet"
        with monkeypatch.context() as patch:
            patch.setattr(spiking, "simulate", never)
            code, _, err = cli_run(capsys, "simulate", str(brain), "--excite", "all",
                                   "--duration", "20ms", "--out", str(tmp_path / name))
        one_error_line(code, err, "the name is too long", "--out")
    longest = "s" * (limit - room - len(".parquet")) + ".parquet"
    code, _, err = cli_run(capsys, "simulate", str(brain), "--excite", "all", "--duration",
                           "20ms", "--out", str(tmp_path / longest))
    assert code == 0, err
    assert (tmp_path / longest).stat().st_size > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["brain", longest])


# ------------------------------------------------------------------ a circuit task's JSON
@pytest.mark.parametrize("line", ["[" * 100_000, '{"prompt": ' + '{"a": ' * 100_000])
def test_deeply_nested_json_in_a_circuit_task_is_one_line(capsys, tmp_path, model_folder, line):
    task = tmp_path / "task.jsonl"
    task.write_text(line + "\n", "utf-8")
    code, out, err = cli_run(capsys, "circuit", str(model_folder), "--task", str(task),
                             "--workers", "0")
    one_error_line(code, err, "task.jsonl line 1 nests its JSON too deeply")
    assert out == "" and "RecursionError" not in err


#: Every command that reads a spiking brain, with the arguments that make it read BRAIN
#: (``{brain}``) and write into ``{tmp}``. The test below fails for a reader that does not go
#: through the shared table checks (flyviz.spiking.tables).
BRAIN_READERS = {
    "simulate": ["simulate", "{brain}", "--excite", "all", "--duration", "20ms", "--out",
                 "{tmp}/x.parquet"],
    "screen": ["screen", "{brain}", "--sets", "{tmp}/sets.txt", "--mode", "activate",
               "--duration", "20ms", "--out", "{tmp}/screen", "--workers", "0"],
    "check": ["check", "{brain}", "--battery", "{tmp}/battery.txt", "--shuffles", "1",
              "--random-sets", "1", "--duration", "20ms"],
}


@pytest.mark.parametrize("reader", sorted(BRAIN_READERS))
def test_every_reader_of_a_spiking_brain_refuses_the_same_bad_table(capsys, tmp_path, reader):
    folder = write_brain(tmp_path / "brain",
                         _completeness(str(IDS[0]), "abc", str(IDS[2]), str(IDS[3])))
    (tmp_path / "sets.txt").write_text("one: all\n")
    (tmp_path / "battery.txt").write_text("t: excite all ; read all ; expect increase\n")
    before = digests(tmp_path)
    argv = [a.format(brain=folder, tmp=tmp_path) for a in BRAIN_READERS[reader]]
    code, _, err = cli_run(capsys, *argv)
    one_error_line(code, err, "Completeness_783.csv: root id 'abc' (row 1) is not a root id")
    assert digests(tmp_path) == before and not (tmp_path / "screen").exists()


def test_the_library_readers_of_a_spiking_brain_refuse_it_too(tmp_path):
    from flyviz.kinds.spiking import SpikingModel

    folder = write_brain(tmp_path / "brain",
                         _completeness(str(IDS[0]), "abc", str(IDS[2]), str(IDS[3])))
    for load in (spiking.load_brain, SpikingModel.load):
        with pytest.raises(InputError, match=r"root id 'abc' \(row 1\)"):
            load(str(folder))


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="this system has no FIFOs")
@pytest.mark.parametrize("command", ["convert", "figure"])
def test_a_recording_whose_brain_names_a_fifo_is_not_waited_on(capsys, tmp_path,
                                                               spiking_recording, command):
    """The brain the recording names holds a FIFO where its connectivity table was: the
    reader says so and goes on without labels (or stops in one line), never waits."""
    folder = write_brain(tmp_path / "brain")
    (folder / "Connectivity_783.parquet").unlink()
    os.mkfifo(folder / "Connectivity_783.parquet")
    bad = _resealed(spiking_recording, tmp_path / "run.flyrec", spiking={"brain": str(folder)})
    argv = {"convert": ["convert", str(bad), str(tmp_path / "x.npz")],
            "figure": ["figure", str(bad), "--kind", "raster", "--out",
                       str(tmp_path / "r.png")]}[command]
    code, _, err = cli_run(capsys, *argv)
    assert "FIFO, not a regular file" in err, err
    assert code in (0, 2) and "Traceback" not in err


# ------------------------------------------------------------------ SIGTERM
@pytest.mark.skipif(not hasattr(os, "killpg"), reason="POSIX signals")
def test_sigterm_to_circuit_nulls_leaves_no_null_model_folders(tmp_path, model_folder):
    """SIGTERM (kill, a job manager) ends ``circuit --nulls`` as Ctrl+C does: its null
    models' temporary folders are removed (the default action left them in the temporary
    folder, one per null started)."""
    import signal
    import subprocess
    import sys
    import threading

    task = tmp_path / "task.jsonl"
    task.write_text('{"prompt": "Once upon a time the cat", "target": " the"}\n', "utf-8")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = dict(os.environ, TMPDIR=str(scratch),
               PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    process = subprocess.Popen(
        [sys.executable, "-m", "flyviz", "circuit", str(model_folder), "--task", str(task),
         "--nulls", "50", "--workers", "0"], env=env, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL))
    lines: list[str] = []
    started = threading.Event()

    def read() -> None:
        assert process.stderr is not None
        for raw in process.stderr:
            lines.append(raw.decode("utf-8", "replace"))
            if "null 2 of 50" in lines[-1]:
                started.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert started.wait(300), "".join(lines)
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=120)
        reader.join(timeout=10)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    err = "".join(lines)
    assert process.returncode == 130, err
    assert "Traceback" not in err and "interrupted" in err, err
    assert list(scratch.iterdir()) == [], list(scratch.iterdir())


@pytest.mark.parametrize("change", [{"dt": 0.0}, {"tau": 0.0}, {"t_mbr": -1.0},
                                    {"t_dly": -1.0}, {"dt": float("nan")},
                                    {"w_syn": float("inf")}, {"t_rfc": -0.1}])
def test_the_library_simulate_checks_the_models_constants(brain, change):
    from flyviz.spiking.engine import LIFParams

    loaded = spiking.load_brain(brain)
    name = next(iter(change))
    with pytest.raises(InputError, match=f"LIFParams.{name} is"):
        spiking.simulate(loaded, excite=[0], duration_s=0.01, params=LIFParams(**change))


def test_the_window_without_a_display_is_one_line_not_qts_abort():
    """``flyviz`` on a server without a screen: Qt's window-system plugin aborted the process
    (exit 134, a paragraph about xcb-cursor0); now one line says how to get a screen."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items()
           if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    for argv in ([], ["gui", "demo"]):
        done = subprocess.run([sys.executable, "-m", "flyviz", *argv], env=env, timeout=120,
                              capture_output=True, text=True)
        assert done.returncode == 2, done.stderr
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
        assert "needs a display" in done.stderr and "xvfb-run" in done.stderr


def test_a_display_or_a_platform_that_needs_none_lets_the_window_start():
    from flyviz.commands.gui import check_display
    from flyviz.errors import InputError

    for environ in ({"DISPLAY": ":1"}, {"WAYLAND_DISPLAY": "wayland-0"},
                    {"QT_QPA_PLATFORM": "offscreen"}, {"QT_QPA_PLATFORM": "vnc:size=800x600"}):
        check_display(environ, "linux")
    check_display({}, "darwin")                    # macOS and Windows always have a screen
    for environ in ({}, {"DISPLAY": ""}, {"QT_QPA_PLATFORM": "xcb"}):
        with pytest.raises(InputError, match="needs a display"):
            check_display(environ, "linux")


#: The commands that read a recording as a language model's tokens, with the arguments
#: that make them read one (``{rec}``): a spiking brain's bins are no tokens.
TOKEN_READERS = {
    "trace": ["trace", "--recording", "{rec}", "--position", "1"],
    "trace SPEC": ["trace", "demo", "--recording", "{rec}", "--position", "1"],
    "share --trace": ["share", "{rec}", "--out", "{tmp}/p.html", "--trace", "1"],
    "generate --source": ["generate", "demo", "--prompt", "Once upon", "--patch", "all@1:2",
                          "--source", "{rec}"],
}


@pytest.mark.parametrize("reader", sorted(TOKEN_READERS))
def test_a_spiking_recording_is_refused_where_tokens_are_read(capsys, tmp_path,
                                                              spiking_recording, reader):
    """``trace --recording`` on a spiking run said it 'names no model' (or, given one,
    that the model does not reproduce its states), and a patch from one compared its one
    'prompt' frame with the prompt: each now names what the recording is."""
    argv = [a.format(rec=spiking_recording, tmp=tmp_path) for a in TOKEN_READERS[reader]]
    before = digests(tmp_path)
    code, _, err = cli_run(capsys, *argv)
    one_error_line(code, err, "run.flyrec is a spiking brain recording, which chooses no tokens")
    assert digests(tmp_path) == before
