"""``flyviz simulate``: the authors' files in, the authors' spike table out, bad input refused."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from flyviz import spiking
from flyviz.cli import main
from flyviz.record.recording import Recording
from flyviz.spiking.brain import load_authors_brain

pytest.importorskip("pyarrow")

# The engine's kernels compiled once for all the test workers (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("spiking_kernels")

IDS = np.array([720575940600000011, 720575940600000022, 720575940600000033,
                720575940600000044], dtype=np.int64)


def _write_brain(folder: Path, **changes: object) -> Path:
    """Four neurons in the authors' layout: 0 drives 1 and 2 strongly, 2 inhibits 3."""
    folder.mkdir(parents=True, exist_ok=True)
    pd.DataFrame({"Completed": True}, index=pd.Index(IDS)).to_csv(
        folder / "Completeness_783.csv")
    pre, post, signed = [0, 0, 2, 1], [1, 2, 3, 3], [1500, 1500, -40, 60]
    table = {"Presynaptic_ID": IDS[pre], "Postsynaptic_ID": IDS[post],
             "Presynaptic_Index": pre, "Postsynaptic_Index": post,
             "Connectivity": np.abs(signed), "Excitatory": np.sign(signed),
             "Excitatory x Connectivity": signed}
    table.update(changes)  # type: ignore[arg-type]
    pd.DataFrame({k: v for k, v in table.items() if v is not None}).to_parquet(
        folder / "Connectivity_783.parquet")
    return folder


def test_simulate_writes_the_authors_table_and_a_summary(tmp_path: Path, capsys) -> None:
    brain = _write_brain(tmp_path / "brain")
    (tmp_path / "ids.txt").write_text(f"{IDS[0]}\n")
    out = tmp_path / "spikes.parquet"
    code = main(["simulate", str(brain), "--excite-file", str(tmp_path / "ids.txt"),
                 "--rate", "100", "--duration", "400ms", "--trials", "3", "--out", str(out)])
    assert code == 0
    table = pd.read_parquet(out)
    assert list(table.columns) == ["t", "trial", "flywire_id", "exp_name"]
    assert set(table["trial"]) == {0, 1, 2} and set(table["exp_name"]) == {"spikes"}
    assert table["t"].between(0, 0.4).all()
    fired = set(table["flywire_id"])
    assert {IDS[0], IDS[1], IDS[2]} <= fired  # the driver and the neurons it drives
    rate0 = (table["flywire_id"] == IDS[0]).sum() / (3 * 0.4)
    assert 70 < rate0 < 130
    text = capsys.readouterr().out
    assert "3 trial(s) x 0.4 s" in text and str(IDS[0]) in text
    # a query by root id (id: with a root id, or body:) picks the same neuron
    again = tmp_path / "again.parquet"
    assert main(["simulate", str(brain), "--excite", f"id:{IDS[0]}", "--rate", "100",
                 "--duration", "400ms", "--trials", "3", "--out", str(again)]) == 0
    assert pd.read_parquet(again).equals(table.assign(exp_name="again"))


def test_silencing_on_the_command_line(tmp_path: Path) -> None:
    brain = _write_brain(tmp_path / "brain")
    out = tmp_path / "s.parquet"
    assert main(["simulate", str(brain), "--excite", f"body:{IDS[0]}", "--silence",
                 f"body:{IDS[0]}", "--duration", "200ms", "--out", str(out)]) == 0
    assert set(pd.read_parquet(out)["flywire_id"]) == {IDS[0]}


def test_input_spikes_file_replays_events(tmp_path: Path) -> None:
    brain = _write_brain(tmp_path / "brain")
    events = tmp_path / "in.parquet"
    pd.DataFrame({"t": [0.01, 0.02], "flywire_id": [IDS[0], IDS[0]]}).to_parquet(events)
    out = tmp_path / "r.parquet"
    assert main(["simulate", str(brain), "--input-spikes", str(events), "--duration", "50ms",
                 "--out", str(out)]) == 0
    table = pd.read_parquet(out)
    lead = table[table["flywire_id"] == IDS[0]]["t"].to_numpy()
    assert np.allclose(lead, [0.0101, 0.0201])  # each event drives a spike the next tick


def test_input_spikes_in_milliseconds_are_one_line(tmp_path: Path, capsys) -> None:
    """Times in milliseconds put every event past a 50 ms run, where the run drops them: it
    said '0 spikes' and exited 0. Now one line says that t is in seconds; a table in seconds
    with an event past the run still runs (the run takes those of its ticks)."""
    brain = _write_brain(tmp_path / "brain")
    events = tmp_path / "ms.csv"
    pd.DataFrame({"t": [10.0, 20.0], "flywire_id": [IDS[0], IDS[0]]}).to_csv(events, index=False)
    out = tmp_path / "r.parquet"
    assert main(["simulate", str(brain), "--input-spikes", str(events), "--duration", "50ms",
                 "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("flyviz: error: --input-spikes ms.csv holds "
                                                    "an input event at 20000 ms, after this "
                                                    "run's 50 ms; its t looks like milliseconds")
    assert "t must be in seconds (the authors' layout)" in err and not out.exists()
    pd.DataFrame({"t": [0.01, 0.2], "flywire_id": [IDS[0], IDS[0]]}).to_csv(events, index=False)
    assert main(["simulate", str(brain), "--input-spikes", str(events), "--duration", "50ms",
                 "--out", str(out)]) == 0
    lead = pd.read_parquet(out).query(f"flywire_id == {IDS[0]}")["t"].to_numpy()
    assert np.allclose(lead, [0.0101])
    # ... and says that the event past its end was not used.
    assert "note: 1 of the 2 input events in ms.csv come at or after the run's end (0.05 s) " \
        "and are not used" in capsys.readouterr().err


def test_input_spikes_of_several_trials_or_twice_in_a_tick_are_one_line(tmp_path: Path,
                                                                          capsys) -> None:
    """A table with a trial column of two trials gave both trials' events to every trial,
    and two events of one neuron in one tick added their kicks: a neuron the one event
    leaves quiet fired, with '2 input events' and exit 0. Brian2's SpikeGeneratorGroup
    refuses the second; both are one line now. A trial column of one trial (a run's
    --out of one trial) is an input as it was."""
    brain = _write_brain(tmp_path / "brain")
    events = tmp_path / "two.csv"
    pd.DataFrame({"t": [0.01, 0.01], "flywire_id": [IDS[0], IDS[0]],
                  "trial": [0, 1]}).to_csv(events, index=False)
    out = tmp_path / "r.parquet"
    run = ["simulate", str(brain), "--input-spikes", str(events), "--duration", "20ms",
           "--out", str(out)]
    assert main(run) == 2
    err = capsys.readouterr().err
    assert err == ("flyviz: error: two.csv holds the events of 2 trials (trial 0, 1), and a run "
                   "gives one input to every trial: keep the rows of one trial (e.g. trial "
                   "0)\n") and not out.exists()
    pd.DataFrame({"t": [0.01, 0.01004], "flywire_id": [IDS[0], IDS[0]]}).to_csv(events,
                                                                                index=False)
    assert main(run) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"two input events of {IDS[0]} in one tick, at 10 ms" in err
    assert "as in Brian2" in err and not out.exists()
    pd.DataFrame({"t": [0.01, 0.02], "flywire_id": [IDS[0], IDS[0]],
                  "trial": [3, 3]}).to_csv(events, index=False)
    assert main(run) == 0
    lead = pd.read_parquet(out).query(f"flywire_id == {IDS[0]}")["t"].to_numpy()
    assert np.allclose(lead, [0.0101])    # the event at 20 ms is the run's end


@pytest.mark.parametrize("change, message", [
    ({"Excitatory x Connectivity": None}, "lacks column(s) Excitatory x Connectivity"),
    ({"Postsynaptic_Index": [1, 2, 3, 4]}, "Postsynaptic_Index 4 (row 3) is outside 0..3"),
    ({"Presynaptic_ID": [IDS[0], IDS[0], 99, IDS[1]]},
     "Presynaptic_ID 99 (row 2) is not in Completeness_783.csv"),
])
def test_bad_files_are_one_line_and_exit_2(tmp_path: Path, capsys, change: dict,
                                           message: str) -> None:
    brain = _write_brain(tmp_path / "brain", **change)
    out = tmp_path / "x.parquet"
    assert main(["simulate", str(brain), "--excite", "all", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("flyviz: error: ") and message in err
    assert not out.exists()


def test_a_recording_or_a_spike_table_as_brain_says_what_it_is(tmp_path: Path, capsys) -> None:
    """A .flyrec (even renamed) or a spikes table given as BRAIN was read as a completeness
    CSV: "no connectivity table beside run.flyrec ...; give it with --connectivity". Now one
    line says what the file is, and what a brain is."""
    brain = _write_brain(tmp_path / "brain")
    rec, spikes = tmp_path / "run.flyrec", tmp_path / "run.parquet"
    assert main(["simulate", str(brain), "--excite", "all", "--duration", "20ms",
                 "--record", str(rec), "--out", str(spikes)]) == 0
    renamed = tmp_path / "run.bin"
    renamed.write_bytes(rec.read_bytes())
    csv = tmp_path / "run.csv.gz"
    pd.read_parquet(spikes).to_csv(csv, index=False)
    for given, what in ((rec, "a flyviz recording"), (renamed, "a flyviz recording"),
                        (spikes, "a table of spikes (t, flywire_id)"),
                        (csv, "a table of spikes (t, flywire_id)")):
        capsys.readouterr()
        assert main(["simulate", str(given), "--duration", "20ms", "--out",
                     str(tmp_path / "o.parquet")]) == 2
        err = capsys.readouterr().err
        assert err == (f"flyviz: error: {given.name} is {what}, not a brain (give the authors' "
                       "folder, a .ct brain, a model or demo)\n"), err
        with pytest.raises(spiking.BrainError, match=re.escape(f"{given.name} is {what}")):
            load_authors_brain(given, brain / "Connectivity_783.parquet")
    assert not (tmp_path / "o.parquet").exists()
    # the brain's own completeness CSV, given as the file, still loads
    assert spiking.load_brain(brain / "Completeness_783.csv").neurons == 4


def _again(capsys, rec: Path) -> tuple[list[str], str]:
    """The arguments of the ``flyviz simulate`` command ``flyviz replay rec`` says runs the
    recording again (without ``--record``), and what it says after the command."""
    import shlex

    capsys.readouterr()
    assert main(["replay", str(rec)]) == 2
    line = capsys.readouterr().err.strip()
    assert "\n" not in line, line
    command, _, after = line.partition("run it again with its seed: ")[2].partition("; but ")
    words = shlex.split(command)
    assert words[:2] == ["flyviz", "simulate"] and words[-2:] == ["--record", "again.flyrec"]
    return words[1:-2], after


def test_a_recording_says_what_drove_the_run_and_replay_runs_it_again(tmp_path: Path, capsys,
                                                                      monkeypatch) -> None:
    """A --record recording of an --excite-file run said 'excite': None (the brain's own
    set) and flyviz replay's command excited those; --input-spikes, --w-syn and
    --input-until were neither recorded nor in the command. Now the recording names them,
    and the command gives the same spikes."""
    from flyviz.commands import simulate
    from flyviz.model.formats.common import sha256_file

    brain = _write_brain(tmp_path / "brain")
    ids, events = tmp_path / "ids.txt", tmp_path / "in.csv"
    ids.write_text(f"{IDS[0]}\n{IDS[3]}\n")
    pd.DataFrame({"t": [0.005], "flywire_id": [IDS[2]]}).to_csv(events, index=False)
    runs = {"excite file": ["--excite-file", str(ids), "--rate", "400"],
            "input spikes": ["--input-spikes", str(events), "--w-syn", "0.5", "--silence",
                             f"body:{IDS[2]}", "--trials", "2", "--excite-file", str(ids),
                             "--input-until", "20ms", "--seed", "3"]}
    for name, options in runs.items():
        rec, out = tmp_path / f"{name}.flyrec", tmp_path / f"{name}.parquet"
        assert main(["simulate", str(brain), "--duration", "40ms", *options, "--record",
                     str(rec), "--out", str(out)]) == 0
        meta = Recording.load(rec).metadata["spiking"]
        assert meta["excite"] == f"body:{IDS[0]},{IDS[3]}" and meta["excited"] == 2
        assert meta["excite_file"] == {"path": str(ids.resolve()), "sha256": sha256_file(ids)}
        assert meta["w_syn"] == (0.5 if "--w-syn" in options else 0.275)
        if name == "input spikes":
            assert meta["input_spikes"] == {"path": str(events.resolve()),
                                            "sha256": sha256_file(events)}
            assert meta["input_until_s"] == 0.02 and meta["silence"] == f"body:{IDS[2]}"
        again, after = _again(capsys, rec)
        assert after == ""
        assert main([*again, "--compare", str(out)]) == 0, again
        said = capsys.readouterr().out
        assert "identical" in said and len(pd.read_parquet(out)) > 10, said
    # An --excite-file too long to keep as a query: its path, and a word where it changed.
    monkeypatch.setattr(simulate, "EXCITE_IDS_RECORDED", 1)
    rec, out = tmp_path / "long.flyrec", tmp_path / "long.parquet"
    assert main(["simulate", str(brain), "--duration", "40ms", "--excite-file", str(ids),
                 "--record", str(rec), "--out", str(out)]) == 0
    assert Recording.load(rec).metadata["spiking"]["excite"] is None
    again, after = _again(capsys, rec)
    assert again[again.index("--excite-file") + 1] == str(ids.resolve()) and after == ""
    assert main([*again, "--compare", str(out)]) == 0
    ids.write_text(f"{IDS[0]}\n")
    _, after = _again(capsys, rec)
    assert after == ("ids.txt has changed since the run (its SHA-256 differs), so this command "
                     "gives another run unless the run's file is put back")
    ids.unlink()
    assert _again(capsys, rec)[1].startswith("ids.txt is gone, so")


@pytest.mark.parametrize("args, message", [
    (["--rate", "nan"], "--rate must be a non-negative number"),
    (["--rate", "-5"], "--rate must be a non-negative number"),
    (["--duration=-1s"], "--duration must be a positive number"),
    (["--duration", "nan"], "--duration must be a positive number"),
    (["--duration", "0s"], "--duration must be a positive number"),
    (["--duration", "0.01ms"], "shorter than one tick"),
    (["--excite", "id:99999999999999"], "id:99999999999999 is neither a neuron index "
                                         "(0 to 3) nor a root id of"),
    (["--excite", "id:4"], "id:4 is neither a neuron index (0 to 3) nor a root id of"),
    (["--excite", "type:KC*"], "has no cell type labels"),
])
def test_bad_options_are_one_line_and_exit_2(tmp_path: Path, capsys, args: list[str],
                                             message: str) -> None:
    brain = _write_brain(tmp_path / "brain")
    out = tmp_path / "x.parquet"
    base = ["simulate", str(brain), "--out", str(out)]
    if "--excite" not in args:
        base += ["--excite", "all"]
    assert main(base + args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert not out.exists()


@pytest.mark.parametrize("option, name", [("--out", "x.parquet"), ("--record", "x.flyrec")])
def test_unwritable_output_fails_before_the_brain_loads_naming_its_option(
        tmp_path: Path, capsys, option: str, name: str) -> None:
    # A file where a folder should be, and /proc (which os.access says root may write).
    (tmp_path / "file").write_text("x", encoding="utf-8")
    for out in (tmp_path / "file" / name, Path("/proc/flyviz-x") / name):
        assert main(["simulate", str(tmp_path / "nothing-here"), option, str(out)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"cannot write {option} {out}" in err, err


def test_a_missing_output_folder_is_made_as_export_and_generate_make_it(
        tmp_path: Path, capsys) -> None:
    brain = _write_brain(tmp_path / "brain")
    out, record = tmp_path / "new" / "x.parquet", tmp_path / "other" / "deeper" / "x.flyrec"
    assert main(["simulate", str(brain), "--excite", "all", "--duration", "20ms",
                 "--out", str(out), "--record", str(record)]) == 0, capsys.readouterr().err
    assert pd.read_parquet(out).shape[0] > 0 and record.stat().st_size > 0


def test_labels_and_positions_from_flywire_tables(tmp_path: Path) -> None:
    folder = _write_brain(tmp_path / "brain")
    pd.DataFrame({"root_id": IDS, "super_class": ["sensory", "central", "central", "motor"],
                  "cell_type": ["GRN", "G2N", "G2N", "MN9"], "side": ["right"] * 4}).to_csv(
        folder / "classification.csv", index=False)
    pd.DataFrame({"root_id": IDS[:3], "position": ["[1 2 3]", "[4 5 6]", "[7 8 9]"],
                  "supervoxel_id": [1, 2, 3]}).to_csv(folder / "coordinates.csv", index=False)
    brain = spiking.load_brain(folder)
    assert brain.positions_valid is not None and brain.positions is not None
    assert brain.positions_valid.tolist() == [True, True, True, False]
    assert brain.positions[1].tolist() == [4.0, 5.0, 6.0]
    assert spiking.select(brain, "type:G2N").tolist() == [1, 2]
    assert spiking.select(brain, "superclass:motor | type:GRN").tolist() == [0, 3]
    # The index queries are answered from is kept with the brain, and made again when what
    # it was made of is replaced: the labels, or the counts that give each neuron's sign.
    from flyviz.spiking.run import brain_index

    assert brain_index(brain) is brain_index(brain)
    brain.cell_type = ["GRN", "GRN", "G2N", "MN9"]
    assert spiking.select(brain, "type:G2N").tolist() == [2]
    inhibitory = spiking.select(brain, "sign:inhibitory").tolist()
    brain.counts = -brain.counts
    assert spiking.select(brain, "sign:inhibitory").tolist() != inhibitory


@pytest.mark.parametrize("args, message", [
    (["--seed", "-1"], "--seed -1 must be between 0 and"),
    (["--trials", "1000000000"], "--trials 1000000000 must be between 1 and 100000"),
    (["--duration", "1e12s"], "longer than a run may be (3600 s"),
    # each within its bound, together 3.6e8 s of the fly's time: it started, for years
    (["--duration", "3600s", "--trials", "100000"],
     "--duration 3600 s x 100,000 --trials is 360,000,000 s of the fly's time"),
    (["--exp-name", "caf\udcff"], "--exp-name is not valid UTF-8 text"),
    (["--out", "{dir}/.csv"], "--out {dir}/.csv: the file has no name before .csv; give one"),
    (["--duration", "100ms", "--record", "{out}.flyrec", "--bin", "1000"],
     "--bin 1000 ms is longer than the run (100 ms)"),
    # without --record too: replay's command carries --bin, but 0 or NaN is never a bin
    (["--bin", "0"], "--bin 0: a bin must be at least one tick (0.1 ms), not 0 ms"),
    (["--bin", "nan"], "--bin nan: a bin must be at least one tick"),
])
def test_runs_that_cannot_be_or_would_never_end_are_refused(tmp_path: Path, capsys,
                                                             args: list[str], message: str):
    """A seed numpy cannot take, a run of days, a bin longer than the run, text that is not
    UTF-8 (the shell's undecodable bytes): one line each, before the brain loads, no file."""
    out = tmp_path / "x"
    argv = [a.replace("{out}", str(out)).replace("{dir}", str(tmp_path)) for a in args]
    assert main(["simulate", str(tmp_path / "no-brain-needed"), "--out", f"{out}.parquet",
                 *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message.replace("{dir}", str(tmp_path)) in err, err
    assert list(tmp_path.iterdir()) == []


def test_an_input_too_large_to_hold_is_refused_before_the_run(tmp_path: Path, capsys) -> None:
    """Every trial's Poisson input is drawn before the first tick: ``--excite all`` over
    the demo for an hour asked for 2.7e10 events and filled the memory. One line, exit 2,
    no file, before any input is drawn."""
    brain = _write_brain(tmp_path / "brain")
    out = tmp_path / "x.parquet"
    # 4 neurons x 10 kHz x 3600 s x 10 trials: 1.44e9 events, within every other bound
    assert main(["simulate", str(brain), "--excite", "all", "--rate", "10000", "--duration",
                 "3600s", "--trials", "10", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the input would be about 1,440,000,000 events" in err, err
    assert not out.exists()


@pytest.mark.parametrize("content, message", [
    (b"\xff\xfe\x00\x01binary", "must hold root ids"),
    (b"999999999999999999999999999\n", "must hold root ids (whole numbers of up to 19"),
    (b"", "holds no root ids"),
])
def test_an_excite_file_of_no_usable_ids_is_one_line(tmp_path: Path, capsys, content: bytes,
                                                     message: str) -> None:
    brain = _write_brain(tmp_path / "brain")
    ids = tmp_path / "ids.txt"
    ids.write_bytes(content)
    out = tmp_path / "x.parquet"
    assert main(["simulate", str(brain), "--excite-file", str(ids), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert not out.exists() and ids.read_bytes() == content


def test_an_id_given_twice_in_the_excite_file_is_one_neuron_excited(tmp_path: Path, capsys):
    brain = _write_brain(tmp_path / "brain")
    ids = tmp_path / "ids.txt"
    ids.write_text(f"{IDS[0]}\n{IDS[0]}\n")
    assert main(["simulate", str(brain), "--excite-file", str(ids), "--duration", "20ms",
                 "--out", str(tmp_path / "x.parquet")]) == 0
    assert "1 excited" in capsys.readouterr().out


@pytest.mark.parametrize("outputs, message", [
    (["--out", "{ids}"], "ids.txt is the input of --excite-file"),
    (["--out", "{dir}/same.flyrec", "--record", "{dir}/same.flyrec"],
     "--out and --record are both"),
])
def test_an_output_over_an_input_or_another_output_is_refused(tmp_path: Path, capsys,
                                                              outputs: list[str], message: str):
    brain = _write_brain(tmp_path / "brain")
    ids = tmp_path / "ids.txt"
    ids.write_text(f"{IDS[0]}\n")
    argv = [a.replace("{ids}", str(ids)).replace("{dir}", str(tmp_path)) for a in outputs]
    assert main(["simulate", str(brain), "--excite-file", str(ids), *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert ids.read_text() == f"{IDS[0]}\n" and not (tmp_path / "same.flyrec").exists()


@pytest.mark.parametrize("spiking_meta, message", [
    ("a string", "spiking metadata is a str"),
    ({"brain": "demo", "bin_ms": None}, "bin length (spiking.bin_ms) is None"),
    ({"brain": "demo", "bin_ms": "abc"}, "bin length (spiking.bin_ms) is 'abc'"),
    ({"brain": "demo", "bin_ms": 10.0, "trials": 0}, "trial count (spiking.trials) is 0"),
    ({"brain": "demo", "bin_ms": 10.0, "bin_spikes": ["x"]}, "spike counts"),
])
def test_a_resealed_recording_with_a_broken_run_table_is_one_line(tmp_path: Path, capsys,
                                                                  spiking_meta, message):
    """Hand-edited and sealed again (the checksum holds), the run's settings still must make
    sense: a figure or a movie of it says which entry is wrong, in one line."""
    import json

    pytest.importorskip("matplotlib")
    from test_recording_format import parts, rewrite

    brain = _write_brain(tmp_path / "brain")
    rec = tmp_path / "run.flyrec"
    assert main(["simulate", str(brain), "--excite", "all", "--duration", "30ms",
                 "--record", str(rec)]) == 0
    header, _ = parts(rec)
    meta = json.loads(header["__metadata__"]["metadata"])
    meta["spiking"] = spiking_meta
    bad = rewrite(rec, tmp_path / "bad.flyrec", meta={"metadata": json.dumps(meta)},
                  reseal=True)
    capsys.readouterr()
    for argv in (["figure", str(bad), "--kind", "raster", "--out", str(tmp_path / "r.png")],
                 ["export", "--recording", str(bad), "--out", str(tmp_path / "m.gif")]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.strip().splitlines()[-1].startswith("flyviz: error: ") and message in err, err
        assert "Traceback" not in err and err.count("\n") == 1, err
    assert not (tmp_path / "r.png").exists() and not (tmp_path / "m.gif").exists()


def test_a_sign_query_reads_each_neurons_summed_outgoing_counts() -> None:
    """``sign:`` selects a spiking brain's neurons by the sign of the sum of their rows'
    signed counts (their outgoing synapses): a neuron with no synapse, or whose counts
    cancel, is neither; the labels' queries answer without it."""
    from flyviz.spiking import SpikingBrain

    rows = {0: [(1, 3.0), (2, -1.0)], 1: [], 2: [(0, -2.0), (3, -5.0)], 3: [(0, 4.0), (1, -4.0)],
            4: [(2, 1.0)]}
    indptr = np.cumsum([0] + [len(rows[i]) for i in range(5)]).astype(np.int64)
    post = np.array([t for i in range(5) for t, _ in rows[i]], np.int32)
    counts = np.array([c for i in range(5) for _, c in rows[i]])
    brain = SpikingBrain(name="signs", root_ids=np.arange(10, 15, dtype=np.int64),
                         indptr=indptr, post=post, counts=counts,
                         superclass=["a", "b", "a", "b", "a"], cell_type=["t"] * 5)
    assert spiking.select(brain, "superclass:a").tolist() == [0, 2, 4]
    assert spiking.select(brain, "sign:excitatory").tolist() == [0, 4]
    assert spiking.select(brain, "sign:inhibitory").tolist() == [2]
    assert spiking.select(brain, "!sign:excitatory & !sign:inhibitory").tolist() == [1, 3]
